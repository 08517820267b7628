"""scripts/setup.sh and scripts/python.sh: the disk check before a large download, and prep's own last line
when pip fails (which package, likely cause). The torch fallback and the apt installs are proved for real by
.ci/run in a brand-new Debian 12 root (docs/development.md, CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")]


def sourced(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` in bash with scripts/python.sh sourced (set -euo pipefail, as setup.sh runs it)."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/python.sh; {script}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path), **env})


def free_gb(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 2**30


def test_need_space_stops_with_one_line_naming_what_and_where(tmp_path: Path) -> None:
    need = int(free_gb(tmp_path)) + 1000
    res = sourced(f'prep_need_space {need} "{tmp_path}/not/yet/made" "torch (CUDA build)"; echo after', tmp_path)
    assert res.returncode == 1
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("[setup] error: not enough free disk for torch (CUDA build): ")
    assert f"needs ~{need} GB in {tmp_path.resolve()}" in lines[0]  # the nearest existing folder
    assert "full bash scripts/test.sh needs" in lines[0]


def test_need_space_passes_when_there_is_room(tmp_path: Path) -> None:
    res = sourced(f'prep_need_space 0.001 "{tmp_path}" "a small thing"; echo after', tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "after\n"


def test_pip_failure_ends_with_prep_line_naming_package_and_network(tmp_path: Path) -> None:
    """A real pip run against an index nobody listens on (a closed local port)."""
    res = sourced(f'prep_pip "{sys.executable}" "the thing" install --isolated --no-cache-dir '
                  '--index-url http://127.0.0.1:9/simple prep-no-such-package; echo after', tmp_path)
    assert res.returncode == 1
    assert "after" not in res.stdout
    last = res.stderr.splitlines()[-1]
    assert last.startswith("[setup] error: pip could not install prep-no-such-package: likely cause: network"), last
    assert list(tmp_path.iterdir()) == [], "pip's log left behind"


CAUSES = {
    # pip's own lines, as pip prints them in each case
    "disk": ("Collecting torch==2.13.0\n  Downloading torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl (915.4 MB)\n"
             "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"),
    "compiler": ("Building wheels for collected packages: evdev\n  Building wheel for evdev (pyproject.toml): "
                 "finished with status 'error'\n  error: subprocess-exited-with-error\n"
                 "      src/evdev/input.c:10:10: fatal error: Python.h: No such file or directory\n"
                 "      error: command '/usr/bin/x86_64-linux-gnu-gcc' failed with exit code 1\n"
                 "  ERROR: Failed building wheel for evdev\nFailed to build evdev\n"
                 "ERROR: Failed to build installable wheels for some pyproject.toml based projects (evdev)\n"),
    "no build": ("ERROR: Could not find a version that satisfies the requirement lerobot==9.9.9 "
                 "(from versions: 0.1.0)\n"
                 "ERROR: No matching distribution found for lerobot==9.9.9\n"),
    "network: TLS": ("WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] "
                     "certificate verify failed: self-signed certificate in certificate chain'))': /simple/av/\n"
                     "ERROR: No matching distribution found for av\n"),
}


@pytest.mark.parametrize("cause,package", [("disk", "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
                                           ("compiler", "evdev"), ("no build", "lerobot"),
                                           ("network: TLS", "av")])
def test_pip_cause_names_package_and_cause(tmp_path: Path, cause: str, package: str) -> None:
    log = tmp_path / "pip.log"
    log.write_text(CAUSES[cause])
    res = sourced(f'prep_pip_cause "{log}" "what was asked"', tmp_path)
    assert res.returncode == 0, res.stderr
    first = {"disk": "the disk is full", "compiler": "compiler", "no build": "no build of it",
             "network: TLS": "network: TLS certificates"}[cause]
    assert res.stdout == res.stdout.splitlines()[0] + "\n"
    assert res.stdout.startswith(f"pip could not install {package}: likely cause: {first}"), res.stdout


def test_setup_stops_before_installing_when_the_disk_is_short(tmp_path: Path) -> None:
    """scripts/setup.sh in a copy of the project: the venv is made, then the space check before the first pip
    install stops it with one line (PREP_NEED_SPACE_SCALE multiplies every figure), nothing installed."""
    work = tmp_path / "prep"
    work.mkdir()
    shutil.copytree(ROOT / "scripts", work / "scripts")
    shutil.copy(ROOT / "pyproject.toml", work)
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env.update(PREP_NEED_SPACE_SCALE=str(int(free_gb(tmp_path)) + 1000), TMPDIR=str(tmp_path),
               PYTHON=getattr(sys, "_base_executable", sys.executable))
    res = subprocess.run(["bash", "scripts/setup.sh"], cwd=work, capture_output=True, text=True, timeout=300,
                         env=env, check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    err = res.stderr.splitlines()
    assert len(err) == 1, res.stderr
    assert err[0].startswith("[setup] error: not enough free disk for prep's dependencies"), res.stderr
    assert "installing prep" not in res.stdout
    assert (work / ".venv/bin/python").exists()
    assert not list((work / ".venv").glob("lib/python3*/site-packages/dask"))
