"""PNG plots of the benchmark (matplotlib, Agg): data_time and samples/s vs workers; stress windows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pipeline import atomic


def _figure() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(runs: list[dict[str, Any]], path: Path, threshold_s: float) -> Path:
    """Two panels over workers, one line per (dataset, loader, batch)."""
    plt = _figure()
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        series[f"{r['label']} · {r['loader']} · batch {r['batch']}"].append(r)
    fig, (ax_dt, ax_sps) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, rs in series.items():
        rs = sorted(rs, key=lambda r: r["workers"])
        w = [r["workers"] for r in rs]
        p95 = [r["train"]["data_time_s"]["p95"] for r in rs]
        sps = [r["ceiling"]["samples_per_s"] for r in rs]
        ax_dt.plot(w, [v if v is not None else float("nan") for v in p95], marker="o", label=name)
        ax_sps.plot(w, [v if v is not None else float("nan") for v in sps], marker="o", label=name)
    ax_dt.axhline(threshold_s, color="grey", linestyle="--", label=f"target {threshold_s} s")
    ax_dt.set(xlabel="DataLoader workers", ylabel="data_time p95 (s)", title="data_time at the step time")
    ax_dt.set_yscale("symlog", linthresh=1e-3)
    ax_sps.set(xlabel="DataLoader workers", ylabel="samples/s", title="loader ceiling (no step)")
    for ax in (ax_dt, ax_sps):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def plot_stress(stress: dict[str, Any], path: Path) -> Path:
    plt = _figure()
    ws = stress["windows"]
    t = [w["t_s"] / 60 for w in ws]
    fig, (ax_s, ax_m) = plt.subplots(1, 2, figsize=(12, 4))
    ax_s.plot(t, [w["samples_per_s"] for w in ws], marker="o")
    title = f"stress: {stress['workers']} workers, batch {stress['batch']}"
    ax_s.set(xlabel="minutes", ylabel="samples/s", title=title)
    ax_m.plot(t, [w["rss_mb_sum"] for w in ws], marker="o", label="sum")
    ax_m.plot(t, [w["rss_mb_max"] for w in ws], marker="o", label="max")
    ax_m.set(xlabel="minutes", ylabel="worker RSS (MiB)", title="worker memory")
    ax_m.legend()
    for ax in (ax_s, ax_m):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
