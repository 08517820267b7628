"""`prep edit` outputs in format v2.1 read by the real v2.1 reader, lerobot 0.3.x as openpi pins it (issue 26):
every sample of every output with both video backends, the frames those samples hand back identical to the
ones the same reader hands back from the source episode they came from, and `prep verify --decode` passing.
The outputs (see edit_support.py): drop, split, merge of synthetic corpora, drop of their 224 all-intra
re-encode, and the repair loop's output and its 224 re-encode. (lerobot 0.3.x has no merge tool of its own;
test_edit_v30.py runs LeRobot's merge on prep-edited v3.0 datasets.)

Runs inside the lerobot-v21 venv (`.ci/compat.sh`, `-k v21`); skipped elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from compat_support import iterate_all, load_info, open_dataset, report, require_lerobot, video_keys

LEROBOT = require_lerobot("0.3.", "v2.1")

from edit_support import EditOutputs, global_starts, must, prep  # noqa: E402

pytestmark = pytest.mark.lerobot
BACKENDS = ("default", "pyav")
OUTPUTS = ("drop", "split-train", "split-val", "merge", "drop-224", "loop-fixed", "loop-fixed-224")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> EditOutputs:
    return EditOutputs(tmp_path_factory.mktemp("edit-v21"), "v2.1")


def backend_arg(backend: str) -> str | None:
    return None if backend == "default" else backend


def backend_of(ds: Any) -> str:
    """The video backend an open dataset uses (0.6.x keeps it private)."""
    return str(getattr(ds, "video_backend", None) or getattr(ds, "_video_backend", None))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", OUTPUTS)
def test_every_sample_loads(outputs: EditOutputs, name: str, backend: str) -> None:
    root, _ = outputs.get(name)
    assert load_info(root)["codebase_version"] == "v2.1"
    ds = open_dataset(root, backend_arg(backend))
    n = iterate_all(ds, root)
    report(f"compat v21 edit lerobot {LEROBOT} {name} backend={backend_of(ds)}: {n} samples x "
           f"{len(video_keys(load_info(root)))} cameras read")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [n for n in OUTPUTS if n != "loop-fixed-224"])
def test_frames_are_the_source_episodes(outputs: EditOutputs, name: str, backend: str) -> None:
    """Every frame of every camera of every output episode equals, exactly, the frame the same reader returns
    for the same frame of the source episode it came from."""
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
    report(f"compat v21 edit lerobot {LEROBOT} {name} backend={backend_of(ds)}: {compared} samples x "
           f"{len(cams)} cameras identical to the source episodes' frames")


@pytest.mark.parametrize("name", OUTPUTS)
def test_prep_verify_decode_passes(outputs: EditOutputs, name: str) -> None:
    root, _ = outputs.get(name)
    r = must(prep("verify", root, "--decode", "--no-progress"))
    assert "PASSED" in r.stdout, r.stdout
