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


def _value_axis(ax: Any, log: bool) -> None:
    """Tick labels that are the values themselves (0.005, 0.01, 0.02 ...), major and minor, never bare."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(fmt)
    ax.yaxis.set_major_formatter(fmt)


def _label_points(ax: Any, xs: list[int], ys: list[float], unit: str) -> None:
    for x, y in zip(xs, ys, strict=True):
        if y == y:  # not NaN
            ax.annotate(f"{y:.4g}{unit}", (x, y), textcoords="offset points", xytext=(4, 5), fontsize=7)


def plot_runs(runs: list[dict[str, Any]], path: Path, threshold_s: float) -> Path:
    """Two panels over workers, one line per (dataset, loader, batch): data_time p95 against the threshold,
    and the loader's ceiling against what the training loop needs (batch / step time). Every point is
    labelled with its value; both axes are labelled with their units."""
    plt = _figure()
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        series[f"{r['label']} · {r['loader']} · batch {r['batch']}"].append(r)
    fig, (ax_dt, ax_sps) = plt.subplots(1, 2, figsize=(12, 5.6), layout="constrained")
    needs_drawn: set[float] = set()
    for name, rs in series.items():
        rs = sorted(rs, key=lambda r: r["workers"])
        w = [r["workers"] for r in rs]
        p95 = [v if (v := r["train"]["data_time_s"]["p95"]) is not None else float("nan") for r in rs]
        sps = [v if (v := r["ceiling"]["samples_per_s"]) is not None else float("nan") for r in rs]
        (line,) = ax_dt.plot(w, [max(v, 1e-5) for v in p95], marker="o", label=name)
        _label_points(ax_dt, w, p95, " s")
        ax_sps.plot(w, sps, marker="o", color=line.get_color(), label=f"{name}: ceiling")
        _label_points(ax_sps, w, sps, "")
        need = [r["batch"] / r["step_s"] for r in rs if r["step_s"] > 0]
        if need and round(need[0], 6) not in needs_drawn:  # one line per distinct need (batch, step)
            needs_drawn.add(round(need[0], 6))
            ax_sps.axhline(need[0], color="black", linestyle=":",
                           label=f"need {need[0]:.4g} samples/s "
                           f"(batch {rs[0]['batch']} / {rs[0]['step_s']:.3g} s step)")
    ax_dt.axhline(threshold_s, color="grey", linestyle="--", label=f"threshold {threshold_s:g} s")
    ax_dt.set(xlabel="DataLoader workers", ylabel="data_time p95 per step (s, log scale)",
              title="wait for the next batch in the training loop")
    _value_axis(ax_dt, log=True)
    ax_sps.set(xlabel="DataLoader workers", ylabel="samples/s (log scale)",
               title="loader ceiling (no step) vs the loop's need")
    _value_axis(ax_sps, log=True)
    for ax in (ax_dt, ax_sps):
        ax.set_xticks(sorted({r["workers"] for r in runs}))
        ax.grid(True, which="both", alpha=0.3)
    # below the panels, not in them: inside, a legend covered the "need N samples/s" line (and the threshold)
    handles = [h for ax in (ax_dt, ax_sps) for h in ax.get_legend_handles_labels()[0]]
    labels = [lb for ax in (ax_dt, ax_sps) for lb in ax.get_legend_handles_labels()[1]]
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=7)
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
    ax_s.set(xlabel="minutes since start", ylabel="samples/s (window mean)", title=title)
    _value_axis(ax_s, log=False)
    ax_m.plot(t, [w["rss_mb_sum"] for w in ws], marker="o", label="sum")
    ax_m.plot(t, [w["rss_mb_max"] for w in ws], marker="o", label="max")
    ax_m.set(xlabel="minutes since start", ylabel="worker RSS (MiB)", title="worker memory")
    _value_axis(ax_m, log=False)
    ax_m.legend()
    for ax in (ax_s, ax_m):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
