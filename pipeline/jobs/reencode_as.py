"""`prep reencode --format`: a re-encode into the other LeRobot layout (v2.1 <-> v3.0).

The re-encode job (`pipeline.jobs.reencode`) writes the new all-intra videos in the source's layout into
`<out>/prep/reencoded/`, and the convert job (`pipeline.jobs.convert`) stream-copies them into the target
layout (exact: every re-encoded frame is a keyframe), verifies the output all-intra and carries the
re-encode's reports into `<out>/prep/`. The staged copy is removed once the output is complete and verified.
Both steps resume per file; the output's one lock is held through both.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import atomic
from pipeline.formats import read_info
from pipeline.formats.v30 import Limits
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.convert import (
    DEFAULT_LIMITS,
    OPTIONS,
    REPORT_REL,
    ConvertOptions,
    ConvertReport,
    check_options,
    convert_dataset,
    verify_output,
)
from pipeline.jobs.output import claim_output, record_settings
from pipeline.jobs.reencode import ReencodeReport, reencode_dataset
from pipeline.jobs.reencode import check_options as check_reencode_options
from pipeline.runner import Engine
from pipeline.stages.reencode import ReencodeOptions

STAGED_REL = f"{PREP_DIR}/reencoded"  # the re-encode in the source's layout


@dataclass(slots=True)
class ReencodeAsReport:
    """`reencode_as`: the re-encode (into the staged copy when the format changes; None: finished by an
    earlier run whose staged copy is gone), then its conversion (None: not needed, or the re-encode failed)."""

    to: str
    reencode: ReencodeReport | None
    convert: ConvertReport | None = None
    converted: bool = True  # the format changed
    staged_removed: bool = False
    carried: list[str] = field(default_factory=list)  # the re-encode's reports kept in <out>/prep/

    @property
    def ok(self) -> bool:
        if not self.converted:
            return self.reencode is not None and self.reencode.ok
        return (self.reencode is None or bool(self.reencode.ok)) and self.convert is not None and self.convert.ok


# the staged copy's reports kept beside the output's (provenance and the source's verdict: pipeline.jobs.reencode)
CARRIED = ("reencode_report.json", "comparison.json", "provenance.json", "source_check.json")


def reencode_as(src: Path, out: Path, options: ReencodeOptions, to: str | None, engine: Engine, *,
                limits: Limits = DEFAULT_LIMITS, keep_staged: bool = False, reader: str = "all") -> ReencodeAsReport:
    """`prep reencode --format TO`. Same format as the source (or None): the re-encode job into `out`.
    The other format: re-encode `src` in its own layout into `<out>/prep/reencoded`, then convert that into
    `out` by stream copy (exact: every frame is a keyframe; the layout is `pipeline/formats/`'), verify it
    (all-intra), carry the re-encode's reports into `<out>/prep/`, and remove the staged copy unless
    `keep_staged`. Both steps resume per file; a rerun of a finished output only verifies it."""
    src, out = Path(src).absolute(), Path(out).absolute()
    source_format = read_info(src)["codebase_version"]
    if to is None or to == source_format:
        return ReencodeAsReport(source_format, reencode_dataset(src, out, options, engine, reader=reader),
                                converted=False)
    conv = ConvertOptions(to, limits)
    check_options(conv)
    check_reencode_options(options)
    claim = claim_output(out, "reencode", OPTIONS, sources=[src])
    with claim.hold():  # held through both steps: no other command comes in between
        return _reencode_as(src, out, options, to, conv, engine, keep_staged, reader)


def _reencode_as(src: Path, out: Path, options: ReencodeOptions, to: str, conv: ConvertOptions, engine: Engine,
                 keep_staged: bool, reader: str = "all") -> ReencodeAsReport:
    staged = out / STAGED_REL
    settings = {**conv.settings(), "reencode": {"source": str(src.resolve()), **options.output_settings()}}
    if (out / "meta/info.json").is_file() and not staged.exists():
        record_settings(staged, out, settings, OPTIONS)
        previous = json.loads(atomic.read_regular_text(out / REPORT_REL))
        report = ConvertReport(**{k: v for k, v in previous.items() if k != "schema"})
        report.written, report.kept, report.written_files = 0, report.files, []
        report.verify = verify_output(out, engine, all_intra=True)
        carried = [f"{PREP_DIR}/{name}" for name in CARRIED if (out / PREP_DIR / name).is_file()]
        return ReencodeAsReport(to, None, report, staged_removed=True, carried=carried)
    first = reencode_dataset(src, staged, options, engine, reader=reader)
    result = ReencodeAsReport(to, first)
    if not first.ok:
        return result
    result.convert = convert_dataset(staged, out, conv, engine, verify=True, all_intra=True, staged=True,
                                     extra_settings={"reencode": settings["reencode"]})
    if result.ok:
        for name in CARRIED:
            if (staged / PREP_DIR / name).is_file():
                with atomic.atomic_path(out / PREP_DIR / name, out) as tmp:
                    shutil.copyfile(staged / PREP_DIR / name, tmp)
                result.carried.append(f"{PREP_DIR}/{name}")
        if not keep_staged:
            shutil.rmtree(staged)
            result.staged_removed = True
    return result
