"""A local folder as a store: reads refuse what would leave the dataset or block a worker; writes are
`pipeline.atomic`'s discipline (exclusive temp beside the target, no-follow, fsync, rename).

Reads: a relative path may not leave the root (`..`), and a symlink may point only inside the location's
`link_root` (the dataset itself; for a Hugging Face hub snapshot, its cache repository folder
`datasets--OWNER--NAME/`, whose `snapshots/<rev>/` files are links into `../../blobs/`). Only regular files
are opened: a FIFO would block a reader forever, a device is never a dataset's file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat as stat_
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pipeline import atomic
from pipeline.storage.base import (
    Entry,
    FileProblem,
    Location,
    MissingFile,
    NotAFile,
    OutsideRoot,
    Stat,
    Store,
    clean_rel,
)

FILE_KINDS = ((stat_.S_ISDIR, "a folder"), (stat_.S_ISFIFO, "a FIFO (named pipe)"), (stat_.S_ISSOCK, "a socket"),
              (stat_.S_ISCHR, "a character device"), (stat_.S_ISBLK, "a block device"))
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def kind_of(mode: int) -> str:
    return next((name for test, name in FILE_KINDS if test(mode)), "not a file")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class LocalStore(Store):
    def __init__(self, location: Location) -> None:
        super().__init__(location)
        self.root = Path(location.root)
        self._link_root = os.path.realpath(location.link_root or location.root)

    # ---- reading ---------------------------------------------------------------------------------------------

    def path_of(self, rel: str) -> Path:
        """The checked absolute path of `rel`: inside the root, and (through any symlink) inside `link_root`."""
        try:
            rel = clean_rel(rel)
        except ValueError:  # named as the path it makes (normalised)
            raise OutsideRoot(self.url, rel, f"path {rel!r} leaves the dataset root {self.location.root}",
                              path=os.path.normpath(os.path.join(self.location.root, rel))) from None
        candidate = os.path.join(self.location.root, rel) if rel else self.location.root
        real = os.path.realpath(candidate)
        if not _within(real, self._link_root):
            where = "its hub-cache repository folder" if self._link_root != os.path.realpath(self.location.root) \
                else "the dataset root"
            raise OutsideRoot(self.url, rel, f"symlink points outside {where}: {real}")
        return Path(candidate)

    def stat(self, rel: str, what: str = "file") -> Stat:
        st = self._stat(rel, what)
        return Stat(st.st_size, st.st_mtime_ns, f"{st.st_ino}:{st.st_ctime_ns}")

    def _stat(self, rel: str, what: str) -> os.stat_result:
        path = self.path_of(rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise MissingFile(self.url, rel, what) from None
        except OSError as exc:
            raise FileProblem(str(path), f"cannot read {what}: {exc.strerror or exc}") from None
        if not stat_.S_ISREG(st.st_mode):
            raise NotAFile(self.url, rel, kind_of(st.st_mode), what)
        return st

    def open(self, rel: str, *, block_size: int | None = None, what: str = "file") -> IO[bytes]:
        path = self.path_of(rel)
        try:
            fd = os.open(path, READ_FLAGS)  # never blocks on a FIFO; its kind is checked before any read
        except FileNotFoundError:
            raise MissingFile(self.url, rel, what) from None
        except OSError as exc:
            raise FileProblem(str(path), f"cannot read {what}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat_.S_ISREG(st.st_mode):
                raise NotAFile(self.url, rel, kind_of(st.st_mode), what)
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb", buffering=-1 if block_size is None else block_size)  # 0: unbuffered
        except BaseException:
            os.close(fd)
            raise

    @contextlib.contextmanager
    def media(self, rel: str, *, block_size: int | None = None, what: str = "file") -> Iterator[str | IO[bytes]]:
        self._stat(rel, what)  # a regular file inside the root: PyAV and pyarrow then read it natively
        yield str(self.path_of(rel))

    def check(self, rel: str) -> None:
        self.path_of(rel)

    def is_dir(self, rel: str) -> bool:
        return os.path.isdir(self.path_of(rel))

    def glob(self, prefix: str, pattern: str) -> list[str]:
        """`Path.glob` below `prefix` (what it matches: files, folders and links alike; each is checked when it is
        read), relative to the root, sorted by parts."""
        top = self.path_of(prefix)
        base = len(self.location.root.rstrip("/")) + 1
        return sorted((str(p)[base:] for p in top.glob(pattern)), key=lambda r: r.split("/"))

    def iter_files(self, prefix: str = "") -> Iterator[tuple[str, Stat]]:
        """Regular files below `prefix`, streaming, in sorted order (each folder's entries sorted; memory is one
        folder's listing per level). Each stored byte is listed once: in a plain folder a symlink is not (it
        names a file of the dataset listed already, or leaves it); in a hub snapshot the links are the files
        (followed into the cache repository folder's blobs/, and only there)."""
        top = self.path_of(prefix)
        base = len(self.location.root.rstrip("/")) + 1
        snapshot = self._link_root != os.path.realpath(self.location.root)
        yield from self._walk(str(top), base, snapshot)

    def iter_entries(self, prefix: str = "") -> Iterator[Entry]:
        """`os.walk` below `prefix` (folders not followed through links): each name with what it is."""
        top = str(self.path_of(prefix))
        base = len(self.location.root.rstrip("/")) + 1
        snapshot = self._link_root != os.path.realpath(self.location.root)
        for dirpath, _dirs, names in os.walk(top):
            for name in names:
                full = os.path.join(dirpath, name)
                rel = full[base:]
                try:
                    st: os.stat_result | None = os.stat(full)
                except OSError:
                    st = None
                stat = Stat(st.st_size, st.st_mtime_ns, f"{st.st_ino}:{st.st_ctime_ns}") \
                    if st is not None and stat_.S_ISREG(st.st_mode) else None
                real = os.path.realpath(full)
                if os.path.islink(full):
                    inside = _within(real, self._link_root)
                    if snapshot and inside:  # a snapshot's link into its blobs: the file itself
                        yield Entry(rel, stat, real=real)
                    else:
                        yield Entry(rel, stat, link=True, inside=inside, real=real)
                else:
                    yield Entry(rel, stat, real=real)

    def _walk(self, folder: str, base: int, snapshot: bool) -> Iterator[tuple[str, Stat]]:
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                yield from self._walk(entry.path, base, snapshot)
                continue
            if entry.is_symlink() and not (snapshot and _within(os.path.realpath(entry.path), self._link_root)):
                continue
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            if stat_.S_ISREG(st.st_mode):
                yield entry.path[base:], Stat(st.st_size, st.st_mtime_ns, f"{st.st_ino}:{st.st_ctime_ns}")

    @contextlib.contextmanager
    def local_copy(self, rel: str, what: str = "file") -> Iterator[Path]:
        self._stat(rel, what)
        yield self.path_of(rel)

    # ---- writing (pipeline.atomic's discipline) ------------------------------------------------------------------

    def _target(self, rel: str) -> Path:
        try:
            return self.root / clean_rel(rel)
        except ValueError:
            raise OutsideRoot(self.url, rel, f"path leaves the output {self.location.shown}") from None

    def write_bytes(self, rel: str, data: bytes) -> None:
        atomic.write_bytes(self._target(rel), data, root=self.root)

    @contextlib.contextmanager
    def writer(self, rel: str) -> Iterator[Path]:
        with atomic.atomic_path(self._target(rel), self.root) as tmp:
            yield tmp

    def create(self, rel: str, data: bytes) -> bool:
        """Written and fsynced under an exclusive temp name, then hard-linked to `rel`: a link never replaces a
        file (EEXIST), so of two writers exactly one creates it, and a reader never sees a part."""
        path = self._target(rel)
        tmp: Path | None = None
        try:
            with atomic.writing(path):
                tmp = atomic.create_temp(path, self.root)
                fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, path, follow_symlinks=False)
                except FileExistsError:
                    return False
                atomic.fsync_dir(path.parent)
                return True
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def copy_in(self, src: Store, src_rel: str, rel: str) -> None:
        with self.writer(rel) as tmp:
            if isinstance(src, LocalStore):
                with src.open(src_rel) as fin, open(tmp, "wb") as fout:
                    _copy_fd(fin, fout)
            else:
                with src.open(src_rel, block_size=8 << 20) as fin, open(tmp, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 8 << 20)

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._target(rel))

    @contextlib.contextmanager
    def lock(self, rel: str, what: str, *, command: str | None = None) -> Iterator[str]:
        from pipeline.lock import exclusive_lock

        with exclusive_lock(self._target(rel), what, root=self.root, command=command) as path:
            yield str(path)

    def refuse_if_held(self, rel: str, what: str) -> None:
        from pipeline.lock import refuse_if_held

        refuse_if_held(self._target(rel), what)

    def check_output(self) -> None:
        atomic.check_tree(self.root)


def _copy_fd(fin: IO[bytes], fout: IO[bytes]) -> None:
    """A kernel copy where the platform has one (copy_file_range, then sendfile), else a buffered copy."""
    try:
        shutil.copyfileobj(fin, fout, 8 << 20) if not hasattr(os, "copy_file_range") else _range_copy(fin, fout)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        fin.seek(0)
        fout.seek(0)
        fout.truncate()
        shutil.copyfileobj(fin, fout, 8 << 20)


def _range_copy(fin: IO[bytes], fout: IO[bytes]) -> None:
    size = os.fstat(fin.fileno()).st_size
    done = 0
    while done < size:
        n = os.copy_file_range(fin.fileno(), fout.fileno(), size - done)
        if n == 0:
            break
        done += n
