"""The per-worker decoder cache: reopened after fork, bounded, errors named; failed items counted."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")

from pipeline.loader.bench import Tally  # noqa: E402
from pipeline.loader.dataset import PrepFrameDataset  # noqa: E402
from pipeline.loader.decode import DecoderCache, FrameError  # noqa: E402
from pipeline.loader.guard import Guarded  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v2.1", episodes=3, frames=10, height=224, width=224, gop=1)
    return write_synthetic(tmp_path_factory.mktemp("decode") / "tiny", spec)


def test_workers_see_the_same_items_after_the_parent_opened_decoders(tiny: Path) -> None:
    from torch.utils.data import DataLoader

    ds = PrepFrameDataset(tiny, horizon=3)
    first = ds[7]  # the parent opens decoders before the workers fork
    assert ds.decoders.opens > 0
    loader = DataLoader(ds, batch_size=5, num_workers=2, shuffle=False)
    batches = list(loader)
    got = {int(i): n for b in batches for n, i in enumerate(b["index"])}
    assert sorted(got) == list(range(len(ds)))
    b = batches[7 // 5]
    for cam in ds.cameras:
        assert torch.equal(b[cam][7 % 5], first[cam])


def test_cache_resets_in_a_child_process(tiny: Path) -> None:
    ds = PrepFrameDataset(tiny, horizon=3)
    ds[0]
    cache = ds.decoders
    assert cache._open
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the inherited contexts must not be used
        os.close(r)
        ok = True
        try:
            item = ds[1]
            ok = item[ds.cameras[0]].shape == (224, 224, 3) and cache._pid == os.getpid() and cache.opens >= 1
        except Exception:
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert cache._pid == os.getpid()


def test_pickled_cache_carries_settings_not_contexts(tiny: Path) -> None:
    ds = PrepFrameDataset(tiny, horizon=3, max_open=7)
    ds[0]
    clone = pickle.loads(pickle.dumps(ds.decoders))
    assert clone.max_open == 7 and not clone._open and clone.opens == 0


def test_lru_bound(tiny: Path) -> None:
    ds = PrepFrameDataset(tiny, horizon=3, max_open=2)
    for i in range(len(ds)):
        ds[i]
    assert len(ds.decoders._open) <= 2
    assert ds.decoders.opens > 2


def test_missing_frame_and_missing_file_are_named(tiny: Path, tmp_path: Path) -> None:
    cache = DecoderCache()
    video = next(tiny.glob("videos/**/*.mp4"))
    assert cache.frame_at(str(video), 0.0).shape == (224, 224, 3)
    with pytest.raises(FrameError, match="no frame at t=5"):
        cache.frame_at(str(video), 5.0)
    with pytest.raises(FrameError, match="cannot open"):
        cache.frame_at(str(tmp_path / "nope.mp4"), 0.0)


class _Flaky:
    """Every third item raises."""

    def __init__(self, inner: PrepFrameDataset) -> None:
        self.inner = inner
        self.cameras = inner.cameras

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i % 3 == 0:
            raise RuntimeError("bad frame")
        return self.inner[i]

    def empty_item(self) -> dict[str, Any]:
        return self.inner.empty_item()


def test_guard_counts_failed_items(tiny: Path) -> None:
    from torch.utils.data import DataLoader

    items = Guarded(_Flaky(PrepFrameDataset(tiny, horizon=3)))
    tally = Tally()
    for batch in DataLoader(items, batch_size=6, num_workers=0):
        tally.add(batch)
    assert tally.samples == 30 and tally.errors == 10
    assert tally.error_examples[0] == "item 0: RuntimeError: bad frame"
    assert np.isfinite(tally.decode_s)
