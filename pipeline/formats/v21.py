"""LeRobot format v2.1 (lerobot 0.3.x): one parquet and one mp4 per camera per episode, metadata in JSON Lines.

- constants: the metadata files, the path templates LeRobot writes and the fields they may use;
- the reader, one per file, streaming (`pipeline.formats.jsonl`: a block at a time), in two modes. Lenient
  (`open_v21`, `read_tasks`): `meta/episodes.jsonl` into the columnar model, a bad line recorded with its line
  number and the episode it names (when readable), the others load. Strict (`iter_v21_episode_lines`,
  `iter_v21_episodes`, `iter_v21_tasks`, `iter_v21_stats`; convert and edit): one record at a time, listed 0, 1,
  2, ... as LeRobot 0.3 indexes them, the first bad one a `DatasetError` naming the file, line and value;
- the writer: `meta/tasks.jsonl`, `meta/episodes.jsonl` and `meta/episodes_stats.jsonl` lines, info.json (from a
  v3.0 dataset's: `info_to_v21`), and a re-encode's episodes_stats.jsonl;
- the packing rule: one file per episode, in chunk `episode_index // chunks_size` (`plan_v30_to_v21`);
- the checks of its metadata files (`check_files`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from pipeline import atomic
from pipeline.dataset.info import cameras_from_info, format_template, image_cameras_from_info
from pipeline.dataset.model import DataRef, Dataset, Episode, Layout, Rejected, VideoRef
from pipeline.dataset.rows import RowBuilder
from pipeline.dataset.table import EpisodeTable, PathTemplate
from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats.base import (
    DataStats,
    EpisodeVideos,
    Format,
    as_int,
    in_order,
    length_of,
    ordered_info,
    rename_info_key,
    tasks_of,
)
from pipeline.formats.jsonl import BadJsonLine, iter_json_lines, iter_jsonl
from pipeline.formats.plan import (
    DATA_SIZE_MEASURES,
    DataSplitUnit,
    V21Episode,
    V30Episode,
    VideoCutUnit,
    file_mb,
)
from pipeline.formats.problems import check_jsonl
from pipeline.storage import FileProblem, Root, StorePath, as_root

if TYPE_CHECKING:
    from pipeline.formats.problems import Problems

VERSION = "v2.1"
EPISODES_REL = "meta/episodes.jsonl"
TASKS_REL = "meta/tasks.jsonl"
EPISODES_STATS_REL = "meta/episodes_stats.jsonl"
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
DATA_FIELDS = frozenset({"episode_chunk", "episode_index"})
VIDEO_FIELDS = frozenset({"episode_chunk", "episode_index", "video_key"})
LAYOUT = Layout(DATA_FIELDS, VIDEO_FIELDS, shares_files=False)
DEFAULT_CHUNKS_SIZE = 1000  # LeRobot's default episodes per chunk
REWRITTEN = ("meta/info.json", EPISODES_STATS_REL, "meta/stats.json")  # by a re-encode
# the JSON Lines files checked before a job: (file, schema, required)
JSONL_FILES = ((EPISODES_REL, "lerobot_episode", True), (TASKS_REL, "lerobot_task", False),
               (EPISODES_STATS_REL, "lerobot_episode_stats", False))

Reject = Callable[[int, EpisodeError, "int | None"], None]


# ---- reading: meta/episodes.jsonl --------------------------------------------------------------------------


def iter_episode_lines(path: Path | StorePath, reject: Reject | None = None,
                       digest: Any = None) -> Iterator[tuple[int, int, int, Sequence[str], dict[str, Any]]]:
    """(line number, episode_index, length, tasks, the line's object) of each episode line of
    `meta/episodes.jsonl`, a block at a time (`digest`, a hashlib object, is fed the file's bytes).

    Strict (`reject` None; convert, edit): episodes listed 0, 1, 2, ... (LeRobot 0.3 indexes them by position),
    tasks a list of strings or null, a positive length; the first bad line is a `DatasetError` naming it.
    Lenient (the columnar model): a bad line goes to `reject(line number, the reason, its episode_index when it
    is a valid one)` and the reading goes on; order and duplicates are the caller's (`RowBuilder`).
    """
    expected = 0
    for lineno, line, obj in iter_json_lines(path, digest):
        if reject is None:
            if isinstance(obj, json.JSONDecodeError):
                raise DatasetError(path, f"line {lineno}: not JSON ({obj.msg})")
            if not isinstance(obj, dict):
                raise DatasetError(path, f"line {lineno}: expected a JSON object, found {obj!r}"[:300])
            where = f"line {lineno}"
            idx = in_order(path, where, obj.get("episode_index"), expected)
            tasks = tasks_of(path, where, obj.get("tasks", []))
            yield lineno, idx, length_of(path, where, obj.get("length")), tasks, obj
            expected += 1
            continue
        where = f"{path}:{lineno}"
        if isinstance(obj, json.JSONDecodeError):
            reject(lineno, EpisodeError(BadJsonLine(obj, line).episode_hint(), where, f"line is not JSON ({obj})"),
                   None)
            continue
        if not isinstance(obj, dict):
            reject(lineno, EpisodeError(None, where, f"expected a JSON object, found {obj!r}"), None)
            continue
        index = obj.get("episode_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 or index >= 2**63:
            reject(lineno, EpisodeError(None, where, f"invalid episode_index {index!r}"), None)
            continue
        length = obj.get("length")
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length >= 2**63:
            reject(lineno, EpisodeError(index, where, f"invalid length {length!r}: expected a positive integer"),
                   index)
            continue
        task_list = obj.get("tasks", [])
        if not isinstance(task_list, list) or not all(isinstance(t, str) for t in task_list):
            reject(lineno, EpisodeError(index, where, f"invalid tasks {task_list!r}"), index)
            continue
        yield lineno, index, length, task_list, obj


def iter_v21_episode_lines(root: Root) -> Iterator[tuple[int, tuple[str, ...], int]]:
    """(episode_index, tasks, length) per line of meta/episodes.jsonl, checked to be 0, 1, 2, ... (strict)."""
    for _lineno, idx, length, tasks, _obj in iter_episode_lines(as_root(root) / EPISODES_REL):
        yield idx, tuple(tasks), length


def iter_v21_episodes(
    where: Root, info: dict[str, Any], cameras: tuple[str, ...], data_size: str = "lerobot"
) -> Iterator[V21Episode]:
    """The v2.1 episodes with their files' paths and sizes (one stat per file), in order (strict)."""
    root = as_root(where)
    info_path = root / "meta/info.json"
    chunks_size = as_int(info.get("chunks_size", 1000))
    if chunks_size is None or chunks_size <= 0:
        raise DatasetError(info_path, f"invalid chunks_size {info.get('chunks_size')!r}")
    data_tpl, video_tpl = info["data_path"], info.get("video_path")
    if cameras and not isinstance(video_tpl, str):
        raise DatasetError(info_path, "video features declared but 'video_path' is missing")
    measure = DATA_SIZE_MEASURES[data_size]
    for idx, tasks, length in iter_v21_episode_lines(root):
        chunk = idx // chunks_size
        data_rel = format_template(data_tpl, info_path, DATA_FIELDS, episode_chunk=chunk, episode_index=idx)
        video_rels = tuple(
            format_template(str(video_tpl), info_path, VIDEO_FIELDS, episode_chunk=chunk, episode_index=idx,
                            video_key=cam)
            for cam in cameras
        )
        yield V21Episode(idx, length, tasks, data_rel, _size(root, data_rel, idx, measure),
                         video_rels, tuple(_size(root, rel, idx, file_mb) for rel in video_rels))


def _size(root: StorePath, rel: str, episode: int, measure: Callable[[StorePath], float]) -> float:
    path = root / rel
    try:
        return measure(path)
    except FileProblem as exc:  # missing, not a file, or leaving the dataset (the store's rules)
        raise EpisodeError(episode, exc.path, exc.message) from None
    except FileNotFoundError:
        raise EpisodeError(episode, path, "missing file") from None
    except (OSError, pa.ArrowException) as exc:
        raise EpisodeError(episode, path, f"cannot read: {exc}") from None


# ---- reading: meta/episodes_stats.jsonl, meta/tasks.jsonl -----------------------------------------------


def iter_v21_stats(root: Root) -> Iterator[tuple[int, dict[str, dict[str, Any]]]]:
    """(episode_index, stats) per line of meta/episodes_stats.jsonl, checked to be 0, 1, 2, ... (strict)."""
    path = as_root(root) / EPISODES_STATS_REL
    for expected, (lineno, obj) in enumerate(iter_jsonl(path)):
        where = f"line {lineno}"
        idx = in_order(path, where, obj.get("episode_index"), expected)
        stats = obj.get("stats")
        if not isinstance(stats, dict) or not all(isinstance(v, dict) for v in stats.values()):
            raise DatasetError(path, f"{where}: 'stats' must map each feature to its stats")
        yield idx, stats


def iter_task_lines(root: Root, *, strict: bool) -> Iterator[tuple[int, str]]:
    """(task_index, task) per line of meta/tasks.jsonl.

    Strict (convert, edit): read as a stream, tasks listed 0, 1, 2, ... (LeRobot reads them by position); a
    missing file is a `DatasetError`. Lenient (the model): a missing file has no tasks, the file (small) is read
    whole before its lines are checked, any integer task_index is taken.
    """
    path = as_root(root) / TASKS_REL
    if strict:
        lines: Iterable[tuple[int, str, Any]] = iter_json_lines(path)
    elif not path.is_file():
        return
    else:
        lines = list(iter_json_lines(path))
    for expected, (lineno, _line, obj) in enumerate(lines):
        if strict:
            if isinstance(obj, json.JSONDecodeError):
                raise DatasetError(path, f"line {lineno}: not JSON ({obj.msg})")
            if not isinstance(obj, dict):
                raise DatasetError(path, f"line {lineno}: expected a JSON object, found {obj!r}"[:300])
            idx, task = as_int(obj.get("task_index")), obj.get("task")
            if idx is None or not isinstance(task, str):
                raise DatasetError(path, f"line {lineno}: expected task_index (int) and task (str), got {obj!r}"[:300])
            if idx != expected:
                raise DatasetError(path, f"line {lineno}: task_index {idx} where {expected} was expected "
                                         "(tasks must be listed in order 0, 1, 2, ...)")
            yield idx, task
            continue
        if isinstance(obj, json.JSONDecodeError) or not isinstance(obj, dict):
            raise DatasetError(path, f"line {lineno}: not a JSON object")
        index, text = obj.get("task_index"), obj.get("task")
        if not isinstance(index, int) or not isinstance(text, str):
            raise DatasetError(path, f"line {lineno}: expected task_index (int) and task (str), got {obj!r}")
        yield index, text


def read_tasks(root: Root) -> dict[int, str]:
    """task_index -> task (lenient: `iter_task_lines`)."""
    return dict(iter_task_lines(root, strict=False))


def iter_v21_tasks(root: Root) -> Iterator[tuple[int, str]]:
    """(task_index, task) per line of meta/tasks.jsonl, checked to be 0, 1, 2, ... (strict)."""
    return iter_task_lines(root, strict=True)


# ---- reading: the columnar model (lenient) ----------------------------------------------------------------


def open_v21(where: Root, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
    root = as_root(where)
    info_path = root / "meta/info.json"
    cameras = cameras_from_info(info, info_path)
    chunks_size = info.get("chunks_size", 1000)
    if not isinstance(chunks_size, int) or isinstance(chunks_size, bool) or chunks_size <= 0:
        raise DatasetError(info_path, f"invalid chunks_size {chunks_size!r}: expected a positive integer")
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path") or "")
    if not isinstance(data_tpl, str):
        raise DatasetError(info_path, f"invalid data_path {data_tpl!r}")
    # Check the templates once with a sample so a bad template is one dataset-level error.
    data = PathTemplate(data_tpl, info_path, DATA_FIELDS, {"episode_chunk": 0, "episode_index": 0})
    videos = [(cam.key, PathTemplate(video_tpl, info_path, VIDEO_FIELDS,
                                     {"episode_chunk": 0, "episode_index": 0, "video_key": cam.key}))
              for cam in cameras]

    ep_path = root / EPISODES_REL
    digest = hashlib.blake2b(digest_size=16)
    rows = RowBuilder()
    for lineno, index, length, task_list, _obj in iter_episode_lines(ep_path, rows.reject, digest):
        rows.add_row(lineno, index, length, task_list)
    cols, rejected = rows.finish(lambda lineno: f"{ep_path}:{lineno}")

    def make(table: EpisodeTable, k: int) -> Episode:
        index = int(table.columns.index[k])
        chunk = index // chunks_size
        return Episode(
            index=index,
            frames_expected=int(table.columns.length[k]),
            tasks=table.tasks(k),
            data=DataRef(rel=data.fill(episode_chunk=chunk, episode_index=index), chunk_index=chunk,
                         file_index=index),
            videos=tuple(VideoRef(camera=key, rel=tpl.fill(episode_chunk=chunk, episode_index=index, video_key=key),
                                  chunk_index=chunk, file_index=index) for key, tpl in videos),
        )

    def keys(kind: str) -> list[np.ndarray]:
        """What identifies the file of `kind` ("data" or a camera) from the episode index."""
        fields = data.fields if kind == "data" else dict(videos)[kind].fields
        if "episode_index" in fields:
            return [cols.index]
        if "episode_chunk" in fields:
            return [cols.index // chunks_size]
        return [np.zeros(len(cols), dtype=np.int64)]

    ds = Dataset(
        location=root.location,
        codebase_version=VERSION,
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        image_cameras=image_cameras_from_info(info, info_path),
        episodes=EpisodeTable(cols, make),
        layout=LAYOUT,
        tasks=read_tasks(root) if tasks else {},
        file_keys=keys,
        rejected_count=rejected.total,
        metadata_digest=digest.hexdigest(),
    )
    return ds, rejected


# ---- writing -----------------------------------------------------------------------------------------------


def info_to_v21(info: dict[str, Any], chunks_size: int, *, episodes: int, frames: int, tasks: int,
                cameras: int) -> dict[str, Any]:
    src = json.loads(json.dumps(info))
    fps = src["fps"]
    features = src["features"]
    for ft in features.values():  # the per-feature fps LeRobot's v2.1 -> v3.0 converter added
        if isinstance(ft, dict) and ft.get("dtype") != "video" and ft.get("fps") == fps:
            del ft["fps"]
        elif isinstance(ft, dict):
            rename_info_key(ft, "is_depth_map", "video.is_depth_map")
    first = {
        "codebase_version": VERSION,
        "robot_type": src.get("robot_type"),
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "total_videos": episodes * cameras,
        "total_chunks": (episodes - 1) // chunks_size + 1 if episodes else 0,
        "chunks_size": chunks_size,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if src.get("video_path") is not None else None,
        "features": features,
    }
    return ordered_info(first, src, {"data_files_size_in_mb", "video_files_size_in_mb"})


def write_tasks_v21(path: Path, tasks: Iterable[tuple[int, str]], root: Path | None = None) -> int:
    count = 0
    with atomic.LineWriter(path, root) as out:
        for i, task in tasks:
            out.write_json_line({"task_index": i, "task": task})
            count += 1
    return count


def v21_episode_line(index: int, tasks: tuple[str, ...], length: int) -> dict[str, Any]:
    return {"episode_index": index, "tasks": list(tasks), "length": length}


def v21_stats_line(index: int, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"episode_index": index, "stats": stats}

class V21EpisodesWriter:
    """meta/episodes.jsonl and (with `stats`) meta/episodes_stats.jsonl, a line per episode (streaming: nothing is
    held), each renamed into place when the writer closes without an error, else removed (`atomic.LineWriter`)."""

    def __init__(self, out: Path, *, stats: bool = True) -> None:
        self._stack = contextlib.ExitStack()
        with self._stack as stack:
            self.episodes = stack.enter_context(atomic.LineWriter(out / EPISODES_REL, out))
            self.stats = stack.enter_context(atomic.LineWriter(out / EPISODES_STATS_REL, out)) if stats else None
            self._stack = stack.pop_all()

    def add(self, line: dict[str, Any]) -> None:
        """One episode's line of episodes.jsonl (`v21_episode_line`, or a source's line renumbered)."""
        self.episodes.write_json_line(line)

    def add_stats(self, index: int, stats: dict[str, dict[str, Any]]) -> None:
        """One episode's line of episodes_stats.jsonl."""
        assert self.stats is not None
        self.stats.write_json_line(v21_stats_line(index, stats))

    def __enter__(self) -> V21EpisodesWriter:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.__exit__(typ, exc, tb)


def _write_v21_stats_anew(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                          data_stats: DataStats) -> None:
    """meta/episodes_stats.jsonl written from scratch (`--repair stats`), one line per episode in order:
    each numeric column's stats from the parquet rows, each re-encoded camera's from its new frames."""
    with atomic.atomic_path(out / EPISODES_STATS_REL, out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for e in ds.episodes.episode_index:
            ep = int(e)
            stats = dict(data_stats(ep))
            for cam in cameras:
                ev = videos.get(ep, cam)
                if ev is not None:
                    stats[cam] = ev.stats
            fh.write(json.dumps({"episode_index": ep, "stats": stats}, ensure_ascii=False) + "\n")


def _write_v21_stats(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                     data_stats: DataStats | None = None) -> None:
    """meta/episodes_stats.jsonl line by line (streaming), each re-encoded camera's stats replaced."""
    if data_stats is not None:
        _write_v21_stats_anew(ds, out, videos, cameras, data_stats)
        return
    path = ds.root / EPISODES_STATS_REL
    if not path.is_file():
        return
    with atomic.atomic_path(out / EPISODES_STATS_REL, out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for _lineno, _line, row in iter_json_lines(path):
            if isinstance(row, json.JSONDecodeError):
                raise row
            ep = row.get("episode_index")
            new: dict[str, Any] = {}
            if isinstance(ep, int) and not isinstance(ep, bool):
                for cam in cameras:
                    ev = videos.get(ep, cam)
                    if ev is not None:
                        new[cam] = ev.stats
            if isinstance(row.get("stats"), dict):
                row["stats"] = {k: new.get(k, v) for k, v in row["stats"].items()} | {
                    k: v for k, v in new.items() if k not in row["stats"]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


# ---- the packing rule: one file per episode ---------------------------------------------------------------


def v21_paths(episode: int, cameras: tuple[str, ...], chunks_size: int) -> tuple[str, tuple[str, ...]]:
    chunk = episode // chunks_size
    data = DATA_PATH.format(episode_chunk=chunk, episode_index=episode)
    videos = tuple(VIDEO_PATH.format(episode_chunk=chunk, episode_index=episode, video_key=c) for c in cameras)
    return data, videos


def plan_v30_to_v21(
    episodes: Iterable[V30Episode],
    fps: float,
    src_root: Root,
    out_root: str,
    chunks_size: int = DEFAULT_CHUNKS_SIZE,
) -> Iterator[DataSplitUnit | VideoCutUnit]:
    """Per episode: its parquet, then one mp4 per camera (in the episode's camera order)."""
    source = as_root(src_root).location
    for ep in episodes:
        data_rel, video_rels = v21_paths(ep.index, tuple(v.camera for v in ep.videos), chunks_size)
        yield DataSplitUnit(source, out_root, ep.data_rel, data_rel, ep.index, ep.length, ep.dataset_from_index)
        for v, out_rel in zip(ep.videos, video_rels, strict=True):
            yield VideoCutUnit(source, out_root, v.rel, out_rel, v.camera, ep.index, fps,
                               v.from_timestamp, v.to_timestamp, ep.length)


# ---- checks ------------------------------------------------------------------------------------------------


def check_files(where: Root, problems: Problems) -> None:
    """Every line of meta/episodes.jsonl, tasks.jsonl and episodes_stats.jsonl (when present): JSON, and valid
    against its schema; each file's problems under its own rule (episodes_jsonl, tasks_jsonl, ...)."""
    root = as_root(where)
    for rel, name, required in JSONL_FILES:
        problems.rule = rel.removeprefix("meta/").replace(".", "_")  # episodes_jsonl, tasks_jsonl, ...
        path = root / rel
        if not path.exists() and not required:
            continue
        if path.exists() and not path.is_file():
            problems.add(f"{path}: not a regular file")
            continue
        check_jsonl(path, name, problems)


# ---- the format --------------------------------------------------------------------------------------------


class V21(Format):
    version = VERSION
    layout = LAYOUT
    data_path = DATA_PATH
    video_path = VIDEO_PATH
    tasks_rel = TASKS_REL
    episodes_rel = EPISODES_REL
    episodes_stats_rel = EPISODES_STATS_REL

    def open(self, root: Root, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
        return open_v21(root, info, tasks=tasks)

    def iter_tasks(self, root: Root) -> Iterator[tuple[int, str]]:
        return iter_v21_tasks(root)

    def iter_episode_tasks(self, root: Root, info: dict[str, Any]) -> Iterator[tuple[int, tuple[str, ...], int]]:
        return iter_v21_episode_lines(root)

    def write_tasks(self, path: Path, tasks: Iterable[tuple[int, str]], root: Path | None = None) -> int:
        return write_tasks_v21(path, tasks, root)

    def counted_totals(self, *, episodes: int, cameras: int, chunks_size: int) -> dict[str, int]:
        return {"total_videos": episodes * cameras,
                "total_chunks": (episodes - 1) // chunks_size + 1 if episodes else 0}

    def is_rewritten(self, rel: str) -> bool:
        return rel in REWRITTEN

    def write_reencoded_episodes(self, ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                                 data_stats: DataStats | None = None) -> list[Path]:
        _write_v21_stats(ds, out, videos, cameras, data_stats)
        return [out / EPISODES_STATS_REL]

    def check_files(self, root: Root, cameras: list[str], problems: Problems) -> None:
        check_files(root, problems)

    def rotation_readers(self, coded: str, shown: str, how: str) -> str:
        return "lerobot 0.3.x (torchcodec 0.4, pyav) hands back the coded " + coded + " frames"


FORMAT = V21()
