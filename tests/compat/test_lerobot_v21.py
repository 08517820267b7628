"""Real-client compatibility, format v2.1: lerobot 0.3.x (the release line of openpi's pin,
installed with openpi's torch 2.7 / torchcodec 0.4 / datasets 3.6) reads our synthetic v2.1 corpus,
the real v2.1 fixture, and `prep reencode --dst 224` of both.

Runs inside the venv made by `.ci/lerobot_envs.sh` (`.ci/compat.sh` runs it); skipped elsewhere.
"""

from __future__ import annotations

import pytest
from compat_support import require_lerobot

LEROBOT = require_lerobot("0.3.", "v2.1")

from compat_cases import (  # noqa: E402
    test_frames_identical_to_pyav_decode,
    test_iterate_every_sample,
    test_letterbox_matches_openpi,
    test_negative_control_dropped_frame,
)

pytestmark = pytest.mark.readers

__all__ = [
    "test_frames_identical_to_pyav_decode",
    "test_iterate_every_sample",
    "test_letterbox_matches_openpi",
    "test_negative_control_dropped_frame",
]


@pytest.fixture(scope="module")
def fmt() -> str:
    return "v21"
