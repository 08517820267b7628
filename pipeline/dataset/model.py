"""The dataset model: one slotted record per episode, shared by every stage.

A `Dataset` is what `open_dataset` reads from a LeRobot root (format v2.1 or v3.0).
Paths inside records are POSIX paths relative to the dataset root; `resolve_inside`
turns them into absolute paths and refuses anything that leaves the root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EpisodeError

SUPPORTED_VERSIONS = ("v2.1", "v3.0")


@dataclass(slots=True, frozen=True)
class VideoRef:
    """Where one camera's frames of one episode live.

    v2.1: the whole file is the episode (`from_timestamp` = 0, `to_timestamp` = None).
    v3.0: the episode is the span [from_timestamp, to_timestamp) of a file shared with others.
    """

    camera: str
    rel: str
    from_timestamp: float = 0.0
    to_timestamp: float | None = None
    chunk_index: int = 0
    file_index: int = 0


@dataclass(slots=True, frozen=True)
class DataRef:
    """Where one episode's rows live: the parquet file and (v3.0) the global index span."""

    rel: str
    from_index: int | None = None
    to_index: int | None = None
    chunk_index: int = 0
    file_index: int = 0


@dataclass(slots=True, frozen=True)
class Episode:
    """One episode: its length from the metadata, its tasks, its parquet and one video per camera."""

    index: int
    frames_expected: int
    tasks: tuple[str, ...]
    data: DataRef
    videos: tuple[VideoRef, ...]

    def video(self, camera: str) -> VideoRef:
        for ref in self.videos:
            if ref.camera == camera:
                return ref
        raise KeyError(camera)


@dataclass(slots=True, frozen=True)
class CameraInfo:
    """A video feature as `meta/info.json` declares it."""

    key: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None
    height: int | None
    width: int | None
    codec: str | None
    pix_fmt: str | None
    fps: float | None


@dataclass(slots=True)
class Dataset:
    """A LeRobot dataset opened read-only."""

    root: Path
    codebase_version: str
    fps: float
    info: dict[str, Any]
    cameras: tuple[CameraInfo, ...]
    episodes: list[Episode]
    tasks: dict[int, str] = field(default_factory=dict)

    @property
    def camera_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.cameras)

    @property
    def total_frames_expected(self) -> int:
        return sum(e.frames_expected for e in self.episodes)

    def video_files(self) -> dict[str, list[Episode]]:
        """Each distinct video file (relative path) with the episodes that live in it, in order."""
        files: dict[str, list[Episode]] = {}
        for ep in self.episodes:
            for ref in ep.videos:
                files.setdefault(ref.rel, []).append(ep)
        return files

    def data_files(self) -> dict[str, list[Episode]]:
        files: dict[str, list[Episode]] = {}
        for ep in self.episodes:
            files.setdefault(ep.data.rel, []).append(ep)
        return files


def resolve_inside(root: Path, rel: str, *, episode: int | None = None) -> Path:
    """The absolute path of `rel` under `root`, refusing paths (or symlinks) that leave the root."""
    root_real = Path(os.path.realpath(root))
    candidate = Path(os.path.normpath(root / rel))
    real = Path(os.path.realpath(candidate))
    if not _is_within(candidate, Path(os.path.normpath(root))):
        raise EpisodeError(episode, candidate, f"path {rel!r} leaves the dataset root {root}")
    if not _is_within(real, root_real):
        raise EpisodeError(episode, candidate, f"symlink points outside the dataset root: {real}")
    return candidate


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True
