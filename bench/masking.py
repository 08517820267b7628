"""A result names no path of the machine it ran on: the temp folder becomes `$TMPDIR`, the checkout `.` and
the home folder `~` in every string of it (tests/test_repo_paths.py checks the committed results)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _prefixes() -> list[tuple[str, str]]:
    pairs = [(str(REPO), "."), (tempfile.gettempdir(), "$TMPDIR"), ("/tmp", "$TMPDIR"),
             (os.path.expanduser("~"), "~")]
    return [(p.rstrip("/"), name) for p, name in pairs if len(p.rstrip("/")) > 1]


def masked(obj: Any) -> Any:
    """`obj` (JSON-like) with each machine path prefix in its strings replaced by its name."""
    if isinstance(obj, str):
        for prefix, name in _prefixes():
            obj = obj.replace(prefix + "/", name + "/").replace(prefix, name) if prefix in obj else obj
        return obj
    if isinstance(obj, dict):
        return {masked(k): masked(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [masked(v) for v in obj]
    return obj
