"""Atomic file output: write to a temp name beside the target, fsync, rename.

A file exists under its final name only once it is complete; a killed run leaves at most
a `*.part-*` temp file, which `remove_stale_temps` clears on the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

TEMP_MARK = ".part-"


def temp_path_for(path: Path) -> Path:
    return path.with_name(f".{path.name}{TEMP_MARK}{uuid.uuid4().hex[:12]}{path.suffix}")


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path to write; on success fsync it and rename it to `path`; on error remove it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any, *, indent: int | None = 4) -> None:
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + ("\n" if indent else ""))


def write_jsonl(path: Path, rows: list[Any]) -> None:
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_lerobot_json(path: Path, obj: Any) -> None:
    """As LeRobot's `write_json` (indent 4, UTF-8 as is, no final newline)."""
    write_text(path, json.dumps(obj, indent=4, ensure_ascii=False))


class LineWriter:
    """A JSON-lines file written line by line under a temp name (streaming: nothing is held); renamed into
    place by `close()` only, removed by `abort()`. As a context manager: closed on success, aborted on error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_path_for(path)
        self.fh: IO[str] | None = open(self.tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed in close/abort)

    def write_json_line(self, obj: Any) -> None:
        assert self.fh is not None
        self.fh.write(json.dumps(obj, ensure_ascii=False) + "\n")  # as jsonlines (LeRobot's .jsonl) writes it

    def close(self) -> None:
        if self.fh is None:
            return
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        self.fh = None
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> LineWriter:
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if typ is None:
            self.close()
        else:
            self.abort()


def remove_stale_temps(root: Path) -> int:
    """Remove temp files a killed run left under `root`; returns how many."""
    count = 0
    if not root.exists():
        return 0
    for p in root.rglob(f"*{TEMP_MARK}*"):
        if p.is_file():
            p.unlink()
            count += 1
    return count
