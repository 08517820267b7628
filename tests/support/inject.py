"""Fault injection: make one precise fault in a *copy* of a LeRobot dataset (v2.1 or v3.0).

Every function edits the dataset in place and returns the path it changed, so callers copy a
fixture first (`copy_dataset` in tests/conftest.py). Videos are rewritten with PyAV (libx264,
whatever the source codec), keeping each surviving frame's original presentation time, so that
only the intended fault differs from the source. The metadata is never touched: the point is a
dataset whose files disagree with it.

    root = copy_dataset(synth_v21)
    drop_frame(root, episode=1, camera="observation.images.cam_high")   # 89 frames in one camera
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from av.video.frame import PictureType

from pipeline.dataset import resolve_inside
from pipeline.formats import open_dataset

TIME_BASE_PER_FRAME = 1000  # output pts ticks per frame interval: exact i/fps and half-frame shifts


@dataclass(slots=True, frozen=True)
class VideoTarget:
    """One camera's file of one episode, and the episode's span in it ([t0, t1), t1 None = to the end)."""

    path: Path
    fps: float
    t0: float
    t1: float | None


def video_target(root: Path, episode: int, camera: str) -> VideoTarget:
    """Where `camera`'s frames of `episode` live."""
    ds, _ = open_dataset(root)
    ep = next(e for e in ds.episodes if e.index == episode)
    ref = ep.video(camera)
    return VideoTarget(resolve_inside(ds.root, ref.rel), ds.fps, ref.from_timestamp, ref.to_timestamp)


def data_path(root: Path, episode: int) -> Path:
    """The parquet file holding `episode`'s rows."""
    ds, _ = open_dataset(root)
    ep = next(e for e in ds.episodes if e.index == episode)
    return resolve_inside(ds.root, ep.data.rel)


def _decode(path: Path) -> tuple[list[tuple[float, av.VideoFrame]], int, bool]:
    """(time in s, frame) for every frame, a GOP that keeps the source's kind (1 if all-intra,
    else 30), and whether the source is all-intra."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        tb = stream.time_base or Fraction(1, 1)
        frames = [(float(f.pts * tb) if f.pts is not None else float(f.time or 0.0), f) for f in c.decode(stream)]
    with av.open(str(path)) as c:
        keys = [p.is_keyframe for p in c.demux(c.streams.video[0]) if p.size]
    all_intra = bool(keys) and all(keys)
    return frames, (1 if all_intra else 30), all_intra


def write_video(
    path: Path,
    frames: Iterable[tuple[float, av.VideoFrame]],
    fps: float,
    *,
    gop: int,
    size: tuple[int, int] | None = None,
) -> Path:
    """Encode (time in s, frame) pairs to `path` with libx264 at exactly those times.

    `gop=1` gives every frame a keyframe; `size` = (width, height) rescales. No B-frames.
    """
    items = sorted(frames, key=lambda p: p[0])
    rate = Fraction(fps).limit_denominator(1001)
    tb = 1 / (rate * TIME_BASE_PER_FRAME)
    tmp = path.with_name(path.name + ".inject.mp4")
    with av.open(str(tmp), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=rate)
        w, h = size or (items[0][1].width, items[0][1].height)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.time_base = tb
        # A fixed GOP: no scene-cut keyframes, so keyframe counts are exactly what was asked.
        stream.options = {"crf": "23", "preset": "ultrafast", "g": str(gop), "bf": "0",
                          "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        stream.codec_context.thread_count = 1
        for t, frame in items:
            img = frame.reformat(width=w, height=h, format="yuv420p")
            img.pict_type = PictureType.NONE  # a decoded I frame would force a keyframe
            img.pts = round(t / tb)
            img.time_base = tb
            out.mux(stream.encode(img))
        out.mux(stream.encode(None))
    tmp.replace(path)
    return path


def _span_frames(frames: list[tuple[float, av.VideoFrame]], target: VideoTarget) -> list[int]:
    eps = 1e-4
    return [i for i, (t, _) in enumerate(frames)
            if t >= target.t0 - eps and (target.t1 is None or t < target.t1 - eps)]


def drop_frame(root: Path, episode: int, camera: str, which: int = -1) -> Path:
    """Remove frame `which` (index within the episode; -1 = its last) from one camera's video.

    The other frames keep their times, so dropping a middle frame also leaves a gap in the pts.
    """
    target = video_target(root, episode, camera)
    frames, gop, _ = _decode(target.path)
    victim = _span_frames(frames, target)[which]
    return write_video(target.path, [f for i, f in enumerate(frames) if i != victim], target.fps, gop=gop)


def add_frame(root: Path, episode: int, camera: str) -> Path:
    """Add one frame (a copy of the episode's last) to one camera's video of the episode.

    It goes one frame interval after the episode's last frame when that time is free (v2.1, or the
    last episode of a v3.0 file); otherwise half an interval after it, inside the episode's span.
    """
    target = video_target(root, episode, camera)
    frames, gop, _ = _decode(target.path)
    last = _span_frames(frames, target)[-1]
    t_last, frame = frames[last]
    step = 1.0 / target.fps
    taken = any(abs(t - (t_last + step)) < 1e-4 for t, _ in frames)
    t_new = t_last + (0.5 * step if taken else step)
    return write_video(target.path, [*frames, (t_new, frame)], target.fps, gop=gop)


def reencode_video(root: Path, episode: int, camera: str, *, gop: int | None = None,
                   size: tuple[int, int] | None = None) -> Path:
    """Re-encode one camera's whole file (v3.0: every episode in it) with another GOP or size.

    `gop=30` turns an all-intra file into a normal one; `size=(w, h)` gives a wrong resolution.
    """
    target = video_target(root, episode, camera)
    frames, src_gop, _ = _decode(target.path)
    return write_video(target.path, frames, target.fps, gop=gop or src_gop, size=size)


def shift_video_frame(root: Path, episode: int, camera: str, frame: int, by_frames: float = 0.5) -> Path:
    """Move one frame's presentation time by `by_frames` frame intervals (off the i/fps grid)."""
    target = video_target(root, episode, camera)
    frames, gop, _ = _decode(target.path)
    i = _span_frames(frames, target)[frame]
    t, f = frames[i]
    frames[i] = (t + by_frames / target.fps, f)
    return write_video(target.path, frames, target.fps, gop=gop)


def truncate_file(path: Path, keep: float = 0.5) -> Path:
    """Cut a file to `keep` of its bytes, as a killed writer or a partial copy leaves it."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(int(size * keep))
    return path


def remux_faststart(path: Path) -> Path:
    """Rewrite an mp4 with its index (moov) before the frames, packets untouched.

    Truncating such a file keeps a readable header that promises more frames than remain;
    truncating a default mp4 (index at the end) leaves no index at all.
    """
    tmp = path.with_name(path.name + ".inject.mp4")
    with av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4", options={"movflags": "faststart"}) as out:
        stream = out.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is None:
                continue
            packet.stream = stream
            out.mux(packet)
    tmp.replace(path)
    return path


def truncate_video(root: Path, episode: int, camera: str, keep: float = 0.5, *, faststart: bool = False) -> Path:
    """Truncate one camera's mp4 of the episode to `keep` of its bytes.

    By default the index is lost (unreadable file); with `faststart` the file is first remuxed
    with its index in front, so the header still counts every frame but only some remain.
    """
    path = video_target(root, episode, camera).path
    if faststart:
        remux_faststart(path)
    return truncate_file(path, keep)


def _rewrite_parquet(path: Path, table: pa.Table) -> Path:
    tmp = path.with_name(path.name + ".inject.parquet")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def _episode_row(table: pa.Table, episode: int, frame_index: int) -> int:
    mask = pc.and_(pc.equal(table["episode_index"], episode), pc.equal(table["frame_index"], frame_index))
    rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    if rows.size != 1:
        raise ValueError(f"episode {episode} frame_index {frame_index}: found {rows.size} rows")
    return int(rows[0])


def delete_parquet_row(root: Path, episode: int, frame_index: int = 45) -> Path:
    """Delete the row of `episode` with `frame_index` from its parquet file."""
    path = data_path(root, episode)
    table = pq.read_table(path)
    row = _episode_row(table, episode, frame_index)
    keep = np.ones(table.num_rows, dtype=bool)
    keep[row] = False
    return _rewrite_parquet(path, table.filter(pa.array(keep)))


def shift_timestamp(root: Path, episode: int, frame_index: int = 45, by_frames: float = 0.5) -> Path:
    """Move one row's `timestamp` by `by_frames` frame intervals (default half a frame)."""
    path = data_path(root, episode)
    ds, _ = open_dataset(root)
    table = pq.read_table(path)
    row = _episode_row(table, episode, frame_index)
    col = table.column_names.index("timestamp")
    ts = table["timestamp"].to_numpy().copy()
    ts[row] += np.asarray(by_frames / ds.fps, dtype=ts.dtype)
    return _rewrite_parquet(path, table.set_column(col, table.schema.field(col), pa.array(ts)))
