"""LeRobot format v3.0: many episodes per parquet and per mp4, episode metadata in parquet."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset.info import cameras_from_info, format_template
from pipeline.dataset.model import DataRef, Dataset, Episode, VideoRef
from pipeline.errors import DatasetError, EpisodeError

EPISODES_DIR = "meta/episodes"
TASKS_REL = "meta/tasks.parquet"
FILE_FIELDS = {"chunk_index", "file_index"}
VIDEO_FIELDS = {"chunk_index", "file_index", "video_key"}


def episode_meta_files(root: Path) -> list[Path]:
    return sorted((root / EPISODES_DIR).glob("chunk-*/file-*.parquet"))


def read_episodes_table(root: Path) -> list[tuple[str, int, dict[str, Any]]]:
    """(file, row number, row) for every row of meta/episodes/chunk-*/file-*.parquet."""
    files = episode_meta_files(root)
    if not files:
        raise DatasetError(root / EPISODES_DIR, "missing: no chunk-*/file-*.parquet episode metadata")
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for path in files:
        try:
            table = pq.read_table(path, columns=None)
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(path, f"cannot read episode metadata parquet: {exc}") from None
        keep = [c for c in table.column_names if not c.startswith("stats/")]
        for i, row in enumerate(table.select(keep).to_pylist()):
            rows.append((str(path), i, row))
    return rows


def read_tasks(root: Path) -> dict[int, str]:
    path = root / TASKS_REL
    if not path.is_file():
        return {}
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(path, f"cannot read tasks parquet: {exc}") from None
    tasks: dict[int, str] = {}
    cols = table.column_names
    task_col = "task" if "task" in cols else ("__index_level_0__" if "__index_level_0__" in cols else None)
    if "task_index" not in cols or task_col is None:
        raise DatasetError(path, f"expected columns task_index and task, found {cols}")
    for idx, task in zip(table["task_index"].to_pylist(), table[task_col].to_pylist(), strict=True):
        tasks[int(idx)] = str(task)
    return tasks


def _int(row: dict[str, Any], key: str) -> int:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} = {value!r}: expected an integer")
    return value


def _float(row: dict[str, Any], key: str) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} = {value!r}: expected a finite number")
    return float(value)


def open_v30(root: Path, info: dict[str, Any]) -> tuple[Dataset, list[EpisodeError]]:
    info_path = root / "meta/info.json"
    cameras = cameras_from_info(info, info_path)
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path") or "")
    if not isinstance(data_tpl, str):
        raise DatasetError(info_path, f"invalid data_path {data_tpl!r}")
    format_template(data_tpl, info_path, FILE_FIELDS, chunk_index=0, file_index=0)
    for cam in cameras:
        format_template(video_tpl, info_path, VIDEO_FIELDS, chunk_index=0, file_index=0, video_key=cam.key)

    episodes: list[Episode] = []
    rejected: list[EpisodeError] = []
    seen: set[int] = set()
    for file, rowno, row in read_episodes_table(root):
        where = f"{file} row {rowno}"
        index = row.get("episode_index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            rejected.append(EpisodeError(None, where, f"invalid episode_index {index!r}"))
            continue
        if index in seen:
            rejected.append(EpisodeError(index, where, "duplicate episode_index"))
            continue
        try:
            length = _int(row, "length")
            if length <= 0:
                raise ValueError(f"length = {length}: expected a positive integer")
            tasks = row.get("tasks") or []
            if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
                raise ValueError(f"tasks = {tasks!r}: expected a list of strings")
            d_chunk, d_file = _int(row, "data/chunk_index"), _int(row, "data/file_index")
            from_index, to_index = _int(row, "dataset_from_index"), _int(row, "dataset_to_index")
            if to_index - from_index != length:
                raise ValueError(
                    f"dataset_from_index..dataset_to_index = {from_index}..{to_index} "
                    f"holds {to_index - from_index} rows but length = {length}"
                )
            videos: list[VideoRef] = []
            for cam in cameras:
                prefix = f"videos/{cam.key}/"
                v_chunk, v_file = _int(row, prefix + "chunk_index"), _int(row, prefix + "file_index")
                t0, t1 = _float(row, prefix + "from_timestamp"), _float(row, prefix + "to_timestamp")
                if t0 < 0 or t1 <= t0:
                    raise ValueError(f"{prefix}from_timestamp..to_timestamp = {t0}..{t1}: not a forward span")
                videos.append(
                    VideoRef(
                        camera=cam.key,
                        rel=format_template(
                            video_tpl, info_path, VIDEO_FIELDS,
                            chunk_index=v_chunk, file_index=v_file, video_key=cam.key,
                        ),
                        from_timestamp=t0,
                        to_timestamp=t1,
                        chunk_index=v_chunk,
                        file_index=v_file,
                    )
                )
        except ValueError as exc:
            rejected.append(EpisodeError(index, where, str(exc)))
            continue
        seen.add(index)
        data_rel = format_template(data_tpl, info_path, FILE_FIELDS, chunk_index=d_chunk, file_index=d_file)
        episodes.append(
            Episode(
                index=index,
                frames_expected=length,
                tasks=tuple(tasks),
                data=DataRef(
                    rel=data_rel, from_index=from_index, to_index=to_index, chunk_index=d_chunk, file_index=d_file
                ),
                videos=tuple(videos),
            )
        )
    episodes.sort(key=lambda e: e.index)
    ds = Dataset(
        root=root,
        codebase_version="v3.0",
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        episodes=episodes,
        tasks=read_tasks(root),
    )
    return ds, rejected
