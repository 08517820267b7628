"""The LeRobot formats prep reads and writes, one module each, and the one place that dispatches between them.

- `base.py`: what every format provides (`Format`), and the rules and records the format modules share;
- `v21.py`: LeRobot v2.1 (lerobot 0.3.x): one parquet and one mp4 per camera per episode, metadata in JSON Lines;
- `v30.py`: LeRobot v3.0 (lerobot 0.4.x, 0.6.x): many episodes per parquet and per mp4, metadata in parquet;
- `jsonl.py`: JSON Lines read a block at a time (every `.jsonl` read goes through it);
- `plan.py`: the conversion plan's records (an episode as each reader streams it, one output file per unit);
- `hf.py`: the Hugging Face `datasets` features stored in a data parquet, as each version's LeRobot writes them;
- `problems.py` and `validate.py`: every metadata file checked against its rules before a job starts;
- `write.py`: a re-encode's output metadata (what is copied, info.json, stats.json; the episode metadata through
  the format's own writer).

`FORMATS[version]` / `format_of(info or dataset or version)` is the format's object (`pipeline.formats.base.Format`);
jobs call it instead of comparing `codebase_version` strings. `open_dataset` opens a dataset read-only into the
columnar model (`pipeline.dataset`), `read_info` reads and checks its info.json.

A new format (v3.1's language columns, a Lance-backed dataset) is one module here and its loader in `_LOADERS`
(`read_info` then accepts its `codebase_version`). The module provides, as its `FORMAT` (a `Format` subclass; a
format close to another subclasses that one's and replaces its reader and writer):

- its constants: `version`, `layout` (the path templates' fields; whether episodes share files), the paths of its
  tasks, episodes and per-episode stats, the data and video path templates it writes;
- one streaming metadata reader with two modes: lenient (`open`: everything into the columnar model, a bad record
  rejected with its file, line or row and reason, memory per episode a few numpy columns) and strict
  (`iter_episode_tasks`, `iter_tasks`: one record at a time, in order, the first bad one refused);
- one metadata writer (`write_tasks`, `counted_totals`, `write_reencoded_episodes`, and its episode metadata
  writer for edit and convert);
- its checks (`check_files`) and its packing rule (which episodes share an output file).

The edit and convert jobs plan by layout (`Format.layout.shares_files`): a file per episode (copied or cut out),
or files many episodes share (LeRobot's packing, splices); their shared-files path calls v3.0's strict reader and
episodes writer by name, the seam a second shared-files format would widen into `Format` methods.

This module stays light: the format modules (pyarrow, numpy) are imported on first use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.errors import DatasetError
from pipeline.formats.base import Format
from pipeline.storage import Root, as_root
from pipeline.text import shown

if TYPE_CHECKING:
    from pipeline.dataset.model import Dataset, Rejected

INFO_REL = "meta/info.json"


def _v21() -> Format:
    from pipeline.formats.v21 import FORMAT

    return FORMAT


def _v30() -> Format:
    from pipeline.formats.v30 import FORMAT

    return FORMAT


_LOADERS: dict[str, Callable[[], Format]] = {"v2.1": _v21, "v3.0": _v30}
VERSIONS: tuple[str, ...] = tuple(_LOADERS)  # the codebase_version values prep reads and writes


class _Formats(Mapping[str, Format]):
    """version -> its `Format`, each module imported when first asked for."""

    def __init__(self) -> None:
        self._loaded: dict[str, Format] = {}

    def __getitem__(self, version: str) -> Format:
        fmt = self._loaded.get(version)
        if fmt is None:
            fmt = self._loaded[version] = _LOADERS[version]()
        return fmt

    def __iter__(self) -> Iterator[str]:
        return iter(_LOADERS)

    def __len__(self) -> int:
        return len(_LOADERS)


FORMATS: Mapping[str, Format] = _Formats()


def format_of(what: str | Mapping[str, Any] | Dataset) -> Format:
    """The format of a version string, an info.json (as read by `read_info`) or an opened dataset."""
    if isinstance(what, str):
        version: Any = what
    elif isinstance(what, Mapping):
        version = what.get("codebase_version")
    else:
        version = what.codebase_version
    if version not in _LOADERS:
        raise KeyError(f"codebase_version {version!r} is not a format prep reads ({', '.join(VERSIONS)})")
    return FORMATS[version]


def read_info(where: Root) -> dict[str, Any]:
    """`meta/info.json` as a dict, after checking that this is a dataset of a format prep reads (its path templates
    checked with that format's fields before anything fills one)."""
    from pipeline.dataset.info import read_json_file
    from pipeline.dataset.template import cached_template

    root = as_root(where)
    if not root.exists():
        raise DatasetError(root, "no such dataset folder")
    if not root.is_dir():
        raise DatasetError(root, "not a folder")
    path = root / INFO_REL
    if not path.is_file():
        raise DatasetError(
            path,
            "missing: not a LeRobot dataset (found no meta/info.json; "
            f"supported codebase_version: {', '.join(VERSIONS)})",
        )
    info = read_json_file(path)
    if not isinstance(info, dict):
        raise DatasetError(path, f"expected a JSON object, found {type(info).__name__}")
    version = info.get("codebase_version")
    if version not in VERSIONS:
        raise DatasetError(
            path,
            f"unsupported codebase_version {version!r} (supported: {', '.join(VERSIONS)}; "
            "convert older datasets with LeRobot's converters first)",
        )
    storage = info.get("storage_format")
    if storage is not None and storage != "parquet":
        # LeRobot main reads Lance-backed datasets ("storage_format": "lance"): their rows are not in
        # data/*.parquet, so every count and check prep makes would be wrong. Refused before anything is read.
        raise DatasetError(path, f"storage_format {shown(storage)}: prep reads datasets stored as parquet only "
                                 "(storage_format absent or \"parquet\")")
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps) or fps <= 0:
        raise DatasetError(path, f"invalid fps {fps!r}: expected a positive number")
    for key in ("data_path", "features"):
        if key not in info:
            raise DatasetError(path, f"missing key {key!r}")
    if not isinstance(info["features"], dict):
        raise DatasetError(path, f"'features' must be an object, found {type(info['features']).__name__}")
    # before anything fills a template: attribute access, huge widths, NUL (a missing or mistyped key is the
    # schema's finding)
    for key, allowed in format_of(info).layout.path_fields.items():
        if isinstance(info.get(key), str):
            cached_template(info[key], str(path), key, allowed)
    return info


def open_dataset(where: Root, *, strict_tasks: bool = True) -> tuple[Dataset, Rejected]:
    """Open a dataset read-only where it lives (a local folder, or a `Location`: a hub snapshot, an object-store
    prefix): the dataset and the episode records its metadata rejected (the first MAX_REJECTED_KEPT of them in
    file order; `rejected.total` counts them all). Every file is read through the location's store.

    Raises `DatasetError` (one line naming the path) when the dataset as a whole is unreadable; with
    `strict_tasks` False an unreadable tasks file leaves `ds.tasks` empty instead (scan does not need it).
    """
    root = as_root(where)
    info = read_info(root)
    fmt = format_of(info)
    try:
        return fmt.open(root, info)
    except DatasetError:
        if strict_tasks:
            raise
    return fmt.open(root, info, tasks=False)


__all__ = ["FORMATS", "INFO_REL", "VERSIONS", "Format", "format_of", "open_dataset", "read_info"]
