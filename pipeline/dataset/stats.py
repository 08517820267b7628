"""Per-feature statistics in LeRobot's layout (min, max, mean, std, count)."""

from __future__ import annotations

from typing import Any

import numpy as np


def array_stats(values: np.ndarray) -> dict[str, list[Any]]:
    """Stats over axis 0 of a (n, ...) numeric array, as LeRobot's episodes_stats stores them."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    return {
        "min": arr.min(axis=0).tolist(),
        "max": arr.max(axis=0).tolist(),
        "mean": arr.mean(axis=0).tolist(),
        "std": arr.std(axis=0).tolist(),
        "count": [int(arr.shape[0])],
    }


def image_stats(frames: np.ndarray) -> dict[str, list[Any]]:
    """Stats of uint8 (n, h, w, 3) frames per channel, scaled to [0, 1], shaped (3, 1, 1) as LeRobot does."""
    x = np.asarray(frames, dtype=np.float64) / 255.0
    per_channel = x.reshape(-1, x.shape[-1])

    def c11(v: np.ndarray) -> list[Any]:
        return [[[float(c)]] for c in v]

    return {
        "min": c11(per_channel.min(axis=0)),
        "max": c11(per_channel.max(axis=0)),
        "mean": c11(per_channel.mean(axis=0)),
        "std": c11(per_channel.std(axis=0)),
        "count": [int(x.shape[0])],
    }


def aggregate(stats_list: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Aggregate per-episode stats into dataset stats (weighted mean and pooled variance)."""
    out: dict[str, dict[str, Any]] = {}
    keys = {k for s in stats_list for k in s}
    for key in sorted(keys):
        parts = [s[key] for s in stats_list if key in s]
        counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
        means = np.array([p["mean"] for p in parts], dtype=np.float64)
        stds = np.array([p["std"] for p in parts], dtype=np.float64)
        w = counts.reshape((-1,) + (1,) * (means.ndim - 1))
        total = counts.sum()
        mean = (means * w).sum(axis=0) / total
        var = ((stds**2 + (means - mean) ** 2) * w).sum(axis=0) / total
        out[key] = {
            "min": np.min(np.array([p["min"] for p in parts]), axis=0).tolist(),
            "max": np.max(np.array([p["max"] for p in parts]), axis=0).tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(var).tolist(),
            "count": [int(total)],
        }
    return out
