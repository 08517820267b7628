"""The conversion plan: which output files exist, which source spans each one holds, and where each
episode lands. Pure and deterministic (the same source metadata always gives the same plan, so a killed
conversion can be resumed output file by output file), and streaming (episodes are consumed one at a
time; only the output file being filled is held).

v2.1 -> v3.0 packs consecutive episodes into data files and, per camera, into video files, with
LeRobot's rule (`convert_dataset_v21_to_v30.py`, `LeRobotDataset._save_episode_video`): a new file
starts when the current one is not empty and its size plus the next episode's would reach the limit.
Unlike LeRobot's converter, an episode's `data/file_index` is the file its rows are written to (the
converter records the previous file for the episode that opens a new data file). Offsets come from
frame counts: an episode's `from_timestamp` is `frames_before / fps` and its `dataset_from_index` the
frames of all episodes before it, never sums of floating-point durations.

v3.0 -> v2.1 gives every episode its own parquet and one mp4 per camera, in chunk
`episode_index // chunks_size`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# LeRobot's defaults (lerobot/datasets/utils.py)
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200

V30_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V30_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V30_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"

MB = 1024**2  # LeRobot's "MB" (get_file_size_in_mb)


@dataclass(slots=True, frozen=True)
class Limits:
    """Output layout of a v3.0 dataset: files per chunk and the size at which a new file starts."""

    chunks_size: int = DEFAULT_CHUNKS_SIZE
    data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_IN_MB
    video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_SIZE_IN_MB

    def __post_init__(self) -> None:
        if self.chunks_size <= 0:
            raise ValueError(f"chunks_size must be positive, got {self.chunks_size}")
        if self.data_files_size_in_mb <= 0 or self.video_files_size_in_mb <= 0:
            raise ValueError("file size limits must be positive")


def next_chunk_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """LeRobot's `update_chunk_file_indices`."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


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

    src_root: str
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

    src_root: str
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


class _Packer:
    """One output stream (the data files, or one camera's video files) filled with LeRobot's rule."""

    def __init__(self, limit_mb: float, chunks_size: int) -> None:
        self.limit_mb, self.chunks_size = limit_mb, chunks_size
        self.chunk = self.file = 0
        self.size_mb = 0.0
        self.frames = 0
        self.inputs: list[EpisodeInput] = []

    def add(self, item: EpisodeInput, size_mb: float) -> tuple[tuple[int, int, int], list[EpisodeInput] | None]:
        """Place an episode: ((chunk, file, frames before it in the file), the inputs of the file it closed)."""
        closed = None
        if self.inputs and self.size_mb + size_mb >= self.limit_mb:
            closed = self.inputs
            self.chunk, self.file = next_chunk_file(self.chunk, self.file, self.chunks_size)
            self.size_mb, self.frames, self.inputs = 0.0, 0, []
        where = (self.chunk, self.file, self.frames)
        self.inputs.append(item)
        self.size_mb += size_mb
        self.frames += item.frames
        return where, closed


PlanItem = Placement | VideoConcatUnit | DataConcatUnit


def plan_v21_to_v30(
    episodes: Iterable[V21Episode],
    cameras: tuple[str, ...],
    fps: float,
    src_root: str,
    out_root: str,
    limits: Limits = Limits(),
) -> Iterator[PlanItem]:
    """Stream the plan: every episode's `Placement` (in episode order) and every output file's unit as soon
    as it is closed (before the placement of the episode that opened the next file), then the last files."""
    data = _Packer(limits.data_files_size_in_mb, limits.chunks_size)
    video = {cam: _Packer(limits.video_files_size_in_mb, limits.chunks_size) for cam in cameras}
    frames_total = 0
    pending: list[PlanItem] = []
    for ep in episodes:
        (d_chunk, d_file, _), closed = data.add(EpisodeInput(ep.index, ep.data_rel, ep.length), ep.data_mb)
        if closed is not None:
            pending.append(_data_unit(src_root, out_root, d_chunk, d_file, closed, limits, frames_total))
        places = []
        for k, cam in enumerate(cameras):
            packer = video[cam]
            prev_chunk, prev_file = packer.chunk, packer.file
            (v_chunk, v_file, before), vclosed = packer.add(
                EpisodeInput(ep.index, ep.video_rels[k], ep.length), ep.video_mb[k])
            if vclosed is not None:
                pending.append(_video_unit(src_root, out_root, cam, fps, prev_chunk, prev_file, vclosed))
            places.append(VideoPlace(cam, v_chunk, v_file, before))
        yield from pending
        pending.clear()
        yield Placement(ep.index, ep.length, ep.tasks, d_chunk, d_file, frames_total, tuple(places))
        frames_total += ep.length
    if data.inputs:
        yield DataConcatUnit(src_root, out_root, V30_DATA_PATH.format(chunk_index=data.chunk, file_index=data.file),
                             frames_total - data.frames, tuple(data.inputs))
    for cam in cameras:
        packer = video[cam]
        if packer.inputs:
            yield _video_unit(src_root, out_root, cam, fps, packer.chunk, packer.file, packer.inputs)


def _data_unit(src_root: str, out_root: str, chunk: int, file: int, closed: list[EpisodeInput],
               limits: Limits, frames_total: int) -> DataConcatUnit:
    """The data file just closed: it is the one before (chunk, file), and its rows end at `frames_total`."""
    prev = _previous_chunk_file(chunk, file, limits.chunks_size)
    first = frames_total - sum(i.frames for i in closed)
    return DataConcatUnit(src_root, out_root, V30_DATA_PATH.format(chunk_index=prev[0], file_index=prev[1]),
                          first, tuple(closed))


def _video_unit(src_root: str, out_root: str, cam: str, fps: float, chunk: int, file: int,
                inputs: list[EpisodeInput]) -> VideoConcatUnit:
    rel = V30_VIDEO_PATH.format(video_key=cam, chunk_index=chunk, file_index=file)
    return VideoConcatUnit(src_root, out_root, rel, cam, fps, tuple(inputs))


def _previous_chunk_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk - 1, chunks_size - 1) if file == 0 else (chunk, file - 1)


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

    src_root: str
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

    src_root: str
    out_root: str
    src_rel: str
    out_rel: str
    episode: int
    frames: int
    dataset_from_index: int


def v21_paths(episode: int, cameras: tuple[str, ...], chunks_size: int) -> tuple[str, tuple[str, ...]]:
    chunk = episode // chunks_size
    data = V21_DATA_PATH.format(episode_chunk=chunk, episode_index=episode)
    videos = tuple(V21_VIDEO_PATH.format(episode_chunk=chunk, episode_index=episode, video_key=c) for c in cameras)
    return data, videos


def plan_v30_to_v21(
    episodes: Iterable[V30Episode],
    fps: float,
    src_root: str,
    out_root: str,
    chunks_size: int = DEFAULT_CHUNKS_SIZE,
) -> Iterator[DataSplitUnit | VideoCutUnit]:
    """Per episode: its parquet, then one mp4 per camera (in the episode's camera order)."""
    for ep in episodes:
        data_rel, video_rels = v21_paths(ep.index, tuple(v.camera for v in ep.videos), chunks_size)
        yield DataSplitUnit(src_root, out_root, ep.data_rel, data_rel, ep.index, ep.length, ep.dataset_from_index)
        for v, out_rel in zip(ep.videos, video_rels, strict=True):
            yield VideoCutUnit(src_root, out_root, v.rel, out_rel, v.camera, ep.index, fps,
                               v.from_timestamp, v.to_timestamp, ep.length)


@dataclass(slots=True, frozen=True)
class KeyframeCheckUnit:
    """One v3.0 video file and the spans (episode, from_timestamp, to_timestamp, frames) of its episodes,
    to be checked for starting on keyframes before a stream-copy cut."""

    src_root: str
    rel: str
    camera: str
    spans: tuple[tuple[int, float, float, int], ...]


def plan_keyframe_checks(episodes: Iterable[V30Episode], src_root: str) -> Iterator[KeyframeCheckUnit]:
    """One unit per run of consecutive episodes sharing a camera's file (LeRobot keeps a file's episodes
    consecutive; a file that appears in two runs is checked twice, which is still correct)."""
    open_runs: dict[str, tuple[str, list[tuple[int, float, float, int]]]] = {}
    for ep in episodes:
        for v in ep.videos:
            run = open_runs.get(v.camera)
            if run is not None and run[0] != v.rel:
                yield KeyframeCheckUnit(src_root, run[0], v.camera, tuple(run[1]))
                run = None
            if run is None:
                run = open_runs[v.camera] = (v.rel, [])
            run[1].append((ep.index, v.from_timestamp, v.to_timestamp, ep.length))
    for camera, (rel, spans) in open_runs.items():
        yield KeyframeCheckUnit(src_root, rel, camera, tuple(spans))
