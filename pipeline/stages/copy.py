"""The data-copy stage of `prep reencode`: one unit = one episode data parquet (v3.0: with every episode
it holds), copied byte for byte into the output (atomically; skipped when the output already holds the
same bytes) and counted as `prep scan` counts it (rows per episode, bytes shared by rows).

Plain functions, no Dask. A missing or escaping file fails the unit's episodes; a write error (a full
disk) is returned with its errno text so the job can stop with one line.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.checks import Status
from pipeline.errors import EpisodeError
from pipeline.stages.result import StageResult, reason_of
from pipeline.storage import (
    HEADER_BLOCK,
    STREAM_BLOCK,
    Location,
    Output,
    Source,
    StorePath,
    as_file,
    as_root,
    output_file,
    output_size,
    same_bytes,
    write_output_bytes,
)


@dataclass(slots=True, frozen=True)
class KeepImages:
    """`reencode --keep-images`: cameras stored as images stay images, resized to `size` as a video camera's
    frames are (`resize`: the same geometry and filter graph), stored as PNG."""

    cameras: tuple[str, ...]
    size: tuple[int, int]
    resize: str


@dataclass(slots=True, frozen=True)
class DataUnit:
    src_root: Location  # the source dataset: its file `rel` is read through its store
    out_root: str
    rel: str
    episodes: tuple[int, ...]
    shared: bool  # v3.0: rows of several episodes, told apart by the episode_index column
    repair_fps: float | None = None  # `--repair timestamps`: rewrite timestamp = frame_index / fps
    stats_features: tuple[str, ...] = ()  # `--repair stats`: per-episode stats of these columns, to a sidecar
    drop_columns: tuple[str, ...] = ()  # cameras stored as images that the output holds as videos: columns left out
    keep_images: KeepImages | None = None  # cameras stored as images kept as images, resized


@dataclass(slots=True)
class DataCopied(StageResult):
    """One data parquet copied: status "ok" | "failed" (the source is missing or leaves the dataset; or, with
    `write_error`, the output cannot be written)."""

    rel: str
    episodes: tuple[int, ...]
    write_error: str | None = None  # the OSError of a failed write, e.g. "No space left on device (...)"
    bytes: int = 0
    rows: list[int | None] = field(default_factory=list)  # per episode; None: the parquet is unreadable
    total_rows: int = 0  # rows of the whole file (every episode in it)
    rows_error: str | None = None
    repaired: list[int] = field(default_factory=list)  # episodes whose timestamp column was rewritten
    # `--keep-images`: per episode and camera the resized pictures' image stats (as LeRobot computes them; also
    # in the sidecar `images_stats_sidecar`), and per camera the pictures written and their stored bytes
    image_stats: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    pictures: dict[str, tuple[int, int]] = field(default_factory=dict)


def copy_data(unit: DataUnit) -> DataCopied:
    out = DataCopied(unit.rel, unit.episodes)
    src = StorePath(unit.src_root, "") / unit.rel
    src.store.learn_folder(src.rel)  # an object store's: the stats of this and the next files from one listing
    try:
        size = src.stat("parquet file").size  # missing, not a file, or leaving the dataset (its store's rules)
    except EpisodeError as exc:
        out.fail(exc.message, exc.path)
        return out
    dst = output_file(unit.out_root, unit.rel)
    root = None if isinstance(dst, StorePath) else Path(unit.out_root)
    if isinstance(dst, StorePath):  # whether a rerun finds it: from a listing of its folder, not a HEAD a file
        dst.store.learn_folder(dst.rel, absent=True)
    try:
        if unit.repair_fps is not None or unit.drop_columns or unit.keep_images:
            out.repaired = rewrite_data(src, dst, unit.repair_fps, unit.drop_columns, root, unit.keep_images, out)
            out.bytes = output_size(dst)
        else:
            out.bytes = size
            if not (dst.is_file() and output_size(dst) == out.bytes and same_bytes(src, dst)):
                # atomic: a local temp renamed into place; an object PUT whole (or copied server-side)
                as_root(output_file(unit.out_root, "")).store.copy_in(src.store, src.rel, unit.rel)
    except atomic.WriteError as exc:  # the output cannot be written: named with its disk, not the source
        out.status, out.write_error = Status.FAILED, str(exc)
        return out
    except (pa.ArrowException, KeyError) as exc:
        out.fail(f"cannot {'repair timestamps' if unit.repair_fps is not None else 'rewrite'} ({exc})", str(src))
        return out
    except EpisodeError as exc:  # a picture that does not decode (--keep-images)
        out.fail(exc.message, exc.path)
        return out
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        out.status, out.write_error = Status.FAILED, f"cannot copy {src}: {exc.strerror or exc}{where}"
        return out
    try:
        if not unit.shared:
            with src.media(block_size=HEADER_BLOCK, what="parquet file") as source:  # the footer
                out.total_rows = pq.read_metadata(source).num_rows
            out.rows = [out.total_rows] * len(unit.episodes)
        else:
            with src.media(block_size=STREAM_BLOCK, what="parquet file") as source:
                counts = pc.value_counts(pq.read_table(source, columns=["episode_index"])["episode_index"]).to_pylist()
            by_ep = {int(c["values"]): int(c["counts"]) for c in counts}
            out.rows = [by_ep.get(e, 0) for e in unit.episodes]
            out.total_rows = sum(by_ep.values())
    except (pa.ArrowException, OSError, KeyError) as exc:
        out.rows, out.rows_error = [None] * len(unit.episodes), f"unreadable parquet ({exc})"
        return out
    except EpisodeError as exc:
        out.rows, out.rows_error = [None] * len(unit.episodes), f"unreadable parquet ({exc.message})"
        return out
    if unit.keep_images is not None and out.status != Status.FAILED:
        try:
            doc = {str(e): st for e, st in out.image_stats.items()}
            write_output_bytes(images_stats_sidecar(unit.out_root, unit.rel), json.dumps(doc).encode("utf-8"), root)
        except OSError as exc:
            out.status, out.write_error = Status.FAILED, f"{exc.strerror or exc}"
    if unit.stats_features:
        try:
            doc = {str(e): st for e, st in episode_stats(dst, unit.stats_features).items()}
            write_output_bytes(data_stats_sidecar(unit.out_root, unit.rel), json.dumps(doc).encode("utf-8"), root)
        except (pa.ArrowException, KeyError, ValueError) as exc:
            out.fail(f"cannot compute stats ({exc})", str(dst))
        except OSError as exc:
            out.status, out.write_error = Status.FAILED, f"{exc.strerror or exc}"
    return out


def data_stats_sidecar(out_root: str | Path, rel: str) -> Output:
    """Where `--repair stats` keeps the per-episode stats of one data parquet's columns."""
    return output_file(out_root, f"prep/stats/data/{rel}.json")


def episode_stats(path: Source, features: tuple[str, ...]) -> dict[int, dict[str, dict[str, list[Any]]]]:
    """Per episode, LeRobot 0.3.x's `compute_episode_stats` of each numeric column: min, max, mean, std
    (population) over the episode's rows, per dimension (a scalar column: shape [1]), and count [rows]."""
    with as_file(path).media(block_size=STREAM_BLOCK, what="parquet file") as source:
        names = [f for f in features if f in pq.read_schema(source).names]
        if not isinstance(source, str):
            source.seek(0)
        table = pq.read_table(source, columns=sorted({*names, "episode_index"}))
    episodes = table["episode_index"].to_numpy(zero_copy_only=False).astype(np.int64)
    arrays: dict[str, np.ndarray] = {}
    for name in names:
        col = table[name].combine_chunks()
        if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type):
            arrays[name] = np.asarray(col.to_pylist(), dtype=np.float64)
        else:
            arrays[name] = col.to_numpy(zero_copy_only=False).astype(np.float64)[:, None]
    out: dict[int, dict[str, dict[str, list[Any]]]] = {}
    for e in np.unique(episodes):
        rows = episodes == e
        out[int(e)] = {name: {"min": a[rows].min(axis=0).tolist(), "max": a[rows].max(axis=0).tolist(),
                              "mean": a[rows].mean(axis=0).tolist(), "std": a[rows].std(axis=0).tolist(),
                              "count": [int(rows.sum())]} for name, a in arrays.items()}
    return out


def without_columns(table: pa.Table, drop: tuple[str, ...]) -> pa.Table:
    """`table` without the columns `drop` (those present), and without them in its `huggingface` schema
    metadata (the features `datasets` decodes the file with: a feature it lists must be a column)."""
    table = table.drop_columns([c for c in drop if c in table.column_names])
    meta = dict(table.schema.metadata or {})
    raw = meta.get(b"huggingface")
    if raw is not None:
        try:
            doc = json.loads(raw.decode("utf-8"))
            feats = doc.get("info", {}).get("features")
            if isinstance(feats, dict):
                for c in drop:
                    feats.pop(c, None)
                meta[b"huggingface"] = json.dumps(doc).encode("utf-8")
        except (UnicodeDecodeError, ValueError, AttributeError):
            pass  # features no reader parses stay as they are
    return table.replace_schema_metadata(meta)


def rewrite_data(src: Source, dst: Output, fps: float | None, drop: tuple[str, ...], root: Path | None = None,
                 keep: KeepImages | None = None, result: DataCopied | None = None) -> list[int]:
    """Write `src` to `dst` without the columns `drop` (cameras the output stores as videos), with the pictures
    of `keep` resized (their stats into `result`) and, with `fps`, with its timestamps repaired
    (`repair_timestamps`); returns the episodes whose timestamps changed."""
    if fps is not None:
        return repair_timestamps(src, dst, fps, root, drop, keep, result)
    with as_file(src).media(block_size=STREAM_BLOCK, what="parquet file") as source:
        table = without_columns(pq.read_table(source), drop)
    if keep is not None:
        table = resized_pictures(table, keep, src, result)
    episodes = table["episode_index"].to_numpy(zero_copy_only=False) if "episode_index" in table.column_names else \
        np.zeros(table.num_rows, dtype=np.int64)
    _write_table(table, episodes, dst, root)
    return []


def _write_table(table: pa.Table, episodes: np.ndarray, dst: Output, root: Path | None) -> None:
    if isinstance(dst, StorePath):
        with dst.store.writer(dst.rel) as tmp:  # a local temp file, put whole when written
            write_by_episode(table, episodes, tmp)
    else:
        with atomic.atomic_path(dst, root) as tmp:
            write_by_episode(table, episodes, tmp)


def repair_timestamps(src: Source, dst: Output, fps: float, root: Path | None = None,
                      drop: tuple[str, ...] = (), keep: KeepImages | None = None,
                      result: DataCopied | None = None) -> list[int]:
    """Write `src` to `dst` with `timestamp = frame_index / fps` (in the column's own type), where the video
    frames are on the 1/fps grid but the parquet timestamps are not (wall-clock stamps, float drift): what
    LeRobot computes from the timestamps then finds each row's frame. Every other column is unchanged (but the
    columns `drop`, left out); the file is no longer byte-identical. Returns the episodes whose timestamps
    changed."""
    with as_file(src).media(block_size=STREAM_BLOCK, what="parquet file") as source:
        table = without_columns(pq.read_table(source), drop)
    if keep is not None:
        table = resized_pictures(table, keep, src, result)
    if "frame_index" not in table.column_names:
        raise KeyError("no frame_index column to derive timestamps from")
    frame_index = table["frame_index"].to_numpy(zero_copy_only=False).astype(np.float64)
    exact = frame_index / fps
    col = table.schema.field("timestamp") if "timestamp" in table.column_names else pa.field("timestamp",
                                                                                               pa.float32())
    new = pa.array(exact, type=pa.float64()).cast(col.type)
    if "timestamp" in table.column_names:
        old = table["timestamp"].to_numpy(zero_copy_only=False).astype(np.float64)
        changed = np.abs(old - new.to_numpy(zero_copy_only=False).astype(np.float64)) > 0
        table = table.set_column(table.column_names.index("timestamp"), col, new)
    else:
        changed = np.ones(len(exact), dtype=bool)
        table = table.append_column(col, new)
    episodes = table["episode_index"].to_numpy(zero_copy_only=False) if "episode_index" in table.column_names else \
        np.zeros(len(exact), dtype=np.int64)
    _write_table(table, episodes, dst, root)
    return sorted({int(e) for e in np.unique(episodes[changed])})


def resized_pictures(table: pa.Table, keep: KeepImages, src: Source, result: DataCopied | None) -> pa.Table:
    """`table` with the pictures of `keep.cameras` resized and stored as PNG (path None, as LeRobot embeds them);
    each episode's image stats of the new pictures (LeRobot's sampling) and each camera's pictures and bytes go to
    `result`. An undecodable or null picture fails the file, naming its episode and frame."""
    import av

    from pipeline.video.encode import PictureResizer
    from pipeline.video.imagestats import SpanImageStats
    from pipeline.video.pictures import picture_array, png_bytes

    episodes = table["episode_index"].to_numpy(zero_copy_only=False) if "episode_index" in table.column_names \
        else np.zeros(table.num_rows, dtype=np.int64)
    cuts = [0, *(np.flatnonzero(np.diff(episodes) != 0) + 1).tolist(), len(episodes)]
    runs = [(int(episodes[lo]), lo, hi - lo) for lo, hi in itertools.pairwise(cuts) if hi > lo]
    resize = PictureResizer(keep.size, keep.resize)
    for cam in keep.cameras:
        if cam not in table.column_names:
            raise EpisodeError(runs[0][0] if runs else None, src, f"no image column {cam!r} in the data file")
        stats = SpanImageStats([(lo, n) for _e, lo, n in runs])
        column = table[cam].combine_chunks().field("bytes").to_pylist()
        new: list[dict[str, Any]] = []
        stored = 0
        for ep, lo, n in runs:
            for i in range(lo, lo + n):
                data = column[i]
                if not data:
                    raise EpisodeError(ep, src, f"{cam}: the picture of frame {i - lo} is null (no bytes)")
                try:
                    frame = resize(av.VideoFrame.from_ndarray(picture_array(data), format="rgb24"))
                except ValueError as exc:
                    raise EpisodeError(ep, src, f"{cam}: frame {i - lo}: {exc}") from None
                stats.add(i, frame)
                png = png_bytes(frame.to_ndarray(format="rgb24"))
                stored += len(png)
                new.append({"bytes": png, "path": None})
        typ = table.schema.field(cam).type
        table = table.set_column(table.column_names.index(cam), table.schema.field(cam), pa.array(new, type=typ))
        if result is not None:
            for (ep, _lo, _n), st in zip(runs, stats.result(), strict=True):
                result.image_stats.setdefault(ep, {})[cam] = st
            result.pictures[cam] = (len(new), stored)
    return table


def images_stats_sidecar(out_root: str | Path, rel: str) -> Output:
    """`--keep-images`: the resized pictures' stats of each episode of a data file, per camera."""
    return output_file(out_root, f"prep/stats/images/{rel}.json")


def write_by_episode(table: pa.Table, episodes: np.ndarray, path: Path) -> None:
    """Write `table` with one row group per run of equal `episodes` (LeRobot's v3.0 writers since mid-2026 keep
    one row group per episode, so a reader can fetch an episode by byte range); a v2.1 file is one episode."""
    cuts = [0, *(np.flatnonzero(np.diff(episodes) != 0) + 1).tolist(), len(episodes)]
    with pq.ParquetWriter(path, table.schema) as writer:
        for lo, hi in itertools.pairwise(cuts):
            if hi > lo or len(episodes) == 0:
                writer.write_table(table.slice(lo, hi - lo), row_group_size=max(1, hi - lo))


def copy_failed(unit: DataUnit, exc: BaseException) -> DataCopied:
    reason = reason_of(exc)
    return DataCopied(unit.rel, unit.episodes, status=Status.FAILED, reason=reason, path=unit.rel)
