"""Streaming readers of a source dataset's metadata for conversion: one record at a time, so that memory
does not grow with the number of episodes. A conversion needs the whole metadata to be sound, so a bad
record is a `DatasetError` naming the file, the line or row and the bad value.

Both readers require what lerobot's own readers rely on: episodes listed in order with `episode_index`
0, 1, 2, ... (LeRobot 0.3 and 0.4 index episodes by position), and tasks whose `task_index` is their
position (LeRobot 0.4 reads `tasks.iloc[task_index]`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bounded import loads_json
from pipeline.convert.layout import MB, V21Episode, V30Episode, V30Video
from pipeline.dataset.datafiles import locator
from pipeline.dataset.info import format_template
from pipeline.dataset.model import resolve_inside
from pipeline.dataset.v21 import iter_lines
from pipeline.dataset.v30 import without_stats
from pipeline.errors import DatasetError, EpisodeError

V21_EPISODES = "meta/episodes.jsonl"
V21_EPISODES_STATS = "meta/episodes_stats.jsonl"
V21_TASKS = "meta/tasks.jsonl"
V30_EPISODES_DIR = "meta/episodes"
V30_TASKS = "meta/tasks.parquet"
BATCH_ROWS = 1024


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-empty line, read a block at a time (`pipeline.dataset.v21.iter_lines`)."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(path, f"line {lineno}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DatasetError(path, f"line {lineno}: expected a JSON object, found {obj!r}"[:300])
        yield lineno, obj


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _in_order(path: Path, where: str, index: Any, expected: int) -> int:
    idx = _int(index)
    if idx is None or idx < 0:
        raise DatasetError(path, f"{where}: invalid episode_index {index!r}")
    if idx != expected:
        raise DatasetError(path, f"{where}: episode_index {idx} where {expected} was expected (episodes must be "
                                 "listed in order, 0, 1, 2, ..., as LeRobot indexes them by position)")
    return idx


def _tasks(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise DatasetError(path, f"{where}: invalid tasks {value!r}"[:300])
    return tuple(value)


def _length(path: Path, where: str, value: Any) -> int:
    n = _int(value)
    if n is None or n <= 0:
        raise DatasetError(path, f"{where}: invalid length {value!r}: expected a positive integer")
    return n


# ---- v2.1 ----------------------------------------------------------------------------------------


def iter_v21_episode_lines(root: Path) -> Iterator[tuple[int, tuple[str, ...], int]]:
    """(episode_index, tasks, length) per line of meta/episodes.jsonl, checked to be 0, 1, 2, ..."""
    path = root / V21_EPISODES
    for expected, (lineno, obj) in enumerate(iter_jsonl(path)):
        where = f"line {lineno}"
        idx = _in_order(path, where, obj.get("episode_index"), expected)
        yield idx, _tasks(path, where, obj.get("tasks", [])), _length(path, where, obj.get("length"))


def file_mb(path: Path) -> float:
    """LeRobot's `get_file_size_in_mb`."""
    return path.stat().st_size / MB


def parquet_uncompressed_mb(path: Path) -> float:
    """LeRobot's `get_parquet_file_size_in_mb`: the row groups' uncompressed column sizes."""
    meta = pq.read_metadata(path)
    total = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        total += sum(rg.column(c).total_uncompressed_size for c in range(rg.num_columns))
    return total / MB


# How a data file's size is counted against `data_files_size_in_mb` (CLI choices are the keys).
DATA_SIZE_MEASURES: dict[str, Callable[[Path], float]] = {
    "lerobot": parquet_uncompressed_mb,  # what LeRobot's converter counts
    "bytes": file_mb,  # the file on disk (no footer read)
}


def iter_v21_episodes(
    root: Path, info: dict[str, Any], cameras: tuple[str, ...], data_size: str = "lerobot"
) -> Iterator[V21Episode]:
    """The v2.1 episodes with their files' paths and sizes (one stat per file), in order."""
    info_path = root / "meta/info.json"
    chunks_size = _int(info.get("chunks_size", 1000))
    if chunks_size is None or chunks_size <= 0:
        raise DatasetError(info_path, f"invalid chunks_size {info.get('chunks_size')!r}")
    data_tpl, video_tpl = info["data_path"], info.get("video_path")
    if cameras and not isinstance(video_tpl, str):
        raise DatasetError(info_path, "video features declared but 'video_path' is missing")
    measure = DATA_SIZE_MEASURES[data_size]
    for idx, tasks, length in iter_v21_episode_lines(root):
        chunk = idx // chunks_size
        data_rel = format_template(data_tpl, info_path, {"episode_chunk", "episode_index"},
                                   episode_chunk=chunk, episode_index=idx)
        video_rels = tuple(
            format_template(str(video_tpl), info_path, {"episode_chunk", "episode_index", "video_key"},
                            episode_chunk=chunk, episode_index=idx, video_key=cam)
            for cam in cameras
        )
        yield V21Episode(idx, length, tasks, data_rel, _size(root, data_rel, idx, measure),
                         video_rels, tuple(_size(root, rel, idx, file_mb) for rel in video_rels))


def _size(root: Path, rel: str, episode: int, measure: Callable[[Path], float]) -> float:
    path = resolve_inside(root, rel, episode=episode)
    try:
        return measure(path)
    except FileNotFoundError:
        raise EpisodeError(episode, path, "missing file") from None
    except (OSError, pa.ArrowException) as exc:
        raise EpisodeError(episode, path, f"cannot read: {exc}") from None


def iter_v21_stats(root: Path) -> Iterator[tuple[int, dict[str, dict[str, Any]]]]:
    """(episode_index, stats) per line of meta/episodes_stats.jsonl, checked to be 0, 1, 2, ..."""
    path = root / V21_EPISODES_STATS
    for expected, (lineno, obj) in enumerate(iter_jsonl(path)):
        where = f"line {lineno}"
        idx = _in_order(path, where, obj.get("episode_index"), expected)
        stats = obj.get("stats")
        if not isinstance(stats, dict) or not all(isinstance(v, dict) for v in stats.values()):
            raise DatasetError(path, f"{where}: 'stats' must map each feature to its stats")
        yield idx, stats


def iter_v21_tasks(root: Path) -> Iterator[tuple[int, str]]:
    """(task_index, task) per line of meta/tasks.jsonl, checked to be 0, 1, 2, ..."""
    path = root / V21_TASKS
    for expected, (lineno, obj) in enumerate(iter_jsonl(path)):
        idx, task = _int(obj.get("task_index")), obj.get("task")
        if idx is None or not isinstance(task, str):
            raise DatasetError(path, f"line {lineno}: expected task_index (int) and task (str), got {obj!r}"[:300])
        if idx != expected:
            raise DatasetError(path, f"line {lineno}: task_index {idx} where {expected} was expected "
                                     "(tasks must be listed in order 0, 1, 2, ...)")
        yield idx, task


# ---- v3.0 ----------------------------------------------------------------------------------------


def v30_episode_files(root: Path) -> list[Path]:
    """meta/episodes/chunk-*/file-*.parquet in the order LeRobot reads them (sorted paths)."""
    files = sorted((root / V30_EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise DatasetError(root / V30_EPISODES_DIR, "missing: no chunk-*/file-*.parquet episode metadata")
    return files


def iter_v30_rows(root: Path, *, stats: bool = True) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """(file, row number, row with every column) of the episode metadata, a batch at a time; `stats` False
    leaves out the per-episode `stats/...` columns (most of a row's values: a pass that only plans reads
    the rest, not them)."""
    for path in v30_episode_files(root):
        try:
            pf = pq.ParquetFile(path)
            columns = None if stats else without_stats(pf.schema_arrow.names)
            row = 0
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                for rec in batch.to_pylist():
                    yield path, row, rec
                    row += 1
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(path, f"cannot read episode metadata parquet: {exc}") from None


def parse_v30_row(info_path: Path, path: Path, rowno: int, row: dict[str, Any], info: dict[str, Any],
                  cameras: tuple[str, ...], expected: int) -> V30Episode:
    """A checked `V30Episode` from one row of meta/episodes/*.parquet (`expected`: its episode_index)."""
    where = f"row {rowno}"
    idx = _in_order(path, where, row.get("episode_index"), expected)
    length = _length(path, where, row.get("length"))
    tasks = _tasks(path, where, row.get("tasks"))

    def need_int(key: str) -> int:
        v = _int(row.get(key))
        if v is None or v < 0:
            raise DatasetError(path, f"{where} (episode {idx}): {key} = {row.get(key)!r}: expected an integer >= 0")
        return v

    def need_float(key: str) -> float:
        v = row.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise DatasetError(path, f"{where} (episode {idx}): {key} = {v!r}: expected a finite number >= 0")
        return float(v)

    start, stop = need_int("dataset_from_index"), need_int("dataset_to_index")
    if stop - start != length:
        raise DatasetError(path, f"{where} (episode {idx}): dataset_from_index..dataset_to_index = {start}..{stop} "
                                 f"holds {stop - start} rows but length = {length}")
    data_rel = format_template(info["data_path"], info_path, {"chunk_index", "file_index"},
                               chunk_index=need_int("data/chunk_index"), file_index=need_int("data/file_index"))
    videos = []
    for cam in cameras:
        p = f"videos/{cam}/"
        rel = format_template(str(info.get("video_path")), info_path, {"chunk_index", "file_index", "video_key"},
                              chunk_index=need_int(p + "chunk_index"), file_index=need_int(p + "file_index"),
                              video_key=cam)
        t0, t1 = need_float(p + "from_timestamp"), need_float(p + "to_timestamp")
        if t1 <= t0:
            raise DatasetError(path, f"{where} (episode {idx}): {p}from_timestamp..to_timestamp = {t0}..{t1} "
                                     "is not a forward span")
        videos.append(V30Video(cam, rel, t0, t1))
    return V30Episode(idx, length, tasks, data_rel, start, tuple(videos))


def iter_v30_episodes(root: Path, info: dict[str, Any], cameras: tuple[str, ...], *, stats: bool = True) -> Iterator[
        tuple[V30Episode, dict[str, Any]]]:
    """Each v3.0 episode and its metadata row (with its stats columns unless `stats` is False), checked to be
    0, 1, 2, ..."""
    if cameras and not isinstance(info.get("video_path"), str):
        raise DatasetError(root / "meta/info.json", "video features declared but 'video_path' is missing")
    files = locator(root)  # rows where LeRobot finds them, whatever a stale data/file_index says
    for expected, (path, rowno, row) in enumerate(iter_v30_rows(root, stats=stats)):
        ep = parse_v30_row(root / "meta/info.json", path, rowno, row, info, cameras, expected)
        if files is not None:
            real = files.locate(ep.data_rel, ep.dataset_from_index)
            if real != ep.data_rel:
                ep = replace(ep, data_rel=real)
        yield ep, row


def iter_v30_tasks(root: Path) -> Iterator[tuple[int, str]]:
    """(task_index, task) per row of meta/tasks.parquet (the task is the pandas index, or a `task` column)."""
    path = root / V30_TASKS
    if not path.is_file():
        raise DatasetError(path, "missing file")
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        task_col = "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
        if "task_index" not in names or task_col is None:
            raise DatasetError(path, f"expected columns task_index and task, found {names}")
        expected = 0
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=["task_index", task_col]):
            for idx, task in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                if idx != expected or not isinstance(task, str):
                    raise DatasetError(path, f"row {expected}: task_index {idx!r} task {task!r}: expected "
                                             f"task_index {expected} (LeRobot reads tasks by position)")
                yield idx, task
                expected += 1
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(path, f"cannot read tasks parquet: {exc}") from None


def stats_of_row(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The `stats/<feature>/<stat>` columns of a v3.0 episode row, unflattened (feature names keep their dots)."""
    stats: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        if not key.startswith("stats/") or value is None:
            continue
        feature, _, stat = key[len("stats/"):].rpartition("/")
        stats.setdefault(feature, {})[stat] = value
    return stats
