"""The storage seam's types: `Location`, `Stat`, `Store` and the errors (see `pipeline.storage`). The
location-to-store factory is `pipeline.storage.open_store`, installed here when the package loads (`_factory`),
so that this module imports none of the stores."""


from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from pipeline.errors import EpisodeError, PrepError
from pipeline.text import printable

LOCAL = "file"
HEADER_BLOCK = 64 << 10  # an object store's read size for a container header or a parquet footer: a few GETs
STREAM_BLOCK = 8 << 20  # ... for a whole file streamed (decoded, copied): about one GET per block
EXACT_READS = 0  # ... for a reader that asks for few ranges, each sized to what it needs (the mp4 header boxes,
# pipeline.video.mp4header): every read is one ranged GET of exactly its bytes, nothing cached or read ahead
OBJECT_SCHEMES = ("s3", "gs", "az", "hf")
TESTED_SCHEMES = (LOCAL, "s3")  # the others go through fsspec untested (docs/storage.md)
URL_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)

# --storage-option: what the environment cannot say, per location (a second endpoint for the output, an
# anonymous public bucket, path-style addressing). Credentials are never options.
OPTION_KEYS: Mapping[str, str] = {
    "endpoint_url": "the object store's endpoint for this location (else AWS_ENDPOINT_URL[_S3])",
    "anon": "true: read a public bucket without credentials",
    "requester_pays": "true: the requester pays for the reads",
    "addressing_style": "path | virtual | auto: how bucket names are put in requests",
    "region": "the bucket's region (else AWS_REGION / AWS_DEFAULT_REGION / ~/.aws/config)",
    "profile": "a profile of ~/.aws/config and ~/.aws/credentials (else AWS_PROFILE)",
}
SECRET_WORDS = re.compile(r"(secret|token|password|passwd|credential|session|private|access_key|^key$)", re.I)


_factory: Callable[[Location], Store] | None = None  # pipeline.storage.open_store


class StorageError(PrepError):
    """A location that cannot be used: one line naming it and what to set or change (exit 2)."""

    exit_code = 2


class FileProblem(StorageError, EpisodeError):
    """One file of a dataset that cannot be read as a file: an `EpisodeError` (the stages record it as the
    episode's failure: `path`, the full path or URL, and `message`, the reason) whose episode the caller knows."""

    def __init__(self, path: str, reason: str) -> None:
        EpisodeError.__init__(self, None, path, reason)


class MissingFile(FileProblem):
    """A file the dataset names is not there."""

    def __init__(self, url: str, rel: str, what: str = "file") -> None:
        super().__init__(join_url(url, rel), f"missing {what}")


class NotAFile(FileProblem):
    """Something that is not a regular file where a file is expected (a folder, a FIFO, a device)."""

    def __init__(self, url: str, rel: str, kind: str, what: str = "file") -> None:
        super().__init__(join_url(url, rel), f"{what} is not a regular file ({kind})")


class OutsideRoot(FileProblem):
    """A path, or a symlink, that leaves the dataset (or, for a hub snapshot, its cache repository folder).
    `path`: the path as shown (default: the URL joined with `rel`)."""

    def __init__(self, url: str, rel: str, why: str, *, path: str | None = None) -> None:
        super().__init__(path or join_url(url, rel), why)


@dataclass(frozen=True)
class Stat:
    """What a store says of one file. `version` changes whenever the bytes may have changed: a local file's
    inode and ctime (a write with size and mtime put back still changes it), an object's ETag."""

    size: int
    mtime_ns: int
    version: str


def glob_match(parts: list[str], pattern: list[str]) -> bool:
    """Whether path parts match glob pattern parts (`**` matches any number of parts, `*` and `?` within one)."""
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        return any(glob_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and glob_match(parts[1:], pattern[1:])


@dataclass(frozen=True)
class Entry:
    """One name below a root as a walk of it sees it (`Store.iter_entries`): `stat` of what it names (None: not
    a regular file, or a link to nothing); `link`: a symbolic link that is not one of the dataset's own files
    (in a plain folder every link; a hub snapshot's links into its blobs are its files, not links); `inside`:
    such a link points inside the dataset (the store reads through it); `real`: the resolved local path (None
    in an object store)."""

    rel: str
    stat: Stat | None
    link: bool = False
    inside: bool = True
    real: str | None = None


def join_url(url: str, rel: str) -> str:
    return url if not rel else f"{url.rstrip('/')}/{rel}"


def clean_rel(rel: str) -> str:
    """`rel` as a normalised relative POSIX path; a path that leaves its root (`..`, absolute) raises ValueError."""
    if rel in ("", "."):
        return ""
    norm = posixpath.normpath(rel)
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"path {rel!r} leaves its root")
    return norm


@dataclass(frozen=True)
class Location:
    """Where one dataset, output or report folder lives. `root`: an absolute local path, or `BUCKET/PREFIX`
    (no scheme, no trailing slash) in an object store. `link_root`: local only, the folder inside which a
    symlink may point (the dataset itself; a hub snapshot's cache repository folder). `options`: sorted
    non-secret storage options (`OPTION_KEYS`)."""

    scheme: str
    root: str
    link_root: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def is_local(self) -> bool:
        return self.scheme == LOCAL

    @property
    def url(self) -> str:
        return self.root if self.is_local else f"{self.scheme}://{self.root}"

    @property
    def shown(self) -> str:
        return printable(self.url)

    def __str__(self) -> str:
        return self.url

    @property
    def path(self) -> Path:
        """The local folder (`StorageError` for an object-store location)."""
        if not self.is_local:
            raise StorageError(f"{self.shown} is not a local folder")
        return Path(self.root)

    @property
    def name(self) -> str:
        return posixpath.basename(self.root.rstrip("/")) or self.root

    def child(self, rel: str) -> Location:
        """The location `rel` below this one (same store, options kept; a child's links may point only inside
        the child, except below a hub snapshot)."""
        rel = clean_rel(rel)
        if not rel:
            return self
        root = os.path.join(self.root, rel) if self.is_local else f"{self.root}/{rel}"
        link_root = self.link_root if self.link_root and self.link_root != self.root else None
        return Location(self.scheme, root, link_root or (root if self.is_local else None), self.options)

    def parent(self) -> Location:
        root = os.path.dirname(self.root) if self.is_local else self.root.rpartition("/")[0] or self.root
        return Location(self.scheme, root, root if self.is_local else None, self.options)

    def same_store(self, other: Location) -> bool:
        """Both in one store: one filesystem, or one object-store endpoint and bucket (a server-side copy works)."""
        if self.scheme != other.scheme or self.options != other.options:
            return False
        return self.is_local or self.root.split("/", 1)[0] == other.root.split("/", 1)[0]

    def contains(self, other: Location) -> bool:
        """`other` is this location or below it (local paths with symlinks resolved)."""
        if self.scheme != other.scheme:
            return False
        if self.is_local:
            a, b = os.path.realpath(self.root), os.path.realpath(other.root)
        else:  # one bucket unless an endpoint says otherwise (other options do not make another bucket)
            if self.endpoint() != other.endpoint():
                return False
            a, b = self.root.rstrip("/"), other.root.rstrip("/")
        return b == a or b.startswith(a.rstrip("/") + "/")

    def endpoint(self) -> str | None:
        """The object-store endpoint this location's requests go to: its option, else the environment's."""
        given = dict(self.options).get("endpoint_url")
        if given or self.is_local:
            return given
        return os.environ.get(f"AWS_ENDPOINT_URL_{self.scheme.upper()}") or os.environ.get("AWS_ENDPOINT_URL")

    def store(self) -> Store:
        """This location's store (one per process per location; built from the process's own environment)."""
        assert _factory is not None, "pipeline.storage sets the factory when it is imported"
        return _factory(self)


def parse_options(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--storage-option KEY=VALUE` items as sorted pairs; a key outside `OPTION_KEYS`, or one that names a
    credential, is refused in one line."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise StorageError(f"--storage-option {printable(item)}: expected KEY=VALUE")
        if SECRET_WORDS.search(key):
            raise StorageError(f"--storage-option {printable(key)}: credentials are never options (they would "
                               "reach logs and task arguments); set them in the environment (AWS_ACCESS_KEY_ID, "
                               "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or ~/.aws/credentials (AWS_PROFILE)")
        if key not in OPTION_KEYS:
            raise StorageError(f"--storage-option {printable(key)}: unknown key (choose from "
                               f"{', '.join(OPTION_KEYS)})")
        out[key] = value.strip()
    return tuple(sorted(out.items()))


class Store(ABC):
    """One location's bytes. Relative paths are POSIX, below the location; none may leave it."""

    def __init__(self, location: Location) -> None:
        self.location = location

    @property
    def url(self) -> str:
        return self.location.url

    # ---- reading ---------------------------------------------------------------------------------------------

    @abstractmethod
    def stat(self, rel: str, what: str = "file") -> Stat:
        """The file's size, mtime and version; `MissingFile`, `NotAFile`, `OutsideRoot` otherwise."""

    def check(self, rel: str) -> None:
        """Raise `OutsideRoot` when `rel` leaves the location (a local link: when it points out of it)."""
        try:
            clean_rel(rel)
        except ValueError:
            raise OutsideRoot(self.url, rel, f"path {rel!r} leaves {self.location.shown}") from None

    def exists(self, rel: str) -> bool:
        try:
            self.stat(rel)
        except MissingFile:
            return False
        return True

    def has_file(self, rel: str) -> bool:
        """Whether `rel` is a regular file (missing, a folder or a FIFO: False; a link leaving the dataset raises).
        An object store answers with one HEAD (no listing to tell a missing key from a prefix)."""
        try:
            self.stat(rel)
        except (MissingFile, NotAFile):
            return False
        return True

    def learn_folder(self, rel: str, *, absent: bool = False) -> None:  # noqa: B027 - an object store's stats come from a listing
        """Learn the stat of `rel` and of the files after it in its folder in one listing, for reads of a dataset
        no one writes meanwhile (a job's source): an object store then asks no HEAD per file (one LIST per 1,000
        files, each process for itself). A local store's stat is a syscall: nothing to learn."""

    @abstractmethod
    def open(self, rel: str, *, block_size: int | None = None, what: str = "file") -> IO[bytes]:
        """A seekable binary reader (`block_size`: an object store's read size; small for header reads;
        `EXACT_READS`: each read is one request of exactly its range, unbuffered)."""

    @contextlib.contextmanager
    def media(self, rel: str, *, block_size: int | None = None, what: str = "file") -> Iterator[str | IO[bytes]]:
        """What PyAV's `av.open` and pyarrow's readers take: a local file's checked path (read natively), or an
        open reader of an object."""
        with self.open(rel, block_size=block_size, what=what) as fh:
            yield fh

    def read_bytes(self, rel: str, *, limit: int | None = None, what: str = "file") -> bytes:
        """The whole file (`limit`: refuse a larger one, naming the size)."""
        if limit is not None:
            size = self.stat(rel, what).size
            if size > limit:
                raise StorageError(f"{what} {printable(join_url(self.url, rel))} is {size:,} bytes, over the "
                                   f"{limit:,} bytes prep reads of it")
        with self.open(rel, what=what) as fh:
            return fh.read()

    @abstractmethod
    def iter_files(self, prefix: str = "") -> Iterator[tuple[str, Stat]]:
        """Every file below `prefix`, as (relative path, stat), in sorted order; one listing, no request per
        file on an object store."""

    def iter_entries(self, prefix: str = "") -> Iterator[Entry]:
        """Every name below `prefix` (files, and in a local folder its links, FIFOs, ...), in no set order: what a
        copy of the whole tree walks. An object store's are its files (`iter_files`)."""
        for rel, st in self.iter_files(prefix):
            yield Entry(rel, st)

    def is_dir(self, rel: str) -> bool:
        """Whether `rel` is a folder (an object store: a prefix holding at least one object)."""
        rel = clean_rel(rel)
        return any(True for _ in self.iter_files(rel))

    def glob(self, prefix: str, pattern: str) -> list[str]:
        """Relative paths below `prefix` matching `pattern` (`pathlib` glob syntax: `*` within a name, `**` any
        folders), sorted by their parts as `sorted(Path.glob())` sorts them. One listing of the prefix."""
        base = clean_rel(prefix)
        want = pattern.split("/")
        found = []
        for rel, _st in self.iter_files(base):
            rest = rel[len(base) + 1:] if base else rel
            if glob_match(rest.split("/"), want):
                found.append(rel)
        return sorted(found, key=lambda r: r.split("/"))

    @abstractmethod
    @contextlib.contextmanager
    def local_copy(self, rel: str, what: str = "file") -> Iterator[Path]:
        """A local path holding the file's bytes for a program that needs one (the ffmpeg engine): a local
        file itself; an object downloaded to a temp file, deleted on exit."""

    # ---- writing ---------------------------------------------------------------------------------------------

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically: readers see the old file or the new one, never a part."""

    @abstractmethod
    @contextlib.contextmanager
    def writer(self, rel: str) -> Iterator[Path]:
        """A new local temp file to write; on success it becomes `rel` (renamed, or uploaded), on error it is
        removed and nothing appears under `rel`."""

    @abstractmethod
    def create(self, rel: str, data: bytes) -> bool:
        """Create `rel` holding `data` only if no file is there: True if this call created it."""

    @abstractmethod
    def copy_in(self, src: Store, src_rel: str, rel: str) -> None:
        """Copy a file of another store to `rel` (server-side where both are one object store)."""

    @abstractmethod
    def remove(self, rel: str) -> None:
        """Remove a file (a missing one is fine)."""

    @abstractmethod
    @contextlib.contextmanager
    def lock(self, rel: str, what: str, *, command: str | None = None) -> Iterator[str]:
        """Hold `rel` as the exclusive lock of an output for the duration (`pipeline.lock.LockedError` naming a
        live holder: its command, pid, host and start); a dead holder's lock is taken over."""

    @abstractmethod
    def refuse_if_held(self, rel: str, what: str) -> None:
        """Raise `LockedError` now when a live run holds the lock at `rel`; writes nothing."""

    def check_output(self) -> None:  # noqa: B027 - a local store refuses unsafe entries; an object store has none
        """Refuse an output tree that could redirect a write (local: a symlink, FIFO or device in it)."""

    def check_reachable(self) -> None:  # noqa: B027 - only an object store can be unreachable
        """Fail now, in one line, when the location cannot be reached or read (credentials, endpoint)."""




@dataclass(frozen=True)
class StorePath:
    """A file or folder of a store, named like a `pathlib.Path` (`/` joins, `str()` is its full path or URL,
    `name`, `parent`, `suffix`), whose reads go through its location's store: `stat`, `is_file`, `open`,
    `media`, `read_bytes`, `read_text`, `glob`. What the format, video and stage layers take where they took a
    `Path`: a local dataset's file shows (and reads) exactly as its path did; an object's shows its URL.

    It has no `__fspath__`: nothing reads it with `open()` or `os.stat()` by mistake, past the store's rules."""

    location: Location
    rel: str = ""

    def __truediv__(self, other: str | PurePosixPath) -> StorePath:
        joined = PurePosixPath(self.rel, other).as_posix() if self.rel else PurePosixPath(other).as_posix()
        return StorePath(self.location, "" if joined == "." else joined)

    def __str__(self) -> str:
        return join_url(self.location.url, self.rel)

    def __repr__(self) -> str:
        return f"StorePath({str(self)!r})"

    def __lt__(self, other: StorePath) -> bool:
        return (self.location.url, self.rel.split("/")) < (other.location.url, other.rel.split("/"))

    @property
    def url(self) -> str:
        return str(self)

    @property
    def name(self) -> str:
        return posixpath.basename(self.rel) if self.rel else self.location.name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parent(self) -> StorePath:
        return StorePath(self.location, posixpath.dirname(self.rel)) if self.rel else self

    def relative_to(self, other: StorePath) -> PurePosixPath:
        """This path below `other` (of the same location), as a relative POSIX path."""
        if other.location != self.location:
            raise ValueError(f"{self} is not in {other}")
        if not other.rel:
            return PurePosixPath(self.rel)
        return PurePosixPath(self.rel).relative_to(other.rel)

    @property
    def local(self) -> Path:
        """The local path (`StorageError` for an object): for what only a local file can be (an output)."""
        return self.location.path / self.rel if self.rel else self.location.path

    @property
    def store(self) -> Store:
        return self.location.store()

    # ---- reading through the store ----------------------------------------------------------------------

    def stat(self, what: str = "file") -> Stat:
        return self.store.stat(self.rel, what)

    def is_file(self) -> bool:
        """A regular file (a missing one, a folder or a FIFO: False; a link leaving the dataset raises)."""
        return self.store.has_file(self.rel)

    def is_dir(self) -> bool:
        return self.store.is_dir(self.rel)

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def open(self, *, block_size: int | None = None, what: str = "file") -> IO[bytes]:
        return self.store.open(self.rel, block_size=block_size, what=what)

    def media(self, *, block_size: int | None = None, what: str = "file") -> contextlib.AbstractContextManager[Any]:
        """What PyAV and pyarrow open: a local file's checked path, or an open reader (`Store.media`)."""
        return self.store.media(self.rel, block_size=block_size, what=what)

    def read_bytes(self, *, limit: int | None = None, what: str = "file") -> bytes:
        return self.store.read_bytes(self.rel, limit=limit, what=what)

    def read_text(self, encoding: str = "utf-8") -> str:
        """The file decoded, newlines translated as `Path.read_text` does (universal newlines)."""
        return self.read_bytes().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

    def glob(self, pattern: str) -> list[StorePath]:
        """The paths below this folder matching `pattern`, sorted as `sorted(Path.glob())` is."""
        return [StorePath(self.location, rel) for rel in self.store.glob(self.rel, pattern)]

    def local_copy(self, what: str = "file") -> contextlib.AbstractContextManager[Path]:
        return self.store.local_copy(self.rel, what)


# What a store is built from besides its location: a change (a test starting another server, a user's new
# profile) gets a new store or client session, never one built for the old endpoint or credentials.
ENV_PREFIXES = ("AWS_", "HF_", "GOOGLE_", "AZURE_", "PREP_S3_")


def env_key() -> int:
    """A hash of the storage environment (only the hash is kept)."""
    return hash(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))))
