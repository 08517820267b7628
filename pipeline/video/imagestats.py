"""Image stats of re-encoded frames, as LeRobot stores them, fed frame by frame during the encode.

LeRobot (`lerobot/datasets/compute_stats.py`, 0.3.3 and 0.4.x alike) computes a video feature's
per-episode stats from `sample_indices(n)` frames of the episode (all frames up to 100, then
n**0.75, at most 10,000), as RGB uint8, and reduces over (frame, height, width): per-channel
min/max/mean/std / 255 shaped (3, 1, 1) and `count` = frames sampled. Frames of 300 pixels or more
on a side are downsampled first (`auto_downsample_height_width`); at 224 nothing is.

Here a sampled frame (the resized frame before compression, in the encoder's pixel format) is
converted to rgb24 by a one-filter graph (`format=rgb24`: the same swscale conversion as
`frame.to_ndarray(format="rgb24")`, into pooled buffers reused frame after frame) and reduced to
an exact per-channel histogram by Pillow's C histogram: ~0.12 ms per 224x224 frame against ~0.3 ms
for a reformat and three `np.bincount` calls. Nothing of frame size is allocated per frame: in a
Dask worker, started with `MALLOC_TRIM_THRESHOLD_` (which turns off glibc's adaptive mmap
threshold), every fresh 150 kB allocation is a new mmap and ~40 page faults. Integer histograms make
the numbers identical however often, and by whichever engine, they are made.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, cast

import av
import numpy as np
from PIL import Image

from pipeline.video.encode import set_filter_threads


def estimate_num_samples(n: int, lo: int = 100, hi: int = 10_000, power: float = 0.75) -> int:
    """LeRobot's `estimate_num_samples` (compute_stats.py)."""
    lo = min(lo, n)
    return max(lo, min(int(n**power), hi))


def sample_indices(n: int) -> list[int]:
    """LeRobot's `sample_indices`: evenly spaced frame indices of an episode."""
    return [int(i) for i in np.round(np.linspace(0, n - 1, estimate_num_samples(n))).astype(int)]


class RgbHistogram:
    """Per-channel pixel counts of frames in rgb24: a `format=rgb24` filter graph (built for the first
    frame's size and format, rebuilt if they change; one thread, like the encoder's graph) whose
    output buffers are pooled, unpacked into one kept Pillow image, counted by Pillow's histogram."""

    def __init__(self) -> None:
        self.graph: av.filter.Graph | None = None
        self.image: Image.Image | None = None
        self.shape: tuple[int, int, str] | None = None

    def _build(self, frame: av.VideoFrame) -> av.filter.Graph:
        graph = av.filter.Graph()
        set_filter_threads(graph, 1)
        src = graph.add_buffer(width=frame.width, height=frame.height, format=frame.format,
                               time_base=Fraction(1, 1000))
        graph.link_nodes(src, graph.add("format", "pix_fmts=rgb24"), graph.add("buffersink")).configure()
        self.image = Image.new("RGB", (frame.width, frame.height))
        self.shape = (frame.width, frame.height, frame.format.name)
        return graph

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        """(3, 256) int64 counts of R, G and B values."""
        if self.graph is None or self.shape != (frame.width, frame.height, frame.format.name):
            self.graph = self._build(frame)
        self.graph.push(frame)
        rgb = self.graph.pull()
        assert isinstance(rgb, av.VideoFrame) and self.image is not None
        plane = rgb.planes[0]
        # read in place (row stride included) into the kept image; Pillow's stubs only name bytes
        self.image.frombytes(cast(bytes, memoryview(plane)), "raw", "RGB", plane.line_size, 1)
        return np.asarray(self.image.histogram(), dtype=np.int64).reshape(3, 256)


class SpanImageStats:
    """Image stats per episode span of a file, fed frame by frame: per-channel min/max/mean/std in
    [0, 1] shaped (3, 1, 1) and count = frames sampled, as LeRobot stores them. Only LeRobot's
    sampled frames are looked at; the others cost one dict lookup."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self.wanted: dict[int, int] = {}
        for k, (start, n) in enumerate(spans):
            for i in sample_indices(n):
                self.wanted[start + i] = k
        self.hist = np.zeros((len(spans), 3, 256), dtype=np.int64)
        self.frames = np.zeros(len(spans), dtype=np.int64)
        self.histogram = RgbHistogram()

    def add(self, index: int, frame: av.VideoFrame) -> None:
        k = self.wanted.get(index)
        if k is None:
            return
        self.hist[k] += self.histogram(frame)
        self.frames[k] += 1

    def result(self) -> list[dict[str, Any]]:
        levels = np.arange(256, dtype=np.int64)
        out = []
        for k in range(len(self.spans)):
            h = self.hist[k]
            n = np.maximum(h.sum(axis=1), 1)
            s1, s2 = h @ levels, h @ (levels * levels)
            mean = s1 / n
            var = np.maximum(s2 / n - mean * mean, 0.0)
            present = h > 0
            lo = np.array([levels[p].min() if p.any() else 0 for p in present])
            hi = np.array([levels[p].max() if p.any() else 0 for p in present])

            def c11(v: np.ndarray) -> list[Any]:
                return [[[float(x)]] for x in v]

            out.append({"min": c11(lo / 255.0), "max": c11(hi / 255.0), "mean": c11(mean / 255.0),
                        "std": c11(np.sqrt(var) / 255.0), "count": [int(self.frames[k])]})
        return out
