"""Datasets for tests: synthetic LeRobot v2.1 / v3.0 corpora (`pipeline.synth`, real h264 video) and the real
v2.1 fixture (read-only: copy it before writing).

- `CAMS`: the two cameras most tests use; `small_spec(version, **changes)`: 7 episodes x 2 cameras x 24 frames
  of 48x64 h264, GOP 12 (v3.0: 3 episodes per file), the shape of the edit and convert tests;
- `synth(root, version="v2.1", **spec)`: write a synthetic dataset at `root` from `SynthSpec(version, **spec)`;
- `real_fixture()`: the real fixture `../shared/fixtures/real/g1_inspire_v21` beside the checkout (skips, saying
  where it looked, outside such a checkout); `copy_real(dst)`: a writable copy of it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
TESTS = Path(__file__).resolve().parents[1]
REAL_FIXTURE = TESTS.parents[1] / "shared" / "fixtures" / "real" / "g1_inspire_v21"


def small_spec(version: str = "v2.1", **changes: Any) -> SynthSpec:
    """7 episodes x 2 cameras x 24 frames of 48x64 h264, GOP 12; v3.0: 3 episodes per file."""
    base = SynthSpec(version=version, episodes=7, frames=24, height=48, width=64, gop=12, cameras=CAMS,
                     **({"episodes_per_file": 3} if version == "v3.0" else {}))
    return dataclasses.replace(base, **changes) if changes else base


def synth(root: Path, version: str = "v2.1", **spec: Any) -> Path:
    """A synthetic dataset of `SynthSpec(version=version, **spec)` written at `root`."""
    return write_synthetic(root, SynthSpec(version=version, **spec))


def real_fixture() -> Path:
    """The real LeRobot v2.1 fixture (read-only); skipped where the checkout has no `../shared/fixtures`."""
    if (REAL_FIXTURE / "meta/info.json").is_file():
        return REAL_FIXTURE
    pytest.skip(f"real fixture not found at {REAL_FIXTURE} (it lives beside a checkout, not in it)")
    raise AssertionError  # unreachable


def copy_real(dst: Path) -> Path:
    """A writable copy of the real fixture at `dst`."""
    shutil.copytree(real_fixture(), dst, symlinks=True)
    return dst
