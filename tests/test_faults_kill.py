"""SIGKILL of `prep reencode` (its whole process group: the client and its LocalCluster workers) at
several points, then the same command again: the output must equal an uninterrupted run's (decoded
frames, metadata bytes), pass `prep verify --all-intra --size 224x224`, hold no temp files, and no
process of the killed run may survive. At the moment of the kill, every file under its final name
must already be exactly the reference's (a killed run never leaves a half-written file that looks
finished), and the rerun must redo only what was unfinished.

The reencode engineer's own tests cover one kill mid-run on the synthetic corpus; these add the
distinct points (during an encode, between files, while the metadata is written, at random
delays), both layouts, the crash-time invariant and the orphan check.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.faults import (
    BASELINE_SECONDS,
    TEMP_MARK,
    Row,
    Running,
    baseline_digest,
    check_source,
    corpus,
    count_line,
    digest_diff,
    final_videos,
    kill_group,
    known_bug,
    output_digest,
    prep,
    reencode_args,
    scenario,
    snapshot,
    start_prep,
    step_until,
    temp_files,
    unsound_final_files,
    wait_group_gone,
    wait_until,
)

from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

LOCK_REL = "prep/output.lock"


def encoding(out: Path) -> bool:
    """A temp video exists and has bytes: an encode is in progress."""
    return any(p.stat().st_size > 0 for p in (out / "videos").rglob(f"*{TEMP_MARK}*")) if (out / "videos").exists() \
        else False


def between_files(out: Path) -> bool:
    """At least two videos are in place and no temp video exists (one worker: between two files)."""
    vids = out / "videos"
    return vids.exists() and len(final_videos(out)) >= 2 and not any(vids.rglob(f"*{TEMP_MARK}*"))


def writing_metadata(out: Path) -> bool:
    """The rewritten metadata is being written (episodes_stats.jsonl, or its temp, exists), info.json not yet."""
    meta = out / "meta"
    return meta.exists() and any("episodes_stats" in p.name for p in meta.iterdir()) \
        and not (meta / "info.json").exists()


def writing_v30_episodes(out: Path) -> bool:
    return (out / "meta/episodes").exists() and not (out / "meta/info.json").exists()


# Runs `prep` with pipeline.atomic.atomic_path wrapped so that the process group SIGKILLs itself once
# the file whose path ends with argv[1] is written under its temp name and not yet renamed: the
# worst moment of a metadata write, hit deterministically (a timing-based kill can miss a ~2 ms window).
KILL_ON_WRITE = """
import contextlib, os, signal, sys
import pipeline.atomic as atomic
target, original = sys.argv[1], atomic.atomic_path

@contextlib.contextmanager
def atomic_path(path, *args, **kwargs):
    with original(path, *args, **kwargs) as tmp:
        yield tmp
        if path.as_posix().endswith(target):
            os.killpg(0, signal.SIGKILL)

atomic.atomic_path = atomic_path
from pipeline.cli import main
sys.exit(main(sys.argv[2:]))
"""


def start_killed_on_write(target: str, args: list[str], log: Path) -> Running:
    cmd = [sys.executable, "-c", KILL_ON_WRITE, target, *args]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    return Running(proc, log)


def kill_and_resume(row: Row, name: str, tmp_path: Path, trigger: Callable[[Path], bool] | None,
                    delay_s: float | None = None, cli_verify: bool = True, sig: signal.Signals = signal.SIGKILL,
                    engine: str = "pyav", step_from: Callable[[Path], bool] | None = None,
                    kill_on_write: str | None = None) -> str:
    """Signal the run's whole process group at the trigger (or after `delay_s`), check the state it
    left, rerun, check the result; returns the killed run's output. With `step_from`, the run goes
    freely until `step_from` holds, then in sub-millisecond bursts between SIGSTOPs until `trigger`
    holds while frozen (for a state too brief to catch by polling)."""
    src = corpus(name)
    reference = baseline_digest(name, engine)
    before = snapshot(src)
    out = tmp_path / "out"
    args = reencode_args(src, out, "--engine", engine, workers=1)
    if kill_on_write is not None:
        run = start_killed_on_write(kill_on_write, args, log=tmp_path / "killed.log")
        run.proc.wait(timeout=240)
        assert run.proc.returncode == -signal.SIGKILL, f"not killed at the write point:\n{run.output()[-2000:]}"
        assert trigger is None or trigger(out), f"killed, but not while writing:\n{run.output()[-2000:]}"
    elif trigger is not None and step_from is not None:
        run = start_prep(*args, log=tmp_path / "killed.log")
        ready = wait_until(lambda: step_from(out), timeout=240, proc=run)
        assert ready, f"the run never reached the stepping point:\n{run.output()[-2000:]}"
        hit = step_until(run, lambda: trigger(out))
        assert hit, f"the kill point was never reached (run exited {run.proc.poll()}):\n{run.output()[-2000:]}"
    elif trigger is not None:
        run = start_prep(*args, log=tmp_path / "killed.log")
        hit = wait_until(lambda: trigger(out), timeout=240, proc=run)
        assert hit, f"the kill point was never reached (run exited {run.proc.poll()}):\n{run.output()[-2000:]}"
    else:
        assert delay_s is not None
        run = start_prep(*args, log=tmp_path / "killed.log")
        wait_until(lambda: False, timeout=delay_s, proc=run)
    finished_first = run.proc.poll() is not None
    if sig == signal.SIGKILL:
        kill_group(run.proc)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, sig)
        try:
            row.details["exit"] = run.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_group(run.proc)
            raise AssertionError(f"prep did not exit within 60 s of {sig.name}") from None
    orphans = wait_group_gone(run.pid)
    finals, temps = final_videos(out), temp_files(out)
    state: dict[str, object] = {"videos_in_place": len(finals), "temps": len(temps),
             "info_json": (out / "meta/info.json").exists(), "lock_left": (out / LOCK_REL).exists(),
             "finished_before_kill": finished_first}
    meta = sorted(p.relative_to(out).as_posix() for p in (out / "meta").rglob("*") if p.is_file()) \
        if (out / "meta").exists() else []
    state["meta"] = meta
    row.details["at_kill"] = state
    row.observed = (f"killed with {len(finals)}/{sum(1 for k in reference if k.endswith('.mp4'))} videos in place, "
                    f"{len(temps)} temp files, info.json {'present' if state['info_json'] else 'absent'}"
                    + (f", meta/ held {', '.join(m.removeprefix('meta/') for m in meta)}" if meta and not
                       state["info_json"] else ""))
    assert not orphans, f"processes of the killed run survived: {orphans}"
    unsound = unsound_final_files(reference, out)
    assert not unsound, f"files under their final name that are not complete and correct at kill time: {unsound}"

    rerun = prep(*args)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    counts = count_line(rerun.stdout)
    assert counts.get("kept") == len(finals), f"rerun kept {counts}, {len(finals)} were complete at the kill"
    assert counts.get("encoded") == counts["files"] - len(finals), counts
    left = temp_files(out)
    assert not left, f"temp files left behind: {left}"
    assert not (out / LOCK_REL).exists(), "lock file left after a finished rerun"

    if cli_verify:
        v = prep("verify", str(out), "--all-intra", "--size", "224x224", "--workers", "1", "--no-progress")
        assert v.returncode == 0 and "PASSED" in v.stdout, v.stdout + v.stderr
        verified = "prep verify --all-intra --size 224x224 passed"
    else:  # the same checks without starting a LocalCluster
        report = verify_in_process(out, VerifyOptions(size=(224, 224), all_intra=True))
        assert report.passed, [f.line() for f in report.failures[:5]]
        verified = "verify (all-intra, 224x224, in-process) passed"
    diff = digest_diff(reference, output_digest(out))
    row.files_lost = len(diff["missing"]) + len(diff["different"])
    assert not any(diff.values()), f"output differs from the uninterrupted run: {diff}"
    check_source(row, before, src)
    row.observed += (f"; rerun: {counts['encoded']} encoded, {counts['kept']} kept, {verified}, "
                     "frames+metadata equal the uninterrupted run, 0 temp files, 0 orphans, source unchanged")
    return run.output()


EXPECT = ("at the kill, every final-named file complete; no orphans; rerun redoes only the unfinished, equals the "
          "uninterrupted run (frames, metadata), passes verify; no temp files; source unchanged")


def test_kill_during_encode_v21(tmp_path: Path) -> None:
    with scenario("SIGKILL during an encode (v2.1)", EXPECT) as row:
        kill_and_resume(row, "v21", tmp_path, encoding)


def test_kill_between_files_v21(tmp_path: Path) -> None:
    with scenario("SIGKILL between two files (v2.1)", EXPECT) as row:
        kill_and_resume(row, "v21", tmp_path, between_files, cli_verify=False)


def test_kill_while_writing_metadata_v21(tmp_path: Path) -> None:
    with scenario("SIGKILL while writing metadata (v2.1: episodes_stats, before info.json)", EXPECT) as row:
        kill_and_resume(row, "v21", tmp_path, writing_metadata, cli_verify=False,
                        kill_on_write="meta/episodes_stats.jsonl")


def test_kill_while_writing_metadata_v30(tmp_path: Path) -> None:
    with scenario("SIGKILL while writing episodes metadata (v3.0)", EXPECT) as row:
        kill_and_resume(row, "v30", tmp_path, writing_v30_episodes,
                        kill_on_write="meta/episodes/chunk-000/file-000.parquet")


def test_kill_during_encode_v30(tmp_path: Path) -> None:
    with scenario("SIGKILL during an encode (v3.0, multi-episode files)", EXPECT) as row:
        kill_and_resume(row, "v30", tmp_path, encoding, cli_verify=False)


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_at_random_delay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    name = "v21" if seed % 2 else "v30"
    baseline_digest(name)  # builds the reference and times an uninterrupted run
    delay = round(rng.uniform(0.2, 0.6) * BASELINE_SECONDS[f"{name}/pyav"], 2)
    with scenario(f"SIGKILL at a random delay ({name}, {delay} s after start)", EXPECT) as row:
        kill_and_resume(row, name, tmp_path, None, delay_s=delay, cli_verify=False)


def test_kill_during_encode_ffmpeg_engine(tmp_path: Path) -> None:
    """--engine ffmpeg: the ffmpeg child processes die with the group too (no orphans)."""
    with scenario("SIGKILL during an encode, --engine ffmpeg (v2.1)", EXPECT + "; no ffmpeg left") as row:
        kill_and_resume(row, "v21", tmp_path, encoding, cli_verify=False, engine="ffmpeg")


def test_sigterm_group_then_rerun(tmp_path: Path) -> None:
    """SIGTERM to the process group, as a batch scheduler's preemption sends it."""
    with scenario("SIGTERM to the process group during an encode (preemption)", EXPECT) as row:
        kill_and_resume(row, "v21", tmp_path, encoding, cli_verify=False, sig=signal.SIGTERM)
        row.observed = f"exit {row.details['exit']}; " + row.observed


def test_sigint_group_then_rerun(tmp_path: Path) -> None:
    """Ctrl-C in a terminal: SIGINT to the foreground process group (the CLI and its workers)."""
    with scenario("Ctrl-C (SIGINT to the process group) during an encode",
                  "exit 130 with 'interrupted' and no traceback; " + EXPECT) as row:
        output = kill_and_resume(row, "v21", tmp_path, encoding, cli_verify=False, sig=signal.SIGINT)
        row.observed = f"exit {row.details['exit']}; " + row.observed
        assert row.details["exit"] == 130 and "prep reencode: interrupted" in output, output[-2000:]
        tracebacks = output.count("Traceback (most recent call last)")
        row.observed += f"; {tracebacks} Python tracebacks printed"
        known_bug(tracebacks == 0, f"Ctrl-C printed {tracebacks} tracebacks from the Dask workers")
