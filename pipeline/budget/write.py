"""`write_report`: calibrate from manifests, evaluate the model, write report.md, report.json and plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.budget.config import DEFAULT_OUT, BudgetConfig, check_bounds, out_of_bounds, validate_config
from pipeline.budget.coverage import coverage, coverage_notes, holdings
from pipeline.budget.estimate import check_finite, estimate
from pipeline.budget.landscape import DEFAULT_LANDSCAPE, load_landscape
from pipeline.budget.measured import (
    apply_measured,
    consistency_notes,
    estimate_rates,
    measured_values,
    rate_warnings,
    read_all,
)
from pipeline.budget.mixture import OVERSAMPLE, REENCODE_CORES, MixtureInput, mixture, read_cost
from pipeline.budget.model import first_non_finite
from pipeline.budget.render import PLOT_TITLES, render_markdown
from pipeline.budget.report import ReportInputs, build_report
from pipeline.errors import PrepError
from pipeline.schemas import validate
from pipeline.storage import StorePath

BUDGET_SCHEMA = "budget"
COVERAGE_PLOT = "coverage.png"
MIXTURE_PLOT = "mixture.png"
__all__ = ["DEFAULT_OUT", "write_report"]
Manifest = Path | StorePath  # a manifest where it lives: a local file, or an object-store file


def write_report(
    out_dir: Path,
    native: Manifest | Sequence[Manifest] | None = None,
    prepared: Manifest | Sequence[Manifest] | None = None,
    config: BudgetConfig | None = None,
    *,
    landscape: Path = DEFAULT_LANDSCAPE,
    plots: bool = True,
    mixture_input: MixtureInput | None = None,
    reencode_cost: Path | None = None,
    reencode_cores: tuple[int, ...] = REENCODE_CORES,
    oversample: float = OVERSAMPLE,
) -> dict[str, Any]:
    """Write `out_dir`/report.md, report.json and the PNG plots; return the report dict.

    `native` / `prepared` are `prep scan` manifests (schema-checked; several of a role are added up; a local file,
    or an object's `StorePath` from `pipeline.storage.parse_file`); their GB/hr, frames per episode and fps
    replace the document defaults but not values set in `config` from a file or the CLI; a storage rate only one of
    them measures gives the other by `prepared_ratio` ("estimated from ...").
    With a manifest the report has a "your corpus" section (and plot). `mixture_input` (a corpus manifest's
    datasets, `prep budget --corpus`): the mixture section (and plot): each dataset's share, samples and epochs at
    the target, oversampled ones flagged, and the CPU time to re-encode the corpus at `reencode_cost`'s measured
    per-frame cost (default: the shipped bench/results/reencode.json). Raises PrepError (one line) on a
    bad manifest, bad parameters or inputs whose figures overflow; nothing is written then.
    """
    cfg = config or BudgetConfig()
    nat = read_all([native] if isinstance(native, Path | StorePath) else native or [], "native")
    prep = read_all([prepared] if isinstance(prepared, Path | StorePath) else prepared or [], "prepared")
    cfg, notes = apply_measured(cfg, measured_values(nat, prep))
    validate_config(cfg)  # before estimating a rate from the others: no division by a bad ratio
    cfg, ratio_notes = estimate_rates(cfg, nat, prep)
    notes += ratio_notes + consistency_notes(nat, prep)
    try:
        est = estimate(cfg)  # figures that overflow a float: said first, with the input that made them
    except PrepError as exc:
        culprit = out_of_bounds(cfg)
        if culprit is None:
            raise
        raise PrepError(f"{str(exc).split(': an input')[0]}: {culprit}") from None
    check_bounds(cfg)
    if not est.train.fits:
        notes.append(f"train_batch {cfg.train_batch} needs {est.train.memory_gb_per_gpu:.1f} GB per GPU, more than "
                     f"the usable {cfg.mem_usable_gb:g} GB: the throughput at this batch is not reachable")
    held = holdings(nat, prep, cfg)
    cov = coverage(held, est, cfg) if held is not None else None
    if cov is not None:
        check_finite(asdict(cov), "the corpus section")
        notes += coverage_notes(cov, cfg)
    mix = None
    if mixture_input is not None:
        mix = mixture(mixture_input, est, cfg, read_cost(reencode_cost), cores=reencode_cores, oversample=oversample)
        check_finite(mix, "the mixture section")
    land = load_landscape(landscape)
    names = [n for n in PLOT_TITLES if (cov is not None or n != COVERAGE_PLOT) and (mix is not None or
                                                                                   n != MIXTURE_PLOT)] if plots else []
    report = build_report(ReportInputs(cfg, est, nat, prep, land, tuple(notes), tuple(names), cov,
                                       tuple(rate_warnings(cfg)), mix))
    out_json = out_dir / "report.json"
    bad = first_non_finite(report)
    if bad is not None:
        raise PrepError(f"{out_json}: the inputs make {bad[0]} = {bad[1]!r} (too large or too small for a "
                        "float); check the magnitudes in the inputs (fps, GB/hr, memory, batches)")
    validate(report, BUDGET_SCHEMA, source=str(out_json))
    text = json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if plots:
        from pipeline.budget.plots import write_plots  # matplotlib: only when drawing

        write_plots(cfg, est, cov, out_dir, names, mix)
    atomic.write_text(out_json, text, out_dir)
    atomic.write_text(out_dir / "report.md", render_markdown(report), out_dir)
    return report
