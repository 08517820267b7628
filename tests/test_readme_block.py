"""The README's "Prepare your own corpus" block runs top to bottom as written (issue 36): from a folder that holds
what the clone holds (examples/ and the set-up's .venv), in one bash, `set -e`. CI runs it in the fresh Debian 12
root after `bash scripts/test.sh`'s set-up, so its pip line finds torch and prep already there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def readme_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Prepare your own corpus", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert m, "the README's 'Prepare your own corpus' section has no bash block"
    return m.group(1)


def test_the_block_names_six_prep_commands() -> None:
    commands = [line.split()[1] for line in readme_block().splitlines() if line.startswith("prep ")]
    assert commands == ["scan", "verify", "reencode", "verify", "budget", "bench"]


@pytest.mark.skipif(not Path(sys.prefix, "bin", "activate").is_file(), reason="not run from a virtual environment "
                    "(the block starts with `source .venv/bin/activate`)")
def test_the_block_runs_top_to_bottom(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="command 6 needs PyTorch; scripts/test.sh installs it")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the set-up's environment, where the block expects it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONPATH=str(REPO))  # prep of this checkout, in the venv
    r = subprocess.run(["bash", "-e", "-c", readme_block()], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    work = tmp_path / "out" / "walkthrough"
    assert (work / "manifests" / "g1_inspire_v21.manifest.json").is_file()
    assert (work / "g1_inspire_v21_224" / "meta" / "info.json").is_file()
    assert (work / "reports" / "verify_224.json").is_file()
    assert "PASSED" in r.stdout
