"""`prep budget`: storage budget and pi-equivalent sizing, calibrated by measured manifests.

Modules, one job each: model (the arithmetic), config (defaults, TOML, CLI, validation),
measured (figures from manifests, estimated rates), coverage (the user's corpus against the target),
landscape (published runs), estimate (evaluate the model), report (report.json), render (Markdown and
terminal text), plots (PNGs), write (all of it to disk).

`write_report` is imported on first use: it pulls in numpy, matplotlib and pyarrow, which the
command line must not pay for just to print `--help`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.budget.config import DEFAULT_OUT, BudgetConfig, load_config
from pipeline.budget.render import headline_text

if TYPE_CHECKING:
    from pipeline.budget.write import write_report

__all__ = ["DEFAULT_OUT", "BudgetConfig", "headline_text", "load_config", "write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from pipeline.budget.write import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
