"""Everything in the repository is relative to the checkout: no committed file names a path of the machine it
was written on (a developer's checkout or home, this machine's /opt tool folders, a temp folder recorded in a
result). Checked on the committed files (git's index), so a test run that rewrites a tracked file does not
count until it is committed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# absolute paths of a machine: a checkout or home (anywhere), /opt (but the reader venvs' documented default)
MACHINE = re.compile(r"(?<![\w.~$-])/(?:work|root|home|Users)/[\w.-]+|(?<![\w.~$-])/opt/(?!prep-venvs\b)[\w.-]+")
# a temp path recorded in a result, a committed report or the package's code
TEMP = re.compile(r"(?<![\w.~$-])/tmp/[\w.-]+")
TEMP_CHECKED = ("bench/results/", "manifests/", "pipeline/")
# where a path of this kind is the point, with why
ALLOWED = {
    "Dockerfile": "paths inside the image it builds",
    "tests/test_repo_paths.py": "this test names the patterns",
}
# the walkthrough and README run from a clone: not even the reader venvs' default location
NO_OPT = ("docs/walkthrough.md", "README.md")


def committed_text_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "grep", "--cached", "-I", "-l", "-E", "/(work|root|home|Users|opt|tmp)/"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.splitlines()


def committed(path: str) -> str:
    return subprocess.run(["git", "show", f":{path}"], cwd=ROOT, capture_output=True, text=True, check=True,
                          errors="replace").stdout


def offending(path: str, text: str) -> list[str]:
    found = [m.group(0) for m in MACHINE.finditer(text)]
    if path.startswith(TEMP_CHECKED):
        found += [m.group(0) for m in TEMP.finditer(text)]
    if path in NO_OPT:
        found += re.findall(r"/opt/[\w.-]+", text)
    return found


def test_no_committed_file_names_a_path_of_the_machine_it_was_written_on() -> None:
    bad = {}
    for path in committed_text_files():
        if path in ALLOWED:
            continue
        found = offending(path, committed(path))
        if found:
            bad[path] = sorted(set(found))[:5]
    assert not bad, f"absolute paths of a machine in committed files (make them relative to the checkout): {bad}"


@pytest.mark.parametrize(("path", "text", "found"), [
    ("tests/test_x.py", 'REAL = Path("/work/shared/fixtures/real/g1")', ["/work/shared"]),
    ("bench/results/x.json", '"python": "/root/.pyenv/versions/3.12/bin/python"', ["/root/.pyenv"]),
    ("docs/x.md", "`/opt/ci-venvs/lerobot-v06/bin/python`", ["/opt/ci-venvs"]),
    ("docs/x.md", "`/opt/prep-venvs/lerobot-v21/bin/python`", []),
    ("docs/walkthrough.md", "`/opt/prep-venvs/lerobot-v21/bin/python`", ["/opt/prep-venvs"]),
    ("bench/results/x.json", '"root": "/tmp/pytest-of-root/pytest-3/t0/src"', ["/tmp/pytest-of-root"]),
    ("manifests/demo/x.json", '"root": "<work>/merged"', []),
    ("docs/demo.md", "prep demo --work /tmp/demo", []),
    ("pipeline/x.py", "# see $TMPDIR/prep-x and ~/work/x", []),
])
def test_the_patterns(path: str, text: str, found: list[str]) -> None:
    assert offending(path, text) == found
