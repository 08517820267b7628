"""Where datasets live: the one seam between prep and a dataset's bytes.

Everything above this package (formats, video, stages, jobs) names a file as a `Location` plus a relative POSIX
path, and asks that location's `Store` for bytes: `stat`, `open`, `media`, `read_bytes`, `iter_files` to read;
`write_bytes`, `writer`, `create`, `copy_in`, `remove` and `lock` to write. No other module opens, stats or lists
a dataset's files.

Three kinds of location, one set of promises:

- a local folder (`pipeline.storage.local`): today's write discipline (`pipeline.atomic`: no-follow, exclusive
  temp, fsync, rename) and lock (`pipeline.lock`); a symlink in a source may point only inside the dataset,
  or inside its hub-cache repository folder for a Hugging Face hub snapshot (`pipeline.storage.hub`);
- a Hugging Face hub dataset: a snapshot folder, or a repo id resolved offline from the local caches as
  `LeRobotDataset(repo_id)` and huggingface_hub find it (never downloaded);
- an object-store URL (`pipeline.storage.objects`): `s3://BUCKET/PREFIX` (tested against a real S3 server,
  moto, on loopback), `gs://`, `az://`, `hf://` through fsspec's own filesystems (not tested here).

A `Location` is a small frozen value: picklable into Dask tasks, and free of secrets (credentials come from
each process's environment and config files, as boto3 and the AWS CLI read them). `--storage-option KEY=VALUE`
takes only the settings the environment cannot say, from an allow-list (`OPTION_KEYS`); a credential there or
in a URL is refused.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from pipeline.storage import base
from pipeline.storage.base import (
    EXACT_READS,
    HEADER_BLOCK,
    LOCAL,
    OBJECT_SCHEMES,
    OPTION_KEYS,
    STREAM_BLOCK,
    TESTED_SCHEMES,
    URL_RE,
    Entry,
    FileProblem,
    Location,
    MissingFile,
    NotAFile,
    OutsideRoot,
    Stat,
    StorageError,
    Store,
    StorePath,
    clean_rel,
    join_url,
    parse_options,
)
from pipeline.text import printable

__all__ = [
    "EXACT_READS",
    "HEADER_BLOCK",
    "LOCAL",
    "OBJECT_SCHEMES",
    "OPTION_KEYS",
    "STREAM_BLOCK",
    "TESTED_SCHEMES",
    "Entry",
    "FileProblem",
    "Location",
    "MissingFile",
    "NotAFile",
    "Output",
    "OutsideRoot",
    "Root",
    "Source",
    "Stat",
    "StorageError",
    "Store",
    "StorePath",
    "as_file",
    "as_root",
    "clean_rel",
    "join_url",
    "local_location",
    "local_root",
    "open_store",
    "output_file",
    "output_folder",
    "output_location",
    "output_size",
    "parse_file",
    "parse_location",
    "parse_options",
    "publish_tree",
    "read_output_text",
    "same_bytes",
    "write_output_bytes",
]

Source = Path | StorePath  # a file to read: a store's file, or a local path (an output, a temp file) read as it is
Root = Path | str | Location | StorePath  # a dataset root: a local folder, or where one lives (`as_root`)


def parse_location(text: str | os.PathLike[str] | Location, *, revision: str | None = None,
                   options: Iterable[str] | tuple[tuple[str, str], ...] = (), what: str = "dataset",
                   resolve_repo_id: bool = True) -> Location:
    """A dataset argument as a `Location`: a URL, a local path (a hub-cache snapshot is recognised), or a hub
    repo id `OWNER/NAME` resolved offline from the local caches (`resolve_repo_id`; an existing local
    folder of that name wins)."""
    if isinstance(text, Location):
        return text
    opts = options if _is_pairs(options) else parse_options(options)  # type: ignore[arg-type]
    raw = os.fspath(text)
    m = URL_RE.match(raw)
    if m:
        return _url_location(m.group("scheme"), m.group("rest"), raw, opts, what)  # type: ignore[arg-type]
    if opts:
        raise StorageError(f"--storage-option applies to object-store URLs, not to the local {what} "
                           f"{printable(raw)}")
    from pipeline.storage import hub

    path = Path(raw).expanduser()
    if resolve_repo_id and not os.path.lexists(path) and hub.looks_like_repo_id(raw):
        return local_location(hub.resolve_repo_id(raw, revision))
    if revision is not None and hub.snapshot_repo_folder(path.absolute()) is None:
        raise StorageError(f"--revision applies to a hub repo id (OWNER/NAME), not to the folder {printable(raw)}")
    return local_location(path)


def parse_file(text: str | os.PathLike[str], *, options: Iterable[str] | tuple[tuple[str, str], ...] = (),
               what: str = "file") -> Path | StorePath:
    """One file a user names (a manifest, a report to read): an object-store URL as a `StorePath` whose location is
    its bucket (a path relative to the file, `../a/m.json`, resolves inside the bucket and no further), a local
    path as the `Path` typed (the user's own file, read as it is). `options`: `--storage-option` pairs for a URL."""
    raw = os.fspath(text)
    m = URL_RE.match(raw)
    if m is None or m.group("scheme") == LOCAL:
        return _url_location(LOCAL, m.group("rest"), raw, (), what).path if m else Path(raw)
    loc = parse_location(raw, options=options, what=what)
    bucket, _, key = loc.root.partition("/")
    if not key:
        raise StorageError(f"{what} {printable(raw)}: names a bucket, not a file (expected "
                           f"{loc.scheme}://BUCKET/KEY)")
    return StorePath(Location(loc.scheme, bucket, None, loc.options), key)


def local_location(path: Path | str) -> Location:
    from pipeline.storage import hub

    p = Path(os.path.abspath(path))
    repo = hub.snapshot_repo_folder(p)
    return Location(LOCAL, str(p), str(repo) if repo is not None else str(p))


def as_root(where: Path | str | Location | StorePath) -> StorePath:
    """A dataset root as a `StorePath`: a location's root, or a local folder under the dataset rules (links only
    inside it, or inside its hub-cache repository folder)."""
    if isinstance(where, StorePath):
        return where
    if isinstance(where, Location):
        return StorePath(where, "")
    return StorePath(local_location(where), "")


def local_root(ds: object) -> Path | None:
    """A dataset's local folder (what a report may not be written inside), None for an object store: anything
    with a `location` (an opened `Dataset`)."""
    loc: Location = ds.location  # type: ignore[attr-defined]
    return loc.path if loc.is_local else None


def as_file(source: Path | str | StorePath) -> StorePath:
    """One file to read: a `StorePath` as it is; a local path (what a job wrote, a temp file, a caller's own
    file) read as the path names it, links followed wherever they point (the dataset rules are the stores'
    of a dataset's root: `as_root(root) / rel`)."""
    if isinstance(source, StorePath):
        return source
    path = os.path.abspath(os.fspath(source))
    folder, name = os.path.split(path)
    return StorePath(Location(LOCAL, folder or "/", "/"), name)


# ---- outputs: where a writing job puts a file ----------------------------------------------------------------

Output = Path | StorePath  # an output file: a local path (`pipeline.atomic`'s discipline) or an object


def output_location(out: str | os.PathLike[str] | Location) -> Location:
    """A writing job's `--out` (a local folder or an object-store URL) as a `Location`. An object store's settings
    come from the environment (each worker's own): an output URL carries no `--storage-option`."""
    if isinstance(out, Location):
        return out
    m = URL_RE.match(os.fspath(out))
    return parse_location(out, what="output") if m else local_location(os.fspath(out))


def output_file(out_root: str | os.PathLike[str] | Location, rel: str) -> Output:
    """`<out_root>/<rel>` for a writer: a local output as a `Path` (written under `pipeline.atomic`'s rules: no-follow,
    temp name, rename), an object-store output as a `StorePath` (written by its store: one PUT, multipart when
    large, after the file is complete)."""
    loc = output_location(out_root)
    if loc.is_local:
        return Path(loc.root) / rel
    return StorePath(loc, "") / rel


def output_folder(out_root: str | os.PathLike[str] | Location) -> Path | None:
    """The local output folder no write may leave (`pipeline.atomic`'s `root`); None for an object store's."""
    loc = output_location(out_root)
    return Path(loc.root) if loc.is_local else None


def read_output_text(path: Output) -> str:
    """A small output file's text (a sidecar, a record): a local one as a regular file (no link followed)."""
    if isinstance(path, StorePath):
        return path.read_bytes().decode("utf-8")
    from pipeline import atomic

    return atomic.read_regular_text(path)


def write_output_bytes(path: Output, data: bytes, root: Path | None = None, *, fsync: bool = True) -> None:
    """Write a small output file whole: a local one under a temp name renamed into place (inside `root`), an
    object in one PUT (readers see the old object or the new one, never a part)."""
    if isinstance(path, StorePath):
        path.store.write_bytes(path.rel, data)
        return
    from pipeline import atomic

    with atomic.atomic_path(path, root, fsync=fsync) as tmp:
        tmp.write_bytes(data)


def output_size(path: Output) -> int:
    return path.stat().size if isinstance(path, StorePath) else path.stat().st_size


def publish_tree(local: Path, where: Location, *, last: str) -> list[str]:
    """Put every file below the local folder `local` (one a job made, in the temp folder) at the same place in
    `where`, the file `last` (meta/info.json) after every other: a reader that sees it sees all. Returns the
    relative paths put, in order."""
    store = where.store()
    rels = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and not p.is_symlink())
    rels.sort(key=lambda rel: rel == last)
    for rel in rels:
        src = as_file(local / rel)
        store.copy_in(src.store, src.rel, rel)
    return rels


COMPARE_BLOCK = 1 << 20


def same_bytes(a: Path | StorePath, b: Path | StorePath) -> bool:
    """Whether two files hold the same bytes (sizes first, then both read a block at a time)."""
    fa, fb = as_file(a), as_file(b)
    if fa.stat().size != fb.stat().size:
        return False
    with fa.open(block_size=STREAM_BLOCK) as x, fb.open(block_size=STREAM_BLOCK) as y:
        while True:
            bx, by = x.read(COMPARE_BLOCK), y.read(COMPARE_BLOCK)
            if bx != by:
                return False
            if not bx:
                return True


def _url_location(scheme: str, rest: str, raw: str, options: tuple[tuple[str, str], ...], what: str) -> Location:
    if scheme == LOCAL:
        return local_location(rest if rest.startswith("/") else "/" + rest)
    if scheme not in OBJECT_SCHEMES:
        raise StorageError(f"{what} {printable(raw)}: unknown scheme {scheme}:// (use a local path or "
                           f"{', '.join(s + '://' for s in OBJECT_SCHEMES)})")
    authority = rest.split("/", 1)[0]
    if "@" in authority:
        raise StorageError(f"{what} {scheme}://…@{printable(rest.split('@', 1)[1])}: credentials in a URL would "
                           "reach logs and reports; set them in the environment or ~/.aws/credentials instead")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StorageError(f"{what} {printable(raw)}: no bucket named (expected {scheme}://BUCKET/PREFIX)")
    try:
        prefix = clean_rel(prefix.strip("/"))
    except ValueError:
        raise StorageError(f"{what} {printable(raw)}: the prefix leaves the bucket ('..')") from None
    root = f"{bucket}/{prefix}" if prefix else bucket
    return Location(scheme, root, None, options)


def _is_pairs(options: object) -> bool:
    return isinstance(options, tuple) and all(isinstance(o, tuple) and len(o) == 2 for o in options)


_STORES: dict[tuple[Location, int], Store] = {}
# What a store is built from besides its location: a change (a test starting another server, a user's new
# profile) gets a new store, never one built for the old endpoint or credentials. Only a hash is kept.
MAX_STORES = 4096
_OPENING = threading.Lock()


def open_store(location: Location) -> Store:
    key = (location, 0 if location.is_local else base.env_key())
    store = _STORES.get(key)
    if store is not None:
        return store
    with _OPENING:  # threads of one task (a scan's units) share one store: its listing, client and caches
        return _open_store(location, key)


def _open_store(location: Location, key: tuple[Location, int]) -> Store:
    store = _STORES.get(key)
    if store is None:
        if location.is_local:
            from pipeline.storage.local import LocalStore

            store = LocalStore(location)
        else:
            from pipeline.storage.objects import ObjectStore

            store = ObjectStore(location)
        if len(_STORES) >= MAX_STORES:  # one per folder a caller's own files are read from: bounded
            _STORES.clear()
        _STORES[key] = store
    return store


base._factory = open_store

_INHERITED: list[list[Store]] = []  # a forked child's copies of its parent's stores: kept, never used nor closed


def _forget_stores_after_fork() -> None:
    """A forked child (a torch DataLoader worker) builds its own stores: an object store's client (s3fs: its event
    loop, its connections) is its parent's and refuses to run in another process ("not fork-safe"). The copies are
    parked, not closed: closing them would talk on the parent's connections."""
    _INHERITED.append(list(_STORES.values()))
    _STORES.clear()


os.register_at_fork(after_in_child=_forget_stores_after_fork)
