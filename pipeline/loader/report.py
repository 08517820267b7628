"""The benchmark's text table, verdict lines and JSON document (schemas/bench.schema.json)."""

from __future__ import annotations

import os
import platform
import sys
from collections import defaultdict
from typing import Any

from pipeline import __version__
from pipeline.clock import utc_now
from pipeline.loader.bench import GPUS_PER_NODE, STEP_OVERHEAD_S, STEP_S_PER_SAMPLE, available_cores

SCHEMA_ID = "prep.bench/1"

# smp/cpu-s: samples per worker CPU second (per-core cost); smp ms: worker-side ms per sample (p50);
# dec ms/fr: seek + decode + RGB per camera frame (prep loader only); dt: data_time in seconds.
COLUMNS = (
    ("dataset", 7), ("loader", 7), ("batch", 5), ("wrk", 3), ("step s", 6), ("ceil smp/s", 10),
    ("smp/cpu-s", 9), ("smp ms", 6), ("dec ms/fr", 9), ("dt p50", 7), ("dt p95", 7), ("dt p99", 7), ("dt max", 7),
    ("RSS MiB", 7), ("err", 3), ("keeps up", 12),
)


def keeps_up_cell(keeps_up: bool | None) -> str:
    return "inconclusive" if keeps_up is None else "yes" if keeps_up else "no"


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table(runs: list[dict[str, Any]]) -> str:
    """One row per run; dataset names in full (the column is as wide as the longest)."""
    columns = [(COLUMNS[0][0], max([COLUMNS[0][1], *(len(r["label"]) for r in runs)])), *COLUMNS[1:]]
    head = "  ".join(name.rjust(w) if i > 1 else name.ljust(w) for i, (name, w) in enumerate(columns))
    lines = [head, "-" * len(head)]
    for r in runs:
        d = r["train"]["data_time_s"]
        cells = (
            r["label"], r["loader"], str(r["batch"]), str(r["workers"]), _num(r["step_s"], ".2f"),
            _num(r["ceiling"]["samples_per_s"], ".1f"), _num(r["ceiling"]["samples_per_cpu_s"], ".1f"),
            _num(r["sample_ms"]["p50"], ".1f"),
            _num(r["decode_ms_per_frame"], ".2f"), _num(d["p50"], ".4f"), _num(d["p95"], ".4f"),
            _num(d["p99"], ".4f"), _num(d["max"], ".4f"), _num(r["worker_rss_mb"]["max"], ".0f"),
            str(r["errors"]), keeps_up_cell(r["keeps_up"]),
        )
        lines.append("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, (_, w)) in enumerate(zip(cells, columns,
                                                                                                    strict=True))))
    return "\n".join(lines)


def min_workers_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per (dataset, loader, batch) swept over workers: the fewest workers that keep up."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["label"], r["loader"], r["batch"])].append(r)
    out = []
    for (label, loader, batch), rs in groups.items():
        if len({r["workers"] for r in rs}) < 2:
            continue
        ok = sorted(r["workers"] for r in rs if r["keeps_up"])
        tried = ",".join(str(w) for w in sorted({r["workers"] for r in rs}))
        open_ = sorted(r["workers"] for r in rs if r["keeps_up"] is None)
        none = (f"none of workers={tried} keeps up" if not open_ else
                f"none of workers={tried} is shown to keep up (inconclusive at workers="
                f"{','.join(map(str, open_))}: rerun with --steps {max(r['rerun_steps'] or 0 for r in rs)})")
        out.append(f"{label} ({loader}) at per-GPU batch {batch}: " + (f"{ok[0]} worker(s) keep up" if ok else none))
    return out


def stress_lines(stress: dict[str, Any]) -> list[str]:
    head = (f"stress {stress['minutes']:g} min, {stress['workers']} workers, batch {stress['batch']}: "
            f"{stress['samples_per_s_mean']:.1f} samples/s mean, drift {stress['samples_per_s_drift_rel']:+.1%} "
            f"({stress['samples_per_s_slope_per_min']:+.2f} samples/s per min), worker RSS "
            f"{stress['rss_mb_sum_mean']:.0f} MiB, slope {stress['rss_slope_mb_per_min']:+.2f} MiB/min, "
            f"{stress['errors']} errors: {'PASS' if stress['passed'] else 'FAIL'}")
    return [head, *(f"  - {reason}" for reason in stress["reasons"])]


def host_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "cores_available": available_cores(),
        "loadavg_start": list(os.getloadavg()),
    }
    try:
        import av
        import torch

        info["torch"] = torch.__version__
        info["av"] = av.__version__
        if device == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def document(
    *,
    argv: list[str],
    host: dict[str, Any],
    threshold_s: float,
    gpus: int,
    runs: list[dict[str, Any]],
    stress: dict[str, Any] | None,
    plots: list[str],
) -> dict[str, Any]:
    host = {**host, "loadavg_end": list(os.getloadavg())}
    verdicts = [r["verdict"] for r in runs]
    return {
        "schema": SCHEMA_ID,
        "prep_version": __version__,
        "bench": "dataloader",
        "created_utc": utc_now(),
        "command": argv,
        "host": host,
        "budget": {
            "formula": f"step_s = {STEP_S_PER_SAMPLE} * per_gpu_batch * gpus + {STEP_OVERHEAD_S}",
            "step_s_per_sample": STEP_S_PER_SAMPLE,
            "overhead_s": STEP_OVERHEAD_S,
            "gpus": gpus,
            "gpus_default": GPUS_PER_NODE,
        },
        "threshold_s": threshold_s,
        "runs": runs,
        "verdicts": verdicts,
        "min_workers": min_workers_lines(runs),
        "stress": stress,
        "plots": plots,
        "ok": all(r["errors"] == 0 for r in runs) and (stress is None or bool(stress["passed"])),
    }
