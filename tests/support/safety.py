"""Helpers of the safety suite (tests/test_safety_*.py): one prep command run as a real process against a
planted hazard, and the exact outcome recorded in the scenario table (tests/support/faults.py's `scenario`
rows, with the command, exit code, traceback, outside writes and temps left columns).

- `run(row, *args)`: `prep ARGS` to completion (bounded by a subprocess timeout, never a speed assertion);
  fills the row's command, exit and traceback columns;
- `refused(r, command, *words)`: exit 2, exactly one line on stderr, `prep COMMAND: error: ...` holding
  `words`, nothing on stdout, no traceback;
- `Watch(root, allowed)`: every path under `root` before and after; `outside()` lists what changed outside
  the allowed paths (a folder whose mtime moved only because an allowed path was made in it is not a write);
- `temps(root)`: prep's temp files (names of `pipeline.atomic.temp_path_for`'s form) left under `root`;
- `finished(version)`: a finished `prep reencode` output of each small corpus (inline engine), made once.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from pipeline import atomic
from support.faults import Row, Snapshot, changed, corpus, prep, scratch, short_paths, snapshot
from support.faults import copy_tree as copy  # noqa: F401  (the safety tests' name for it)

CASE_TIMEOUT_S = 240  # one command: a hang shows as a timeout failure, never as a stuck suite
VERSIONS = ("v21", "v30")
OTHER = {"v21": "v3.0", "v30": "v2.1"}
INLINE = ("--backend", "inline", "--no-progress")


def args_of(command: str, version: str, src: Path, out: Path) -> list[str]:
    """The command line of each command that writes, on `src`, writing to `out` (a folder for reencode and
    convert, a report file for scan and verify)."""
    if command == "reencode":
        return ["reencode", "--src", str(src), "--dst", "224", "--out", str(out), *INLINE]
    if command == "convert":
        return ["convert", str(src), "--to", OTHER[version], "--out", str(out), *INLINE]
    return [command, str(src), "--out", str(out), *INLINE]


def report_lock(report: Path) -> Path:
    return report.with_name(report.name + ".parts.lock")


def run(row: Row, *args: str, cwd: Path | None = None,
        timeout: float = CASE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    r = prep(*args, cwd=cwd, timeout=timeout)
    row.command, row.exit = args[0], r.returncode
    row.traceback = "Traceback (most recent call last)" in r.stdout + r.stderr
    err = [line for line in r.stderr.splitlines() if line.strip()]
    row.observed = f"exit {r.returncode}" + (f": {short_paths(err[-1])[:220]}" if err else "")
    return r


def refused(r: subprocess.CompletedProcess[str], command: str, *words: str, code: int = 2) -> str:
    """The run was refused with exit `code` and exactly one line naming the problem; returns the line."""
    text = r.stdout + r.stderr
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == code, f"exit {r.returncode}, expected {code}\n{text[-3000:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{r.stderr}"
    assert not r.stdout.strip(), f"a refused run printed on stdout:\n{r.stdout}"
    line = lines[0]
    assert line.startswith(f"prep {command}: error: "), line
    for w in words:
        assert w in line, f"{w!r} not in: {line}"
    return line


class Watch:
    """Every path under `root` (bytes, mode, mtime, link targets; FIFOs never opened) before a run, and what
    changed after it outside `allowed` (paths, and everything under them)."""

    def __init__(self, root: Path, allowed: list[Path] | None = None) -> None:
        self.root = root
        self.allowed = [os.path.abspath(a) for a in (allowed or [])]
        self.before: Snapshot = snapshot(root)

    def _allowed(self, rel: str, after: Snapshot) -> bool:
        full = os.path.abspath(self.root / rel) if rel != "." else os.path.abspath(self.root)
        if any(full == a or full.startswith(a + "/") for a in self.allowed):
            return True
        b, a = self.before.get(rel), after.get(rel)
        # a folder whose only change is its mtime, because an allowed path was made or removed in it
        return (b is not None and a is not None and b[0] == a[0] == "dir" and b[1] == a[1]
                and any(x.startswith(full.rstrip("/") + "/") for x in self.allowed))

    def outside(self) -> list[str]:
        after = snapshot(self.root)
        return [rel for rel in changed(self.before, after) if not self._allowed(rel, after)]


def temps(root: Path) -> list[str]:
    """prep's temp files left under `root` (exactly `temp_path_for`'s names)."""
    found = []
    for dirpath, _dirs, names in os.walk(root):
        found += [os.path.join(dirpath, n) for n in names if atomic.is_temp_name(n)]
    return sorted(found)


def record_outcome(row: Row, watch: Watch | None, root: Path) -> list[str]:
    """Fill the outside-writes and temps-left columns; returns the outside writes."""
    outside = watch.outside() if watch is not None else []
    row.outside_writes = len(outside)
    row.temps_left = len(temps(root))
    return outside


@functools.cache
def finished(version: str) -> Path:
    """A finished `prep reencode` output of `corpus(version)` (read-only by convention: copy it)."""
    out = scratch() / "safety" / f"{version}_224"
    r = prep(*args_of("reencode", version, corpus(version), out), timeout=CASE_TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def first_video(root: Path) -> Path:
    return sorted((root / "videos").rglob("*.mp4"))[0]


def make_special(path: Path, kind: str, target: Path | None = None) -> Any:
    """Plant a symlink (to `target`), FIFO, socket or character device at `path`; returns a handle to keep
    alive (a bound socket) or None. Skips (pytest.skip) a device where mknod is not permitted."""
    import socket

    import pytest

    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        assert target is not None
        path.symlink_to(target)
        return None
    if kind == "fifo":
        os.mkfifo(path)
        return None
    if kind == "socket":
        if len(os.fsencode(path)) > 100:
            pytest.skip("socket path too long for AF_UNIX here")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        return s
    if kind == "device":
        import stat

        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # as /dev/null
        except PermissionError:
            pytest.skip("mknod of a character device is not permitted here")
        return None
    raise ValueError(kind)


KIND_WORDS = {"symlink": "symbolic link", "fifo": "FIFO", "socket": "socket", "device": "character device"}
