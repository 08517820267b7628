"""Atomic file output: write to a temp name beside the target, fsync, rename; and the one place that
turns a failed write into one line.

A file exists under its final name only once it is complete; a killed run leaves at most
a `*.part-*` temp file, which `remove_stale_temps` clears on the next run.

Every write of prep's outputs goes through `atomic_path` (or `writing` around a write it cannot make
atomic: a lock file, a folder): an OSError that says the output cannot be written (`WRITE_ERRNOS`:
read-only filesystem, disk full, quota, permission, a folder or a file in the way) becomes a
`WriteError` naming the path and the cause (for a full disk: the filesystem and its free bytes), which
the CLI prints as one line (exit 3). `check_writable` / `check_target` probe an output before any work.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pipeline.errors import PrepError

TEMP_MARK = ".part-"
WRITE_EXIT = 3  # the exit code of a run stopped because its output cannot be written
# errno -> what it means for the output (the disk-level ones are always about the file being written)
DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system", errno.EFBIG: "file too large for the file system"}
PATH_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
               errno.EISDIR: "a folder is in the way", errno.ENOTDIR: "a file is in the way of a folder",
               errno.EEXIST: "a file is in the way", errno.ENAMETOOLONG: "name too long"}
WRITE_ERRNOS = frozenset(DISK_ERRNOS) | frozenset(PATH_ERRNOS)


class WriteError(PrepError):
    """An output that cannot be written: one line naming the path and the cause."""

    exit_code = WRITE_EXIT

    def __init__(self, message: str, path: str = "", errno_: int | None = None) -> None:
        super().__init__(message)
        self.path, self.errno = path, errno_

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Dask workers) intact
        return (WriteError, (str(self), self.path, self.errno))


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem holding `path` (or where it would be created)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def describe(path: Path | str, exc: OSError) -> str:
    """`cannot write PATH: cause` (a full disk names its filesystem and free bytes)."""
    code = exc.errno if exc.errno is not None else -1
    cause = exc.strerror or DISK_ERRNOS.get(code) or PATH_ERRNOS.get(code) or str(exc)
    if code in (errno.ENOSPC, errno.EDQUOT):
        mnt = mount_point(Path(path))
        try:
            st = os.statvfs(mnt)
            cause += f" (the output disk {mnt} is full: {st.f_bavail * st.f_frsize:,} bytes free)"
        except OSError:
            cause += f" (the output disk {mnt} is full)"
    return f"cannot write {path}: {cause}"


def _written_path(path: Path, tmp: Path | None, exc: OSError) -> str | None:
    """The output path an OSError is about, or None when it is about another file (e.g. a source read)."""
    if exc.errno in DISK_ERRNOS:
        return str(path)
    named = exc.filename2 if exc.filename2 is not None else exc.filename
    if named is None:
        return str(path)
    named_s = os.fsdecode(named) if isinstance(named, bytes | str) else str(named)
    target = os.path.abspath(path)
    if named_s in (str(tmp), target, str(path)) or target.startswith(os.path.abspath(named_s).rstrip("/") + "/"):
        return named_s if named_s != str(tmp) else str(path)
    return None


@contextlib.contextmanager
def writing(path: Path, tmp: Path | None = None) -> Iterator[None]:
    """Turn an OSError of writing `path` (see WRITE_ERRNOS) into a `WriteError` naming it."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            raise
        where = _written_path(Path(path), tmp, exc)
        if where is None:
            raise
        raise WriteError(describe(where, exc), where, exc.errno) from None


def check_writable(folder: Path, *, create: bool = True) -> None:
    """Create `folder` (and its parents) if needed and prove a file can be written in it (a 1-byte probe,
    fsynced and removed): a `WriteError` now instead of a failure after the work. `create=False`: nothing
    is created; the probe goes to the nearest folder that exists (where `folder` would be made)."""
    folder = Path(folder).absolute()
    if not create:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    probe = folder / f".prep-write-probe{TEMP_MARK}{uuid.uuid4().hex[:12]}"
    try:
        with writing(folder):
            if folder.exists() and not folder.is_dir():
                raise OSError(errno.ENOTDIR, "Not a directory (a file is in the way)", str(folder))
            folder.mkdir(parents=True, exist_ok=True)
        with writing(folder, probe), open(probe, "wb") as fh:
            fh.write(b"\0")
            fh.flush()
            os.fsync(fh.fileno())
    except WriteError:
        with contextlib.suppress(OSError):
            probe.unlink()
        for p in created:  # leave no empty folders behind for an output that cannot be written
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def check_target(path: Path) -> None:
    """`path` can be written as a file: not a folder, and its folder writable (`check_writable`)."""
    path = Path(path)
    if path.is_dir():
        raise WriteError(f"cannot write {path}: {PATH_ERRNOS[errno.EISDIR]} (it is a folder; name a file)",
                         str(path), errno.EISDIR)
    check_writable(path.parent)


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
    """Yield a temp path to write; on success fsync it and rename it to `path`; on error remove it.
    A failed write (WRITE_ERRNOS) is raised as `WriteError` naming `path`."""
    tmp = temp_path_for(path)
    try:
        with writing(path, tmp):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            if path.is_dir():
                raise OSError(errno.EISDIR, "Is a directory", str(path))
            os.replace(tmp, path)
            fsync_dir(path.parent)
    finally:
        with contextlib.suppress(OSError):
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
