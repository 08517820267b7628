"""Reencode's check of its source, before anything is encoded: verify's metadata, parquet and timestamp
checks (`prep verify` without --decode: metadata files, totals, parquet rows, timestamps, packet pts), run
through the same engine. A source with errors is refused (its table printed, exit 1, nothing written)
unless a named repair fixes them (`--repair timestamps`) or `--accept-invalid-source` is given, in which
case the output is marked as made from an invalid source (`<out>/prep/source_check.json`, the summary)
and never called drop-in.

Repairs by name (`pipeline.checks.REPAIR_NAMES`): each check declares the repairs that make it right in the
output (`pipeline.checks.repaired_by`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.checks import (
    READER_LINES,
    REPAIR_NAMES,
    Severity,
    reader_cannot_open,
    reader_format,
    refusal_line,
    repair,
    repaired_by,
)
from pipeline.errors import ClusterError, PrepError
from pipeline.storage import Location

if TYPE_CHECKING:
    from pipeline.runner import Engine
    from pipeline.video.checks import CheckFailure

SOURCE_CHECK_REL = "prep/source_check.json"


@dataclass(slots=True)
class SourceCheck:
    """What verify found in the source: its errors, which of them the repairs cover, and the rest."""

    errors: list[CheckFailure] = field(default_factory=list)
    errors_total: int = 0
    warnings_total: int = 0
    repaired_checks: list[str] = field(default_factory=list)
    blocking: list[CheckFailure] = field(default_factory=list)
    accepted_invalid: bool = False

    @property
    def drop_in(self) -> bool:
        return not self.blocking

    def to_json(self) -> dict[str, Any]:
        return {"schema": "prep.source_check/1", "errors": self.errors_total, "warnings": self.warnings_total,
                "repaired_checks": self.repaired_checks, "accepted_invalid_source": self.accepted_invalid,
                "drop_in": self.drop_in and not self.accepted_invalid,
                "blocking": [_finding(f) for f in self.blocking[:1000]]}


class SourceRefused(PrepError):
    """The source has errors no requested repair fixes (exit 1; nothing encoded)."""

    def __init__(self, check: SourceCheck) -> None:
        self.check = check
        checks = sorted({f.check for f in check.blocking})
        super().__init__(f"the source has {check.errors_total} errors LeRobot's reader would trip over "
                         f"({', '.join(checks)}); nothing was encoded. Fix the source, or rerun with "
                         f"{_advice(checks)}")


class ReaderCannotOpen(PrepError):
    """`--reader` names a generation that cannot open the source's format at all (0.3 on v3.0, 0.4/0.6 on v2.1):
    the source check fails for it (exit 1; nothing encoded), never passes and is never ignored."""

    exit_code = 1

    def __init__(self, reader: str, codebase_version: str) -> None:
        cannot = reader_cannot_open(codebase_version, reader)
        assert cannot is not None
        fmt = reader_format(cannot)
        own = " or ".join(r.value for r in READER_LINES.get(codebase_version, ()))
        super().__init__(f"--reader {reader}: {refusal_line(cannot, codebase_version)}. Nothing was encoded: the "
                         f"source is checked for the readers of its format (--reader all or {own}); "
                         f"--format {fmt} writes the output in the format {cannot.label} reads")


def _advice(checks: Iterable[str]) -> str:
    names = [name for name in REPAIR_NAMES if set(checks) & repaired_by(name)]
    repair = " or ".join(f"--repair {n}" for n in names)
    return (repair + " (what it fixes), or " if repair else "") + \
        "--accept-invalid-source (the output is then marked invalid, never drop-in)"


def _finding(f: CheckFailure) -> dict[str, Any]:
    return {"episode": f.episode, "camera": f.camera, "check": f.check, "severity": f.severity,
            "expected": f.expected, "found": f.found, "path": f.path}


def check_repairs(repairs: Iterable[str], codebase_version: str) -> None:
    """Refuse a repair that is unknown, or that has nothing to make right in a dataset of this format."""
    for r in repairs:
        declared = repair(r)
        if declared is None:
            raise PrepError(f"unknown --repair {r!r} (choose from {', '.join(REPAIR_NAMES)})")
        if codebase_version not in declared.formats:
            raise PrepError(f"--repair {r} applies to {', '.join(declared.formats)} datasets, not this "
                            f"{codebase_version} one: {declared.not_applicable}")


def check_source(src: Path | Location, engine: Engine, repairs: tuple[str, ...], accept_invalid: bool,
                 reader: str = "all", *, index: bool = False) -> SourceCheck:
    """Run verify (no decode) on the source; raise SourceRefused when errors remain after the repairs (checked
    by `check_repairs` first) and the invalid source is not accepted. `reader` (0.4, 0.6, 0.3 or all) names the
    reader generations whose errors refuse it, as `prep verify --reader` does.

    `index`: each video is checked from its container index (its header: a few kB to a few hundred of a file of
    megabytes), and demuxed only where that finds anything or the index cannot stand for a demux
    (`VerifyOptions.index`). Where the index says less than a demux would, the caller learns it from the demux it
    makes anyway (the reencode stage's, `ReencodeResult.index_agrees`) and checks the source again without it."""
    from pipeline.formats import read_info
    from pipeline.jobs.verify import verify_dataset
    from pipeline.stages.verify import WORKER_LOST, VerifyOptions

    version = str(read_info(src).get("codebase_version"))
    if reader_cannot_open(version, reader) is not None:  # a FAIL for that reader, before any verify
        raise ReaderCannotOpen(reader, version)
    report = verify_dataset(src, VerifyOptions(reader=reader, index=index), engine)
    lost = next((f for f in report.failures if f.check == WORKER_LOST), None)
    if lost is not None:  # a resource problem of the cluster, never a source error: stop, name it, keep nothing
        raise ClusterError(f"the check of the source could not finish: {lost.found}; nothing was encoded", kept=False)
    covered = frozenset().union(*(repaired_by(r) for r in repairs)) if repairs else frozenset()

    def fixed(f: CheckFailure) -> bool:
        if f.check == "parquet_columns":  # only a missing timestamp column is made from frame_index
            return f.check in covered and f.found == "missing timestamp"
        if f.check == "metadata_files":  # of the files the readers require, only the stats are made anew
            return f.check in covered and (f.path or "").endswith("meta/episodes_stats.jsonl")
        return f.check in covered

    # NaN/inf (trains_wrong) loads in every reader: the output is as loadable as the source, not refused here
    errors = [f for f in report.failures if f.severity == Severity.ERROR]
    out = SourceCheck(errors=errors, errors_total=report.errors_total - report.trains_wrong_total,
                      warnings_total=report.warnings_total + report.trains_wrong_total)
    out.repaired_checks = sorted({f.check for f in errors if fixed(f)})
    out.blocking = [f for f in errors if not fixed(f)]
    if report.errors_total > len(errors):  # more errors than the report keeps in memory: none is covered
        out.blocking += [f for f in errors if fixed(f)][:1]
    if out.blocking and not accept_invalid:
        raise SourceRefused(out)
    out.accepted_invalid = bool(out.blocking)
    return out
