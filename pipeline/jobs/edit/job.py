"""The edit job itself: `edit_dataset` (one source, a selection), `write_edit` (what edit, split and merge share:
claim the output, plan, map `pipeline.stages.edit.edit_unit`, reduce, publish, report, verify) and `edit_as`
(`--to` the other format: the edit staged in `<out>/prep/edited`, then converted)."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.errors import DatasetError
from pipeline.formats import VERSIONS, read_info
from pipeline.formats.validate import metadata_refusals
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.convert import verify_output
from pipeline.jobs.edit.features import FeatureOptions, resolve
from pipeline.jobs.edit.plan import check_cuts, plan, units_of
from pipeline.jobs.edit.publish import PUBLISH, REPORT_REL, EditReduce, EditReport, write_report
from pipeline.jobs.edit.selection import EditOptions, Source, SrcRoot, plan_tasks, select
from pipeline.jobs.output import OptionsFile, OutputClaim, check_locations, claim_output, publish_files
from pipeline.runner import Engine
from pipeline.stages.edit import edit_failed, edit_unit
from pipeline.storage import (
    Location,
    StorePath,
    as_root,
    local_location,
    output_file,
    output_location,
    publish_tree,
    read_output_text,
)

FORMATS = VERSIONS
OPTIONS_REL = f"{PREP_DIR}/edit_options.json"
OPTIONS = OptionsFile(OPTIONS_REL, "edit_options", "edit")
DROPPED_LISTED = 10_000



def source_root(src: Path | str | Location | StorePath) -> SrcRoot:
    """A source dataset as the edit reads it: a local folder (a hub snapshot too) as its absolute `Path`, an
    object-store prefix as the `StorePath` of its root (read through its store)."""
    if isinstance(src, StorePath):
        return Path(src.location.root) / src.rel if src.location.is_local else src
    if isinstance(src, Location):
        return Path(src.root) if src.is_local else as_root(src)
    return Path(src).absolute()


def source_location(src: SrcRoot) -> Location:
    return local_location(src) if isinstance(src, Path) else src.location


def output_of(out: Path | str | Location) -> Path | Location:
    """An edit's output: a local folder as its absolute `Path`, an object-store prefix as its `Location`."""
    where = output_location(out if isinstance(out, Location) or "://" in str(out) else Path(out).absolute())
    return Path(where.root) if where.is_local else where


def open_source(src: SrcRoot, out: Path | Location) -> dict[str, Any]:
    """The source's info.json, once the output is known to be outside it and every metadata file checked."""
    info = read_info(src)
    fmt = info["codebase_version"]
    if fmt not in FORMATS:
        raise DatasetError(src / "meta/info.json", f"codebase_version {fmt!r}: prep edit reads v2.1 and v3.0")
    # the source is never written: an output in it, equal to it or holding it is refused (local or object store)
    check_locations(source_location(src), output_location(out))
    metadata_refusals(src, "edit")[0].raise_if_any()
    return info


def claim_edit_output(out: Path | Location, sources: Sequence[SrcRoot] = ()) -> OutputClaim:
    """The edit's output, refused now when in a source, busy, not an edit's, or holding a link (`claim_output`)."""
    return claim_output(out, "edit", OPTIONS, sources=[source_location(s) for s in sources])


def edit_dataset(src: Path | Location | StorePath, out: Path | Location, options: EditOptions, engine: Engine, *,
                 verify: bool = True, reencode_partial: bool = False,
                 features: FeatureOptions | None = None) -> EditReport:
    """Write `src` without the episodes `options` leaves out (and without the cameras, under the keys,
    `features` says) into the dataset `out` (same format) through `engine`; resumable; never writes under
    `src`. Raises `EditRefused` (a cut off a keyframe) and `PrepError` for a bad selection, dataset or output,
    before anything is written. `src` and `out` may be object-store locations (`s3://...`): the source is read
    through its store; an output's files are put whole after their checks (a file kept whole copied server-side
    when both are one store), its metadata made in a local temp folder and put with meta/info.json last."""
    src = source_root(src)
    features = features or FeatureOptions()
    out = output_of(out)
    info = open_source(src, out)
    fmap = resolve(features, [src], [info])[0]
    sel, total = select(options, src, info, keep_all=features.given())
    claim = claim_edit_output(out, [src])
    source = Source(src, info, sel, plan_tasks(src, info, sel), layout=fmap.info(info) if fmap.changes else None,
                    features=fmap)
    return write_edit([source], claim, total, engine, verify=verify, reencode_partial=reencode_partial,
                      settings_extra=features.settings())


def write_edit(sources: Sequence[Source], claim: OutputClaim, total: int, engine: Engine, *, verify: bool = True,
               settings_extra: dict[str, Any] | None = None, cuts_checked: bool = False,
               info_out: dict[str, Any] | None = None, reencode_partial: bool = False) -> EditReport:
    """The claimed output holding the episodes each source's selection keeps, in order (the sources and the
    output already checked). `info_out`: the output's info.json before its totals (default: the first
    source's)."""
    where = claim.location
    out: Path | str = claim.path if where.is_local else where.url
    first = sources[0]
    fmt = first.info["codebase_version"]
    kept = sum(s.sel.kept_count for s in sources)
    dropped = [{"episode": e, "reason": r} for e, r in itertools.islice(
        (d for s in sources for d in s.sel.iter_dropped()), DROPPED_LISTED)]
    if len(sources) == 1:
        settings = {"format": fmt, "kept": first.sel.kept_ranges(), "source_episodes": total}
    else:
        settings = {"format": fmt, "kept": "all", "source_episodes": total,
                    "merge": [str(s.src.resolve()) if isinstance(s.src, Path) else str(s.src) for s in sources]}
    settings.update(settings_extra or {})
    if reencode_partial:
        settings["reencode_partial"] = True
    report = EditReport(str(first.src), str(out), fmt, settings, engine.backend, source_episodes=total,
                        dropped_total=sum(s.sel.dropped_count for s in sources), dropped=dropped)
    engine.prepare(kept)  # the session is up (a large edit: its cluster started) before anything is written
    if not cuts_checked:
        check_cuts(sources, out, engine, reencode_partial=reencode_partial)
    with claim.hold(settings, source=source_location(first.src)):
        t0 = time.perf_counter()
        reduce = EditReduce(report)
        for batch in engine.map(edit_unit, units_of(plan(sources, out)), on_error=edit_failed,
                                desc="edit", unit_name="file", cost_s=None,
                                measure=lambda rs: {"files": float(len(rs))}):
            for results in batch.results:
                for r in results:
                    reduce.add(r)
        claim.remove_temps()  # temp files of workers killed mid-task (their task was retried)
        report.seconds = time.perf_counter() - t0
        info = info_out if info_out is not None else first.out_info
        if where.is_local:
            publish_files(claim.path, report, lambda: PUBLISH[fmt](sources, claim.path, info, report), write_report)
        else:  # the metadata made in a local temp folder, then put (meta/info.json last); the report put after it
            with tempfile.TemporaryDirectory(prefix="prep-publish-") as spool:

                def publish() -> None:
                    PUBLISH[fmt](sources, Path(spool), info, report)
                    publish_tree(Path(spool), where, last="meta/info.json")

                publish_files(Path(spool), report, publish, lambda _spool, r: write_report(out, r))
    if report.complete and verify:
        report.verify = verify_output(claim.path if where.is_local else where, engine)
        write_report(out, report)
    return report


# ---- --to: the edit in the other format ------------------------------------------------------------

STAGED_REL = f"{PREP_DIR}/edited"  # the edit in the source's format, converted into <out>


@dataclass(slots=True)
class EditAsReport:
    """`--to` the other format: the edit (staged in `<out>/prep/edited`), then its conversion into `<out>`."""

    edit: EditReport
    convert: Any = None  # pipeline.jobs.convert.ConvertReport | None (None: the edit failed)
    staged_removed: bool = False

    @property
    def ok(self) -> bool:
        return self.edit.ok and self.convert is not None and bool(self.convert.ok)


def edit_as(to: str, out: Path | Location, engine: Engine, edit: Any, *, verify: bool = True) -> EditAsReport:
    """Run `edit(staged_out, verify)` (an edit or merge writing the source's format) into `<out>/prep/edited`,
    then `prep convert` it into `out` by stream copy (pipeline.jobs.convert, its checks and refusals: v3.0 ->
    v2.1 needs every episode to start on a keyframe) and remove the staged copy. Both steps resume per file.
    `out` may be an object-store location: the staged edit is below it too (a killed run resumes from it), the
    output's one lock held through the conversion."""
    from pipeline.formats.v30 import Limits
    from pipeline.jobs.convert import ConvertOptions, convert_dataset
    from pipeline.jobs.convert import check_options as check_convert

    out = output_of(out)
    where = output_location(out)
    check_convert(ConvertOptions(to))
    claim = claim_output(out, "edit", None)  # busy or holding a link: refused now (its options are the convert's)
    staged_at = where.child(STAGED_REL)
    staged: Path | Location = Path(staged_at.root) if staged_at.is_local else staged_at
    first: EditReport = edit(staged, False)  # refusals before anything is written; its own lock
    result = EditAsReport(first)
    if not first.ok:
        return result
    info = read_info(as_root(staged_at))
    limits = Limits(chunks_size=int(info.get("chunks_size", 1000)),
                    data_files_size_in_mb=float(info.get("data_files_size_in_mb", 100)),
                    video_files_size_in_mb=float(info.get("video_files_size_in_mb", 200)))
    with claim.hold():
        result.convert = convert_dataset(staged, out, ConvertOptions(to, limits), engine, verify=verify, staged=True)
        if result.convert.ok:
            if isinstance(out, Path):
                atomic.write_json(out / REPORT_REL, json.loads(read_output_text(output_file(staged_at, REPORT_REL))),
                                  indent=2, root=out)
                shutil.rmtree(staged_at.root)  # a local output's staged edit: a folder below it
            else:  # the edit's report copied server-side (one store), then every staged object removed
                store = staged_at.store()
                where.store().copy_in(store, REPORT_REL, REPORT_REL)
                for rel in [rel for rel, _st in store.iter_files()]:
                    store.remove(rel)
            result.staged_removed = True
    return result
