"""The corpus jobs: scan, verify and reencode over every dataset of a corpus (`--corpus FILE`, or several datasets
as arguments), in ONE engine session (the command's; a cluster started for one dataset serves the next).

plan     the corpus description (`pipeline.corpus.spec`), one dataset after the other: each dataset's own job plans
         its units lazily from its metadata, opened when its turn comes and dropped when it is done, so the memory a
         plan holds is one dataset's (plus a few hundred bytes of summary per finished dataset), never the corpus's
stage    each dataset's own job (`jobs.scan.scan_dataset`, `jobs.verify.verify_dataset`,
         `jobs.reencode.reencode_dataset`), through the same engine
reduce   one `DatasetRun` per dataset: done (with the job's summary), failed (with its reason: a dataset whose
         metadata is refused, whose camera mapping does not fit, whose source cannot be reached or re-encoded,
         stays separate; the others go on), or kept (complete in an earlier run)
publish  each dataset's output in its own place (scan: `<folder>/<name>.manifest.json` beside the corpus manifest;
         verify and reencode: `<out>/<name>/`); the corpus manifest (`pipeline.corpus.manifest`) and the corpus run
         report (`corpus_<command>.json`) last

Per-dataset completion: when a dataset's job is complete, a completion record `done/<name>.json` is written in the
corpus work folder (scan: `<manifest>.parts/`; verify and reencode: `<out>/prep/corpus.parts/`) with the dataset's
identity (`source_identity`: every file under `meta/` by path, size, mtime and version, reencode every file of the
dataset) and its summary. A killed run rerun with the same arguments keeps every dataset whose record matches and
goes on with the others (each of which resumes on its own: scan and verify from their completion records, reencode
per output file). The work folder is removed once every dataset is complete; a failed dataset keeps it, so a rerun
redoes only what failed. Other options or another corpus clear it (`parts.WorkFolder`'s fingerprint).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import __version__, atomic
from pipeline.atomic import WriteError
from pipeline.clock import utc_now
from pipeline.corpus.spec import Corpus, Entry, camera_problem
from pipeline.errors import ClusterError, PrepError
from pipeline.formats import format_of, read_info
from pipeline.jobs import parts
from pipeline.jobs.output import check_outside
from pipeline.runner import Engine
from pipeline.schemas import validate
from pipeline.storage import Location, MissingFile, Store, StorePath, as_root, local_location, publish_tree
from pipeline.text import one_line, printable

RUN_SCHEMA = "corpus_run"
RECORD_VERSION = 1
WORK_REL = "prep/corpus.parts"  # verify and reencode: the corpus work folder under --out
DONE = "done"
OK, FAILED = "ok", "failed"


@dataclass(slots=True)
class DatasetRun:
    """What the corpus job did with one dataset. `status`: ok (its job completed) or failed (it could not:
    `reason`); `kept`: complete in an earlier run (its completion record matched); `summary`: the job's own
    figures (scan: the manifest; verify: the verdict; reencode: files and frames)."""

    entry: Entry
    status: str
    reason: str | None = None
    output: str | None = None
    kept: bool = False
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {"name": e.name, "source": e.source, "weight": e.weight, "label": e.label,
                "cameras": e.camera_map(), "status": self.status, "reason": self.reason, "output": self.output,
                "kept": self.kept, "seconds": self.seconds, "summary": self.summary}


@dataclass(slots=True)
class CorpusRun:
    """The outcome of a corpus job: one `DatasetRun` per dataset, in the corpus's order."""

    command: str
    corpus: Corpus
    out: Path | str | None  # a local folder or file; an object-store output's URL
    datasets: list[DatasetRun] = field(default_factory=list)
    seconds: float = 0.0
    report: Path | str | None = None  # corpus_<command>.json, when written
    manifest: Path | str | None = None  # the corpus manifest (scan; reencode: the prepared corpus's)

    @property
    def failed(self) -> list[DatasetRun]:
        return [d for d in self.datasets if not d.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self, verdict: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"schema": "prep.corpus_run/1", "prep_version": __version__, "created_utc": utc_now(),
                "command": self.command, "corpus": self.corpus.to_json(),
                "out": str(self.out) if self.out is not None else None,
                "datasets": [d.to_json() for d in self.datasets],
                "totals": {"datasets": len(self.datasets), "ok": len(self.datasets) - len(self.failed),
                           "failed": len(self.failed), "kept": sum(d.kept for d in self.datasets),
                           "seconds": self.seconds},
                **({"verdict": verdict} if verdict is not None else {})}


# ---- identity and completion records ------------------------------------------------------------------


def source_identity(location: Location, *, every_file: bool = False) -> str:
    """A dataset as it is now, for a completion record: BLAKE2b over every file under `meta/` (`every_file`: every
    file of the dataset) by relative path, size, mtime and version (a local file's inode and change time, an
    object's ETag): a metadata write (or, with `every_file`, any write) gives another value. One listing."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{location.url}\0".encode("utf-8", "surrogateescape"))
    for rel, st in location.store().iter_files("" if every_file else "meta"):
        h.update(f"{rel}\0{st.size}\0{st.mtime_ns}\0{st.version}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class Ledger:
    """The completion records of a corpus run, in its work folder (None: no records, nothing resumes)."""

    def __init__(self, work: parts.WorkFolder | None) -> None:
        self.work = work

    def _path(self, entry: Entry) -> Path | None:
        return self.work.path / DONE / f"{entry.name}.json" if self.work is not None else None

    def _load(self, entry: Entry) -> Any:
        path = self._path(entry)
        return None if path is None else json.loads(atomic.read_regular_text(path))

    def _save(self, entry: Entry, record: dict[str, Any]) -> None:
        path = self._path(entry)
        if path is None or self.work is None:
            return
        atomic.make_dirs(path.parent, self.work.path)
        atomic.write_json(path, record, indent=None, root=self.work.path)

    def kept(self, entry: Entry, identity: str) -> dict[str, Any] | None:
        """The record of a dataset completed by an earlier run of this very job, when it is the dataset as it is now."""
        try:
            record = self._load(entry)
        except (OSError, ValueError, PrepError):
            return None
        if not isinstance(record, dict) or record.get("identity") != identity or record.get("source") != entry.source:
            return None
        return record

    def done(self, entry: Entry, identity: str, run: DatasetRun) -> None:
        self._save(entry, {"source": entry.source, "identity": identity, "status": run.status, "reason": run.reason,
                           "output": run.output, "summary": run.summary})


class StoreLedger(Ledger):
    """The completion records of a corpus run whose output is an object prefix: objects below `<out>/<rel>/`
    (`done/<name>.json`, and `plan.json`, the fingerprint: another one clears the records), written by the one run
    that holds the corpus output's lock."""

    def __init__(self, store: Store, rel: str, fingerprint: str, *, resume: bool = True) -> None:
        super().__init__(None)
        self.store, self.rel = store, rel
        plan = f"{rel}/{parts.PLAN_FILE}"
        try:
            previous = json.loads(store.read_bytes(plan, limit=1 << 16)).get("fingerprint")
        except (OSError, ValueError, AttributeError, PrepError):
            previous = None
        if previous != fingerprint or not resume:
            self.remove()
            store.write_bytes(plan, json.dumps({"fingerprint": fingerprint}).encode())

    def _record(self, entry: Entry) -> str:
        return f"{self.rel}/{DONE}/{entry.name}.json"

    def _load(self, entry: Entry) -> Any:
        try:
            return json.loads(self.store.read_bytes(self._record(entry), limit=16 << 20))
        except MissingFile:
            return None

    def _save(self, entry: Entry, record: dict[str, Any]) -> None:
        self.store.write_bytes(self._record(entry), json.dumps(record).encode())

    def remove(self) -> None:
        """Every dataset is complete (or the records are another run's): the records go."""
        for rel in [rel for rel, _st in self.store.iter_files(self.rel)]:
            self.store.remove(rel)


def corpus_fingerprint(command: str, corpus: Corpus, **options: Any) -> str:
    """What the completion records depend on: the command, the datasets (source and name) and the options."""
    doc = {"job": f"corpus-{command}", "records": RECORD_VERSION, "prep": __version__,
           "datasets": [[e.name, e.source, e.revision, list(e.storage_options), e.camera_map()]
                        for e in corpus.entries], "options": options}
    return hashlib.blake2b(json.dumps(doc, sort_keys=True, default=str).encode(), digest_size=16).hexdigest()


def one_reason(exc: BaseException) -> str:
    """An exception as the one line a failed dataset keeps."""
    lines = exc.lines() if isinstance(exc, PrepError) else [str(exc)]
    return one_line("; ".join(" ".join(str(line).split()) for line in lines) or type(exc).__name__)


def _locate(entry: Entry) -> Location:
    loc = entry.locate()
    if not loc.is_local:
        loc.store().check_reachable()  # credentials or endpoint: this dataset fails now, in one line
    return loc


def image_or_video_keys(info: dict[str, Any]) -> list[str]:
    """The dataset's cameras, as a camera mapping may name them: every video feature, and every image feature."""
    feats = info.get("features") or {}
    return [k for k, v in feats.items() if isinstance(v, dict) and v.get("dtype") in ("video", "image")]


def check_cameras(entry: Entry, location: Location) -> None:
    """The entry's camera mapping names cameras the dataset has (info.json's video and image features)."""
    if not entry.cameras:
        return
    problem = camera_problem(entry, image_or_video_keys(read_info(as_root(location))))
    if problem is not None:
        raise PrepError(problem)


def each_dataset(corpus: Corpus, ledger: Ledger, job: Callable[[Entry, Location], DatasetRun], *,
                 every_file: bool = False, completed: Callable[[DatasetRun], bool] | None = None,
                 quiet: bool = False) -> Iterator[DatasetRun]:
    """Run `job` on every dataset of the corpus in turn, keeping the ones a completion record says are complete;
    a dataset that fails (a refusal, a bad camera mapping, a source out of reach) is yielded failed with its reason
    and the others go on. A cluster fault or an output that cannot be written stops the corpus (every finished
    dataset stays complete for the rerun). `completed`: whether a run is complete (default: it is ok)."""
    completed = completed or (lambda r: r.ok)
    n = len(corpus.entries)
    for k, entry in enumerate(corpus.entries, 1):
        t0 = time.monotonic()
        identity = ""
        try:
            location = _locate(entry)
            identity = source_identity(location, every_file=every_file)
            record = ledger.kept(entry, identity)
            if record is not None:
                run = DatasetRun(entry, record.get("status", OK), record.get("reason"), record.get("output"),
                                 kept=True, summary=record.get("summary") or {})
                _say(quiet, f"[corpus] {k}/{n} {entry.name}: complete in an earlier run, kept")
                yield run
                continue
            _say(quiet, f"[corpus] {k}/{n} {entry.name}: {printable(location.url)}")
            check_cameras(entry, location)
            run = job(entry, location)
        except (ClusterError, WriteError):
            raise
        except PrepError as exc:
            run = DatasetRun(entry, FAILED, one_reason(exc))
        run.seconds = time.monotonic() - t0
        if identity and completed(run):
            ledger.done(entry, identity, run)
        if not run.ok:
            _say(quiet, f"[corpus] {k}/{n} {entry.name}: FAILED: {run.reason}")
        yield run


def _say(quiet: bool, line: str) -> None:
    import sys

    if not quiet:
        print(printable(line), file=sys.stderr, flush=True)


def remove_work(work: parts.WorkFolder, out: Path) -> None:
    """Every dataset is complete: the completion records go, and `<out>/prep/` with them when nothing else is in it."""
    work.remove()
    with contextlib.suppress(OSError):
        (out / "prep").rmdir()


def publish_run(run: CorpusRun, path: Path, root: Path | None, verdict: dict[str, Any] | None = None) -> None:
    """`corpus_<command>.json`: every dataset's outcome, checked against schemas/corpus_run.schema.json."""
    doc = run.to_json(verdict)
    validate(doc, RUN_SCHEMA, source=str(path))
    atomic.write_json(path, doc, indent=2, root=root)
    run.report = path


def local_sources(corpus: Corpus) -> list[Path]:
    """The local folders of the corpus (a hub repo id that resolves, a folder); object stores have none."""
    out = []
    for e in corpus.entries:
        try:
            loc = e.locate()
        except PrepError:
            continue
        if loc.is_local:
            out.append(Path(loc.root))
    return out


def check_corpus_output(corpus: Corpus, out: Path, flag: str = "--out") -> None:
    """A corpus output folder is outside every source, and holds none (a dataset under it would be written over
    by another's output): one line now, before anything is read or written."""
    import os

    pairs = []
    for e in corpus.entries:
        try:
            loc = e.locate()
        except PrepError:
            continue
        if loc.is_local:
            pairs.append((e, Path(loc.root)))
    check_outside([src for _, src in pairs], out, flag=flag)
    o = os.path.realpath(out)
    for e, src in pairs:
        s = os.path.realpath(src)
        if s.startswith(o.rstrip("/") + "/"):
            raise PrepError(f"{flag} {printable(str(out))} holds the source of {e.where} ({printable(str(src))}): "
                            "its outputs would be written among the sources; choose another folder")


# ---- scan ---------------------------------------------------------------------------------------------


def manifest_path(folder: Path, entry: Entry) -> Path:
    """Where a corpus scan writes a dataset's manifest: `<folder>/<name>.manifest.json`, as `prep scan` would."""
    return folder / f"{entry.name}.manifest.json"


def count_tasks(location: Location, codebase_version: str) -> int | None:
    """The dataset's tasks, counted from its tasks file (None when it cannot be read: scan warns about it)."""
    try:
        return sum(1 for _ in format_of(codebase_version).iter_tasks(as_root(location)))
    except (PrepError, OSError, ValueError, KeyError):
        return None


def scan_corpus(corpus: Corpus, out: Path | StorePath, engine: Engine, *, resume: bool = True,
                quiet: bool = False, report: Callable[[Path], list[str]] | None = None) -> CorpusRun:
    """Scan every dataset of `corpus` into `<folder of out>/<name>.manifest.json` through `engine`, then write the
    corpus manifest `out` (+ its Parquet table) last. Resumable across datasets (`<out>.parts/`). `out` may be an
    object: see `scan_corpus_in_store` (`report` is called there only)."""
    from pipeline.corpus.manifest import publish_corpus_manifest

    if isinstance(out, StorePath):
        return scan_corpus_in_store(corpus, out, engine, resume=resume, quiet=quiet, report=report)
    out = Path(out).absolute()
    folder = out.parent
    run = CorpusRun("scan", corpus, out)
    t0 = time.monotonic()
    parts.check_report_place(local_sources(corpus), out, out.with_suffix(".parquet"))
    engine.prepare()
    atomic.make_dirs(folder)
    fp = corpus_fingerprint("scan", corpus, out=str(out))
    with parts.WorkFolder(parts.work_folder_for(out), fingerprint=fp, resume=resume) as work:
        job = scan_job(engine, lambda entry: manifest_path(folder, entry), resume=resume)
        run.datasets = list(each_dataset(corpus, Ledger(work), job, quiet=quiet))
        run.seconds = time.monotonic() - t0
        run.manifest = publish_corpus_manifest(run, out, role="native")
        if run.ok:
            work.remove()
    return run


def scan_job(engine: Engine, target_of: Callable[[Entry], Path | StorePath], *,
             resume: bool) -> Callable[[Entry, Location], DatasetRun]:
    """One dataset of a corpus scan: `prep scan` of its source into `target_of(entry)` (a local path or an object)."""
    from pipeline.jobs.scan import scan_dataset

    def job(entry: Entry, location: Location) -> DatasetRun:
        path = target_of(entry)
        manifest, _table = scan_dataset(location, path, engine, resume=resume)
        tasks = count_tasks(location, manifest["dataset"]["codebase_version"])
        return DatasetRun(entry, OK, output=str(path),
                          summary={"episodes": manifest["totals"]["episodes"],
                                   "episodes_failed": manifest["totals"]["episodes_failed"],
                                   "hours": manifest["totals"]["hours"], "tasks": tasks,
                                   "manifest": path.name})

    return job


def scan_corpus_in_store(corpus: Corpus, out: StorePath, engine: Engine, *, resume: bool = True,
                         quiet: bool = False, report: Callable[[Path], list[str]] | None = None) -> CorpusRun:
    """`scan_corpus` into an object store: each dataset's manifest `<folder of out>/<name>.manifest.json` written as
    `prep scan DATASET --out s3://...` writes it (its own lock and records, its table put before it); the corpus's
    completion records below `<out>.parts/`, written under the corpus manifest's one lock (`<out>.parts.lock`, the
    store's conditional-create lock); the corpus files (the Parquet table, the report and plots that `report(manifest)`
    writes beside a manifest made locally, then the corpus manifest `out` last) made in a local temp folder and put."""
    import tempfile

    from pipeline.corpus.manifest import publish_corpus_manifest
    from pipeline.jobs.output import command_line

    run = CorpusRun("scan", corpus, out.url)
    t0 = time.monotonic()
    check_corpus_store(corpus, parts.file_location(out))  # no output inside a source, none holding one
    out.store.check_reachable()  # credentials, endpoint, bucket: one line now
    engine.prepare()
    folder = out.parent
    fp = corpus_fingerprint("scan", corpus, out=out.url)
    store = out.store
    with store.lock(f"{out.rel}.parts.lock", f"the corpus manifest {printable(out.url)}",
                    command=command_line("scan")):
        ledger = StoreLedger(store, f"{out.rel}.parts", fp, resume=resume)
        job = scan_job(engine, lambda entry: folder / f"{entry.name}.manifest.json", resume=resume)
        run.datasets = list(each_dataset(corpus, ledger, job, quiet=quiet))
        run.seconds = time.monotonic() - t0
        with tempfile.TemporaryDirectory(prefix="prep-corpus-") as tmp:
            spool = Path(tmp)
            manifest = publish_corpus_manifest(run, spool / out.name, role="native", root=spool, folder=folder.url)
            if report is not None:
                report(manifest)
            parts.put_report(spool, out)
        run.manifest = out.url
        if run.ok:
            ledger.remove()
    return run


# ---- verify -------------------------------------------------------------------------------------------


def verify_summary(report: Any, path: Path | StorePath | None) -> dict[str, Any]:
    """A dataset's verify verdict in a few fields (`VerifyReport.head_json`)."""
    head = report.head_json()
    t = head["totals"]
    by_check = sorted(t["failures_by_check"].items(), key=lambda kv: (-kv[1], kv[0]))
    return {"verdict": "passed" if head["passed"] else "failed",
            "codebase_version": head["dataset"]["codebase_version"],
            "episodes": t["episodes"], "episodes_passed": t["episodes_passed"], "episodes_failed": t["episodes_failed"],
            "frames_expected": t["frames_expected"], "errors": t["errors"], "warnings": t["warnings"],
            "trains_wrong": t["trains_wrong"], "failures_by_check": dict(by_check[:10]),
            "lerobot_loads": {r: p["loads"] for r, p in head["lerobot_loads"].items()},
            "format_refused_by": sorted(head.get("format_refused_by") or {}),
            "report": str(path) if path is not None else None}


def verify_corpus(corpus: Corpus, options: Any, engine: Engine, *, out: Path | Location | None = None,
                  resume: bool = True, fingerprint: str = "mtime", quiet: bool = False) -> CorpusRun:
    """Verify every dataset of `corpus` through `engine`. With `out` (a folder): each dataset's report in
    `<out>/<name>/verify.json` (+ its per-episode table), `<out>/corpus_verify.json` last, resumable across datasets
    (`<out>/prep/corpus.parts/`); without, nothing is written. A dataset that cannot be verified (its metadata
    refused, a camera mapping that does not fit) is failed with its reason; one verified with errors is complete,
    its verdict failed. `out` may be an object-store prefix (`Location`): see `verify_corpus_in_store`."""
    from dataclasses import asdict

    from pipeline.jobs.verify import verify_dataset

    if isinstance(out, Location):
        if not out.is_local:
            return verify_corpus_in_store(corpus, options, engine, out, resume=resume, fingerprint=fingerprint,
                                          quiet=quiet)
        out = out.path
    run = CorpusRun("verify", corpus, out)
    t0 = time.monotonic()
    if out is not None:
        out = Path(out).absolute()
        run.out = out
        check_corpus_output(corpus, out)
        engine.prepare()
        atomic.make_dirs(out)
    work = None
    if out is not None:
        fp = corpus_fingerprint("verify", corpus, options=asdict(options), fingerprint=fingerprint)
        work = parts.WorkFolder(out / WORK_REL, fingerprint=fp, resume=resume)
    try:
        def job(entry: Entry, location: Location) -> DatasetRun:
            path = None
            if out is not None:
                atomic.make_dirs(out / entry.name, out)
                path = out / entry.name / "verify.json"
            try:
                report = verify_dataset(location, options, engine, json_path=path, resume=resume,
                                        fingerprint=fingerprint)
            except PrepError:
                if path is not None:
                    with contextlib.suppress(OSError):
                        path.parent.rmdir()  # made for nothing: the dataset could not be verified
                raise
            return DatasetRun(entry, OK, output=str(path) if path is not None else None,
                              summary=verify_summary(report, path))

        run.datasets = list(each_dataset(corpus, Ledger(work), job, quiet=quiet))
        run.seconds = time.monotonic() - t0
        if out is not None:
            publish_run(run, out / "corpus_verify.json", out, verdict=corpus_verdict(run))
            if run.ok and work is not None:
                remove_work(work, out)
    finally:
        if work is not None:
            work.release()
    return run


def verify_corpus_in_store(corpus: Corpus, options: Any, engine: Engine, out: Location, *, resume: bool = True,
                           fingerprint: str = "mtime", quiet: bool = False) -> CorpusRun:
    """`verify_corpus` into an object-store prefix: each dataset's report `<out>/<name>/verify.json` written as
    `prep verify DATASET --out s3://...` writes it (its own lock and records, its table put before it); the completion
    records below `<out>/prep/corpus.parts/` under the corpus output's one lock (`<out>/prep/corpus.parts.lock`);
    `corpus_verify.json` made in a local temp folder and put last."""
    import tempfile
    from dataclasses import asdict

    from pipeline.jobs.output import command_line
    from pipeline.jobs.verify import verify_dataset

    run = CorpusRun("verify", corpus, out.url)
    t0 = time.monotonic()
    check_corpus_store(corpus, out)
    store = out.store()
    store.check_reachable()  # credentials, endpoint, bucket: one line now
    engine.prepare()
    fp = corpus_fingerprint("verify", corpus, options=asdict(options), fingerprint=fingerprint)
    root = StorePath(out, "")
    with store.lock(f"{WORK_REL}.lock", f"corpus output {printable(out.url)}", command=command_line("verify")):
        ledger = StoreLedger(store, WORK_REL, fp, resume=resume)

        def job(entry: Entry, location: Location) -> DatasetRun:
            path = root / entry.name / "verify.json"
            report = verify_dataset(location, options, engine, json_path=path, resume=resume, fingerprint=fingerprint)
            return DatasetRun(entry, OK, output=path.url, summary=verify_summary(report, path))

        run.datasets = list(each_dataset(corpus, ledger, job, quiet=quiet))
        run.seconds = time.monotonic() - t0
        with tempfile.TemporaryDirectory(prefix="prep-corpus-") as tmp:
            publish_run(run, Path(tmp) / "corpus_verify.json", Path(tmp), verdict=corpus_verdict(run))
            publish_tree(Path(tmp), out, last="corpus_verify.json")
        run.report = f"{out.url}/corpus_verify.json"
        if run.ok:
            ledger.remove()
    return run


def dataset_verdict(d: DatasetRun) -> str:
    """passed / failed (verified, with errors) / not verified (the dataset could not be verified)."""
    if not d.ok:
        return "not verified"
    return str(d.summary.get("verdict", "failed"))


def corpus_verdict(run: CorpusRun) -> dict[str, Any]:
    """One verdict for the corpus: passed when every dataset was verified and passed."""
    verdicts = [dataset_verdict(d) for d in run.datasets]
    return {"passed": all(v == "passed" for v in verdicts), "datasets": len(verdicts),
            "datasets_passed": verdicts.count("passed"), "datasets_failed": verdicts.count("failed"),
            "datasets_not_verified": verdicts.count("not verified")}


# ---- reencode -----------------------------------------------------------------------------------------


def reencode_summary(report: Any) -> dict[str, Any]:
    c = report.comparison or {}
    return {"files": report.files, "encoded": report.encoded, "kept": report.kept, "copied": report.copied,
            "failed": report.failed, "frames": report.frames, "frames_encoded": report.frames_encoded,
            "seconds": report.seconds, "drop_in": report.drop_in,
            "native_gb_per_hour": (c.get("native") or {}).get("gb_per_hour"),
            "prepared_gb_per_hour": (c.get("prepared") or {}).get("gb_per_hour"), "ratio": c.get("ratio"),
            "manifest": "prep/manifest.json" if report.manifest else None}


def reencode_job(options: Any, engine: Engine, target_of: Callable[[Entry], Location], *,
                 accept_invalid_source: bool, reader: str) -> Callable[[Entry, Location], DatasetRun]:
    """One dataset of a corpus re-encode: `prep reencode` of its source into `target_of(entry)` (a local folder or
    an object prefix), as a `DatasetRun` (failed: the source refused, or a file that failed, with the first reason)."""
    from pipeline.jobs.preverify import SourceRefused
    from pipeline.jobs.reencode import reencode_dataset

    def job(entry: Entry, location: Location) -> DatasetRun:
        where = target_of(entry)
        target: Path | Location = where.path if where.is_local else where
        shown = str(target) if where.is_local else where.url
        try:
            report = reencode_dataset(location.path if location.is_local else location, target, options, engine,
                                      accept_invalid_source=accept_invalid_source, reader=reader)
        except SourceRefused as exc:
            return DatasetRun(entry, FAILED, f"source refused: {one_reason(exc)}", output=shown)
        summary = reencode_summary(report)
        if not report.ok:
            first = report.failures[0] if report.failures else {}
            why = f"{len(report.failures):,} failed" if report.failures else "incomplete"
            detail = f" ({first.get('path')}: {first.get('reason')})" if first else ""
            return DatasetRun(entry, FAILED, one_line(f"{why}{detail}; meta/info.json not written: fix or remove "
                                                      "the failed input and rerun to finish"),
                              output=shown, summary=summary)
        summary["tasks"] = count_tasks(where, read_info(as_root(where))["codebase_version"])
        return DatasetRun(entry, OK, output=shown, summary=summary)

    return job


CORPUS_FILES_LAST = "corpus.json"  # an object-store corpus output's file put last: its manifest (what budget reads)


def reencode_corpus(corpus: Corpus, out: Path | Location, options: Any, engine: Engine, *,
                    accept_invalid_source: bool = False, reader: str = "all", quiet: bool = False,
                    report: Callable[[Path], list[str]] | None = None) -> CorpusRun:
    """Re-encode every dataset of `corpus` into `<out>/<name>/` through `engine` (each as `prep reencode` would,
    resumable per output file), then the prepared corpus's manifest `<out>/corpus.json` (+ Parquet), its description
    `<out>/corpus.toml` and `<out>/corpus_reencode.json`. A dataset whose source is refused or whose files fail is
    failed with its reason; the others complete. Resumable across datasets (`<out>/prep/corpus.parts/`).

    `out` may be an object-store prefix (`Location`): see `reencode_corpus_in_store`; `report(manifest)` writes the
    corpus report beside a manifest made locally and returns its files (called there only: the command writes a
    local output's report itself)."""
    from pipeline.corpus.manifest import publish_corpus_manifest, write_corpus_toml
    from pipeline.jobs.reencode import check_options

    if isinstance(out, Location) and not out.is_local:
        return reencode_corpus_in_store(corpus, out, options, engine, accept_invalid_source=accept_invalid_source,
                                        reader=reader, quiet=quiet, report=report)
    out = Path(out.root if isinstance(out, Location) else out).absolute()
    run = CorpusRun("reencode", corpus, out)
    t0 = time.monotonic()
    check_options(options)
    check_corpus_output(corpus, out)
    engine.prepare()
    atomic.make_dirs(out)
    fp = corpus_fingerprint("reencode", corpus, settings=options.output_settings(), accept=accept_invalid_source,
                            reader=reader)
    with parts.WorkFolder(out / WORK_REL, fingerprint=fp, resume=True) as work:
        job = reencode_job(options, engine, lambda entry: local_location(out / entry.name),
                           accept_invalid_source=accept_invalid_source, reader=reader)
        run.datasets = list(each_dataset(corpus, Ledger(work), job, every_file=True, quiet=quiet))
        run.seconds = time.monotonic() - t0
        run.manifest = publish_corpus_manifest(run, out / "corpus.json", role="prepared", root=out)
        write_corpus_toml(run, out / "corpus.toml", root=out)
        publish_run(run, out / "corpus_reencode.json", out)
        if run.ok:
            remove_work(work, out)
    return run


def check_corpus_store(corpus: Corpus, out: Location) -> None:
    """An object-store corpus output is outside every object-store source and holds none (a local source cannot
    overlap it): one line now, before anything is read or written."""
    from pipeline.jobs.output import check_locations

    for e in corpus.entries:
        try:
            loc = e.locate()
        except PrepError:
            continue
        if not loc.is_local:
            try:
                check_locations(loc, out)
            except PrepError as exc:
                raise PrepError(f"{e.where}: {one_reason(exc)}") from None


def reencode_corpus_in_store(corpus: Corpus, out: Location, options: Any, engine: Engine, *,
                             accept_invalid_source: bool = False, reader: str = "all", quiet: bool = False,
                             report: Callable[[Path], list[str]] | None = None) -> CorpusRun:
    """`reencode_corpus` into an object-store prefix: each dataset's output `<out>/<name>/` written as `prep reencode
    DATASET --out s3://...` writes it (its own lock, files put whole, meta/info.json last, resumable per file); the
    completion records below `<out>/prep/corpus.parts/`, written under the corpus output's one lock
    (`<out>/prep/corpus.parts.lock`, the store's conditional-create lock); the corpus files (corpus.parquet, the
    report, corpus.toml with the outputs' URLs, corpus_reencode.json, then corpus.json last) made in a local temp
    folder and put."""
    import tempfile

    from pipeline.corpus.manifest import publish_corpus_manifest, write_corpus_toml
    from pipeline.jobs.output import command_line
    from pipeline.jobs.reencode import check_options

    run = CorpusRun("reencode", corpus, out.url)
    t0 = time.monotonic()
    check_options(options)
    check_corpus_store(corpus, out)
    store = out.store()
    store.check_reachable()  # credentials, endpoint, bucket: one line now
    engine.prepare()
    fp = corpus_fingerprint("reencode", corpus, settings=options.output_settings(), accept=accept_invalid_source,
                            reader=reader)
    with store.lock(f"{WORK_REL}.lock", f"corpus output {printable(out.url)}", command=command_line("reencode")):
        ledger = StoreLedger(store, WORK_REL, fp)
        job = reencode_job(options, engine, lambda entry: out.child(entry.name),
                           accept_invalid_source=accept_invalid_source, reader=reader)
        run.datasets = list(each_dataset(corpus, ledger, job, every_file=True, quiet=quiet))
        run.seconds = time.monotonic() - t0
        with tempfile.TemporaryDirectory(prefix="prep-corpus-") as tmp:
            spool = Path(tmp)
            manifest = publish_corpus_manifest(run, spool / CORPUS_FILES_LAST, role="prepared", root=spool,
                                               folder=out.url)
            write_corpus_toml(run, spool / "corpus.toml", root=spool)
            publish_run(run, spool / "corpus_reencode.json", spool)
            if report is not None:
                report(manifest)
            publish_tree(spool, out, last=CORPUS_FILES_LAST)
        run.manifest = f"{out.url}/{CORPUS_FILES_LAST}"
        run.report = f"{out.url}/corpus_reencode.json"
        if run.ok:
            ledger.remove()
    return run
