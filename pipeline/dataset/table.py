"""Columnar episode metadata: numpy arrays for millions of episodes, `Episode` records on demand.

An `EpisodeTable` holds one row per episode, sorted by episode index: the index, the metadata length,
the tasks (ids into a dictionary of distinct task strings), and for v3.0 the data file, the global
row span and, per camera, the video file and the [from, to) timestamps. Paths are not stored: an
`Episode` record is materialised (paths filled from info.json's templates) only when a unit needs it,
so opening 8 M episodes costs tens of bytes per episode, not a Python object graph.

`Groups` are the files episodes share (v3.0), found without a Python dict over the corpus: when
every file holds a contiguous run of episodes (LeRobot's writers), the groups are the runs;
otherwise a stable sort by file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from pipeline.dataset.template import cached_template, inside_root


class PathTemplate:
    """A path template of info.json, checked once (fields, root escape) and then filled fast."""

    def __init__(self, template: str, path: Any, allowed: Collection[str], sample: dict[str, Any],
                 key: str | None = None) -> None:
        self.key = key or ("video_path" if "video_key" in allowed else "data_path")
        self.checked = cached_template(template, str(path), self.key, frozenset(allowed))
        self.template = template
        self.path = path
        self.fields = self.checked.fields
        self.fill(**sample)  # a bad template is one dataset-level error, before any episode

    def fill(self, **values: Any) -> str:
        return inside_root(self.checked.fill(**values), self.template, self.path, self.key)


@dataclass(slots=True)
class CameraColumns:
    """v3.0: per episode, the camera's video file (chunk, file) and its span [t0, t1) in seconds."""

    chunk: np.ndarray
    file: np.ndarray
    t0: np.ndarray
    t1: np.ndarray


@dataclass(slots=True)
class EpisodeColumns:
    """The columns of an `EpisodeTable` (all of length n, sorted by `index`)."""

    index: np.ndarray  # int64
    length: np.ndarray  # int64
    task_offsets: np.ndarray  # int64, n + 1: tasks of row i are task_ids[task_offsets[i]:task_offsets[i + 1]]
    task_ids: np.ndarray  # int32, into task_names
    task_names: list[str]
    data_chunk: np.ndarray | None = None  # v3.0
    data_file: np.ndarray | None = None
    from_index: np.ndarray | None = None  # v3.0: dataset_from_index (to = from + length)
    cameras: dict[str, CameraColumns] | None = None  # v3.0

    def __len__(self) -> int:
        return len(self.index)

    def take(self, order: np.ndarray) -> EpisodeColumns:
        """The rows in `order` (e.g. sorted by index)."""
        counts = np.diff(self.task_offsets)[order]
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        starts = self.task_offsets[:-1][order]
        # the task ids of row order[i] are task_ids[starts[i]:starts[i] + counts[i]], laid end to end
        ids = self.task_ids[np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], counts)]

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[order]

        return EpisodeColumns(
            index=self.index[order], length=self.length[order], task_offsets=offsets,
            task_ids=ids.astype(np.int32), task_names=self.task_names,
            data_chunk=pick(self.data_chunk), data_file=pick(self.data_file), from_index=pick(self.from_index),
            cameras=None if self.cameras is None else {
                k: CameraColumns(c.chunk[order], c.file[order], c.t0[order], c.t1[order])
                for k, c in self.cameras.items()},
        )


class Groups:
    """Positions of rows that share a key (e.g. the same video file), groups ordered by their first row.

    `positions(g)` are ascending; `of(pos)` is the group of a row.
    """

    @classmethod
    def singletons(cls, n: int) -> Groups:
        """n groups of one row each (every episode has its own file), without an array per row."""
        g = cls()
        g.n = n
        g._single = True
        return g

    def __init__(self, *keys: np.ndarray) -> None:
        self._single = False
        n = len(keys[0]) if keys else 0
        self.n = n
        if n == 0:
            self._runs: np.ndarray | None = np.zeros(1, dtype=np.int64)
            self._order = self._starts = self._rank = self._gid = None
            return
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for k in keys:
            change[1:] |= k[1:] != k[:-1]
        starts = np.flatnonzero(change)
        run_keys = np.stack([k[starts] for k in keys], axis=1)
        if len(np.unique(run_keys, axis=0)) == len(starts):  # every group is one contiguous run
            self._runs = np.append(starts, n).astype(np.int64)
            self._order = self._starts = self._rank = self._gid = None
            return
        self._runs = None
        order = np.lexsort(keys[::-1])  # stable: equal keys keep ascending positions
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for k in keys:
            sk = k[order]
            change[1:] |= sk[1:] != sk[:-1]
        gstarts = np.flatnonzero(change)
        self._order = order
        self._starts = np.append(gstarts, n).astype(np.int64)
        self._rank = np.argsort(order[gstarts], kind="stable")  # groups by first position
        gid = np.empty(n, dtype=np.int64)
        for g, (a, b) in enumerate(zip(self._starts[:-1], self._starts[1:], strict=True)):
            gid[order[a:b]] = g
        inverse = np.empty_like(self._rank)
        inverse[self._rank] = np.arange(len(self._rank))
        self._gid = inverse[gid]

    def __len__(self) -> int:
        if self._single:
            return self.n
        if self._runs is not None:
            return len(self._runs) - 1
        assert self._rank is not None
        return len(self._rank)

    def positions(self, g: int) -> np.ndarray:
        if self._single:
            return np.array([g], dtype=np.int64)
        if self._runs is not None:
            return np.arange(self._runs[g], self._runs[g + 1], dtype=np.int64)
        assert self._rank is not None and self._starts is not None and self._order is not None
        s = self._rank[g]
        return self._order[self._starts[s]:self._starts[s + 1]]

    def first(self, g: int) -> int:
        if self._single:
            return g
        return int(self.positions(g)[0]) if self._runs is None else int(self._runs[g])

    def of(self, pos: int) -> int:
        if self._single:
            return pos
        if self._runs is not None:
            return int(np.searchsorted(self._runs, pos, side="right")) - 1
        assert self._gid is not None
        return int(self._gid[pos])

    def __iter__(self) -> Iterator[np.ndarray]:
        for g in range(len(self)):
            yield self.positions(g)


class EpisodeTable(Sequence[Any]):
    """A read-only sequence of `Episode` records over `EpisodeColumns`, materialised on access."""

    def __init__(self, columns: EpisodeColumns, make: Callable[[EpisodeTable, int], Any]) -> None:
        self.columns = columns
        self._make = make

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def record_maker(self) -> Callable[[EpisodeTable, int], Any]:
        """How a record is made from the columns (its format's reader's), for a table that adds to it."""
        return self._make

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._make(self, k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"episode position {i} out of range for {n} episodes")
        return self._make(self, i)

    def __iter__(self) -> Iterator[Any]:
        for k in range(len(self)):
            yield self._make(self, k)

    @property
    def episode_index(self) -> np.ndarray:
        """The episode indices (sorted, int64)."""
        return self.columns.index

    @property
    def length(self) -> np.ndarray:
        return self.columns.length

    def position(self, episode: int) -> int | None:
        """The position of episode index `episode`, or None."""
        k = int(np.searchsorted(self.columns.index, episode))
        return k if k < len(self) and int(self.columns.index[k]) == episode else None

    def by_index(self, episode: int) -> Any:
        k = self.position(episode)
        if k is None:
            raise KeyError(episode)
        return self[k]

    def tasks(self, k: int) -> tuple[str, ...]:
        c = self.columns
        return tuple(c.task_names[t] for t in c.task_ids[c.task_offsets[k]:c.task_offsets[k + 1]])
