"""The output lock: a second concurrent `prep reencode` into the same output is refused, naming the
live holder, without disturbing the first run; a lock left by a dead holder is cleared. (The
SIGKILL scenarios also leave a stale lock behind on every kill; their reruns prove it is cleared
in a partly done output.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.faults import (
    baseline,
    baseline_digest,
    check_source,
    corpus,
    count_line,
    digest_diff,
    output_digest,
    prep,
    reencode_args,
    scenario,
    short_paths,
    snapshot,
    start_prep,
    temp_files,
    wait_until,
)
from support.locks import LOCK_REL, holder, stale_lock

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

def test_second_concurrent_run_refused(tmp_path: Path) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    args = reencode_args(src, out)
    with scenario("lock: second concurrent reencode into the same output",
                  "second run refused (exit 2, names the live holder's pid), first run unaffected and equals "
                  "the clean run") as row:
        first = start_prep(*args, log=tmp_path / "first.log")
        assert wait_until(lambda: holder(out / LOCK_REL).get("pid") == first.pid, timeout=120, proc=first), \
            first.output()[-2000:]
        second = prep(*args)
        still_running = first.proc.poll() is None
        row.observed = f"second: exit {second.returncode}: {short_paths(second.stderr.strip())[:200]}"
        assert still_running, "the first run ended before the second was tried: the test proves nothing"
        assert second.returncode == 2, second.stdout + second.stderr
        assert "in use by another prep run" in second.stderr and f"pid {first.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert first.wait() == 0, first.output()[-3000:]
        diff = digest_diff(reference, output_digest(out))
        row.files_lost = len(diff["missing"]) + len(diff["different"])
        assert not any(diff.values()), diff
        assert not temp_files(out) and not (out / LOCK_REL).exists()
        check_source(row, before, src)
        row.observed += "; first run: exit 0, output equals the clean run"


def test_stale_lock_in_partial_output_cleared(tmp_path: Path) -> None:
    """A dead run's lock in an output it had started (options.json and 3 videos in place, each with the
    sidecar a run writes before renaming a video into place: it names the source the video was made from)."""
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    (out / "prep").mkdir(parents=True)
    shutil.copyfile(baseline("v21") / "prep/options.json", out / "prep/options.json")
    videos = sorted(baseline("v21").rglob("*.mp4"))[:3]
    for v in videos:
        rel = v.relative_to(baseline("v21"))
        sidecar = f"prep/stats/{rel}.json"
        for a, b in ((v, out / rel), (baseline("v21") / sidecar, out / sidecar)):
            b.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(a, b)
    with scenario("lock: stale lock (holder pid dead) in a partly done output",
                  "lock cleared; run completes keeping the 3 done videos; equals the clean run") as row:
        pid = stale_lock(out)
        r = prep(*reencode_args(src, out))
        row.observed = f"holder pid {pid} dead; exit {r.returncode}; {r.stdout.splitlines()[3] if r.stdout else ''}"
        assert r.returncode == 0, r.stdout + r.stderr
        assert count_line(r.stdout).get("kept") == 3, r.stdout
        assert not (out / LOCK_REL).exists()
        diff = digest_diff(reference, output_digest(out))
        assert not any(diff.values()), diff
        check_source(row, before, src)


def test_stale_lock_in_fresh_output_cleared(tmp_path: Path) -> None:
    """The state a run killed right after taking its lock leaves: out/prep/output.lock and nothing else."""
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario("lock: stale lock (holder pid dead) in an output that holds nothing else",
                  "lock cleared; run completes; equals the clean run") as row:
        pid = stale_lock(out)
        r = prep(*reencode_args(src, out))
        row.observed = f"holder pid {pid} dead; exit {r.returncode}" + (f": {r.stderr.strip()[:200]}" if r.returncode
                                                                         else "; run completed")
        check_source(row, before, src)
        assert "Traceback" not in r.stderr
        assert r.returncode == 0, f"a dead run's lock blocks the rerun: {r.stderr.strip()[:300]}"
        diff = digest_diff(reference, output_digest(out))
        assert not any(diff.values()), diff
        assert not (out / LOCK_REL).exists()
