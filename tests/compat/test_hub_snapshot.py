"""A Hugging Face hub-cache snapshot (huggingface_hub's exact layout: every file a relative link into the cache
repository's blobs/) through the real reader and through `prep verify --decode`: verify's prediction for this reader
equals what `LeRobotDataset(repo_id, root=<snapshot>)` does with it, for a sound dataset (it loads: issue 34
found verify predicting a refusal, every file being a link) and for one whose video blob is gone (a dangling
link: the reader raises, verify says it refuses).

Runs inside each reader venv (lerobot 0.3.x: v2.1; 0.4.x and 0.6.x: v3.0); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compat_support import reader_of_venv
from parity_cases.model import FORMAT_OF_READER, VENV_OF_READER
from parity_cases.prep_cli import lerobot_prediction
from support.hub import snapshot_of

from pipeline.synth import SynthSpec, write_synthetic

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.lerobot


VENVS = sorted(VENV_OF_READER.values())  # a parameter per reader venv: .ci/compat.sh selects each with -k NAME


def reader_loads(repo_id: str, root: Path) -> tuple[bool, str]:
    """What the reader does: build `LeRobotDataset(repo_id, root=root)` and read every sample (each camera's
    frame decoded). (True, "") when it all works, else (False, the exception)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        ds = LeRobotDataset(repo_id, root=root)
        for i in range(len(ds)):
            ds[i]
    except Exception as exc:  # what training would meet
        return False, f"{type(exc).__name__}: {exc}"[:300]
    return True, ""


def prep_verify(snapshot: Path, report: Path, hub: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "verify", str(snapshot), "--out", str(report),
                        "--decode", "--backend", "inline", "--no-progress"], capture_output=True, text=True, env=env,
                       timeout=600, cwd=str(report.parent))
    assert r.returncode in (0, 1) and report.is_file(), r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(report.read_text())


@pytest.mark.parametrize("venv", VENVS)
@pytest.mark.parametrize("case", ["sound", "video-blob-missing"])
def test_verify_on_a_hub_snapshot_predicts_the_reader(case: str, venv: str, tmp_path: Path) -> None:
    reader = reader_of_venv(venv)
    fmt = FORMAT_OF_READER[reader]
    plain = write_synthetic(tmp_path / "plain", SynthSpec(version=fmt, episodes=2, frames=30, height=96, width=128))
    hub = tmp_path / "hub"
    repo_id = f"prep-compat/snap_{fmt.replace('.', '')}"
    snap = snapshot_of(plain, hub, repo_id)
    from huggingface_hub import scan_cache_dir

    assert not scan_cache_dir(hub).warnings
    if case == "video-blob-missing":
        video = next(p for p in sorted(snap.rglob("*.mp4")))
        Path(os.path.realpath(video)).unlink()  # the link stays, its blob is gone
    loads, why = reader_loads(repo_id, snap)
    report = prep_verify(snap, tmp_path / "report.json", hub)
    predicted = lerobot_prediction(report, fmt, reader)
    assert predicted == loads, f"reader {reader}: loads={loads} ({why}); prep verify predicted {predicted}"
    assert loads is (case == "sound"), why
