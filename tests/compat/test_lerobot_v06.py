"""Real-client compatibility, format v3.0 read by lerobot 0.6.x (Python 3.13 in the Debian 13 root made by
`.ci/lerobot_envs.sh`, torchcodec 0.11): our synthetic v3.0 corpus, the real fixture converted by 0.6.1's own
v2.1 -> v3.0 converter (`lerobot.scripts.convert_dataset_v21_to_v30`), and `prep reencode --dst 224` of both.

Runs inside the lerobot-v06 venv (`.ci/compat.sh` runs it); skipped elsewhere.
"""

from __future__ import annotations

import pytest
from compat_support import require_lerobot

LEROBOT = require_lerobot("0.6.", "v3.0")

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
    return "v06"
