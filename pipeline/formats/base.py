"""What every LeRobot format provides (`Format`), the records its writers share with the jobs, and the rules
and helpers both format modules use (the strict readers' record rules, info.json's key order).

A format is one module (`pipeline/formats/v21.py`, `v30.py`) holding its path constants, its streaming metadata
reader (lenient: into the columnar model, a bad record rejected; strict: one record at a time, in order, the first
bad one refused), its metadata writer and its packing rule, and one `Format` object (`FORMAT`) that the jobs
dispatch through. The registry is `pipeline.formats.FORMATS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pipeline.errors import DatasetError
from pipeline.storage import Root, StorePath

if TYPE_CHECKING:
    from pipeline.dataset.model import Dataset, Layout, Rejected
    from pipeline.formats.problems import Problems

STAT_NAMES = ("min", "max", "mean", "std", "count")  # the image stats a re-encode recomputes


@dataclass(slots=True)
class EpisodeVideo:
    """One episode's span in a re-encoded file and the image stats of its new frames."""

    episode: int
    from_timestamp: float
    to_timestamp: float | None
    stats: dict[str, Any] = field(default_factory=dict)


class EpisodeVideos(Protocol):
    """The new span and image stats of one episode's re-encoded video of one camera (None: not re-encoded)."""

    def get(self, episode: int, camera: str) -> EpisodeVideo | None: ...


DataStats = Callable[[int], dict[str, Any]]  # episode -> {column: stats} (`--repair stats`)


class Format(ABC):
    """One LeRobot format: its constants, and the reader, writer and checks the jobs call instead of comparing
    `codebase_version` strings."""

    version: ClassVar[str]  # info.json's codebase_version
    layout: ClassVar[Layout]  # what the model needs: the templates' fields, whether episodes share files
    data_path: ClassVar[str]  # the path templates LeRobot writes
    video_path: ClassVar[str]
    tasks_rel: ClassVar[str]
    episodes_rel: ClassVar[str]  # the episode metadata (a file or a folder)
    episodes_stats_rel: ClassVar[str | None]  # per-episode stats in a file of their own (None: in the episodes')

    def __repr__(self) -> str:
        return f"<format {self.version}>"

    # ---- reading ------------------------------------------------------------------------------------

    @abstractmethod
    def open(self, root: Root, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
        """The lenient reader: the whole episode metadata into the columnar model (a bad record is rejected, the
        rest load); `tasks` False leaves `ds.tasks` empty."""

    @abstractmethod
    def iter_tasks(self, root: Root) -> Iterator[tuple[int, str]]:
        """The strict reader of the tasks: (task_index, task), checked to be 0, 1, 2, ..."""

    @abstractmethod
    def iter_episode_tasks(self, root: Root, info: dict[str, Any]) -> Iterator[tuple[int, tuple[str, ...], int]]:
        """The strict reader of the episodes: (episode_index, tasks, length), checked to be 0, 1, 2, ..."""

    # ---- writing ------------------------------------------------------------------------------------

    @abstractmethod
    def write_tasks(self, path: Path, tasks: Iterable[tuple[int, str]], root: Path | None = None) -> int:
        """The tasks file from (task_index, task) in order; returns the number of tasks."""

    @abstractmethod
    def counted_totals(self, *, episodes: int, cameras: int, chunks_size: int) -> dict[str, int]:
        """info.json's totals, beyond episodes, frames and tasks, that this format counts from the episodes."""

    @abstractmethod
    def is_rewritten(self, rel: str) -> bool:
        """Whether a re-encode writes this metadata file anew (else it is copied as it is)."""

    @abstractmethod
    def write_reencoded_episodes(self, ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                                 data_stats: DataStats | None = None) -> list[Path]:
        """The episode metadata of a re-encode's output: each re-encoded camera's new spans and image stats
        (`data_stats`: every episode's data stats written anew, `--repair stats`). Returns the files written."""

    # ---- checking -----------------------------------------------------------------------------------

    @abstractmethod
    def check_files(self, root: Root, cameras: list[str], problems: Problems) -> None:
        """Every episode and task metadata file checked against its rules (`pipeline.formats.validate`)."""

    @abstractmethod
    def rotation_readers(self, coded: str, shown: str, how: str) -> str:
        """What the readers of this format line hand back from a video with a display matrix."""


# ---- the strict readers' rules (convert, edit: the whole metadata must be sound) ---------------------------


def as_int(value: Any) -> int | None:
    """`value` when it is an integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def in_order(path: Path | StorePath, where: str, index: Any, expected: int) -> int:
    """An episode_index that is the record's position: LeRobot 0.3 and 0.4 index episodes by position."""
    idx = as_int(index)
    if idx is None or idx < 0:
        raise DatasetError(path, f"{where}: invalid episode_index {index!r}")
    if idx != expected:
        raise DatasetError(path, f"{where}: episode_index {idx} where {expected} was expected (episodes must be "
                                 "listed in order, 0, 1, 2, ..., as LeRobot indexes them by position)")
    return idx


def tasks_of(path: Path | StorePath, where: str, value: Any) -> tuple[str, ...]:
    """An episode's tasks: a list of strings (null: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise DatasetError(path, f"{where}: invalid tasks {value!r}"[:300])
    return tuple(value)


def length_of(path: Path | StorePath, where: str, value: Any) -> int:
    """An episode's length: a positive integer."""
    n = as_int(value)
    if n is None or n <= 0:
        raise DatasetError(path, f"{where}: invalid length {value!r}: expected a positive integer")
    return n


# ---- info.json, as each format's writer writes it ---------------------------------------------------------


def ordered_info(first: dict[str, Any], rest: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    """`first`'s keys in its order, then the other keys of `rest` (less `drop`) in theirs."""
    out = dict(first)
    out.update({k: v for k, v in rest.items() if k not in out and k not in drop})
    return out


def rename_info_key(feature: dict[str, Any], old: str, new: str) -> None:
    """Move `info[old]` to `info[new]` (kept where `new` is already there), as lerobot 0.6.x's
    `update_video_info` migrates the depth flag."""
    block = feature.get("info")
    if isinstance(block, dict) and old in block:
        value = block.pop(old)
        block.setdefault(new, value)
