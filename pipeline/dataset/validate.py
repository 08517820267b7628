"""A dataset's metadata read and validated once, before any unit of a job runs.

Every job (scan, verify, reencode) opens its source with `open_validated`: it streams each metadata
file once and checks it against declared rules, and refuses the dataset (`MetadataError`, exit 2) when
any fails, so nothing expensive starts on bad metadata. The rules:

- JSON files, with JSON Schema (schemas/lerobot_*.schema.json): meta/info.json, every line of v2.1
  meta/episodes.jsonl, meta/tasks.jsonl and meta/episodes_stats.jsonl, and meta/stats.json;
- v3.0 parquet, with pyarrow: meta/tasks.parquet (task_index an integer column without nulls, task a
  string column) and every meta/episodes/chunk-*/file-*.parquet (each column the readers use present,
  of an integer/number/list-of-string type, without nulls; episode_index >= 0, length >= 1);
- camera keys that are path components (no '/', '\\', '.' or '..': a key is a folder name of the output).

One line per problem names the file, the line (JSON Lines) or row (parquet), the field and the value;
the first `MAX_LISTED` problems are listed and all are counted. Memory stays bounded whatever the
corpus: lines are read a block at a time, parquet a file (its non-stats columns) at a time, and a
line's JSON Schema verdict is cached by its shape (types, keys, integer sign, array lengths), so that
8 M similar lines cost one `json.loads` and a dictionary look-up each, not one schema walk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pipeline.bounded import JsonBoundError, loads_json
from pipeline.dataset.info import INFO_REL, read_info
from pipeline.dataset.model import Dataset, Rejected
from pipeline.errors import MetadataError
from pipeline.text import shown

MAX_LISTED = 20  # problems listed one per line (all are counted)
SHAPE_CACHE = 4096  # distinct line shapes whose verdict is remembered

V21_JSONL = (("meta/episodes.jsonl", "lerobot_episode", True), ("meta/tasks.jsonl", "lerobot_task", False),
             ("meta/episodes_stats.jsonl", "lerobot_episode_stats", False))  # (file, schema, required)
STATS_REL = "meta/stats.json"
# info.json keys no reader generation reads when loading (only their writers and the hub card do): a value of
# the wrong type there is rule `info_json_unread` (a warning), not `info_json`.
INFO_UNREAD = frozenset({"robot_type", "splits", "total_videos", "total_chunks"})
V30_TASKS_REL = "meta/tasks.parquet"
V30_EPISODES_DIR = "meta/episodes"


@dataclass
class Problems:
    """The problems found so far: the first `limit` as lines, all counted; per rule (`pipeline.dataset.rules`:
    the rule being checked when a problem was added) the first `limit` lines and a count."""

    root: Path
    limit: int = MAX_LISTED
    lines: list[str] = field(default_factory=list)
    total: int = 0
    rule: str = "info_json"
    codebase_version: str = ""
    by_rule: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, line: str) -> None:
        self.total += 1
        if len(self.lines) < self.limit:
            self.lines.append(line)
        self.counts[self.rule] = self.counts.get(self.rule, 0) + 1
        kept = self.by_rule.setdefault(self.rule, [])
        if len(kept) < self.limit:
            kept.append(line)

    def raise_if_any(self) -> None:
        if self.total:
            raise MetadataError(self.root, self.lines, self.total)

    def split(self, command: str, reader: str = "all") -> tuple[Problems, Problems]:
        """(the problems `command` refuses the dataset for, the ones it only warns about), by what each targeted
        reader of the format line does with the rule (`pipeline.dataset.rules.decide`)."""
        from pipeline.checks import decide

        refuse, warn = (Problems(self.root, self.limit, codebase_version=self.codebase_version) for _ in range(2))
        for rule, kept in self.by_rule.items():
            target = refuse if decide(rule, self.codebase_version, command, reader) == "refuse" else warn
            target.rule = rule
            for line in kept:
                target.add(line)
            target.total += self.counts[rule] - len(kept)
            target.counts[rule] += self.counts[rule] - len(kept)
        return refuse, warn


# ---- JSON Schema --------------------------------------------------------------------------------


@cache
def _validator(name: str) -> Any:
    import jsonschema

    from pipeline.schemas import load_schema

    return jsonschema.Draft202012Validator(load_schema(name))


def _field(error: Any) -> str:
    path = "/".join(str(p) for p in error.absolute_path)
    return path or "(line)"


def schema_errors(obj: Any, name: str, limit: int | None = 3) -> list[tuple[str | None, str]]:
    """(top-level key, 'field: message') for the first violations of schemas/<name>.schema.json (the message
    holds the value); the key is the first element of the error's path, None for the object itself (e.g. a
    required key missing); `limit` None: every violation."""
    errors = sorted(_validator(name).iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    out: list[tuple[str | None, str]] = []
    for err in errors[:limit]:
        top = str(err.absolute_path[0]) if err.absolute_path else None
        if err.validator in ("anyOf", "oneOf") and err.context:  # the most specific reason
            err = min(err.context, key=lambda e: len(list(e.absolute_path)) * -1)
        out.append((top, f"{_field(err)}: {err.message}"))
    return out


def schema_problems(obj: Any, name: str, limit: int = 3) -> list[str]:
    """'field: message' for the first violations of schemas/<name>.schema.json (the message holds the value)."""
    return [text for _key, text in schema_errors(obj, name, limit)]


def shape(x: Any) -> Any:
    """What a JSON Schema made of types, required/known keys, integer minimums 0/1 and array lengths can
    see of a parsed JSON value: equal shapes get the same verdict (the cache key of `is_valid`)."""
    t = type(x)
    if t is dict:
        return ("D", tuple((k, shape(v)) for k, v in x.items()))
    if t is list:
        kinds = set(map(type, x))
        if kinds == {float}:  # the same tags as item by item, counted at C speed (stats arrays)
            whole, nans = sum(map(float.is_integer, x)), sum(map(math.isnan, x))
            tags = {"fi"} if whole else set()
            tags |= {"nan"} if nans else set()
            tags |= {"f"} if len(x) - whole - nans else set()
            return ("L", len(x), frozenset(tags))
        if kinds == {int}:
            lo, hi = min(x), max(x)
            tags = {"n"} if lo < 0 else set()
            tags |= {"0"} if 0 in x else set()
            tags |= {"i"} if hi > 0 and any(0 < v < 2**63 for v in x) else set()
            tags |= {"I"} if hi >= 2**63 else set()
            return ("L", len(x), frozenset(tags))
        return ("L", len(x), frozenset(shape(v) for v in x))
    if t is int:
        return "I" if x >= 2**63 else "i" if x > 0 else "0" if x == 0 else "n"
    if t is float:
        return "fi" if x.is_integer() else ("f" if x == x else "nan")
    return t.__name__  # str, bool, NoneType


class ShapeCache:
    """`is_valid` per line shape (bounded: cleared when full)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.known: dict[Any, bool] = {}

    def is_valid(self, obj: Any) -> bool:
        key = shape(obj)
        verdict = self.known.get(key)
        if verdict is None:
            if len(self.known) >= SHAPE_CACHE:
                self.known.clear()
            verdict = self.known[key] = bool(_validator(self.name).is_valid(obj))
        return verdict


def check_jsonl(path: Path, name: str, problems: Problems) -> None:
    """Every non-empty line of a JSON Lines file: JSON, and valid against schemas/<name>.schema.json."""
    from pipeline.dataset.v21 import iter_lines

    cache_ = ShapeCache(name)
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = loads_json(line)  # size and depth bounded before parsing
        except json.JSONDecodeError as exc:
            what = "refused" if isinstance(exc, JsonBoundError) else "is not JSON"
            problems.add(f"{where}: line {what} ({exc.msg} at column {exc.colno}): {_clip(line)}")
            continue
        if not cache_.is_valid(obj):
            for p in schema_problems(obj, name, limit=1):
                problems.add(f"{where}: {p}")


def check_json(path: Path, name: str, problems: Problems) -> Any:
    """A whole JSON file against schemas/<name>.schema.json; returns the object (None when not JSON)."""
    from pipeline.dataset.info import read_json_file
    from pipeline.errors import DatasetError

    try:
        obj = read_json_file(path)
    except DatasetError as exc:
        problems.add(str(exc))
        return None
    for p in schema_problems(obj, name, limit=MAX_LISTED):
        problems.add(f"{path}: {p}")
    return obj


def _clip(text: str, width: int = 80) -> str:
    return shown(text, width)  # quoted, control characters escaped, clipped


# ---- rules JSON Schema cannot state -------------------------------------------------------------


def camera_key_problems(info: dict[str, Any]) -> Iterator[str]:
    """Video feature keys name folders of the output: refuse separators and dot components."""
    for key, feat in info["features"].items():
        plain = key and key not in (".", "..") and not any(c in key for c in "/\\\0")
        if isinstance(feat, dict) and feat.get("dtype") == "video" and not plain:
            yield (f"features/{key}: camera key {key!r} is not a plain name (it names a folder of the output; "
                   "'/', '\\', '.' and '..' are not allowed)")


# ---- v3.0 parquet, with pyarrow ------------------------------------------------------------------


def _kind(typ: Any) -> str:
    import pyarrow as pa

    if pa.types.is_integer(typ):
        return "integer"
    if pa.types.is_floating(typ):
        return "number"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "string"
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        v = typ.value_type
        return "list<string>" if pa.types.is_string(v) or pa.types.is_large_string(v) or pa.types.is_null(v) \
            else f"list<{v}>"
    if pa.types.is_null(typ):
        return "null"
    return str(typ)


ACCEPTS = {"integer": {"integer"}, "number": {"integer", "number"}, "string": {"string"},
           "list<string>": {"list<string>"}}


def _null_rows(table: Any, name: str, limit: int) -> list[int]:
    import numpy as np
    import pyarrow.compute as pc

    mask = pc.is_null(table[name]).combine_chunks().to_numpy(zero_copy_only=False)
    return [int(i) for i in np.flatnonzero(mask)[:limit]]


def check_columns(path: Path, table: Any, wanted: dict[str, str], problems: Problems,
                  minimums: dict[str, int] | None = None) -> None:
    """Each wanted column present, of the declared kind, without nulls (and at least its minimum)."""
    import numpy as np
    import pyarrow.compute as pc

    for name, kind in wanted.items():
        if name not in table.column_names:
            problems.add(f"{path}: column {name}: missing (expected {kind})")
            continue
        got = _kind(table.schema.field(name).type)
        if got not in ACCEPTS[kind]:
            problems.add(f"{path}: column {name}: type {table.schema.field(name).type} (expected {kind})")
            continue
        col = table[name]
        if col.null_count:
            for row in _null_rows(table, name, 3):
                problems.add(f"{path} row {row}: {name}: null (expected {kind})")
            if col.null_count > 3:
                problems.add(f"{path}: {name}: null in {col.null_count} rows in all")
            continue
        low = (minimums or {}).get(name)
        # pc.min_max first: pc.less with a Python int (and to_numpy) import pandas (~0.3 s), only needed when
        # some value is below the minimum
        if low is not None and len(col) and pc.min_max(col)["min"].as_py() < low:
            bad = np.flatnonzero(pc.less(col, low).combine_chunks().to_numpy(zero_copy_only=False))
            for row in bad[:3]:
                problems.add(f"{path} row {int(row)}: {name}: {col[int(row)].as_py()!r} is less than {low}")


def check_v30_tasks(root: Path, problems: Problems) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / V30_TASKS_REL
    if not path.exists():
        return
    if not path.is_file():
        problems.add(f"{path}: not a regular file")
        return
    try:
        with pq.ParquetFile(path) as pf:  # not pq.read_table: that imports pyarrow.dataset and pandas (~0.5 s)
            table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        problems.add(f"{path}: cannot read tasks parquet: {exc}")
        return
    task_col = "task" if "task" in table.column_names else (
        "__index_level_0__" if "__index_level_0__" in table.column_names else "task")
    check_columns(path, table, {"task_index": "integer", task_col: "string"}, problems, {"task_index": 0})


def episode_columns(cameras: list[str]) -> dict[str, str]:
    cols = {"episode_index": "integer", "length": "integer", "dataset_from_index": "integer",
            "dataset_to_index": "integer", "data/chunk_index": "integer", "data/file_index": "integer"}
    for cam in cameras:
        p = f"videos/{cam}/"
        cols |= {p + "chunk_index": "integer", p + "file_index": "integer", p + "from_timestamp": "number",
                 p + "to_timestamp": "number"}
    return cols


def check_v30_episodes(root: Path, cameras: list[str], problems: Problems) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / V30_EPISODES_DIR
    files = sorted(folder.glob("chunk-*/file-*.parquet"))
    if not files:
        problems.add(f"{folder}: missing: no chunk-*/file-*.parquet episode metadata")
        return
    wanted = episode_columns(cameras)
    for path in files:
        if not path.is_file():
            problems.add(f"{path}: not a regular file")
            continue
        try:
            with pq.ParquetFile(path) as pf:  # not pq.read_table: that imports pyarrow.dataset (~0.5 s)
                names = pf.schema_arrow.names
                have = [n for n in (*wanted, "tasks") if n in names]
                table = pf.read(columns=have)
        except (pa.ArrowException, OSError) as exc:
            problems.add(f"{path}: cannot read episode metadata parquet: {exc}")
            continue
        check_columns(path, table, wanted, problems, {"episode_index": 0, "length": 1})
        if "tasks" in table.column_names and _kind(table.schema.field("tasks").type) != "list<string>":
            problems.add(f"{path}: column tasks: type {table.schema.field('tasks').type} (expected list<string>)")


# ---- the entry points ----------------------------------------------------------------------------


def validate_metadata(root: Path | str, limit: int = MAX_LISTED) -> Problems:
    """Every metadata file of the dataset at `root`, checked; the problems found (none: valid).
    Raises `DatasetError` when the root is not a dataset of a supported version at all."""
    root = Path(root).absolute()
    info = read_info(root)  # not a dataset / unsupported version / no fps: one line, as before
    problems = Problems(root, limit, codebase_version=info["codebase_version"])
    unread = []
    # every violation classified by its top-level key (Problems keeps the first `limit` lines, counts the rest)
    for key, p in schema_errors(info, "lerobot_info", limit=None):
        if key in INFO_UNREAD:
            unread.append(p)
        else:
            problems.add(f"{root / INFO_REL}: {p}")
    if problems.total:  # the other files are read by what info.json says
        return problems
    problems.rule = "info_json_unread"  # keys no reader reads when loading (pipeline.dataset.rules)
    for p in unread:
        problems.add(f"{root / INFO_REL}: {p}")
    problems.rule = "camera_key"
    for p in camera_key_problems(info):
        problems.add(f"{root / INFO_REL}: {p}")
    cameras = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    if info["codebase_version"] == "v2.1":
        for rel, name, required in V21_JSONL:
            problems.rule = rel.removeprefix("meta/").replace(".", "_")  # episodes_jsonl, tasks_jsonl, ...
            path = root / rel
            if not path.exists() and not required:
                continue
            if path.exists() and not path.is_file():
                problems.add(f"{path}: not a regular file")
                continue
            check_jsonl(path, name, problems)
    else:
        problems.rule = "tasks_parquet"
        check_v30_tasks(root, problems)
        problems.rule = "episodes_parquet"
        check_v30_episodes(root, cameras, problems)
    stats = root / STATS_REL
    problems.rule = "stats_json_read"  # a file the v3.0 readers cannot load at all (load_json, flatten_dict)
    if stats.exists():
        if stats.is_file():
            check_stats(stats, problems)
        else:
            problems.add(f"{stats}: not a regular file")
    return problems


def check_stats(path: Path, problems: Problems) -> None:
    """meta/stats.json: JSON holding an object (rule `stats_json_read`), then its schema (rule `stats_json`)."""
    from pipeline.dataset.info import read_json_file
    from pipeline.errors import DatasetError

    problems.rule = "stats_json_read"
    try:
        obj = read_json_file(path)
    except DatasetError as exc:
        problems.add(str(exc))
        return
    if not isinstance(obj, dict):
        problems.add(f"{path}: (file): {shown(obj, 40)} is not of type 'object'")
        return
    problems.rule = "stats_json"
    for p in schema_problems(obj, "lerobot_stats", limit=MAX_LISTED):
        problems.add(f"{path}: {p}")


def metadata_refusals(root: Path | str, command: str, reader: str = "all") -> tuple[Problems, Problems]:
    """`validate_metadata`, split into what `command` refuses the dataset for and what it only warns about
    (`pipeline.dataset.rules`: a rule no reader of the format line refuses is a warning; scan refuses only for
    the files it needs to count storage and hours)."""
    return validate_metadata(root).split(command, reader)


def open_validated(root: Path | str, command: str = "verify", reader: str = "all") -> tuple[Dataset, Rejected]:
    """`open_dataset` after `validate_metadata`: raises `MetadataError` (one line per problem) when a metadata
    file breaks a rule that `command` refuses for (`metadata_refusals`), before any unit is planned; the rules
    it only warns about are in `ds.rule_warnings` (and `ds.warnings`)."""
    from pipeline.dataset import open_dataset

    refuse, warn = metadata_refusals(root, command, reader)
    refuse.raise_if_any()
    ds, rejected = open_dataset(root, strict_tasks=not any(r in warn.counts for r in TASK_RULES))
    if warn.total:
        ds.rule_warnings = [(rule, line) for rule, lines in warn.by_rule.items() for line in lines][:MAX_LISTED]
        ds.rule_warnings_total = warn.total
        ds.warnings = [line for _rule, line in ds.rule_warnings] + ds.warnings
        ds.warnings_total += warn.total
    return ds, rejected


TASK_RULES = ("tasks_jsonl", "tasks_parquet")
