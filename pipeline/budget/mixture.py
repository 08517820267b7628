"""A training mixture against the target (`prep budget --corpus CORPUS.json`): per dataset, its storage, hours,
share of the samples at the target and the epochs that share means; oversampled small datasets flagged; and what
re-encoding the corpus costs in CPU time, from this machine's measured per-frame cost.

    share_i          = weight_i / sum of the weights of the datasets that completed
    samples_i(T)     = share_i x T                                     (T = pi0_steps x pi0_batch, per target)
    epochs_i(T)      = samples_i(T) / timesteps_i
    per step         = share_i x train_batch                            (samples of dataset i in one global batch)
    ratio_i          = share_i / (timesteps_i / corpus timesteps)        (1 = as concatenation)
    oversampled      = ratio_i > the threshold (default 2: drawn more than twice as often as its size says)
    camera frames    = sum over datasets of timesteps_i x video cameras_i
    CPU-hours        = camera frames x CPU ms per camera frame / 3.6e6
    wall(N cores)    = CPU-hours / N                                     (one single-threaded worker per core)

The per-frame cost is read from a `bench/reencode.py` result (default: the one shipped with prep,
bench/results/reencode.json): prep's stage in one worker, CPU ms per camera frame, on the source, size and host
that result names; the report says which file, row and machine.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.budget import fmt
from pipeline.budget.config import BudgetConfig
from pipeline.budget.estimate import Estimate
from pipeline.budget.measured import rate_label
from pipeline.errors import PrepError
from pipeline.resources import data_path
from pipeline.text import printable

OVERSAMPLE = 2.0
REENCODE_CORES = (16, 64, 256)
COST_CASE, COST_WORKERS, COST_VARIANT = "prep", 1, "quiet-worker"


def default_cost_path() -> Path:
    """The `bench/reencode.py` result shipped with prep (pipeline/data/reencode_cost.json, a link to
    bench/results/reencode.json)."""
    return data_path("reencode_cost.json")


@dataclass(slots=True, frozen=True)
class ReencodeCost:
    cpu_ms_per_frame: float
    source: str  # where the figure came from, for the report
    speedup_1_to_2: float | None
    path: str


def read_cost(path: Path | None = None) -> ReencodeCost:
    """The measured CPU ms per camera frame of prep's re-encode stage in one worker (`bench/reencode.py`'s row
    case prep, 1 worker, variant quiet-worker; else the first prep 1-worker row)."""
    path = Path(path) if path is not None else default_cost_path()
    shown = "bench/results/reencode.json (shipped with prep)" if path == default_cost_path() else str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        rows = [r for r in doc["results"] if r.get("case") == COST_CASE and r.get("workers") == COST_WORKERS]
        row = next((r for r in rows if r.get("variant") == COST_VARIANT), rows[0] if rows else None)
        if row is None:
            raise KeyError("no row of case prep with 1 worker")
        cpu = float(row["cpu_ms_per_frame_median"])
        two = next((r for r in doc["results"] if r.get("case") == COST_CASE and r.get("workers") == 2
                    and r.get("variant") == row.get("variant")), None)
        speedup = (float(two["frames_per_s_median"]) / float(row["frames_per_s_median"])) if two else None
        conv, corpus, host = doc.get("conversion", {}), doc.get("corpus", {}), doc.get("host", {})
    except FileNotFoundError:
        raise PrepError(f"--reencode-cost {printable(str(path))}: not found") from None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise PrepError(f"--reencode-cost {printable(str(path))}: not a bench/reencode.py result ({exc})") from None
    if not math.isfinite(cpu) or cpu <= 0:
        raise PrepError(f"--reencode-cost {printable(str(path))}: cpu_ms_per_frame_median = {cpu!r}: expected a "
                        "positive number")
    source = (f"measured {shown} ({doc.get('created_utc', '?')}): case {COST_CASE}, {COST_WORKERS} worker, "
              f"variant {row.get('variant')}, median worker CPU {cpu:.3g} ms per camera frame; "
              f"{corpus.get('source', '?')} to {conv.get('size', '?')} {conv.get('profile', '?')} crf "
              f"{conv.get('crf', '?')} {conv.get('preset', '')}; host of {host.get('cores_available', '?')} cores, "
              f"{host.get('platform', '?')}")
    return ReencodeCost(cpu, source, speedup, str(path))


@dataclass(slots=True, frozen=True)
class MixtureInput:
    """A corpus manifest's datasets (the rows that completed), and the prepared corpus's rows by name."""

    path: str
    weights: str  # "given" | "equal"
    rows: tuple[dict[str, Any], ...]
    left_out: tuple[dict[str, Any], ...]
    prepared_path: str | None = None
    prepared: tuple[dict[str, Any], ...] = ()
    manifests: tuple[str, ...] = ()  # each row's own manifest (native), resolved


def _bytes_prepared(row: dict[str, Any], prepared: dict[str, dict[str, Any]], prepared_path: str | None,
                    cfg: BudgetConfig) -> dict[str, Any]:
    p = prepared.get(row["name"])
    if p is not None and p.get("frames") == row["frames"]:
        return {"value": float(p["bytes"]["total"]),
                "source": f"measured {prepared_path} ({p['name']}: bytes.total)"}
    rate = cfg.gb_per_hour_prepared
    return {"value": row["hours"] * rate * 1e9,
            "source": f"estimated from {row['hours']:.6g} h x gb_per_hour_prepared {rate:.6g} GB/hr "
                      f"({rate_label(cfg, 'prepared')})"}


def mixture(inp: MixtureInput, est: Estimate, cfg: BudgetConfig, cost: ReencodeCost, *,
            cores: tuple[int, ...] = REENCODE_CORES, oversample: float = OVERSAMPLE) -> dict[str, Any]:
    """The mixture section of the report (report.json `mixture`); pure arithmetic over the manifests' figures."""
    rows = list(inp.rows)
    weight_ok = math.fsum(r["weight"] for r in rows)
    frames = sum(r["frames"] for r in rows)
    prepared = {r["name"]: r for r in inp.prepared if r["status"] == "ok"}
    datasets = []
    for r in rows:
        share = r["weight"] / weight_ok
        natural = r["frames"] / frames
        ratio = share / natural
        targets = [{"pi0_batch": t.pi0_batch, "timesteps": t.timesteps, "samples": share * t.timesteps,
                    "epochs": share * t.timesteps / r["frames"]} for t in est.targets]
        corpus_epochs = [t.timesteps / frames for t in est.targets]
        flag = None
        if ratio > oversample:
            flag = (f"oversampled: drawn {fmt.sig(ratio)}x as often as its size says ({fmt.share(share)} of the "
                    f"samples, {fmt.share(natural)} of the timesteps): {fmt.sig(targets[0]['epochs'])} epochs over it "
                    f"at {fmt.billions(targets[0]['timesteps'])} timesteps, where the corpus as a whole gets "
                    f"{fmt.sig(corpus_epochs[0])}")
        datasets.append({
            "name": r["name"], "label": r["label"], "weight": r["weight"], "share": share,
            "share_of_timesteps": natural, "sampling_ratio": ratio, "episodes": r["episodes"],
            "timesteps": r["frames"], "hours": r["hours"], "fps": r["fps"],
            "cameras": sum(1 for _ in r["cameras"]),
            "bytes": {"native": {"value": float(r["bytes"]["total"]),
                                 "source": f"measured {inp.path} ({r['name']}: bytes.total)"},
                      "prepared": _bytes_prepared(r, prepared, inp.prepared_path, cfg)},
            "per_step": share * cfg.train_batch, "targets": targets, "oversampled": flag is not None, "flag": flag,
        })
    labels: dict[str, dict[str, Any]] = {}
    for d in datasets:
        lab = labels.setdefault(d["label"], {"label": d["label"], "datasets": 0, "hours": 0.0, "timesteps": 0,
                                             "share": 0.0})
        lab["datasets"] += 1
        lab["hours"] += d["hours"]
        lab["timesteps"] += d["timesteps"]
        lab["share"] += d["share"]
    camera_frames = sum(d["timesteps"] * d["cameras"] for d in datasets)
    cpu_hours = camera_frames * cost.cpu_ms_per_frame / 3.6e6
    return {
        "corpus": inp.path, "prepared_corpus": inp.prepared_path, "weights": inp.weights,
        "oversample_threshold": oversample,
        "left_out": [{"name": r["name"], "reason": r.get("reason") or "failed"} for r in inp.left_out],
        "datasets": datasets, "labels": sorted(labels.values(), key=lambda x: x["label"]),
        "oversampled": [d["name"] for d in datasets if d["oversampled"]],
        "reencode": {
            "camera_frames": camera_frames, "cpu_ms_per_frame": cost.cpu_ms_per_frame, "source": cost.source,
            "origin": "measured", "cpu_hours": cpu_hours,
            "wall": [{"cores": n, "hours": cpu_hours / n} for n in cores],
            "speedup_1_to_2_workers": cost.speedup_1_to_2,
            "note": "wall = CPU-hours / cores: one single-threaded worker per core, as prep's LocalCluster and "
                    "--cluster slurm run them; the per-frame cost is the measured source's (its decode is most of "
                    "it): a source of another codec or size costs another amount per frame",
        },
    }
