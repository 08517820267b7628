"""The budget report as a JSON document (schemas/budget.schema.json); unrounded numbers, with sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline import __version__
from pipeline.budget import fmt
from pipeline.budget.config import FIELDS, BudgetConfig
from pipeline.budget.coverage import Coverage
from pipeline.budget.estimate import Estimate, ThroughputRow, days_at
from pipeline.budget.landscape import Landscape
from pipeline.budget.measured import ManifestFigures, rate_label
from pipeline.budget.origins import figure_origins
from pipeline.clock import utc_now

REPORT_SCHEMA = "prep.budget/2"


@dataclass(slots=True, frozen=True)
class ReportInputs:
    cfg: BudgetConfig
    est: Estimate
    native: ManifestFigures | None
    prepared: ManifestFigures | None
    landscape: Landscape
    notes: tuple[str, ...]
    plots: tuple[str, ...]
    coverage: Coverage | None = None
    warnings: tuple[str, ...] = ()
    mixture: dict[str, Any] | None = None  # `pipeline.budget.mixture.mixture`, given a corpus manifest


def _input_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [{"global_batch": a.batch, "wall_s": a.wall_s} if hasattr(a, "wall_s") else a for a in value]
    return value


def inputs_json(cfg: BudgetConfig) -> list[dict[str, Any]]:
    return [
        {"name": name, "value": _input_value(getattr(cfg, name)), "unit": spec.unit, "source": cfg.source(name),
         "origin": cfg.origin(name), "description": spec.help}
        for name, spec in FIELDS.items()
    ]


def _row(r: ThroughputRow) -> dict[str, Any]:
    return {"global_batch": r.global_batch, "per_gpu_batch": r.per_gpu_batch, "wall_s": r.wall_s,
            "frames_per_s": r.frames_per_s, "memory_gb_per_gpu": r.memory_gb_per_gpu, "fits": r.fits}


def headline(cfg: BudgetConfig, est: Estimate) -> dict[str, Any]:
    """The headline table: one column per pi0 batch; every cell pre-rounded as in the Markdown."""
    ts = est.targets
    n = cfg.headline_nodes
    multi = [days_at(t, n, cfg, est.train.frames_per_s) for t in ts]
    src_n, src_p = rate_label(cfg, "native"), rate_label(cfg, "prepared")
    rows = [
        ("timesteps T = steps x batch", [fmt.billions(t.timesteps) for t in ts],
         f"{fmt.value(cfg.pi0_steps)} steps"),
        (f"episodes (T / {fmt.value(cfg.frames_per_episode)} frames)", [fmt.millions(t.episodes) for t in ts], ""),
        (f"hours (T / {fmt.value(cfg.fps)} fps / 3600)", [f"{fmt.count(t.hours)} h" for t in ts], ""),
        ("storage, native", [fmt.tb(t.storage_native_tb) for t in ts],
         f"{fmt.value(cfg.gb_per_hour_native)} GB/hr, {src_n}"),
        ("storage, prepared", [fmt.tb(t.storage_prepared_tb) for t in ts],
         f"{fmt.value(cfg.gb_per_hour_prepared)} GB/hr, {src_p}"),
        ("days on 1 node", [fmt.days(days_at(t, 1, cfg, est.train.frames_per_s).ideal) for t in ts],
         f"{fmt.rate(est.train.frames_per_s)} frames/s at global batch {cfg.train_batch}"),
        (f"days on {n} nodes at {fmt.percent(cfg.efficiency)}", [fmt.days(d.efficiency) for d in multi],
         f"ideal {' / '.join(fmt.days(d.ideal) for d in multi)}; "
         f"{fmt.percent(cfg.efficiency_low)}-{fmt.percent(cfg.efficiency_high)}: "
         + " / ".join(f"{fmt.days(d.efficiency_high)}-{fmt.days(d.efficiency_low)}" for d in multi)),
    ]
    return {
        "columns": [f"pi0 batch {b}" for b in cfg.pi0_batch],
        "rows": [{"label": label, "values": values, "note": note} for label, values, note in rows],
    }


def corpus_json(cov: Coverage | None) -> dict[str, Any] | None:
    """The "your corpus" section: what the corpus holds and what it covers of each target."""
    if cov is None:
        return None
    h = cov.corpus
    return {
        "manifest": h.manifest,
        "role": h.role,
        "episodes": h.episodes,
        "timesteps": h.timesteps,
        "hours": h.hours,
        "fps": h.fps,
        "frames_per_episode": h.frames_per_episode,
        "bytes": {kind: {"value": q.value, "source": q.source}
                  for kind, q in (("native", h.bytes_native), ("prepared", h.bytes_prepared))},
        "targets": [
            {"pi0_batch": c.pi0_batch, "timesteps": c.target_timesteps, "share": c.share, "epochs": c.epochs,
             "missing": {"timesteps": c.missing_timesteps, "hours": c.missing_hours, "episodes": c.missing_episodes,
                         "storage_tb": {"native": c.missing_native_tb, "prepared": c.missing_prepared_tb}}}
            for c in cov.targets
        ],
        "one_epoch": {
            "frames_per_s_per_node": cov.frames_per_s,
            "headline_nodes": cov.headline_nodes,
            "days": [{"nodes": d.nodes, "efficiency": d.efficiency, "days": d.days} for d in cov.epoch_days],
        },
    }


def build_report(r: ReportInputs) -> dict[str, Any]:
    cfg, est = r.cfg, r.est
    step = est.fit.model
    ts = est.targets
    return {
        "schema": REPORT_SCHEMA,
        "prep_version": __version__,
        "created_utc": utc_now(),
        "units": {"GB": 1e9, "TB": 1e12, "B": 1e9, "M": 1e6, "day_s": 86400, "rounding": fmt.ROUNDING},
        "inputs": inputs_json(cfg),
        "manifests": {
            "native": r.native.as_json() if r.native else None,
            "prepared": r.prepared.as_json() if r.prepared else None,
        },
        "corpus": corpus_json(r.coverage),
        "mixture": r.mixture,
        "figure_origins": figure_origins(cfg, r.mixture),
        "step_model": {
            "a_s_per_sample": step.a,
            "c_s": step.c,
            "method": est.fit.method,
            "ceiling_frames_per_s": step.ceiling_frames_per_s,
            "anchors": [
                {"global_batch": x.batch, "wall_s": x.wall_s, "fit_wall_s": step.wall_s(x.batch),
                 "residual_s": x.wall_s - step.wall_s(x.batch)}
                for x in est.fit.anchors
            ],
        },
        "throughput": [_row(x) for x in est.throughput],
        "training": _row(est.train),
        "memory": {
            "fixed_gb": est.memory.fixed_gb,
            "per_sample_gb": est.memory.per_sample_gb,
            "usable_gb": est.memory.usable_gb,
            "gpu_memory_gb": cfg.gpu_memory_gb,
            "train_per_gpu_batch": est.train.per_gpu_batch,
            "train_gb_per_gpu": est.train.memory_gb_per_gpu,
            "train_fits": est.train.fits,
            "max_per_gpu_batch": est.max_per_gpu_batch,
            "max_global_batch": est.max_global_batch,
        },
        "targets": [
            {
                "pi0_steps": cfg.pi0_steps,
                "pi0_batch": t.pi0_batch,
                "timesteps": t.timesteps,
                "episodes": t.episodes,
                "hours": t.hours,
                "storage_tb": {"native": t.storage_native_tb, "prepared": t.storage_prepared_tb},
                "steps_one_node": t.steps_one_node,
                "days": [
                    {"nodes": d.nodes, "ideal": d.ideal, "efficiency": d.efficiency,
                     "efficiency_low": d.efficiency_low, "efficiency_high": d.efficiency_high}
                    for d in t.days
                ],
            }
            for t in ts
        ],
        "headline": headline(cfg, est),
        "landscape": {
            "path": r.landscape.path,
            "runs": [run.as_json() for run in r.landscape.runs],
            "references": r.landscape.references,
            "target": {
                "timesteps": [t.timesteps for t in ts],
                "steps_one_node": [t.steps_one_node for t in ts],
                "hours": [t.hours for t in ts],
                "days_one_node": [days_at(t, 1, cfg, est.train.frames_per_s).ideal for t in ts],
                "train_batch": cfg.train_batch,
            },
        },
        "plots": list(r.plots),
        "notes": list(r.notes),
        "warnings": list(r.warnings),
    }
