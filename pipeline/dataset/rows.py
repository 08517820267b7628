"""Building `EpisodeColumns` from metadata records read one at a time or a column at a time.

Every record has a key: where it was found (v2.1: its line number; v3.0: file number and row), so
that the outcome equals reading the records in file order: the first valid record of an episode
index wins, a later one is a duplicate (also a bad record whose index an earlier valid one took),
and the rejected records come out in the order they were found.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.dataset.model import MAX_REJECTED_KEPT, Rejected
from pipeline.dataset.table import CameraColumns, EpisodeColumns
from pipeline.errors import EpisodeError

FLUSH_ROWS = 1 << 16


def _np(buf: array, dtype: Any) -> np.ndarray:
    return np.frombuffer(buf, dtype=dtype).copy() if len(buf) else np.zeros(0, dtype=dtype)


class RowBuilder:
    """Accepted records as arrays (in chunks), rejected ones in a bounded `Rejected`."""

    def __init__(self, v30_cameras: list[str] | None = None) -> None:
        self.cameras = v30_cameras
        self.task_names: list[str] = []
        self._task_id: dict[str, int] = {}
        self.rejected = Rejected()
        self._chunks: list[dict[str, Any]] = []
        self._reset()

    def _reset(self) -> None:
        self._buf: dict[str, array] = {k: array("q") for k in ("key", "index", "length", "tasks_n")}
        self._buf["task_ids"] = array("i")
        self._extra: dict[str, list[Any]] = {}

    def _ids(self, names: Sequence[str]) -> list[int]:
        out = []
        for t in names:
            tid = self._task_id.get(t)
            if tid is None:
                tid = self._task_id[t] = len(self.task_names)
                self.task_names.append(t)
            out.append(tid)
        return out

    def add_row(self, key: int, index: int, length: int, tasks: Sequence[str], **v30: Any) -> None:
        b = self._buf
        b["key"].append(key)
        b["index"].append(index)
        b["length"].append(length)
        b["tasks_n"].append(len(tasks))
        b["task_ids"].extend(self._ids(tasks))
        for k, v in v30.items():
            if k == "cameras":
                for cam, vals in v.items():
                    self._extra.setdefault(cam, []).append(vals)
            else:
                self._extra.setdefault(k, []).append(v)
        if len(b["key"]) >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        b = self._buf
        if not len(b["key"]):
            return
        chunk: dict[str, Any] = {"key": _np(b["key"], np.int64), "index": _np(b["index"], np.int64),
                                 "length": _np(b["length"], np.int64), "tasks_n": _np(b["tasks_n"], np.int64),
                                 "task_ids": _np(b["task_ids"], np.int32)}
        if self.cameras is not None:
            for k in ("data_chunk", "data_file", "from_index"):
                chunk[k] = np.asarray(self._extra.get(k, []), dtype=np.int64)
            for cam in self.cameras:
                vals = self._extra.get(cam, [])
                chunk[cam] = (np.asarray([v[0] for v in vals], dtype=np.int64),
                              np.asarray([v[1] for v in vals], dtype=np.int64),
                              np.asarray([v[2] for v in vals], dtype=np.float64),
                              np.asarray([v[3] for v in vals], dtype=np.float64))
        self._chunks.append(chunk)
        self._reset()

    def add_columns(self, keys: np.ndarray, index: np.ndarray, length: np.ndarray, task_counts: np.ndarray,
                    task_names_flat: list[str], **v30: Any) -> None:
        self._flush()
        chunk: dict[str, Any] = {"key": keys, "index": index, "length": length, "tasks_n": task_counts,
                                 "task_ids": np.asarray(self._ids(task_names_flat), dtype=np.int32)}
        for k, v in v30.items():
            if k == "cameras":
                chunk.update(v)
            else:
                chunk[k] = v
        self._chunks.append(chunk)

    def reject(self, key: int, error: EpisodeError, index: int | None = None) -> None:
        """A refused record; with `index`, it becomes a duplicate if an earlier record of `index` is accepted."""
        self.rejected.add(key, error, index)

    def finish(self, where_of: Callable[[int], str]) -> tuple[EpisodeColumns, Rejected]:
        self._flush()
        chunks = self._chunks
        self._chunks = []

        def cat(name: str, dtype: Any) -> np.ndarray:
            parts = [c[name] for c in chunks]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

        key, index = cat("key", np.int64), cat("index", np.int64)
        counts = cat("tasks_n", np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        cols = EpisodeColumns(index=index, length=cat("length", np.int64), task_offsets=offsets,
                              task_ids=cat("task_ids", np.int32), task_names=self.task_names)
        if self.cameras is not None:
            cols.data_chunk, cols.data_file = cat("data_chunk", np.int64), cat("data_file", np.int64)
            cols.from_index = cat("from_index", np.int64)
            cols.cameras = {}
            for cam in self.cameras:
                parts = [c[cam] for c in chunks]
                cols.cameras[cam] = CameraColumns(*(
                    np.concatenate([p[j] for p in parts]).astype(dt, copy=False) if parts else np.zeros(0, dt)
                    for j, dt in enumerate((np.int64, np.int64, np.float64, np.float64))))
        if bool(np.all(index[1:] > index[:-1])):
            keep = None  # sorted, no duplicates (the usual case): nothing to reorder
        else:
            order = np.lexsort((key, index))  # by episode index, then where found
            sidx = index[order]
            dup = np.zeros(len(order), dtype=bool)
            dup[1:] = sidx[1:] == sidx[:-1]
            late = order[dup]
            self.rejected.total += len(late)
            for p in late[np.argsort(key[late], kind="stable")][:MAX_REJECTED_KEPT]:
                self.rejected.add(int(key[p]), EpisodeError(int(index[p]), where_of(int(key[p])),
                                                            "duplicate episode_index"), counted=True)
            keep = order[~dup]
        kept_index = index if keep is None else index[keep]
        kept_key = key if keep is None else key[keep]

        def taken(idx: int, at: int) -> bool:
            k = int(np.searchsorted(kept_index, idx))
            return k < len(kept_index) and int(kept_index[k]) == idx and int(kept_key[k]) < at

        self.rejected.settle(taken)
        return (cols if keep is None else cols.take(keep)), self.rejected
