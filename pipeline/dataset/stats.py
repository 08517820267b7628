"""Per-feature statistics in LeRobot's layout (min, max, mean, std, count), and their aggregate over episodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import DatasetError


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


class StatsAggregator:
    """LeRobot's `aggregate_stats` over episodes fed one at a time. Sums are kept shifted by the first
    episode's mean (the shifted-data form of the same pooled-variance formula), so that a feature with a
    large mean and a small spread (a global `index`) loses no digits to cancellation: the result agrees with
    LeRobot's two-pass numpy version to ~1e-15."""

    def __init__(self) -> None:
        self.features: dict[str, dict[str, Any]] = {}

    def add(self, stats: dict[str, dict[str, Any]], *, episode: int | None = None) -> None:
        for feat, st in stats.items():
            try:
                self._add(feat, {k: np.asarray(v, dtype=np.float64) for k, v in st.items()})
            except (KeyError, ValueError) as exc:
                raise DatasetError(f"episode {episode} stats of {feat!r}", f"cannot aggregate: {exc}") from None

    @staticmethod
    def _weights(n: np.ndarray, like: np.ndarray) -> np.ndarray:
        return n.reshape(n.shape + (1,) * (like.ndim - n.ndim)) if like.ndim > n.ndim else n

    def _add(self, feat: str, st: dict[str, np.ndarray]) -> None:
        n = st["count"]
        if n.shape != (1,):
            raise ValueError(f"count has shape {n.shape}, expected (1,)")
        mean, var = st["mean"], st["std"] ** 2
        w = self._weights(n, mean)
        quantiles = {k: v for k, v in st.items() if k.startswith("q") and k[1:].isdigit()}
        acc = self.features.get(feat)
        if acc is None:
            acc = self.features[feat] = {"n": np.zeros_like(n), "shift": mean.copy(), "s1": np.zeros_like(mean),
                                         "s2": np.zeros_like(mean), "min": st["min"].copy(), "max": st["max"].copy(),
                                         "q": {k: np.zeros_like(v) for k, v in quantiles.items()}}
        elif mean.shape != acc["shift"].shape:
            raise ValueError(f"mean has shape {mean.shape}, other episodes {acc['shift'].shape}")
        else:
            acc["min"] = np.minimum(acc["min"], st["min"])
            acc["max"] = np.maximum(acc["max"], st["max"])
        d = mean - acc["shift"]
        acc["n"] = acc["n"] + n
        acc["s1"] = acc["s1"] + d * w
        acc["s2"] = acc["s2"] + (var + d * d) * w
        acc["q"] = {k: q + quantiles[k] * w for k, q in acc["q"].items() if k in quantiles}

    def result(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for feat, acc in self.features.items():
            n = acc["n"]
            w = self._weights(n, acc["shift"])
            m1 = acc["s1"] / w
            var = np.maximum(acc["s2"] / w - m1 * m1, 0.0)
            res = {"min": acc["min"].tolist(), "max": acc["max"].tolist(), "mean": (acc["shift"] + m1).tolist(),
                   "std": np.sqrt(var).tolist(), "count": [int(c) for c in n.tolist()]}
            res.update({k: (q / w).tolist() for k, q in acc["q"].items()})
            out[feat] = res
        return out


def shaped_like(stats: dict[str, dict[str, Any]], reference: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`stats` with each value reshaped to the shape the same feature's value has in `reference` (a source's
    meta/stats.json) where the number of elements agrees: aggregated per-episode stats stored flat, (3,), keep
    the (3, 1, 1) of the source's image stats, which LeRobot's `aggregate_stats` requires."""
    out: dict[str, dict[str, Any]] = {}
    for feat, st in stats.items():
        found = reference.get(feat)
        ref: dict[str, Any] = found if isinstance(found, dict) else {}
        fixed = dict(st)
        for name, value in st.items():
            try:
                want, have = np.asarray(ref[name]).shape, np.asarray(value).shape
            except (KeyError, ValueError):
                continue
            if want != have and int(np.prod(want)) == int(np.prod(have)):
                fixed[name] = np.asarray(value).reshape(want).tolist()
        out[feat] = fixed
    return out


def aggregate(stats_list: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Aggregate per-episode stats into dataset stats (LeRobot's `aggregate_stats`), features sorted."""
    agg = StatsAggregator()
    for episode, stats in enumerate(stats_list):
        agg.add(stats, episode=episode)
    result = agg.result()
    return {k: result[k] for k in sorted(result)}
