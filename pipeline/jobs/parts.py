"""Completion records: how a killed scan or verify resumes (datatrove-style).

A job runs in a work folder beside its output (`<output>.parts/`, e.g. `m.manifest.json.parts/`):

- `plan.json`: the fingerprint of the plan (job, record format, dataset root, the bytes of its metadata,
  the options). A folder whose fingerprint differs (another dataset, changed metadata, other options) is
  cleared before the run starts, so its records are never mixed with this plan's;
- `part-<first>-<end>.jsonl.gz`: one per finished batch, written atomically as the batch is handed to the
  reduce: one JSON line per unit of the plan positions [first, end) holding that unit's results;
- the job's own files while it runs (e.g. the per-episode table being written).

A report put in an object store (`--out s3://BUCKET/KEY.json`) keeps the same records as objects below
`<report>.parts/` under the store's lock `<report>.parts.lock` (`StoreWorkFolder`): a killed run resumes from any
machine; the job's own files are in a local temp folder, and the report's files are put beside it, the report last
(`put_report`).

A rerun with the same arguments reads the records of the finished batches in their place in the plan and
sends only the other units to the engine, so its outputs equal an uninterrupted run's. A batch whose task
failed (worker lost beyond the retries) is not recorded: a rerun tries it again. The plan must be
deterministic (it is: the dataset model orders episodes by index). The folder is removed once the job has
published its outputs. Files changed on disk between the kill and the rerun are not noticed: delete the
folder (or pass `resume=False`) to start over.

The work folder, its lock (`<output>.parts.lock`) and the report beside them are prep's own: a symlink, FIFO,
socket or device in their place (or inside the folder) is refused with one line before anything is read,
cleared or written (`pipeline.atomic.check_tree`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import posixpath
import re
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

from pipeline import __version__, atomic
from pipeline.dataset import Dataset
from pipeline.jobs.output import check_locations, check_outside, command_line
from pipeline.lock import exclusive_lock
from pipeline.runner import Batch, Engine
from pipeline.storage import Location, MissingFile, StorePath, publish_tree
from pipeline.text import printable

U = TypeVar("U")
R = TypeVar("R")
W = TypeVar("W")  # how a work folder names one of its records

PLAN_FILE = "plan.json"
PART_RE = re.compile(r"part-(\d{12})-(\d{12})\.jsonl\.gz")
RECORD_BYTES = 1 << 30  # a completion record object read back: at most this many (gzipped) bytes


def work_folder_for(output: Path) -> Path:
    output = Path(output).absolute()
    return output.with_name(output.name + ".parts")


def check_report_place(sources: Iterable[Path | None], output: Path, table: Path, *, default: bool = False) -> None:
    """Before a report job reads or writes anything: the report is outside every source (the source is
    read-only), and the report, its table, its work folder and the folder's lock are not symlinks, FIFOs,
    sockets or devices (one line naming the first)."""
    output = Path(output).absolute()
    check_outside(sources, output, default=default)
    work = work_folder_for(output)
    for path in (output, table, work.with_name(work.name + ".lock")):
        atomic.check_entry(path, f"the place of the report {printable(output)}")
    atomic.check_tree(work, what="the work folder", follow_root=False)


def fingerprint(job: str, record_version: int, ds: Dataset, **options: Any) -> str:
    """What the records of a plan depend on: a changed dataset or option gives another fingerprint."""
    doc = {"job": job, "records": record_version, "prep": __version__, "root": str(ds.root),
           "info": ds.info, "metadata": ds.metadata_digest, "episodes": len(ds.episodes), "options": options}
    return hashlib.blake2b(json.dumps(doc, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def write_lines(gz: gzip.GzipFile, lines: Iterable[Any]) -> None:
    """A completion record's lines into its gzip stream: one compact JSON document per unit, UTF-8."""
    for obj in lines:
        gz.write((json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8"))


def read_lines(gz: gzip.GzipFile) -> Iterator[Any]:
    """The units of a completion record, from its gzip stream (`write_lines`)."""
    for line in io.TextIOWrapper(gz, encoding="utf-8"):
        yield json.loads(line)


class _Records(Generic[W]):
    """What both work folders do alike (`WorkFolder`, `StoreWorkFolder`): hold the lock (`lock`, taken here: a
    second run on the same output is refused while this one lives), keep or clear the records by the plan's
    fingerprint, list and write the records by position, release once. `W` names a record: a local path, or an
    object's relative path in its store. Each kind says how to read the plan (`_plan_data`), list the folder
    (`_listing`), put a record (`_put_record`) and what else its release drops (`_released_lock`)."""

    path: Path  # the job's own files while it runs
    shown: str  # the folder as messages name it

    def __init__(self, fingerprint: str, lock: contextlib.AbstractContextManager[Any]) -> None:
        self.fingerprint = fingerprint
        self._released = False
        self._lock = lock
        self._lock.__enter__()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def _releasing_on_error(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.release()
            raise

    def _stale(self, resume: bool) -> bool:
        """Whether the records present are not this plan's (or `resume=False`): clear them and write the plan."""
        if not resume:
            return True
        try:
            value = json.loads(self._plan_data()).get("fingerprint")
        except (MissingFile, OSError, ValueError, AttributeError, RecursionError):  # no plan, or not prep's
            return True
        return not isinstance(value, str) or value != self.fingerprint

    def _plan_document(self) -> bytes:
        return json.dumps({"fingerprint": self.fingerprint}).encode()

    def records(self) -> list[tuple[int, int, W]]:
        """(first, end, record) of every completion record, by position."""
        found = ((PART_RE.fullmatch(name), where) for name, where in self._listing())
        return sorted((int(m.group(1)), int(m.group(2)), where) for m, where in found if m)

    def write_record(self, first: int, lines: list[Any]) -> None:
        self._put_record(f"part-{first:012d}-{first + len(lines):012d}.jsonl.gz", lines)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with contextlib.suppress(Exception):
            self._lock.__exit__(None, None, None)
        self._released_lock()

    def _plan_data(self) -> str | bytes:
        raise NotImplementedError

    def _listing(self) -> Iterator[tuple[str, W]]:
        """(name, record) of each file directly in the folder."""
        raise NotImplementedError

    def _put_record(self, name: str, lines: list[Any]) -> None:
        raise NotImplementedError

    def _released_lock(self) -> None:
        """After the lock is let go (once): nothing more for a local folder."""


class WorkFolder(_Records[Path]):
    """The work folder of one job run; `resume=False` (or another fingerprint) starts it empty."""

    def __init__(self, path: Path, *, fingerprint: str, resume: bool = True) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.shown = printable(self.path)
        atomic.check_tree(self.path, what="the work folder", follow_root=False)  # before the lock is taken
        super().__init__(fingerprint, exclusive_lock(self.lock_path, f"work folder {self.shown}",
                                                     command=command_line()))
        with self._releasing_on_error():
            atomic.check_tree(self.path, what="the work folder", follow_root=False)  # as it is under the lock
            stale = self._stale(resume)
            if stale and self.path.exists():
                shutil.rmtree(self.path)
            atomic.make_dirs(self.path)
            atomic.remove_stale_temps(self.path)
            if stale:
                atomic.write_bytes(self.path / PLAN_FILE, self._plan_document(), root=self.path)

    def _plan_data(self) -> str:
        return atomic.read_regular_text(self.path / PLAN_FILE)

    def _listing(self) -> Iterator[tuple[str, Path]]:
        for p in self.path.iterdir() if self.path.is_dir() else ():
            if p.is_file() and not p.is_symlink():
                yield p.name, p

    def _put_record(self, name: str, lines: list[Any]) -> None:
        with atomic.atomic_path(self.path / name, self.path) as tmp, gzip.open(tmp, "wb", compresslevel=1) as gz:
            write_lines(gz, lines)

    @staticmethod
    def read_record(path: Path | str) -> Iterator[Any]:
        with gzip.open(path, "rb") as gz:
            yield from read_lines(gz)

    def remove(self) -> None:
        """The outputs are published: drop the records (and the lock)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


class StoreWorkFolder(_Records[str]):
    """The work folder of a report put in an object store (`--out s3://BUCKET/KEY.json`): its completion records are
    objects below `<report>.parts/` (`plan.json`, `part-<first>-<end>.jsonl.gz`, each put whole), so a killed run
    resumes from any machine as a local one resumes from its folder; they are written by the one run that holds
    `<report>.parts.lock` (the store's conditional-create lock, as an object output's `prep/output.lock`). The
    job's own files while it runs (the per-episode table) are in a local temp folder, `path`, removed with it."""

    def __init__(self, report: StorePath, *, fingerprint: str, resume: bool = True) -> None:
        self.report = report
        self.store = report.store
        self.rel = f"{report.rel}.parts"
        self.shown = printable(f"{report.url}.parts/")
        super().__init__(fingerprint, self.store.lock(f"{self.rel}.lock", f"the report {printable(report.url)}",
                                                      command=command_line()))
        self.path = Path(tempfile.mkdtemp(prefix="prep-parts-"))
        with self._releasing_on_error():
            if self._stale(resume):
                self._clear()
                self.store.write_bytes(f"{self.rel}/{PLAN_FILE}", self._plan_document())

    def _plan_data(self) -> bytes:
        return self.store.read_bytes(f"{self.rel}/{PLAN_FILE}", limit=1 << 16)

    def _objects(self) -> list[str]:
        return [rel for rel, _st in self.store.iter_files(self.rel)]

    def _clear(self) -> None:
        for rel in self._objects():
            self.store.remove(rel)

    def _listing(self) -> Iterator[tuple[str, str]]:
        return ((posixpath.basename(rel), rel) for rel in self._objects() if posixpath.dirname(rel) == self.rel)

    def _put_record(self, name: str, lines: list[Any]) -> None:
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1, mtime=0) as gz:
            write_lines(gz, lines)
        self.store.write_bytes(f"{self.rel}/{name}", buf.getvalue())

    def read_record(self, rel: Path | str) -> Iterator[Any]:
        data = self.store.read_bytes(str(rel), limit=RECORD_BYTES, what="completion record")
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
            yield from read_lines(gz)

    def _released_lock(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def remove(self) -> None:
        """The report is published: drop the records, then the lock."""
        self._clear()
        self.release()


def work_folder(report: Path | StorePath, *, fingerprint: str, resume: bool = True) -> WorkFolder | StoreWorkFolder:
    """The work folder of a report: `<report>.parts/` beside a local one, or below an object (`StoreWorkFolder`)."""
    if isinstance(report, StorePath):
        return StoreWorkFolder(report, fingerprint=fingerprint, resume=resume)
    return WorkFolder(work_folder_for(report), fingerprint=fingerprint, resume=resume)


def file_location(path: StorePath) -> Location:
    """An object's own location (`s3://BUCKET/KEY` as a prefix), to compare with a source's."""
    return path.location.child(path.rel) if path.rel else path.location


def check_object_report(sources: Iterable[Location], report: StorePath) -> None:
    """Before a report job writes anything into an object store: the report (and so its table and records, which
    sit beside it) is neither inside a source nor holds one (the source is never written), and its bucket answers
    with this environment's credentials (one line naming the URL)."""
    where = file_location(report)
    for src in sources:
        check_locations(src, where)
    report.store.check_reachable()


def put_report(folder: Path, report: StorePath) -> list[str]:
    """Put the files a report job made in the local `folder` beside the object `report`, the report itself (the
    file that says the run is complete) after every other one. Returns the relative paths put, in order."""
    parent = report.parent
    return publish_tree(folder, file_location(parent) if parent.rel else parent.location, last=report.name)


def run(engine: Engine, work: WorkFolder | StoreWorkFolder | None, units: Iterable[U], stage: Callable[[U], R], *,
        on_error: Callable[[U, BaseException], R], desc: str, unit_name: str, total: int | None,
        cost_s: float | None, encode: Callable[[R], Any], decode: Callable[[Any], R],
        measure: Callable[[R], dict[str, float]] | None = None, threads: int = 1) -> Iterator[R]:
    """Each unit's result in plan order: from a completion record when one covers its position, else from
    the engine (recording each finished batch; `threads`: units of a task at once, see `Engine.map`).
    Without a work folder: the engine only, no records."""
    records: list[tuple[int, int, Any]] = list(work.records()) if work is not None else []
    done = sum(end - first for first, end, _ in records)
    if records and work is not None:
        print(f"[resume] {desc}: {done:,} {unit_name}s from {len(records):,} completion records in {work.shown}",
              file=sys.stderr, flush=True)
    pulled: deque[int] = deque()  # plan positions of the units handed to the engine, in order
    cursor = 0  # the next record that may cover a position

    def covered(k: int) -> bool:
        nonlocal cursor
        while cursor < len(records) and records[cursor][1] <= k:
            cursor += 1
        return cursor < len(records) and records[cursor][0] <= k

    def fresh() -> Iterator[U]:
        for k, unit in enumerate(units):
            if not covered(k):
                pulled.append(k)
                yield unit

    replay = iter(records)
    pending = next(replay, None)

    def replay_until(position: int | None) -> Iterator[R]:
        nonlocal pending
        while pending is not None and (position is None or pending[0] < position):
            assert work is not None
            for obj in work.read_record(pending[2]):
                yield decode(obj)
            pending = next(replay, None)

    todo = None if total is None else total - done
    batch: Batch[U, R]
    for batch in engine.map(stage, fresh(), on_error=on_error, desc=desc, unit_name=unit_name, total=todo,
                            cost_s=cost_s, measure=measure, threads=threads):
        positions = [pulled.popleft() for _ in batch.units]
        if work is not None and not batch.failed:
            _record(work, positions, batch.results, encode)
        for k, result in zip(positions, batch.results, strict=True):
            yield from replay_until(k)
            yield result
    yield from replay_until(None)


def _record(work: WorkFolder | StoreWorkFolder, positions: list[int], results: list[Any],
            encode: Callable[[Any], Any]) -> None:
    """One record per run of consecutive positions (a batch is one run unless it straddles a record)."""
    start = 0
    for i in range(1, len(positions) + 1):
        if i == len(positions) or positions[i] != positions[i - 1] + 1:
            work.write_record(positions[start], [encode(r) for r in results[start:i]])
            start = i
