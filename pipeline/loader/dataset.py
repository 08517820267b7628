"""`PrepFrameDataset`: a map-style torch Dataset over a LeRobot dataset (v2.1 or v3.0).

Item `i` is the i-th row of the dataset (episodes in order), as LeRobot numbers them. It gives

- each camera key: uint8 tensor (224, 224, 3), HWC RGB; frames of another size are letterboxed
  like openpi's `resize_with_pad` (aspect kept, bilinear, zero padding);
- `observation.state`: float32 (D,);
- `action`: float32 (horizon, A), rows i .. i + horizon - 1 of the episode; past the episode's last
  row the last row is repeated and `action_is_pad` (bool (horizon,)) is True, exactly as LeRobot's
  `delta_timestamps={"action": [k / fps for k in range(horizon)]}` does;
- `episode_index`, `frame_index`, `index` (int64), `timestamp` (float64);
- `_decode_s` (float64): seconds this item spent decoding video, for the benchmark.

Frames are looked up at `from_timestamp + timestamp` of the row in the camera's file (as
LeRobot does), through a `DecoderCache` that each worker process keeps open.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

from pipeline.dataset import Dataset
from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats import open_dataset
from pipeline.loader.decode import DecoderCache
from pipeline.loader.resize import resize_with_pad
from pipeline.loader.rows import ACTION_KEY, STATE_KEY, EpisodeRows, load_rows
from pipeline.storage import FileProblem, Root, StorePath

IMAGE_SIZE = 224
DEFAULT_HORIZON = 50


class PrepFrameDataset(TorchDataset[dict[str, Any]]):
    def __init__(
        self,
        root: Root,
        *,
        horizon: int = DEFAULT_HORIZON,
        image_size: int = IMAGE_SIZE,
        max_open: int = 128,
        thread_count: int = 1,
    ) -> None:
        if horizon <= 0:
            raise ValueError(f"horizon must be positive, got {horizon}")
        ds, rejected = open_dataset(root)
        if rejected:
            raise DatasetError(ds.root, f"{len(rejected)} episode(s) have bad metadata, first: {rejected[0]}")
        if not ds.episodes:
            raise DatasetError(ds.root, "no episodes")
        self.dataset: Dataset = ds
        self.horizon = horizon
        self.image_size = image_size
        self.cameras = ds.camera_keys
        self.rows: EpisodeRows = load_rows(ds)
        # Video files per episode position and camera, checked once to lie inside the dataset (its store's rules)
        self._videos: list[tuple[tuple[str, StorePath, float], ...]] = [
            tuple((ref.camera, _inside(ds.root / ref.rel, ep.index), ref.from_timestamp) for ref in ep.videos)
            for ep in self.rows.episodes
        ]
        self.decoders = DecoderCache(max_open=max_open, thread_count=thread_count)
        self._steps = np.arange(horizon, dtype=np.int64)

    def __len__(self) -> int:
        return self.rows.total

    def action_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(actions (horizon, A), is_pad (horizon,)) starting at global row `i`."""
        k, f = self.rows.locate(i)
        start, length = int(self.rows.starts[k]), int(self.rows.lengths[k])
        want = f + self._steps
        pad = want >= length
        return self.rows.action[start + np.minimum(want, length - 1)], pad

    def frames(self, i: int) -> dict[str, np.ndarray]:
        """Each camera's frame for global row `i`, letterboxed to (size, size, 3) uint8."""
        k, _ = self.rows.locate(i)
        t = float(self.rows.timestamp[i])
        out: dict[str, np.ndarray] = {}
        for camera, path, t0 in self._videos[k]:
            rgb = self.decoders.frame_at(path, t0 + t)
            out[camera] = resize_with_pad(rgb, self.image_size, self.image_size)
        return out

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        k, _ = self.rows.locate(i)
        before = self.decoders.decode_s
        item: dict[str, Any] = {cam: torch.from_numpy(frame) for cam, frame in self.frames(i).items()}
        decode_s = self.decoders.decode_s - before
        actions, pad = self.action_chunk(i)
        item[STATE_KEY] = torch.from_numpy(self.rows.state[i].copy())
        item[ACTION_KEY] = torch.from_numpy(actions)
        item[ACTION_KEY + "_is_pad"] = torch.from_numpy(pad)
        item["episode_index"] = torch.tensor(self.rows.episodes[k].index, dtype=torch.int64)
        item["frame_index"] = torch.tensor(int(self.rows.frame_index[i]), dtype=torch.int64)
        item["index"] = torch.tensor(int(self.rows.index[i]), dtype=torch.int64)
        item["timestamp"] = torch.tensor(float(self.rows.timestamp[i]), dtype=torch.float64)
        item["_decode_s"] = torch.tensor(decode_s, dtype=torch.float64)
        return item

    def empty_item(self) -> dict[str, Any]:
        """An all-zero item of the right shapes, to stand in for one that failed."""
        s = self.image_size
        item: dict[str, Any] = {cam: torch.zeros((s, s, 3), dtype=torch.uint8) for cam in self.cameras}
        item[STATE_KEY] = torch.zeros(self.rows.state.shape[1], dtype=torch.float32)
        item[ACTION_KEY] = torch.zeros((self.horizon, self.rows.action.shape[1]), dtype=torch.float32)
        item[ACTION_KEY + "_is_pad"] = torch.ones(self.horizon, dtype=torch.bool)
        for key in ("episode_index", "frame_index", "index"):
            item[key] = torch.tensor(-1, dtype=torch.int64)
        item["timestamp"] = torch.tensor(float("nan"), dtype=torch.float64)
        item["_decode_s"] = torch.tensor(0.0, dtype=torch.float64)
        return item


def _inside(path: StorePath, episode: int) -> StorePath:
    try:
        path.store.check(path.rel)
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    return path
