"""An exclusive lock on an output folder, so that two runs never write the same output.

The lock is a file holding the holder's pid, hostname and start time, locked with `flock` for
as long as the holder lives: the kernel drops the `flock` when the holder dies (even by SIGKILL),
so a lock file left behind by a dead run is stale and is taken over silently. A live holder is
named in the refusal. Where `flock` is unsupported (some network filesystems), the file's
pid/hostname decide: a holder on this host whose pid is gone is stale; another host's lock is
respected until removed by hand.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.clock import utc_now
from pipeline.errors import PrepError


class LockedError(PrepError):
    """Another live run holds the lock."""


def _holder(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
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


def describe(holder: dict[str, Any], path: Path, what: str) -> str:
    who = (f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('started_utc')}"
           if holder else "another process")
    return (f"{what} is in use by another prep run ({who}); wait for it to finish, or choose another output. "
            f"If no such run exists, delete the lock file {path}")


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str) -> Iterator[Path]:
    """Hold `path` as an exclusive lock for the duration; raises `LockedError` naming the holder."""
    from pipeline.atomic import writing

    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with writing(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise LockedError(describe(_holder(path), path, what)) from None
            if exc.errno != errno.ENOLCK:
                raise
            _claim_without_flock(path, what)
            fd = os.open(path, os.O_RDWR)
        # The file may have been removed and recreated between open and flock: lock the live one.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    record = {"pid": os.getpid(), "host": socket.gethostname(),
              "started_utc": utc_now()}
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
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                path.unlink()
        os.close(fd)


def refuse_if_held(path: Path, what: str) -> None:
    """Raise `LockedError` now when a live run holds the lock at `path`; writes nothing (the file is not
    created), so a job can refuse a busy output before it starts its engine session and takes the lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # no lock file (or unreadable: `exclusive_lock` decides)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise LockedError(describe(_holder(path), path, what)) from None
    finally:
        os.close(fd)  # closing drops a flock this probe may have taken


def _claim_without_flock(path: Path, what: str) -> None:
    holder = _holder(path)
    if holder and holder.get("pid") != os.getpid() and not is_stale(holder):
        raise LockedError(describe(holder, path, what))
