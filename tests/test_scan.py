"""`prep scan`: manifests that match the files on disk, for real and synthetic datasets."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep as prep
from support.trees import disk_bytes

from pipeline.formats import open_dataset
from pipeline.manifest import load_manifest
from pipeline.schemas import validate
from pipeline.stages.scan import scan_unit, scan_units


@pytest.mark.slow
@pytest.mark.cluster
def test_real_fixture_manifest(real_v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "real.manifest.json"
    res = prep("scan", str(real_v21), "--out", str(out), "--workers", "1", "--no-progress")
    assert res.returncode == 0, res.stderr
    m = load_manifest(out)
    t = m["totals"]
    assert t["episodes"] == 10
    assert t["frames"] == 3608
    assert t["hours"] == pytest.approx(3608 / 30 / 3600, rel=1e-12)
    assert t["seconds"] == pytest.approx(3608 / 30)
    cams = m["dataset"]["cameras"]
    assert [(c["key"], c["codec"], c["width"], c["height"]) for c in cams] == [
        ("observation.images.cam_high", "av1", 640, 480)
    ]
    assert m["dataset"]["codebase_version"] == "v2.1"
    assert t["bytes"]["total"] == disk_bytes(real_v21)
    assert t["bytes"]["total"] == sum(t["bytes"][k] for k in ("video", "data", "meta", "other"))
    assert t["bytes"]["per_camera"]["observation.images.cam_high"] == t["bytes"]["video"]
    assert t["gb_per_hour"] == pytest.approx(t["bytes"]["total"] / 1e9 / t["hours"])
    assert t["kb_per_frame"] == pytest.approx(t["bytes"]["total"] / 1e3 / 3608)
    assert 0.9 < t["video_share"] < 1.0
    table = pq.read_table(out.with_name("real.manifest.episodes.parquet")).to_pylist()
    assert [r["frames_expected"] for r in table] == [r["observation.images.cam_high/frames_from_index"] for r in table]
    assert {r["observation.images.cam_high/frames_from_packets"] for r in table} == {None}  # no demux
    assert sum(r["frames_expected"] for r in table) == 3608
    assert "10 ok, 0 failed" in res.stdout
    assert "camera    observation.images.cam_high: av1 640x480 yuv420p\n" in res.stdout  # as info.json declares


@pytest.mark.slow
def test_summary_names_what_info_json_declares_otherwise(synth_v21: Path, tmp_path: Path,
                                                        copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(synth_v21, "mislabelled")
    info = json.loads((root / "meta/info.json").read_text())
    cam = next(k for k, f in info["features"].items() if f["dtype"] == "video")
    info["features"][cam]["info"]["video.codec"] = "av1"
    info["features"][cam]["shape"] = [224, 224, 3]
    info["features"][cam]["info"].update({"video.height": 224, "video.width": 224})
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    out = tmp_path / "m.json"
    res = prep("scan", str(root), "--out", str(out), "--backend", "inline", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert f"camera    {cam}: h264 640x480 yuv420p (info.json declares codec av1, size 224x224)\n" in res.stdout
    [c] = [c for c in load_manifest(out)["dataset"]["cameras"] if c["key"] == cam]
    assert (c["codec"], c["declared"]["codec"], c["declared"]["width"]) == ("h264", "av1", 224)


@pytest.mark.slow
def test_synthetic_v21_per_episode_counts_and_bytes(synth_v21: Path) -> None:
    ds, rejected = open_dataset(synth_v21)
    assert rejected == []
    scans = [s for u in scan_units(ds) for s in scan_unit(u)]
    assert [s.episode for s in scans] == [0, 1, 2]
    for s in scans:
        assert s.status == "ok"
        assert s.frames_in_parquet == 90
        ep = next(e for e in ds.episodes if e.index == s.episode)
        assert (synth_v21 / ep.data.rel).stat().st_size == s.parquet_bytes
        for cam, c in s.cameras.items():
            assert c.frames_from_header == c.frames_from_index == 90 and c.frames_from_packets is None
            assert c.bytes == (synth_v21 / ep.video(cam).rel).stat().st_size
            assert (c.codec, c.width, c.height) == ("h264", 640, 480)
            assert c.pix_fmt in ("yuv420p", "unknown")  # the scan's fast open skips h264's probe decode
            assert c.keyframes == 3  # GOP 30 over 90 frames


def test_synthetic_v30_spans_within_shared_files(lowres_v30: Path) -> None:
    ds, _ = open_dataset(lowres_v30)
    assert len(list(ds.iter_video_files())) == 6  # 3 cameras x 2 files (2 + 1 episodes)
    scans = [s for u in scan_units(ds) for s in scan_unit(u)]
    assert sorted(s.episode or 0 for s in scans) == [0, 1, 2]
    for s in scans:
        assert s.status == "ok"
        assert s.frames_in_parquet == 90
        for c in s.cameras.values():
            assert c.frames_from_index == 90  # frames in this episode's span, not the file
    for rel, eps in ds.iter_video_files():
        cam = eps[0].videos[[v.rel for v in eps[0].videos].index(rel)].camera
        attributed = sum(next(s for s in scans if s.episode == e.index).cameras[cam].bytes for e in eps)
        assert abs(attributed - (lowres_v30 / rel).stat().st_size) <= len(eps)
        assert scans[eps[0].index].cameras[cam].frames_from_header == 90 * len(eps)


@pytest.mark.slow
@pytest.mark.cluster
def test_v30_manifest_totals(synth_v30: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    res = prep("scan", str(synth_v30), "--out", str(out), "--workers", "2", "--no-progress")
    assert res.returncode == 0, res.stderr
    m = json.loads(out.read_text())
    validate(m, "manifest")
    assert m["totals"]["episodes"] == 3 and m["totals"]["frames"] == 270
    assert m["totals"]["bytes"]["total"] == disk_bytes(synth_v30)
    assert sum(m["totals"]["bytes"]["per_camera"].values()) == m["totals"]["bytes"]["video"]
    assert m["totals"]["frames_per_episode"] == {"mean": 90.0, "min": 90, "max": 90}
    assert {(c["codec"], c["width"], c["height"], c["pix_fmt"]) for c in m["dataset"]["cameras"]} == {
        ("h264", 640, 480, "yuv420p")
    }


def _one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda r: (r / "meta/info.json").unlink(), "meta/info.json: missing"),
        (lambda r: (r / "meta/info.json").write_text("{not json"), "invalid JSON"),
        (lambda r: (r / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.0", "fps": 30})),
         "unsupported codebase_version 'v2.0'"),
        (lambda r: (r / "meta/info.json").write_text(json.dumps({"codebase_version": "v1.6"})),
         "unsupported codebase_version 'v1.6'"),
    ],
    ids=["missing-info", "invalid-json", "v2.0", "v1.x"],
)
def test_dataset_level_errors_are_one_line(
    lowres_v21: Path, copy_dataset: Callable[[Path, str], Path], tmp_path: Path,
    mutate: Callable[[Path], None], expect: str,
) -> None:
    root = copy_dataset(lowres_v21, "bad")
    mutate(root)
    res = prep("scan", str(root), "--out", str(tmp_path / "m.json"), "--workers", "1", "--no-progress")
    assert res.returncode == 2
    line = _one_line_error(res)
    assert expect in line and str(root) in line
    if "codebase_version" in expect:
        assert "v2.1, v3.0" in line


def test_not_a_dataset_folder(tmp_path: Path) -> None:
    res = prep("scan", str(tmp_path), "--out", str(tmp_path / "m.json"), "--no-progress")
    assert res.returncode == 2
    assert "not a LeRobot dataset" in _one_line_error(res)


@pytest.mark.slow
@pytest.mark.cluster
def test_bad_videos_recorded_per_episode(synth_v21: Path, copy_dataset: Callable[[Path, str], Path],
                                         tmp_path: Path) -> None:
    root = copy_dataset(synth_v21, "badvideos")
    ds, _ = open_dataset(root)
    cam = ds.camera_keys[1]
    (root / ds.episodes[0].video(cam).rel).unlink()                      # missing mp4
    (root / ds.episodes[1].video(cam).rel).write_bytes(b"")               # zero-byte
    (root / ds.episodes[2].video(cam).rel).write_bytes(os.urandom(4096))  # garbage
    out = tmp_path / "m.json"
    res = prep("scan", str(root), "--out", str(out), "--workers", "2", "--no-progress")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    m = load_manifest(out)
    reasons = {f["episode"]: f["reason"] for f in m["failures"]}
    assert reasons[0] == "missing video file"
    assert reasons[1] == "zero-byte video file"
    assert reasons[2].startswith("unreadable video")
    assert all(cam in (f["path"] or "") for f in m["failures"])
    assert "FAILED    episode 1" in res.stdout


@pytest.mark.slow
@pytest.mark.cluster
def test_other_episodes_complete_when_one_is_bad(synth_v21: Path, copy_dataset: Callable[[Path, str], Path],
                                                 tmp_path: Path) -> None:
    root = copy_dataset(synth_v21, "onebad")
    ds, _ = open_dataset(root)
    (root / ds.episodes[1].video(ds.camera_keys[0]).rel).write_bytes(b"\x00" * 100)
    out = tmp_path / "m.json"
    res = prep("scan", str(root), "--out", str(out), "--workers", "2", "--no-progress")
    assert res.returncode == 1
    m = load_manifest(out)
    assert m["totals"]["episodes"] == 2 and m["totals"]["frames"] == 180
    assert [f["episode"] for f in m["failures"]] == [1]
    rows = pq.read_table(out.with_name("m.episodes.parquet")).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
