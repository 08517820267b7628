"""Evaluate the sizing model for one validated configuration: every figure the report shows."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pipeline.budget import model
from pipeline.budget.config import BudgetConfig, validate_config
from pipeline.errors import PrepError


@dataclass(slots=True, frozen=True)
class ThroughputRow:
    global_batch: int
    per_gpu_batch: float
    wall_s: float
    frames_per_s: float
    memory_gb_per_gpu: float
    fits: bool


@dataclass(slots=True, frozen=True)
class Estimate:
    fit: model.StepFit
    memory: model.MemoryModel
    corpus: model.Corpus
    throughput: tuple[ThroughputRow, ...]
    train: ThroughputRow  # the per-node training batch
    max_per_gpu_batch: int
    max_global_batch: int
    targets: tuple[model.Target, ...]


def throughput_row(cfg: BudgetConfig, step: model.StepModel, mem: model.MemoryModel, batch: int) -> ThroughputRow:
    per_gpu = batch / cfg.gpus_per_node
    return ThroughputRow(
        global_batch=batch,
        per_gpu_batch=per_gpu,
        wall_s=step.wall_s(batch),
        frames_per_s=step.frames_per_s(batch),
        memory_gb_per_gpu=mem.per_gpu_gb(per_gpu),
        fits=mem.fits(per_gpu),
    )


def estimate(cfg: BudgetConfig) -> Estimate:
    """Validate `cfg` (raising PrepError on bad parameters) and evaluate the model."""
    fit = validate_config(cfg)
    step = fit.model
    mem = model.MemoryModel(cfg.mem_fixed_gb, cfg.mem_per_sample_gb, cfg.mem_usable_gb)
    corpus = model.Corpus(cfg.frames_per_episode, cfg.fps, cfg.gb_per_hour_native, cfg.gb_per_hour_prepared)
    batches = sorted({*cfg.report_batches, cfg.train_batch})
    train = throughput_row(cfg, step, mem, cfg.train_batch)
    max_b = mem.max_per_gpu_batch()
    targets = tuple(
        model.target(
            cfg.pi0_steps, b, corpus, train.frames_per_s, cfg.train_batch, sorted(set(cfg.nodes)),
            cfg.efficiency, (cfg.efficiency_low, cfg.efficiency_high),
        )
        for b in cfg.pi0_batch
    )
    est = Estimate(
        fit=fit,
        memory=mem,
        corpus=corpus,
        throughput=tuple(throughput_row(cfg, step, mem, b) for b in batches),
        train=train,
        max_per_gpu_batch=max_b,
        max_global_batch=max_b * cfg.gpus_per_node,
        targets=targets,
    )
    check_finite(asdict(est), "the model")
    return est


def check_finite(figures: dict[str, Any], what: str) -> None:
    """Refuse inputs whose figures overflow a float (e.g. fps 1e-310 makes the hours infinite), in one line."""
    bad = model.first_non_finite(figures)
    if bad is not None:
        raise PrepError(f"{what} gives {bad[0]} = {bad[1]!r}: an input is too large or too small for a float "
                        "(check the magnitudes of fps, frames_per_episode, GB/hr, memory and batch inputs)")


def days_at(target: model.Target, nodes: int, cfg: BudgetConfig, train_frames_per_s: float) -> model.NodeDays:
    """Days for a node count that may not be in `cfg.nodes` (the headline's)."""
    for d in target.days:
        if d.nodes == nodes:
            return d
    t = target.timesteps
    return model.NodeDays(
        nodes=nodes,
        ideal=model.days_to_target(t, train_frames_per_s, nodes, 1.0),
        efficiency=model.days_to_target(t, train_frames_per_s, nodes, cfg.efficiency),
        efficiency_low=model.days_to_target(t, train_frames_per_s, nodes, cfg.efficiency_low),
        efficiency_high=model.days_to_target(t, train_frames_per_s, nodes, cfg.efficiency_high),
    )
