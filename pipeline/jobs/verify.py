"""The verify job: prove a corpus is sound before training (`prep verify`).

plan     dataset -> one `VerifyUnit` per set of files (v2.1: per episode), lazily, in episode order;
         the dataset-level checks (info.json totals, episode numbering) come from the episode columns first
stage    `pipeline.stages.verify.verify_unit` (every frame count by origin, timestamps, keyframes, ...)
reduce   `VerifyReduce` per episode result: totals, failures listed once (a whole-file failure under the
         first episode it names), the first `FAILURES_KEPT` in memory; every episode (its counts and all
         its failures) streamed to a Parquet table
publish  the JSON report (`--json`), written streaming from the table, with the table beside it

With a JSON path the job resumes: finished batches are recorded in `<report>.parts/`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import __version__, atomic
from pipeline.checks import (
    Reader,
    ReaderTally,
    Severity,
    Status,
    format_refused_by,
    is_file_check,
    lerobot_loads,
    reader_cannot_open,
    severity_by_reader,
)
from pipeline.clock import utc_now
from pipeline.dataset import Dataset
from pipeline.errors import EpisodeError
from pipeline.formats.validate import open_validated
from pipeline.jobs import parts
from pipeline.jobs.identity import DEFAULT_FILE_MODE, identity
from pipeline.runner import Engine, RunConfig, open_engine
from pipeline.schemas import validate
from pipeline.stages.dataset_checks import dataset_findings
from pipeline.stages.format_checks import depth_codec_findings, depth_copy_findings
from pipeline.stages.verify import (
    NON_FINITE,
    CameraCounts,
    EpisodeVerify,
    VerifyOptions,
    VerifyUnit,
    retarget,
    verify_unit,
    verify_unit_failed,
    verify_units,
)
from pipeline.storage import Location, StorePath, local_root
from pipeline.tables import RowGroupWriter
from pipeline.video.checks import CheckFailure

VERIFY_SCHEMA = "verify"
FAILURES_KEPT = 10_000  # failures held in memory (VerifyReport.failures); the table holds them all
SEEN_KEYS = 65_536  # whole-file failures remembered to list each once (a file's units are adjacent in the plan)
VALIDATED_ITEMS = 1_000  # failures and episodes of a streamed report checked against the schema
COST_S = 0.006
RECORD_VERSION = 4  # 2: findings carry a severity; 3: the severity for the targeted readers; 4: image cameras
CAMERA_FIELDS = ("frames_from_header", "frames_from_packets", "frames_decoded", "keyframes", "codec", "width",
                 "height", "stored", "pictures_from_footer", "pictures_in_parquet", "pictures_decoded")
FAILURE_FIELDS = ("check", "expected", "found", "episode", "camera", "path", "severity")

TABLE_SCHEMA = pa.schema([
    ("episode", pa.int64()), ("status", pa.string()), ("frames_expected", pa.int64()),
    ("frames_in_parquet", pa.int64()), ("checks_failed", pa.list_(pa.string())),
    ("cameras", pa.list_(pa.struct([("camera", pa.string()), ("frames_from_header", pa.int64()),
                                    ("frames_from_packets", pa.int64()), ("frames_decoded", pa.int64()),
                                    ("keyframes", pa.int64()), ("codec", pa.string()), ("width", pa.int64()),
                                    ("height", pa.int64()), ("stored", pa.string()),
                                    ("pictures_from_footer", pa.int64()), ("pictures_in_parquet", pa.int64()),
                                    ("pictures_decoded", pa.int64())]))),
    ("failures", pa.list_(pa.struct([("check", pa.string()), ("expected", pa.string()), ("found", pa.string()),
                                     ("episode", pa.int64()), ("camera", pa.string()), ("path", pa.string()),
                                     ("severity", pa.string()), ("listed", pa.bool_())]))),
])


def table_path_for(json_path: Path) -> Path:
    """The per-episode table beside a report: verify.json -> verify.episodes.parquet."""
    return json_path.with_name(json_path.stem + ".episodes.parquet")


# ---- plan --------------------------------------------------------------------------------------


def plan(ds: Dataset, options: VerifyOptions, rejected: list[EpisodeError]) -> Iterator[VerifyUnit]:
    return verify_units(ds, options, contiguous_index=not (rejected or ds.rejected_count))


def dataset_failures(ds: Dataset, rejected: list[EpisodeError],
                     options: VerifyOptions | None = None) -> list[CheckFailure]:
    """Cheap dataset-level consistency (`pipeline.stages.dataset_checks`): required metadata files,
    info.json totals and episode numbering vs what was found; depth maps (`pipeline.stages.format_checks`)."""
    opts = options or VerifyOptions()
    found = (dataset_findings(ds, rejected, max(ds.rejected_count, len(rejected))) + depth_codec_findings(ds)
             + depth_copy_findings(ds, opts.size, opts.all_intra))
    return retarget(found, ds.codebase_version, opts.reader)


# ---- codecs: completion records and the per-episode table ------------------------------------------


def encode(results: list[EpisodeVerify]) -> list[Any]:
    return [[e.episode, e.frames_expected, e.frames_in_parquet,
             {cam: [getattr(c, k) for k in CAMERA_FIELDS] for cam, c in e.cameras.items()},
             [[getattr(f, k) for k in FAILURE_FIELDS] for f in e.failures]] for e in results]


def decode(obj: list[Any]) -> list[EpisodeVerify]:
    return [EpisodeVerify(episode, n, p, {cam: CameraCounts(*v) for cam, v in cams.items()},
                          [_stored_failure(dict(zip(FAILURE_FIELDS, f, strict=True))) for f in fails])
            for episode, n, p, cams, fails in obj]


def _stored_failure(f: Mapping[str, Any]) -> CheckFailure:
    """A finding read back from a completion record or the per-episode table (its severity a `Severity` again)."""
    return CheckFailure(**{k: f[k] for k in FAILURE_FIELDS if k != "severity"}, severity=Severity(f["severity"]))


def _row(e: EpisodeVerify, listed: set[int]) -> dict[str, Any]:
    return {
        "episode": e.episode, "status": Status.PASSED if e.passed else Status.FAILED,
        "frames_expected": e.frames_expected,
        "frames_in_parquet": e.frames_in_parquet, "checks_failed": sorted({f.check for f in e.failures
                                                                           if f.is_error}),
        "cameras": [{"camera": cam, **asdict(c)} for cam, c in e.cameras.items()],
        "failures": [{**asdict(f), "listed": i in listed} for i, f in enumerate(e.failures)],
    }


def _from_row(row: dict[str, Any]) -> EpisodeVerify:
    cams = {c["camera"]: CameraCounts(**{k: c[k] for k in CAMERA_FIELDS}) for c in row["cameras"]}
    fails = [_stored_failure(f) for f in row["failures"]]
    return EpisodeVerify(row["episode"], row["frames_expected"], row["frames_in_parquet"], cams, fails)


def _failure_json(f: CheckFailure, codebase_version: str) -> dict[str, Any]:
    return {"episode": f.episode, "camera": f.camera, "check": f.check, "severity": f.severity,
            "severity_by_reader": severity_by_reader(f.check, f.severity, codebase_version),
            "expected": f.expected, "found": f.found, "path": f.path}


def _episode_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "episode": row["episode"],
        "status": row["status"],
        "frames_expected": row["frames_expected"],
        "frames_in_parquet": row["frames_in_parquet"],
        "cameras": {c["camera"]: {k: c[k] for k in CAMERA_FIELDS} for c in row["cameras"]},
        "checks_failed": row["checks_failed"],
    }


class EpisodeResults(Sequence[EpisodeVerify]):
    """Every episode's result, read back from the per-episode table one row group at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._meta = pq.read_metadata(path)
        starts = [0]
        for g in range(self._meta.num_row_groups):
            starts.append(starts[-1] + self._meta.row_group(g).num_rows)
        self._starts = starts

    def __len__(self) -> int:
        return self._starts[-1]

    def rows(self) -> Iterator[dict[str, Any]]:
        f = pq.ParquetFile(self.path)
        for g in range(f.num_row_groups):
            yield from f.read_row_group(g).to_pylist()

    def __iter__(self) -> Iterator[EpisodeVerify]:
        for row in self.rows():
            yield _from_row(row)

    @overload
    def __getitem__(self, i: int) -> EpisodeVerify: ...

    @overload
    def __getitem__(self, i: slice) -> list[EpisodeVerify]: ...

    def __getitem__(self, i: int | slice) -> EpisodeVerify | list[EpisodeVerify]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(i)
        g = int(np.searchsorted(self._starts, i, side="right")) - 1
        rows = pq.ParquetFile(self.path).read_row_group(g).slice(i - self._starts[g], 1).to_pylist()
        return _from_row(rows[0])


# ---- reduce ------------------------------------------------------------------------------------


class VerifyReduce:
    """Totals and the failure list, one episode result at a time; every episode to the table."""

    def __init__(self, table: RowGroupWriter, first: list[CheckFailure], codebase_version: str) -> None:
        self.table = table
        self.tally = ReaderTally(codebase_version)
        self.trains_wrong = 0
        self.non_finite: dict[str, dict[str, int]] = {}  # feature -> episodes, rows with NaN/inf
        self.kept: list[CheckFailure] = first[:FAILURES_KEPT]
        self.failures = len(first)
        self.errors = sum(1 for f in first if f.is_error)
        self.warnings = sum(1 for f in first if f.severity == Severity.WARNING)
        self.by_check: dict[str, int] = {}
        for f in first:
            self.by_check[f.check] = self.by_check.get(f.check, 0) + 1
            self.tally.add(f.check, f.severity)
        self.episodes = self.passed = self.frames = 0
        self.failed_ids = array("q")
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()

    def _new(self, f: CheckFailure) -> bool:
        """False for a whole-file failure already listed (under an earlier episode)."""
        if not is_file_check(f.check):
            return True
        key = (f.check, f.camera, f.path, f.expected, f.found)
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > SEEN_KEYS:
            self._seen.popitem(last=False)
        return True

    def add(self, e: EpisodeVerify) -> None:
        self.episodes += 1
        self.frames += e.frames_expected
        if e.passed:
            self.passed += 1
        elif e.episode is not None:
            self.failed_ids.append(e.episode)
        order = sorted(range(len(e.failures)), key=lambda i: (
            e.failures[i].episode is not None, e.failures[i].episode or 0, e.failures[i].camera or "",
            e.failures[i].check))
        listed: set[int] = set()
        for i in order:
            f = e.failures[i]
            if not self._new(f):
                continue
            listed.add(i)
            self.failures += 1
            self.errors += f.is_error
            self.warnings += f.severity == Severity.WARNING
            self.by_check[f.check] = self.by_check.get(f.check, 0) + 1
            self.tally.add(f.check, f.severity)
            self.trains_wrong += f.severity == Severity.TRAINS_WRONG
            if f.check == NON_FINITE and f.camera is not None:
                per = self.non_finite.setdefault(f.camera, {"episodes": 0, "rows": 0})
                per["episodes"] += 1
                per["rows"] += int(f.found.split(" ", 1)[0])
            if len(self.kept) < FAILURES_KEPT:
                self.kept.append(f)
        self.table.add(_row(e, listed))


# ---- the report ----------------------------------------------------------------------------------


@dataclass(slots=True, weakref_slot=True)
class VerifyReport:
    """The outcome of `verify_dataset`: totals, the first `FAILURES_KEPT` failures (each listed once,
    dataset-level checks first), and every episode in the per-episode table (`episodes` reads it back)."""

    dataset: Dataset
    options: VerifyOptions
    failures: list[CheckFailure]
    rejected: list[EpisodeError]
    seconds: float
    table: Path
    episodes_checked: int = 0
    episodes_passed: int = 0
    frames_expected: int = 0
    failures_total: int = 0  # every finding, whatever its severity
    errors_total: int = 0
    warnings_total: int = 0
    failures_by_check: dict[str, int] = field(default_factory=dict)
    failed_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dataset_failures: list[CheckFailure] = field(default_factory=list)
    tally: ReaderTally | None = None  # per-reader error counts and the user's rules that failed
    trains_wrong_total: int = 0  # findings with which every reader loads but training is poisoned (NaN/inf)
    non_finite_by_feature: dict[str, dict[str, int]] = field(default_factory=dict)
    identity: dict[str, Any] | None = None  # what the report was taken of (`pipeline.jobs.identity`)
    _cleanup: Any = None

    @property
    def passed(self) -> bool:
        """No error (warnings and info findings do not fail a dataset), and the reader `--reader` names opens
        the dataset's format (`unreadable_by`)."""
        return self.errors_total == 0 and self.unreadable_by is None

    @property
    def unreadable_by(self) -> Reader | None:
        """The `--reader` generation that cannot open this dataset's format at all (0.3 on v3.0, 0.4/0.6 on
        v2.1): a FAIL for that reader, whatever the findings."""
        return reader_cannot_open(self.dataset.codebase_version, self.options.reader)

    @property
    def episodes(self) -> EpisodeResults:
        return EpisodeResults(self.table)

    @property
    def rejected_total(self) -> int:
        return max(self.dataset.rejected_count, len(self.rejected))

    @property
    def failed_episodes(self) -> list[int]:
        bad = np.concatenate([self.failed_ids, np.array([r.episode for r in self.rejected if r.episode is not None],
                                                         dtype=np.int64)])
        return [int(e) for e in np.unique(bad)]

    def head_json(self) -> dict[str, Any]:
        """The report without its failures and episodes lists."""
        ds, opts = self.dataset, self.options
        tally = self.tally or ReaderTally(ds.codebase_version)
        n = self.episodes_checked
        return {
            "schema": "prep.verify/1",
            "prep_version": __version__,
            "created_utc": utc_now(),
            "dataset": {
                "root": str(ds.root),
                "codebase_version": ds.codebase_version,
                "fps": ds.fps,
                "cameras": [*ds.camera_keys, *ds.image_camera_keys],
                "image_cameras": list(ds.image_camera_keys),  # of cameras: those stored as images
                "declared_total_episodes": _int_or_none(ds.info.get("total_episodes")),
                "declared_total_frames": _int_or_none(ds.info.get("total_frames")),
                "metadata_digest": ds.metadata_digest,  # of the episode metadata as read (plans key on it)
                # meta/ and the failed episodes' files: `prep edit --drop-failed` acts only on this dataset
                **({"fingerprint": self.identity} if self.identity is not None else {}),
            },
            "options": {
                "expect_frames": opts.expect_frames,
                "size": f"{opts.size[0]}x{opts.size[1]}" if opts.size else None,
                "all_intra": opts.all_intra,
                "decode": opts.decode,
                "reader": opts.reader,
            },
            "passed": self.passed,
            "lerobot_loads": lerobot_loads(ds.codebase_version, tally.errors, tally.trains_wrong, opts.decode,
                                           opts.reader),
            # the reader generations that cannot open this format at all, with the way forward
            "format_refused_by": format_refused_by(ds.codebase_version, opts.reader),
            "user_rules_failed": dict(tally.rules),
            "totals": {
                "episodes": n + self.rejected_total,
                "episodes_passed": self.episodes_passed,
                "episodes_failed": len(self.failed_episodes) + sum(1 for r in self.rejected if r.episode is None),
                "episodes_rejected_by_metadata": self.rejected_total,
                "frames_expected": self.frames_expected,
                "failures": self.failures_total,
                "errors": self.errors_total,
                "warnings": self.warnings_total,
                "trains_wrong": self.trains_wrong_total,
                "non_finite_by_feature": dict(self.non_finite_by_feature),
                "failures_by_check": dict(self.failures_by_check),
                "seconds": self.seconds,
                "episodes_per_s": n / self.seconds if self.seconds > 0 else 0.0,
            },
        }

    def iter_failures_json(self) -> Iterator[dict[str, Any]]:
        """Every failure listed once, in report order: the dataset-level ones, then by episode."""
        version = self.dataset.codebase_version
        for f in self.dataset_failures:
            yield _failure_json(f, version)
        for row in self.episodes.rows():
            for f in row["failures"]:
                if f["listed"]:
                    yield _failure_json(_stored_failure(f), version)

    def iter_episodes_json(self) -> Iterator[dict[str, Any]]:
        for row in self.episodes.rows():
            yield _episode_json(row)

    def to_json(self) -> dict[str, Any]:
        """The whole report as one object (for small datasets; `write_report_file` streams it)."""
        return {**self.head_json(), "failures": list(self.iter_failures_json()),
                "episodes": list(self.iter_episodes_json())}


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _indented(text: str, pad: str) -> str:
    return text.replace("\n", "\n" + pad)


def _write_list(fh: IO[str], items: Iterator[dict[str, Any]]) -> None:
    first = True
    for item in items:
        text = _indented(json.dumps(item, indent=2, ensure_ascii=False), "    ")
        fh.write(("[\n    " if first else ",\n    ") + text)
        first = False
    fh.write("[]" if first else "\n  ]")


def write_report_file(report: VerifyReport, path: Path) -> None:
    """Write the JSON report atomically, streaming the lists from the per-episode table; the text is what
    `json.dumps(report.to_json(), indent=2)` gives. The header and the first items are checked against
    schemas/verify.schema.json first."""
    head = report.head_json()
    sample = {**head, "failures": _take(report.iter_failures_json(), VALIDATED_ITEMS),
              "episodes": _take(report.iter_episodes_json(), VALIDATED_ITEMS)}
    validate(sample, VERIFY_SCHEMA, source=str(path))
    with atomic.atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write("{\n")
        for key, value in head.items():
            fh.write(f"  {json.dumps(key)}: {_indented(json.dumps(value, indent=2, ensure_ascii=False), '  ')},\n")
        fh.write('  "failures": ')
        _write_list(fh, report.iter_failures_json())
        fh.write(',\n  "episodes": ')
        _write_list(fh, report.iter_episodes_json())
        fh.write("\n}\n")


def write_report(report: VerifyReport, path: Path) -> dict[str, Any]:
    """`write_report_file`, then the report read back (small datasets, tests)."""
    write_report_file(report, path)
    obj: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return obj


def _take(it: Iterator[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    out = []
    for item in it:
        out.append(item)
        if len(out) >= n:
            break
    return out


# ---- the job -----------------------------------------------------------------------------------


def verify_dataset(src: Path | Location, options: VerifyOptions, engine: Engine, *,
                   json_path: Path | StorePath | None = None, resume: bool = True,
                   fingerprint: str = DEFAULT_FILE_MODE) -> VerifyReport:
    """Verify every episode of `src` through `engine`; with `json_path`, write the JSON report (and the
    per-episode table beside it) and resume from `<json_path>.parts/`. `json_path` may be an object
    (`s3://BUCKET/KEY.json`): its records are objects below `<json_path>.parts/` under the store's lock, and the
    table and the report are made locally and put beside it, the report last. Raises PrepError when the
    dataset's metadata as a whole is unreadable. `fingerprint`: how the report identifies the files of the
    failed episodes (`pipeline.jobs.identity`: mtime = size and mtime, content = a hash of every byte)."""
    t0 = time.monotonic()
    ds, rejected = open_validated(src, "verify", options.reader)  # metadata checked before any unit
    if isinstance(json_path, StorePath):  # in the source, or a bucket out of reach: refused now
        parts.check_object_report([ds.location], json_path)
    elif json_path is not None:  # in the source, or a link in its place: refused before anything is written
        json_path = Path(json_path).absolute()
        parts.check_report_place([local_root(ds)], json_path, table_path_for(json_path))
    engine.prepare()  # a scheduler that cannot be reached: refused before anything is written
    if isinstance(json_path, Path):
        atomic.check_target(json_path)  # read-only, full, a folder: refused before any work
    first = dataset_failures(ds, rejected, options)
    work: parts.WorkFolder | parts.StoreWorkFolder | None = None
    keep: Path | None = None  # where the table lives as long as the report: a temp folder
    if json_path is None:
        keep = Path(tempfile.mkdtemp(prefix="prep-verify-"))
        table_path = keep / "episodes.parquet"
    elif isinstance(json_path, StorePath):  # the report and its table made here, then put beside json_path
        keep = Path(tempfile.mkdtemp(prefix="prep-verify-"))
        (keep / "publish").mkdir()
        table_path = keep / "publish" / f"{json_path.stem}.episodes.parquet"
    else:
        table_path = table_path_for(json_path)
    if json_path is not None:
        fp = parts.fingerprint("verify", RECORD_VERSION, ds, options=asdict(options), out=str(json_path))
        try:
            work = parts.work_folder(json_path, fingerprint=fp, resume=resume)
        except BaseException:
            if keep is not None:
                shutil.rmtree(keep, ignore_errors=True)
            raise
        spool = work.path / "episodes.parquet"
    else:
        spool = table_path
    table = RowGroupWriter(spool, TABLE_SCHEMA, rows_per_group=8192)
    try:
        reduce = VerifyReduce(table, first, ds.codebase_version)
        for results in parts.run(engine, work, plan(ds, options, rejected), verify_unit, on_error=verify_unit_failed,
                                 desc="verify", unit_name="file-set", total=len(ds.file_groups("set")),
                                 cost_s=COST_S, encode=encode, decode=decode):
            for e in results:
                reduce.add(e)
        table.close()
        failed_ids = np.frombuffer(reduce.failed_ids, dtype=np.int64).copy() if reduce.failed_ids else \
            np.zeros(0, dtype=np.int64)
        report = VerifyReport(
            dataset=ds, options=options, failures=reduce.kept, rejected=rejected, seconds=time.monotonic() - t0,
            table=table_path, episodes_checked=reduce.episodes, episodes_passed=reduce.passed,
            frames_expected=reduce.frames, failures_total=reduce.failures, errors_total=reduce.errors,
            warnings_total=reduce.warnings, failures_by_check=reduce.by_check,
            failed_ids=failed_ids, dataset_failures=first, tally=reduce.tally,
            trains_wrong_total=reduce.trains_wrong, non_finite_by_feature=reduce.non_finite,
            identity=identity(ds, (int(e) for e in failed_ids), fingerprint))
        if keep is not None:
            report._cleanup = weakref.finalize(report, shutil.rmtree, str(keep), True)
        if work is None:
            return report
        assert json_path is not None
        if isinstance(json_path, StorePath):
            spool.replace(table_path)
            local = table_path.parent / json_path.name
            write_report_file(report, local)  # checked as a local report is
            parts.put_report(table_path.parent, json_path)  # the table, then the report last
            local.unlink()  # the table stays as long as the report (`report.episodes`)
        else:
            with atomic.atomic_path(table_path) as tmp_table:
                spool.replace(tmp_table)
            write_report_file(report, json_path)  # the report last: it says the run is complete
        work.remove()
        return report
    except BaseException:
        table.abort()
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
        raise
    finally:
        if work is not None:
            work.release()


def verify_in_process(src: Path | Location, options: VerifyOptions) -> VerifyReport:
    """`verify_dataset` on the inline engine (this process, one unit after another): for tests,
    benchmarks, and callers already running inside a worker."""
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return verify_dataset(src, options, engine)
