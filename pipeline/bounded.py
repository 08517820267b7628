"""JSON and TOML parsed within bounds: every JSON or TOML text prep reads from a user goes through here.

Python's parsers recurse once per nesting level: `[[[[...]]]]` 2,000 deep raises `RecursionError`
(a traceback, not a `ValueError`), and a value a few hundred deep that does parse breaks the next
recursive consumer (JSON Schema validation, a shape walk, pickling to a worker). A text is therefore
checked before it is parsed:

- its size: at most `MAX_JSON_CHARS` / `MAX_TOML_BYTES` (a line of a JSON Lines file is bounded as it
  is read, `pipeline.formats.jsonl.iter_lines`);
- its nesting: at most `MAX_DEPTH` levels. A text with no more than `MAX_DEPTH` opening brackets cannot
  be deeper (the common case: one `str.count`, C speed); any other is scanned, strings skipped, and
  the first place that goes deeper is named: line, column and the key path to it.

A refusal is a `JsonBoundError` (a `json.JSONDecodeError`: every caller that reports a line that is
not JSON reports it with no change) or a `TomlBoundError` (a `tomllib.TOMLDecodeError`). LeRobot's
files nest 6 levels at most (image stats: feature / stat / channel / 1 / 1).
"""

from __future__ import annotations

import errno
import json
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_DEPTH = 100
MAX_JSON_CHARS = 256 << 20  # a whole JSON file (info.json, stats.json, a manifest) or one JSON Lines line
MAX_TOML_BYTES = 16 << 20
SHOWN_PATH_PARTS = 4

JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"\s*(:)?|[\[\]{},]', re.DOTALL)
# TOML: basic and literal strings (single- and multi-line), comments, brackets, and `key =` at a line start.
TOML_TOKEN = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
                        r'|^[ \t]*([A-Za-z0-9_.\-"\' ]+?)[ \t]*=|[\[\]{}]', re.DOTALL | re.MULTILINE)


class JsonBoundError(json.JSONDecodeError):
    """A JSON text over a bound, refused before it was parsed (`msg`, `lineno`, `colno` as for bad JSON)."""


class TomlBoundError(tomllib.TOMLDecodeError):
    """A TOML text over a bound, refused before it was parsed."""


def _where(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _shown_path(parts: list[str]) -> str:
    if not parts:
        return "the top level"
    if len(parts) > SHOWN_PATH_PARTS:
        parts = [*parts[:SHOWN_PATH_PARTS], f"... ({len(parts)} levels deep)"]
    out = ""
    for p in parts:
        p = p[:60] + ("..." if len(p) > 60 else "")
        out += p if p.startswith(("[", "...")) or not out else "/" + p
    return out


def json_too_deep(text: str, max_depth: int = MAX_DEPTH) -> tuple[int, str] | None:
    """(offset, key path) of the first place `text` nests deeper than `max_depth`; None when it does not."""
    if text.count("[") + text.count("{") <= max_depth:
        return None
    stack: list[list[Any]] = []  # per open container: [kind, current key or index]
    for m in JSON_TOKEN.finditer(text):
        tok = m.group(0)
        ch = tok[0]
        if ch == '"':
            if m.group(1) and stack and stack[-1][0] == "{":
                try:
                    stack[-1][1] = json.loads(tok[: tok.rindex('"') + 1])
                except ValueError:
                    stack[-1][1] = tok[1:40]
        elif ch in "[{":
            stack.append([ch, 0 if ch == "[" else ""])
            if len(stack) > max_depth:
                path = [str(k) if kind == "{" else f"[{k}]" for kind, k in stack[:-1]]
                return m.start(), _shown_path(path)
        elif ch in "]}":
            if stack:
                stack.pop()
        elif ch == "," and stack and stack[-1][0] == "[":
            stack[-1][1] += 1
    return None


def check_json_text(text: str, max_depth: int = MAX_DEPTH, max_chars: int = MAX_JSON_CHARS) -> None:
    """Raise `JsonBoundError` when `text` is longer than `max_chars` or nests deeper than `max_depth`."""
    if len(text) > max_chars:
        raise JsonBoundError(f"{len(text):,} characters, above the {max_chars:,} prep reads", text[:0], 0)
    deep = json_too_deep(text, max_depth)
    if deep is not None:
        pos, path = deep
        raise JsonBoundError(f"nested deeper than {max_depth} levels (at {path})", text, pos)


def loads_json(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)` after `check_json_text`; raises `json.JSONDecodeError` (bad or over a bound)."""
    check_json_text(text, max_depth)
    try:
        return json.loads(text)
    except RecursionError:  # a guard: the scan above refuses any text this deep
        raise JsonBoundError(f"nested deeper than {max_depth} levels", text, 0) from None


def _regular_size(path: Path) -> int:
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read, a device never end
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return st.st_size


def read_json(path: Path, max_depth: int = MAX_DEPTH, max_chars: int = MAX_JSON_CHARS) -> Any:
    """A whole JSON file, its size checked before it is read and its depth before it is parsed. Raises
    OSError (also for a FIFO, socket or device), UnicodeDecodeError or `json.JSONDecodeError`."""
    size = _regular_size(path)
    if size > 4 * max_chars:  # UTF-8: at most 4 bytes a character
        raise JsonBoundError(f"{size:,} bytes, above the {4 * max_chars:,} prep reads", "", 0)
    return loads_json(path.read_text(encoding="utf-8"), max_depth)


# ---- TOML ----------------------------------------------------------------------------------------


def _toml_too_deep(text: str, max_depth: int) -> tuple[int, str] | None:
    if text.count("[") + text.count("{") <= max_depth:
        return None
    depth, key = 0, ""
    for m in TOML_TOKEN.finditer(text):
        tok = m.group(0)
        if m.group(1) is not None:
            key = m.group(1).strip()
        elif tok in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return m.start(), key or "the top level"
        elif tok in ("]", "}"):
            depth = max(0, depth - 1)
    return None


def _deepest(obj: Any, max_depth: int) -> list[str] | None:
    """The key path to the first value deeper than `max_depth` (iterative: no recursion), or None."""
    stack: list[tuple[Any, list[str]]] = [(obj, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > max_depth:
            return path
        items: Iterator[tuple[str, Any]]
        if isinstance(value, dict):
            items = ((str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            items = ((f"[{i}]", v) for i, v in enumerate(value))
        else:
            continue
        stack.extend((v, [*path, k]) for k, v in items if isinstance(v, dict | list))
    return None


def loads_toml(text: str, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """`tomllib.loads(text)` within the bounds (size, brackets before parsing; the parsed document's
    depth, dotted keys included, after); raises `tomllib.TOMLDecodeError`."""
    if len(text) > MAX_TOML_BYTES:
        raise TomlBoundError(f"{len(text):,} characters, above the {MAX_TOML_BYTES:,} prep reads")
    deep = _toml_too_deep(text, max_depth)
    if deep is not None:
        line, col = _where(text, deep[0])
        raise TomlBoundError(f"nested deeper than {max_depth} levels (in {deep[1]!r}, at line {line}, column {col})")
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # a guard: the scan above refuses any text this deep
        raise TomlBoundError(f"nested deeper than {max_depth} levels") from None
    path = _deepest(doc, max_depth)
    if path is not None:
        raise TomlBoundError(f"nested deeper than {max_depth} levels (at {_shown_path(path)})")
    return doc


def load_toml(path: Path, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """A TOML file within the bounds; raises OSError (also for a FIFO, socket or device) or
    `tomllib.TOMLDecodeError`."""
    size = _regular_size(path)
    if size > MAX_TOML_BYTES:
        raise TomlBoundError(f"{size:,} bytes, above the {MAX_TOML_BYTES:,} prep reads")
    with path.open("rb") as fh:
        data = fh.read(MAX_TOML_BYTES + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlBoundError(f"not UTF-8: {exc}") from None
    return loads_toml(text, max_depth)
