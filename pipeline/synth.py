"""Synthetic LeRobot datasets (v2.1 and v3.0) for tests, benchmarks and `prep demo`.

Each camera shows a smooth textured pattern that pans, with a moving block, so that video
sizes and decode costs resemble real footage (flat colour would compress to nothing).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import datasets
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from pipeline import atomic
from pipeline.dataset.stats import aggregate, array_stats, image_stats
from pipeline.formats import FORMATS

DEFAULT_CAMERAS = (
    "observation.images.cam_high",
    "observation.images.cam_left_wrist",
    "observation.images.cam_right_wrist",
)
TASKS = ("pick up the cup", "put the pen in the holder", "fold the socks", "open the box")
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
V30_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V30_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


@dataclass(slots=True, frozen=True)
class SynthSpec:
    version: str = "v2.1"
    episodes: int = 4
    frames: int = 90
    fps: int = 30
    height: int = 480
    width: int = 640
    cameras: tuple[str, ...] = DEFAULT_CAMERAS
    codec: str = "libx264"
    pix_fmt: str = "yuv420p"
    gop: int = 30
    crf: int = 23
    preset: str = "veryfast"
    state_dim: int = 14
    episodes_per_file: int = 50
    chunks_size: int = 1000
    seed: int = 0
    reuse_video: bool = False
    # cameras (of `cameras`) stored as images: one PNG per row of the data parquet (`dtype: "image"`, a struct
    # `{bytes, path}` column, as LeRobot writes a dataset with `use_videos=False`), no video file
    image_cameras: tuple[str, ...] = ()

    @property
    def video_cameras(self) -> tuple[str, ...]:
        return tuple(c for c in self.cameras if c not in self.image_cameras)


def _texture(rng: np.random.Generator, h: int, w: int, div: int) -> np.ndarray:
    """A colour texture twice the frame size (so it can pan) with detail every `div` pixels."""
    small = rng.integers(0, 256, size=(h // div + 1, w // div + 1, 3), dtype=np.uint8)
    big = Image.fromarray(small).resize((2 * w, 2 * h), Image.Resampling.BICUBIC)
    return np.asarray(big, dtype=np.uint16)


def camera_frames(spec: SynthSpec, camera_no: int, episode: int) -> np.ndarray:
    """(frames, h, w, 3) uint8 RGB frames of one camera for one episode, deterministic.

    Two textures pan in different directions and are blended (motion compensation cannot
    predict a blend well, as with real parallax and lighting), plus a moving block. At crf 23
    this gives ~19 kB per 480x640 frame, close to real teleoperation footage (~17 kB).
    """
    rng = np.random.default_rng(spec.seed * 100_003 + episode * 31 + camera_no)
    h, w = spec.height, spec.width
    near, far = _texture(rng, h, w, 4), _texture(rng, h, w, 8)
    out = np.empty((spec.frames, h, w, 3), dtype=np.uint8)
    (ax, ay), (bx, by) = rng.uniform(2, 5, size=2), rng.uniform(1, 5, size=2)
    bs = max(8, h // 8)
    for i in range(spec.frames):
        x0, y0 = int(i * ax) % w, int(i * ay) % h
        x1, y1 = (w - int(i * bx) % w) % w, int(i * by) % h
        frame = ((near[y0 : y0 + h, x0 : x0 + w] + far[y1 : y1 + h, x1 : x1 + w]) >> 1).astype(np.uint8)
        px = int((w - bs) * (0.5 + 0.45 * np.sin(i / 9.0 + camera_no)))
        py = int((h - bs) * (0.5 + 0.45 * np.cos(i / 13.0 + episode)))
        frame[py : py + bs, px : px + bs] = (255, 255 - 40 * camera_no, 40 * camera_no)
        out[i] = frame
    return out


def encode_frames(path: Path, frames: np.ndarray, spec: SynthSpec) -> None:
    """Encode RGB frames to an mp4 with pts = i/fps, atomically."""
    with atomic.atomic_path(path) as tmp, av.open(str(tmp), mode="w", format="mp4") as out:
        stream = out.add_stream(spec.codec, rate=spec.fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, spec.pix_fmt
        stream.codec_context.time_base = Fraction(1, spec.fps)
        options: dict[str, object] = {"crf": str(spec.crf), "g": str(spec.gop), "preset": spec.preset}
        if spec.codec == "libx264":  # a fixed GOP (no scene-cut keyframes) so keyframe counts are exact
            options["x264-params"] = f"keyint={spec.gop}:min-keyint={spec.gop}:scenecut=0"
        stream.options = options
        stream.codec_context.thread_count = 1
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, spec.fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def _features(spec: SynthSpec) -> dict[str, Any]:
    joint_names = [f"joint_{i}" for i in range(spec.state_dim)]
    feats: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [spec.state_dim], "names": joint_names},
        "action": {"dtype": "float32", "shape": [spec.state_dim], "names": joint_names},
    }
    codec = {"libx264": "h264", "libsvtav1": "av1", "mjpeg": "mjpeg"}.get(spec.codec, spec.codec)
    for cam in spec.cameras:
        if cam in spec.image_cameras:
            feats[cam] = {"dtype": "image", "shape": [spec.height, spec.width, 3],
                          "names": ["height", "width", "channels"]}
            continue
        feats[cam] = {
            "dtype": "video",
            "shape": [spec.height, spec.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": spec.height,
                "video.width": spec.width,
                "video.codec": codec,
                "video.pix_fmt": spec.pix_fmt,
                "video.is_depth_map": False,
                "video.fps": spec.fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    for name, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                        ("index", "int64"), ("task_index", "int64")):
        feats[name] = {"dtype": dtype, "shape": [1], "names": None}
    return feats


def hf_features(features: dict[str, Any]) -> datasets.Features:
    """The Hugging Face `datasets` features LeRobot derives from info.json (videos excluded)."""
    out: dict[str, Any] = {}
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        if ft["dtype"] == "image":
            out[key] = datasets.Image()
        elif ft["shape"] == [1]:
            out[key] = datasets.Value(dtype=ft["dtype"])
        else:
            out[key] = datasets.Sequence(length=ft["shape"][0], feature=datasets.Value(dtype=ft["dtype"]))
    return datasets.Features(out)


def episode_rows(spec: SynthSpec, episode: int, start_index: int, task_index: int) -> dict[str, Any]:
    n, d = spec.frames, spec.state_dim
    t = np.arange(n, dtype=np.float64) / spec.fps
    phase = np.arange(d, dtype=np.float64) * 0.37 + episode
    action = np.sin(2 * np.pi * 0.3 * t[:, None] + phase[None, :]).astype(np.float32)
    state = np.vstack([action[:1], action[:-1]]).astype(np.float32)
    return {
        "observation.state": state,
        "action": action,
        "timestamp": (np.arange(n) / spec.fps).astype(np.float32),
        "frame_index": np.arange(n, dtype=np.int64),
        "episode_index": np.full(n, episode, dtype=np.int64),
        "index": np.arange(start_index, start_index + n, dtype=np.int64),
        "task_index": np.full(n, task_index, dtype=np.int64),
    }


def png_bytes(frame: np.ndarray) -> bytes:
    """One frame as PNG (what `datasets`' Image feature stores for a uint8 array)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def image_rows(spec: SynthSpec, episode: int) -> dict[str, Any]:
    """The image columns of one episode: camera key -> `{bytes, path}` per frame."""
    out: dict[str, Any] = {}
    for cam_no, cam in enumerate(spec.cameras):
        if cam in spec.image_cameras:
            frames = camera_frames(spec, cam_no, episode)
            out[cam] = [{"bytes": png_bytes(f), "path": None} for f in frames]
    return out


def rows_table(rows: list[dict[str, Any]], features: datasets.Features) -> pa.Table:
    cols: dict[str, Any] = {}
    for key in features:
        if isinstance(features[key], datasets.Image):
            cols[key] = [v for r in rows for v in r[key]]
            continue
        arr = np.concatenate([r[key] for r in rows])
        cols[key] = list(arr) if arr.ndim > 1 else arr
    return pa.Table.from_pydict(
        {k: (pa.array(v, type=features.arrow_schema.field(k).type) if isinstance(features[k], datasets.Image)
             else pa.array([list(x) for x in v], type=features.arrow_schema.field(k).type) if isinstance(v, list)
             else pa.array(v, type=features.arrow_schema.field(k).type)) for k, v in cols.items()},
        schema=features.arrow_schema,
    )


def write_parquet(path: Path, table: pa.Table) -> None:
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def numeric_stats(rows: dict[str, Any]) -> dict[str, Any]:
    return {k: array_stats(np.asarray(v)) for k, v in rows.items()}


def write_synthetic(root: Path | str, spec: SynthSpec | None = None, **overrides: Any) -> Path:
    """Write a synthetic dataset at `root` (created; must not exist or be empty) and return it."""
    spec = spec or SynthSpec()
    if overrides:
        spec = SynthSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, **overrides})
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if spec.version not in FORMATS:
        raise ValueError(f"unsupported synthetic version {spec.version!r} (v2.1 or v3.0)")
    # episodes sharing files (v3.0) or a file per episode (v2.1)
    (_write_v30 if FORMATS[spec.version].layout.shares_files else _write_v21)(root, spec)
    return root


class _VideoCache:
    """With `reuse_video`, encode each camera's first episode once and copy it (fast, for scale tests)."""

    def __init__(self, spec: SynthSpec) -> None:
        self.spec = spec
        self.first: dict[int, Path] = {}

    def write(self, path: Path, camera_no: int, episode: int, frames: np.ndarray | None = None) -> np.ndarray | None:
        if self.spec.reuse_video and camera_no in self.first:
            with atomic.atomic_path(path) as tmp:
                shutil.copyfile(self.first[camera_no], tmp)
            return None
        frames = camera_frames(self.spec, camera_no, episode) if frames is None else frames
        encode_frames(path, frames, self.spec)
        self.first.setdefault(camera_no, path)
        return frames


def _sample_stats(frames: np.ndarray | None, cache: dict[int, dict[str, Any]], camera_no: int) -> dict[str, Any]:
    if frames is not None:
        cache[camera_no] = image_stats(frames[:: max(1, len(frames) // 10)])
        cache[camera_no]["count"] = [len(frames[:: max(1, len(frames) // 10)])]
    return cache[camera_no]


def _write_v21(root: Path, spec: SynthSpec) -> None:
    features = _features(spec)
    hf = hf_features(features)
    cache = _VideoCache(spec)
    img_stats: dict[int, dict[str, Any]] = {}
    episodes, ep_stats = [], []
    index = 0
    for ep in range(spec.episodes):
        chunk = ep // spec.chunks_size
        task_index = ep % len(TASKS)
        rows = episode_rows(spec, ep, index, task_index)
        index += spec.frames
        write_parquet(root / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=ep),
                      rows_table([rows | image_rows(spec, ep)], hf))
        stats = numeric_stats(rows)
        for cam_no, cam in enumerate(spec.cameras):
            if cam in spec.image_cameras:
                stats[cam] = _sample_stats(camera_frames(spec, cam_no, ep), {}, cam_no)
                continue
            rel = V21_VIDEO_PATH.format(episode_chunk=chunk, episode_index=ep, video_key=cam)
            frames = cache.write(root / rel, cam_no, ep)
            stats[cam] = _sample_stats(frames, img_stats, cam_no)
        episodes.append({"episode_index": ep, "tasks": [TASKS[task_index]], "length": spec.frames})
        ep_stats.append({"episode_index": ep, "stats": stats})
    n_tasks = min(len(TASKS), spec.episodes)
    info = {
        "codebase_version": "v2.1",
        "robot_type": "synthetic",
        "total_episodes": spec.episodes,
        "total_frames": spec.episodes * spec.frames,
        "total_tasks": n_tasks,
        "total_videos": spec.episodes * len(spec.video_cameras),
        "total_chunks": (spec.episodes - 1) // spec.chunks_size + 1 if spec.episodes else 0,
        "chunks_size": spec.chunks_size,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": V21_DATA_PATH,
        "video_path": V21_VIDEO_PATH if spec.video_cameras else None,  # LeRobot's writer: None without videos
        "features": features,
    }
    atomic.write_jsonl(root / "meta/episodes.jsonl", episodes)
    atomic.write_jsonl(root / "meta/episodes_stats.jsonl", ep_stats)
    atomic.write_jsonl(root / "meta/tasks.jsonl", [{"task_index": i, "task": TASKS[i]} for i in range(n_tasks)])
    atomic.write_json(root / "meta/info.json", info)


def _write_v30(root: Path, spec: SynthSpec) -> None:
    features = _features(spec)
    hf = hf_features(features)
    img_stats: dict[int, dict[str, Any]] = {}
    per_file = max(1, spec.episodes_per_file)
    ep_rows: list[dict[str, Any]] = []
    all_stats: list[dict[str, Any]] = []
    index = 0
    for file_no, first in enumerate(range(0, spec.episodes, per_file)):
        chunk, file_index = file_no // spec.chunks_size, file_no % spec.chunks_size
        eps = list(range(first, min(spec.episodes, first + per_file)))
        rows = []
        for ep in eps:
            task_index = ep % len(TASKS)
            rows.append(episode_rows(spec, ep, index + (ep - first) * spec.frames, task_index))
        write_parquet(root / V30_DATA_PATH.format(chunk_index=chunk, file_index=file_index),
                      rows_table([r | image_rows(spec, ep) for r, ep in zip(rows, eps, strict=True)], hf))
        ep_img_stats: dict[int, dict[str, Any]] = {}
        for cam_no, cam in enumerate(spec.cameras):
            if cam in spec.image_cameras:
                ep_img_stats[cam_no] = _sample_stats(camera_frames(spec, cam_no, eps[0]), {}, cam_no)
                continue
            if spec.reuse_video:
                frames_list = [camera_frames(spec, cam_no, 0)] * len(eps)
            else:
                frames_list = [camera_frames(spec, cam_no, ep) for ep in eps]
            frames = np.concatenate(frames_list)
            rel = V30_VIDEO_PATH.format(video_key=cam, chunk_index=chunk, file_index=file_index)
            encode_frames(root / rel, frames, spec)
            ep_img_stats[cam_no] = _sample_stats(frames_list[0], img_stats, cam_no)
        for k, ep in enumerate(eps):
            row: dict[str, Any] = {
                "episode_index": ep,
                "tasks": [TASKS[ep % len(TASKS)]],
                "length": spec.frames,
                "data/chunk_index": chunk,
                "data/file_index": file_index,
                "dataset_from_index": index,
                "dataset_to_index": index + spec.frames,
            }
            for cam in spec.video_cameras:
                row[f"videos/{cam}/chunk_index"] = chunk
                row[f"videos/{cam}/file_index"] = file_index
                row[f"videos/{cam}/from_timestamp"] = k * spec.frames / spec.fps
                row[f"videos/{cam}/to_timestamp"] = (k + 1) * spec.frames / spec.fps
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            stats = numeric_stats(rows[k])
            for cam_no, cam in enumerate(spec.cameras):
                stats[cam] = ep_img_stats[cam_no]
            all_stats.append(stats)
            for feat, st in stats.items():
                for name, value in st.items():
                    dtype = np.int64 if name == "count" else np.float64
                    row[f"stats/{feat}/{name}"] = np.asarray(value, dtype=dtype).tolist()  # (3, 1, 1) as LeRobot
            ep_rows.append(row)
            index += spec.frames
    ep_table = pa.Table.from_pylist(ep_rows)
    write_parquet(root / "meta/episodes/chunk-000/file-000.parquet", ep_table)
    n_tasks = min(len(TASKS), spec.episodes)
    tasks_df = pd.DataFrame({"task_index": list(range(n_tasks))}, index=list(TASKS[:n_tasks]))
    with atomic.atomic_path(root / "meta/tasks.parquet") as tmp:
        tasks_df.to_parquet(tmp)
    atomic.write_json(root / "meta/stats.json", aggregate(all_stats))
    info = {
        "codebase_version": "v3.0",
        "robot_type": "synthetic",
        "total_episodes": spec.episodes,
        "total_frames": spec.episodes * spec.frames,
        "total_tasks": n_tasks,
        "chunks_size": spec.chunks_size,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": V30_DATA_PATH,
        "video_path": V30_VIDEO_PATH,
        "features": features,
    }
    atomic.write_json(root / "meta/info.json", info)
