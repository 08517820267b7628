"""The edit job: a LeRobot dataset with some episodes left out (`prep edit --drop/--keep`), by stream copy,
in the source's format; nothing is re-encoded and every kept packet is the source's byte for byte.

plan     the source metadata -> the kept episodes (renumbered 0, 1, 2, ... in source order) -> one unit per
         output file, lazily and deterministically. v2.1: each kept episode's parquet and mp4s under its new
         index (a file copy; one episode per file, so no cut). v3.0: each source file that holds a kept
         episode becomes one output file holding only its kept episodes (so every output file is within the
         size limits the source kept), numbered chunk/file in order per stream. Before anything is written,
         `check_splice` maps over the v3.0 video files that lose an episode: a kept episode after a cut must
         start on a keyframe (LeRobot's writer starts every episode's encode afresh, so its episodes do);
         otherwise the edit is refused (`EditRefused`, exit 2) naming the file and episode.
stage    `pipeline.stages.edit.edit_unit` (keep a file that checks out, else write under a temp name, check,
         rename: `pipeline.stages.keep.keep_or_write`)
reduce   `EditReduce`: counts and the first failures
publish  only when every output file succeeded: tasks (those the kept episodes use, renumbered in source
         order), episodes metadata (renumbered; v3.0 `dataset_from/to_index`, file indices and exact
         `from/to_timestamp`), per-episode stats carried (`episode_index`, `index`, `task_index` moved with
         the renumbering), global stats aggregated from them as LeRobot does, info.json last (totals,
         `splits`); then prep/edit_report.json; then `prep verify` of the output.

Resumable per output file (`pipeline.stages.keep`: a file is kept only when it is the one a new run would write);
`<out>/prep/edit_options.json` records the source and the kept episodes (a rerun with another selection is
refused); `<out>/prep/output.lock` while running.

The package, one module per part: `selection` (which episodes, tasks), `features` (which cameras, under which
keys: --keep-cameras, --drop-cameras, --rename), `plan` (v2.1 and v3.0 units, the cut checks), `publish` (reduce,
metadata, report), `job` (edit_dataset, write_edit, edit_as), `split` and `merge`.
"""

from __future__ import annotations

from pipeline.jobs.edit.features import FeatureMap, FeatureOptions, camera_keys, resolve
from pipeline.jobs.edit.job import (
    DROPPED_LISTED,
    OPTIONS,
    OPTIONS_REL,
    STAGED_REL,
    EditAsReport,
    claim_edit_output,
    edit_as,
    edit_dataset,
    open_source,
    write_edit,
)
from pipeline.jobs.edit.merge import merge_datasets, merge_difference, merged_info
from pipeline.jobs.edit.plan import FAILURES_LISTED, EditRefused, Placed, PlanItem, check_cuts, plan, units_of
from pipeline.jobs.edit.publish import PUBLISH, REPORT_REL, EditReduce, EditReport, renumbered_stats, write_report
from pipeline.jobs.edit.selection import (
    KEPT_RANGES_LISTED,
    EditOptions,
    Selection,
    Source,
    TaskPlan,
    episode_tasks,
    failed_in_report,
    plan_tasks,
    ranges,
    select,
)
from pipeline.jobs.edit.split import (
    SplitPart,
    SplitReport,
    _largest_remainder,
    split_arrays,
    split_dataset,
    split_selections,
)

__all__ = [
    "DROPPED_LISTED",
    "FAILURES_LISTED",
    "KEPT_RANGES_LISTED",
    "OPTIONS",
    "OPTIONS_REL",
    "PUBLISH",
    "REPORT_REL",
    "STAGED_REL",
    "EditAsReport",
    "EditOptions",
    "EditReduce",
    "EditRefused",
    "EditReport",
    "FeatureMap",
    "FeatureOptions",
    "Placed",
    "PlanItem",
    "Selection",
    "Source",
    "SplitPart",
    "SplitReport",
    "TaskPlan",
    "_largest_remainder",
    "camera_keys",
    "check_cuts",
    "claim_edit_output",
    "edit_as",
    "edit_dataset",
    "episode_tasks",
    "failed_in_report",
    "merge_datasets",
    "merge_difference",
    "merged_info",
    "open_source",
    "plan",
    "plan_tasks",
    "ranges",
    "renumbered_stats",
    "resolve",
    "select",
    "split_arrays",
    "split_dataset",
    "split_selections",
    "units_of",
    "write_edit",
    "write_report",
]
