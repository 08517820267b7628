"""LeRobot format v3.0: many episodes per parquet and per mp4, episode metadata in parquet.

`meta/episodes/chunk-*/file-*.parquet` is read column by column (its `stats/*` columns are never
loaded) and checked with array operations; a row that fails a check is looked at on its own, so
that it is rejected with the same one-line reason (file, row, field, value) as before.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.dataset.datafiles import Stale, relocate_columns
from pipeline.dataset.info import cameras_from_info
from pipeline.dataset.model import DataRef, Dataset, Episode, Rejected, VideoRef
from pipeline.dataset.rows import RowBuilder
from pipeline.dataset.table import CameraColumns, EpisodeTable, PathTemplate
from pipeline.errors import DatasetError, EpisodeError

EPISODES_DIR = "meta/episodes"
TASKS_REL = "meta/tasks.parquet"
FILE_FIELDS = {"chunk_index", "file_index"}
VIDEO_FIELDS = {"chunk_index", "file_index", "video_key"}
ROW_BITS = 32  # a row's place: file number << ROW_BITS | row number


def episode_meta_files(root: Path) -> list[Path]:
    return sorted((root / EPISODES_DIR).glob("chunk-*/file-*.parquet"))


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
    for row, (idx, task) in enumerate(zip(table["task_index"].to_pylist(), table[task_col].to_pylist(),
                                          strict=True)):
        if isinstance(idx, bool) or not isinstance(idx, int):  # null, a string: pipeline.dataset.validate names all
            raise DatasetError(path, f"row {row}: task_index: {idx!r} (expected an integer)")
        tasks[idx] = str(task)
    return tasks


# ---- one row at a time (the reference rules, and the reason a row is rejected) ------------------


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


# ---- whole columns ---------------------------------------------------------------------------------

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


def without_stats(names: list[str]) -> list[str]:
    """The columns of a v3.0 episode metadata parquet other than its per-episode `stats/...` ones (most of a
    row's values; a pass that only plans or checks reads the rest)."""
    return [n for n in names if not n.startswith("stats/")]


def _read_file(path: Path, file_no: int, cameras: list[str], rows: RowBuilder, where_of: Any) -> None:
    try:
        names = without_stats(pq.read_schema(path).names)
        table = pq.read_table(path, columns=names)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(path, f"cannot read episode metadata parquet: {exc}") from None
    n = table.num_rows
    if n == 0:
        return
    keys = (np.int64(file_no) << ROW_BITS) + np.arange(n, dtype=np.int64)
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


def open_v30(root: Path, info: dict[str, Any], *, tasks: bool = True) -> tuple[Dataset, Rejected]:
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
    for file_no, path in enumerate(files):
        _read_file(path, file_no, [c.key for c in cameras], rows, where_of)
        with open(path, "rb") as fh:
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
        root=root,
        codebase_version="v3.0",
        fps=float(info["fps"]),
        info=info,
        cameras=cameras,
        episodes=EpisodeTable(cols, make),
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
