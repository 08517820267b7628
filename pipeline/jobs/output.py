"""What reencode and convert share about an output folder: the options file that claims it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.errors import PrepError
from pipeline.schemas import validate


def claim_output(src: Path, out: Path, settings: dict[str, Any], options_rel: str, schema: str) -> None:
    """Record `settings` (and the source) in `<out>/<options_rel>`; refuse a run started with other ones."""
    settings = {"source": str(src.resolve()), **settings}
    path = out / options_rel
    if path.is_file():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous != settings:
            raise PrepError(f"output {out} was started with other settings ({previous}); now asked for "
                            f"{settings}. Choose another --out, or delete {out} to start over")
        return
    validate(settings, schema, source=str(path))
    atomic.write_json(path, settings)
