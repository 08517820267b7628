"""An exclusive lock on an output, so that two runs never write the same output.

The lock is a regular file holding the holder's command, pid, hostname and start time, locked with
`flock` for as long as the holder lives: the kernel drops the `flock` when the holder dies (even by
SIGKILL), so a lock file left behind by a dead run is stale and is taken over silently. A live holder is
named in the refusal. Where `flock` is unsupported (some network filesystems), the file's pid/hostname
decide: a holder on this host whose pid is gone is stale; another host's lock is respected until removed
by hand.

The lock file is opened with `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat`: a symlink planted in its
place is refused (its target is never written), and a FIFO, socket or device is refused without blocking
(`pipeline.atomic.UnsafePathError`, one line naming it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.atomic import check_entry, make_dirs, unsafe, writing
from pipeline.clock import utc_now
from pipeline.errors import PrepError
from pipeline.text import printable

HOLDER_BYTES = 64 * 1024  # a lock record is one short JSON line; more is not read


class LockedError(PrepError):
    """Another live run holds the lock."""


def _holder_of(fd: int) -> dict[str, Any]:
    try:
        obj = json.loads(os.pread(fd, HOLDER_BYTES, 0).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(holder: dict[str, Any]) -> bool:
    """True when the recorded holder is on this host and its process is gone."""
    pid = holder.get("pid")
    return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid)


def describe(holder: dict[str, Any], path: Path | str, what: str) -> str:  # a file, or an object's URL
    if holder:
        command = holder.get("command")
        who = (f"`{printable(str(command)[:300])}`, " if command else "") + \
            f"pid {printable(str(holder.get('pid')))} on {printable(str(holder.get('host')))} since " \
            f"{printable(str(holder.get('started_utc')))}"
    else:
        who = "another process"
    return (f"{what} is in use by another prep run ({who}); wait for it to finish, or choose another output. "
            f"If no such run exists, delete the lock file {printable(path)}")


def _open(path: Path, *, create: bool, write: bool = True) -> int | None:
    """The lock file's descriptor: a regular file, never through a link, never blocking (None: absent and
    not `create`)."""
    check_entry(path, "the place of a lock file")
    flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # replaced by a link or a socket meanwhile
            raise unsafe(path, os.lstat(path).st_mode, "the place of a lock file") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise unsafe(path, st.st_mode, "the place of a lock file")
    return fd


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, *, root: Path | None = None, command: str | None = None) -> Iterator[Path]:
    """Hold `path` as an exclusive lock for the duration; raises `LockedError` naming the holder. `root`: the
    output folder the lock is in (`pipeline.atomic.make_dirs`); `command`: the holder's command line, shown to
    a run that is refused."""
    with writing(path):
        make_dirs(path.parent, root)
    while True:
        with writing(path):
            fd = _open(path, create=True)
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                holder = _holder_of(fd)
                os.close(fd)
                raise LockedError(describe(holder, path, what)) from None
            if exc.errno != errno.ENOLCK:
                os.close(fd)
                raise
            try:
                _claim_without_flock(fd, path, what)
            except BaseException:
                os.close(fd)
                raise
        # The file may have been removed and recreated between open and flock: lock the live one.
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    record: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "started_utc": utc_now()}
    if command:
        record["command"] = command
    try:
        with writing(path):
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
    except BaseException:  # e.g. a full disk: no empty lock file is left behind
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        raise
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.lstat(path).st_ino:
                path.unlink()
        os.close(fd)


def refuse_if_held(path: Path, what: str) -> None:
    """Raise `LockedError` now when a live run holds the lock at `path`; writes nothing (the file is not
    created), so a job can refuse a busy output before it starts its engine session and takes the lock. A
    symlink or special file there is refused (`UnsafePathError`), without blocking."""
    try:
        fd = _open(path, create=False, write=False)
    except PermissionError:
        return  # unreadable: `exclusive_lock` decides
    if fd is None:
        return  # no lock file
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise LockedError(describe(_holder_of(fd), path, what)) from None
    finally:
        os.close(fd)  # closing drops a flock this probe may have taken


def _claim_without_flock(fd: int, path: Path, what: str) -> None:
    holder = _holder_of(fd)
    if holder and holder.get("pid") != os.getpid() and not is_stale(holder):
        raise LockedError(describe(holder, path, what))
