"""What a `prep verify` report was taken of, so that `prep edit --drop-failed REPORT` acts only on that dataset.

A report's `dataset.fingerprint` (`identity`) holds:

- `metadata`: a BLAKE2b of every file under `meta/` (`meta/info.json`, the episode metadata and stats, the
  tasks; each file's relative path, size and bytes). A copy with an edited `robot_type`, a re-encode (other
  sizes and codec in info.json) or a dataset whose episode list differs gives another value.
- `failed_files`: a BLAKE2b over the identity of every file (data parquet, each camera's video) of each
  episode the report marks failed, by `files`: `mtime` (default) = each file's size and mtime in nanoseconds
  (a stat, no read); `content` = its size and a BLAKE2b of every byte (`prep verify --fingerprint content`:
  a copy of the same bytes matches, any change of a byte does not). A look-alike whose metadata is byte for
  byte the same but whose failed episode's video is another file, or a broken file replaced since, no longer
  matches.

`mismatch` says what differs between a recorded identity and a dataset as it is now (None: the same).
Plain files only: a FIFO, socket or device under meta/ is named, never opened.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipeline.dataset import Dataset
from pipeline.storage import FileProblem, StorePath

SCHEME = "prep.dataset_identity/1"
FILE_MODES = ("mtime", "content")  # prep verify --fingerprint
DEFAULT_FILE_MODE = "mtime"
CHUNK = 1 << 20


# A local dataset's branch (`metadata_digest`, `files_digest`) stats and reads its files with os.stat/open, not
# through `pipeline.storage` (the `LocalStore` of its `Location`), on purpose: the seam's reads would change the
# digests that reports already hold (`prep edit --drop-failed` compares them) where they matter most, the failed
# episodes' odd files. Its errors drop what is hashed here: a FIFO, socket, device or folder is `kind <S_IFMT>`
# here, `NotAFile` there (no mode); a symlink that leaves the dataset is followed and hashed here, `OutsideRoot`
# there; `unreadable <errno>` has no errno there; and its `iter_entries`/`iter_files` leave out under meta/ a
# link to a folder (and `iter_files` every link), which are entries here. Plain files digest the same either way,
# but each `stat` there resolves the path (realpath: an lstat per component) to check it stays inside: about 3x
# the time of an mtime fingerprint (5,000 files: 0.12 s here, 0.38 s through the store). An object store's
# branch goes through the seam (`_object_digest`, `_object_files_digest`).
def _hash_file(h: Any, path: Path) -> None:
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)


def _object_digest(h: Any, path: StorePath) -> None:
    """An object's bytes into `h`, streamed through its store."""
    with path.open() as fh:
        while block := fh.read(CHUNK):
            h.update(block)


def metadata_digest(root: Path | StorePath) -> str:
    """BLAKE2b (16 bytes) of every entry under `root/meta` in path order: its relative path, then for a
    regular file (a symlink to one: the readers follow it) its size and bytes, else its kind. An object store's
    entries are its objects (one listing)."""
    if isinstance(root, StorePath):
        if not root.location.is_local:
            h = hashlib.blake2b(digest_size=16)
            for rel, found in (root / "meta").store.iter_files((root / "meta").rel):
                h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
                h.update(f"{found.size}\0".encode())
                _object_digest(h, StorePath(root.location, rel))
            return h.hexdigest()
        root = root.local
    h = hashlib.blake2b(digest_size=16)
    meta = Path(root) / "meta"
    entries: list[str] = []
    for dirpath, dirnames, filenames in os.walk(meta):  # symlinked folders are not followed
        dirnames.sort()
        base = Path(dirpath)
        entries += [(base / name).relative_to(root).as_posix() for name in filenames]
        entries += [(base / name).relative_to(root).as_posix() for name in dirnames
                    if os.path.islink(base / name)]
    for rel in sorted(entries):
        path = Path(root) / rel
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            st = os.stat(path)
        except OSError:
            h.update(b"unreadable\0")
            continue
        if not stat.S_ISREG(st.st_mode):
            h.update(f"kind {stat.S_IFMT(st.st_mode)}\0".encode())
            continue
        h.update(f"{st.st_size}\0".encode())
        try:
            _hash_file(h, path)
        except OSError as exc:
            h.update(f"unreadable {exc.errno}\0".encode())
    return h.hexdigest()


def episode_files(ds: Dataset, episodes: Iterable[int]) -> list[str]:
    """The files (relative paths, sorted, each once) of these episodes: the data parquet and every camera's
    video (v3.0: the files they share). An episode the metadata does not list has none."""
    rels: set[str] = set()
    for e in episodes:
        pos = ds.episodes.position(int(e))
        if pos is None:
            continue
        ep = ds.episodes[pos]
        rels.add(ep.data.rel)
        rels.update(v.rel for v in ep.videos)
    return sorted(rels)


def files_digest(root: Path | StorePath, rels: Iterable[str], mode: str) -> str:
    """BLAKE2b (16 bytes) over each file's path and identity: `mtime` its size and mtime_ns, `content` its size
    and a hash of every byte; a missing or irregular file is recorded as such. (An object: its size and
    LastModified from its store's stat, or its bytes streamed.)"""
    if mode not in FILE_MODES:
        raise ValueError(mode)
    if isinstance(root, StorePath):
        if not root.location.is_local:
            return _object_files_digest(root, rels, mode)
        root = root.local
    h = hashlib.blake2b(digest_size=16)
    for rel in rels:
        path = Path(root) / rel
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            st = os.stat(path)
        except OSError:
            h.update(b"missing\0")
            continue
        if not stat.S_ISREG(st.st_mode):
            h.update(f"kind {stat.S_IFMT(st.st_mode)}\0".encode())
            continue
        if mode == "mtime":
            h.update(f"{st.st_size} {st.st_mtime_ns}\0".encode())
            continue
        h.update(f"{st.st_size}\0".encode())
        inner = hashlib.blake2b(digest_size=16)
        try:
            _hash_file(inner, path)
        except OSError as exc:
            h.update(f"unreadable {exc.errno}\0".encode())
            continue
        h.update(inner.digest())
    return h.hexdigest()


def _object_files_digest(root: StorePath, rels: Iterable[str], mode: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    for rel in rels:
        path = root / rel
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            found = path.stat()
        except FileProblem:
            h.update(b"missing\0")
            continue
        if mode == "mtime":
            h.update(f"{found.size} {found.mtime_ns}\0".encode())
            continue
        h.update(f"{found.size}\0".encode())
        inner = hashlib.blake2b(digest_size=16)
        _object_digest(inner, path)
        h.update(inner.digest())
    return h.hexdigest()


def identity(ds: Dataset, failed: Iterable[int], mode: str = DEFAULT_FILE_MODE) -> dict[str, Any]:
    """The report's `dataset.fingerprint`: the metadata's digest and the failed episodes' files' digest."""
    rels = episode_files(ds, failed)
    return {"scheme": SCHEME, "metadata": metadata_digest(ds.root), "files": mode,
            "failed_files": files_digest(ds.root, rels, mode), "failed_file_count": len(rels)}


def recorded_mode(recorded: Any) -> str | None:
    """The file mode of a recorded identity, None when it is not one this prep writes."""
    if not isinstance(recorded, dict) or recorded.get("scheme") != SCHEME:
        return None
    mode = recorded.get("files")
    ok = isinstance(recorded.get("metadata"), str) and isinstance(recorded.get("failed_files"), str)
    return mode if ok and mode in FILE_MODES else None


def metadata_mismatch(recorded: dict[str, Any], root: Path | StorePath) -> str | None:
    now = metadata_digest(root)
    if recorded["metadata"] == now:
        return None
    return (f"its metadata fingerprint {str(recorded['metadata'])[:12]} is not this dataset's {now[:12]} "
            "(meta/info.json or the episode metadata differ)")


def files_mismatch(recorded: dict[str, Any], ds: Dataset, failed: Iterable[int]) -> str | None:
    mode = recorded["files"]
    rels = episode_files(ds, failed)
    if recorded["failed_files"] == files_digest(ds.root, rels, mode):
        return None
    what = "size and mtime" if mode == "mtime" else "bytes"
    return (f"the {len(rels)} files of the episodes it failed are not the ones it examined (their {what} "
            "differ: another dataset's files, or changed since)")
