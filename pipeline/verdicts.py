"""The verdict model: what each reader generation does with a finding, and the per-reader prediction.

A LeRobot dataset is read by one line of readers per format: v2.1 by lerobot 0.3.x (openpi's pin, commit
0cf8648, reads like 0.3.3), v3.0 by lerobot 0.4.x and 0.6.x. A finding's severity per reader is one of:

    error         the reader refuses the dataset at open, raises at some sample, or hands a frame that is
                  not the row's
    trains_wrong  the reader loads every sample, but the values poison training (NaN/inf in a float column)
    warning       metadata inconsistent, loading unaffected
    info          worth knowing
    None          the reader never looks at what the check is about

`severity_by_reader` gives the per-reader view of one finding; a finding's own `severity` is the strictest among
the readers the user targets (`--reader 0.4|0.6|all`, default all). The user's own rules (`--expect-frames`,
`--size`, `--all-intra`) are errors for the exit code, but no reader looks at them: they never change the
reader prediction (`lerobot_loads`).

Light module (no third-party import): the CLI and the stages both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ERROR = "error"
TRAINS_WRONG = "trains_wrong"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, TRAINS_WRONG, WARNING, INFO)
FAILING = frozenset({ERROR, TRAINS_WRONG})  # severities that fail an episode and the run (exit 1)
RANK = {ERROR: 4, TRAINS_WRONG: 3, WARNING: 2, INFO: 1}

# Reader lines per format: "0.3" = lerobot 0.3.x / openpi (v2.1), "0.4" = lerobot 0.4.x, "0.6" = lerobot 0.6.x.
READER_LINES: dict[str, tuple[str, ...]] = {"v2.1": ("0.3",), "v3.0": ("0.4", "0.6")}
READER_NAMES = {"0.3": "lerobot 0.3.x / openpi", "0.4": "lerobot 0.4.x", "0.6": "lerobot 0.6.x"}
READER_CHOICES = ("all", "0.3", "0.4", "0.6")

# The user's own corpus rules: errors for the exit code, never a reader's concern.
USER_RULES = {"frames_expected": "--expect-frames", "size": "--size", "keyframes": "--all-intra"}


def reader_lines(codebase_version: str) -> tuple[str, ...]:
    return READER_LINES.get(codebase_version, ())


def targeted(codebase_version: str, reader: str = "all") -> tuple[str, ...]:
    """The reader lines whose verdict sets the severity and the exit code. A `reader` that does not read this
    format (0.6 on a v2.1 dataset) targets the format's own line."""
    lines = reader_lines(codebase_version)
    return (reader,) if reader in lines else lines


def _table() -> Mapping[str, Mapping[str, str | None]]:
    # Imported late: pipeline.stages.format_checks holds the format-generation rules (depth, rotation),
    # pipeline.dataset.rules the metadata rules; both are plain tables.
    from pipeline.dataset.rules import CHECK_SEVERITY
    from pipeline.stages.format_checks import READER_SEVERITY

    return {**CHECK_SEVERITY, **READER_SEVERITY}


def severity_by_reader(check: str, severity: str, codebase_version: str) -> dict[str, str | None]:
    """What each reader of the format line does with a finding of `check` whose severity (as found) is
    `severity`: a table entry when the readers differ, the user's rules None, otherwise the same for all."""
    lines = reader_lines(codebase_version)
    if check in USER_RULES:
        return {r: None for r in lines}
    per = _table().get(check)
    if per is not None:
        return {r: per.get(r) for r in lines}
    return {r: severity for r in lines}


def strictest(severities: Iterable[str | None]) -> str | None:
    kept = [s for s in severities if s is not None]
    return max(kept, key=lambda s: RANK.get(s, 0)) if kept else None


def target_severity(check: str, severity: str, codebase_version: str, reader: str = "all") -> str:
    """A finding's severity for the readers the user targets: the strictest among them; a user rule keeps its
    own; a finding no targeted reader looks at is info."""
    if check in USER_RULES:
        return severity
    per = severity_by_reader(check, severity, codebase_version)
    if not per:
        return severity
    return strictest(per.get(r) for r in targeted(codebase_version, reader)) or INFO


def lerobot_loads(codebase_version: str, reader_errors: Mapping[str, int], trains_wrong: Mapping[str, int],
                  decoded: bool, reader: str = "all") -> dict[str, dict[str, Any]]:
    """verify's prediction per reader of the format line: loads <=> no finding that reader treats as an error.
    Without --decode the pixels were not looked at, so no error then predicts nothing (`loads: null`).
    `trains_wrong` counts the findings with which that reader loads but training is poisoned."""
    aim = targeted(codebase_version, reader)
    out: dict[str, dict[str, Any]] = {}
    for r in reader_lines(codebase_version):
        errors = int(reader_errors.get(r, 0))
        out[r] = {"reader": READER_NAMES[r], "codebase_version": codebase_version,
                  "loads": False if errors else (True if decoded else None), "pixels_checked": decoded,
                  "errors": errors, "trains_wrong": int(trains_wrong.get(r, 0)), "targeted": r in aim}
    return out


class ReaderTally:
    """Per-reader counts of the findings listed in a report (the reduce side of `lerobot_loads`)."""

    def __init__(self, codebase_version: str) -> None:
        self.codebase_version = codebase_version
        self.errors: dict[str, int] = {}
        self.trains_wrong: dict[str, int] = {}
        self.rules: dict[str, int] = {}  # user rule option -> failures

    def add(self, check: str, severity: str) -> None:
        if check in USER_RULES:
            opt = USER_RULES[check]
            self.rules[opt] = self.rules.get(opt, 0) + 1
            return
        for r, s in severity_by_reader(check, severity, self.codebase_version).items():
            if s == ERROR:
                self.errors[r] = self.errors.get(r, 0) + 1
            elif s == TRAINS_WRONG:
                self.trains_wrong[r] = self.trains_wrong.get(r, 0) + 1
