"""What every stage returns for a unit (or for each output file of one): a `StageResult` subclass, its status a
`pipeline.checks.Status` (the reports' strings) and, when it failed, the reason and the path at fault."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.checks import Status
from pipeline.errors import EpisodeError
from pipeline.video.checks import CheckFailure


@dataclass(slots=True, kw_only=True)
class StageResult:
    status: Status = Status.OK
    reason: str | None = None  # why it failed (one line: the file, the episode, the value)
    path: str | None = None  # the file at fault, when it is not the unit's own

    @property
    def failed(self) -> bool:
        return self.status == Status.FAILED

    def fail(self, reason: str, path: str | None = None) -> None:
        self.status, self.reason, self.path = Status.FAILED, reason, path


@dataclass(slots=True, kw_only=True)
class FileResult(StageResult):
    """One output file of a stream-copy stage (convert, edit): written, kept or failed."""

    kind: str  # convert: "video-concat" | "video-cut" | "data-concat" | "data-split"; edit: "video-copy" |
    # "video-splice" | "video-reencode" | "data"
    out_rel: str
    episodes: int = 0
    frames: int = 0
    out_bytes: int = 0
    seconds: float = 0.0
    index_rewritten: int = 0  # convert: rows whose `index` was not continuous in the source
    note: str | None = None  # edit: a re-encoded file: which episode, why, with what settings


def file_stage(kind: str, out_rel: str, episodes: int, frames: int, body: Callable[[], FileResult]) -> FileResult:
    """Run one output file's stage body: its result, timed, counted, or failed with the `EpisodeError`'s reason
    (the file it names and the episode)."""
    t0 = time.perf_counter()
    try:
        result = body()
    except EpisodeError as exc:
        result = FileResult(kind=kind, out_rel=out_rel, status=Status.FAILED, reason=str(exc))
    result.episodes, result.frames = episodes, frames
    result.seconds = time.perf_counter() - t0
    return result


def failure_text(failures: Sequence[CheckFailure]) -> str:
    """The first three findings of a check, one line (`+N more`)."""
    return "; ".join(f.line() for f in failures[:3]) + (f" (+{len(failures) - 3} more)" if len(failures) > 3 else "")


def reason_of(exc: BaseException) -> str:
    """The reason a unit failed, for its result: an `EpisodeError`'s message (the file and the value), else the
    exception's type and text (a stage bug, a worker lost)."""
    return exc.message if isinstance(exc, EpisodeError) else f"{type(exc).__name__}: {exc}"
