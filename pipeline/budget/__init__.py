"""`prep budget`: storage budget and pi-equivalent sizing, calibrated by measured manifests.

Modules, one job each: model (the arithmetic), config (defaults, TOML, CLI, validation),
measured (figures from manifests), landscape (published runs), estimate (evaluate the model),
report (report.json), render (Markdown and terminal text), plots (PNGs), write (all of it to disk).
"""

from pipeline.budget.config import BudgetConfig, load_config
from pipeline.budget.render import headline_text
from pipeline.budget.write import DEFAULT_OUT, write_report

__all__ = ["DEFAULT_OUT", "BudgetConfig", "headline_text", "load_config", "write_report"]
