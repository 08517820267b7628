"""`--stress MINUTES`: all workers flat out for a fixed time, watching for slow decay.

Batches are pulled back to back (no step time unless one is given) and grouped into windows.
Per window: samples/s and worker RSS. After the run, least-squares slopes over the windows:
- samples/s drift: slope x duration / mean; the run fails below -`max_drop` (default 10 %);
- RSS growth: slope x duration of the summed worker RSS; fails above `max(max_rss_growth_mb,
  max_rss_growth_rel x mean)` (defaults 64 MiB and 10 %);
- any sample that raised fails the run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pipeline.loader.bench import RunSpec, Tally, build_items, json_safe, loader_detail, make_loader, shutdown
from pipeline.loader.step import make_step
from pipeline.loader.workers import sample_workers, worker_pids


def slope_per_min(t_s: list[float], values: list[float]) -> float:
    if len(t_s) < 2 or np.ptp(t_s) == 0:
        return 0.0
    return float(np.polyfit(np.asarray(t_s) / 60.0, np.asarray(values), 1)[0])


def run_stress(
    spec: RunSpec,
    minutes: float,
    *,
    window_s: float | None = None,
    max_drop: float = 0.10,
    max_rss_growth_mb: float = 64.0,
    max_rss_growth_rel: float = 0.10,
) -> dict[str, Any]:
    duration = minutes * 60.0
    window = window_s if window_s is not None else max(5.0, duration / 12)
    items = build_items(spec)
    loader = make_loader(items, spec)
    step = make_step(spec.step_s, spec.device) if spec.step_s > 0 else None
    tally = Tally()
    windows: list[dict[str, float]] = []
    it = iter(loader)
    try:
        pids = worker_pids(it)
        for _ in range(spec.warmup_steps):
            tally.add(next(it))
        start = w_start = time.perf_counter()
        w_samples = 0
        while True:
            batch = next(it)
            tally.add(batch)
            w_samples += spec.batch
            if step is not None:
                step(batch)
            now = time.perf_counter()
            if now - w_start >= window:
                ws = sample_workers(pids)
                windows.append({
                    "t_s": (w_start + now) / 2 - start,
                    "samples_per_s": w_samples / (now - w_start),
                    "rss_mb_sum": ws.rss_mb_sum,
                    "rss_mb_max": ws.rss_mb_max,
                })
                w_start, w_samples = now, 0
            if now - start >= duration:
                break
        elapsed = time.perf_counter() - start
    finally:
        shutdown(it)
    verdict = assess(windows, tally.errors, tally.error_examples, window, max_drop=max_drop,
                     max_rss_growth_mb=max_rss_growth_mb, max_rss_growth_rel=max_rss_growth_rel)
    return json_safe({
        "label": spec.label,
        "root": str(spec.root),
        "loader": spec.loader,
        "loader_detail": loader_detail(items),
        "minutes": minutes,
        "elapsed_s": elapsed,
        "batch": spec.batch,
        "workers": spec.workers,
        "step_s": spec.step_s,
        "device": spec.device,
        "window_s": window,
        "windows": windows,
        "samples": tally.samples,
        **verdict,
        "errors": tally.errors,
        "error_examples": tally.error_examples,
    })


def assess(
    windows: list[dict[str, float]],
    errors: int,
    error_examples: list[str],
    window_s: float,
    *,
    max_drop: float = 0.10,
    max_rss_growth_mb: float = 64.0,
    max_rss_growth_rel: float = 0.10,
) -> dict[str, Any]:
    """Slopes over the windows and the pass/fail reasons (see the module docstring)."""
    t = [w["t_s"] for w in windows]
    sps = [w["samples_per_s"] for w in windows]
    rss = [w["rss_mb_sum"] for w in windows]
    sps_slope, rss_slope = slope_per_min(t, sps), slope_per_min(t, rss)
    span_min = (t[-1] - t[0]) / 60.0 if len(t) >= 2 else 0.0
    mean_sps = float(np.mean(sps)) if sps else 0.0
    mean_rss = float(np.mean(rss)) if rss else 0.0
    drift_rel = sps_slope * span_min / mean_sps if mean_sps > 0 else 0.0
    rss_growth = rss_slope * span_min
    rss_limit = max(max_rss_growth_mb, max_rss_growth_rel * mean_rss)
    reasons: list[str] = []
    if len(windows) < 3:
        reasons.append(f"only {len(windows)} window(s) of {window_s:.0f} s: run longer or use smaller batches")
    if drift_rel < -max_drop:
        reasons.append(f"samples/s drifts down {drift_rel:+.1%} over the run ({sps_slope:+.2f} samples/s per min)")
    if rss_growth > rss_limit:
        reasons.append(f"worker RSS grows {rss_growth:+.1f} MiB over the run ({rss_slope:+.2f} MiB/min, "
                       f"limit {rss_limit:.0f} MiB)")
    if errors:
        reasons.append(f"{errors} sample(s) failed, first: {error_examples[0] if error_examples else '?'}")
    return {
        "samples_per_s_mean": mean_sps,
        "samples_per_s_slope_per_min": sps_slope,
        "samples_per_s_drift_rel": drift_rel,
        "rss_mb_sum_mean": mean_rss,
        "rss_slope_mb_per_min": rss_slope,
        "rss_growth_mb": rss_growth,
        "limits": {"max_drop": max_drop, "max_rss_growth_mb": rss_limit},
        "passed": not reasons,
        "reasons": reasons,
    }
