"""`write_report`: calibrate from manifests, evaluate the model, write report.md, report.json and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.budget.config import DEFAULT_OUT, BudgetConfig
from pipeline.budget.estimate import estimate
from pipeline.budget.landscape import DEFAULT_LANDSCAPE, load_landscape
from pipeline.budget.measured import apply_measured, consistency_notes, measured_values, read_figures
from pipeline.budget.render import render_markdown
from pipeline.budget.report import ReportInputs, build_report
from pipeline.schemas import validate

BUDGET_SCHEMA = "budget"
__all__ = ["DEFAULT_OUT", "write_report"]


def write_report(
    out_dir: Path,
    native: Path | None = None,
    prepared: Path | None = None,
    config: BudgetConfig | None = None,
    *,
    landscape: Path = DEFAULT_LANDSCAPE,
    plots: bool = True,
) -> dict[str, Any]:
    """Write `out_dir`/report.md, report.json and the PNG plots; return the report dict.

    `native` / `prepared` are `prep scan` manifests (schema-checked); their GB/hr, frames per episode
    and fps replace the document defaults but not values set in `config` from a file or the CLI.
    Raises PrepError (one line) on a bad manifest or bad parameters; nothing is written then.
    """
    cfg = config or BudgetConfig()
    nat = read_figures(native, "native") if native is not None else None
    prep = read_figures(prepared, "prepared") if prepared is not None else None
    cfg, notes = apply_measured(cfg, measured_values(nat, prep))
    notes += consistency_notes(nat, prep)
    est = estimate(cfg)
    if not est.train.fits:
        notes.append(f"train_batch {cfg.train_batch} needs {est.train.memory_gb_per_gpu:.1f} GB per GPU, more than "
                     f"the usable {cfg.mem_usable_gb:g} GB: the throughput at this batch is not reachable")
    land = load_landscape(landscape)
    names: list[str] = []
    if plots:
        from pipeline.budget.plots import write_plots  # matplotlib: only when drawing

        names = write_plots(cfg, est, out_dir)
    report = build_report(ReportInputs(cfg, est, nat, prep, land, tuple(notes), tuple(names)))
    out_json = out_dir / "report.json"
    validate(report, BUDGET_SCHEMA, source=str(out_json))
    atomic.write_json(out_json, report, indent=2)
    atomic.write_text(out_dir / "report.md", render_markdown(report))
    return report
