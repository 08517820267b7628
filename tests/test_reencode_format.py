"""`prep reencode --format`: the re-encode written in the other layout. v3.0 -> v2.1 gives every episode its
own all-intra file, v2.1 -> v3.0 writes the episodes consecutively into files up to the size limits; in both
directions each episode's frames (packets) and image stats are exactly those of the same re-encode in the
source's layout, the output passes `prep verify --all-intra`, and a rerun of a finished output only verifies."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep
from support.media import episode_payloads

from pipeline.formats.v30 import Limits
from pipeline.jobs.convert import ReencodeAsReport, reencode_as
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
OPTIONS = ReencodeOptions(size=(32, 32))
SMALL = Limits(data_files_size_in_mb=0.01, video_files_size_in_mb=0.02)


def run(src: Path, out: Path, to: str | None, limits: Limits | None = None) -> ReencodeAsReport:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return reencode_as(src, out, OPTIONS, to, engine, limits=limits or Limits())


def v30_camera_stats(root: Path) -> dict[int, dict[str, list[float]]]:
    rows = [r for p in sorted((root / "meta/episodes").glob("*/*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["episode_index"]: {c: r[f"stats/{c}/mean"] for c in CAMS} for r in rows}


def v21_camera_stats(root: Path) -> dict[int, dict[str, list[float]]]:
    lines = [json.loads(x) for x in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    return {x["episode_index"]: {c: x["stats"][c]["mean"] for c in CAMS} for x in lines}


def flat(v: object) -> list[float]:
    import numpy as np

    return [float(x) for x in np.asarray(v).ravel()]


def assert_all_intra_verified(root: Path) -> None:
    report = verify_in_process(root, VerifyOptions(size=(32, 32), all_intra=True, decode=True))
    assert report.passed, [f.line() for f in report.failures[:5]]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fmt")
    # gop 30 with 20-frame episodes, 3 per file: most episodes start off a keyframe, so only a re-encode can cut them
    write_synthetic(base / "v30", SynthSpec(version="v3.0", episodes=5, frames=20, height=48, width=64, gop=30,
                                            cameras=CAMS, episodes_per_file=3))
    write_synthetic(base / "v21", SynthSpec(version="v2.1", episodes=6, frames=20, height=48, width=64, gop=30,
                                            cameras=CAMS))
    return base


def test_v30_to_v21_each_episode_its_own_all_intra_file(corpora: Path) -> None:
    same = run(corpora / "v30", corpora / "v30_same", None)  # the re-encode in the source's layout
    assert same.ok and not same.converted
    out = corpora / "v30_to_v21"
    result = run(corpora / "v30", out, "v2.1")
    assert result.ok and result.staged_removed and not (out / "prep/reencoded").exists()
    assert result.convert is not None and result.convert.files == 5 * 3
    assert sorted(result.carried) == ["prep/comparison.json", "prep/provenance.json", "prep/reencode_report.json",
                                      "prep/source_check.json"]
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["total_videos"] == 10
    assert info["features"][CAMS[0]]["shape"][:2] == [32, 32]
    assert json.loads((out / "prep/provenance.json").read_text())["cameras"][CAMS[0]]["profile"] == "h264-intra"
    assert len(list(out.glob("videos/chunk-000/*/episode_*.mp4"))) == 10
    assert episode_payloads(out) == episode_payloads(corpora / "v30_same")
    got, want = v21_camera_stats(out), v30_camera_stats(corpora / "v30_same")
    assert {e: {c: flat(v) for c, v in s.items()} for e, s in got.items()} == \
        {e: {c: flat(v) for c, v in s.items()} for e, s in want.items()}
    assert_all_intra_verified(out)


def test_v21_to_v30_consecutive_files_up_to_the_limit(corpora: Path) -> None:
    same = run(corpora / "v21", corpora / "v21_same", None)
    assert same.ok
    out = corpora / "v21_to_v30"
    result = run(corpora / "v21", out, "v3.0", SMALL)
    assert result.ok and result.convert is not None
    files = sorted(p.name for p in (out / "videos" / CAMS[0] / "chunk-000").iterdir())
    assert len(files) >= 2, files  # the small limit: several files, each several episodes
    assert len(files) < 6
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["video_files_size_in_mb"] == 0.02
    assert episode_payloads(out) == episode_payloads(corpora / "v21_same")
    got, want = v30_camera_stats(out), v21_camera_stats(corpora / "v21_same")
    assert {e: {c: flat(v) for c, v in s.items()} for e, s in got.items()} == \
        {e: {c: flat(v) for c, v in s.items()} for e, s in want.items()}
    assert_all_intra_verified(out)


def test_command_rerun_of_a_finished_output_only_verifies(corpora: Path) -> None:
    out = corpora / "cli_v21"
    cmd = ["reencode", "--src", str(corpora / "v30"), "--dst", "32", "--format", "v2.1", "--out", str(out),
           "--backend", "inline", "--no-progress"]
    first = run_prep(*cmd, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "--- into v2.1 (stream copy of the all-intra files) ---" in first.stdout
    assert "verify    PASSED: 5 of 5 episodes pass" in first.stdout
    again = run_prep(*cmd, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "reencode  finished by an earlier run" in again.stdout and "0 written" in again.stdout
    other = run_prep(*cmd, "--crf", "30", timeout=600)
    assert other.returncode == 2 and "was started with other settings" in other.stderr


def test_interrupted_format_change_resumes_per_file(corpora: Path) -> None:
    """A run stopped after the re-encode (staged copy kept) and with output files missing: the rerun keeps
    every staged file and writes only the missing output files, then publishes."""
    out = corpora / "resume_v21"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        first = reencode_as(corpora / "v30", out, OPTIONS, "v2.1", engine, keep_staged=True)
    assert first.ok and not first.staged_removed and (out / "prep/reencoded/meta/info.json").is_file()
    gone = [out / f"videos/chunk-000/{CAMS[1]}/episode_000003.mp4", out / "data/chunk-000/episode_000000.parquet"]
    for p in [*gone, out / "meta/info.json"]:
        p.unlink()
    again = run(corpora / "v30", out, "v2.1")
    assert again.ok and again.reencode is not None and again.convert is not None
    assert again.reencode.encoded == 0 and again.reencode.kept == again.reencode.files
    assert sorted(again.convert.written_files) == sorted(p.relative_to(out).as_posix() for p in gone)
    assert again.staged_removed and (out / "meta/info.json").is_file()
    assert episode_payloads(out) == episode_payloads(corpora / "v30_same")
