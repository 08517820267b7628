"""`prep edit --keep-cameras/--drop-cameras/--rename` (issue 35) end to end on real h264 video, both formats:
a kept camera's packets are the source's byte for byte (PyAV), a dropped camera's files are not written, and
info.json, meta/stats.json, the per-episode stats (v2.1 episodes_stats.jsonl, v3.0 `stats/<key>/...` columns)
and the v3.0 episode metadata (`videos/<key>/...` columns) lose the dropped camera or follow the rename, exactly;
an image camera (PNG in a data parquet column) is a data column dropped or renamed, its `huggingface` schema
metadata with it; the output passes `prep verify --decode`; bad keys are one line, exit 2, nothing written;
datasets whose cameras have other names merge once mapped to the same keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep
from support.media import episode_payloads, packets
from support.trees import tree

from pipeline.formats.v21 import iter_v21_stats
from pipeline.formats.v30 import stats_of_row
from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

HIGH, WRIST, TOP = "observation.images.cam_high", "observation.images.wrist", "observation.images.top"
BASE, LEFT = "observation.images.base", "observation.images.left_wrist"
BASE_0, LEFT_0 = "observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb"
VERSIONS = ("v2.1", "v3.0")


def spec(version: str, cameras: tuple[str, ...], image_cameras: tuple[str, ...] = (), **kw: Any) -> SynthSpec:
    base: dict[str, Any] = {"version": version, "episodes": 4, "frames": 24, "height": 48, "width": 64, "gop": 12,
                            "cameras": cameras, "image_cameras": image_cameras}
    if version == "v3.0":
        base["episodes_per_file"] = 3  # files hold episodes 0-2 and 3
    return SynthSpec(**{**base, **kw})


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per format: `A` (two video cameras and an image camera), `B` (two video cameras of other names, another
    seed) and `R` (A's cameras, another robot_type)."""
    base = tmp_path_factory.mktemp("cams")
    out: dict[str, Path] = {}
    for v in VERSIONS:
        out[f"A{v}"] = write_synthetic(base / f"A{v}", spec(v, (HIGH, WRIST, TOP), (TOP,)))
        out[f"B{v}"] = write_synthetic(base / f"B{v}", spec(v, (BASE, LEFT), episodes=3, seed=1))
    return out


def edit(*args: object) -> Any:
    r = run_prep("edit", *args, backend="inline", progress=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def refused(*args: object) -> str:
    r = run_prep("edit", *args, backend="inline", progress=False)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def info_of(root: Path) -> dict[str, Any]:
    return json.loads((root / "meta/info.json").read_text())


def verified(root: Path) -> None:
    report = verify_in_process(root, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures[:5]]
    assert not report.rejected


def episode_stats(root: Path) -> list[dict[str, dict[str, Any]]]:
    """Each episode's stats, either format."""
    if info_of(root)["codebase_version"] == "v2.1":
        return [st for _e, st in iter_v21_stats(root)]
    return [stats_of_row(r) for f in sorted((root / "meta/episodes").rglob("*.parquet"))
            for r in pq.read_table(f).to_pylist()]


def episode_columns(root: Path) -> list[str]:
    return pq.read_schema(next((root / "meta/episodes").rglob("*.parquet"))).names


def data_tables(root: Path) -> Any:
    import pyarrow as pa

    return pa.concat_tables([pq.read_table(f) for f in sorted((root / "data").rglob("*.parquet"))])


def hf_features(path: Path) -> dict[str, Any]:
    return json.loads(pq.read_schema(path).metadata[b"huggingface"])["info"]["features"]


def mapped(features: dict[str, Any], mapping: dict[str, str | None]) -> dict[str, Any]:
    """`features` (a dict keyed by feature, in order) with the keys `mapping` drops (None) or renames."""
    return {mapping.get(k, k): v for k, v in features.items() if mapping.get(k, k) is not None}


def stats_keys_mapped(src: Path, out: Path, mapping: dict[str, str | None], kept: list[int]) -> None:
    """The output's per-episode stats are the kept source episodes' with the keys mapped; their values of
    every feature but the renumbered columns equal."""
    src_stats, out_stats = episode_stats(src), episode_stats(out)
    assert len(out_stats) == len(kept)
    for new, old in enumerate(kept):
        want = mapped(src_stats[old], mapping)
        got = out_stats[new]
        assert list(got) == list(want)
        for key in got:
            if key not in ("episode_index", "index", "task_index"):
                assert got[key] == want[key], key


def check_shaped(src: Path, out: Path, mapping: dict[str, str | None], kept: list[int]) -> None:
    """Everything the camera options promise, for `mapping` (source key -> output key, None: dropped) and the
    kept source episodes `kept`."""
    si, oi = info_of(src), info_of(out)
    assert oi["features"] == mapped(si["features"], mapping)  # the order too
    assert list(oi["features"]) == list(mapped(si["features"], mapping))
    video_out = [k for k, ft in oi["features"].items() if ft["dtype"] == "video"]
    if si["codebase_version"] == "v2.1":
        assert oi["total_videos"] == len(video_out) * len(kept)
    # meta/stats.json: the source's keys mapped (v2.1's synthetic source has none: aggregated from the episodes)
    stats = json.loads((out / "meta/stats.json").read_text())
    want_keys = set(mapped(si["features"], mapping))
    assert set(stats) == want_keys
    if (src / "meta/stats.json").is_file() and len(kept) == si["total_episodes"]:
        src_stats = json.loads((src / "meta/stats.json").read_text())
        for old, new in ((k, mapping.get(k, k)) for k in src_stats):
            if new is not None and old not in ("episode_index", "index", "task_index"):
                assert set(stats[new]) == set(src_stats[old])
                for name, value in src_stats[old].items():  # the aggregate of every episode: the source's
                    assert np.allclose(stats[new][name], value), (old, name)
    stats_keys_mapped(src, out, mapping, kept)
    # video files: only the kept cameras', under their new keys, every kept packet the source's
    src_pay, out_pay = episode_payloads(src), episode_payloads(out)
    for cam in [k for k, ft in si["features"].items() if ft["dtype"] == "video"]:
        new_cam = mapping.get(cam, cam)
        if new_cam is None:
            assert not any(cam in p.parts for p in out.rglob("*.mp4"))
            continue
        for new, old in enumerate(kept):
            got = out_pay[(new, new_cam)]
            assert len(got) == 24 and got == src_pay[(old, cam)]
    assert {c for (_e, c) in out_pay} == set(video_out)
    # data: the columns mapped, the values of every kept column the source's
    st, ot = data_tables(src), data_tables(out)
    assert ot.column_names == [mapping.get(c, c) for c in st.column_names if mapping.get(c, c) is not None]
    rows = [r for e in kept for r in range(e * 24, e * 24 + 24)]
    for c in st.column_names:
        new = mapping.get(c, c)
        if new is not None and c not in ("episode_index", "index", "task_index"):
            assert ot.column(new).to_pylist() == st.take(rows).column(c).to_pylist(), c
    first = next((out / "data").rglob("*.parquet"))
    assert list(hf_features(first)) == ot.column_names
    assert hf_features(first) == mapped(hf_features(next((src / "data").rglob("*.parquet"))), mapping)
    if si["codebase_version"] == "v3.0":  # the episode metadata's columns: the dropped camera's gone, renamed
        want = []
        for col in episode_columns(src):
            head, _, rest = col.partition("/")
            if head in ("videos", "stats"):
                feat, _, field = rest.rpartition("/")
                if mapping.get(feat, feat) is None:
                    continue
                col = f"{head}/{mapping.get(feat, feat)}/{field}"
            want.append(col)
        assert episode_columns(out) == want
    verified(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_drop_camera(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """--drop-cameras of a video camera, with no episode left out: the output is the source's layout less that
    camera's files (v3.0: the same chunk/file numbering), its kept videos' packets the source's."""
    src = sources[f"A{version}"]
    before = tree(src)
    out = tmp_path / "out"
    r = edit(src, "--out", out, "--drop-cameras", WRIST)
    assert f"left out: {WRIST}" in r.stdout
    check_shaped(src, out, {WRIST: None}, [0, 1, 2, 3])
    files = {k for k in tree(out, skip_prep=True)}
    want = {k for k in before if WRIST not in k}
    if version == "v2.1":
        want.add("meta/stats.json")  # aggregated from the episodes' stats (the synthetic v2.1 source has none)
    assert files == want
    for rel in files:
        if rel.endswith(".mp4"):
            if version == "v2.1":
                assert (out / rel).read_bytes() == (src / rel).read_bytes()  # the same file, copied
            assert packets(out / rel) == packets(src / rel)  # payloads, pts, dts, keyframes
    assert tree(src) == before  # the source is only read


@pytest.mark.parametrize("version", VERSIONS)
def test_drop_camera_with_episodes(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """Combined with --drop: the kept episodes of the kept cameras, spliced (v3.0) or copied, byte for byte."""
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--drop", "1", "--drop-cameras", WRIST)
    check_shaped(src, out, {WRIST: None}, [0, 2, 3])


@pytest.mark.parametrize("version", VERSIONS)
def test_keep_one_camera_drops_the_image_column(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """--keep-cameras of one video camera: the other video camera's files are not written and the image
    camera's data column (PNG bytes) is left out of every data file, with its huggingface feature."""
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--keep-cameras", HIGH)
    check_shaped(src, out, {WRIST: None, TOP: None}, [0, 1, 2, 3])
    assert TOP not in pq.read_schema(next((out / "data").rglob("*.parquet"))).names


@pytest.mark.parametrize("version", VERSIONS)
def test_rename(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """--rename of a video camera (its files move to the new key's path, bytes unchanged), an image camera and
    the state (data columns renamed with their huggingface features), with --keep."""
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    renames = {HIGH: BASE_0, TOP: "observation.images.top_0_rgb", "observation.state": "observation.joints"}
    r = edit(src, "--out", out, "--keep", "0,3", "--rename", *(f"{a}={b}" for a, b in renames.items()))
    assert f"renamed   {HIGH} -> {BASE_0}" in r.stdout
    check_shaped(src, out, dict(renames), [0, 3])
    if version == "v2.1":
        for new, old in ((0, 0), (1, 3)):
            assert (out / f"videos/chunk-000/{BASE_0}/episode_{new:06d}.mp4").read_bytes() == \
                (src / f"videos/chunk-000/{HIGH}/episode_{old:06d}.mp4").read_bytes()
    else:
        assert (out / f"videos/{BASE_0}/chunk-000/file-000.mp4").is_file()
        assert not (out / f"videos/{HIGH}").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_swap_and_rename_options_combine(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """Renames apply together (a swap is no collision); --rename is repeatable; with --drop-cameras."""
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--rename", f"{HIGH}={WRIST}", "--rename", f"{WRIST}={HIGH}", "--drop-cameras", TOP)
    check_shaped(src, out, {HIGH: WRIST, WRIST: HIGH, TOP: None}, [0, 1, 2, 3])


@pytest.mark.parametrize("version", VERSIONS)
def test_drop_every_camera(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """Every camera left out is allowed (a state/action dataset, as LeRobot's remove_feature writes one):
    no video file, `video_path` null, total_videos 0; it verifies."""
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--drop-cameras", HIGH, WRIST, TOP)
    info = info_of(out)
    assert info["video_path"] is None and not list(out.rglob("*.mp4"))
    assert not [k for k, ft in info["features"].items() if ft["dtype"] in ("video", "image")]
    if version == "v2.1":
        assert info["total_videos"] == 0
    check_shaped(src, out, {HIGH: None, WRIST: None, TOP: None}, [0, 1, 2, 3])


def test_to_other_format(sources: dict[str, Path], tmp_path: Path) -> None:
    """With --to: the edit staged in the source's format, then converted; the kept packets are the source's."""
    src = sources["Av3.0"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--to", "v2.1", "--drop", "2", "--drop-cameras", WRIST, "--rename", f"{HIGH}={BASE_0}")
    info = info_of(out)
    assert info["codebase_version"] == "v2.1" and info["total_videos"] == 3
    assert [k for k, ft in info["features"].items() if ft["dtype"] == "video"] == [BASE_0]
    src_pay, out_pay = episode_payloads(src), episode_payloads(out)
    assert [out_pay[(n, BASE_0)] for n in range(3)] == [src_pay[(o, HIGH)] for o in (0, 1, 3)]
    assert {c for _e, c in out_pay} == {BASE_0}
    verified(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_rerun_resumes_and_other_cameras_are_refused(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    src = sources[f"A{version}"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--drop-cameras", WRIST)
    r = edit(src, "--out", out, "--drop-cameras", WRIST)
    assert " 0 written" in r.stdout  # every file kept
    line = refused(src, "--out", out, "--drop-cameras", HIGH)
    assert "was started with other settings" in line and "drop_cameras" in line


def test_refusals(sources: dict[str, Path], tmp_path: Path) -> None:
    """One line, exit 2, nothing written: an unknown camera (naming the dataset's cameras), a feature that is
    not a camera, a reserved key renamed or renamed to, an unknown OLD, a collision, a dropped camera renamed,
    a key that cannot be one."""
    src = sources["Av3.0"]
    out = tmp_path / "out"
    cams = f"{HIGH}, {WRIST}, {TOP}"
    line = refused(src, "--out", out, "--drop-cameras", "observation.images.nope")
    assert "'observation.images.nope' is not a camera of" in line and f"(cameras: {cams})" in line
    line = refused(src, "--out", out, "--keep-cameras", HIGH, "cam9")
    assert "--keep-cameras: 'cam9' is not a camera" in line and cams in line
    assert "is a feature but not a camera" in refused(src, "--out", out, "--drop-cameras", "observation.state")
    for bad in (f"index={BASE_0}", "observation.state=frame_index", "timestamp=t"):
        assert "LeRobot writes itself" in refused(src, "--out", out, "--rename", bad)
    line = refused(src, "--out", out, "--rename", "observation.nope=x")
    assert "'observation.nope' is not a feature of" in line and "observation.state" in line
    line = refused(src, "--out", out, "--rename", "observation.state=action")
    assert "would both be named 'action'" in line
    line = refused(src, "--out", out, "--rename", f"{HIGH}={BASE_0}", f"{WRIST}={BASE_0}")
    assert f"would both be named '{BASE_0}'" in line
    assert "renamed twice" in refused(src, "--out", out, "--rename", f"{HIGH}=a", f"{HIGH}=b")
    assert "left out of" in refused(src, "--out", out, "--drop-cameras", WRIST, "--rename", f"{WRIST}=w")
    for bad in ("x", "a/b=c", f"{HIGH}=a/b", f"{HIGH}="):
        assert "--rename" in refused(src, "--out", out, "--rename", bad)
    assert not out.exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_merge_after_renames(sources: dict[str, Path], tmp_path: Path, version: str) -> None:
    """Two datasets whose cameras have other names: refused as they are (LeRobot's rule, one line), merged once
    --keep-cameras and --rename map them to the same keys; each output episode's packets are its source
    episode's."""
    a, b = sources[f"A{version}"], sources[f"B{version}"]
    out = tmp_path / "out"
    line = refused("--merge", a, b, "--out", out)
    assert "cannot be merged" in line and "LeRobot's merge_datasets" in line
    renames = [f"{HIGH}={BASE_0}", f"{BASE}={BASE_0}", f"{WRIST}={LEFT_0}", f"{LEFT}={LEFT_0}"]
    line = refused("--merge", a, b, "--out", out, "--rename", *renames)
    assert f"feature '{TOP}'" in line and "after --keep-cameras/--drop-cameras/--rename" in line
    assert "not a camera of any of the datasets" in refused("--merge", a, b, "--out", out, "--drop-cameras", "x")
    assert not out.exists()
    r = edit("--merge", a, b, "--out", out, "--drop-cameras", TOP, "--rename", *renames)
    assert "verify    PASSED" in r.stdout
    info = info_of(out)
    assert info["total_episodes"] == 7
    assert [k for k, ft in info["features"].items() if ft["dtype"] in ("video", "image")] == [BASE_0, LEFT_0]
    pay = episode_payloads(out)
    pa_, pb = episode_payloads(a), episode_payloads(b)
    for new in range(7):
        src_pay, old, (c0, c1) = (pa_, new, (HIGH, WRIST)) if new < 4 else (pb, new - 4, (BASE, LEFT))
        assert pay[(new, BASE_0)] == src_pay[(old, c0)] and pay[(new, LEFT_0)] == src_pay[(old, c1)]
    assert set(json.loads((out / "meta/stats.json").read_text())) == set(info["features"])
    assert all(set(st) == set(info["features"]) for st in episode_stats(out))
    assert TOP not in data_tables(out).column_names


def test_merge_refuses_another_robot_type(sources: dict[str, Path], tmp_path: Path) -> None:
    """A different robot_type is refused as LeRobot's merge_datasets (validate_all_metadata) refuses it."""
    a = sources["Bv3.0"]
    other = tmp_path / "other"
    write_synthetic(other, spec("v3.0", (BASE, LEFT), episodes=2, seed=2))
    info = info_of(other)
    info["robot_type"] = "another_robot"
    (other / "meta/info.json").write_text(json.dumps(info, indent=4))
    line = refused("--merge", a, other, "--out", tmp_path / "out")
    assert "robot_type 'another_robot'" in line and "LeRobot's merge_datasets" in line


def test_split_with_cameras(sources: dict[str, Path], tmp_path: Path) -> None:
    src = sources["Av3.0"]
    out = tmp_path / "out"
    edit(src, "--out", out, "--split", "train=0,1,2", "val=3", "--drop-cameras", WRIST, "--rename", f"{HIGH}={BASE_0}")
    check_shaped(src, out / "train", {WRIST: None, HIGH: BASE_0}, [0, 1, 2])
    check_shaped(src, out / "val", {WRIST: None, HIGH: BASE_0}, [3])


def test_merge_refuses_other_state_dims_after_renames(sources: dict[str, Path], tmp_path: Path) -> None:
    """Cameras mapped to the same keys do not make another robot's state mergeable: a 7-dim state beside a
    14-dim one is refused naming the shapes and LeRobot's rule."""
    a = sources["Bv3.0"]
    other = write_synthetic(tmp_path / "other", spec("v3.0", (HIGH, WRIST), episodes=2, seed=3, state_dim=7))
    line = refused("--merge", a, other, "--out", tmp_path / "out", "--rename", f"{HIGH}={BASE}", f"{WRIST}={LEFT}")
    assert "feature 'observation.state'" in line and "[7]" in line and "[14]" in line
    assert "LeRobot's merge_datasets expects the same fps, robot_type and features" in line
