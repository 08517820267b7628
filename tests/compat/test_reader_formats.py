"""The real reader of this venv on the format it does not read (issue 36): what `pipeline/checks.py`
FORMAT_REFUSALS says each generation does, and so what `prep verify` prints for it. lerobot 0.4.x and 0.6.x
raise BackwardCompatibilityError at open on a v2.1 dataset; lerobot 0.3.x finds no meta/tasks.jsonl in a v3.0
one and falls back to the Hub, which fails offline (OfflineModeIsEnabled). Offline, a local root.

Runs inside any venv made by `.ci/lerobot_envs.sh` (`.ci/compat.sh`); skipped where lerobot is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from compat_support import lerobot_version

from pipeline.checks import Reader, format_refusal, reader_format
from pipeline.synth import SynthSpec, write_synthetic

VERSION = lerobot_version()
if VERSION is None:
    pytest.skip("needs a real lerobot (run in a venv made by .ci/lerobot_envs.sh)", allow_module_level=True)

pytestmark = pytest.mark.lerobot
READER = {"0.3": Reader.V03, "0.4": Reader.V04, "0.6": Reader.V06}.get(".".join(str(VERSION).split(".")[:2]))


def _open(root: Path) -> BaseException | None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:  # 0.6 moved it
        from lerobot.datasets import LeRobotDataset  # type: ignore[attr-defined,no-redef]
    try:
        LeRobotDataset("local/" + root.name, root=root)
    except Exception as exc:  # what the reader raises is the result
        return exc
    return None


def _chain(exc: BaseException | None) -> list[str]:
    names = []
    while exc is not None:
        names.append(type(exc).__name__)
        exc = exc.__context__
    return names


def test_the_other_format_is_refused_as_the_registry_says(tmp_path: Path) -> None:
    if READER is None:
        pytest.skip(f"lerobot {VERSION}: no reader generation of prep's")
    other = "v3.0" if reader_format(READER) == "v2.1" else "v2.1"
    refusal = format_refusal(READER, other)
    assert refusal is not None
    spec = SynthSpec(version=other, episodes=2, frames=10, height=32, width=48, gop=10,
                     cameras=("observation.images.cam_high",))
    root = write_synthetic(tmp_path / "ds", spec)
    raised = _chain(_open(root))
    assert raised, f"lerobot {VERSION} opened a {other} dataset"
    if other == "v2.1":
        assert raised[0] == "BackwardCompatibilityError" and "BackwardCompatibilityError" in refusal.does, raised
    else:
        assert raised[0] == "OfflineModeIsEnabled" and "FileNotFoundError" in raised, raised
        assert "tasks.jsonl" in refusal.does and "OfflineModeIsEnabled" in refusal.does
