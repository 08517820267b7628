"""What validation found (`Problems`), and the checks every format's metadata files share: JSON Schema (a line's
verdict cached by its shape), JSON Lines, parquet columns. The entry points are in `pipeline.formats.validate`;
each format checks its own files with these (`Format.check_files`).

One line per problem names the file, the line (JSON Lines) or row (parquet), the field and the value; the first
`MAX_LISTED` problems are listed and all are counted. Memory stays bounded whatever the corpus: lines are read a
block at a time, parquet a file (its non-stats columns) at a time, and a line's JSON Schema verdict is cached by
its shape (types, keys, integer sign, array lengths), so that 8 M similar lines cost one `json.loads` and a
dictionary look-up each, not one schema walk.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pipeline.bounded import JsonBoundError
from pipeline.errors import MetadataError
from pipeline.formats.jsonl import iter_json_lines
from pipeline.storage import StorePath
from pipeline.text import shown

MAX_LISTED = 20  # problems listed one per line (all are counted)
SHAPE_CACHE = 4096  # distinct line shapes whose verdict is remembered


@dataclass
class Problems:
    """The problems found so far: the first `limit` as lines, all counted; per rule (`pipeline.checks`:
    the rule being checked when a problem was added) the first `limit` lines and a count."""

    root: Path | StorePath
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
        reader of the format line does with the rule (`pipeline.checks.decide`)."""
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


# ---- JSON Schema -----------------------------------------------------------------------------------------


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


def check_jsonl(path: Path | StorePath, name: str, problems: Problems) -> None:
    """Every non-empty line of a JSON Lines file: JSON, and valid against schemas/<name>.schema.json."""
    cache_ = ShapeCache(name)
    for lineno, line, obj in iter_json_lines(path):  # size and depth bounded before parsing
        where = f"{path}:{lineno}"
        if isinstance(obj, json.JSONDecodeError):
            what = "refused" if isinstance(obj, JsonBoundError) else "is not JSON"
            problems.add(f"{where}: line {what} ({obj.msg} at column {obj.colno}): {_clip(line)}")
            continue
        if not cache_.is_valid(obj):
            for p in schema_problems(obj, name, limit=1):
                problems.add(f"{where}: {p}")


def _clip(text: str, width: int = 80) -> str:
    return shown(text, width)  # quoted, control characters escaped, clipped


# ---- parquet columns, with pyarrow -----------------------------------------------------------------------


def column_kind(typ: Any) -> str:
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


def check_columns(path: Path | StorePath, table: Any, wanted: dict[str, str], problems: Problems,
                  minimums: dict[str, int] | None = None) -> None:
    """Each wanted column present, of the declared kind, without nulls (and at least its minimum)."""
    import numpy as np
    import pyarrow.compute as pc

    for name, kind in wanted.items():
        if name not in table.column_names:
            problems.add(f"{path}: column {name}: missing (expected {kind})")
            continue
        got = column_kind(table.schema.field(name).type)
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
