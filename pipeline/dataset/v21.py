"""LeRobot format v2.1: one parquet and one mp4 per camera per episode, metadata in JSON Lines.

`meta/episodes.jsonl` is read as a stream (a few MB at a time) into columnar arrays: a bad line is
recorded with its line number and the episode it names (when readable), the others load.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bounded import MAX_JSON_CHARS, loads_json
from pipeline.dataset.info import cameras_from_info
from pipeline.dataset.model import DataRef, Dataset, Episode, Rejected, VideoRef
from pipeline.dataset.rows import RowBuilder
from pipeline.dataset.table import EpisodeTable, PathTemplate
from pipeline.errors import DatasetError, EpisodeError

EPISODES_REL = "meta/episodes.jsonl"
TASKS_REL = "meta/tasks.jsonl"
EPISODES_STATS_REL = "meta/episodes_stats.jsonl"
DATA_FIELDS = {"episode_chunk", "episode_index"}
VIDEO_FIELDS = {"episode_chunk", "episode_index", "video_key"}
EPISODE_INDEX_RE = re.compile(r'"episode_index"\s*:\s*(\d+)')
READ_BLOCK = 1 << 22  # bytes read at a time from episodes.jsonl


class BadJsonLine(ValueError):
    """A JSON Lines line that does not parse: the error and the raw text (to name its episode)."""

    def __init__(self, error: json.JSONDecodeError, text: str) -> None:
        super().__init__(str(error))
        self.text = text

    def episode_hint(self) -> int | None:
        """The episode the broken line was about, when its `episode_index` is still readable."""
        match = EPISODE_INDEX_RE.search(self.text)
        return int(match.group(1)) if match else None


def iter_lines(path: Path, digest: Any = None, max_chars: int = MAX_JSON_CHARS) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, as `str.splitlines` numbers them, reading a block at a time.

    Raises DatasetError for a missing or unreadable file (not UTF-8) and for a line longer than
    `max_chars` (refused as it is read: a file with no newline is never held whole). `digest` (a
    hashlib object) is fed the file's bytes.
    """
    if not path.is_file():
        raise DatasetError(path, "missing file")
    decoder = codecs.getincrementaldecoder("utf-8")()
    carry = ""
    lineno = 0
    try:
        with open(path, "rb") as fh:
            while True:
                block = fh.read(READ_BLOCK)
                if digest is not None and block:
                    digest.update(block)
                text = carry + decoder.decode(block, final=not block)
                parts = text.splitlines(keepends=True)
                # The last piece may be a partial line (or a "\r" whose "\n" is in the next block): keep it.
                carry = parts.pop() if parts and block else ""
                for part in parts:
                    lineno += 1
                    if len(part) > max_chars:
                        raise DatasetError(path, f"line {lineno}: {len(part):,} characters, above the "
                                                 f"{max_chars:,} prep reads in a line")
                    yield lineno, part.splitlines()[0]
                if len(carry) > max_chars:
                    raise DatasetError(path, f"line {lineno + 1}: more than {max_chars:,} characters, above "
                                             f"the {max_chars:,} prep reads in a line")
                if not block:
                    return
    except UnicodeDecodeError:
        try:  # the message of a whole-file decode, as it names the byte offset in the file
            path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(path, f"cannot read: {exc}") from None
        raise
    except OSError as exc:
        raise DatasetError(path, f"cannot read: {exc}") from None


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed object) for each non-empty line; a bad line is kept as an exception.
    For small files (tasks); episodes are streamed by `open_v21`."""
    rows: list[tuple[int, Any]] = []
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            rows.append((lineno, loads_json(line)))
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


def _parse(ep_path: Path, rows: RowBuilder, digest: Any) -> None:
    """Every line of episodes.jsonl into `rows` (key = line number), by the rules of one record at a time."""
    for lineno, line in iter_lines(ep_path, digest):
        if not line.strip():
            continue
        where = f"{ep_path}:{lineno}"
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            rows.reject(lineno, EpisodeError(BadJsonLine(exc, line).episode_hint(), where,
                                             f"line is not JSON ({exc})"))
            continue
        if not isinstance(obj, dict):
            rows.reject(lineno, EpisodeError(None, where, f"expected a JSON object, found {obj!r}"))
            continue
        index = obj.get("episode_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 or index >= 2**63:
            rows.reject(lineno, EpisodeError(None, where, f"invalid episode_index {index!r}"))
            continue
        length = obj.get("length")
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length >= 2**63:
            rows.reject(lineno, EpisodeError(index, where, f"invalid length {length!r}: expected a positive integer"),
                        index=index)
            continue
        tasks = obj.get("tasks", [])
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            rows.reject(lineno, EpisodeError(index, where, f"invalid tasks {tasks!r}"), index=index)
            continue
        rows.add_row(lineno, index, length, tasks)


def open_v21(root: Path, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
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
    _parse(ep_path, rows, digest)
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
        root=root,
        codebase_version="v2.1",
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        episodes=EpisodeTable(cols, make),
        tasks=read_tasks(root) if tasks else {},
        file_keys=keys,
        rejected_count=rejected.total,
        metadata_digest=digest.hexdigest(),
    )
    return ds, rejected
