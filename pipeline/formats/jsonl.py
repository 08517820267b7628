"""JSON Lines read a block at a time: every reader of a `.jsonl` file of a dataset goes through here (the v2.1
metadata, its checks, a re-encode's rewrite of episodes_stats.jsonl).

A line is bounded as it is read (`MAX_JSON_CHARS`: a file with no newline is never held whole) and parsed
within bounds (`pipeline.bounded.loads_json`).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.bounded import MAX_JSON_CHARS, loads_json
from pipeline.errors import DatasetError
from pipeline.storage import FileProblem, StorePath, as_file

EPISODE_INDEX_RE = re.compile(r'"episode_index"\s*:\s*(\d+)')
READ_BLOCK = 1 << 22  # bytes read at a time


class BadJsonLine(ValueError):
    """A JSON Lines line that does not parse: the error and the raw text (to name its episode)."""

    def __init__(self, error: json.JSONDecodeError, text: str) -> None:
        super().__init__(str(error))
        self.text = text

    def episode_hint(self) -> int | None:
        """The episode the broken line was about, when its `episode_index` is still readable."""
        match = EPISODE_INDEX_RE.search(self.text)
        return int(match.group(1)) if match else None


def iter_lines(file: Path | StorePath, digest: Any = None,
               max_chars: int = MAX_JSON_CHARS) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, as `str.splitlines` numbers them, reading a block at a time.

    Raises DatasetError for a missing or unreadable file (not UTF-8) and for a line longer than
    `max_chars` (refused as it is read: a file with no newline is never held whole). `digest` (a
    hashlib object) is fed the file's bytes. The file is read through its store (`pipeline.storage`).
    """
    path = as_file(file)
    try:
        if not path.is_file():
            raise DatasetError(path, "missing file")
    except FileProblem as exc:
        raise DatasetError(exc.path, exc.message) from None
    decoder = codecs.getincrementaldecoder("utf-8")()
    carry = ""
    lineno = 0
    try:
        with path.open(block_size=READ_BLOCK) as fh:
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
    except FileProblem as exc:
        raise DatasetError(exc.path, exc.message) from None
    except OSError as exc:
        raise DatasetError(path, f"cannot read: {exc}") from None


def iter_json_lines(path: Path | StorePath, digest: Any = None) -> Iterator[tuple[int, str, Any]]:
    """(line number, text, parsed value) of each non-empty line; a line that is not JSON (or is refused by the
    bounds) has its `json.JSONDecodeError` as its value. The errors of `iter_lines` are raised."""
    for lineno, line in iter_lines(path, digest):
        if not line.strip():
            continue
        try:
            obj = loads_json(line)
        except json.JSONDecodeError as exc:
            obj = exc
        yield lineno, line, obj


def iter_jsonl(path: Path | StorePath) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-empty line, for a strict reader: a line that is not a JSON object is a
    `DatasetError` naming the file and the line."""
    for lineno, _line, obj in iter_json_lines(path):
        if isinstance(obj, json.JSONDecodeError):
            raise DatasetError(path, f"line {lineno}: not JSON ({obj.msg})")
        if not isinstance(obj, dict):
            raise DatasetError(path, f"line {lineno}: expected a JSON object, found {obj!r}"[:300])
        yield lineno, obj
