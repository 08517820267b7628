"""docs/cluster.md's recipes run as written: each ```bash block after `<!-- recipe: NAME -->`, from the checkout
root (they copy examples/g1_inspire_v21), with `prep` on PATH as after `source .venv/bin/activate`, and only the
machine-specific words substituted: the shared folder ($HOME/prep-cluster -> a temp folder), the partition
(`cpu` -> the test SLURM's) and the scheduler's ports (8786, 8787 -> free ones).

- `slurm`: on a single-node SLURM (tests/support/slurm.py; the test skips where it cannot start): every command
  exits 0, the re-encoded output verifies, and squeue lists no job afterwards;
- `dask`: `dask scheduler` + `dask worker` in the background, prep at `--scheduler`, then the `kill`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cluster import free_port
from support.slurm import PARTITION, single_node_slurm, skip_reason

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cluster.md"
RECIPE = re.compile(r"<!-- recipe: (\w+) -->\s*\n```bash\n(.*?)\n```", re.S)


def recipes(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in RECIPE.finditer(text)}


def prep_on_path(where: Path) -> dict[str, str]:
    """The environment of a shell with .venv activated: this checkout's prep, and dask, on PATH."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    prep = bin_dir / "prep"
    prep.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m pipeline.cli \"$@\"\n")
    prep.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "HOME": str(where / "home")}


def run_block(block: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The block in one `bash -e`, in its own session; whatever it left running (a background scheduler) is ended."""
    proc = subprocess.Popen(["bash", "-ec", block], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_page_has_both_recipes() -> None:
    found = recipes(PAGE.read_text(encoding="utf-8"))
    assert set(found) == {"slurm", "dask"}, sorted(found)
    assert "--cluster slurm --slurm-partition cpu" in found["slurm"] and "squeue --me" in found["slurm"]
    assert "--scheduler tcp://127.0.0.1:8786" in found["dask"] and "kill $WORKER $SCHEDULER" in found["dask"]
    for block in found.values():
        assert "$HOME/prep-cluster" in block and "/tmp" not in block


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.cluster
@pytest.mark.slow
def test_slurm_recipe_runs_as_written(tmp_path: Path) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(f"no single-node SLURM here: {reason}")
    block = recipes(PAGE.read_text(encoding="utf-8"))["slurm"]
    shared = tmp_path / "shared"
    block = block.replace("$HOME/prep-cluster", str(shared)).replace("--slurm-partition cpu",
                                                                     f"--slurm-partition {PARTITION}")
    with single_node_slurm() as slurm:
        env = {**prep_on_path(tmp_path), "SLURM_CONF": slurm.env["SLURM_CONF"]}
        r = run_block(block, env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert not slurm.squeue(), slurm.squeue()
    assert "verify    PASSED" in r.stdout or "PASSED" in r.stdout, r.stdout[-2000:]
    assert (shared / "g1_224" / "meta" / "info.json").is_file() and (shared / "g1.manifest.json").is_file()
    assert list((shared / "g1_224" / "prep" / "slurm").glob("*/job.sh"))
    assert list((shared / "g1.manifest.json.slurm").glob("*/jobs.json"))
    assert r.stdout.rstrip().splitlines()[-1].split()[:4] == ["JOBID", "PARTITION", "NAME", "USER"], r.stdout[-500:]


@pytest.mark.slow
def test_dask_recipe_runs_as_written(tmp_path: Path) -> None:
    block = recipes(PAGE.read_text(encoding="utf-8"))["dask"]
    shared = tmp_path / "shared"
    block = block.replace("$HOME/prep-cluster", str(shared)).replace("8786", str(free_port())).replace(
        "8787", str(free_port()))
    r = run_block(block, prep_on_path(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + (shared / "worker.log").read_text()[-2000:]
    assert "files     2 video files: 2 encoded" in r.stdout, r.stdout
    assert (shared / "g1_224_dask" / "meta" / "info.json").is_file()
