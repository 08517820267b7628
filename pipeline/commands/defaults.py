"""A default output never writes over what the user did not point at.

A command's default output (scan: `manifests/<DATASET>.manifest.json`; budget: `manifests/budget/`; bench:
`prep-bench/`, all in the current folder) is refused, in one line naming `--out`, when a file it would replace
is tracked by git (`prep scan examples/g1_inspire_v21` from the checkout root wrote over the committed
reference manifest) or was not written by prep. How prep tells its own files: a JSON output carries its
`"schema": "prep.<kind>/N"` marker; a file written beside it (the per-episode table, report.md, the plots) is
prep's when that JSON is. A file without the marker is someone else's. `--out` given by the user writes
where it says, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pipeline.errors import PrepError

MAX_MARKER_READ = 1 << 20  # a prep JSON output of a default place is small; a larger file is not read whole


def prep_json(path: Path, kind: str) -> bool:
    """Whether `path` is a JSON document prep wrote of `kind` (its `schema` is `prep.<kind>/N`)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_MARKER_READ:
            return False
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"].startswith(f"prep.{kind}/")


def git_tracked(path: Path) -> bool:
    """Whether git tracks `path` in the repository it lies in (False outside one, or without git)."""
    import shutil
    import subprocess

    here = path.absolute()
    if not any((parent / ".git").exists() for parent in here.parents):
        return False
    git = shutil.which("git")
    if git is None:
        return False
    try:
        res = subprocess.run([git, "-C", str(here.parent), "ls-files", "--error-unmatch", "--", here.name],
                             capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0


def check_default_output(files: Iterable[tuple[Path, bool]], flag: str = "--out") -> None:
    """Refuse a default output that would replace a tracked file or one prep did not write. `files`: each file the
    default would (over)write, with whether an existing one there is prep's own (by its marker)."""
    for path, mine in files:
        if not path.exists() and not path.is_symlink():
            continue
        if git_tracked(path):
            why = "a file tracked by git"
        elif not mine:
            why = "a file prep did not write"
        else:
            continue
        raise PrepError(f"the default {flag} would write over {path}, {why}; pass {flag} PATH to write elsewhere")
