"""The sizing model of `prep budget`: pure arithmetic over plain numbers, no I/O.

Units: seconds, frames (= timesteps), GB = 1e9 bytes, TB = 1e12 bytes (= 1000 GB), days = 86,400 s.

    T                 = pi0_steps x pi0_batch                    (timesteps to match)
    episodes          = T / frames_per_episode
    hours             = T / fps / 3600
    storage_TB        = hours x GB_per_hour / 1000
    wall_s(B)         = a x B + c                                (global batch B on one node)
    node frames/s     = B / wall_s(B)                            (ceiling 1 / a)
    memory_GB(b)      = fixed + per_sample x b                   (b = per-GPU batch = B / gpus_per_node)
    largest b         = floor((usable - fixed) / per_sample)
    days(N, eff)      = T / (N x eff x node frames/s) / 86400    (eff = 1 on one node)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SECONDS_PER_DAY = 86_400.0
GB_PER_TB = 1000.0
# (usable - fixed) / per_sample is often an integer in exact arithmetic (112 - 39) / 0.1 = 730
# that floating point lands just below; this tolerance keeps floor() honest.
FLOOR_EPS = 1e-9


@dataclass(slots=True, frozen=True)
class StepModel:
    """wall_s(B) = a x B + c for a global batch B on one node."""

    a: float  # s per sample
    c: float  # s per step, fixed host overhead

    def wall_s(self, batch: float) -> float:
        return self.a * batch + self.c

    def frames_per_s(self, batch: float) -> float:
        return batch / self.wall_s(batch)

    @property
    def ceiling_frames_per_s(self) -> float:
        return 1.0 / self.a


@dataclass(slots=True, frozen=True)
class Anchor:
    """A measured step: global batch `batch` took `wall_s` seconds per step on one node."""

    batch: int
    wall_s: float


@dataclass(slots=True, frozen=True)
class StepFit:
    model: StepModel
    method: str  # "default" | "one anchor, c kept" | "least squares"
    anchors: tuple[Anchor, ...]


def fit_step_model(anchors: Sequence[Anchor], default: StepModel) -> StepFit:
    """Refit wall_s(B) = a x B + c to measured anchors.

    No anchor: the default. Anchors at a single batch size (one anchor, or repeats of one B):
    keep the default c (the fixed overhead cannot be separated from the slope with one point)
    and solve a = (mean wall - c) / B. Two or more distinct batch sizes: ordinary least squares
    for both a and c. The fitted line is returned as is; `check_step_model` refuses a slope or
    overhead that is not physical.
    """
    if not anchors:
        return StepFit(default, "default", ())
    batches = {x.batch for x in anchors}
    if len(batches) == 1:
        b = anchors[0].batch
        wall = sum(x.wall_s for x in anchors) / len(anchors)
        return StepFit(StepModel(a=(wall - default.c) / b, c=default.c), "one anchor, c kept", tuple(anchors))
    n = len(anchors)
    mean_b = sum(x.batch for x in anchors) / n
    mean_w = sum(x.wall_s for x in anchors) / n
    sxx = sum((x.batch - mean_b) ** 2 for x in anchors)
    sxy = sum((x.batch - mean_b) * (x.wall_s - mean_w) for x in anchors)
    a = sxy / sxx
    return StepFit(StepModel(a=a, c=mean_w - a * mean_b), "least squares", tuple(anchors))


@dataclass(slots=True, frozen=True)
class MemoryModel:
    """memory per GPU (GB) = fixed + per_sample x per-GPU batch, against `usable` GB."""

    fixed_gb: float
    per_sample_gb: float
    usable_gb: float

    def per_gpu_gb(self, per_gpu_batch: float) -> float:
        return self.fixed_gb + self.per_sample_gb * per_gpu_batch

    def max_per_gpu_batch(self) -> int:
        return max(0, math.floor((self.usable_gb - self.fixed_gb) / self.per_sample_gb + FLOOR_EPS))

    def fits(self, per_gpu_batch: float) -> bool:
        return self.per_gpu_gb(per_gpu_batch) <= self.usable_gb + FLOOR_EPS


@dataclass(slots=True, frozen=True)
class Corpus:
    """How timesteps turn into episodes, hours and bytes."""

    frames_per_episode: float
    fps: float
    gb_per_hour_native: float
    gb_per_hour_prepared: float


@dataclass(slots=True, frozen=True)
class NodeDays:
    nodes: int
    ideal: float
    efficiency: float  # at the configured efficiency
    efficiency_low: float  # days at the lowest efficiency (the slow end of the band)
    efficiency_high: float  # days at the highest efficiency (the fast end of the band)


@dataclass(slots=True, frozen=True)
class Target:
    """One pi-equivalent target: T = pi0_steps x pi0_batch, and what it costs."""

    pi0_batch: int
    timesteps: float
    episodes: float
    hours: float
    storage_native_tb: float
    storage_prepared_tb: float
    steps_one_node: float  # optimizer steps at the per-node training batch on one node
    days: tuple[NodeDays, ...]


def timesteps(steps: int, batch: int) -> float:
    return float(steps) * float(batch)


def episodes(t: float, corpus: Corpus) -> float:
    return t / corpus.frames_per_episode


def hours(t: float, corpus: Corpus) -> float:
    return t / corpus.fps / 3600.0


def storage_tb(hours_: float, gb_per_hour: float) -> float:
    return hours_ * gb_per_hour / GB_PER_TB


def days_to_target(t: float, node_frames_per_s: float, nodes: int, efficiency: float) -> float:
    """Days to consume T timesteps on `nodes` data-parallel nodes; efficiency applies only across nodes."""
    eff = 1.0 if nodes == 1 else efficiency
    return t / (nodes * eff * node_frames_per_s) / SECONDS_PER_DAY


def target(
    steps: int,
    pi0_batch: int,
    corpus: Corpus,
    node_frames_per_s: float,
    train_batch: int,
    nodes: Sequence[int],
    efficiency: float,
    efficiency_range: tuple[float, float],
) -> Target:
    t = timesteps(steps, pi0_batch)
    h = hours(t, corpus)
    lo, hi = efficiency_range
    return Target(
        pi0_batch=pi0_batch,
        timesteps=t,
        episodes=episodes(t, corpus),
        hours=h,
        storage_native_tb=storage_tb(h, corpus.gb_per_hour_native),
        storage_prepared_tb=storage_tb(h, corpus.gb_per_hour_prepared),
        steps_one_node=t / train_batch,
        days=tuple(
            NodeDays(
                nodes=n,
                ideal=days_to_target(t, node_frames_per_s, n, 1.0),
                efficiency=days_to_target(t, node_frames_per_s, n, efficiency),
                efficiency_low=days_to_target(t, node_frames_per_s, n, lo),
                efficiency_high=days_to_target(t, node_frames_per_s, n, hi),
            )
            for n in nodes
        ),
    )


def first_non_finite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """The first NaN or infinity in a JSON-like document, as ("a/0/b", value); None if there is none."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "(root)", obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list | tuple) else ()
    for key, value in items:
        found = first_non_finite(value, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None
