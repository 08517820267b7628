"""v2.1 <-> v3.0 conversion end to end through the convert job (`pipeline.jobs.convert`, inline engine):
round trips that give back the same episodes, rows and packets, exact offsets at 200+ episodes per file,
resume per output file, a bad input failing only its file, and the refusal to cut episodes that do not
start on a keyframe. Every output is checked by `prep verify` (the job's own, and again with a decode)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.media import packets
from support.trees import tree as tree_of

from pipeline import atomic
from pipeline.formats import open_dataset
from pipeline.formats.v30 import Limits, stats_of_row
from pipeline.jobs.convert import ConvertOptions, ConvertRefused, ConvertReport, convert_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.rates import frames_to_seconds
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.probe import probe_video

CAMS = ("observation.images.cam_high", "observation.images.wrist")
META_FILES = ("meta/episodes.jsonl", "meta/tasks.jsonl", "meta/episodes_stats.jsonl")
SMALL = Limits(data_files_size_in_mb=0.012, video_files_size_in_mb=0.03)  # several files per stream


tree = functools.partial(tree_of, skip_prep=True)  # every file of a dataset but prep's own folder, and its digest


def convert_inline(src: Path, out: Path, to: str, limits: Limits | None = None) -> ConvertReport:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = convert_dataset(src, out, ConvertOptions(to, limits or Limits()), engine)
    if report.complete:
        assert report.verify is not None and report.verify["passed"], report.verify
    return report


def time_base(path: Path) -> float:
    with av.open(str(path)) as c:
        return float(c.streams.video[0].time_base)


def assert_verified(root: Path) -> None:
    report = verify_in_process(root, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures[:5]]
    assert not report.rejected


def assert_same_v21(src: Path, back: Path) -> None:
    """Same metadata files byte for byte, same rows (values and column types), same packets."""
    for rel in META_FILES:
        if (src / rel).is_file():
            assert (back / rel).read_bytes() == (src / rel).read_bytes(), rel
    info, info_back = (json.loads((r / "meta/info.json").read_text()) for r in (src, back))
    assert info_back == info and list(info_back) == list(info)
    ds, rejected = open_dataset(src)
    assert not rejected
    for ep in ds.episodes:
        a, b = pq.read_table(src / ep.data.rel), pq.read_table(back / ep.data.rel)
        assert b.replace_schema_metadata(None).equals(a.replace_schema_metadata(None)), ep.index
        feats = json.loads(b.schema.metadata[b"huggingface"])["info"]["features"]
        assert "List" not in json.dumps(feats)  # datasets 3.6 (lerobot 0.3.3) knows Sequence only
        for ref in ep.videos:
            assert packets(back / ref.rel) == packets(src / ref.rel), (ep.index, ref.camera)


def test_v21_to_v30_to_v21_round_trip(small_v21: Path, tmp_path: Path) -> None:
    before = tree(small_v21)
    v30, back = tmp_path / "v30", tmp_path / "back"
    report = convert_inline(small_v21, v30, "v3.0", limits=SMALL)
    assert report.ok and report.failed == 0 and report.written == report.files
    assert (report.episodes, report.frames, report.tasks) == (7, 168, 4)
    info = json.loads((v30 / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 7 and "total_videos" not in info
    data_files = sorted(p.name for p in (v30 / "data/chunk-000").iterdir())
    assert len(data_files) >= 3, data_files  # small limits: several files per stream
    assert len(list((v30 / "videos" / CAMS[0] / "chunk-000").iterdir())) >= 2
    ds, rejected = open_dataset(v30)
    assert not rejected and [e.frames_expected for e in ds.episodes] == [24] * 7
    rows = pq.read_table(v30 / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for row in rows:  # every episode's data/file_index is the file that holds its rows
        rel = f"data/chunk-{row['data/chunk_index']:03d}/file-{row['data/file_index']:03d}.parquet"
        eps = set(pq.read_table(v30 / rel, columns=["episode_index"])["episode_index"].to_pylist())
        assert row["episode_index"] in eps
    assert_verified(v30)
    report = convert_inline(v30, back, "v2.1")
    assert report.ok and report.failed == 0 and report.files == 7 * 3
    assert_same_v21(small_v21, back)
    assert_verified(back)
    assert tree(small_v21) == before  # the source is only read


@pytest.mark.slow
def test_real_fixture_round_trip(real_v21: Path, tmp_path: Path) -> None:
    v30, back = tmp_path / "v30", tmp_path / "back"
    assert convert_inline(real_v21, v30, "v3.0").complete
    assert_verified(v30)
    assert convert_inline(v30, back, "v2.1").complete
    assert_same_v21(real_v21, back)
    assert (back / "LICENSE").read_bytes() == (real_v21 / "LICENSE").read_bytes()
    assert_verified(back)


def test_offsets_exact_at_220_episodes_per_file(tmp_path: Path) -> None:
    spec = SynthSpec(version="v2.1", episodes=220, frames=7, height=32, width=32, gop=7, cameras=(CAMS[0],),
                     reuse_video=True)
    src = write_synthetic(tmp_path / "many", spec)
    out = tmp_path / "many_v30"
    assert convert_inline(src, out, "v3.0").complete
    table = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    assert set(table[f"videos/{CAMS[0]}/file_index"].to_pylist()) == {0}  # all 220 episodes in one file
    t0 = table[f"videos/{CAMS[0]}/from_timestamp"].to_pylist()
    t1 = table[f"videos/{CAMS[0]}/to_timestamp"].to_pylist()
    assert max(abs(t - 7 * k / 30) for k, t in enumerate(t0)) <= 1e-6
    assert t0 == [frames_to_seconds(7 * k, 30) for k in range(220)] and t1[:-1] == t0[1:]
    probe = probe_video(out / f"videos/{CAMS[0]}/chunk-000/file-000.mp4")
    assert probe.frames_from_header == probe.frames_from_packets == 1540
    assert max(abs(t - i / 30) for i, t in enumerate(sorted(probe.pts_s))) < 1e-9
    assert table["dataset_from_index"].to_pylist() == [7 * k for k in range(220)]
    assert_verified(out)


def test_resume_redoes_only_missing_or_broken_files(small_v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "v30"
    convert_inline(small_v21, out, "v3.0", limits=SMALL)
    first = tree(out)
    video = out / "videos" / CAMS[1] / "chunk-000/file-001.mp4"
    data = out / "data/chunk-000/file-001.parquet"
    video.unlink()
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # a torn file under the final name
    (out / "meta/info.json").unlink()
    atomic.temp_path_for(out / "data/chunk-000/file-002.parquet").write_bytes(b"left by a killed run")
    report = convert_inline(small_v21, out, "v3.0", limits=SMALL)
    written = sorted(report.written_files)
    assert written == [data.relative_to(out).as_posix(), video.relative_to(out).as_posix()]
    assert report.written == 2 and report.kept == report.files - 2 and report.ok
    assert tree(out) == first  # identical to the run that was never interrupted


def test_a_bad_input_fails_its_file_and_nothing_is_published(small_v21: Path, tmp_path: Path,
                                                            copy_dataset: Callable[[Path, str], Path]) -> None:
    src = copy_dataset(small_v21, "bad")
    bad = src / f"videos/chunk-000/{CAMS[0]}/episode_000003.mp4"
    bad.write_bytes(bad.read_bytes()[:500])
    out = tmp_path / "out"
    report = convert_inline(src, out, "v3.0", limits=SMALL)
    assert not report.complete and not report.ok and not (out / "meta/info.json").exists()
    assert report.verify is None
    [failed] = report.failures
    assert failed["reason"] is not None and failed["reason"].startswith("episode 3: ")
    assert "episode_000003.mp4" in failed["reason"]
    assert failed["path"].startswith(f"videos/{CAMS[0]}/")
    assert report.failed == 1 and report.written == report.files - 1
    assert not list(out.rglob(f"*{atomic.TEMP_MARK}*"))
    assert json.loads((out / "prep/convert_report.json").read_text())["failures"] == report.failures


def test_v30_not_on_keyframes_is_refused_with_the_episodes(tmp_path: Path) -> None:
    """Episodes of 45 frames in one encode with keyframes every 90: episode 1 starts on a P frame (and
    episode 0's last B-frames are decoded from it); episode 2 starts on the keyframe at frame 90."""
    spec = SynthSpec(version="v3.0", episodes=3, frames=45, height=48, width=64, gop=90, cameras=CAMS,
                     episodes_per_file=3)
    src = write_synthetic(tmp_path / "v30", spec)
    out = tmp_path / "out"
    with pytest.raises(ConvertRefused) as info:
        convert_inline(src, out, "v2.1")
    by_episode = {(p.episode, p.camera): p.reason for p in info.value.problems}
    assert {e for e, _ in by_episode} == {0, 1}
    assert all("not a keyframe" in by_episode[(1, cam)] for cam in CAMS)
    assert str(info.value).startswith("2 episode(s) cannot be cut out exactly by a stream copy: 0, 1 (first: episode 0")
    assert "prep reencode --format v2.1" in str(info.value)
    assert not (out / "meta/info.json").exists() and not list(out.rglob("*.mp4"))


def test_v30_written_in_files_to_v21(lowres_v30: Path, tmp_path: Path) -> None:
    """The synthetic v3.0 corpus (3 cameras, 2 + 1 episodes per file): each episode's mp4 holds exactly the
    packets of its span, re-based to 0, and its rows."""
    out = tmp_path / "v21"
    report = convert_inline(lowres_v30, out, "v2.1")
    assert report.ok and report.files == 3 * 4
    src, _ = open_dataset(lowres_v30)
    dst, rejected = open_dataset(out)
    assert not rejected and [e.frames_expected for e in dst.episodes] == [e.frames_expected for e in src.episodes]
    for s, d in zip(src.episodes, dst.episodes, strict=True):
        for ref in s.videos:
            got = packets(out / d.video(ref.camera).rel)
            tb = time_base(lowres_v30 / ref.rel)
            span = [p for p in packets(lowres_v30 / ref.rel)
                    if ref.from_timestamp - 1e-4 <= p[1] * tb < (ref.to_timestamp or np.inf) - 1e-4]
            assert [g[0] for g in got] == [p[0] for p in span]
            base = min(p[1] for p in span)
            assert [(g[1], g[2]) for g in got] == [(p[1] - base, p[2] - base) for p in span]
        rows = pq.read_table(lowres_v30 / s.data.rel)
        rows = rows.filter(pa.compute.equal(rows["episode_index"], s.index)).replace_schema_metadata(None)
        assert pq.read_table(out / d.data.rel).replace_schema_metadata(None).equals(rows)
    assert_verified(out)
    lines = [json.loads(x) for x in (out / "meta/episodes_stats.jsonl").read_text().splitlines()]
    rows = pq.read_table(lowres_v30 / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [x["episode_index"] for x in lines] == [0, 1, 2]
    assert [x["stats"] for x in lines] == [stats_of_row(r) for r in rows]
    assert set(lines[0]["stats"]) == {*src.camera_keys, "observation.state", "action", "timestamp", "frame_index",
                                      "episode_index", "index", "task_index"}


def test_v21_output_resumes_per_episode_file(lowres_v30: Path, tmp_path: Path) -> None:
    out = tmp_path / "v21"
    convert_inline(lowres_v30, out, "v2.1")
    first = tree(out)
    gone = [out / "videos/chunk-000/observation.images.cam_left_wrist/episode_000001.mp4",
            out / "data/chunk-000/episode_000002.parquet"]
    for p in gone:
        p.unlink()
    (out / "meta/info.json").unlink()
    report = convert_inline(lowres_v30, out, "v2.1")
    assert sorted(report.written_files) == sorted(p.relative_to(out).as_posix() for p in gone)
    assert tree(out) == first
