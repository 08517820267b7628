"""The metadata readers as they were before the columnar model (one Python record per episode), kept
as the reference the columnar readers must equal on any input (tests/test_metadata_equivalence.py)."""

# ruff: noqa
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset.info import cameras_from_info, format_template
from pipeline.dataset.model import DataRef, Episode, VideoRef
from pipeline.errors import DatasetError, EpisodeError

EPISODES_REL = "meta/episodes.jsonl"
DATA_FIELDS = {"episode_chunk", "episode_index"}
VIDEO_FIELDS = {"episode_chunk", "episode_index", "video_key"}
EPISODE_INDEX_RE = re.compile(r'"episode_index"\s*:\s*(\d+)')
EPISODES_DIR = "meta/episodes"
FILE_FIELDS = {"chunk_index", "file_index"}
V30_VIDEO_FIELDS = {"chunk_index", "file_index", "video_key"}

class BadJsonLine(ValueError):
    """A JSON Lines line that does not parse: the error and the raw text (to name its episode)."""

    def __init__(self, error: json.JSONDecodeError, text: str) -> None:
        super().__init__(str(error))
        self.text = text

    def episode_hint(self) -> int | None:
        """The episode the broken line was about, when its `episode_index` is still readable."""
        match = EPISODE_INDEX_RE.search(self.text)
        return int(match.group(1)) if match else None


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed object) for each non-empty line; a bad line is kept as an exception."""
    if not path.is_file():
        raise DatasetError(path, "missing file")
    rows: list[tuple[int, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, f"cannot read: {exc}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            rows.append((lineno, BadJsonLine(exc, line)))
    return rows


def legacy_v21(root: Path, info: dict[str, Any]) -> tuple[list[Episode], list[EpisodeError]]:
    info_path = root / "meta/info.json"
    cameras = cameras_from_info(info, info_path)
    chunks_size = info.get("chunks_size", 1000)
    if not isinstance(chunks_size, int) or isinstance(chunks_size, bool) or chunks_size <= 0:
        raise DatasetError(info_path, f"invalid chunks_size {chunks_size!r}: expected a positive integer")
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path") or "")
    if not isinstance(data_tpl, str):
        raise DatasetError(info_path, f"invalid data_path {data_tpl!r}")
    # Check the templates once with a sample so a bad template is one dataset-level error.
    format_template(data_tpl, info_path, DATA_FIELDS, episode_chunk=0, episode_index=0)
    for cam in cameras:
        format_template(video_tpl, info_path, VIDEO_FIELDS, episode_chunk=0, episode_index=0, video_key=cam.key)

    ep_path = root / EPISODES_REL
    episodes: list[Episode] = []
    rejected: list[EpisodeError] = []
    seen: set[int] = set()
    for lineno, obj in read_jsonl(ep_path):
        where = f"{ep_path}:{lineno}"
        if isinstance(obj, BadJsonLine):
            rejected.append(EpisodeError(obj.episode_hint(), where, f"line is not JSON ({obj})"))
            continue
        if not isinstance(obj, dict):
            rejected.append(EpisodeError(None, where, f"expected a JSON object, found {obj!r}"))
            continue
        index = obj.get("episode_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            rejected.append(EpisodeError(None, where, f"invalid episode_index {index!r}"))
            continue
        if index in seen:
            rejected.append(EpisodeError(index, where, "duplicate episode_index"))
            continue
        length = obj.get("length")
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
            rejected.append(EpisodeError(index, where, f"invalid length {length!r}: expected a positive integer"))
            continue
        tasks = obj.get("tasks", [])
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            rejected.append(EpisodeError(index, where, f"invalid tasks {tasks!r}"))
            continue
        seen.add(index)
        chunk = index // chunks_size
        data_rel = format_template(data_tpl, info_path, DATA_FIELDS, episode_chunk=chunk, episode_index=index)
        videos = tuple(
            VideoRef(
                camera=cam.key,
                rel=format_template(
                    video_tpl, info_path, VIDEO_FIELDS, episode_chunk=chunk, episode_index=index, video_key=cam.key
                ),
                chunk_index=chunk,
                file_index=index,
            )
            for cam in cameras
        )
        episodes.append(
            Episode(
                index=index,
                frames_expected=length,
                tasks=tuple(tasks),
                data=DataRef(rel=data_rel, chunk_index=chunk, file_index=index),
                videos=videos,
            )
        )
    episodes.sort(key=lambda e: e.index)
    return episodes, rejected


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


def legacy_v30(root: Path, info: dict[str, Any]) -> tuple[list[Episode], list[EpisodeError]]:
    info_path = root / "meta/info.json"
    cameras = cameras_from_info(info, info_path)
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path") or "")
    if not isinstance(data_tpl, str):
        raise DatasetError(info_path, f"invalid data_path {data_tpl!r}")
    format_template(data_tpl, info_path, FILE_FIELDS, chunk_index=0, file_index=0)
    for cam in cameras:
        format_template(video_tpl, info_path, V30_VIDEO_FIELDS, chunk_index=0, file_index=0, video_key=cam.key)

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
                            video_tpl, info_path, V30_VIDEO_FIELDS,
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
    return episodes, rejected
