"""One lock per output folder for every command: `prep convert X --out OUT` started while `prep reencode X --out
OUT` runs (and the reverse) is refused with one line naming the holder's command, pid and start time, and the
first run finishes unharmed (its output equals a clean run's, it verifies). Two real processes. The lock's API
(`pipeline.jobs.output.output_lock`) is re-entrant in one process and refuses another."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.faults import (
    baseline_digest,
    check_source,
    corpus,
    digest_diff,
    output_digest,
    prep,
    reencode_args,
    scenario,
    snapshot,
    start_prep,
    wait_until,
)
from support.locks import holder
from support.safety import INLINE, OTHER, Watch, record_outcome, refused, run

from pipeline.jobs.output import LOCK_REL, output_lock, refuse_busy
from pipeline.lock import LockedError

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]


def test_convert_while_reencode_runs_is_refused(tmp_path: Path) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario("lock: prep convert into an output a running prep reencode holds (two processes)",
                  "convert refused (exit 2, one line: holder's command, pid, start); reencode exit 0, output as a "
                  "clean run, verify passes") as row:
        first = start_prep(*reencode_args(src, out), log=tmp_path / "reencode.log")
        assert wait_until(lambda: holder(out / LOCK_REL).get("pid") == first.pid, timeout=180, proc=first), \
            first.output()[-2000:]
        watch = Watch(tmp_path, allowed=[out, tmp_path / "reencode.log"])
        second = run(row, "convert", str(src), "--to", OTHER["v21"], "--out", str(out), *INLINE)
        still_running = first.proc.poll() is None
        assert still_running, "the reencode ended before convert was tried: the test proves nothing"
        h = holder(out / LOCK_REL)
        line = refused(second, "convert", "in use by another prep run", "prep reencode", f"pid {first.pid}",
                       f"since {h['started_utc']}")
        assert str(src) in line  # the holder's whole command line
        assert first.wait() == 0, first.output()[-3000:]
        diff = digest_diff(reference, output_digest(out))
        row.files_lost = len(diff["missing"]) + len(diff["different"])
        assert not any(diff.values()), diff
        v = prep("verify", str(out), "--all-intra", "--size", "224x224", *INLINE)
        assert v.returncode == 0, v.stdout + v.stderr
        assert not (out / LOCK_REL).exists()
        outside = record_outcome(row, watch, tmp_path)
        assert not outside and not row.temps_left, outside
        check_source(row, before, src)


def test_reencode_while_convert_runs_is_refused(tmp_path: Path) -> None:
    src = corpus("v30")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario("lock: prep reencode into an output a running prep convert holds (two processes)",
                  "reencode refused (exit 2, one line naming `prep convert` and its pid); convert exit 0") as row:
        first = start_prep("convert", str(src), "--to", OTHER["v30"], "--out", str(out), "--workers", "1",
                           "--no-progress", log=tmp_path / "convert.log")
        assert wait_until(lambda: holder(out / LOCK_REL).get("pid") == first.pid, timeout=180, proc=first), \
            first.output()[-2000:]
        watch = Watch(tmp_path, allowed=[out, tmp_path / "convert.log"])
        # the convert (and its workers) frozen while reencode is tried: on a fast machine it could otherwise end first
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            second = run(row, *reencode_args(src, out))
            assert first.proc.poll() is None, "the convert ended before reencode was tried: the test proves nothing"
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        refused(second, "reencode", "in use by another prep run", "prep convert", f"pid {first.pid}")
        assert first.wait() == 0, first.output()[-3000:]
        assert (out / "meta/info.json").is_file() and not (out / LOCK_REL).exists()
        outside = record_outcome(row, watch, tmp_path)
        assert not outside and not row.temps_left, outside
        check_source(row, before, src)


HOLD = """
import sys, time
from pathlib import Path
from pipeline.jobs.output import output_lock
with output_lock(Path(sys.argv[1]), "prep edit X --out OUT"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_output_lock_api_one_lock_for_any_command(tmp_path: Path) -> None:
    """`output_lock(out, command)` as a later command (e.g. `prep edit`) uses it: re-entrant in the holding
    process, refused in another (LockedError naming the holder's command), released at exit."""
    out = tmp_path / "out"
    with scenario("lock API: output_lock re-entrant in one process, refused from another",
                  "nested hold works; another process gets LockedError naming `prep edit`") as row:
        with output_lock(out, "prep edit X --out OUT") as path, output_lock(out, "prep convert"):
            refuse_busy(out)  # this process holds it: not refused
            assert path == out / LOCK_REL and holder(out / LOCK_REL)["command"] == "prep edit X --out OUT"
            probe = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                                    "from pipeline.jobs.output import refuse_busy; refuse_busy(Path(sys.argv[1]))",
                                    str(out)], capture_output=True, text=True, timeout=120)
            assert probe.returncode != 0 and "LockedError" in probe.stderr and "prep edit X --out OUT" in probe.stderr
        assert not (out / LOCK_REL).exists()
        other = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == "held"
            with pytest.raises(LockedError, match=r"prep edit X --out OUT.*pid \d+"):
                refuse_busy(out)
            with pytest.raises(LockedError), output_lock(out, "prep reencode"):
                pass
        finally:
            other.kill()
            other.wait()
        with output_lock(out, "prep reencode"):  # a dead holder's lock is taken over
            pass
        row.observed = "re-entrant; refused from another process; taken over after the holder died"
