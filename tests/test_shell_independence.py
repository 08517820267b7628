"""The suite does not depend on the shell that starts it: started in the background from a non-interactive
shell (`nohup bash scripts/test.sh > log &`, where the shell sets SIGINT to "ignored" for the job), the
processes the tests start still get the default signal dispositions (conftest.pytest_configure), so the
Ctrl-C tests (test_faults_kill.py::test_sigint_group_then_rerun, test_faults_signals.py [SIGINT],
test_cli_layout.py [ctrl-c]) test prep, not the shell."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def signal_set(status: str, field: str) -> set[int]:
    """The signals in one mask (SigIgn: ignored, SigBlk: blocked) of a /proc/PID/status text."""
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith(field + ":")), 16)
    return {n for n in range(1, 65) if mask & (1 << (n - 1))}


def ignored_signals(status: str) -> set[int]:
    return signal_set(status, "SigIgn")


def test_a_child_process_starts_with_sigint_and_sigterm_at_default() -> None:
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    assert signal.SIGINT not in ignored_signals(status), "a process started by a test ignores SIGINT"
    assert signal.SIGTERM not in ignored_signals(status), "a process started by a test ignores SIGTERM"
    assert not {signal.SIGINT, signal.SIGTERM} & signal_set(status, "SigBlk"), "SIGINT/SIGTERM blocked in a child"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_pytest_started_in_the_background_by_a_non_interactive_shell(tmp_path: Path) -> None:
    """`python -m pytest ... &` from `bash -c` (no job control: the shell ignores SIGINT in the job); the test
    above, run that way, still sees the default dispositions in the processes it starts."""
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # the premise: bash really starts a background job with SIGINT ignored (else this test proves nothing)
    premise = subprocess.run(["bash", "-c", "cat /proc/self/status > \"$1\" & wait $!", "bash", str(log)],
                             check=True, env=env, start_new_session=True)
    assert premise.returncode == 0 and signal.SIGINT in ignored_signals(log.read_text()), log.read_text()
    node = f"{Path(__file__).relative_to(ROOT)}::test_a_child_process_starts_with_sigint_and_sigterm_at_default"
    script = 'nohup "$1" -m pytest -q -p no:cacheprovider "$2" > "$3" 2>&1 & wait $!'
    res = subprocess.run(["bash", "-c", script, "bash", sys.executable, node, str(log)], cwd=ROOT, env=env,
                         start_new_session=True, timeout=300, check=False)
    assert res.returncode == 0, log.read_text()[-3000:]
    assert "1 passed" in log.read_text(), log.read_text()[-3000:]
