"""What reencode and convert share about an output folder: where it may be, that nothing else is in it, and
the options file that claims it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.dataset.write import PREP_DIR
from pipeline.errors import PrepError
from pipeline.schemas import validate


def check_paths(src: Path, out: Path, *, staged: bool = False) -> None:
    """The output is neither the source nor inside it, nor contains it (symlinks resolved); `staged`
    allows the one exception, `reencode_as`'s staged source in `<out>/prep/`."""
    s, o = Path(os.path.realpath(src)), Path(os.path.realpath(out))
    if o == s or s in o.parents:
        raise PrepError(f"output {out} is the source or inside it ({src}); the source is never written: "
                        "choose an --out outside it")
    if o in s.parents and not (staged and (o / PREP_DIR) in s.parents):
        raise PrepError(f"output {out} contains the source {src}; choose an --out beside it")


def refuse_foreign(out: Path, options_rel: str, command: str) -> None:
    """Refuse a non-empty output folder that `prep <command>` did not start (its options file, at
    `<out>/<options_rel>`, is absent); checked before anything is written."""
    if not out.exists() or (out / options_rel).is_file():
        return
    if not out.is_dir():
        raise PrepError(f"output {out} exists and is not a folder")
    others = sorted(p.name for p in out.iterdir() if p.name != PREP_DIR)
    if others:
        raise PrepError(f"output {out} exists and is not a prep {command} output (holds {', '.join(others[:3])}); "
                        "choose another --out")


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
