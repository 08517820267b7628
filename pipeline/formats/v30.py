"""LeRobot format v3.0 (lerobot 0.4.x, 0.6.x): many episodes per parquet and per mp4, episode metadata in parquet.

- constants: the metadata files, the path templates LeRobot writes and the fields they may use;
- the reader, streaming (a file, or a batch of rows, at a time), in two modes. Lenient (`open_v30`,
  `read_tasks`): `meta/episodes/chunk-*/file-*.parquet` column by column (its `stats/*` columns are never loaded)
  into the columnar model, checked with array operations; a row that fails a check is looked at on its own and
  rejected with a one-line reason (file, row, field, value). Strict (`iter_v30_episodes`, `iter_v30_tasks`;
  convert and edit): one row at a time, listed 0, 1, 2, ... as LeRobot indexes them, the first bad one a
  `DatasetError`;
- the writer: `meta/tasks.parquet`, `meta/episodes/*.parquet` rows (`V30EpisodesWriter`, in the column order of
  LeRobot 0.4's writer), info.json (from a v2.1 dataset's: `info_to_v30`), and a re-encode's episode rows;
- the packing rule: LeRobot's chunk/file numbering, a new file once the next episode would reach the size limit
  (`plan_v21_to_v30`), and the cut checks of a shared file (`plan_keyframe_checks`);
- the checks of its metadata files (`check_files`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.dataset.datafiles import Stale, locator, relocate_columns
from pipeline.dataset.info import cameras_from_info, format_template, image_cameras_from_info
from pipeline.dataset.model import DataRef, Dataset, Episode, Layout, Rejected, VideoRef
from pipeline.dataset.rows import RowBuilder
from pipeline.dataset.table import CameraColumns, EpisodeTable, PathTemplate
from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats.base import (
    STAT_NAMES,
    DataStats,
    EpisodeVideos,
    Format,
    as_int,
    in_order,
    length_of,
    ordered_info,
    rename_info_key,
    tasks_of,
)
from pipeline.formats.plan import (
    MB,
    DataConcatUnit,
    EpisodeInput,
    KeyframeCheckUnit,
    Placement,
    PlanItem,
    V21Episode,
    V30Episode,
    V30Video,
    VideoConcatUnit,
    VideoPlace,
)
from pipeline.formats.problems import check_columns, column_kind
from pipeline.rates import fps_fraction, frames_to_seconds
from pipeline.storage import FileProblem, Location, Root, StorePath, as_root

if TYPE_CHECKING:
    from pipeline.formats.problems import Problems

VERSION = "v3.0"
EPISODES_DIR = "meta/episodes"
EPISODE_FILES = "chunk-*/file-*.parquet"  # the episode metadata files (under EPISODES_DIR)
LEROBOT_EPISODE_FILES = "*/*.parquet"  # the ones LeRobot reads (`load_nested_dataset`): the strict reader's
TASKS_REL = "meta/tasks.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
FILE_FIELDS = frozenset({"chunk_index", "file_index"})
VIDEO_FIELDS = frozenset({"chunk_index", "file_index", "video_key"})
LAYOUT = Layout(FILE_FIELDS, VIDEO_FIELDS, shares_files=True)
REWRITTEN = ("meta/info.json", "meta/stats.json")  # by a re-encode, with every episode metadata parquet
ROW_BITS = 32  # a row's place: file number << ROW_BITS | row number
BATCH_ROWS = 1024  # rows per batch of the strict readers
OPEN_BATCH_ROWS = 1 << 16  # rows per batch of the columnar reader: its memory is the model's columns, not a file

# LeRobot's defaults (lerobot/datasets/utils.py)
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 200


# ---- reading: the files, a file or a batch at a time -----------------------------------------------------


def episode_meta_files(root: Root, pattern: str = EPISODE_FILES) -> list[StorePath]:
    """The episode metadata files in the order LeRobot reads them (sorted paths; one listing of the folder)."""
    return (as_root(root) / EPISODES_DIR).glob(pattern)


def without_stats(names: list[str]) -> list[str]:
    """The columns of a v3.0 episode metadata parquet other than its per-episode `stats/...` ones (most of a
    row's values; a pass that only plans or checks reads the rest)."""
    return [n for n in names if not n.startswith("stats/")]


def _episode_tables(files: list[StorePath], *, stats: bool,
                    batch_rows: int | None) -> Iterator[tuple[int, StorePath, pa.Table | pa.RecordBatch]]:
    """(file number, file, rows) of each episode metadata file: the whole file (`batch_rows` None) or a batch of
    rows at a time; without the per-episode `stats/...` columns unless `stats`. A file that cannot be read is a
    `DatasetError` naming it."""
    for file_no, path in enumerate(files):
        try:
            # not pq.read_table: that imports pyarrow.dataset and pandas (~0.5 s)
            with path.media(what="episode metadata parquet") as source, pq.ParquetFile(source) as pf:
                columns = None if stats else without_stats(pf.schema_arrow.names)
                if batch_rows is None:
                    yield file_no, path, pf.read(columns=columns)
                    continue
                for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
                    yield file_no, path, batch
        except FileProblem as exc:
            raise DatasetError(exc.path, exc.message) from None
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(path, f"cannot read episode metadata parquet: {exc}") from None


def iter_task_rows(root: Root, *, strict: bool) -> Iterator[tuple[int, str]]:
    """(task_index, task) per row of meta/tasks.parquet (the task is the pandas index, or a `task` column).

    Strict (convert, edit): a batch at a time, tasks listed 0, 1, 2, ... (LeRobot reads them by position); a
    missing file is a `DatasetError`. Lenient (the model): a missing file has no tasks, both columns are read
    whole before their rows are checked, any integer task_index is taken.
    """
    path = as_root(root) / TASKS_REL
    try:
        if not path.is_file():
            if strict:
                raise DatasetError(path, "missing file")
            return
    except FileProblem as exc:
        raise DatasetError(exc.path, exc.message) from None
    try:
        with path.media(what="tasks parquet") as source, pq.ParquetFile(source) as pf:
            names = pf.schema_arrow.names
            task_col = "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
            if "task_index" not in names or task_col is None:
                raise DatasetError(path, f"expected columns task_index and task, found {names}")
            columns = ["task_index", task_col]
            batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=columns) if strict else [pf.read(columns=columns)]
            row = 0
            for batch in batches:
                for idx, task in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                    if not strict:
                        if isinstance(idx, bool) or not isinstance(idx, int):  # null, a string: validate names all
                            raise DatasetError(path, f"row {row}: task_index: {idx!r} (expected an integer)")
                        yield idx, str(task)
                    elif idx != row or not isinstance(task, str):
                        raise DatasetError(path, f"row {row}: task_index {idx!r} task {task!r}: expected "
                                                 f"task_index {row} (LeRobot reads tasks by position)")
                    else:
                        yield idx, task
                    row += 1
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(path, f"cannot read tasks parquet: {exc}") from None


def read_tasks(root: Root) -> dict[int, str]:
    """task_index -> task (lenient: `iter_task_rows`)."""
    return dict(iter_task_rows(root, strict=False))


def iter_v30_tasks(root: Root) -> Iterator[tuple[int, str]]:
    """(task_index, task) per row of meta/tasks.parquet, checked to be 0, 1, 2, ... (strict)."""
    return iter_task_rows(root, strict=True)


# ---- the lenient reader: one row at a time (the reference rules, and the reason a row is rejected) -------


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


def check_row(row: dict[str, Any], cameras: list[str]) -> dict[str, Any]:
    """The fields of one episode row, or ValueError naming the first bad field and its value."""
    length = _int(row, "length")
    if length <= 0:
        raise ValueError(f"length = {length}: expected a positive integer")
    tasks = row.get("tasks") or []
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"tasks = {tasks!r}: expected a list of strings")
    out: dict[str, Any] = {"length": length, "tasks": tasks}
    out["data_chunk"], out["data_file"] = _int(row, "data/chunk_index"), _int(row, "data/file_index")
    from_index, to_index = _int(row, "dataset_from_index"), _int(row, "dataset_to_index")
    if to_index - from_index != length:
        raise ValueError(
            f"dataset_from_index..dataset_to_index = {from_index}..{to_index} "
            f"holds {to_index - from_index} rows but length = {length}"
        )
    out["from_index"] = from_index
    for cam in cameras:
        prefix = f"videos/{cam}/"
        v_chunk, v_file = _int(row, prefix + "chunk_index"), _int(row, prefix + "file_index")
        t0, t1 = _float(row, prefix + "from_timestamp"), _float(row, prefix + "to_timestamp")
        if t0 < 0 or t1 <= t0:
            raise ValueError(f"{prefix}from_timestamp..to_timestamp = {t0}..{t1}: not a forward span")
        out[cam] = (v_chunk, v_file, t0, t1)
    return out


# ---- the lenient reader: whole columns -------------------------------------------------------------------


_SMALL_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())


def _ints(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, rows where the value is an integer) of a column; no rows when absent or not ints."""
    n = table.num_rows
    if name not in table.column_names or table.schema.field(name).type not in _SMALL_INTS:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    arr = table[name].combine_chunks()
    ok = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), ok


def _floats(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    n = table.num_rows
    typ = table.schema.field(name).type if name in table.column_names else None
    if typ is None or not (typ in _SMALL_INTS or typ in (pa.float32(), pa.float64())):
        return np.zeros(n, dtype=np.float64), np.zeros(n, dtype=bool)
    arr = table[name].combine_chunks()
    ok = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    return values, ok & np.isfinite(values)


def _tasks(table: pa.Table) -> tuple[pa.Array | None, np.ndarray]:
    """The tasks column as a list<string> array (None: absent, every row has no tasks) and the rows whose
    tasks are fine as they are (null or a list of non-null strings)."""
    n = table.num_rows
    if "tasks" not in table.column_names:
        return None, np.ones(n, dtype=bool)
    typ = table.schema.field("tasks").type
    arr = table["tasks"].combine_chunks()
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)):
        return None, np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    value_type = typ.value_type
    lengths = np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        return None, lengths == 0  # null or empty lists only (e.g. list<null> of empty lists)
    values = arr.flatten()
    if values.null_count:
        flags = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=np.int64)
        ends = np.cumsum(lengths)
        sums = np.concatenate([[0], np.cumsum(flags)])
        bad = sums[ends] - sums[ends - lengths] > 0
        return arr, ~bad
    return arr, np.ones(n, dtype=bool)


def _read_table(table: pa.Table, file_no: int, first_row: int, cameras: list[str], rows: RowBuilder,
                where_of: Any) -> None:
    """Rows of one episode metadata file (from its row `first_row` on) into `rows`: the good ones column by
    column, the others one at a time, rejected with their reason."""
    n = table.num_rows
    if n == 0:
        return
    keys = (np.int64(file_no) << ROW_BITS) + first_row + np.arange(n, dtype=np.int64)
    index, ok = _ints(table, "episode_index")
    ok &= index >= 0
    length, good = _ints(table, "length")
    ok &= good & (length > 0)
    tasks, good = _tasks(table)
    ok &= good
    cols: dict[str, np.ndarray] = {}
    for name, key in (("data_chunk", "data/chunk_index"), ("data_file", "data/file_index"),
                      ("from_index", "dataset_from_index"), ("to_index", "dataset_to_index")):
        cols[name], good = _ints(table, key)
        ok &= good
    ok &= cols["to_index"] - cols["from_index"] == length
    cams: dict[str, tuple[np.ndarray, ...]] = {}
    for cam in cameras:
        p = f"videos/{cam}/"
        (chunk, g1), (file, g2) = _ints(table, p + "chunk_index"), _ints(table, p + "file_index")
        (t0, g3), (t1, g4) = _floats(table, p + "from_timestamp"), _floats(table, p + "to_timestamp")
        ok &= g1 & g2 & g3 & g4 & (t0 >= 0) & (t1 > t0)
        cams[cam] = (chunk, file, t0, t1)
    fast = np.flatnonzero(ok)
    if len(fast):
        if tasks is None:
            names_list, counts = [], np.zeros(len(fast), dtype=np.int64)
        else:
            picked = tasks.take(pa.array(fast))
            counts = np.asarray(pc.list_value_length(picked).fill_null(0).to_numpy(zero_copy_only=False),
                                dtype=np.int64)
            names_list = picked.flatten().to_pylist()
        rows.add_columns(keys[fast], index[fast], length[fast], counts, names_list,
                         data_chunk=cols["data_chunk"][fast], data_file=cols["data_file"][fast],
                         from_index=cols["from_index"][fast],
                         cameras={c: tuple(a[fast] for a in v) for c, v in cams.items()})
    for i in np.flatnonzero(~ok):  # the rest, one row at a time with the reference rules
        row = table.slice(int(i), 1).to_pylist()[0]
        rk = int(keys[i])
        where = where_of(rk)
        value = row.get("episode_index")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            rows.reject(rk, EpisodeError(None, where, f"invalid episode_index {value!r}"))
            continue
        try:
            f = check_row(row, cameras)
        except ValueError as exc:
            rows.reject(rk, EpisodeError(value, where, str(exc)), index=value)
            continue
        ints = [value, f["length"], f["data_chunk"], f["data_file"], f["from_index"],
                *(v for c in cameras for v in f[c][:2])]
        if any(not -(2**63) <= v < 2**63 for v in ints):
            rows.reject(rk, EpisodeError(value, where, "an integer field is out of the 64-bit range"), index=value)
            continue
        rows.add_row(rk, value, f["length"], f["tasks"], data_chunk=f["data_chunk"], data_file=f["data_file"],
                     from_index=f["from_index"], cameras={c: f[c] for c in cameras})


def open_v30(where: Root, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
    root = as_root(where)
    info_path = root / "meta/info.json"
    cameras = cameras_from_info(info, info_path)
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path") or "")
    if not isinstance(data_tpl, str):
        raise DatasetError(info_path, f"invalid data_path {data_tpl!r}")
    data = PathTemplate(data_tpl, info_path, FILE_FIELDS, {"chunk_index": 0, "file_index": 0})
    videos = {cam.key: PathTemplate(video_tpl, info_path, VIDEO_FIELDS,
                                    {"chunk_index": 0, "file_index": 0, "video_key": cam.key}) for cam in cameras}
    files = episode_meta_files(root)
    if not files:
        raise DatasetError(root / EPISODES_DIR, "missing: no chunk-*/file-*.parquet episode metadata")

    def where_of(key: int) -> str:
        return f"{files[key >> ROW_BITS]} row {key & ((1 << ROW_BITS) - 1)}"

    digest = hashlib.blake2b(digest_size=16)
    rows = RowBuilder(v30_cameras=[c.key for c in cameras])
    first_row: dict[int, int] = {}
    for file_no, _path, batch in _episode_tables(files, stats=False, batch_rows=OPEN_BATCH_ROWS):
        start = first_row.get(file_no, 0)  # a batch at a time: a file of millions of rows is never held whole
        _read_table(pa.Table.from_batches([batch]), file_no, start, [c.key for c in cameras], rows, where_of)
        first_row[file_no] = start + batch.num_rows
    for path in files:
        with path.open(what="episode metadata parquet") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
    cols, rejected = rows.finish(where_of)
    cams: dict[str, CameraColumns] = cols.cameras or {}
    stale: list[Stale] = []
    stale_total = 0
    if cols.data_chunk is not None and cols.data_file is not None and cols.from_index is not None:
        # rows are where LeRobot finds them (by global index across all data files), not where a stale
        # data/file_index says (pipeline.dataset.datafiles)
        stale, stale_total = relocate_columns(root, lambda c, f: data.fill(chunk_index=c, file_index=f),
                                              cols.data_chunk, cols.data_file, cols.index, cols.from_index,
                                              cols.length)

    def make(table: EpisodeTable, k: int) -> Episode:
        c = table.columns
        assert c.data_chunk is not None and c.data_file is not None and c.from_index is not None
        d_chunk, d_file, start = int(c.data_chunk[k]), int(c.data_file[k]), int(c.from_index[k])
        length = int(c.length[k])
        refs = []
        for key, tpl in videos.items():
            col = cams[key]
            v_chunk, v_file = int(col.chunk[k]), int(col.file[k])
            refs.append(VideoRef(camera=key, rel=tpl.fill(chunk_index=v_chunk, file_index=v_file, video_key=key),
                                 from_timestamp=float(col.t0[k]), to_timestamp=float(col.t1[k]),
                                 chunk_index=v_chunk, file_index=v_file))
        return Episode(
            index=int(c.index[k]),
            frames_expected=length,
            tasks=table.tasks(k),
            data=DataRef(rel=data.fill(chunk_index=d_chunk, file_index=d_file), from_index=start,
                         to_index=start + length, chunk_index=d_chunk, file_index=d_file),
            videos=tuple(refs),
        )

    def keys(kind: str) -> list[np.ndarray]:
        if kind == "data":
            assert cols.data_chunk is not None and cols.data_file is not None
            return [cols.data_chunk, cols.data_file]
        return [cams[kind].chunk, cams[kind].file]

    ds = Dataset(
        location=root.location,
        codebase_version="v3.0",
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        image_cameras=image_cameras_from_info(info, info_path),
        episodes=EpisodeTable(cols, make),
        layout=LAYOUT,
        tasks=read_tasks(root) if tasks else {},
        file_keys=keys,
        rejected_count=rejected.total,
        metadata_digest=digest.hexdigest(),
        stale_data_files=stale,
        stale_data_files_total=stale_total,
        warnings=[s.line() for s in stale[:20]],
        warnings_total=stale_total,
    )
    return ds, rejected


# ---- the strict reader: one row at a time, in order ------------------------------------------------------


def iter_v30_rows(where: Root, *, stats: bool = True) -> Iterator[tuple[StorePath, int, dict[str, Any]]]:
    """(file, row number, row with every column) of the episode metadata, a batch at a time; `stats` False
    leaves out the per-episode `stats/...` columns (most of a row's values: a pass that only plans reads
    the rest, not them)."""
    root = as_root(where)
    files = episode_meta_files(root, LEROBOT_EPISODE_FILES)
    if not files:
        raise DatasetError(root / EPISODES_DIR, "missing: no chunk-*/file-*.parquet episode metadata")
    row, at = 0, None
    for _file_no, path, batch in _episode_tables(files, stats=stats, batch_rows=BATCH_ROWS):
        if path != at:
            row, at = 0, path
        try:
            records = batch.to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(path, f"cannot read episode metadata parquet: {exc}") from None
        for rec in records:
            yield path, row, rec
            row += 1


def parse_v30_row(info_path: Path | StorePath, path: Path | StorePath,
                  rowno: int, row: dict[str, Any], info: dict[str, Any],
                  cameras: tuple[str, ...], expected: int) -> V30Episode:
    """A checked `V30Episode` from one row of meta/episodes/*.parquet (`expected`: its episode_index)."""
    where = f"row {rowno}"
    idx = in_order(path, where, row.get("episode_index"), expected)
    length = length_of(path, where, row.get("length"))
    tasks = tasks_of(path, where, row.get("tasks"))

    def need_int(key: str) -> int:
        v = as_int(row.get(key))
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
    data_rel = format_template(info["data_path"], info_path, FILE_FIELDS,
                               chunk_index=need_int("data/chunk_index"), file_index=need_int("data/file_index"))
    videos = []
    for cam in cameras:
        p = f"videos/{cam}/"
        rel = format_template(str(info.get("video_path")), info_path, VIDEO_FIELDS,
                              chunk_index=need_int(p + "chunk_index"), file_index=need_int(p + "file_index"),
                              video_key=cam)
        t0, t1 = need_float(p + "from_timestamp"), need_float(p + "to_timestamp")
        if t1 <= t0:
            raise DatasetError(path, f"{where} (episode {idx}): {p}from_timestamp..to_timestamp = {t0}..{t1} "
                                     "is not a forward span")
        videos.append(V30Video(cam, rel, t0, t1))
    return V30Episode(idx, length, tasks, data_rel, start, tuple(videos))


def iter_v30_episodes(where: Root, info: dict[str, Any], cameras: tuple[str, ...], *, stats: bool = True) -> Iterator[
        tuple[V30Episode, dict[str, Any]]]:
    """Each v3.0 episode and its metadata row (with its stats columns unless `stats` is False), checked to be
    0, 1, 2, ..."""
    root = as_root(where)
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


def stats_of_row(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The `stats/<feature>/<stat>` columns of a v3.0 episode row, unflattened (feature names keep their dots)."""
    stats: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        if not key.startswith("stats/") or value is None:
            continue
        feature, _, stat = key[len("stats/"):].rpartition("/")
        stats.setdefault(feature, {})[stat] = value
    return stats


# ---- writing ---------------------------------------------------------------------------------------------


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


def _fps_value(fps: Any) -> Any:
    """LeRobot's converter stores `int(fps)`; an integral rate becomes an int, any other rate is kept."""
    return int(fps) if float(fps).is_integer() else fps


def info_to_v30(info: dict[str, Any], limits: Limits, *, episodes: int, frames: int, tasks: int) -> dict[str, Any]:
    src = json.loads(json.dumps(info))
    fps = _fps_value(src["fps"])
    features = src["features"]
    for ft in features.values():
        if isinstance(ft, dict) and ft.get("dtype") == "video":
            rename_info_key(ft, "video.is_depth_map", "is_depth_map")
    first = {
        "codebase_version": VERSION,
        "robot_type": src.get("robot_type"),
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": limits.chunks_size,
        "data_files_size_in_mb": limits.data_files_size_in_mb,
        "video_files_size_in_mb": limits.video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if src.get("video_path") is not None else None,
        "features": features,
    }
    return ordered_info(first, src, {"total_chunks", "total_videos"})


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
        return self.out_root / EPISODES_PATH.format(chunk_index=self.chunk, file_index=self.file)

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


def _shaped(value: list[Any], typ: pa.DataType) -> Any:
    """`value` (nested (3,1,1) lists or a flat list) reshaped to the nesting depth of `typ`."""
    depth = 0
    t = typ
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        depth += 1
        t = t.value_type
    arr = np.asarray(value)
    if depth == 0:
        return arr.ravel()[0].item()
    if depth == 1:
        return arr.ravel().tolist()
    return arr.tolist()


def _with_new_video_columns(table: pa.Table, cam: str, index: list[Any], by_ep: dict[int, Any]) -> pa.Table:
    """A camera the source stored as images, now one video per data file: its `videos/<cam>/*` columns, as
    LeRobot writes them (chunk and file index of the data file the pictures came from, then the span)."""
    for name in ("chunk_index", "file_index"):
        table = table.append_column(pa.field(f"videos/{cam}/{name}", pa.int64()),
                                    table[f"data/{name}"].cast(pa.int64()))
    for attr in ("from_timestamp", "to_timestamp"):
        values = [getattr(by_ep[e], attr) if e in by_ep else None for e in index]
        table = table.append_column(pa.field(f"videos/{cam}/{attr}", pa.float64()), pa.array(values, pa.float64()))
    return table


def _write_v30_episodes(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str]) -> None:
    """Each meta/episodes parquet (one file at a time): new spans and stats of the re-encoded cameras."""
    for path in episode_meta_files(ds.root):
        with path.media(what="episode metadata parquet") as source:
            table = pq.read_table(source)
        index = table["episode_index"].to_pylist()
        for cam in cameras:
            by_ep = {e: ev for e in index if isinstance(e, int) and (ev := videos.get(e, cam)) is not None}
            if f"videos/{cam}/from_timestamp" not in table.column_names and \
                    any(ev.to_timestamp is not None for ev in by_ep.values()):  # now videos (not kept pictures)
                table = _with_new_video_columns(table, cam, index, by_ep)
            for col, attr in ((f"videos/{cam}/from_timestamp", "from_timestamp"),
                              (f"videos/{cam}/to_timestamp", "to_timestamp")):
                if col in table.column_names:
                    old = table[col].to_pylist()
                    new = [getattr(by_ep[e], attr) if e in by_ep else o for e, o in zip(index, old, strict=True)]
                    table = table.set_column(table.column_names.index(col), table.schema.field(col),
                                             pa.array(new, type=table.schema.field(col).type))
            stale = [c for c in table.column_names
                     if c.startswith(f"stats/{cam}/") and c.rsplit("/", 1)[1] not in STAT_NAMES]
            table = table.drop_columns(stale)  # quantiles cannot be recomputed from sums: dropped, not kept stale
            for name in STAT_NAMES:
                col = f"stats/{cam}/{name}"
                if col not in table.column_names:
                    continue
                typ = table.schema.field(col).type
                old = table[col].to_pylist()
                new = [_shaped(by_ep[e].stats[name], typ) if e in by_ep else o for e, o in zip(index, old, strict=True)]
                table = table.set_column(table.column_names.index(col), table.schema.field(col),
                                         pa.array(new, type=typ))
        dst = out / path.rel
        with atomic.atomic_path(dst, out) as tmp:
            pq.write_table(table, tmp)


# ---- the packing rule: LeRobot's chunk/file numbering and size limits ------------------------------------


@dataclass(slots=True, frozen=True)
class Limits:
    """Output layout of a v3.0 dataset: files per chunk and the size at which a new file starts."""

    chunks_size: int = DEFAULT_CHUNKS_SIZE
    data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_IN_MB
    video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_SIZE_IN_MB

    def __post_init__(self) -> None:
        if self.chunks_size <= 0:
            raise ValueError(f"chunks_size must be positive, got {self.chunks_size}")
        if self.data_files_size_in_mb <= 0 or self.video_files_size_in_mb <= 0:
            raise ValueError("file size limits must be positive")


def next_chunk_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """LeRobot's `update_chunk_file_indices`."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class _Packer:
    """One output stream (the data files, or one camera's video files) filled with LeRobot's rule."""

    def __init__(self, limit_mb: float, chunks_size: int) -> None:
        self.limit_mb, self.chunks_size = limit_mb, chunks_size
        self.chunk = self.file = 0
        self.size_mb = 0.0
        self.frames = 0
        self.inputs: list[EpisodeInput] = []

    def add(self, item: EpisodeInput, size_mb: float) -> tuple[tuple[int, int, int], list[EpisodeInput] | None]:
        """Place an episode: ((chunk, file, frames before it in the file), the inputs of the file it closed)."""
        closed = None
        if self.inputs and self.size_mb + size_mb >= self.limit_mb:
            closed = self.inputs
            self.chunk, self.file = next_chunk_file(self.chunk, self.file, self.chunks_size)
            self.size_mb, self.frames, self.inputs = 0.0, 0, []
        where = (self.chunk, self.file, self.frames)
        self.inputs.append(item)
        self.size_mb += size_mb
        self.frames += item.frames
        return where, closed


def plan_v21_to_v30(
    episodes: Iterable[V21Episode],
    cameras: tuple[str, ...],
    fps: float,
    src: Root,
    out_root: str,
    limits: Limits = Limits(),
) -> Iterator[PlanItem]:
    """Stream the plan: every episode's `Placement` (in episode order) and every output file's unit as soon
    as it is closed (before the placement of the episode that opened the next file), then the last files."""
    src_root = as_root(src).location
    data = _Packer(limits.data_files_size_in_mb, limits.chunks_size)
    video = {cam: _Packer(limits.video_files_size_in_mb, limits.chunks_size) for cam in cameras}
    frames_total = 0
    pending: list[PlanItem] = []
    for ep in episodes:
        (d_chunk, d_file, _), closed = data.add(EpisodeInput(ep.index, ep.data_rel, ep.length), ep.data_mb)
        if closed is not None:
            pending.append(_data_unit(src_root, out_root, d_chunk, d_file, closed, limits, frames_total))
        places = []
        for k, cam in enumerate(cameras):
            packer = video[cam]
            prev_chunk, prev_file = packer.chunk, packer.file
            (v_chunk, v_file, before), vclosed = packer.add(
                EpisodeInput(ep.index, ep.video_rels[k], ep.length), ep.video_mb[k])
            if vclosed is not None:
                pending.append(_video_unit(src_root, out_root, cam, fps, prev_chunk, prev_file, vclosed))
            places.append(VideoPlace(cam, v_chunk, v_file, before))
        yield from pending
        pending.clear()
        yield Placement(ep.index, ep.length, ep.tasks, d_chunk, d_file, frames_total, tuple(places))
        frames_total += ep.length
    if data.inputs:
        yield DataConcatUnit(src_root, out_root, DATA_PATH.format(chunk_index=data.chunk, file_index=data.file),
                             frames_total - data.frames, tuple(data.inputs))
    for cam in cameras:
        packer = video[cam]
        if packer.inputs:
            yield _video_unit(src_root, out_root, cam, fps, packer.chunk, packer.file, packer.inputs)


def _data_unit(src_root: Location, out_root: str, chunk: int, file: int, closed: list[EpisodeInput],
               limits: Limits, frames_total: int) -> DataConcatUnit:
    """The data file just closed: it is the one before (chunk, file), and its rows end at `frames_total`."""
    prev = _previous_chunk_file(chunk, file, limits.chunks_size)
    first = frames_total - sum(i.frames for i in closed)
    return DataConcatUnit(src_root, out_root, DATA_PATH.format(chunk_index=prev[0], file_index=prev[1]),
                          first, tuple(closed))


def _video_unit(src_root: Location, out_root: str, cam: str, fps: float, chunk: int, file: int,
                inputs: list[EpisodeInput]) -> VideoConcatUnit:
    rel = VIDEO_PATH.format(video_key=cam, chunk_index=chunk, file_index=file)
    return VideoConcatUnit(src_root, out_root, rel, cam, fps, tuple(inputs))


def _previous_chunk_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk - 1, chunks_size - 1) if file == 0 else (chunk, file - 1)


def plan_keyframe_checks(episodes: Iterable[V30Episode], src: Root) -> Iterator[KeyframeCheckUnit]:
    """One unit per run of consecutive episodes sharing a camera's file (LeRobot keeps a file's episodes
    consecutive; a file that appears in two runs is checked twice, which is still correct)."""
    src_root = as_root(src).location
    open_runs: dict[str, tuple[str, list[tuple[int, float, float, int]]]] = {}
    for ep in episodes:
        for v in ep.videos:
            run = open_runs.get(v.camera)
            if run is not None and run[0] != v.rel:
                yield KeyframeCheckUnit(src_root, run[0], v.camera, tuple(run[1]))
                run = None
            if run is None:
                run = open_runs[v.camera] = (v.rel, [])
            run[1].append((ep.index, v.from_timestamp, v.to_timestamp, ep.length))
    for camera, (rel, spans) in open_runs.items():
        yield KeyframeCheckUnit(src_root, rel, camera, tuple(spans))


# ---- checks ----------------------------------------------------------------------------------------------


def episode_columns(cameras: list[str]) -> dict[str, str]:
    cols = {"episode_index": "integer", "length": "integer", "dataset_from_index": "integer",
            "dataset_to_index": "integer", "data/chunk_index": "integer", "data/file_index": "integer"}
    for cam in cameras:
        p = f"videos/{cam}/"
        cols |= {p + "chunk_index": "integer", p + "file_index": "integer", p + "from_timestamp": "number",
                 p + "to_timestamp": "number"}
    return cols


def check_v30_tasks(root: StorePath, problems: Problems) -> None:
    path = root / TASKS_REL
    if not path.exists():
        return
    if not path.is_file():
        problems.add(f"{path}: not a regular file")
        return
    try:
        # not pq.read_table: that imports pyarrow.dataset and pandas (~0.5 s)
        with path.media(what="tasks parquet") as source, pq.ParquetFile(source) as pf:
            table = pf.read()
    except FileProblem as exc:
        problems.add(f"{exc.path}: {exc.message}")
        return
    except (pa.ArrowException, OSError) as exc:
        problems.add(f"{path}: cannot read tasks parquet: {exc}")
        return
    task_col = "task" if "task" in table.column_names else (
        "__index_level_0__" if "__index_level_0__" in table.column_names else "task")
    check_columns(path, table, {"task_index": "integer", task_col: "string"}, problems, {"task_index": 0})


def check_v30_episodes(root: StorePath, cameras: list[str], problems: Problems) -> None:
    folder = root / EPISODES_DIR
    files = episode_meta_files(root)
    if not files:
        problems.add(f"{folder}: missing: no chunk-*/file-*.parquet episode metadata")
        return
    wanted = episode_columns(cameras)
    for path in files:
        if not path.is_file():
            problems.add(f"{path}: not a regular file")
            continue
        try:
            # not pq.read_table: that imports pyarrow.dataset (~0.5 s)
            with path.media(what="episode metadata parquet") as source, pq.ParquetFile(source) as pf:
                names = pf.schema_arrow.names
                have = [n for n in (*wanted, "tasks") if n in names]
                table = pf.read(columns=have)
        except FileProblem as exc:
            problems.add(f"{exc.path}: {exc.message}")
            continue
        except (pa.ArrowException, OSError) as exc:
            problems.add(f"{path}: cannot read episode metadata parquet: {exc}")
            continue
        check_columns(path, table, wanted, problems, {"episode_index": 0, "length": 1})
        if "tasks" in table.column_names and column_kind(table.schema.field("tasks").type) != "list<string>":
            problems.add(f"{path}: column tasks: type {table.schema.field('tasks').type} (expected list<string>)")


def check_files(where: Root, cameras: list[str], problems: Problems) -> None:
    """meta/tasks.parquet (rule tasks_parquet) and every meta/episodes parquet (rule episodes_parquet)."""
    root = as_root(where)
    problems.rule = "tasks_parquet"
    check_v30_tasks(root, problems)
    problems.rule = "episodes_parquet"
    check_v30_episodes(root, cameras, problems)


# ---- the format --------------------------------------------------------------------------------------------


class V30(Format):
    version = VERSION
    layout = LAYOUT
    data_path = DATA_PATH
    video_path = VIDEO_PATH
    tasks_rel = TASKS_REL
    episodes_rel = EPISODES_DIR
    episodes_stats_rel = None  # per-episode stats are `stats/<feature>/<stat>` columns of the episode rows

    def open(self, root: Root, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
        return open_v30(root, info, tasks=tasks)

    def iter_tasks(self, root: Root) -> Iterator[tuple[int, str]]:
        return iter_v30_tasks(root)

    def iter_episode_tasks(self, root: Root, info: dict[str, Any]) -> Iterator[tuple[int, tuple[str, ...], int]]:
        cameras = tuple(c.key for c in cameras_from_info(info, as_root(root) / "meta/info.json"))
        for ep, _row in iter_v30_episodes(root, info, cameras, stats=False):
            yield ep.index, ep.tasks, ep.length

    def write_tasks(self, path: Path, tasks: Iterable[tuple[int, str]], root: Path | None = None) -> int:
        return write_tasks_v30(path, tasks, root=root)

    def counted_totals(self, *, episodes: int, cameras: int, chunks_size: int) -> dict[str, int]:
        return {}

    def is_rewritten(self, rel: str) -> bool:
        return rel in REWRITTEN or (rel.startswith(EPISODES_DIR + "/") and rel.endswith(".parquet"))

    def write_reencoded_episodes(self, ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                                 data_stats: DataStats | None = None) -> list[Path]:
        _write_v30_episodes(ds, out, videos, cameras)
        return [out / p.rel for p in episode_meta_files(ds.root)]

    def check_files(self, root: Root, cameras: list[str], problems: Problems) -> None:
        check_files(root, cameras, problems)

    def rotation_readers(self, coded: str, shown: str, how: str) -> str:
        return (f"lerobot 0.4.x (torchcodec 0.10, pyav) and 0.6.x with pyav hand back the coded {coded} frames, "
                f"0.6.x with torchcodec 0.11 (its default) the {shown} frames {how}")


FORMAT = V30()
