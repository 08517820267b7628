"""The columnar dataset model, whatever the LeRobot format: episodes, the files they share, info.json, features,
stats. It knows no format (`pipeline.formats` reads each one into it; `pipeline.formats.open_dataset` opens a
dataset) and imports nothing above it."""

from __future__ import annotations

from pipeline.dataset.model import (
    CameraInfo,
    DataRef,
    Dataset,
    Episode,
    Layout,
    Rejected,
    VideoRef,
    resolve_inside,
)
from pipeline.dataset.table import EpisodeTable, Groups
from pipeline.errors import EpisodeError

__all__ = [
    "CameraInfo",
    "DataRef",
    "Dataset",
    "Episode",
    "EpisodeError",
    "EpisodeTable",
    "Groups",
    "Layout",
    "Rejected",
    "VideoRef",
    "resolve_inside",
]
