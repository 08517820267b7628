"""The corpus report's PNG plots, drawn with matplotlib's Agg canvas as `pipeline.budget.plots` draws its own (no
display, no pyplot state); every bar labelled with its value. With more than `MAX_BARS` datasets the largest are
drawn and the rest summed into one bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import LogLocator, NullFormatter

from pipeline import atomic
from pipeline.budget import fmt
from pipeline.corpus.manifest import UNMAPPED, natural_share
from pipeline.corpus.spec import SLOTS
from pipeline.text import printable

PLOTS = {
    "hours.png": "Hours per dataset",
    "labels.png": "Hours per label (robot or embodiment)",
    "cameras.png": "Bytes per camera, by the model's slot",
    "lengths.png": "Episode lengths per dataset",
    "shares.png": "Mixture: share of samples vs share of timesteps",
}
MAX_BARS = 40
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
          "tab:cyan", "tab:gray")
SLOT_COLORS = {SLOTS[0]: "tab:blue", SLOTS[1]: "tab:orange", SLOTS[2]: "tab:green", UNMAPPED: "tab:gray"}


def _figure(bars: int) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(9, max(3.4, 1.8 + 0.32 * bars)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, axis="x", alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> None:
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def _ok(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["datasets"] if r["status"] == "ok"]


def _top(rows: list[dict[str, Any]], key: str) -> tuple[list[dict[str, Any]], int]:
    """The rows to draw (the largest `MAX_BARS - 1` by `key` when there are more) and how many were left out."""
    if len(rows) <= MAX_BARS:
        return rows, 0
    keep = sorted(rows, key=lambda r: r[key], reverse=True)[: MAX_BARS - 1]
    return keep, len(rows) - len(keep)


def _label_colors(doc: dict[str, Any]) -> dict[str, str]:
    return {lab: COLORS[i % len(COLORS)] for i, lab in enumerate(doc["totals"]["by_label"])}


def _annotate(ax: Axes, y: np.ndarray, x: list[float], texts: list[str]) -> None:
    for yi, xi, text in zip(y, x, texts, strict=True):
        ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(4, 0), va="center", fontsize=8)
    if x:
        ax.set_xlim(0, max(x) * 1.3 or 1)


def hours(doc: dict[str, Any]) -> Figure:
    rows, left = _top(_ok(doc), "hours")
    colors = _label_colors(doc)
    names = [printable(r["name"]) for r in rows]
    values = [r["hours"] for r in rows]
    bar_colors = [colors[r["label"]] for r in rows]
    if left:
        rest = [r for r in _ok(doc) if r not in rows]
        names.append(f"({left} more)")
        values.append(sum(r["hours"] for r in rest))
        bar_colors.append("lightgray")
    fig, ax = _figure(len(names))
    y = np.arange(len(names))[::-1]
    ax.barh(y, values, color=bar_colors)
    ax.set_yticks(y, names, fontsize=8)
    _annotate(ax, y, values, [fmt.hours(v) for v in values])
    handles = [Patch(color=c, label=printable(lab)) for lab, c in colors.items()]
    fig.legend(handles=handles, title="label", fontsize=8, loc="outside lower center", ncols=min(4, len(handles)))
    ax.set(xlabel="hours (timesteps / fps / 3600)", title=PLOTS["hours.png"])
    return fig


def labels(doc: dict[str, Any]) -> Figure:
    by = doc["totals"]["by_label"]
    colors = _label_colors(doc)
    names = list(by)
    values = [v["hours"] for v in by.values()]
    fig, ax = _figure(len(names))
    y = np.arange(len(names))[::-1]
    ax.barh(y, values, color=[colors[n] for n in names])
    ax.set_yticks(y, [printable(n) for n in names], fontsize=9)
    total = sum(values)
    _annotate(ax, y, values, [f"{fmt.hours(v)} ({fmt.share(v / total) if total else '-'}), "
                              f"{by[n]['datasets']} dataset{'s' * (by[n]['datasets'] != 1)}"
                              for n, v in zip(names, values, strict=True)])
    ax.set(xlabel="hours", title=PLOTS["labels.png"])
    return fig


def cameras(doc: dict[str, Any]) -> Figure:
    """Per dataset, its camera bytes stacked by the slot each camera feeds (gray: no slot)."""
    rows, left = _top(_ok(doc), "hours")
    fig, ax = _figure(len(rows) + (1 if left else 0))
    y = np.arange(len(rows))[::-1]
    start = np.zeros(len(rows))
    for slot in (*SLOTS, UNMAPPED):
        widths = np.array([sum(c["bytes"] for c in r["cameras"] if (c["slot"] or UNMAPPED) == slot) for r in rows],
                          dtype=float) / 1e9
        if widths.any():
            ax.barh(y, widths, left=start, color=SLOT_COLORS[slot], label=slot)
        start += widths
    ax.set_yticks(y, [printable(r["name"]) for r in rows], fontsize=8)
    _annotate(ax, y, list(start), [fmt.size(v * 1e9) for v in start])
    fig.legend(*ax.get_legend_handles_labels(), title="model slot", fontsize=8, loc="outside lower center",
               ncols=4)
    ax.set(xlabel="video bytes (GB = 1e9 bytes)", title=PLOTS["cameras.png"]
           + (f" ({left} smaller datasets not drawn)" if left else ""))
    return fig


def lengths(doc: dict[str, Any]) -> Figure:
    """Box plots from each dataset's quantiles (whiskers p5 and p95, min and max as points), log scale."""
    rows = [r for r in _ok(doc) if r.get("episode_length")]
    rows, left = _top(rows, "episodes")
    fig, ax = _figure(len(rows))
    stats = [{"label": printable(r["name"]), "med": e["median"], "q1": e["p25"], "q3": e["p75"],
              "whislo": e["p05"], "whishi": e["p95"], "fliers": sorted({e["min"], e["max"]} - {e["p05"], e["p95"]})}
             for r in rows for e in [r["episode_length"]]]
    if stats:
        ax.bxp(stats[::-1], orientation="horizontal", showfliers=True, patch_artist=True,
               boxprops={"facecolor": "tab:blue", "alpha": 0.4})
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter("{x:,.0f}")
        ax.xaxis.set_minor_formatter(NullFormatter())
        top = max(s["whishi"] for s in stats)
        for i, r in enumerate(rows[::-1], 1):
            e = r["episode_length"]
            ax.annotate(f"median {e['median']:,.0f}", (max(e["max"], top), i), textcoords="offset points",
                        xytext=(6, 0), va="center", fontsize=8)
    bins = doc["totals"]["episode_length_bins"]["bins"]
    sub = f"; corpus: {sum(c for _, c in bins):,} episodes in {len(bins)} quarter-octave bins" if bins else ""
    ax.set(xlabel="frames per episode (log scale; box p25-p75, whiskers p5-p95, points min and max)",
           title=PLOTS["lengths.png"] + (f" ({left} more not drawn)" if left else "") + sub)
    return fig


def shares(doc: dict[str, Any]) -> Figure:
    rows, left = _top(_ok(doc), "hours")
    t = doc["totals"]
    fig, ax = _figure(len(rows))
    y = np.arange(len(rows))[::-1]
    samples = [r["share"] / t["share_ok"] if t["share_ok"] else 0 for r in rows]
    natural = [natural_share(r, t["frames"]) for r in rows]
    ax.barh(y + 0.2, samples, height=0.4, color="tab:blue", label="share of samples (weights)")
    ax.barh(y - 0.2, natural, height=0.4, color="tab:gray", label="share of timesteps (size)")
    ax.set_yticks(y, [printable(r["name"]) for r in rows], fontsize=8)
    texts = [f"{fmt.share(s)} vs {fmt.share(n)}" + (f" ({fmt.sig(s / n)}x)" if n else "")
             for s, n in zip(samples, natural, strict=True)]
    _annotate(ax, y, [max(s, n) for s, n in zip(samples, natural, strict=True)], texts)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="outside lower center", ncols=2)
    ax.set(xlabel="share of the corpus (datasets that completed)", title=PLOTS["shares.png"]
           + (f" ({left} smaller datasets not drawn)" if left else ""))
    return fig


DRAW = {"hours.png": hours, "labels.png": labels, "cameras.png": cameras, "lengths.png": lengths,
        "shares.png": shares}
assert set(DRAW) == set(PLOTS), "plots and their titles disagree"


def write_plots(doc: dict[str, Any], folder: Path, stem: str) -> list[str]:
    names = []
    for name, draw in DRAW.items():
        path = folder / f"{stem}-{name}"
        _save(draw(doc), path)
        names.append(path.name)
    return names
