"""A small tmpfs mounted by a test (root on Linux only): a disk that fills at a known size, or a read-only one.

- `mount_refusal()`: why a tmpfs cannot be mounted here (None when it can);
- `require_tmpfs(what)`: skip the test, saying `what` needs a tmpfs and why it cannot have one (a genuinely
  absent capability of the machine, never a fault of prep); `can_mount_fixture(what)`: the same as a
  module-scoped fixture (`can_mount = can_mount_fixture("disk-full scenarios")` in a test module);
- `tmpfs(path, size_bytes, readonly=False)`: mounted for the `with` block, lazily unmounted after it;
- `remount(path, size_bytes)`: grow or shrink a mounted tmpfs keeping its files ("space freed");
- `tmpfs_bytes(sizes)`: what files of these sizes take on a tmpfs (whole pages).
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@functools.cache
def mount_refusal() -> str | None:
    """Why a tmpfs cannot be mounted here (None when it can)."""
    if not sys.platform.startswith("linux"):
        return "tmpfs mounts need Linux"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (run as root, or in a container with CAP_SYS_ADMIN)"
    probe = Path(tempfile.mkdtemp(prefix="prep-faults-mnt-"))
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            return f"mount -t tmpfs is not permitted here: {r.stderr.strip() or r.returncode}"
        subprocess.run(["umount", str(probe)], check=False)
        return None
    except FileNotFoundError:
        return "no mount command"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def require_tmpfs(what: str) -> None:
    """Skip with the reason when this machine cannot mount a tmpfs."""
    why = mount_refusal()
    if why:
        pytest.skip(f"{what} need a tmpfs: {why}")


def can_mount_fixture(what: str) -> Any:
    """A module-scoped fixture that skips, with the reason, where no tmpfs can be mounted."""

    @pytest.fixture(scope="module")
    def can_mount() -> None:
        require_tmpfs(what)

    return can_mount


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int, *, readonly: bool = False) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    options = ("ro," if readonly else "") + f"size={size_bytes}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, size_bytes: int) -> None:
    """Grow (or shrink) a mounted tmpfs in place, keeping its files: "space freed"."""
    subprocess.run(["mount", "-o", f"remount,size={size_bytes}", str(path)], check=True)


def tmpfs_bytes(sizes: list[int], page: int = 4096) -> int:
    """What files of these sizes take on a tmpfs (whole pages)."""
    return sum(-(-s // page) * page for s in sizes)
