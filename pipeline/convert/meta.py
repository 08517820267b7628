"""The output's metadata both ways, written incrementally (a row group or a line at a time).

- info.json: `info_to_v30` (as LeRobot's `convert_info`: templates, `data_files_size_in_mb` /
  `video_files_size_in_mb`, no `total_chunks` / `total_videos`) and `info_to_v21` (the inverse: `total_chunks`,
  `total_videos`, v2.1 templates, `chunks_size` = episodes per chunk); totals always from what was converted.
  Features are written as the target's own writer writes them, not as LeRobot's converter does: no `fps` on
  non-video features (LeRobot 0.4.4's `convert_info` adds it; neither 0.4's nor 0.6's `LeRobotDataset.create`
  writes it, and 0.6.1's merge compares non-video features exactly), and the depth flag spelled as each
  generation's writer spells it (v3.0: 0.6's `is_depth_map`; v2.1: 0.3's `video.is_depth_map`): a converted
  dataset merges with a natively written one.
- tasks: `meta/tasks.jsonl` lines <-> `meta/tasks.parquet` (the pandas frame LeRobot writes: task
  strings as the index, a `task_index` column), both read by position.
- episodes: `meta/episodes.jsonl` + `meta/episodes_stats.jsonl` <-> `meta/episodes/chunk-XXX/file-YYY.parquet`
  rows (episode_index, tasks, length, data/*, dataset_from/to_index, videos/<cam>/*, stats/<feature>/<stat>,
  meta/episodes/*), in the column order of LeRobot 0.4's writer.
- global stats: `pipeline.dataset.stats.StatsAggregator` gives LeRobot's `aggregate_stats` of all episodes in
  one pass (min, max, count-weighted mean, pooled std, count-weighted quantiles present in every episode).

Each file is written under a temp name and renamed when complete (`pipeline/atomic.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.convert.layout import (
    MB,
    V21_DATA_PATH,
    V21_VIDEO_PATH,
    V30_DATA_PATH,
    V30_EPISODES_PATH,
    V30_VIDEO_PATH,
    Limits,
    Placement,
    next_chunk_file,
)
from pipeline.errors import DatasetError
from pipeline.rates import fps_fraction, frames_to_seconds

STAT_ORDER = ("min", "max", "mean", "std", "count")


# ---- info.json ------------------------------------------------------------------------------------


def _fps_value(fps: Any) -> Any:
    """LeRobot's converter stores `int(fps)`; an integral rate becomes an int, any other rate is kept."""
    return int(fps) if float(fps).is_integer() else fps


def _ordered(first: dict[str, Any], rest: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    out = dict(first)
    out.update({k: v for k, v in rest.items() if k not in out and k not in drop})
    return out


def _rename_info_key(feature: dict[str, Any], old: str, new: str) -> None:
    """Move `info[old]` to `info[new]` (kept where `new` is already there), as lerobot 0.6.x's
    `update_video_info` migrates the depth flag."""
    block = feature.get("info")
    if isinstance(block, dict) and old in block:
        value = block.pop(old)
        block.setdefault(new, value)


def info_to_v30(info: dict[str, Any], limits: Limits, *, episodes: int, frames: int, tasks: int) -> dict[str, Any]:
    src = json.loads(json.dumps(info))
    fps = _fps_value(src["fps"])
    features = src["features"]
    for ft in features.values():
        if isinstance(ft, dict) and ft.get("dtype") == "video":
            _rename_info_key(ft, "video.is_depth_map", "is_depth_map")
    first = {
        "codebase_version": "v3.0",
        "robot_type": src.get("robot_type"),
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": limits.chunks_size,
        "data_files_size_in_mb": limits.data_files_size_in_mb,
        "video_files_size_in_mb": limits.video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": V30_DATA_PATH,
        "video_path": V30_VIDEO_PATH if src.get("video_path") is not None else None,
        "features": features,
    }
    return _ordered(first, src, {"total_chunks", "total_videos"})


def info_to_v21(info: dict[str, Any], chunks_size: int, *, episodes: int, frames: int, tasks: int,
                cameras: int) -> dict[str, Any]:
    src = json.loads(json.dumps(info))
    fps = src["fps"]
    features = src["features"]
    for ft in features.values():  # the per-feature fps LeRobot's v2.1 -> v3.0 converter added
        if isinstance(ft, dict) and ft.get("dtype") != "video" and ft.get("fps") == fps:
            del ft["fps"]
        elif isinstance(ft, dict):
            _rename_info_key(ft, "is_depth_map", "video.is_depth_map")
    first = {
        "codebase_version": "v2.1",
        "robot_type": src.get("robot_type"),
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "total_videos": episodes * cameras,
        "total_chunks": (episodes - 1) // chunks_size + 1 if episodes else 0,
        "chunks_size": chunks_size,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": V21_DATA_PATH,
        "video_path": V21_VIDEO_PATH if src.get("video_path") is not None else None,
        "features": features,
    }
    return _ordered(first, src, {"data_files_size_in_mb", "video_files_size_in_mb"})


# ---- tasks ----------------------------------------------------------------------------------------


def tasks_schema(sample_task: str) -> pa.Schema:
    """The schema (with pandas' metadata) of LeRobot's `pd.DataFrame({"task_index": ...}, index=tasks).to_parquet()`."""
    import pandas as pd

    df = pd.DataFrame({"task_index": np.array([0], dtype=np.int64)}, index=[sample_task])
    return pa.Schema.from_pandas(df)


def write_tasks_v30(path: Path, tasks: Iterable[tuple[int, str]], batch: int = 10_000,
                    root: Path | None = None) -> int:
    """`meta/tasks.parquet` from (task_index, task) in order; returns the number of tasks. `root`: the output
    folder (`pipeline.atomic.atomic_path`)."""
    writer: pq.ParquetWriter | None = None
    count = 0
    idx: list[int] = []
    names: list[str] = []
    with atomic.atomic_path(path, root) as tmp:
        try:
            for i, task in tasks:
                idx.append(i)
                names.append(task)
                if len(idx) >= batch:
                    writer = _write_tasks_batch(writer, tmp, idx, names)
                    count += len(idx)
                    idx, names = [], []
            if idx or writer is None:
                writer = _write_tasks_batch(writer, tmp, idx, names)
                count += len(idx)
        finally:
            if writer is not None:
                writer.close()
    return count


def _write_tasks_batch(writer: pq.ParquetWriter | None, tmp: Path, idx: list[int],
                       names: list[str]) -> pq.ParquetWriter:
    if writer is None:
        schema = tasks_schema(names[0] if names else "")
        writer = pq.ParquetWriter(tmp, schema)
    schema = writer.schema
    table = pa.Table.from_arrays([pa.array(idx, type=schema.field(0).type), pa.array(names, type=schema.field(1).type)],
                                 schema=schema)
    writer.write_table(table)
    return writer


def write_tasks_v21(path: Path, tasks: Iterable[tuple[int, str]], root: Path | None = None) -> int:
    count = 0
    with atomic.LineWriter(path, root) as out:
        for i, task in tasks:
            out.write_json_line({"task_index": i, "task": task})
            count += 1
    return count


# ---- stats ----------------------------------------------------------------------------------------


def normalized_stat(name: str, value: Any) -> Any:
    """A stat value as LeRobot's converter stores it (`np.array` of the JSON value): `count` integers,
    integers kept as integers (the min/max of an integer feature), floats as floats; nesting kept."""
    if isinstance(value, list):
        return [normalized_stat(name, v) for v in value]
    if name == "count" or (isinstance(value, int) and not isinstance(value, bool)):
        return int(value)
    return float(value)


def flat_stats(stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{feature: {stat: value}} -> {"stats/<feature>/<stat>": value} (LeRobot's `flatten_dict`)."""
    return {f"stats/{feat}/{name}": normalized_stat(name, value)
            for feat, st in stats.items() for name, value in st.items()}


# ---- episodes: v2.1 -> v3.0 -----------------------------------------------------------------------


def v30_episode_row(p: Placement, fps: float, stats: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """A meta/episodes row in the column order of LeRobot 0.4's writer (meta/episodes/* added on write)."""
    row: dict[str, Any] = {
        "episode_index": p.episode,
        "tasks": list(p.tasks),
        "length": p.length,
        "data/chunk_index": p.data_chunk_index,
        "data/file_index": p.data_file_index,
        "dataset_from_index": p.dataset_from_index,
        "dataset_to_index": p.dataset_to_index,
    }
    for v in p.videos:
        pre = f"videos/{v.camera}/"
        row[pre + "chunk_index"] = v.chunk_index
        row[pre + "file_index"] = v.file_index
        row[pre + "from_timestamp"] = frames_to_seconds(v.frames_before, fps)
        row[pre + "to_timestamp"] = frames_to_seconds(v.frames_before + p.length, fps)
    if stats:
        row.update(flat_stats(stats))
    return row


class V30EpisodesWriter:
    """meta/episodes/chunk-XXX/file-YYY.parquet from rows fed one at a time: a row group every `group_rows`
    rows, a new file once a file's rows reach `file_size_in_mb` (in memory, as LeRobot's `write_episodes`
    measures them), each file renamed into place when complete. The schema is the first row group's;
    every later row must have the same columns."""

    def __init__(self, out_root: Path, file_size_in_mb: float, chunks_size: int, group_rows: int = 1000) -> None:
        self.out_root, self.limit_mb = out_root, file_size_in_mb
        self.chunks_size, self.group_rows = chunks_size, group_rows
        self.chunk = self.file = 0
        self.rows: list[dict[str, Any]] = []
        self.schema: pa.Schema | None = None
        self.names: list[str] | None = None
        self.writer: pq.ParquetWriter | None = None
        self.tmp: Path | None = None
        self.file_mb = 0.0
        self.files: list[str] = []
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        row = {**row, "meta/episodes/chunk_index": self.chunk, "meta/episodes/file_index": self.file}
        if self.names is None:
            self.names = list(row)
        elif list(row) != self.names:
            missing = sorted(set(self.names) - set(row))
            extra = sorted(set(row) - set(self.names))
            raise DatasetError(f"episode {row.get('episode_index')}",
                               f"episode metadata columns differ from the first episode's: missing {missing[:5]}, "
                               f"extra {extra[:5]}")
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= self.group_rows:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        try:
            table = pa.Table.from_pylist(self.rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            eps = f"{self.rows[0].get('episode_index')}..{self.rows[-1].get('episode_index')}"
            raise DatasetError(f"episodes {eps}", f"episode metadata does not fit the first episodes' column "
                                                  f"types: {exc}") from None
        self.rows = []
        if self.writer is None:
            if self.schema is None:
                self.schema = _fixed_types(table.schema)
                table = table.cast(self.schema)
            self.tmp = atomic.create_temp(self._path(), self.out_root)
            self.writer = pq.ParquetWriter(self.tmp, self.schema, compression="snappy", use_dictionary=True)
        self.writer.write_table(table)
        self.file_mb += table.nbytes / MB
        if self.file_mb >= self.limit_mb:
            self._close_file()
            self.chunk, self.file = next_chunk_file(self.chunk, self.file, self.chunks_size)

    def _path(self) -> Path:
        return self.out_root / V30_EPISODES_PATH.format(chunk_index=self.chunk, file_index=self.file)

    def _close_file(self) -> None:
        if self.writer is None or self.tmp is None:
            return
        self.writer.close()
        self.writer = None
        path = self._path()
        atomic.commit(self.tmp, path)
        self.files.append(path.relative_to(self.out_root).as_posix())
        self.tmp, self.file_mb = None, 0.0

    def close(self) -> list[str]:
        """Write what is left; returns the files written (relative paths)."""
        self._flush()
        self._close_file()
        return self.files

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


def _fixed_types(schema: pa.Schema) -> pa.Schema:
    """The inferred schema with `tasks` always a list of strings (an empty first list infers list<null>)."""
    if "tasks" in schema.names:
        schema = schema.set(schema.get_field_index("tasks"), pa.field("tasks", pa.list_(pa.string())))
    return schema


# ---- episodes: v3.0 -> v2.1 -----------------------------------------------------------------------


def v21_episode_line(index: int, tasks: tuple[str, ...], length: int) -> dict[str, Any]:
    return {"episode_index": index, "tasks": list(tasks), "length": length}


def v21_stats_line(index: int, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"episode_index": index, "stats": stats}


def exact_offsets_error(rows: Iterable[dict[str, Any]], fps: float, cameras: tuple[str, ...]) -> float:
    """The largest |from_timestamp - frames_before / fps| over episodes (frames_before counted per camera
    file from the lengths, in episode order): 0 for our output, the drift for an accumulated one."""
    rate = fps_fraction(fps)
    before: dict[tuple[str, int, int], int] = {}
    worst = 0.0
    for row in rows:
        for cam in cameras:
            key = (cam, row[f"videos/{cam}/chunk_index"], row[f"videos/{cam}/file_index"])
            k = before.get(key, 0)
            worst = max(worst, abs(row[f"videos/{cam}/from_timestamp"] - float(k / rate)))
            before[key] = k + row["length"]
    return worst
