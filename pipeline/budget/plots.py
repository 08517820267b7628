"""The report's PNG plots, drawn with matplotlib's Agg canvas (no display, no pyplot state)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import NullFormatter

from pipeline import atomic
from pipeline.budget import fmt, model
from pipeline.budget.config import BudgetConfig
from pipeline.budget.coverage import Coverage
from pipeline.budget.estimate import Estimate
from pipeline.budget.measured import rate_label
from pipeline.budget.render import PLOT_TITLES
from pipeline.text import printable

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7.5, 4.6), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> None:
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def throughput(cfg: BudgetConfig, est: Estimate) -> Figure:
    step = est.fit.model
    top = max(2 * cfg.train_batch, 1.1 * est.max_global_batch, *cfg.report_batches, *(a.batch for a in est.fit.anchors))
    b = np.linspace(1, top, 400)
    fig, ax = _figure()
    ax.plot(b, b / (step.a * b + step.c), color=COLORS[0], label=f"B / ({step.a:.4g}·B + {step.c:.3g})")
    ax.axhline(step.ceiling_frames_per_s, color="grey", ls="--",
               label=f"ceiling 1/a = {fmt.rate(step.ceiling_frames_per_s)} frames/s")
    if est.max_global_batch <= top:
        ax.axvline(est.max_global_batch, color=COLORS[3], ls=":",
                   label=f"memory limit: global batch {est.max_global_batch:,}")
    for r in est.throughput:
        ax.plot(r.global_batch, r.frames_per_s, "o", color=COLORS[1])
        ax.annotate(f"{fmt.rate(r.frames_per_s)} @ {r.global_batch}", (r.global_batch, r.frames_per_s),
                    textcoords="offset points", xytext=(6, -14))
    if est.fit.anchors:
        ax.plot([a.batch for a in est.fit.anchors], [a.batch / a.wall_s for a in est.fit.anchors], "kx", ms=9,
                label=f"anchors ({est.fit.method})")
    ax.set(xlabel=f"global batch B on one {cfg.gpus_per_node}-GPU node", ylabel="node frames/s",
           title="Node throughput vs global batch", xlim=(0, top), ylim=(0, step.ceiling_frames_per_s * 1.1))
    # below the axes, not in them: inside, it covered the memory-limit line (the right end of the x axis)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=9)
    return fig


def memory(cfg: BudgetConfig, est: Estimate) -> Figure:
    mem = est.memory
    top = max(est.max_per_gpu_batch * 1.2, est.train.per_gpu_batch * 1.2, 16)
    b = np.linspace(0, top, 200)
    fig, ax = _figure()
    ax.plot(b, mem.fixed_gb + mem.per_sample_gb * b, color=COLORS[0],
            label=f"{mem.fixed_gb:g} + {mem.per_sample_gb:g}·b GB")
    ax.axhline(mem.usable_gb, color=COLORS[3], ls="--", label=f"usable {mem.usable_gb:g} GB")
    ax.axhline(cfg.gpu_memory_gb, color="grey", ls=":", label=f"physical {cfg.gpu_memory_gb:g} GB")
    t = est.train
    ax.plot(t.per_gpu_batch, t.memory_gb_per_gpu, "o", color=COLORS[1])
    ax.annotate(f"{fmt.gb(t.memory_gb_per_gpu)} GB @ {t.per_gpu_batch:g}/GPU", (t.per_gpu_batch, t.memory_gb_per_gpu),
                textcoords="offset points", xytext=(6, -14))
    ax.plot(est.max_per_gpu_batch, mem.per_gpu_gb(est.max_per_gpu_batch), "s", color=COLORS[3])
    ax.annotate(f"largest batch {est.max_per_gpu_batch}/GPU", (est.max_per_gpu_batch, mem.usable_gb),
                textcoords="offset points", xytext=(-60, -22))
    ax.set(xlabel="per-GPU batch b (samples)", ylabel="memory per GPU (GB)", title="GPU memory vs per-GPU batch",
           xlim=(0, top), ylim=(0, max(cfg.gpu_memory_gb, mem.usable_gb) * 1.08))
    ax.legend(loc="lower right")
    return fig


def days(cfg: BudgetConfig, est: Estimate) -> Figure:
    top = max(16, *cfg.nodes, cfg.headline_nodes)
    n = np.arange(1, top + 1)
    rate = est.train.frames_per_s
    fig, ax = _figure()

    def curve(t: float, eff: float) -> np.ndarray:
        return np.array([model.days_to_target(t, rate, int(k), eff) for k in n])

    for i, tg in enumerate(est.targets):
        c = COLORS[i % len(COLORS)]
        lo, hi = curve(tg.timesteps, cfg.efficiency_low), curve(tg.timesteps, cfg.efficiency_high)
        band = f"{fmt.percent(cfg.efficiency_low)}-{fmt.percent(cfg.efficiency_high)} efficiency band"
        ax.fill_between(n, hi, lo, color=c, alpha=0.2, label=band if i == 0 else None)
        ax.plot(n, curve(tg.timesteps, cfg.efficiency), color=c,
                label=f"T = {fmt.billions(tg.timesteps)} (π0 batch {tg.pi0_batch}) at {fmt.percent(cfg.efficiency)}")
        ax.plot(n, curve(tg.timesteps, 1.0), color=c, ls=":", lw=1, label="ideal-linear" if i == 0 else None)
        for k in sorted({1, cfg.headline_nodes}):
            d = model.days_to_target(tg.timesteps, rate, k, cfg.efficiency)
            ax.plot(k, d, "o", color=c)
            ax.annotate(f"{fmt.days(d)} d", (k, d), textcoords="offset points", xytext=(-34, -4), fontsize=9)
    ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xticks([k for k in (1, 2, 4, 8, 16, 32, 64) if k <= top])
    lo_y = min(model.days_to_target(tg.timesteps, rate, top, 1.0) for tg in est.targets)
    hi_y = max(model.days_to_target(tg.timesteps, rate, 1, 1.0) for tg in est.targets)
    ticks = [k * 10.0**e for e in range(-2, 5) for k in (1, 2, 5)]
    ax.set_yticks([y for y in ticks if lo_y / 1.5 <= y <= hi_y * 1.5])
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter("{x:g}")
    ax.yaxis.set_major_formatter("{x:g}")
    ax.set(xlabel=f"nodes ({cfg.gpus_per_node} GPUs each, batch {cfg.train_batch} per node)",
           ylabel="days to target", title=f"Days to the π-equivalent target ({fmt.rate(rate)} frames/s per node)")
    ax.legend(fontsize=8, loc="upper right")
    return fig


def storage(cfg: BudgetConfig, est: Estimate) -> Figure:
    corpus = est.corpus
    top = max(t.timesteps for t in est.targets) * 1.25
    t = np.linspace(0, top, 200)
    h = t / corpus.fps / 3600.0
    fig, ax = _figure()
    for gbh, label, c in ((corpus.gb_per_hour_native, "native", COLORS[0]),
                          (corpus.gb_per_hour_prepared, "prepared", COLORS[2])):
        src = rate_label(cfg, label)
        ax.plot(t / 1e9, h * gbh / 1000.0, color=c, label=f"{label}: {gbh:.3g} GB/hr ({src})")
    for tg in est.targets:
        for y in (tg.storage_native_tb, tg.storage_prepared_tb):
            ax.plot(tg.timesteps / 1e9, y, "o", color="black", ms=4)
            ax.annotate(fmt.tb(y), (tg.timesteps / 1e9, y), textcoords="offset points", xytext=(-40, 6))
        ax.axvline(tg.timesteps / 1e9, color="grey", ls=":", lw=1)
    ax.set(xlabel=f"target timesteps T (billions; {fmt.value(corpus.fps)} fps, "
           f"{fmt.value(corpus.frames_per_episode)} frames/episode)", ylabel="storage (TB = 1e12 bytes)",
           title="Storage vs target", xlim=(0, top / 1e9), ylim=(0, None))
    ax.legend(loc="upper left")
    return fig


def coverage(cfg: BudgetConfig, est: Estimate, cov: Coverage) -> Figure:
    """Hours: the corpus and each target (log scale), each bar labelled with its hours and share."""
    h = cov.corpus
    name = Path(h.manifest).name
    labels = [f"your corpus\n{name}"] + [f"target, π0 batch {c.pi0_batch}\n{fmt.billions(c.target_timesteps)}"
                                         for c in cov.targets]
    hours_ = [h.hours] + [c.target_timesteps / cfg.fps / 3600.0 for c in cov.targets]
    texts = [f"{fmt.hours(h.hours)}\n{h.timesteps:,} timesteps, {h.episodes:,} episode{'s' * (h.episodes != 1)}"] + [
        f"{fmt.hours(x)}\ncorpus = {fmt.share(c.share)} of it" for x, c in zip(hours_[1:], cov.targets, strict=True)]
    fig, ax = _figure()
    fig.set_size_inches(9, 4.6)
    ax.grid(True, axis="x", which="major", alpha=0.3)
    ax.grid(False, axis="y")
    y = np.arange(len(hours_))[::-1]
    colors = [COLORS[2]] + [COLORS[i % len(COLORS)] for i in range(len(cov.targets))]
    ax.barh(y, hours_, color=colors, height=0.6)
    ax.set_xscale("log")
    lo, hi = min(hours_), max(hours_)
    xmin = lo / 10
    ax.set_xlim(xmin, hi * 10)
    notes = [ax.annotate(text, (x, yi), textcoords="offset points", xytext=(6, 0), va="center", fontsize=9)
             for yi, x, text in zip(y, hours_, texts, strict=True)]
    ax.set_yticks(y, labels, fontsize=9)
    ax.set(xlabel=f"hours (log scale; target hours = T / {fmt.value(cfg.fps)} fps / 3600)",
           ylabel="corpus / target", title="Your corpus vs the π-equivalent target (hours)")
    _fit_labels(fig, ax, hours_, notes, xmin)
    return fig


def _fit_labels(fig: Figure, ax: Axes, xs: list[float], notes: list[Any], xmin: float) -> None:
    """The log x axis runs just far enough right for each bar's label to fit after it (a fixed number of
    decades left most of the plot empty): bar x at fraction f = log(x/xmin) / D of the axes width W, its label
    w pixels wide after it, so D >= log(x/xmin) / (0.97 - w/W) decades."""
    for _ in range(2):  # the axes' width settles once the tick labels are known
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        fig.draw_without_rendering()
        width = ax.get_window_extent(renderer).width
        decades = max(math.log10(x / xmin) / max(0.97 - n.get_window_extent(renderer).width / width, 0.2)
                      for x, n in zip(xs, notes, strict=True))
        ax.set_xlim(xmin, xmin * 10 ** max(decades, math.log10(max(xs) / xmin) + 0.5))


def mixture(mix: dict[str, Any]) -> Figure:
    """Epochs over each dataset at each target (log scale), oversampled ones in red, the corpus's own epochs dashed."""
    ds = mix["datasets"]
    shown = sorted(ds, key=lambda d: d["targets"][0]["epochs"], reverse=True)[:40]
    fig = Figure(figsize=(9, max(3.4, 1.8 + 0.34 * len(shown))), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, axis="x", alpha=0.3)
    y = np.arange(len(shown))[::-1]
    n = len(shown[0]["targets"])
    h = 0.8 / n
    handles: list[Any] = []
    for k in range(n):
        t0 = shown[0]["targets"][k]
        ep = [d["targets"][k]["epochs"] for d in shown]
        alpha = 1.0 if k == 0 else 0.5
        colors = [COLORS[3] if d["oversampled"] else COLORS[0] for d in shown]
        yk = y + ((n - 1) / 2 - k) * h  # the first target on top
        ax.barh(yk, ep, height=h, color=colors, alpha=alpha)
        handles.append(Patch(color=COLORS[0], alpha=alpha,
                             label=f"T = {fmt.billions(t0['timesteps'])} (π0 batch {t0['pi0_batch']})"))
        if k == 0:
            for yi, e, d in zip(yk, ep, shown, strict=True):
                ax.annotate(f"{fmt.sig(e)} epochs, share {fmt.share(d['share'])}"
                            + (" OVERSAMPLED" if d["oversampled"] else ""), (e, yi), textcoords="offset points",
                            xytext=(4, 0), va="center", fontsize=8)
    handles.append(Patch(color=COLORS[3], label="oversampled (drawn more than "
                         f"{fmt.value(mix['oversample_threshold'])}x its share of the timesteps)"))
    total = sum(d["timesteps"] for d in ds)
    corpus_epochs = shown[0]["targets"][0]["timesteps"] / total
    handles.append(ax.axvline(corpus_epochs, color="grey", ls="--", lw=1,
                              label=f"the corpus as a whole: {fmt.sig(corpus_epochs)} epochs (first target)"))
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter("{x:,.0f}")
    ax.xaxis.set_minor_formatter(NullFormatter())
    lo = min(d["targets"][0]["epochs"] for d in shown)
    hi = max(d["targets"][-1]["epochs"] for d in shown)
    ax.set_xlim(min(lo, corpus_epochs) / 3, max(hi, corpus_epochs) * 30)
    ax.set_yticks(y, [printable(d["name"]) for d in shown], fontsize=8)
    ax.set(xlabel="epochs over the dataset at the target (samples = share x T; log scale)",
           title="The mixture: epochs over each dataset at the π-equivalent target")
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    return fig


PLOTS = {"throughput.png": throughput, "memory.png": memory, "days.png": days, "storage.png": storage}
assert set(PLOTS) | {"coverage.png", "mixture.png"} == set(PLOT_TITLES), "plots and their titles disagree"


def write_plots(cfg: BudgetConfig, est: Estimate, cov: Coverage | None, out_dir: Path,
                names: list[str] | None = None, mix: dict[str, Any] | None = None) -> list[str]:
    """Draw the plots `names` (default: all that apply) into `out_dir`; returns the file names."""
    names = names if names is not None else [*PLOTS, *(["coverage.png"] if cov is not None else []),
                                             *(["mixture.png"] if mix is not None else [])]
    for name in names:
        if name == "mixture.png":
            if mix is None:
                raise ValueError("mixture.png needs a corpus manifest (--corpus)")
            _save(mixture(mix), out_dir / name)
        elif name == "coverage.png":
            if cov is None:
                raise ValueError("coverage.png needs a corpus (a manifest)")
            _save(coverage(cfg, est, cov), out_dir / name)
        else:
            _save(PLOTS[name](cfg, est), out_dir / name)
    return names
