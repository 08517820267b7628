"""`prep edit --drop/--keep` end to end (`pipeline.jobs.edit`, inline engine, real h264 video): the output
verifies with a decode, every kept packet is the source's byte for byte, episodes, rows and tasks are
renumbered, per-episode stats move with them and the global stats are their aggregate, v3.0 offsets are
exact with one row group per episode; a cut off a keyframe is refused before anything is written; a rerun
resumes; the source is only read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep
from support.datasets import small_spec
from support.media import payloads
from support.trees import tree

from pipeline.cli import main
from pipeline.dataset.stats import StatsAggregator
from pipeline.errors import PrepError
from pipeline.formats import open_dataset
from pipeline.formats.v21 import iter_v21_stats
from pipeline.formats.v30 import stats_of_row
from pipeline.jobs.edit import EditOptions, EditRefused, EditReport, edit_dataset, ranges
from pipeline.jobs.verify import verify_in_process
from pipeline.rates import frames_to_seconds
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")


def edit_inline(src: Path, out: Path, **kw: tuple[int, ...]) -> EditReport:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return edit_dataset(src, out, EditOptions(**kw), engine)


def assert_verified(root: Path) -> None:
    report = verify_in_process(root, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures[:5]]
    assert not report.rejected


@pytest.fixture
def v21(small_v21: Path) -> Path:
    """7 episodes x 2 cameras x 24 frames of 48x64 h264, GOP 12 (support.datasets.small_spec; read-only)."""
    return small_v21


@pytest.fixture
def v30(small_v30: Path) -> Path:
    """The same in v3.0, 3 episodes per file."""
    return small_v30


@pytest.fixture(scope="module")
def v30_gop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One encode per file with GOP 10 over 25-frame episodes: most episodes do not start on a keyframe."""
    return write_synthetic(tmp_path_factory.mktemp("edit") / "v30gop", small_spec("v3.0", frames=25, gop=10))


def test_ranges_and_episode_lists() -> None:
    from pipeline.commands.edit import episode_list

    assert episode_list("0-3, 7,9-10,2") == (0, 1, 2, 3, 7, 9, 10)
    assert ranges([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    for bad in ("3-1", "a", "-2", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"range|expected|episode"):
            episode_list(bad)


def test_v21_drop(v21: Path, tmp_path: Path) -> None:
    before = tree(v21)
    out = tmp_path / "out"
    report = edit_inline(v21, out, drop=(1, 3, 4))
    assert report.ok and report.failed == 0 and report.written == report.files == 4 * 3
    assert (report.episodes, report.frames, report.dropped_total) == (4, 96, 3)
    assert [d["episode"] for d in report.dropped] == [1, 3, 4]
    assert_verified(out)
    kept = [0, 2, 5, 6]
    src_ds, _ = open_dataset(v21)
    out_ds, rejected = open_dataset(out)
    assert not rejected and len(out_ds.episodes) == 4
    src_tasks = [json.loads(line)["task"] for line in (v21 / "meta/tasks.jsonl").read_text().splitlines()]
    out_tasks = [json.loads(line)["task"] for line in (out / "meta/tasks.jsonl").read_text().splitlines()]
    used = sorted({src_tasks[e % 4] for e in kept}, key=src_tasks.index)
    assert out_tasks == used  # the tasks the kept episodes use, in source order, renumbered
    for new, old in enumerate(kept):
        a, b = src_ds.episodes[old], out_ds.episodes[new]
        for ra, rb in zip(a.videos, b.videos, strict=True):
            assert (out / rb.rel).read_bytes() == (v21 / ra.rel).read_bytes()  # bit-exact: the same file
        ta, tb = pq.read_table(v21 / a.data.rel), pq.read_table(out / b.data.rel)
        assert tb.column("episode_index").to_pylist() == [new] * 24
        assert tb.column("index").to_pylist() == list(range(24 * new, 24 * new + 24))
        assert [out_tasks[t] for t in tb.column("task_index").to_pylist()] == \
            [src_tasks[t] for t in ta.column("task_index").to_pylist()]
        for col in ("observation.state", "action", "timestamp", "frame_index"):
            assert tb.column(col).equals(ta.column(col))
    info = json.loads((out / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (4, 96, len(used))
    assert info["splits"] == {"train": "0:4"} and info["total_videos"] == 8
    stats = list(iter_v21_stats(out))
    agg = StatsAggregator()
    for new, st in stats:
        assert st["episode_index"]["min"] == [new] and st["index"]["min"] == [24 * new]
        agg.add(st)
    assert json.loads((out / "meta/stats.json").read_text())["index"]["max"] == [95]
    assert json.loads((out / "meta/stats.json").read_text())["action"]["mean"] == \
        pytest.approx(agg.result()["action"]["mean"])
    assert tree(v21) == before  # the source is only read


def test_v21_keep_and_cli(v21: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["edit", str(v21), "--out", str(out), "--keep", "5-6", "--backend", "inline", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "0-4: not in --keep" in text and "verify    PASSED" in text
    ds, _ = open_dataset(out)
    assert [e.frames_expected for e in ds.episodes] == [24, 24]
    # a rerun with the same selection keeps every file; another selection is refused
    assert main(["edit", str(v21), "--out", str(out), "--keep", "5-6", "--backend", "inline", "--no-progress"]) == 0
    assert "0 written, 6 kept" in capsys.readouterr().out
    assert main(["edit", str(v21), "--out", str(out), "--keep", "4-6", "--backend", "inline", "--no-progress"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_refusals_write_nothing(v21: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["edit", str(v21), "--out", str(out), "--drop", "3,7", "--backend", "inline"]) == 2
    assert "episode 7 is not in" in capsys.readouterr().err
    assert main(["edit", str(v21), "--out", str(out), "--drop", "0-6", "--backend", "inline"]) == 2
    assert "nothing would be left" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(PrepError, match="--drop EPISODES, --keep EPISODES"):
        edit_inline(v21, out)


def test_v30_drop(v30: Path, tmp_path: Path) -> None:
    before = tree(v30)
    out = tmp_path / "out"
    report = edit_inline(v30, out, drop=(1, 3, 4))
    assert report.ok, report.failures
    assert (report.episodes, report.frames) == (4, 96)
    assert_verified(out)
    kept = [0, 2, 5, 6]  # source files hold 0-2, 3-5, 6: each keeps its own output file
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    src_rows = pq.read_table(v30 / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["episode_index"] for r in rows] == [0, 1, 2, 3]
    assert [(r["data/file_index"], r["dataset_from_index"], r["dataset_to_index"]) for r in rows] == \
        [(0, 0, 24), (0, 24, 48), (1, 48, 72), (2, 72, 96)]
    agg = StatsAggregator()
    for new, (r, old) in enumerate(zip(rows, kept, strict=True)):
        s = src_rows[old]
        assert r["tasks"] == s["tasks"] and r["length"] == s["length"]
        for cam in CAMS:
            pre = f"videos/{cam}/"
            before_frames = {0: 0, 1: 24, 2: 0, 3: 0}[new]
            assert r[pre + "from_timestamp"] == frames_to_seconds(before_frames, 30)  # exact
            assert r[pre + "to_timestamp"] == frames_to_seconds(before_frames + 24, 30)
            src_file = v30 / f"videos/{cam}/chunk-000/file-{s[pre + 'file_index']:03d}.mp4"
            out_file = out / f"videos/{cam}/chunk-000/file-{r[pre + 'file_index']:03d}.mp4"
            got = payloads(out_file, r[pre + "from_timestamp"], r[pre + "to_timestamp"])
            assert len(got) == 24 and got == payloads(src_file, s[pre + "from_timestamp"], s[pre + "to_timestamp"])
        st = stats_of_row(r)
        assert st["episode_index"]["max"] == [new] and st["index"]["min"] == [r["dataset_from_index"]]
        agg.add(st)
    for f in (0, 1, 2):
        pf = pq.ParquetFile(out / f"data/chunk-000/file-{f:03d}.parquet")
        eps = pf.read(columns=["episode_index"]).column(0).to_pylist()
        assert pf.metadata.num_row_groups == len(set(eps))  # one row group per episode
        for g in range(pf.metadata.num_row_groups):
            assert len(set(pf.read_row_group(g, columns=["episode_index"]).column(0).to_pylist())) == 1
    index = np.concatenate([pq.read_table(out / f"data/chunk-000/file-{f:03d}.parquet").column("index").to_numpy()
                            for f in (0, 1, 2)])
    assert index.tolist() == list(range(96))
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["index"]["max"] == [95] and stats["episode_index"]["max"] == [3]
    assert stats["observation.state"]["mean"] == pytest.approx(agg.result()["observation.state"]["mean"])
    info = json.loads((out / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"], info["splits"]) == (4, 96, {"train": "0:4"})
    assert tree(v30) == before


def test_v30_cut_off_keyframe_is_refused(v30_gop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    with pytest.raises(EditRefused) as info:
        edit_inline(v30_gop, out, drop=(1,))
    assert {p.episode for p in info.value.problems} >= {0}  # episode 0's last frames reorder across the cut
    assert not out.exists()  # refused before anything is written
    assert main(["edit", str(v30_gop), "--out", str(out), "--drop", "4", "--backend", "inline", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "prep reencode" in err and "file-001.mp4" in err
    assert not out.exists()


def test_v30_whole_runs_need_no_keyframe(v30_gop: Path, tmp_path: Path) -> None:
    """Dropping a whole source file's episodes cuts nothing: a GOP-10 source with episodes off keyframes edits
    exactly, packets byte for byte."""
    out = tmp_path / "out"
    report = edit_inline(v30_gop, out, drop=(3, 4, 5))
    assert report.ok, report.failures
    assert_verified(out)
    for cam in CAMS:
        assert payloads(out / f"videos/{cam}/chunk-000/file-000.mp4") == \
            payloads(v30_gop / f"videos/{cam}/chunk-000/file-000.mp4")
        assert payloads(out / f"videos/{cam}/chunk-000/file-001.mp4") == \
            payloads(v30_gop / f"videos/{cam}/chunk-000/file-002.mp4")


def _break(root: Path) -> None:
    """Three broken episodes: 1 a truncated video, 3 a video missing frames, 5 parquet timestamps off the grid."""
    from pipeline.synth import camera_frames, encode_frames

    v1 = root / f"videos/chunk-000/{CAMS[0]}/episode_000001.mp4"
    data = v1.read_bytes()
    v1.write_bytes(data[: len(data) // 2])
    spec = small_spec("v2.1")
    v3 = root / f"videos/chunk-000/{CAMS[1]}/episode_000003.mp4"
    encode_frames(v3, camera_frames(spec, 1, 3)[:20], spec)
    p5 = root / "data/chunk-000/episode_000005.parquet"
    t = pq.read_table(p5)
    ts = t.column("timestamp").to_numpy().copy()
    ts[10:] += 0.013
    pos = t.column_names.index("timestamp")
    import pyarrow as pa

    t = t.set_column(pos, t.schema.field(pos), pa.array(ts, type=t.schema.field(pos).type))
    pq.write_table(t, p5)


def test_drop_failed_repair_loop(v21: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(v21, broken)
    _break(broken)
    report = tmp_path / "r.json"
    assert main(["verify", str(broken), "--json", str(report), "--backend", "inline", "--no-progress"]) == 1
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["edit", str(broken), "--out", str(out), "--drop-failed", str(report), "--backend", "inline",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "dropped   3 episodes" in text and "verify    PASSED" in text
    doc = json.loads((out / "prep/edit_report.json").read_text())
    assert [d["episode"] for d in doc["dropped"]] == [1, 3, 5]
    assert all(d["reason"].startswith("verify: ") for d in doc["dropped"])
    assert_verified(out)
    # the report against another dataset (other metadata) is refused, nothing written
    other = tmp_path / "other"
    shutil.copytree(v21, other)
    lines = (other / "meta/episodes.jsonl").read_text().splitlines()
    (other / "meta/episodes.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    info = json.loads((other / "meta/info.json").read_text())
    info["total_episodes"], info["total_frames"] = 6, 144
    (other / "meta/info.json").write_text(json.dumps(info))
    assert main(["edit", str(other), "--out", str(tmp_path / "o3"), "--drop-failed", str(report), "--backend",
                 "inline", "--no-progress"]) == 2
    assert "fingerprint" in capsys.readouterr().err
    assert not (tmp_path / "o3").exists()


def test_drop_and_keep_tasks(v21: Path, tmp_path: Path) -> None:
    tasks = [json.loads(line)["task"] for line in (v21 / "meta/tasks.jsonl").read_text().splitlines()]
    # episode e uses task e % 4: dropping task 1 (by text) and task 3 (by index) leaves episodes 0, 2, 4, 6
    report = edit_inline(v21, tmp_path / "a", drop_tasks=(tasks[1], "3"))
    assert report.ok and [d["episode"] for d in report.dropped] == [1, 3, 5]
    out_tasks = [json.loads(line)["task"] for line in (tmp_path / "a/meta/tasks.jsonl").read_text().splitlines()]
    assert out_tasks == [tasks[0], tasks[2]]
    t = pq.read_table(tmp_path / "a/data/chunk-000/episode_000001.parquet")  # source episode 2, task 2 -> 1
    assert set(t.column("task_index").to_pylist()) == {1}
    st = dict(iter_v21_stats(tmp_path / "a"))[1]
    assert st["task_index"]["min"] == [1] and st["task_index"]["mean"] == [1.0]
    report = edit_inline(v21, tmp_path / "b", keep_tasks=(tasks[2],), drop=(6,))
    assert report.ok and report.episodes == 1  # episodes 2 and 6 use task 2; 6 is dropped
    with pytest.raises(PrepError, match="neither a task"):
        edit_inline(v21, tmp_path / "c", drop_tasks=("no such task",))


def _kept_of(out: Path) -> list[int]:
    doc = json.loads((out / "prep/edit_report.json").read_text())
    dropped = {d["episode"] for d in doc["dropped"]}
    return [e for e in range(doc["source_episodes"]) if e not in dropped]


def test_split_fractions_deterministic_and_grouped(v30: Path, tmp_path: Path) -> None:
    from pipeline.jobs.edit import SplitPart, split_dataset

    parts = [SplitPart("train", fraction=0.5), SplitPart("val", fraction=0.5)]
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        rep = split_dataset(v30, tmp_path / "a", parts, EditOptions(), engine, seed=3, group_by_task=True)
    assert rep.ok
    train, val = _kept_of(tmp_path / "a/train"), _kept_of(tmp_path / "a/val")
    assert sorted(train + val) == list(range(7)) and not set(train) & set(val)
    # grouped by task: tasks 0, 1, 2 have two episodes each (e % 4), one to each part
    for t in (0, 1, 2):
        assert len({e for e in train if e % 4 == t}) == 1 and len({e for e in val if e % 4 == t}) == 1
    for name in ("train", "val"):
        assert_verified(tmp_path / "a" / name)
    from pipeline.jobs.edit import split_selections

    tasks_of = {e: (str(e % 4),) for e in range(100)}
    a = split_selections(parts, list(range(100)), tasks_of, seed=3, shuffle=True, group_by_task=False, total=100)
    b = split_selections(parts, list(range(100)), tasks_of, seed=3, shuffle=True, group_by_task=False, total=100)
    c = split_selections(parts, list(range(100)), tasks_of, seed=4, shuffle=True, group_by_task=False, total=100)
    assert a == b and a != c and len(a["train"]) == len(a["val"]) == 50
    d = split_selections(parts, list(range(100)), tasks_of, seed=3, shuffle=False, group_by_task=False, total=100)
    assert d == {"train": list(range(50)), "val": list(range(50, 100))}  # LeRobot's contiguous rule


def test_split_lists_cli(v21: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "parts"
    assert main(["edit", str(v21), "--out", str(out), "--split", "val=0,6", "train=1.0", "--drop", "3",
                 "--backend", "inline", "--no-progress"]) == 0
    assert _kept_of(out / "val") == [0, 6] and _kept_of(out / "train") == [1, 2, 4, 5]
    assert "verify    PASSED" in capsys.readouterr().out
    assert_verified(out / "train")
    assert main(["edit", str(v21), "--out", str(tmp_path / "x"), "--split", "a=0-3", "b=3-4", "--backend",
                 "inline", "--no-progress"]) == 2
    assert "in both" in capsys.readouterr().err and not (tmp_path / "x").exists()
    for name, why in [("prep", "is reserved"), ("..", "must be a folder name"), ("a/b", "must be a folder name"),
                      ("\x1b[2J", "must be a folder name")]:
        assert main(["edit", str(v21), "--out", str(tmp_path / "y"), "--split", f"{name}=0.5", "ok=0.5",
                     "--backend", "inline", "--no-progress"]) == 2, name
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and "\x1b" not in err, (name, err)
        assert not (tmp_path / "y").exists()


def test_merge_v30_packs_files_with_the_same_codec_parameters(v30: Path, tmp_path: Path) -> None:
    """Files are packed together up to the limit, as LeRobot's merge does, but only files whose codec parameters
    are the same: the ultrafast source (no CABAC: another PPS) gets files of its own."""
    from pipeline.jobs.edit import merge_datasets

    fast = write_synthetic(tmp_path / "fast", small_spec("v3.0", preset="ultrafast"))
    part = tmp_path / "part"
    assert edit_inline(v30, part, keep=(2, 3)).ok
    out = tmp_path / "merged"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = merge_datasets([v30, fast, part], out, engine)
    assert report.ok, report.failures
    assert (report.episodes, report.frames) == (16, 16 * 24)
    assert_verified(out)
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["episode_index"] for r in rows] == list(range(16))
    assert [r["data/file_index"] for r in rows] == [0] * 16  # one data file: far below the limit
    for cam in CAMS:
        pre = f"videos/{cam}/"
        assert [r[pre + "file_index"] for r in rows] == [0] * 7 + [1] * 7 + [2] * 2
        assert [r[pre + "from_timestamp"] for r in rows] == [frames_to_seconds(24 * k, 30) for k in range(7)] * 2 + \
            [0.0, 0.8]
        sources = sorted((fast / f"videos/{cam}/chunk-000").glob("*.mp4"))
        assert payloads(out / f"videos/{cam}/chunk-000/file-001.mp4") == [p for f in sources for p in payloads(f)]
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pandas()
    assert len(tasks) == 4  # merged by text
    index = pq.read_table(out / "data/chunk-000/file-000.parquet").column("index").to_numpy()
    assert index.tolist() == list(range(report.frames))
    pf = pq.ParquetFile(out / "data/chunk-000/file-000.parquet")
    assert pf.metadata.num_row_groups == 16  # one row group per episode
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["episode_index"]["max"] == [15] and stats["index"]["max"] == [report.frames - 1]


def test_merge_v21_and_refusals(v21: Path, v30: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    part = tmp_path / "part"
    assert edit_inline(v21, part, keep=(3, 5)).ok  # tasks 3 and 1
    out = tmp_path / "m"
    assert main(["edit", "--merge", str(part), str(v21), "--out", str(out), "--backend", "inline",
                 "--no-progress"]) == 0
    assert_verified(out)
    src_tasks = [json.loads(line)["task"] for line in (v21 / "meta/tasks.jsonl").read_text().splitlines()]
    out_tasks = [json.loads(line)["task"] for line in (out / "meta/tasks.jsonl").read_text().splitlines()]
    assert out_tasks[:2] == [src_tasks[1], src_tasks[3]] and sorted(out_tasks) == sorted(src_tasks)
    ds, _ = open_dataset(out)
    assert len(ds.episodes) == 9
    first = pq.read_table(out / "data/chunk-000/episode_000002.parquet")  # v21's episode 0
    assert set(first.column("task_index").to_pylist()) == {out_tasks.index(src_tasks[0])}
    assert first.column("index").to_pylist()[0] == 48
    assert (out / f"videos/chunk-000/{CAMS[0]}/episode_000002.mp4").read_bytes() == \
        (v21 / f"videos/chunk-000/{CAMS[0]}/episode_000000.mp4").read_bytes()
    capsys.readouterr()
    other = tmp_path / "other"
    shutil.copytree(v21, other)
    info = json.loads((other / "meta/info.json").read_text())
    info["features"]["observation.state"]["shape"] = [13]
    (other / "meta/info.json").write_text(json.dumps(info))
    for pair, words in (((v21, other), "feature 'observation.state': shape [13] vs [14]"),
                        ((v21, v30), "codebase_version 'v3.0'")):
        dst = tmp_path / "refused"
        assert main(["edit", "--merge", *map(str, pair), "--out", str(dst), "--backend", "inline"]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1
        assert not dst.exists()


def test_to_other_format(v30: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v21"
    assert main(["edit", str(v30), "--out", str(out), "--drop", "1,3-4", "--to", "v2.1", "--backend", "inline",
                 "--no-progress"]) == 0
    assert "converted to v2.1" in capsys.readouterr().out
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["total_episodes"] == 4
    assert not (out / "prep/edited").exists() and (out / "prep/edit_report.json").is_file()
    assert_verified(out)
    src_rows = pq.read_table(v30 / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    s = src_rows[5]  # kept as episode 2
    pre = f"videos/{CAMS[0]}/"
    assert payloads(out / f"videos/chunk-000/{CAMS[0]}/episode_000002.mp4") == \
        payloads(v30 / f"videos/{CAMS[0]}/chunk-000/file-{s[pre + 'file_index']:03d}.mp4",
                 s[pre + "from_timestamp"], s[pre + "to_timestamp"])


def test_edit_help_and_parse_import_no_heavy_dependency() -> None:
    from test_cli_start import command_modules, heavy_in, imported

    code, mods = imported("edit", "--help")
    assert code == 0 and heavy_in(mods) == []
    shared = {"pipeline.commands.common", "pipeline.commands.argtypes"}
    assert command_modules(mods) - shared == {"pipeline.commands.edit"}
    code, mods = imported("edit", "nowhere", "--out", "x", "--split", "a=0.5", "b=bad", "--no-progress")
    assert code == 2 and heavy_in(mods) == []


def test_resume_rewrites_only_what_is_missing(v30: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = edit_inline(v30, out, drop=(1,))
    assert first.ok and first.written == first.files
    victim = out / f"videos/{CAMS[1]}/chunk-000/file-001.mp4"
    victim.unlink()
    (out / "meta/info.json").unlink()
    again = edit_inline(v30, out, drop=(1,))
    assert again.ok and again.written == 1 and again.kept == first.files - 1
    assert victim.is_file()
    assert_verified(out)


def test_without_episode_stats_the_global_stats_are_carried(v21: Path, tmp_path: Path) -> None:
    import shutil

    src = tmp_path / "old"
    shutil.copytree(v21, src)
    stats = {"action": {"min": [0.0], "max": [1.0], "mean": [0.5], "std": [0.1], "count": [168]}}
    (src / "meta/episodes_stats.jsonl").unlink()
    (src / "meta/stats.json").write_text(json.dumps(stats))
    report = edit_inline(src, tmp_path / "out", drop=(2,))
    assert report.complete and not (tmp_path / "out/meta/episodes_stats.jsonl").exists()
    assert json.loads((tmp_path / "out/meta/stats.json").read_text()) == stats


@pytest.mark.slow
@pytest.mark.cluster
def test_default_engine_runs_an_edit_of_up_to_512_kept_episodes_in_process(tmp_path: Path) -> None:
    """Without --workers/--backend/--scheduler, an edit keeping 70 episodes (above convert's 64) starts no
    LocalCluster (no `[engine]` line, as test_runner checks for scan); --workers 1 still starts one. Both outputs
    hold the same files."""
    import subprocess

    src = write_synthetic(tmp_path / "src", SynthSpec(version="v2.1", episodes=72, frames=4, height=32, width=32,
                                                      gop=4, cameras=CAMS[:1], reuse_video=True))

    def run(out: str, *extra: str) -> subprocess.CompletedProcess[str]:
        r = run_prep("edit", src, "--drop", "0,71", "--out", tmp_path / out, "--no-verify", "--no-progress", *extra)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    small = run("inline")
    assert "[engine]" not in small.stderr, small.stderr
    cluster = run("cluster", "--workers", "1")
    assert "[engine] local: LocalCluster, 1 worker" in cluster.stderr, cluster.stderr
    assert sorted(tree(tmp_path / "inline")) == sorted(tree(tmp_path / "cluster"))
