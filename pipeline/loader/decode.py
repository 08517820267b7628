"""Random access to single frames with decoders kept open, one cache per process.

A DataLoader worker is a forked (or spawned) copy of the process that built the dataset; an
open FFmpeg context must not be shared across that boundary, so the cache remembers the pid
that filled it and starts empty in any other process. Each lookup seeks to the keyframe at
or before the target and decodes forward to the frame whose pts is nearest the target: on
all-intra video that is exactly one decoded frame; on GOP video it is up to a GOP.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from pipeline.storage import FileProblem, StorePath
from pipeline.video.probe import open_media

# An object's read size for random access (a seek to a keyframe, a GOP decoded): each lookup reads about one block
# (a whole-file STREAM_BLOCK would fetch 8 MiB of a large v3.0 file for one frame); a local file ignores it.
RANDOM_BLOCK = 1 << 20

# Contexts inherited through fork are parked here, never closed: finalizing an FFmpeg context
# that the parent opened can deadlock the child (observed with PyAV 18). Workers leave via
# os._exit, so nothing here is ever finalized; the memory is shared copy-on-write anyway.
_INHERITED: list[object] = []


class FrameError(Exception):
    """The frame asked for is not in the file (or the file cannot be decoded)."""


@dataclass(slots=True)
class _OpenVideo:
    container: av.container.InputContainer
    stream: av.VideoStream
    time_base: Fraction
    half_frame_pts: int


class DecoderCache:
    """Open PyAV containers by path, least recently used closed beyond `max_open`."""

    _open: OrderedDict[str | StorePath, _OpenVideo]
    _reformatter: VideoReformatter

    def __init__(self, max_open: int = 128, thread_count: int = 1, block_size: int = RANDOM_BLOCK) -> None:
        self.max_open = max_open
        self.thread_count = thread_count
        self.block_size = block_size
        self._reset()

    def _reset(self) -> None:
        if getattr(self, "_open", None):
            _INHERITED.append((self._open, self._reformatter))
        self._pid = os.getpid()
        self._open = OrderedDict()
        self._reformatter = VideoReformatter()
        self.frames_decoded = 0  # every frame decoded, including those passed over to reach a target
        self.frames_returned = 0
        self.opens = 0
        self.decode_s = 0.0

    def __getstate__(self) -> dict[str, int]:
        # Pickled into spawned workers: carry the settings, never the open contexts.
        return {"max_open": self.max_open, "thread_count": self.thread_count, "block_size": self.block_size}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.max_open, self.thread_count = state["max_open"], state["thread_count"]
        self.block_size = state.get("block_size", RANDOM_BLOCK)
        self._reset()

    def _video(self, path: str | StorePath) -> _OpenVideo:
        if os.getpid() != self._pid:  # forked: the parent's contexts are not ours to use
            self._reset()
        video = self._open.get(path)
        if video is not None:
            self._open.move_to_end(path)
            return video
        try:
            # through its store: a local path, or a ranged reader of an object (this process's own store)
            container = av.open(open_media(path, block_size=self.block_size), mode="r")
        except FileProblem as exc:
            raise FrameError(f"{path}: cannot open ({exc.message})") from None
        except (av.FFmpegError, OSError) as exc:
            raise FrameError(f"{path}: cannot open ({type(exc).__name__}: {exc})") from None
        if not container.streams.video:
            container.close()
            raise FrameError(f"{path}: no video stream")
        stream = container.streams.video[0]
        stream.codec_context.thread_count = self.thread_count
        tb = stream.time_base or Fraction(1, 1)
        rate = stream.average_rate or stream.guessed_rate or Fraction(30)
        half = max(1, round(1 / (2 * float(rate) * tb)))
        video = _OpenVideo(container, stream, tb, half)
        self._open[path] = video
        self.opens += 1
        while len(self._open) > self.max_open:
            _, old = self._open.popitem(last=False)
            old.container.close()
        return video

    def frame_at(self, path: str | StorePath, t: float) -> np.ndarray:
        """The RGB frame (h, w, 3) uint8 shown at `t` seconds into the file (nearest pts, ±half a frame)."""
        start = time.perf_counter()
        video = self._video(path)
        target = round(t / video.time_base)
        try:
            frame = self._decode_to(video, target)
        except av.FFmpegError as exc:
            self._drop(path)
            raise FrameError(f"{path}: decode failed at t={t:.4f} s ({type(exc).__name__}: {exc})") from None
        if frame is None:
            raise FrameError(f"{path}: no frame at t={t:.4f} s (pts {target} in {video.time_base})")
        rgb = self._reformatter.reformat(frame, format="rgb24").to_ndarray()
        self.frames_returned += 1
        self.decode_s += time.perf_counter() - start
        return rgb

    def _decode_to(self, video: _OpenVideo, target: int) -> av.VideoFrame | None:
        video.container.seek(max(0, target), stream=video.stream, backward=True, any_frame=False)
        lo, hi = target - video.half_frame_pts, target + video.half_frame_pts
        for packet in video.container.demux(video.stream):
            for frame in packet.decode():
                if frame.pts is None:
                    continue
                self.frames_decoded += 1
                if frame.pts < lo:
                    continue
                return frame if frame.pts <= hi else None
        return None

    def _drop(self, path: str | StorePath) -> None:
        video = self._open.pop(path, None)
        if video is not None:
            video.container.close()

    def close(self) -> None:
        for video in self._open.values():
            video.container.close()
        self._open.clear()
