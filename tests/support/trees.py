"""A dataset's files as data, to compare two trees or one tree before and after a run.

- `tree(root, skip_prep=False)`: every file (symlinks followed) and its sha256, sorted by relative path;
  `skip_prep`: prep's own top-level `prep/` folder (reports, options, lock) left out;
- `snapshot(root)` / `changed(before, after)`: every entry under a root (itself included) with its kind, mode,
  size, mtime and bytes (or link target), and the paths that differ: proves a source was not touched;
- `disk_bytes(root)`: the bytes of the regular files under a root (symlinks not followed, not counted);
- `sha256(path)`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

Snapshot = dict[str, tuple[Any, ...]]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree(root: Path, *, skip_prep: bool = False) -> dict[str, str]:
    """Every file of a tree (prep's own `prep/` folder left out with `skip_prep`) and its sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not (skip_prep and p.relative_to(root).parts[0] == "prep")}


def snapshot(root: Path) -> Snapshot:
    """Every entry under `root` (itself included): kind, mode, size, mtime_ns, sha256 or link target."""
    snap: Snapshot = {}
    for dirpath, dirs, names in os.walk(root):
        for name in [".", *dirs, *names]:
            p = Path(dirpath) / name if name != "." else Path(dirpath)
            rel = p.relative_to(root).as_posix()
            try:
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    snap[rel] = ("link", os.readlink(p), st.st_mtime_ns)
                elif stat.S_ISDIR(st.st_mode):
                    snap[rel] = ("dir", st.st_mode, st.st_mtime_ns)
                elif not stat.S_ISREG(st.st_mode):  # a FIFO, socket or device: never opened (a FIFO would block)
                    snap[rel] = ("special", st.st_mode, st.st_mtime_ns)
                else:
                    snap[rel] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, sha256(p))
            except FileNotFoundError:  # gone since the walk listed it: a running writer's temp file, renamed
                snap.pop(rel, None)
    return snap


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Paths added, removed or changed (bytes, size, mode, mtime, link target)."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def disk_bytes(root: Path) -> int:
    """The size of every regular file under `root` (symlinks neither followed nor counted)."""
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total
