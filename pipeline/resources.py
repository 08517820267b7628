"""Files the package reads at run time (JSON Schemas, the VLA landscape), found with importlib.resources.

They ship inside the package as `pipeline/data/`, whose entries are symlinks to the repository's own
`schemas/` and `manifests/vla_landscape.toml` (the single source): a wheel or `pip install .` copies the
files they point to, an editable install or a checkout on PYTHONPATH reads them in place.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from pipeline.errors import PrepError


def data_path(*parts: str) -> Path:
    """The path of `pipeline/data/<parts>` in the installed (or checked-out) package."""
    res = files("pipeline").joinpath("data", *parts)
    if not isinstance(res, Path):  # a zip import: pip always installs files, so this is a broken install
        raise PrepError(f"prep's data file {'/'.join(parts)} is not a file on disk ({res!r}); reinstall prep with pip")
    return res


def missing(path: Path) -> PrepError:
    """The one-line error for a data file that is not where the package says (a broken install)."""
    return PrepError(f"{path}: prep's data file is missing (a broken install: reinstall prep with pip)")
