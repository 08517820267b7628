"""Parity cases written by LeRobot itself: `LeRobotDataset.create(...)` / `add_frame` / `save_episode` in
each venv (lerobot 0.3.3 writes v2.1, 0.4.4 and 0.6.1 write v3.0; default AV1 and h264), the streaming
recorder (clean, and with dropped frames), the edit tools (`lerobot-edit-dataset` delete, split, merge:
`lerobot.datasets.dataset_tools`) and the v2.1 -> v3.0 converter. Offline, deterministic input frames
(`pipeline.synth.camera_frames`). lerobot is imported inside the builders only.

Each v3.0 case is written by the release of the venv it runs in, through one small adapter per release
(`Api`): 0.4.4 takes `create(vcodec=...)` and converts with `lerobot.datasets.v30.convert_dataset_v21_to_v30`;
0.6.1 takes `create(rgb_encoder=RGBEncoderConfig(vcodec=...))`, converts with
`lerobot.scripts.convert_dataset_v21_to_v30`, and its StreamingVideoEncoder.start_episode takes the depth keys.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.synth import SynthSpec, camera_frames, write_synthetic

from .meta import truth_from_clean
from .model import LOADS, SILENTLY_WRONG, Built, Expect, Truth, case

CAM = "observation.images.top"
CAM2 = "observation.images.wrist"
FPS = 30
H, W, N, DIM = 72, 96, 20, 6
V30 = ("v3.0",)
BOTH = ("v2.1", "v3.0")
TASK = "pick up the cup"


def frames(camera_no: int, episode: int, seed: int = 7) -> np.ndarray:
    return camera_frames(SynthSpec(frames=N, height=H, width=W, seed=seed), camera_no, episode)


def features(cameras: tuple[str, ...]) -> dict[str, Any]:
    names = [f"joint_{i}" for i in range(DIM)]
    out: dict[str, Any] = {"observation.state": {"dtype": "float32", "shape": (DIM,), "names": names},
                           "action": {"dtype": "float32", "shape": (DIM,), "names": names}}
    for cam in cameras:
        out[cam] = {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]}
    return out


def rows(episode: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(N)[:, None] / FPS
    action = np.sin(2 * np.pi * 0.3 * t + np.arange(DIM)[None, :] * 0.37 + episode).astype(np.float32)
    return np.vstack([action[:1], action[:-1]]), action


def save_raw(d: Path, cam: str, episode: int, stack: np.ndarray) -> str:
    p = d / "raw" / f"{cam.replace('/', '_')}-{episode}.npy"
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, stack)
    return str(p)


def raw_truth(d: Path, cameras: tuple[str, ...], mapping: dict[int, tuple[int, int]]) -> dict[tuple[str, int], Truth]:
    """Truth from the frames the writer was given: new episode -> (source seed, source episode)."""
    out = {}
    for new, (seed, old) in mapping.items():
        for k, cam in enumerate(cameras):
            out[(cam, new)] = Truth(save_raw(d, cam, new, frames(k, old, seed)), tuple(range(N)), exact=False)
    return out


class Api:
    """What differs between the v3.0 writers of lerobot 0.4.4 and 0.6.1 (read from each release's source)."""

    @staticmethod
    def line() -> str:
        import importlib.metadata

        return ".".join(importlib.metadata.version("lerobot").split(".")[:2])

    @classmethod
    def encoder_kwargs(cls, vcodec: str) -> dict[str, Any]:
        if cls.line() == "0.4":
            return {"vcodec": vcodec}  # lerobot_dataset.py:LeRobotDataset.create(vcodec=...)
        from lerobot.configs.video import RGBEncoderConfig  # 0.6: configs/video.py

        return {"rgb_encoder": RGBEncoderConfig(vcodec=vcodec)}

    @classmethod
    def convert(cls, parent: Path, name: str, data_file_size_in_mb: float | None = None) -> None:
        """The release's v2.1 -> v3.0 converter on `parent/name`, offline, in place (the original -> `<name>_old`);
        `data_file_size_in_mb` is its own option (default 100 MB of parquet per data file)."""
        if cls.line() == "0.4":  # root = the folder holding the dataset
            from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset

            convert_dataset(repo_id=name, root=parent, push_to_hub=False, data_file_size_in_mb=data_file_size_in_mb)
        else:  # 0.6: root = the dataset itself
            from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset as convert_06

            convert_06(repo_id=name, root=parent / name, push_to_hub=False, data_file_size_in_mb=data_file_size_in_mb)


def record(root: Path, version: str, cameras: tuple[str, ...], vcodec: str = "libsvtav1", episodes: int = 2,
           seed: int = 7, streaming: bool = False) -> None:
    """Record `episodes` episodes with LeRobot's own writer (create / add_frame / save_episode)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if version == "v2.1":
        import lerobot.datasets.lerobot_dataset as lds

        # 0.3.3 has no codec option: save_episode calls encode_video_frames(img_dir, path, fps) with its
        # default vcodec="libsvtav1"; h264 is one of the values that function accepts.
        with _patched(lds, "encode_video_frames", functools.partial(lds.encode_video_frames, vcodec=vcodec)):
            ds = LeRobotDataset.create(f"parity/{root.name}", fps=FPS, features=features(cameras), root=root,
                                       robot_type="synthetic", use_videos=True)
            for e in range(episodes):
                state, action = rows(e)
                for i in range(N):
                    frame = {"observation.state": state[i], "action": action[i]}
                    frame.update({cam: frames(k, e, seed)[i] for k, cam in enumerate(cameras)})
                    ds.add_frame(frame, task=TASK)
                ds.save_episode()
        return
    kw: dict[str, Any] = Api.encoder_kwargs(vcodec)
    if streaming:
        kw.update(streaming_encoding=True, encoder_queue_maxsize=30)
    ds = LeRobotDataset.create(f"parity/{root.name}", fps=FPS, features=features(cameras), root=root,
                               robot_type="synthetic", use_videos=True, **kw)
    for e in range(episodes):
        state, action = rows(e)
        imgs = [frames(k, e, seed) for k in range(len(cameras))]
        for i in range(N):
            frame: dict[str, Any] = {"observation.state": state[i], "action": action[i], "task": TASK}
            frame.update({cam: imgs[k][i] for k, cam in enumerate(cameras)})
            ds.add_frame(frame)
        ds.save_episode(parallel_encoding=False)
    ds.finalize()


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _expect_written(what: str) -> dict[str, Expect]:
    return {"v2.1": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.__init__ / __getitem__ (0.3.3)", what),
            "v3.0": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.__init__ / __getitem__ (0.4.4)", what),
            "0.6": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.__init__ / dataset_reader.py (0.6.1)", what)}


@case("lerobot-written-av1", BOTH, "written by LeRobot itself (0.3.3 / 0.4.4 / 0.6.1): create/add_frame/save_episode, "
      "default libsvtav1, 2 cameras", None, _expect_written("LeRobot reads what it wrote"), needs_lerobot=True)
def written_av1(d: Path, fmt: str) -> Built:
    root = d / "ds"
    record(root, fmt, (CAM, CAM2))
    return Built(root, truth_from_clean(root, d / "ref"))


@case("lerobot-written-h264", BOTH, "written by LeRobot itself with vcodec h264 (0.3.3: encode_video_frames' "
      "vcodec; 0.4.4: LeRobotDataset.create(vcodec='h264'); 0.6.1: rgb_encoder=RGBEncoderConfig(vcodec='h264'))",
      None,
      _expect_written("LeRobot reads what it wrote"), needs_lerobot=True)
def written_h264(d: Path, fmt: str) -> Built:
    root = d / "ds"
    record(root, fmt, (CAM,), vcodec="h264")
    return Built(root, truth_from_clean(root, d / "ref"))


@case("lerobot-streaming", V30, "the streaming recorder (streaming_encoding=True), no frame dropped", None,
      {"v3.0": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.__getitem__ (0.4.4)", "LeRobot reads what it wrote"),
       "0.6": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.__getitem__ (0.6.1)", "LeRobot reads what it wrote")},
      needs_lerobot=True)
def streaming(d: Path, fmt: str) -> Built:
    root = d / "ds"
    record(root, fmt, (CAM,), streaming=True)
    return Built(root, raw_truth(d, (CAM,), {0: (7, 0), 1: (7, 1)}))


def _drop_on_put(q: queue.Queue, drop: set[int]) -> None:  # type: ignore[type-arg]
    """Make a frame queue report itself full for the frames numbered in `drop` (as an overloaded encoder's
    queue does), so StreamingVideoEncoder.feed_frame takes its own `except queue.Full` path."""
    put = q.put
    count = {"n": 0}

    def put_or_full(item: Any, block: bool = True, timeout: float | None = None) -> None:
        if item is not None:
            count["n"] += 1
            if count["n"] - 1 in drop:
                raise queue.Full
        put(item, block, timeout)

    q.put = put_or_full  # type: ignore[method-assign]


@case("lerobot-streaming-dropped", V30, "the streaming recorder that dropped frames 12 and 13 of episode 0 "
      "(queue full): the video has 2 frames fewer than the parquet rows", "lerobot-streaming",
      {"v3.0": Expect(SILENTLY_WRONG, "video_utils.py:StreamingVideoEncoder.feed_frame (L817) drops the frame, "
                      "the parquet keeps the row; lerobot_dataset.py:_query_videos (L1061) then finds later frames "
                      "at the rows' times", "rows 12..19 of episode 0 get the frames of rows 14..19 and of episode 1")},
      needs_lerobot=True)
def streaming_dropped(d: Path, fmt: str) -> Built:
    from lerobot.datasets import video_utils

    original = video_utils.StreamingVideoEncoder.start_episode
    episode = {"n": 0}

    def start_episode(self: Any, video_keys: list[str], temp_dir: Path, *args: Any, **kwargs: Any) -> None:
        original(self, video_keys, temp_dir, *args, **kwargs)  # 0.6.1 adds depth_video_keys
        if episode["n"] == 0:
            for key in video_keys:
                _drop_on_put(self._frame_queues[key], {12, 13})
        episode["n"] += 1

    root = d / "ds"
    with _patched(video_utils.StreamingVideoEncoder, "start_episode", start_episode):
        record(root, fmt, (CAM,), streaming=True)
    return Built(root, raw_truth(d, (CAM,), {0: (7, 0), 1: (7, 1)}))


def _source(d: Path, name: str, episodes: int, seed: int = 7) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    src = d / name
    record(src, "v3.0", (CAM,), episodes=episodes, seed=seed)
    return LeRobotDataset(f"parity/{name}", root=src)


@case("lerobot-delete", V30, "lerobot-edit-dataset delete: episode 1 of 3 deleted by the release's delete_episodes "
      "(the shared file re-encoded)", "lerobot-written-av1",
      {"v3.0": Expect(LOADS, "dataset_tools.py:delete_episodes -> _copy_and_reindex_videos", "LeRobot's own edit")},
      needs_lerobot=True)
def delete(d: Path, fmt: str) -> Built:
    from lerobot.datasets.dataset_tools import delete_episodes

    delete_episodes(_source(d, "src", 3), [1], output_dir=d / "ds", repo_id="parity/ds")
    return Built(d / "ds", raw_truth(d, (CAM,), {0: (7, 0), 1: (7, 2)}))


@case("lerobot-split", V30, "lerobot-edit-dataset split: the 'train' part ([0, 1] of 3 episodes) of the release's "
      "split_dataset", "lerobot-written-av1",
      {"v3.0": Expect(LOADS, "dataset_tools.py:split_dataset -> _copy_and_reindex_videos", "LeRobot's own edit")},
      needs_lerobot=True)
def split(d: Path, fmt: str) -> Built:
    from lerobot.datasets.dataset_tools import split_dataset

    split_dataset(_source(d, "src", 3), {"train": [0, 1], "val": [2]}, output_dir=d / "split")
    shutil.move(str(d / "split" / "train"), str(d / "ds"))
    return Built(d / "ds", raw_truth(d, (CAM,), {0: (7, 0), 1: (7, 1)}))


@case("lerobot-merge", V30, "lerobot-edit-dataset merge: two 2-episode datasets merged by the release's "
      "merge_datasets",
      "lerobot-written-av1",
      {"v3.0": Expect(LOADS, "dataset_tools.py:merge_datasets -> aggregate.py:aggregate_datasets", "LeRobot's own "
                      "edit")}, needs_lerobot=True)
def merge(d: Path, fmt: str) -> Built:
    from lerobot.datasets.dataset_tools import merge_datasets

    a, b = _source(d, "a", 2, seed=7), _source(d, "b", 2, seed=8)
    merge_datasets([a, b], output_repo_id="parity/ds", output_dir=d / "ds")
    return Built(d / "ds", raw_truth(d, (CAM,), {0: (7, 0), 1: (7, 1), 2: (8, 0), 3: (8, 1)}))


@case("prep-outputs-merged", V30, "the release's merge_datasets of two `prep reencode --dst 64` outputs: one of a "
      "LeRobot-written AV1 source, one of an h264 source", "lerobot-merge",
      {"v3.0": Expect(LOADS, "dataset_tools.py:merge_datasets -> aggregate.py:validate_all_metadata (the features "
                      "must be equal)", "prep's outputs keep no per-source keys in their features")},
      needs_lerobot=True)
def prep_merge(d: Path, fmt: str) -> Built:
    import os

    from lerobot.datasets.dataset_tools import merge_datasets
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from . import prep_cli
    from .reader import letterbox

    python = os.environ.get("PARITY_PREP_PYTHON")
    if not python:
        raise RuntimeError("PARITY_PREP_PYTHON (the interpreter prep runs with) is not set")
    outs = []
    for name, vcodec, seed in (("a", "libsvtav1", 7), ("b", "h264", 8)):
        record(d / name, "v3.0", (CAM,), vcodec=vcodec, seed=seed)
        r = prep_cli.reencode(python, d / name, d / f"{name}_64")
        if not r["wrote_info"]:
            raise RuntimeError(f"prep reencode of the {vcodec} source failed: {r['summary']}")
        outs.append(LeRobotDataset(f"parity/{name}_64", root=d / f"{name}_64"))
    merge_datasets(outs, output_repo_id="parity/ds", output_dir=d / "ds")
    size = int(prep_cli.DST)
    truth = {}
    for new, (seed, old) in {0: (7, 0), 1: (7, 1), 2: (8, 0), 3: (8, 1)}.items():
        stack = np.stack([letterbox(f, size, size) for f in frames(0, old, seed)])
        truth[(CAM, new)] = Truth(save_raw(d, CAM, new, stack), tuple(range(N)), exact=False)
    return Built(d / "ds", truth, notes=["sources: a = libsvtav1, b = h264; both re-encoded by prep to 64x64"])


@case("lerobot-converted", V30, "a v2.1 dataset (pipeline.synth) converted by the release's "
      "convert_dataset_v21_to_v30 (0.4.4: lerobot.datasets.v30, 0.6.1: lerobot.scripts)",
      "clean-synth",
      {"v3.0": Expect(LOADS, "v30/convert_dataset_v21_to_v30.py:convert_dataset", "LeRobot's own conversion")},
      needs_lerobot=True)
def converted(d: Path, fmt: str) -> Built:
    src = write_synthetic(d / "ds", SynthSpec(version="v2.1", episodes=2, frames=N, height=H, width=W,
                                              cameras=(CAM,), gop=10, state_dim=DIM, seed=7))
    v21_truth = truth_from_clean(src, d / "ref")
    Api.convert(d, "ds")  # works on d/ds in place; the original -> ds_old
    return Built(d / "ds", v21_truth)


@case("lerobot-converted-many-files", V30, "a 4-episode v2.1 dataset converted by the release's "
      "convert_dataset_v21_to_v30 with data files of ~1.5 episodes (its data_file_size_in_mb), so every episode "
      "starts a new data file: 0.4.4's converter then names the previous file in data/file_index for episodes "
      "1-3 (a stale index; 0.6.1's names the right one)", "lerobot-converted",
      {"v3.0": Expect(LOADS, "datasets/utils.py:load_nested_dataset (0.4) / datasets/io_utils.py (0.6), "
                      "lerobot_dataset.py:_get_query_indices (dataset_from_index)",
                      "the reader concatenates every data file in path order and finds rows by "
                      "dataset_from_index; it never reads data/file_index to load")},
      needs_lerobot=True)
def converted_many_files(d: Path, fmt: str) -> Built:
    import pyarrow.parquet as pq

    src = write_synthetic(d / "ds", SynthSpec(version="v2.1", episodes=4, frames=N, height=H, width=W,
                                              cameras=(CAM,), gop=10, state_dim=DIM, seed=7))
    v21_truth = truth_from_clean(src, d / "ref")
    def size_mb(p: Path) -> float:  # as the converter measures a file (get_parquet_file_size_in_mb)
        md = pq.read_metadata(p)
        return sum(md.row_group(g).column(c).total_uncompressed_size
                   for g in range(md.num_row_groups) for c in range(md.num_columns)) / 1024**2

    largest = max(size_mb(p) for p in (src / "data").glob("*/*.parquet"))
    Api.convert(d, "ds", data_file_size_in_mb=1.5 * largest)
    ds = d / "ds"
    files = sorted((ds / "data").glob("*/*.parquet"))
    ends = np.cumsum([pq.read_metadata(p).num_rows for p in files])
    meta = pq.read_table(sorted((ds / "meta/episodes").glob("*/*.parquet"))[0],
                         columns=["episode_index", "data/file_index", "dataset_from_index"]).to_pylist()
    stale = [m["episode_index"] for m in meta  # the file really holding the rows, by position (as the reader)
             if files[int(np.searchsorted(ends, m["dataset_from_index"], side="right"))].name
             != f"file-{m['data/file_index']:03d}.parquet"]
    if len(files) < 4:
        raise RuntimeError(f"the converter wrote {len(files)} data files, not one per episode: the case tests nothing")
    if Api.line() == "0.4" and not stale:
        raise RuntimeError("lerobot 0.4.4's converter wrote no stale data/file_index: the case tests nothing")
    return Built(ds, v21_truth, notes=[f"{len(files)} data files; episodes with a stale data/file_index: "
                                       f"{stale or 'none'}"])
