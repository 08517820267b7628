"""SIGINT and SIGTERM to a running `prep reencode` (its own LocalCluster of 2 workers): the run stops with one
line (exit 130 / 143), no traceback from prep or Dask, every process of its group gone, no temp file and no
lock left, no file under a final name that is not complete and correct; the same command then finishes and
equals the uninterrupted run."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pytest
from support.faults import (
    baseline_digest,
    check_source,
    corpus,
    digest_diff,
    final_videos,
    output_digest,
    prep,
    reencode_args,
    scenario,
    snapshot,
    start_prep,
    temp_files,
    unsound_final_files,
    wait_group_gone,
    wait_until,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

CASES = [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]


@pytest.mark.parametrize(("sig", "code", "word"), CASES, ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_stops_cleanly_and_resumes(sig: signal.Signals, code: int, word: str, tmp_path: Path) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario(f"{sig.name} to reencode mid-run (2 workers)",
                  f"exit {code}, '{word}; finished files are kept in OUT' and the exact command to rerun, no "
                  "traceback, no process left, no temp file or lock; rerun completes = clean run") as row:
        run = start_prep(*reencode_args(src, out, workers=2), log=tmp_path / "run.log")
        assert wait_until(lambda: len(final_videos(out)) >= 1, timeout=240, proc=run, interval=0.01), run.output()
        run.proc.send_signal(sig)  # the prep process only, as a shell's kill or a scheduler's stop does
        rc = run.wait()
        text = run.output()
        row.details["log"] = text[-2000:]
        left = wait_group_gone(run.pid)
        assert not left, f"processes of the group left after {sig.name}: {left}"
        assert "Traceback" not in text, text
        assert rc == code, f"exit {rc}\n{text}"
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("[engine]")]
        assert len(lines) == 3, lines  # what happened and what is kept; how to resume; the exact command
        assert lines[0] == f"prep reencode: {word}; finished files are kept in {out.absolute()}", lines
        assert lines[1].startswith("prep reencode: to resume: rerun the same command (from "), lines
        assert lines[2].strip().endswith(shlex.join(reencode_args(src, out, workers=2))), lines
        assert not temp_files(out), temp_files(out)
        assert not (out / "prep/output.lock").exists()
        unsound = unsound_final_files(reference, out)
        row.files_lost = len(unsound)
        assert not unsound, unsound
        done = len(final_videos(out))
        r = prep(*reencode_args(src, out, workers=2))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        diff = digest_diff(reference, output_digest(out))
        assert not any(diff.values()), diff
        check_source(row, before, src)
        row.observed = (f"exit {rc}: '{lines[0]}'; {done} videos complete, no process, temp file or lock left; "
                        "rerun exit 0 = clean run")
