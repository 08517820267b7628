"""`prep edit` outputs in format v3.0 read by the real v3.0 readers, lerobot 0.4.x and 0.6.x (issue 26):
every sample of every output with both video backends, the frames those samples hand back identical to
the ones the same reader hands back from the source episode they came from, `prep verify --decode`
passing, and LeRobot's own `merge_datasets` accepting a prep-edited dataset. The outputs (see
edit_support.py): drop, split, merge of synthetic corpora, drop of their 224 all-intra re-encode, drop of
a corpus written by the reader's own LeRobot writer (cuts inside its files), and the repair loop's output.

Runs inside a v3.0 reader venv (`.ci/compat.sh`: `-k v30` in lerobot 0.4.4's, `-k v06` in 0.6.1's: each
test's id names the reader, `[v30-...]` or `[v06-...]`); skipped elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from compat_support import iterate_all, lerobot_version, open_dataset, report
from edit_support import (
    BACKENDS,
    EditOutputs,
    check_every_sample_loads,
    check_frames_are_the_source_episodes,
    check_prep_verify_decode_passes,
)

LEROBOT = lerobot_version()
if LEROBOT is None or not LEROBOT.startswith(("0.4.", "0.6.")):
    pytest.skip(f"compat v3.0 edit: needs lerobot 0.4.x or 0.6.x, this env has {LEROBOT}", allow_module_level=True)
READER = "v06" if LEROBOT.startswith("0.6.") else "v30"

pytestmark = pytest.mark.readers
OUTPUTS = ("drop", "split-train", "split-val", "merge", "drop-224", "lerobot-drop", "loop-fixed", "loop-fixed-224")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> EditOutputs:
    return EditOutputs(tmp_path_factory.mktemp(f"edit-{READER}"), "v3.0")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("reader", [READER])
def test_every_sample_loads(outputs: EditOutputs, reader: str, name: str, backend: str) -> None:
    check_every_sample_loads(outputs, name, backend, reader, LEROBOT)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [n for n in OUTPUTS if n != "loop-fixed-224"])
@pytest.mark.parametrize("reader", [READER])
def test_frames_are_the_source_episodes(outputs: EditOutputs, reader: str, name: str, backend: str) -> None:
    """Every frame of every output episode equals the source episode's, as this reader decodes both."""
    check_frames_are_the_source_episodes(outputs, name, backend, reader, LEROBOT)


@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("reader", [READER])
def test_prep_verify_decode_passes(outputs: EditOutputs, reader: str, name: str) -> None:
    check_prep_verify_decode_passes(outputs, name)


@pytest.mark.parametrize("reader", [READER])
def test_lerobot_merge_accepts_a_prep_edited_dataset(outputs: EditOutputs, reader: str,
                                                     tmp_path: Path) -> None:
    """LeRobot's own merge_datasets takes prep's drop of a corpus its own writer wrote, beside that corpus
    itself, and the merged dataset loads, every sample, with as many episodes as both. (The (3, 1, 1) image
    stats shape LeRobot's aggregate_stats requires is kept by edit and synth: tests/test_edit_stats_shape.py.)"""
    from lerobot.datasets.dataset_tools import merge_datasets

    edited, _ = outputs.get("lerobot-drop")
    source = outputs.source("L")
    dsa, dsb = open_dataset(edited, horizon=None), open_dataset(source, horizon=None)
    out = tmp_path / "merged"
    merge_datasets([dsa, dsb], output_repo_id="prep-compat/merged", output_dir=out)
    merged = open_dataset(out)
    assert merged.meta.total_episodes == dsa.meta.total_episodes + dsb.meta.total_episodes
    n = iterate_all(merged, out)
    report(f"compat {reader} edit lerobot {LEROBOT}: its merge_datasets of prep's drop of a LeRobot-written corpus "
           f"and that corpus loads, {n} samples read")
