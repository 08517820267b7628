"""Resize modes: where a source frame lands in the target frame, as a chain of FFmpeg filters.

Each mode is a pure function `(src_w, src_h, dst_w, dst_h) -> Geometry`; both engines run the
same geometry as the same filter chain (PyAV through an in-process filter graph that is built
once per file and reused for every frame, the ffmpeg engine through `-vf`), so the two engines
place and scale pixels identically.

`pad` is openpi's `resize_with_pad` (pi0/pi0.5): keep the aspect ratio, bilinear, centre on zeros,
and pass a frame that already has the target size through unchanged. 640x480 -> 224x168 pasted
at (0, 28) on black.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Filter = tuple[str, dict[str, str]]


@dataclass(slots=True, frozen=True)
class Geometry:
    """Crop `crop` (x, y, w, h) from the source, scale it to `scaled` (w, h), paste it at `offset` (x, y)
    on a black `size` (w, h) canvas. `crop=None`: the whole frame."""

    size: tuple[int, int]
    scaled: tuple[int, int]
    offset: tuple[int, int] = (0, 0)
    crop: tuple[int, int, int, int] | None = None

    @property
    def identity_scale(self) -> bool:
        return self.crop is None and self.scaled == self.size and self.offset == (0, 0)


def pad(src_w: int, src_h: int, dst_w: int, dst_h: int) -> Geometry:
    """openpi `resize_with_pad`: ratio = max(w/W, h/H); int() sizes; int() half padding."""
    if (src_w, src_h) == (dst_w, dst_h):
        return Geometry(size=(dst_w, dst_h), scaled=(dst_w, dst_h))
    ratio = max(src_w / dst_w, src_h / dst_h)
    new_h, new_w = int(src_h / ratio), int(src_w / ratio)
    pad_h, pad_w = max(0, int((dst_h - new_h) / 2)), max(0, int((dst_w - new_w) / 2))
    return Geometry(size=(dst_w, dst_h), scaled=(new_w, new_h), offset=(pad_w, pad_h))


def stretch(src_w: int, src_h: int, dst_w: int, dst_h: int) -> Geometry:
    """Scale to the target size, ignoring the aspect ratio."""
    return Geometry(size=(dst_w, dst_h), scaled=(dst_w, dst_h))


def crop(src_w: int, src_h: int, dst_w: int, dst_h: int) -> Geometry:
    """Keep the aspect ratio and fill the target: centre-crop the source to the target's aspect, then scale."""
    if src_w * dst_h > dst_w * src_h:  # source wider than target
        cw, ch = round(src_h * dst_w / dst_h), src_h
    else:
        cw, ch = src_w, round(src_w * dst_h / dst_w)
    cx, cy = (src_w - cw) // 2, (src_h - ch) // 2
    window = None if (cw, ch) == (src_w, src_h) else (cx, cy, cw, ch)
    return Geometry(size=(dst_w, dst_h), scaled=(dst_w, dst_h), crop=window)


RESIZE_MODES: dict[str, Callable[[int, int, int, int], Geometry]] = {"pad": pad, "stretch": stretch, "crop": crop}
DEFAULT_RESIZE = "pad"
SCALE_FLAGS = "bilinear"  # openpi resizes with PIL bilinear


def filter_chain(geom: Geometry, pix_fmt: str) -> list[Filter]:
    """The FFmpeg filters (name, options) that apply `geom` and convert to `pix_fmt`.

    Offsets that are not multiples of the chroma subsampling would be rounded by `pad` in a 4:2:0
    format, so an odd geometry is padded in 4:4:4 and subsampled once, by the final `format`.
    """
    steps: list[Filter] = []
    if geom.crop is not None:
        x, y, w, h = geom.crop
        steps.append(("crop", {"w": str(w), "h": str(h), "x": str(x), "y": str(y), "exact": "1"}))
    if not geom.identity_scale:
        w, h = geom.scaled
        steps.append(("scale", {"w": str(w), "h": str(h), "flags": SCALE_FLAGS}))
    if geom.scaled != geom.size:
        odd = any(v % 2 for v in (*geom.offset, *geom.scaled))
        if odd:
            steps.append(("format", {"pix_fmts": "yuv444p"}))
        W, H = geom.size
        x, y = geom.offset
        steps.append(("pad", {"width": str(W), "height": str(H), "x": str(x), "y": str(y), "color": "black"}))
    steps.append(("format", {"pix_fmts": pix_fmt}))
    return steps


def filter_args(options: dict[str, str]) -> str:
    return ":".join(f"{k}={v}" for k, v in options.items())


def filter_string(steps: list[Filter]) -> str:
    """The `-vf` text of a chain (for logs and the ffmpeg CLI baseline)."""
    return ",".join(f"{name}={filter_args(opts)}" for name, opts in steps)
