"""`prep convert` as a command on a real LocalCluster: exit codes, the summary, the options file with the
Limits, the lock, a refusal as one line, and a SIGKILLed conversion that a rerun finishes by redoing only
the unfinished output files (the result equal to an uninterrupted run's)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.cli import child_env, prep_cmd, run_prep
from support.trees import tree as tree_of

from pipeline.atomic import TEMP_MARK
from pipeline.lock import exclusive_lock
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
SMALL = ["--data-file-size-mb", "0.012", "--video-file-size-mb", "0.03"]


prep = functools.partial(run_prep, timeout=600)
tree = functools.partial(tree_of, skip_prep=True)


@pytest.fixture(scope="module")
def v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v2.1", episodes=12, frames=24, height=48, width=64, gop=12, cameras=CAMS)
    return write_synthetic(tmp_path_factory.mktemp("cli") / "v21", spec)


@pytest.fixture(scope="module")
def reference(v21: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted `prep convert --to v3.0` on 2 LocalCluster workers."""
    out = tmp_path_factory.mktemp("ref") / "v30"
    r = prep("convert", str(v21), "--to", "v3.0", "--out", str(out), "--workers", "2", "--no-progress", *SMALL)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verify    PASSED: 12 of 12 episodes pass" in r.stdout, r.stdout
    assert "[engine] local: LocalCluster, 2 workers" in r.stderr
    return out


@pytest.mark.slow
@pytest.mark.cluster
def test_convert_summary_options_and_rerun(v21: Path, reference: Path) -> None:
    report = json.loads((reference / "prep/convert_report.json").read_text())
    assert report["complete"] and report["written"] == report["files"] > 10 and report["verify"]["passed"]
    options = json.loads((reference / "prep/convert_options.json").read_text())
    assert options == {"source": str(v21.resolve()), "to": "v3.0", "chunks_size": 1000,
                       "data_files_size_in_mb": 0.012, "video_files_size_in_mb": 0.03, "data_size": "lerobot"}
    info = json.loads((reference / "meta/info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (0.012, 0.03)
    before = tree(reference)
    r = prep("convert", str(v21), "--to", "v3.0", "--out", str(reference), "--backend", "inline", "--no-progress",
             *SMALL)
    assert r.returncode == 0, r.stderr
    assert f"files     {report['files']}: 0 written, {report['files']} kept" in r.stdout
    assert tree(reference) == before


@pytest.mark.slow
@pytest.mark.cluster
def test_other_limits_on_the_same_output_are_refused(v21: Path, reference: Path) -> None:
    r = prep("convert", str(v21), "--to", "v3.0", "--out", str(reference), "--backend", "inline", "--no-progress",
             "--video-file-size-mb", "50")
    assert r.returncode == 2
    assert "was started with other settings" in r.stderr and "Traceback" not in r.stderr


def test_convert_both_ways_in_process(small_v21: Path, tmp_path: Path) -> None:
    """The command's main path on the inline engine (the fast tier): v2.1 -> v3.0 -> v2.1, each verified by
    the command itself, the round trip giving back the episodes and their metadata files."""
    v30, back = tmp_path / "v30", tmp_path / "back"
    r = prep("convert", small_v21, "--to", "v3.0", "--out", v30, backend="inline", progress=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verify    PASSED: 7 of 7 episodes pass" in r.stdout, r.stdout
    assert json.loads((v30 / "meta/info.json").read_text())["codebase_version"] == "v3.0"
    r = prep("convert", v30, "--to", "v2.1", "--out", back, backend="inline", progress=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verify    PASSED: 7 of 7 episodes pass" in r.stdout, r.stdout
    for rel in ("meta/episodes.jsonl", "meta/tasks.jsonl", "meta/episodes_stats.jsonl"):
        assert (back / rel).read_bytes() == (small_v21 / rel).read_bytes(), rel
    info, info_back = (json.loads((r / "meta/info.json").read_text()) for r in (small_v21, back))
    assert (info_back["total_episodes"], info_back["total_frames"]) == (info["total_episodes"], info["total_frames"])


def test_a_running_conversion_holds_the_lock(v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with exclusive_lock(out / "prep/output.lock", f"output {out}"):
        r = prep("convert", str(v21), "--to", "v3.0", "--out", str(out), "--backend", "inline", "--no-progress")
    assert r.returncode == 2 and "is in use by another prep run" in r.stderr
    assert not (out / "meta").exists()


def test_off_keyframe_v30_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = SynthSpec(version="v3.0", episodes=3, frames=45, height=48, width=64, gop=90, cameras=CAMS,
                     episodes_per_file=3)
    src = write_synthetic(tmp_path / "v30", spec)
    r = prep("convert", str(src), "--to", "v2.1", "--out", str(tmp_path / "out"), "--backend", "inline",
             "--no-progress")
    assert r.returncode == 2, r.stdout
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("prep convert: error: 2 episode(s) cannot be cut out exactly by a stream copy: 0, 1")
    assert "use `prep reencode --format v2.1` instead" in line


def test_same_format_and_bad_source_are_one_line(v21: Path, tmp_path: Path) -> None:
    r = prep("convert", str(v21), "--to", "v2.1", "--out", str(tmp_path / "o"), "--backend", "inline")
    assert r.returncode == 2 and "the dataset already is v2.1" in r.stderr and "Traceback" not in r.stderr
    r = prep("convert", str(tmp_path / "nothing"), "--to", "v3.0", "--backend", "inline")
    assert r.returncode == 2 and "no such dataset folder" in r.stderr


def test_bad_metadata_is_refused_before_anything_is_written(v21: Path, tmp_path: Path) -> None:
    """A truncated last line of episodes_stats.jsonl (read only when the metadata is written, after every
    video and parquet) is found by the metadata check first: nothing is written, not even the output folder."""
    import shutil

    src = tmp_path / "bad"
    shutil.copytree(v21, src)
    stats = src / "meta/episodes_stats.jsonl"
    lines = stats.read_text().splitlines()
    stats.write_text("\n".join([*lines[:-1], lines[-1][:40]]) + "\n")
    out = tmp_path / "out"
    r = prep("convert", str(src), "--to", "v3.0", "--out", str(out), "--backend", "inline", "--no-progress")
    assert r.returncode == 2, r.stdout
    problem, tail = r.stderr.strip().splitlines()
    assert problem.startswith(f"prep convert: error: {stats}:{len(lines)}: line is not JSON"), problem
    assert tail == f"prep convert: error: {src}: 1 metadata problem; nothing was started: fix the metadata and rerun"
    assert not out.exists()


def _final_outputs(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file() and TEMP_MARK not in p.name
            and p.relative_to(out).parts[0] in ("videos", "data")]


@pytest.mark.slow
@pytest.mark.cluster
def test_killed_conversion_redoes_only_unfinished_files(v21: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    cmd = prep_cmd("convert", v21, "--to", "v3.0", "--out", out, "--workers", "2", "--batch", "1", "--no-progress",
                   "--no-verify", *SMALL)
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    total = sum(1 for _ in _final_outputs(reference))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and len(_final_outputs(out)) < 3:
            time.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = {p.relative_to(out).as_posix() for p in _final_outputs(out)}
    if (out / "meta/info.json").exists() or len(done) >= total:
        pytest.skip("the conversion finished before the kill (machine too fast for this corpus)")
    ref = tree(reference)
    for rel in done:  # a file under its final name is complete
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == ref[rel], rel
    r = prep("convert", str(v21), "--to", "v3.0", "--out", str(out), "--workers", "2", "--no-progress", *SMALL)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "prep/convert_report.json").read_text())
    assert report["kept"] == len(done) and report["written"] == report["files"] - len(done)
    assert set(report["written_files"]).isdisjoint(done)
    assert tree(out) == ref
    assert not list(out.rglob(f"*{TEMP_MARK}*"))
