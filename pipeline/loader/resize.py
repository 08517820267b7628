"""Letterbox a frame to the model's input size, as openpi's `image_tools.resize_with_pad` does.

Keep the aspect ratio, resize with PIL bilinear, paste centred on a zero (black) canvas. Frames
already at the target size are returned untouched, so a 224x224 corpus pays nothing here.
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def letterbox_shape(height: int, width: int, out_h: int, out_w: int) -> tuple[int, int, int, int]:
    """(resized height, resized width, top pad, left pad), with openpi's rounding (int truncation)."""
    ratio = max(width / out_w, height / out_h)
    rh, rw = int(height / ratio), int(width / ratio)
    return rh, rw, max(0, int((out_h - rh) / 2)), max(0, int((out_w - rw) / 2))


def resize_with_pad(frame: np.ndarray, out_h: int = 224, out_w: int = 224) -> np.ndarray:
    """uint8 (h, w, 3) RGB -> uint8 (out_h, out_w, 3), letterboxed."""
    h, w = frame.shape[:2]
    if (h, w) == (out_h, out_w):
        return frame
    rh, rw, top, left = letterbox_shape(h, w, out_h, out_w)
    resized = Image.fromarray(frame).resize((rw, rh), resample=Image.Resampling.BILINEAR)
    out = np.zeros((out_h, out_w, frame.shape[2]), dtype=np.uint8)
    out[top : top + rh, left : left + rw] = np.asarray(resized)
    return out
