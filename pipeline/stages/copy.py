"""The data-copy stage of `prep reencode`: one unit = one episode data parquet (v3.0: with every episode
it holds), copied byte for byte into the output (atomically; skipped when the output already holds the
same bytes) and counted as `prep scan` counts it (rows per episode, bytes shared by rows).

Plain functions, no Dask. A missing or escaping file fails the unit's episodes; a write error (a full
disk) is returned with its errno text so the job can stop with one line.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.dataset.model import require_file, resolve_inside
from pipeline.errors import EpisodeError


@dataclass(slots=True, frozen=True)
class DataUnit:
    src_root: str
    out_root: str
    rel: str
    episodes: tuple[int, ...]
    shared: bool  # v3.0: rows of several episodes, told apart by the episode_index column


@dataclass(slots=True)
class DataCopied:
    rel: str
    episodes: tuple[int, ...]
    status: str = "ok"  # "ok" | "failed" (the source is missing or leaves the dataset)
    reason: str | None = None
    path: str | None = None
    write_error: str | None = None  # the OSError of a failed write, e.g. "No space left on device (...)"
    bytes: int = 0
    rows: list[int | None] = field(default_factory=list)  # per episode; None: the parquet is unreadable
    total_rows: int = 0  # rows of the whole file (every episode in it)
    rows_error: str | None = None


def copy_data(unit: DataUnit) -> DataCopied:
    out = DataCopied(unit.rel, unit.episodes)
    first = unit.episodes[0] if unit.episodes else None
    try:
        src = resolve_inside(Path(unit.src_root), unit.rel, episode=first)
        require_file(src, "parquet file", episode=first)
    except EpisodeError as exc:
        out.status, out.reason, out.path = "failed", exc.message, exc.path
        return out
    dst = Path(unit.out_root) / unit.rel
    try:
        out.bytes = src.stat().st_size
        if not (dst.is_file() and dst.stat().st_size == out.bytes and filecmp.cmp(src, dst, shallow=False)):
            with atomic.atomic_path(dst) as tmp:
                shutil.copyfile(src, tmp)
    except atomic.WriteError as exc:  # the output cannot be written: named with its disk, not the source
        out.status, out.write_error = "failed", str(exc)
        return out
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        out.status, out.write_error = "failed", f"cannot copy {src}: {exc.strerror or exc}{where}"
        return out
    try:
        if not unit.shared:
            out.total_rows = pq.read_metadata(src).num_rows
            out.rows = [out.total_rows] * len(unit.episodes)
        else:
            counts = pc.value_counts(pq.read_table(src, columns=["episode_index"])["episode_index"]).to_pylist()
            by_ep = {int(c["values"]): int(c["counts"]) for c in counts}
            out.rows = [by_ep.get(e, 0) for e in unit.episodes]
            out.total_rows = sum(by_ep.values())
    except (pa.ArrowException, OSError, KeyError) as exc:
        out.rows, out.rows_error = [None] * len(unit.episodes), f"unreadable parquet ({exc})"
    return out


def copy_failed(unit: DataUnit, exc: BaseException) -> DataCopied:
    reason = exc.message if isinstance(exc, EpisodeError) else f"{type(exc).__name__}: {exc}"
    return DataCopied(unit.rel, unit.episodes, "failed", reason, unit.rel)
