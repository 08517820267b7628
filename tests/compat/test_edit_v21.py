"""`prep edit` outputs in format v2.1 read by the real v2.1 reader, lerobot 0.3.x as openpi pins it (issue 26):
every sample of every output with both video backends, the frames those samples hand back identical to the
ones the same reader hands back from the source episode they came from, and `prep verify --decode` passing.
The outputs (see edit_support.py): drop, split, merge of synthetic corpora, drop of their 224 all-intra
re-encode, and the repair loop's output and its 224 re-encode. (lerobot 0.3.x has no merge tool of its own;
test_edit_v30.py runs LeRobot's merge on prep-edited v3.0 datasets.)

Runs inside the lerobot-v21 venv (`.ci/compat.sh`, `-k v21`); skipped elsewhere.
"""

from __future__ import annotations

import pytest
from compat_support import require_lerobot

LEROBOT = require_lerobot("0.3.", "v2.1")

from edit_support import (  # noqa: E402
    BACKENDS,
    EditOutputs,
    check_every_sample_loads,
    check_frames_are_the_source_episodes,
    check_prep_verify_decode_passes,
)

pytestmark = pytest.mark.readers
OUTPUTS = ("drop", "split-train", "split-val", "merge", "drop-224", "loop-fixed", "loop-fixed-224")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> EditOutputs:
    return EditOutputs(tmp_path_factory.mktemp("edit-v21"), "v2.1")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", OUTPUTS)
def test_every_sample_loads(outputs: EditOutputs, name: str, backend: str) -> None:
    check_every_sample_loads(outputs, name, backend, "v21", LEROBOT)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [n for n in OUTPUTS if n != "loop-fixed-224"])
def test_frames_are_the_source_episodes(outputs: EditOutputs, name: str, backend: str) -> None:
    """Every frame of every output episode equals the source episode's, as this reader decodes both."""
    check_frames_are_the_source_episodes(outputs, name, backend, "v21", LEROBOT)


@pytest.mark.parametrize("name", OUTPUTS)
def test_prep_verify_decode_passes(outputs: EditOutputs, name: str) -> None:
    check_prep_verify_decode_passes(outputs, name)
