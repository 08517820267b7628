"""`prep reencode` end to end through the CLI on a real Dask LocalCluster (--workers 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep
from support.trees import tree

from pipeline.formats import open_dataset
from pipeline.video.checks import Span, VideoExpect, check_video
from pipeline.video.probe import probe_video

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def reencode(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`prep reencode ARGS` on a LocalCluster of 2 workers (so a child process)."""
    return run_prep("reencode", *args, "--workers", "2", "--no-progress", cwd=cwd, timeout=600)


def assert_prepared(src: Path, out: Path, version: str) -> None:
    """Every output video 224x224, all keyframes, frame counts equal the source's; parquet and tasks
    identical; info.json updated; a loadable dataset of the same version."""
    ds, rejected = open_dataset(src)
    out_ds, out_rejected = open_dataset(out)
    assert not rejected and not out_rejected
    assert out_ds.codebase_version == ds.codebase_version == version
    assert [e.index for e in out_ds.episodes] == [e.index for e in ds.episodes]
    for rel, eps in ds.iter_video_files():
        sp, op = probe_video(src / rel), probe_video(out / rel)
        assert (op.width, op.height) == (224, 224), rel
        assert op.frames_from_packets == op.frames_from_header == sp.frames_from_packets, rel
        assert op.keyframes == op.frames_from_packets, rel
        assert abs(op.fps - ds.fps) < 1e-6
        cam = next(r.camera for r in eps[0].videos if r.rel == rel)
        spans = [Span(e.index, out_ep.video(cam).from_timestamp, out_ep.video(cam).to_timestamp, e.frames_expected)
                 for e, out_ep in zip(eps, [next(o for o in out_ds.episodes if o.index == e.index) for e in eps],
                                      strict=True)]
        _, failures = check_video(out / rel, VideoExpect(ds.fps, (224, 224), all_intra=True), spans)
        assert not failures, [f.line() for f in failures]
    for rel, _eps in ds.iter_data_files():
        assert (src / rel).read_bytes() == (out / rel).read_bytes(), rel
    for tasks in ("meta/tasks.jsonl", "meta/tasks.parquet"):
        if (src / tasks).exists():
            assert (src / tasks).read_bytes() == (out / tasks).read_bytes()
    info = json.loads((out / "meta/info.json").read_text())
    for cam in ds.camera_keys:
        feat = info["features"][cam]
        assert feat["shape"] == [224, 224, 3]
        assert feat["info"]["video.height"] == feat["info"]["video.width"] == 224
        assert feat["info"]["video.codec"] == "h264" and feat["info"]["video.pix_fmt"] == "yuv420p"
        assert not [k for k in feat["info"] if k.startswith("prep.")]  # LeRobot's merge compares features
        prov = json.loads((out / "prep/provenance.json").read_text())["cameras"][cam]
        assert prov["resize"] == "pad" and prov["profile"] == "h264-intra"
    comparison = json.loads((out / "prep/comparison.json").read_text())
    assert comparison["ratio"] > 1.5 and comparison["native"]["gb_per_hour"] > comparison["prepared"]["gb_per_hour"]
    assert json.loads((out / "prep/manifest.json").read_text())["totals"]["episodes"] == len(ds.episodes)


def test_v21_exact_command_then_rerun_does_nothing(
    synth_v21: Path, copy_dataset: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    src = copy_dataset(synth_v21, "merged")
    before = tree(src)
    r = reencode("--src", "merged", "--dst", "224", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "merged_224"
    assert_prepared(src, out, "v2.1")
    assert tree(src) == before
    # image stats recomputed for the new frames (LeRobot's sampling: all 90 frames of a 90-frame episode)
    rows = [json.loads(line) for line in (out / "meta/episodes_stats.jsonl").read_text().splitlines()]
    cam = rows[0]["stats"]["observation.images.cam_high"]
    assert cam["count"] == [90] and cam["min"] == [[[0.0]], [[0.0]], [[0.0]]]
    old = json.loads((src / "meta/episodes_stats.jsonl").read_text().splitlines()[0])["stats"]
    assert rows[0]["stats"]["action"] == old["action"]
    # rerun: nothing re-encoded, nothing in the dataset changed
    dataset_files = {k: v for k, v in tree(out).items() if not k.startswith("prep/")}
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.mp4")}
    r2 = reencode("--src", "merged", "--dst", "224", cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert "0 encoded, 9 kept" in r2.stdout
    assert {k: v for k, v in tree(out).items() if not k.startswith("prep/")} == dataset_files
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.mp4")} == stamps
    assert tree(src) == before


def test_v30_ffmpeg_engine(synth_v30: Path, tmp_path: Path) -> None:
    before = tree(synth_v30)
    out = tmp_path / "v30_224"
    r = reencode("--src", str(synth_v30), "--dst", "224", "--out", str(out), "--engine", "ffmpeg")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_prepared(synth_v30, out, "v3.0")
    assert tree(synth_v30) == before
    src_eps = pq.read_table(synth_v30 / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    out_eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    assert out_eps.schema == pq.read_schema(synth_v30 / "meta/episodes/chunk-000/file-000.parquet")
    for a, b in zip(src_eps, out_eps.to_pylist(), strict=True):
        for cam in ("observation.images.cam_high", "observation.images.cam_right_wrist"):
            assert b[f"videos/{cam}/from_timestamp"] == a[f"videos/{cam}/from_timestamp"]
            assert b[f"videos/{cam}/to_timestamp"] == a[f"videos/{cam}/to_timestamp"]
            assert b[f"stats/{cam}/count"] == [90]
            assert b[f"stats/{cam}/mean"] != a[f"stats/{cam}/mean"]
        assert b["stats/action/mean"] == a["stats/action/mean"]
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["observation.images.cam_high"]["count"] == [270]


def test_real_fixture(real_v21: Path, tmp_path: Path) -> None:
    before = tree(real_v21)
    out = tmp_path / "real_224"
    r = reencode("--src", real_v21.name, "--root", str(real_v21.parent), "--dst", "224", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert_prepared(real_v21, out, "v2.1")
    assert tree(real_v21) == before
    prov = json.loads((out / "prep/provenance.json").read_text())
    assert prov["cameras"]["observation.images.cam_high"]["source_codec"] == "av1"
    assert (out / "LICENSE").read_bytes() == (real_v21 / "LICENSE").read_bytes()


def test_refusals(synth_v21: Path, tmp_path: Path) -> None:
    r = reencode("--src", str(synth_v21), "--dst", "224", "--out", str(synth_v21 / "inside"))
    assert r.returncode == 2 and "inside" in r.stderr
    assert not (synth_v21 / "inside").exists()
    r = reencode("--src", str(synth_v21), "--dst", "224", "--out", str(synth_v21))
    assert r.returncode == 2
    r = reencode("--src", str(synth_v21), "--dst", "22x", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "expected a size" in r.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("x")
    r = reencode("--src", str(synth_v21), "--dst", "224", "--out", str(tmp_path / "busy"))
    assert r.returncode == 2 and "not a prep reencode output" in r.stderr
    assert os.listdir(tmp_path / "busy") == ["file.txt"]


def test_other_settings_into_same_output_refused(synth_v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    (out / "prep").mkdir(parents=True)
    settings = {"source": str(synth_v21.resolve()), "size": [224, 224], "resize": "pad", "profile": "h264-intra",
                "crf": 30}
    (out / "prep/options.json").write_text(json.dumps(settings))
    r = reencode("--src", str(synth_v21), "--dst", "224", "--out", str(out))
    assert r.returncode == 2 and "other settings" in r.stderr
    shutil.rmtree(out)
