"""The dataset model: columnar episode metadata, and slotted `Episode` records made on demand.

A `Dataset` is what a format's reader (`pipeline.formats.open_dataset`) reads from a LeRobot root; the model
knows no format: what it needs of one (the path templates' fields, whether episodes share files) is the
dataset's `Layout`, which the reader sets. `ds.episodes`
is a sequence of `Episode` records over numpy columns (`pipeline.dataset.table`): millions of
episodes cost tens of bytes each, and a record (with its paths) exists only while a unit uses it.
Paths inside records are POSIX paths relative to the dataset root, where it lives (`ds.location`: a local
folder, a hub snapshot, an object-store prefix); its store (`pipeline.storage`) reads them and refuses any that
leaves the root.

The files episodes share are found by `file_groups` ("data" or a camera): the plan of every job
iterates them (`iter_file_sets`, `iter_camera_files`, `iter_data_files`) instead of building a
dict over the corpus.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import EpisodeError
from pipeline.storage.base import Location, StorePath

if TYPE_CHECKING:
    from pipeline.dataset.table import EpisodeTable, Groups

MAX_REJECTED_KEPT = 10_000  # rejected metadata records kept with their reason (all are counted)


@dataclass(slots=True, frozen=True)
class Layout:
    """What the model needs of a format's file layout (set by the format's reader, `pipeline.formats`): the
    fields each info.json path template may use, and whether episodes share files."""

    data_fields: frozenset[str]  # of `data_path`
    video_fields: frozenset[str]  # of `video_path`
    shares_files: bool  # many episodes per data and video file, named by chunk/file index columns (v3.0)

    @property
    def path_fields(self) -> dict[str, frozenset[str]]:
        """info.json template key -> the fields it may use."""
        return {"data_path": self.data_fields, "video_path": self.video_fields}


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
    depth: bool = False  # a depth map: flagged (either spelling) or declared in more than 8 bits of gray
    # a camera stored as images, taken as the video camera an output makes of it (`with_image_cameras_as_videos`):
    # its VideoRefs name the output's files, and its pictures are read from the episode's data parquet
    from_images: bool = False


@dataclass(slots=True, frozen=True)
class ImageCamera:
    """A camera stored as images (`dtype: "image"`): one encoded picture (PNG, JPEG, ...) per row of the data
    parquet, in a struct column `{bytes, path}` named by the key (as `datasets`' `Image` feature stores it, and
    as LeRobot writes a dataset with `use_videos=False`). Its size is the declared shape, read by its names."""

    key: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None
    height: int | None
    width: int | None
    channels: int | None


class Rejected(list[EpisodeError]):
    """Episode records the metadata reader refused, in the order they were found: the first
    `MAX_REJECTED_KEPT` with their reason, and `total`, the number of them all."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self._pairs: list[tuple[int, EpisodeError, int | None]] = []

    def add(self, key: int, error: EpisodeError, index: int | None = None, *, counted: bool = False) -> None:
        if not counted:
            self.total += 1
        self._pairs.append((key, error, index))
        if len(self._pairs) > 2 * MAX_REJECTED_KEPT:
            self._pairs.sort(key=lambda p: p[0])
            del self._pairs[MAX_REJECTED_KEPT:]

    def settle(self, taken: Callable[[int, int], bool]) -> None:
        """Order and bound the records; a bad record whose index an earlier accepted record holds is a duplicate."""
        self._pairs.sort(key=lambda p: p[0])
        del self._pairs[MAX_REJECTED_KEPT:]
        out = []
        for key, err, index in self._pairs:
            if index is not None and taken(index, key):
                err = EpisodeError(index, err.path, "duplicate episode_index")
            out.append(err)
        self[:] = out
        self._pairs = []


@dataclass(slots=True)
class Dataset:
    """A LeRobot dataset opened read-only, where it lives (`location`; `root` names its files)."""

    location: Location
    codebase_version: str
    fps: float
    info: dict[str, Any]
    cameras: tuple[CameraInfo, ...]  # the cameras stored as videos
    episodes: EpisodeTable
    layout: Layout
    tasks: dict[int, str] = field(default_factory=dict)
    file_keys: Callable[[str], list[np.ndarray]] | None = None  # "data" | camera -> columns naming the file
    rejected_count: int = 0  # metadata records refused (see the `Rejected` list open_dataset returns)
    metadata_digest: str = ""  # of meta/info.json and the episode metadata as read (plans key on it)
    # v3.0: episodes whose data/file_index names another file than the one holding their rows (the first
    # 1,000, and how many in all); their DataRef already points at the real file (pipeline.dataset.datafiles)
    stale_data_files: list[Any] = field(default_factory=list)
    stale_data_files_total: int = 0
    # problems the readers do not refuse (one line each, the first MAX_LISTED, and how many in all): scan and
    # verify report them as warnings, no command refuses the dataset for them
    warnings: list[str] = field(default_factory=list)
    warnings_total: int = 0
    # the metadata rules no reader of the format line refuses (pipeline.checks): (rule, line)
    rule_warnings: list[tuple[str, str]] = field(default_factory=list)
    rule_warnings_total: int = 0
    image_cameras: tuple[ImageCamera, ...] = ()  # the cameras stored as images in the data parquet
    _groups: dict[str, Groups] = field(default_factory=dict)

    @property
    def root(self) -> StorePath:
        """The dataset's root folder: `ds.root / rel` is one of its files, read through its store."""
        return StorePath(self.location, "")

    @property
    def camera_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.cameras)

    @property
    def image_camera_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.image_cameras)

    @property
    def total_frames_expected(self) -> int:
        return int(self.episodes.length.sum())

    # ---- the files episodes share ------------------------------------------------------------

    def file_groups(self, kind: str) -> Groups:
        """Episode positions per file of `kind` ("data", a camera key, or "set": all of an episode's files)."""
        from pipeline.dataset.table import Groups

        if kind not in self._groups:
            assert self.file_keys is not None
            kinds = ["data", *self.camera_keys] if kind == "set" else [kind]
            keys = [k for name in kinds for k in self.file_keys(name)]
            unique = any(k is self.episodes.episode_index for k in keys)  # the episode index names the file
            self._groups[kind] = Groups.singletons(len(self.episodes)) if unique else Groups(*keys)
        return self._groups[kind]

    def iter_file_sets(self) -> Iterator[np.ndarray]:
        """Positions of the episodes that share all their files (v2.1: one episode each), in plan order."""
        yield from self.file_groups("set")

    def iter_camera_files(self) -> Iterator[tuple[str, str, list[Episode]]]:
        """(camera, video file, its episodes in order) for each distinct video file, ordered by first
        episode then camera (the order of a walk over episodes and their cameras)."""
        groups = [self.file_groups(cam) for cam in self.camera_keys]

        def firsts(c: int) -> Iterator[tuple[int, int, int]]:
            g = groups[c]
            for k in range(len(g)):
                yield g.first(k), c, k

        for _first, c, k in heapq.merge(*(firsts(c) for c in range(len(groups)))):
            eps = [self.episodes[int(p)] for p in groups[c].positions(k)]
            cam = self.camera_keys[c]
            yield cam, eps[0].video(cam).rel, eps

    def with_image_cameras_as_videos(self, video_rel: Callable[[str, Episode], str]) -> Dataset:
        """The dataset as an output that stores its image cameras as videos sees it: each image camera a video
        camera (`CameraInfo.from_images`), whose file of an episode is `video_rel(camera, episode)` (one per
        data file: the files it groups are the data files) and whose span is the whole file, to be set by the
        encode. Records only: nothing is read."""
        if not self.image_cameras:
            return self
        images = self.image_camera_keys
        promoted = tuple(CameraInfo(key=c.key, shape=c.shape, names=c.names, height=c.height, width=c.width,
                                    codec=None, pix_fmt=None, fps=self.fps, from_images=True)
                         for c in self.image_cameras)
        make = self.episodes.record_maker
        keys = self.file_keys
        assert keys is not None

        def record(table: EpisodeTable, k: int) -> Episode:
            ep: Episode = make(table, k)
            shared = self.layout.shares_files
            refs = tuple(VideoRef(camera=cam, rel=video_rel(cam, ep), from_timestamp=0.0,
                                  to_timestamp=0.0 if shared else None, chunk_index=ep.data.chunk_index,
                                  file_index=ep.data.file_index) for cam in images)
            return Episode(ep.index, ep.frames_expected, ep.tasks, ep.data, ep.videos + refs)

        from pipeline.dataset.table import EpisodeTable

        return dataclasses.replace(
            self, cameras=self.cameras + promoted, image_cameras=(),
            episodes=EpisodeTable(self.episodes.columns, record),
            file_keys=lambda kind: keys("data" if kind in images else kind), _groups={})

    def iter_video_files(self) -> Iterator[tuple[str, list[Episode]]]:
        """(video file, its episodes) for each distinct video file (see `iter_camera_files`)."""
        for _cam, rel, eps in self.iter_camera_files():
            yield rel, eps

    def iter_data_files(self) -> Iterator[tuple[str, list[Episode]]]:
        """(data parquet file, its episodes in order) for each distinct data file."""
        for positions in self.file_groups("data"):
            eps = [self.episodes[int(p)] for p in positions]
            yield eps[0].data.rel, eps


def resolve_inside(root: Path | str | StorePath, rel: str, *, episode: int | None = None) -> Path:
    """The absolute local path of `rel` under a local dataset `root`, refusing paths (or symlinks) that leave
    it: the local store's rules (`pipeline.storage.local`), for a caller that needs the path itself."""
    from pipeline.storage import FileProblem, as_root
    from pipeline.storage.local import LocalStore

    where = as_root(root)
    store = where.store
    if not isinstance(store, LocalStore):
        raise EpisodeError(episode, str(where / rel), "not a local file")
    try:
        return store.path_of((where / rel).rel if where.rel else rel)
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
