"""A quality figure of a re-encode on the user's own footage: PSNR (RGB) and SSIM (luma) of a few frames per
output file against the frames the encoder was given.

The reference of frame i is the source frame i decoded, turned and resized exactly as for the encode (the
frame the encode hook sees, in the profile's pixel format, as RGB); the measured frame is frame i decoded back
from the output file. So the figure is what the encode lost, on this footage, at these settings: the resize
itself (and the profile's chroma subsampling) is in both. The sample is deterministic: one frame per started
`FRAMES_PER_SAMPLE` frames of the file, at most `QUALITY_FRAMES`, evenly spread (the middle of each of that many
equal parts), decoded from their own packets only (every output frame is a keyframe): a few frame decodes per
file, not a second pass (measured: bench/quality_cost.py).

PSNR = 10 log10(255^2 / MSE) over the RGB samples, capped at `PSNR_IDENTICAL` for identical frames; SSIM is
Wang et al.'s SSIM on the BT.601 luma, averaged over non-overlapping 8x8 blocks (sample covariance, K1 = 0.01,
K2 = 0.03): the block variant, ~1 ms a 224x224 frame, ten times cheaper than a sliding 7x7 window here.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

QUALITY_FRAMES = 3  # sampled frames per output file, at most
FRAMES_PER_SAMPLE = 150  # one sampled frame per started 150 frames (a 90-frame episode file: 1; 316: 3)
PSNR_IDENTICAL = 100.0  # dB reported for a frame equal to its reference (MSE 0)
SSIM_BLOCK = 8
C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


def sample_indices(total: int) -> list[int]:
    """The sampled frame indices of a `total`-frame file: the middle of each of n equal parts."""
    n = min(QUALITY_FRAMES, -(-total // FRAMES_PER_SAMPLE), total)
    return sorted({(2 * j + 1) * total // (2 * n) for j in range(n)}) if n > 0 else []


def psnr(ref: np.ndarray, out: np.ndarray) -> float:
    d = (ref.astype(np.int16) - out.astype(np.int16)).ravel().astype(np.float32)
    mse = float(np.dot(d, d)) / d.size
    return PSNR_IDENTICAL if mse == 0 else min(PSNR_IDENTICAL, 10 * math.log10(255.0**2 / mse))


def _blocks(x: np.ndarray, k: int = SSIM_BLOCK) -> np.ndarray:
    """x cut into its whole k x k blocks: (rows, cols, k * k)."""
    h, w = (x.shape[0] // k) * k, (x.shape[1] // k) * k
    return x[:h, :w].reshape(h // k, k, w // k, k).swapaxes(1, 2).reshape(h // k, w // k, k * k)


def ssim(ref: np.ndarray, out: np.ndarray) -> float:
    """Mean SSIM of two RGB uint8 frames on their luma, over 8x8 blocks; NaN for a frame smaller than a block."""
    x, y = ref.astype(np.float32) @ LUMA, out.astype(np.float32) @ LUMA
    if min(x.shape) < SSIM_BLOCK:
        return float("nan")
    bx, by = _blocks(x), _blocks(y)
    mx, my = bx.mean(-1), by.mean(-1)
    n = SSIM_BLOCK * SSIM_BLOCK
    dx, dy = bx - mx[..., None], by - my[..., None]
    vx, vy, vxy = (dx * dx).sum(-1) / (n - 1), (dy * dy).sum(-1) / (n - 1), (dx * dy).sum(-1) / (n - 1)
    s = ((2 * mx * my + C1) * (2 * vxy + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2))
    return float(s.mean())


class QualitySample:
    """Collects the reference frames of the sampled indices from the encode hook (`add`), then `measure`s the
    written file against them. `seconds` is all the time it spent (copying references, decoding, comparing)."""

    def __init__(self, total: int) -> None:
        self.want = set(sample_indices(total))
        self.refs: dict[int, np.ndarray] = {}
        self.seconds = 0.0

    def add(self, index: int, frame: Any) -> None:
        if index in self.want:
            t = time.perf_counter()
            self.refs[index] = frame.to_ndarray(format="rgb24")
            self.seconds += time.perf_counter() - t

    def measure(self, path: Path) -> dict[str, Any] | None:
        """{"frames": [i...], "psnr_db": [...], "ssim": [...]} of the sampled frames, or None when
        they cannot be read back one by one (then the file has no quality figure; its checks decide the rest)."""
        t = time.perf_counter()
        try:
            return self._measure(path)
        finally:
            self.seconds += time.perf_counter() - t

    def _measure(self, path: Path) -> dict[str, Any] | None:
        import av

        from pipeline.video.encode import open_source

        wanted = sorted(self.refs)
        if not wanted:
            return None
        decoded: list[np.ndarray] = []
        try:
            container, stream = open_source(path)  # no probe decode at open; one decoder thread
            with container:
                ctx = stream.codec_context
                n = 0
                for packet in container.demux(stream):
                    if packet.size == 0:
                        continue
                    if n in self.refs:  # all-intra: a sampled frame decodes from its own packet
                        decoded += [f.to_ndarray(format="rgb24") for f in ctx.decode(packet)]
                    n += 1
                    if n > wanted[-1]:
                        break
                decoded += [f.to_ndarray(format="rgb24") for f in ctx.decode(None)]
        except (av.FFmpegError, OSError, ValueError):
            return None
        if len(decoded) != len(wanted) or any(d.shape != self.refs[i].shape for i, d in zip(wanted, decoded,
                                                                                            strict=True)):
            return None
        pairs = [(self.refs[i], d) for i, d in zip(wanted, decoded, strict=True)]
        return {"frames": wanted, "psnr_db": [psnr(r, d) for r, d in pairs], "ssim": [ssim(r, d) for r, d in pairs]}
