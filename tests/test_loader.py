"""PrepFrameDataset returns the right samples: frames equal an independent PyAV decode of the same
(episode, timestamp), action chunks equal the parquet rows, padded at episode ends like LeRobot."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")

from pipeline.formats import open_dataset  # noqa: E402
from pipeline.loader.dataset import PrepFrameDataset  # noqa: E402
from pipeline.loader.resize import letterbox_shape, resize_with_pad  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

FRAMES = 30
HORIZON = 12


@pytest.fixture(scope="module", params=["v2.1", "v3.0"])
def intra224(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes x 3 cameras x 30 frames, 224x224 all-intra h264 (v3.0: 2 + 1 episodes per file)."""
    spec = SynthSpec(version=request.param, episodes=3, frames=FRAMES, height=224, width=224, gop=1,
                     episodes_per_file=2)
    return write_synthetic(tmp_path_factory.mktemp("loader") / request.param.replace(".", ""), spec)


def decode_all(path: Path) -> list[tuple[float, np.ndarray]]:
    """Every frame of a file, decoded front to back: (pts seconds, RGB)."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        return [(float(f.pts * stream.time_base), f.to_ndarray(format="rgb24")) for f in c.decode(stream)]


def expected_frame(root: Path, ds_rows: PrepFrameDataset, i: int, camera: str,
                   cache: dict[str, list[tuple[float, np.ndarray]]]) -> np.ndarray:
    k, f = ds_rows.rows.locate(i)
    ref = ds_rows.rows.episodes[k].video(camera)
    path = str(root / ref.rel)
    if path not in cache:
        cache[path] = decode_all(Path(path))
    in_episode = [rgb for t, rgb in cache[path]
                  if t >= ref.from_timestamp - 1e-4 and (ref.to_timestamp is None or t < ref.to_timestamp - 1e-4)]
    return in_episode[f]


def episode_actions(root: Path, rel: str, episode: int) -> np.ndarray:
    table = pq.read_table(root / rel).to_pandas()
    rows = table[table["episode_index"] == episode].sort_values("frame_index")
    return np.stack(rows["action"].to_numpy()).astype(np.float32)


def test_frames_equal_independent_decode_all_intra(intra224: Path) -> None:
    ds = PrepFrameDataset(intra224, horizon=HORIZON)
    assert len(ds) == 3 * FRAMES
    cache: dict[str, list[tuple[float, np.ndarray]]] = {}
    rng = np.random.default_rng(0)
    picks = [0, FRAMES - 1, FRAMES, 2 * FRAMES - 1, 2 * FRAMES, len(ds) - 1, *rng.integers(0, len(ds), 12).tolist()]
    for i in picks:
        item = ds[i]
        for cam in ds.cameras:
            got = item[cam].numpy()
            assert got.shape == (224, 224, 3) and got.dtype == np.uint8
            np.testing.assert_array_equal(got, expected_frame(intra224, ds, i, cam, cache), err_msg=f"item {i} {cam}")
    # All-intra random access decodes exactly one frame per returned frame.
    assert ds.decoders.frames_decoded == ds.decoders.frames_returned


def test_action_chunks_and_padding(intra224: Path) -> None:
    ds = PrepFrameDataset(intra224, horizon=HORIZON)
    opened, _ = open_dataset(intra224)
    for k, ep in enumerate(opened.episodes):
        actions = episode_actions(intra224, ep.data.rel, ep.index)
        assert len(actions) == FRAMES
        for f in (0, 5, FRAMES - HORIZON, FRAMES - HORIZON + 1, FRAMES - 3, FRAMES - 1):
            item = ds[k * FRAMES + f]
            assert int(item["episode_index"]) == ep.index and int(item["frame_index"]) == f
            want_idx = np.minimum(np.arange(f, f + HORIZON), FRAMES - 1)
            np.testing.assert_array_equal(item["action"].numpy(), actions[want_idx])
            np.testing.assert_array_equal(item["action_is_pad"].numpy(), np.arange(f, f + HORIZON) >= FRAMES)
            assert item["action"].shape == (HORIZON, actions.shape[1])
            assert item["observation.state"].dtype == torch.float32


@pytest.mark.slow
def test_native_frames_are_letterboxed_like_openpi(synth_v21: Path) -> None:
    """480x640 GOP-30: seek + decode forward gives the same frame as a front-to-back decode, letterboxed."""
    ds = PrepFrameDataset(synth_v21, horizon=4)
    cache: dict[str, list[tuple[float, np.ndarray]]] = {}
    cam = ds.cameras[0]
    for i in (0, 29, 30, 31, 59, 89, 90 + 44, len(ds) - 1):
        got = ds[i][cam].numpy()
        want = resize_with_pad(expected_frame(synth_v21, ds, i, cam, cache))
        np.testing.assert_array_equal(got, want, err_msg=f"item {i}")
        assert got[:27].max() == 0 and got[-27:].max() == 0  # 168-row picture centred, black bars
    assert ds.decoders.frames_decoded > ds.decoders.frames_returned  # GOP video decodes up to the target


def test_letterbox_geometry() -> None:
    assert letterbox_shape(480, 640, 224, 224) == (168, 224, 28, 0)
    assert letterbox_shape(640, 480, 224, 224) == (224, 168, 0, 28)
    frame = np.full((480, 640, 3), 200, dtype=np.uint8)
    out = resize_with_pad(frame)
    assert out.shape == (224, 224, 3)
    assert out[28:196].min() == 200 and out[:28].max() == 0 and out[196:].max() == 0
    same = np.zeros((224, 224, 3), dtype=np.uint8)
    assert resize_with_pad(same) is same


def test_items_collate_into_a_batch(intra224: Path) -> None:
    from torch.utils.data import DataLoader

    ds = PrepFrameDataset(intra224, horizon=HORIZON)
    batch = next(iter(DataLoader(ds, batch_size=4, shuffle=True, num_workers=0)))
    assert batch[ds.cameras[0]].shape == (4, 224, 224, 3)
    assert batch["action"].shape[:2] == (4, HORIZON)
    assert batch["action_is_pad"].dtype == torch.bool
