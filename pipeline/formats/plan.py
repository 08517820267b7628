"""The conversion plan's records: an episode as each format's strict reader streams it (`V21Episode`, with its
files' sizes for the packing rule; `V30Episode`, with its spans), and the units of work, one output file each. Pure
and deterministic (the same source metadata always gives the same plan, so a killed conversion can be resumed
output file by output file), and streaming (episodes are consumed one at a time; only the output file being
filled is held).

The rules that make the units are each target format's packing rule: v3.0 packs consecutive episodes into data
and video files up to the size limits (`pipeline.formats.v30.plan_v21_to_v30`); v2.1 gives every episode its own
parquet and one mp4 per camera (`pipeline.formats.v21.plan_v30_to_v21`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow.parquet as pq

from pipeline.storage import HEADER_BLOCK, Location, Source, as_file

MB = 1024**2  # LeRobot's "MB" (get_file_size_in_mb)


def file_mb(path: Source) -> float:
    """LeRobot's `get_file_size_in_mb`."""
    return as_file(path).stat().size / MB


def parquet_uncompressed_mb(path: Source) -> float:
    """LeRobot's `get_parquet_file_size_in_mb`: the row groups' uncompressed column sizes (from the footer)."""
    with as_file(path).media(block_size=HEADER_BLOCK, what="parquet file") as source:
        meta = pq.read_metadata(source)
    total = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        total += sum(rg.column(c).total_uncompressed_size for c in range(rg.num_columns))
    return total / MB


# How a data file's size is counted against `data_files_size_in_mb` (CLI choices are the keys).
DATA_SIZE_MEASURES: dict[str, Callable[[Source], float]] = {
    "lerobot": parquet_uncompressed_mb,  # what LeRobot's converter counts
    "bytes": file_mb,  # the file on disk (no footer read)
}


# ---- v2.1 -> v3.0 ---------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class V21Episode:
    """A v2.1 source episode as the planner needs it: its files and their sizes (in LeRobot's MB)."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_rel: str
    data_mb: float
    video_rels: tuple[str, ...]  # one per camera, in the plan's camera order
    video_mb: tuple[float, ...]


@dataclass(slots=True, frozen=True)
class EpisodeInput:
    """One source episode file that goes into an output file, with its frame count (`length`)."""

    episode: int
    rel: str
    frames: int


@dataclass(slots=True, frozen=True)
class VideoConcatUnit:
    """One v3.0 video file: the camera's episode mp4s stream-copied back to back."""

    src_root: Location  # the source dataset (`pipeline.storage`): its files are read through its store
    out_root: str
    out_rel: str
    camera: str
    fps: float
    inputs: tuple[EpisodeInput, ...]

    @property
    def frames(self) -> int:
        return sum(i.frames for i in self.inputs)


@dataclass(slots=True, frozen=True)
class DataConcatUnit:
    """One v3.0 data parquet: the episodes' parquets back to back, `index` running from `first_index`."""

    src_root: Location  # the source dataset (`pipeline.storage`): its files are read through its store
    out_root: str
    out_rel: str
    first_index: int
    inputs: tuple[EpisodeInput, ...]

    @property
    def frames(self) -> int:
        return sum(i.frames for i in self.inputs)


@dataclass(slots=True, frozen=True)
class VideoPlace:
    camera: str
    chunk_index: int
    file_index: int
    frames_before: int  # frames of this camera's file before the episode


@dataclass(slots=True, frozen=True)
class Placement:
    """Where one episode lands in the v3.0 output."""

    episode: int
    length: int
    tasks: tuple[str, ...]
    data_chunk_index: int
    data_file_index: int
    dataset_from_index: int
    videos: tuple[VideoPlace, ...]

    @property
    def dataset_to_index(self) -> int:
        return self.dataset_from_index + self.length


PlanItem = Placement | VideoConcatUnit | DataConcatUnit


def units_of(items: Iterable[PlanItem]) -> Iterator[VideoConcatUnit | DataConcatUnit]:
    return (i for i in items if not isinstance(i, Placement))


def placements_of(items: Iterable[PlanItem]) -> Iterator[Placement]:
    return (i for i in items if isinstance(i, Placement))


# ---- v3.0 -> v2.1 ---------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class V30Video:
    camera: str
    rel: str
    from_timestamp: float
    to_timestamp: float


@dataclass(slots=True, frozen=True)
class V30Episode:
    """A v3.0 source episode: its rows' file and global index span, and its span in each camera's file."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_rel: str
    dataset_from_index: int
    videos: tuple[V30Video, ...]


@dataclass(slots=True, frozen=True)
class VideoCutUnit:
    """One v2.1 episode mp4: an episode's span of a v3.0 file, stream-copied (exact from a keyframe)."""

    src_root: Location  # the source dataset (`pipeline.storage`): its files are read through its store
    out_root: str
    src_rel: str
    out_rel: str
    camera: str
    episode: int
    fps: float
    from_timestamp: float
    to_timestamp: float
    frames: int


@dataclass(slots=True, frozen=True)
class DataSplitUnit:
    """One v2.1 episode parquet: the episode's rows of a v3.0 data file."""

    src_root: Location  # the source dataset (`pipeline.storage`): its files are read through its store
    out_root: str
    src_rel: str
    out_rel: str
    episode: int
    frames: int
    dataset_from_index: int


@dataclass(slots=True, frozen=True)
class KeyframeCheckUnit:
    """One v3.0 video file and the spans (episode, from_timestamp, to_timestamp, frames) of its episodes,
    to be checked for starting on keyframes before a stream-copy cut."""

    src_root: Location  # the source dataset (`pipeline.storage`): its files are read through its store
    rel: str
    camera: str
    spans: tuple[tuple[int, float, float, int], ...]
