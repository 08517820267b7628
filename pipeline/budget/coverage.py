"""Your corpus against the pi-equivalent target: pure arithmetic over a manifest's figures, no I/O.

The corpus is the native manifest's (else the prepared one's). Coverage is counted in timesteps,
the unit of the equivalence:

    share            = corpus timesteps / T
    missing          = max(0, T - corpus timesteps)                  (timesteps)
    missing hours    = missing / fps / 3600                          (fps, frames per episode: the
    missing episodes = missing / frames_per_episode                   report's, i.e. the manifest's)
    missing TB       = missing hours x GB/hr / 1000                  (native and prepared rates)
    epochs at T      = T / corpus timesteps                          (passes over the corpus)
    days, one epoch  = corpus timesteps / (N x eff x node frames/s) / 86400
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.budget import model
from pipeline.budget.config import BudgetConfig
from pipeline.budget.estimate import Estimate
from pipeline.budget.measured import ManifestFigures, rate_label


@dataclass(slots=True, frozen=True)
class Quantity:
    value: float
    source: str


@dataclass(slots=True, frozen=True)
class Holdings:
    """What the corpus has, from its manifest; bytes of the other form estimated when not measured."""

    manifest: str
    role: str  # "native" | "prepared": which manifest describes the corpus
    episodes: int
    timesteps: int
    hours: float
    fps: float
    frames_per_episode: float
    bytes_native: Quantity
    bytes_prepared: Quantity


@dataclass(slots=True, frozen=True)
class TargetCoverage:
    pi0_batch: int
    target_timesteps: float
    share: float
    epochs: float
    missing_timesteps: float
    missing_hours: float
    missing_episodes: float
    missing_native_tb: float
    missing_prepared_tb: float


@dataclass(slots=True, frozen=True)
class EpochDays:
    nodes: int
    efficiency: float  # 1 on one node
    days: float


@dataclass(slots=True, frozen=True)
class Coverage:
    corpus: Holdings
    targets: tuple[TargetCoverage, ...]
    epoch_days: tuple[EpochDays, ...]
    headline_nodes: int
    frames_per_s: float  # per node, at the training batch


def _estimated_bytes(hours: float, cfg: BudgetConfig, kind: str) -> Quantity:
    rate = getattr(cfg, f"gb_per_hour_{kind}")
    return Quantity(hours * rate * 1e9, f"estimated from {hours:.6g} h x gb_per_hour_{kind} {rate:.6g} GB/hr "
                                        f"({rate_label(cfg, kind)})")


def holdings(native: ManifestFigures | None, prepared: ManifestFigures | None, cfg: BudgetConfig) -> Holdings | None:
    """The corpus the report is about: the native manifest's, else the prepared one's; None without one."""
    corpus = native or prepared
    if corpus is None:
        return None
    measured_bytes = f"measured {corpus.path} (totals.bytes.total)"
    if native is not None:
        b_native = Quantity(float(native.total_bytes), measured_bytes)
    else:
        b_native = _estimated_bytes(corpus.hours, cfg, "native")
    if prepared is not None and prepared.frames == corpus.frames:
        b_prepared = Quantity(float(prepared.total_bytes), f"measured {prepared.path} (totals.bytes.total)")
    else:  # no prepared manifest, or one of another corpus (other frame count): its rate, not its bytes
        b_prepared = _estimated_bytes(corpus.hours, cfg, "prepared")
    return Holdings(
        manifest=corpus.path, role=corpus.role, episodes=corpus.episodes, timesteps=corpus.frames,
        hours=corpus.hours, fps=corpus.fps, frames_per_episode=corpus.frames_per_episode,
        bytes_native=b_native, bytes_prepared=b_prepared,
    )


def target_coverage(h: Holdings, target: model.Target, cfg: BudgetConfig) -> TargetCoverage:
    t = target.timesteps
    missing = max(0.0, t - h.timesteps)
    missing_hours = missing / cfg.fps / 3600.0
    return TargetCoverage(
        pi0_batch=target.pi0_batch,
        target_timesteps=t,
        share=h.timesteps / t,
        epochs=t / h.timesteps,
        missing_timesteps=missing,
        missing_hours=missing_hours,
        missing_episodes=missing / cfg.frames_per_episode,
        missing_native_tb=model.storage_tb(missing_hours, cfg.gb_per_hour_native),
        missing_prepared_tb=model.storage_tb(missing_hours, cfg.gb_per_hour_prepared),
    )


def coverage(h: Holdings, est: Estimate, cfg: BudgetConfig) -> Coverage:
    rate = est.train.frames_per_s
    nodes = sorted({1, cfg.headline_nodes, *cfg.nodes})
    return Coverage(
        corpus=h,
        targets=tuple(target_coverage(h, t, cfg) for t in est.targets),
        epoch_days=tuple(
            EpochDays(n, 1.0 if n == 1 else cfg.efficiency, model.days_to_target(h.timesteps, rate, n, cfg.efficiency))
            for n in nodes
        ),
        headline_nodes=cfg.headline_nodes,
        frames_per_s=rate,
    )


def coverage_notes(cov: Coverage, cfg: BudgetConfig) -> list[str]:
    """Where the report's conversions differ from the corpus's own figures (a value set by hand)."""
    h = cov.corpus
    notes = []
    if abs(cfg.fps - h.fps) > 1e-9:
        notes.append(f"fps {cfg.fps:g} ({cfg.source('fps')}) differs from the corpus's {h.fps:g} "
                     f"({h.manifest}): the target's hours and the missing hours use {cfg.fps:g}")
    if abs(cfg.frames_per_episode - h.frames_per_episode) > 1e-6:
        notes.append(f"frames_per_episode {cfg.frames_per_episode:g} ({cfg.source('frames_per_episode')}) differs "
                     f"from the corpus's {h.frames_per_episode:g} ({h.manifest}): the target's episodes and the "
                     f"missing episodes use {cfg.frames_per_episode:g}")
    return notes
