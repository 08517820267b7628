"""Atomic file output, the one write discipline of every prep output, and the one place that turns a
failed write into one line.

The discipline (every command, every file prep writes under `--out` or beside a report):

- a file is written under a temp name beside its target (`.NAME.prep-tmp-<24 hex>[.ext]`), created with
  `O_CREAT | O_EXCL | O_NOFOLLOW` (never an existing file, never through a link), fsynced and renamed into
  place (a rename replaces a link, it never writes through it); a killed run leaves at most such a temp
  file, which `remove_stale_temps` clears on the next run: only names of that exact form, never a file of
  the source copied under such a name;
- folders are made one component at a time below the output root (`make_dirs(folder, root)`): a component
  that is a symlink, FIFO, socket or device is refused (`UnsafePathError`, one line naming it), so a
  symlinked `OUT/prep`, `videos/<camera>` or `meta/` cannot redirect a write;
- `check_tree(root)` refuses a symlink, FIFO, socket or device anywhere in an output tree before a run (or a
  resume) reads or writes there; `read_regular` reads prep's own files without following a link and without
  blocking on a FIFO.

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
import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pipeline.errors import PrepError
from pipeline.text import printable

# Temp names: `.` + target name + TEMP_MARK + 24 hex digits + the target's suffix. Only a name of exactly this
# form is ever removed as a temp file (`is_temp_name`), and never one that the source holds too.
TEMP_MARK = ".prep-tmp-"
TEMP_HEX = 24
TEMP_RE = re.compile(r"\..+" + re.escape(TEMP_MARK) + "[0-9a-f]{" + str(TEMP_HEX) + r"}(?:\.[^.]*)?", re.DOTALL)
WRITE_EXIT = 3  # the exit code of a run stopped because its output cannot be written
# errno -> what it means for the output (the disk-level ones are always about the file being written)
DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system", errno.EFBIG: "file too large for the file system"}
PATH_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
               errno.EISDIR: "a folder is in the way", errno.ENOTDIR: "a file is in the way of a folder",
               errno.EEXIST: "a file is in the way", errno.ENAMETOOLONG: "name too long"}
WRITE_ERRNOS = frozenset(DISK_ERRNOS) | frozenset(PATH_ERRNOS)
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_OWN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class WriteError(PrepError):
    """An output that cannot be written: one line naming the path and the cause."""

    exit_code = WRITE_EXIT

    def __init__(self, message: str, path: str = "", errno_: int | None = None) -> None:
        super().__init__(message)
        self.path, self.errno = path, errno_

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Dask workers) intact
        return (WriteError, (str(self), self.path, self.errno))


class UnsafePathError(PrepError):
    """A symlink, FIFO, socket or device where prep would write (or read its own file): refused, one line."""

    exit_code = 2

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnsafePathError, (str(self), self.path))


# ---- naming what is in the way -------------------------------------------------------------------


def kind_of(mode: int) -> str | None:
    """What a non-regular, non-folder entry is (None for a regular file or a folder)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def _entry(path: Path | str, mode: int) -> str:
    kind = kind_of(mode) or "a file"
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            kind += f" (-> {printable(os.readlink(path))})"
    return kind


def unsafe(path: Path | str, mode: int, where: str) -> UnsafePathError:
    """`PATH is a symbolic link (-> T) in WHERE: ...` (one line, the fix included)."""
    return UnsafePathError(f"{printable(path)} is {_entry(path, mode)} in {where}: prep writes only regular files and "
                           "folders there, never through a link or into a special file; remove it, or choose "
                           "another --out", str(path))


def check_tree(root: Path, *, what: str = "the output", follow_root: bool = True) -> None:
    """Refuse (`UnsafePathError`) a symlink, FIFO, socket or device anywhere under `root` (names are read from
    the folders, no file is opened). `root` itself may be a link to a folder when `follow_root` (a path the user
    chose); a missing root passes. One walk: folders are listed, entries are not stat'ed where the folder
    listing says what they are."""
    root = Path(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) and follow_root:
        try:
            st = os.stat(root)
        except OSError:
            raise unsafe(root, os.lstat(root).st_mode, f"the place of {what}") from None
    if not stat.S_ISDIR(st.st_mode):
        if kind_of(st.st_mode) is not None:
            raise unsafe(root, st.st_mode, f"the place of {what}")
        return
    where = f"{what} {printable(root)}"
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except FileNotFoundError:  # removed meanwhile (a temp folder): nothing there to refuse
            continue
        with it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif not entry.is_file(follow_symlinks=False):
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except FileNotFoundError:  # a temp file renamed or removed meanwhile
                        continue
                    raise unsafe(entry.path, mode, where)


def check_entry(path: Path, what: str) -> None:
    """Refuse `path` when it exists as a symlink, FIFO, socket or device (a regular file or folder passes)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if kind_of(st.st_mode) is not None:
        raise unsafe(path, st.st_mode, what)


def read_regular(path: Path) -> bytes:
    """The bytes of one of prep's own files (options, plan, sidecar, lock): never through a link, never
    blocking on a FIFO; `UnsafePathError` for anything but a regular file, FileNotFoundError when missing."""
    try:
        fd = os.open(path, READ_OWN)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unsafe(path, os.lstat(path).st_mode, f"prep's files ({printable(Path(path).parent)})") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise unsafe(path, st.st_mode, f"prep's files ({printable(Path(path).parent)})")
        chunks: list[bytes] = []
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                return b"".join(chunks)
            chunks.append(block)
    finally:
        os.close(fd)


def read_regular_text(path: Path) -> str:
    return read_regular(path).decode("utf-8")


# ---- errors ----------------------------------------------------------------------------------------


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
    return f"cannot write {printable(path)}: {cause}"


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


# ---- folders ---------------------------------------------------------------------------------------


def _real_dir(p: Path, where: str) -> None:
    """`p` is a folder (made now when missing), not a link to one nor anything else."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        try:
            os.mkdir(p)
            return
        except FileExistsError:  # made meanwhile (another worker): look again
            st = os.lstat(p)
    if stat.S_ISDIR(st.st_mode):
        return
    if kind_of(st.st_mode) is not None:
        raise unsafe(p, st.st_mode, where)
    raise OSError(errno.ENOTDIR, "Not a directory (a file is in the way)", str(p))


def make_dirs(folder: Path, root: Path | None = None) -> None:
    """Make `folder` and its missing parents. Below `root` (the output folder; itself made as the user named
    it) every component must be a real folder: a symlink, FIFO, socket or device there is refused
    (`UnsafePathError`). Without `root` (a report's folder), only the components made here are checked."""
    folder = Path(os.path.abspath(folder))
    rel: Path | None = None
    if root is not None:
        root = Path(os.path.abspath(root))
        with contextlib.suppress(ValueError):
            rel = folder.relative_to(root)
    if root is not None and rel is not None:
        root.mkdir(parents=True, exist_ok=True)  # the output folder, as the user named it
        p = root
        for part in rel.parts:
            p = p / part
            _real_dir(p, f"the output {printable(root)}")
        return
    missing = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    if not missing:
        return
    if not p.is_dir():  # the nearest existing folder (a link the user made to a folder is followed)
        raise OSError(errno.ENOTDIR, f"Not a directory ({printable(p)} is a file in the way)", str(folder))
    for m in reversed(missing):
        _real_dir(m, f"the folder {printable(folder)}")


def check_writable(folder: Path, *, create: bool = True, root: Path | None = None) -> None:
    """Create `folder` (and its parents) if needed and prove a file can be written in it (a 1-byte probe,
    created exclusively, fsynced and removed): a `WriteError` now instead of a failure after the work.
    `create=False`: the folders made for the probe are removed again (nothing is left; the probe is never
    written outside `folder`)."""
    folder = Path(folder).absolute()
    created = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # deepest first
    probe = folder / f".prep-write-probe{TEMP_MARK}{uuid.uuid4().hex[:TEMP_HEX]}"
    made = False
    try:
        with writing(folder):
            if os.path.lexists(folder) and not folder.is_dir():
                raise OSError(errno.ENOTDIR, "Not a directory (a file is in the way)", str(folder))
            make_dirs(folder, root)
        with writing(folder, probe):
            fd = os.open(probe, NEW_FILE, 0o600)
            made = True
            try:
                os.write(fd, b"\0")
                os.fsync(fd)
            finally:
                os.close(fd)
    except WriteError:
        create = False  # leave no empty folders behind for an output that cannot be written
        raise
    finally:
        if made:
            with contextlib.suppress(OSError):
                probe.unlink()
        if not create:
            for p in created:
                with contextlib.suppress(OSError):
                    p.rmdir()


def check_target(path: Path) -> None:
    """`path` can be written as a file: not a folder, not a symlink or special file (a report is replaced,
    never written through a link), and its folder writable (`check_writable`)."""
    path = Path(path)
    check_entry(path, "the place of the report")
    if path.is_dir():
        raise WriteError(f"cannot write {printable(path)}: {PATH_ERRNOS[errno.EISDIR]} (it is a folder; name a file)",
                         str(path), errno.EISDIR)
    check_writable(path.parent)


# ---- files -----------------------------------------------------------------------------------------


def temp_path_for(path: Path) -> Path:
    """The temp name of `path` (beside it): `.NAME.prep-tmp-<24 hex>[.ext]` (long names shortened)."""
    name = path.name if len(path.name) <= 120 else path.name[:120]
    return path.with_name(f".{name}{TEMP_MARK}{uuid.uuid4().hex[:TEMP_HEX]}{path.suffix[:16]}")


def is_temp_name(name: str) -> bool:
    """A name of prep's temp files (exactly `temp_path_for`'s form)."""
    return TEMP_RE.fullmatch(name) is not None


def create_temp(path: Path, root: Path | None = None, tmp: Path | None = None) -> Path:
    """Make `path`'s folder (`make_dirs`) and create its temp file (`tmp`, else a new temp name), new and
    empty (`O_EXCL | O_NOFOLLOW`)."""
    make_dirs(path.parent, root)
    tmp = temp_path_for(path) if tmp is None else tmp
    os.close(os.open(tmp, NEW_FILE, 0o666))
    return tmp


def commit(tmp: Path, path: Path, *, fsync: bool = True) -> None:
    """Rename a finished temp file onto `path` (after an fsync): a link or special file at `path` is
    replaced, never written through; a folder there is an error."""
    if fsync:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise OSError(errno.EISDIR, "Is a directory", str(path))
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path, root: Path | None = None, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a new temp path to write (created empty, exclusively, not through a link); on success fsync it
    and rename it to `path`; on error remove it. `root`: the output folder `path` is in (every folder below it
    must be a real folder). A failed write (WRITE_ERRNOS) is raised as `WriteError` naming `path`."""
    path = Path(path)
    name = temp_path_for(path)
    tmp: Path | None = None
    try:
        with writing(path, name):
            tmp = create_temp(path, root, name)
            yield tmp
            commit(tmp, path, fsync=fsync)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_bytes(path: Path, data: bytes, root: Path | None = None) -> None:
    with atomic_path(path, root) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def write_text(path: Path, text: str, root: Path | None = None) -> None:
    write_bytes(path, text.encode("utf-8"), root)


def write_json(path: Path, obj: Any, *, indent: int | None = 4, root: Path | None = None) -> None:
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + ("\n" if indent else ""), root)


def write_jsonl(path: Path, rows: list[Any], root: Path | None = None) -> None:
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), root)


def write_lerobot_json(path: Path, obj: Any, root: Path | None = None) -> None:
    """As LeRobot's `write_json` (indent 4, UTF-8 as is, no final newline)."""
    write_text(path, json.dumps(obj, indent=4, ensure_ascii=False), root)


class LineWriter:
    """A JSON-lines file written line by line under a temp name (streaming: nothing is held); renamed into
    place by `close()` only, removed by `abort()`. As a context manager: closed on success, aborted on error."""

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        with writing(path):
            make_dirs(path.parent, root)
            self.tmp = temp_path_for(path)
            fd = os.open(self.tmp, NEW_FILE, 0o666)
        self.fh: IO[str] | None = os.fdopen(fd, "w", encoding="utf-8")  # closed in close/abort

    def write_json_line(self, obj: Any) -> None:
        assert self.fh is not None
        self.fh.write(json.dumps(obj, ensure_ascii=False) + "\n")  # as jsonlines (LeRobot's .jsonl) writes it

    def close(self) -> None:
        if self.fh is None:
            return
        with writing(self.path, self.tmp):
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            self.fh = None
            commit(self.tmp, self.path, fsync=False)
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


def create_new(path: Path, root: Path | None = None) -> Path:
    """`path` made an empty new regular file of prep's (a spool a writer then opens by name): an old regular
    file there is removed first; a link or special file is refused (`UnsafePathError`)."""
    with writing(path):
        make_dirs(path.parent, root)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.EISDIR, "Is a directory", str(path))
                raise unsafe(path, st.st_mode, f"prep's files ({printable(path.parent)})")
            os.unlink(path)
        os.close(os.open(path, NEW_FILE, 0o666))
    return path


def remove_stale_temps(root: Path, *, source: Path | None = None, recursive: bool = True) -> int:
    """Remove the temp files a killed run left under `root` (regular files named exactly as `temp_path_for`
    names them; links are not followed); with `source`, a file the source holds at the same place is kept
    (the copy of a source file whose name happens to look like a temp name); `recursive=False`: only the files
    directly in `root`. Returns how many."""
    count = 0
    if not os.path.isdir(root) or os.path.islink(root):
        return 0
    for dirpath, dirs, names in os.walk(root):
        if not recursive:
            dirs.clear()
        for name in names:
            if not is_temp_name(name):
                continue
            p = Path(dirpath) / name
            if source is not None and os.path.lexists(source / p.relative_to(root)):
                continue
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISREG(os.lstat(p).st_mode):
                    p.unlink()
                    count += 1
    return count
