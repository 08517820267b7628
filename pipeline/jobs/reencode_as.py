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
from pipeline.jobs.output import claim_output, record_settings, record_settings_in
from pipeline.jobs.reencode import ReencodeReport, reencode_dataset
from pipeline.jobs.reencode import check_options as check_reencode_options
from pipeline.runner import Engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.storage import Location, as_root, local_location, output_file, output_location, read_output_text

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


def reencode_as(src: Path | Location, out: Path | Location, options: ReencodeOptions, to: str | None,
                engine: Engine, *, limits: Limits = DEFAULT_LIMITS, keep_staged: bool = False,
                reader: str = "all") -> ReencodeAsReport:
    """`prep reencode --format TO`. Same format as the source (or None): the re-encode job into `out`.
    The other format: re-encode `src` in its own layout into `<out>/prep/reencoded`, then convert that into
    `out` by stream copy (exact: every frame is a keyframe; the layout is `pipeline/formats/`'), verify it
    (all-intra), carry the re-encode's reports into `<out>/prep/`, and remove the staged copy unless
    `keep_staged`. Both steps resume per file; a rerun of a finished output only verifies it.

    `src` and `out` are where they live (a local folder, or a `Location`: an object-store prefix). An object-store
    output stages the re-encode below itself too (`<out>/prep/reencoded`: a killed run resumes from it), and each
    step keeps its promises there: each file put whole after its checks, meta/info.json last, the output's one lock
    held through both steps."""
    src_loc = src if isinstance(src, Location) else local_location(Path(src).absolute())
    where = output_location(out if isinstance(out, Location) else Path(out).absolute())
    source: Path | Location = src_loc.path if src_loc.is_local else src_loc
    target: Path | Location = where.path if where.is_local else where
    source_format = read_info(as_root(src_loc))["codebase_version"]
    if to is None or to == source_format:
        return ReencodeAsReport(source_format, reencode_dataset(source, target, options, engine, reader=reader),
                                converted=False)
    conv = ConvertOptions(to, limits)
    check_options(conv)
    check_reencode_options(options)
    claim = claim_output(target, "reencode", OPTIONS, sources=[source])
    with claim.hold():  # held through both steps: no other command comes in between
        return _reencode_as(src_loc, where, options, to, conv, engine, keep_staged, reader)


def _exists(where: Location) -> bool:
    """A local folder, or an object prefix holding at least one object."""
    return Path(where.root).exists() if where.is_local else where.store().is_dir("")


def _reencode_as(src: Location, out: Location, options: ReencodeOptions, to: str, conv: ConvertOptions,
                 engine: Engine, keep_staged: bool, reader: str = "all") -> ReencodeAsReport:
    staged = out.child(STAGED_REL)
    source: Path | Location = src.path if src.is_local else src
    shown = str(src.path.resolve()) if src.is_local else src.url
    settings = {**conv.settings(), "reencode": {"source": shown, **options.output_settings()}}
    out_store, staged_store = out.store(), staged.store()
    if out_store.has_file("meta/info.json") and not _exists(staged):
        if out.is_local:
            record_settings(staged, out.path, settings, OPTIONS)
        else:
            record_settings_in(out_store, staged, settings, OPTIONS)
        previous = json.loads(read_output_text(output_file(out, REPORT_REL)))
        report = ConvertReport(**{k: v for k, v in previous.items() if k != "schema"})
        report.written, report.kept, report.written_files = 0, report.files, []
        report.verify = verify_output(out.path if out.is_local else out, engine, all_intra=True)
        carried = [f"{PREP_DIR}/{name}" for name in CARRIED if out_store.has_file(f"{PREP_DIR}/{name}")]
        return ReencodeAsReport(to, None, report, staged_removed=True, carried=carried)
    first = reencode_dataset(source, staged.path if staged.is_local else staged, options, engine, reader=reader)
    result = ReencodeAsReport(to, first)
    if not first.ok:
        return result
    result.convert = convert_dataset(staged, out, conv, engine, verify=True, all_intra=True, staged=True,
                                     extra_settings={"reencode": settings["reencode"]})
    if result.ok:
        for name in CARRIED:
            rel = f"{PREP_DIR}/{name}"
            if not staged_store.has_file(rel):
                continue
            if out.is_local:
                with atomic.atomic_path(out.path / rel, out.path) as tmp:
                    shutil.copyfile(staged.path / rel, tmp)
            else:  # server-side when both are one store (they are: the staged copy is below the output)
                out_store.copy_in(staged_store, rel, rel)
            result.carried.append(rel)
        if not keep_staged:
            if staged.is_local:
                shutil.rmtree(staged.path)
            else:
                for rel in [rel for rel, _st in staged_store.iter_files()]:
                    staged_store.remove(rel)
            result.staged_removed = True
    return result
