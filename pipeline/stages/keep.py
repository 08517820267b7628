"""How every stage writes an output file (reencode, convert, edit): keep it if it checks out, else write it under a
temp name, check it and rename it into place (`keep_or_write`), so that a rerun keeps exactly the files a new run
would write and a killed run never leaves a part of one under its final name.

A kept file must pass the same checks as a new one, and it must be the very file a new run would have written:
its record (`OutputRecord`, saved beside it before it was renamed into place) names what it was made by (the
unit's key), what it was made from (each source file's fingerprint) and what it is (its size and a hash of three
blocks). A record that is missing, unreadable or of another key, a source changed since (its fingerprint), or an
output cut or replaced since (its identity) means the file is written again.

Source fingerprints (`--fingerprint` of `prep reencode`; convert and edit use the default):
- "ctime" (default): size, mtime, the inode's change time and a hash of three 64 KiB blocks. Any write to the
  file (and chmod, chown, a new hard link, a rename) moves its ctime, which no user tool can set back (cp -p,
  rsync -a and touch -r restore the mtime only): a change with size and mtime kept is caught for one stat
  and three small reads per kept file. A copy of the corpus to another place looks changed (all redone).
- "content": a BLAKE2b of every byte, recorded when the file is first written and recomputed for every kept
  file at resume (a full read of the kept sources): catches any change of content and survives a copy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.checks import Status
from pipeline.errors import EpisodeError
from pipeline.formats.write import PREP_DIR
from pipeline.storage import (
    HEADER_BLOCK,
    STREAM_BLOCK,
    Output,
    Source,
    StorePath,
    as_file,
    output_file,
    output_folder,
    read_output_text,
    write_output_bytes,
)

FINGERPRINTS = ("ctime", "content")
DEFAULT_FINGERPRINT = "ctime"
CHEAP_KEYS = ("bytes", "blake2b")
FINGERPRINT_BLOCK = 65_536  # bytes hashed at the start, middle and end of a file
CONTENT_CHUNK = 1 << 20
RECORDS_DIR = f"{PREP_DIR}/records"  # convert's and edit's records: <out>/prep/records/<rel>.json


def content_hash(path: Source) -> str:
    """BLAKE2b (16 bytes) of every byte of the file (streamed through its store)."""
    h = hashlib.blake2b(digest_size=16)
    with as_file(path).open(block_size=STREAM_BLOCK) as fh:
        while block := fh.read(CONTENT_CHUNK):
            h.update(block)
    return h.hexdigest()


def version_keys(path: StorePath) -> dict[str, Any]:
    """What says the bytes of a file may have changed without its size and mtime: a local file's inode change
    time (`ctime_ns`), an object's ETag (`etag`)."""
    st = path.stat()
    if path.location.is_local:  # the local store's version: "<inode>:<ctime_ns>"
        return {"ctime_ns": int(st.version.rpartition(":")[2])}
    return {"ctime_ns": None, "etag": st.version}


def source_fingerprint(path: Source, *, content: bool = True, content_of: Source | None = None) -> dict[str, Any]:
    """Size, mtime, inode change time (ctime; an object's ETag), a hash of three blocks and (`content`) of every
    byte: what a rerun compares (`fingerprint_matches`) to keep an output made from this very file. `content_of`:
    a local copy of the same bytes to hash in full (an object already downloaded: not fetched again)."""
    src = as_file(path)
    st = src.stat()
    h = hashlib.blake2b(digest_size=16)
    # the blocks from a local copy of the same bytes where there is one (an object already downloaded)
    with as_file(content_of if content_of is not None else src).open(block_size=HEADER_BLOCK) as fh:
        for offset in sorted({0, max(0, st.size // 2 - FINGERPRINT_BLOCK // 2),
                              max(0, st.size - FINGERPRINT_BLOCK)}):
            fh.seek(offset)
            h.update(fh.read(FINGERPRINT_BLOCK))
    fp: dict[str, Any] = {"bytes": st.size, "mtime_ns": st.mtime_ns, **version_keys(src), "blake2b": h.hexdigest()}
    if content:
        fp["content_blake2b"] = content_hash(content_of if content_of is not None else path)
    return fp


def fingerprint_matches(recorded: Any, path: Source, mode: str = DEFAULT_FINGERPRINT) -> bool:
    """Whether the source at `path` is the one `recorded` was taken of: "ctime" compares size, mtime, ctime (an
    object's ETag) and the three-block hash (no full read); "content" compares size, the three-block hash and the
    hash of every byte (mtime and ctime may differ: a copy of the same bytes matches)."""
    if not isinstance(recorded, dict):
        return False
    try:
        now = source_fingerprint(path, content=False)
    except (OSError, EpisodeError):  # the source is gone or unreadable: nothing made from it is kept
        return False
    if any(recorded.get(k) != now[k] for k in CHEAP_KEYS):
        return False
    if mode == "content":
        return isinstance(recorded.get("content_blake2b"), str) and recorded["content_blake2b"] == content_hash(path)
    return recorded.get("mtime_ns") == now["mtime_ns"] and recorded.get("ctime_ns") == now["ctime_ns"] and \
        recorded.get("etag") == now.get("etag")


def file_identity(path: Source) -> dict[str, int | str]:
    """What an output file is, for its record: its size and the hash of three blocks (a file cut short, padded or
    replaced since it was written is not the recorded one)."""
    fp = source_fingerprint(path, content=False)
    return {k: fp[k] for k in CHEAP_KEYS}


def _as_json(value: Any) -> Any:
    """`value` as JSON reads it back (tuples become lists), so that a recorded key compares equal."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """The record of one output file (`path`): the unit's `key` (what else the file depends on: settings, spans,
    episodes), the fingerprints of its `sources` (compared by `mode`; `content`: also the hash of every byte,
    so that a later run may resume by content) and the file's identity."""

    path: Output
    key: Any
    sources: tuple[Source, ...] = ()
    mode: str = DEFAULT_FINGERPRINT
    content: bool = False
    root: Path | None = None  # the output folder the record is in (no folder below it may be a link)

    def matches(self, output: Output) -> bool:
        """The record says `output` is the file written for this key from these very sources."""
        try:
            doc = json.loads(read_output_text(self.path))
        except (OSError, ValueError, RecursionError):
            return False
        if not isinstance(doc, dict) or doc.get("key") != _as_json(self.key):
            return False
        sources = doc.get("sources")
        if not isinstance(sources, list) or len(sources) != len(self.sources):
            return False
        if not all(fingerprint_matches(fp, src, self.mode) for fp, src in zip(sources, self.sources, strict=True)):
            return False
        try:
            return bool(doc.get("output") == file_identity(output))
        except (OSError, EpisodeError):
            return False

    def save(self, output: Output, *, copy_of: Source | None = None, **extra: Any) -> None:
        """Record `output` (the temp file about to be renamed into place) with `extra` fields. Renamed into place,
        not fsynced: a record lost to a power loss only means the file is written again. `copy_of`: `output` holds
        the bytes of this one source (a server-side copy): its blocks are hashed from `output`, which its check
        has just read, not fetched from the source again."""
        sources = [source_fingerprint(s, content=self.content,
                                      content_of=output if copy_of is not None and s == copy_of else None)
                   for s in self.sources]
        doc = {"key": _as_json(self.key), "sources": sources, "output": file_identity(output), **extra}
        write_output_bytes(self.path, json.dumps(doc).encode("utf-8"), self.root, fsync=False)


def record_of(out_root: str | Path, rel: str, key: Any, sources: Sequence[Source]) -> OutputRecord:
    """The record of the output `<out_root>/<rel>` (convert, edit): `<out_root>/prep/records/<rel>.json`."""
    return OutputRecord(output_file(out_root, f"{RECORDS_DIR}/{rel}.json"), key, tuple(sources),
                        root=output_folder(out_root))


def keep_or_write(dst: Output, root: Path | None, write: Callable[[Path], object],
                  check: Callable[[Path], str | None], *, record: OutputRecord | None = None,
                  keep: Callable[[Any], bool] | None = None, saved: Callable[[Path], None] | None = None,
                  episode: int | None = None, blame: Path | StorePath | None = None) -> Status:
    """`Status.KEPT` when `dst` is a file whose `record` (if any) says it is this very output and that passes
    `keep` (default: `check`, the checks of a new file); else `Status.WRITTEN`: `write(tmp)` under a temp name beside
    `dst`, `check(tmp)` (a reason refuses it: `EpisodeError(episode, blame or dst, reason)`, and the temp file is
    removed), `saved(tmp)` (the stage's own sidecar) and the record saved, then the rename.

    An object-store `dst` (a `StorePath`): the same order, with the temp file in the local temp folder and the
    rename an upload (the object appears whole, after its sidecar and record); `keep` and `check` of a kept file
    read the object through its store."""
    if dst.is_file() and (record is None or record.matches(dst)) and \
            (keep(dst) if keep is not None else check(dst) is None):  # type: ignore[arg-type]
        return Status.KEPT
    # an object's temp file is put whole by its store's writer on the way out, after the sidecar and the record
    with (dst.store.writer(dst.rel) if isinstance(dst, StorePath) else atomic.atomic_path(dst, root)) as tmp:
        write(tmp)
        reason = check(tmp)
        if reason is not None:
            raise EpisodeError(episode, str(blame) if blame is not None else str(dst), reason)
        if saved is not None:
            saved(tmp)
        if record is not None:
            record.save(tmp)
    return Status.WRITTEN


def keep_or_copy(dst: StorePath, src: StorePath, check: Callable[[Any], str | None], *,
                 record: OutputRecord | None = None, keep: Callable[[Any], bool] | None = None,
                 episode: int | None = None, blame: Path | StorePath | None = None) -> Status:
    """A source file the output keeps whole, where source and output are one object store: `Status.KEPT` as in
    `keep_or_write`; else copied by the store itself (a server-side `CopyObject`: no byte passes through this
    process), then `check`ed where it lies and recorded (the source's blocks hashed from the copy, which the check
    has just read: the source is never fetched). A copy that fails its check, or whose record cannot be put, is
    removed, so no unchecked file stays under its final name without a record (a rerun copies it again)."""
    if dst.is_file() and (record is None or record.matches(dst)) and \
            (keep(dst) if keep is not None else check(dst) is None):
        return Status.KEPT
    store = dst.store
    store.copy_in(src.store, src.rel, dst.rel)
    try:
        reason = check(dst)
        if reason is not None:
            raise EpisodeError(episode, str(blame) if blame is not None else str(dst), reason)
        if record is not None:
            record.save(dst, copy_of=src)
    except BaseException:
        store.remove(dst.rel)
        raise
    return Status.WRITTEN
