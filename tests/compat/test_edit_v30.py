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
from typing import Any

import pytest
from compat_support import iterate_all, lerobot_version, load_info, open_dataset, report, video_keys
from edit_support import EditOutputs, global_starts, must, prep

LEROBOT = lerobot_version()
if LEROBOT is None or not LEROBOT.startswith(("0.4.", "0.6.")):
    pytest.skip(f"compat v3.0 edit: needs lerobot 0.4.x or 0.6.x, this env has {LEROBOT}", allow_module_level=True)
READER = "v06" if LEROBOT.startswith("0.6.") else "v30"

pytestmark = pytest.mark.lerobot
BACKENDS = ("default", "pyav")
OUTPUTS = ("drop", "split-train", "split-val", "merge", "drop-224", "lerobot-drop", "loop-fixed", "loop-fixed-224")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> EditOutputs:
    return EditOutputs(tmp_path_factory.mktemp(f"edit-{READER}"), "v3.0")


def backend_arg(backend: str) -> str | None:
    return None if backend == "default" else backend


def backend_of(ds: Any) -> str:
    """The video backend an open dataset uses (0.6.x keeps it private)."""
    return str(getattr(ds, "video_backend", None) or getattr(ds, "_video_backend", None))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("reader", [READER])
def test_every_sample_loads(outputs: EditOutputs, reader: str, name: str, backend: str) -> None:
    root, _ = outputs.get(name)
    assert load_info(root)["codebase_version"] == "v3.0"
    ds = open_dataset(root, backend_arg(backend))
    n = iterate_all(ds, root)
    report(f"compat {reader} edit lerobot {LEROBOT} {name} backend={backend_of(ds)}: {n} samples x "
           f"{len(video_keys(load_info(root)))} cameras read")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [n for n in OUTPUTS if n != "loop-fixed-224"])
@pytest.mark.parametrize("reader", [READER])
def test_frames_are_the_source_episodes(outputs: EditOutputs, reader: str, name: str, backend: str) -> None:
    """Every frame of every camera of every output episode equals, exactly, the frame the same reader returns
    for the same frame of the source episode it came from (a stream copy decodes to the same pixels; an
    episode shifted by one frame or taken from the wrong place does not)."""
    root, mapping = outputs.get(name)
    assert mapping is not None
    ds = open_dataset(root, backend_arg(backend), horizon=None)
    cams = video_keys(load_info(root))
    assert ds.meta.total_episodes == len(mapping)
    sources: dict[Path, Any] = {}
    starts = global_starts(ds)
    compared = 0
    for new, (src, old) in enumerate(mapping):
        if src not in sources:
            sources[src] = open_dataset(src, backend_arg(backend), horizon=None)
        sds = sources[src]
        length = int(ds.meta.episodes[new]["length"])
        assert length == int(sds.meta.episodes[old]["length"]), f"episode {new} (source {old}): length differs"
        s0 = global_starts(sds)[old]
        for f in range(length):
            a, b = ds[starts[new] + f], sds[s0 + f]
            assert int(a["frame_index"]) == int(b["frame_index"]) == f
            for cam in cams:
                assert bool((a[cam] == b[cam]).all()), f"{name} episode {new} (source {old}) frame {f} {cam} differs"
            compared += 1
    report(f"compat {reader} edit lerobot {LEROBOT} {name} backend={backend_of(ds)}: {compared} samples x "
           f"{len(cams)} cameras identical to the source episodes' frames")


@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("reader", [READER])
def test_prep_verify_decode_passes(outputs: EditOutputs, reader: str, name: str) -> None:
    root, _ = outputs.get(name)
    r = must(prep("verify", root, "--decode", "--no-progress"))
    assert "PASSED" in r.stdout, r.stdout


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
