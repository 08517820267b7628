"""LeRobot format v2.1: one parquet and one mp4 per camera per episode, metadata in JSON Lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipeline.dataset.info import cameras_from_info, format_template
from pipeline.dataset.model import DataRef, Dataset, Episode, VideoRef
from pipeline.errors import DatasetError, EpisodeError

EPISODES_REL = "meta/episodes.jsonl"
TASKS_REL = "meta/tasks.jsonl"
EPISODES_STATS_REL = "meta/episodes_stats.jsonl"
DATA_FIELDS = {"episode_chunk", "episode_index"}
VIDEO_FIELDS = {"episode_chunk", "episode_index", "video_key"}
EPISODE_INDEX_RE = re.compile(r'"episode_index"\s*:\s*(\d+)')


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


def read_tasks(root: Path) -> dict[int, str]:
    path = root / TASKS_REL
    if not path.is_file():
        return {}
    tasks: dict[int, str] = {}
    for lineno, obj in read_jsonl(path):
        if isinstance(obj, Exception) or not isinstance(obj, dict):
            raise DatasetError(path, f"line {lineno}: not a JSON object")
        idx, task = obj.get("task_index"), obj.get("task")
        if not isinstance(idx, int) or not isinstance(task, str):
            raise DatasetError(path, f"line {lineno}: expected task_index (int) and task (str), got {obj!r}")
        tasks[idx] = task
    return tasks


def open_v21(root: Path, info: dict[str, Any]) -> tuple[Dataset, list[EpisodeError]]:
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
    ds = Dataset(
        root=root,
        codebase_version="v2.1",
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        episodes=episodes,
        tasks=read_tasks(root),
    )
    return ds, rejected
