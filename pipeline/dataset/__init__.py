"""LeRobot dataset layouts (v2.1, v3.0) read into one model."""

from __future__ import annotations

from pathlib import Path

from pipeline.dataset.info import read_info
from pipeline.dataset.model import (
    SUPPORTED_VERSIONS,
    CameraInfo,
    DataRef,
    Dataset,
    Episode,
    Rejected,
    VideoRef,
    resolve_inside,
)
from pipeline.dataset.table import EpisodeTable, Groups
from pipeline.dataset.v21 import open_v21
from pipeline.dataset.v30 import open_v30
from pipeline.errors import DatasetError, EpisodeError

OPENERS = {"v2.1": open_v21, "v3.0": open_v30}


def open_dataset(root: Path | str, *, strict_tasks: bool = True) -> tuple[Dataset, Rejected]:
    """Open a dataset root read-only: the dataset and the episode records its metadata rejected
    (the first MAX_REJECTED_KEPT of them in file order; `rejected.total` counts them all).

    Raises `DatasetError` (one line naming the path) when the dataset as a whole is unreadable; with
    `strict_tasks` False an unreadable tasks file leaves `ds.tasks` empty instead (scan does not need it).
    """
    root = Path(root).absolute()
    info = read_info(root)
    try:
        return OPENERS[info["codebase_version"]](root, info)
    except DatasetError:
        if strict_tasks:
            raise
    return OPENERS[info["codebase_version"]](root, info, tasks=False)


__all__ = [
    "SUPPORTED_VERSIONS",
    "CameraInfo",
    "DataRef",
    "Dataset",
    "Episode",
    "EpisodeError",
    "EpisodeTable",
    "Groups",
    "Rejected",
    "VideoRef",
    "open_dataset",
    "resolve_inside",
]
