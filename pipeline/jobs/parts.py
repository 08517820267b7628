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
from typing import Any, TypeVar

from pipeline import __version__, atomic
from pipeline.dataset import Dataset
from pipeline.jobs.output import check_locations, check_outside, command_line
from pipeline.lock import exclusive_lock
from pipeline.runner import Batch, Engine
from pipeline.storage import Location, StorePath, publish_tree
from pipeline.text import printable

U = TypeVar("U")
R = TypeVar("R")

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


class WorkFolder:
    """The work folder of one job run; `resume=False` (or another fingerprint) starts it empty."""

    def __init__(self, path: Path, *, fingerprint: str, resume: bool = True) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.shown = printable(self.path)
        atomic.check_tree(self.path, what="the work folder", follow_root=False)  # before the lock is taken
        self._lock = exclusive_lock(self.lock_path, f"work folder {printable(self.path)}",
                                    command=command_line())
        self._lock.__enter__()  # a second run on the same output is refused while this one lives
        try:
            atomic.check_tree(self.path, what="the work folder", follow_root=False)  # as it is under the lock
            previous = self._read_plan()
            if self.path.exists() and (not resume or previous != fingerprint):
                shutil.rmtree(self.path)
            atomic.make_dirs(self.path)
            atomic.remove_stale_temps(self.path)
            if previous != fingerprint or not resume:
                atomic.write_json(self.path / PLAN_FILE, {"fingerprint": fingerprint}, indent=None, root=self.path)
        except BaseException:
            self.release()
            raise

    def __enter__(self) -> WorkFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _read_plan(self) -> str | None:
        try:
            value = json.loads(atomic.read_regular_text(self.path / PLAN_FILE)).get("fingerprint")
        except (OSError, ValueError, AttributeError, RecursionError):
            return None
        return value if isinstance(value, str) else None

    def records(self) -> list[tuple[int, int, Path]]:
        """(first, end, file) of every completion record, by position."""
        out = []
        for p in self.path.iterdir() if self.path.is_dir() else ():
            m = PART_RE.fullmatch(p.name)
            if m and p.is_file() and not p.is_symlink():
                out.append((int(m.group(1)), int(m.group(2)), p))
        return sorted(out)

    def write_record(self, first: int, lines: list[Any]) -> None:
        end = first + len(lines)
        path = self.path / f"part-{first:012d}-{end:012d}.jsonl.gz"
        with atomic.atomic_path(path, self.path) as tmp, gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as fh:
            for obj in lines:
                fh.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")

    @staticmethod
    def read_record(path: Path | str) -> Iterator[Any]:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)

    def release(self) -> None:
        with contextlib.suppress(Exception):
            self._lock.__exit__(None, None, None)

    def remove(self) -> None:
        """The outputs are published: drop the records (and the lock)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


class StoreWorkFolder:
    """The work folder of a report put in an object store (`--out s3://BUCKET/KEY.json`): its completion records are
    objects below `<report>.parts/` (`plan.json`, `part-<first>-<end>.jsonl.gz`, each put whole), so a killed run
    resumes from any machine as a local one resumes from its folder; they are written by the one run that holds
    `<report>.parts.lock` (the store's conditional-create lock, as an object output's `prep/output.lock`). The
    job's own files while it runs (the per-episode table) are in a local temp folder, `path`, removed with it."""

    def __init__(self, report: StorePath, *, fingerprint: str, resume: bool = True) -> None:
        self.report = report
        self.store = report.store
        self.rel = f"{report.rel}.parts"
        self.fingerprint = fingerprint
        self.shown = printable(f"{report.url}.parts/")
        self._released = False
        self._lock = self.store.lock(f"{self.rel}.lock", f"the report {printable(report.url)}",
                                     command=command_line())
        self._lock.__enter__()  # a second run on the same report is refused while this one lives
        self.path = Path(tempfile.mkdtemp(prefix="prep-parts-"))
        try:
            if not resume or self._read_plan() != fingerprint:
                self._clear()
                self.store.write_bytes(f"{self.rel}/{PLAN_FILE}", json.dumps({"fingerprint": fingerprint}).encode())
        except BaseException:
            self.release()
            raise

    def __enter__(self) -> StoreWorkFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _read_plan(self) -> str | None:
        from pipeline.storage import MissingFile

        try:
            value = json.loads(self.store.read_bytes(f"{self.rel}/{PLAN_FILE}", limit=1 << 16)).get("fingerprint")
        except (MissingFile, OSError, ValueError, AttributeError, RecursionError):
            return None
        return value if isinstance(value, str) else None

    def _objects(self) -> list[str]:
        return [rel for rel, _st in self.store.iter_files(self.rel)]

    def _clear(self) -> None:
        for rel in self._objects():
            self.store.remove(rel)

    def records(self) -> list[tuple[int, int, str]]:
        """(first, end, object) of every completion record, by position."""
        out = []
        for rel in self._objects():
            m = PART_RE.fullmatch(posixpath.basename(rel))
            if m and posixpath.dirname(rel) == self.rel:
                out.append((int(m.group(1)), int(m.group(2)), rel))
        return sorted(out)

    def write_record(self, first: int, lines: list[Any]) -> None:
        end = first + len(lines)
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1, mtime=0) as gz:
            for obj in lines:
                gz.write((json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8"))
        self.store.write_bytes(f"{self.rel}/part-{first:012d}-{end:012d}.jsonl.gz", buf.getvalue())

    def read_record(self, rel: Path | str) -> Iterator[Any]:
        data = self.store.read_bytes(str(rel), limit=RECORD_BYTES, what="completion record")
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
            for line in io.TextIOWrapper(gz, encoding="utf-8"):
                yield json.loads(line)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with contextlib.suppress(Exception):
            self._lock.__exit__(None, None, None)
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
        measure: Callable[[R], dict[str, float]] | None = None) -> Iterator[R]:
    """Each unit's result in plan order: from a completion record when one covers its position, else from
    the engine (recording each finished batch). Without a work folder: the engine only, no records."""
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
                            cost_s=cost_s, measure=measure):
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
