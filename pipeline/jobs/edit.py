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
stage    `pipeline.stages.edit.edit_unit` (write under a temp name, check, rename; or keep a file that
         already exists and passes the checks)
reduce   `EditReduce`: counts and the first failures
publish  only when every output file succeeded: tasks (those the kept episodes use, renumbered in source
         order), episodes metadata (renumbered; v3.0 `dataset_from/to_index`, file indices and exact
         `from/to_timestamp`), per-episode stats carried (`episode_index`, `index`, `task_index` moved with
         the renumbering), global stats aggregated from them as LeRobot does, info.json last (totals,
         `splits`); then prep/edit_report.json; then `prep verify` of the output.

Resumable per output file; `<out>/prep/edit_options.json` records the source and the kept episodes (a rerun
with another selection is refused); `<out>/prep/output.lock` while running.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import time
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.dataset.info import format_template, video_keys
from pipeline.dataset.model import resolve_inside
from pipeline.dataset.stats import StatsAggregator, shaped_like
from pipeline.errors import DatasetError, PrepError
from pipeline.formats import VERSIONS, format_of, read_info
from pipeline.formats.plan import file_mb, parquet_uncompressed_mb
from pipeline.formats.v21 import (
    EPISODES_REL,
    EPISODES_STATS_REL,
    V21EpisodesWriter,
    iter_episode_lines,
    iter_v21_episode_lines,
    iter_v21_stats,
    write_tasks_v21,
)
from pipeline.formats.v30 import V30EpisodesWriter, iter_v30_episodes, next_chunk_file, stats_of_row, write_tasks_v30
from pipeline.formats.validate import metadata_refusals
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.convert import copy_root_files, verify_output
from pipeline.jobs.output import (
    check_output_tree,
    check_paths,
    claim_output,
    command_line,
    output_lock,
    refuse_busy,
    refuse_foreign,
)
from pipeline.rates import frames_to_seconds
from pipeline.runner import Engine
from pipeline.schemas import validate
from pipeline.stages.edit import (
    CopyVideoUnit,
    DataInput,
    DataPart,
    EditDataUnit,
    EditResult,
    EditUnit,
    ReencodeVideoUnit,
    SpliceCheckUnit,
    SpliceVideoUnit,
    VideoSegment,
    check_partial,
    check_splice,
    check_splice_failed,
    edit_failed,
    edit_unit,
)
from pipeline.stages.edit_video import SpliceSpan
from pipeline.text import shown as shown_value
from pipeline.video.remux import StartProblem

FORMATS = VERSIONS
OPTIONS_REL = f"{PREP_DIR}/edit_options.json"
REPORT_REL = f"{PREP_DIR}/edit_report.json"
FAILURES_LISTED = 10_000
DROPPED_LISTED = 10_000
KEPT_RANGES_LISTED = 10_000  # edit_options.json lists the kept ranges up to this many, else their sha256


def ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (sorted input)."""
    parts: list[str] = []
    start = prev = None
    for i in indices:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


@dataclass(slots=True, frozen=True)
class EditOptions:
    """Which episodes to leave out (source indices; they combine: the kept episodes are those every `keep`
    option keeps and no `drop` option drops). `drop_failed`: a `prep verify --out` report of this dataset
    (its failed episodes are dropped). Tasks by text or index: `drop_tasks` drops every episode that uses one
    of them, `keep_tasks` keeps only episodes whose tasks are all among them."""

    drop: tuple[int, ...] | None = None
    keep: tuple[int, ...] | None = None
    drop_failed: Path | None = None
    drop_tasks: tuple[str, ...] | None = None
    keep_tasks: tuple[str, ...] | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.drop, self.keep, self.drop_failed, self.drop_tasks, self.keep_tasks))


class EditRefused(PrepError):
    """The edit cannot be done exactly by stream copy (a cut off a keyframe)."""

    def __init__(self, message: str, problems: list[StartProblem]) -> None:
        self.problems = problems
        super().__init__(message)


class Selection:
    """The kept episodes (source indices, ascending; new index = `offset` + position) and why each other one was
    dropped, held as runs: the kept ones as [start, stop) ranges, the dropped ones as ranges with a reason code
    (a few distinct reasons). Memory grows with the number of runs (int32 arrays, 12 bytes a run), not with
    the corpus: dropping 3 episodes of 16 M holds 4 runs. Built in ascending order with `add`."""

    __slots__ = ("_code", "_de", "_dr", "_ds", "_kc", "_ke", "_ks", "dropped_count", "kept_count", "offset",
                 "reasons")

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # the new index of the first kept episode (a merge's later sources)
        self.kept_count = self.dropped_count = 0
        self.reasons: list[str] = []
        self._code: dict[str, int] = {}
        self._ks, self._ke, self._kc = array("i"), array("i"), array("i")  # kept runs: start, stop, kept before
        self._ds, self._de, self._dr = array("i"), array("i"), array("i")  # dropped runs: start, stop, reason

    @classmethod
    def all(cls, n: int, offset: int = 0) -> Selection:
        sel = cls(offset)
        if n:
            sel._ks.append(0)
            sel._ke.append(n)
            sel._kc.append(0)
            sel.kept_count = n
        return sel

    @classmethod
    def of(cls, decisions: Iterable[tuple[int, str | None]], offset: int = 0) -> Selection:
        sel = cls(offset)
        for idx, reason in decisions:
            sel.add(idx, reason)
        return sel

    def add(self, idx: int, reason: str | None) -> None:
        """Episode `idx` (greater than every one added before) kept (`reason` None) or dropped for `reason`."""
        if reason is None:
            if self._ke and self._ke[-1] == idx:
                self._ke[-1] = idx + 1
            else:
                self._ks.append(idx)
                self._ke.append(idx + 1)
                self._kc.append(self.kept_count)
            self.kept_count += 1
            return
        code = self._code.get(reason)
        if code is None:
            code = self._code[reason] = len(self.reasons)
            self.reasons.append(reason)
        if self._de and self._de[-1] == idx and self._dr[-1] == code:
            self._de[-1] = idx + 1
        else:
            self._ds.append(idx)
            self._de.append(idx + 1)
            self._dr.append(code)
        self.dropped_count += 1

    def new_of(self, idx: int) -> int | None:
        """The new index of source episode `idx`, None when it is dropped (a binary search over the runs)."""
        k = bisect_right(self._ks, idx) - 1
        if k < 0 or idx >= self._ke[k]:
            return None
        return self.offset + self._kc[k] + idx - self._ks[k]

    def is_kept(self, idx: int) -> bool:
        return self.new_of(idx) is not None

    def reason_of(self, idx: int) -> str | None:
        k = bisect_right(self._ds, idx) - 1
        return self.reasons[self._dr[k]] if k >= 0 and idx < self._de[k] else None

    def kept_runs(self) -> Iterator[tuple[int, int]]:
        return zip(self._ks, self._ke, strict=True)

    def iter_kept(self) -> Iterator[int]:
        for start, stop in self.kept_runs():
            yield from range(start, stop)

    def iter_dropped(self) -> Iterator[tuple[int, str]]:
        for start, stop, code in zip(self._ds, self._de, self._dr, strict=True):
            for idx in range(start, stop):
                yield idx, self.reasons[code]

    def kept_array(self) -> Any:
        """The kept source indices as a numpy int64 array."""
        import numpy as np

        if not self._ks:
            return np.zeros(0, dtype=np.int64)
        starts, stops = np.frombuffer(self._ks, dtype=np.int32), np.frombuffer(self._ke, dtype=np.int32)
        lengths = (stops - starts).astype(np.int64)
        first = np.repeat(starts.astype(np.int64) - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        return first + np.arange(int(lengths.sum()), dtype=np.int64)

    def kept_ranges(self) -> str:
        """"0-2,5,7-8": the kept episodes as ranges (edit_options.json; a long one is a digest of itself)."""
        parts = (str(a) if b - a == 1 else f"{a}-{b - 1}" for a, b in self.kept_runs())
        if len(self._ks) <= KEPT_RANGES_LISTED:
            return ",".join(parts)
        digest = hashlib.sha256()
        for i, part in enumerate(parts):
            digest.update(((i and ",") or "").encode() + part.encode())
        return f"sha256:{digest.hexdigest()} ({len(self._ks):,} ranges, {self.kept_count:,} episodes)"


@dataclass(slots=True)
class Source:
    """One source of the output: its root, info.json, kept episodes, task numbering and the rows before it."""

    src: Path
    info: dict[str, Any]
    sel: Selection
    tasks: TaskPlan
    index_offset: int = 0  # the output rows before this source's first kept episode
    layout: dict[str, Any] | None = None  # the output's info.json (paths, chunks_size); None: the source's
    # --reencode-partial: (camera, source episode) -> why its cut needs a re-encode (each in a file of its own)
    reencode: dict[tuple[str, int], str] = field(default_factory=dict)

    @property
    def out_info(self) -> dict[str, Any]:
        return self.layout if self.layout is not None else self.info


@dataclass(slots=True)
class EditReport:
    src: str
    out: str
    format: str
    options: dict[str, Any]
    engine: str
    source_episodes: int = 0
    dropped_total: int = 0
    dropped: list[dict[str, Any]] = field(default_factory=list)  # the first DROPPED_LISTED: episode, reason
    files: int = 0
    written: int = 0
    kept: int = 0
    failed: int = 0
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    out_bytes: int = 0
    seconds: float = 0.0
    publish_seconds: float = 0.0
    complete: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)
    verify: dict[str, Any] | None = None
    reencoded_total: int = 0  # --reencode-partial: output files re-encoded (one episode each)
    reencoded: list[dict[str, Any]] = field(default_factory=list)  # the first FAILURES_LISTED: path, note

    @property
    def ok(self) -> bool:
        return self.complete and not self.failures and (self.verify is None or bool(self.verify["passed"]))


# ---- selection ------------------------------------------------------------------------------------


CHECK_NAME_SHOWN = 64  # a check name from a report, clipped in the reasons (the summary's lines)
CHECKS_SHOWN = 8  # check names per reason


def _checks_reason(checks: list[str]) -> str:
    """"verify: a, b" from a report row's checks_failed, each name clipped, at most CHECKS_SHOWN of them."""
    names = [c if len(c) <= CHECK_NAME_SHOWN else c[:CHECK_NAME_SHOWN - 3] + "..." for c in checks[:CHECKS_SHOWN]]
    more = f" (+{len(checks) - CHECKS_SHOWN} more)" if len(checks) > CHECKS_SHOWN else ""
    return "verify: " + (", ".join(names) or "failed") + more


def _report_episodes(doc: dict[str, Any], shown: str, ds: Any) -> dict[int, str]:
    """The report's `episodes` list, strictly: each row an object with an integer `episode` of this dataset
    (never a bool, a float or a string), a `status` string and, when failed, `checks_failed` a list of strings;
    anything else is refused with one line naming the value. -> the failed episodes and why."""
    rows = doc.get("episodes")
    if not isinstance(rows, list):
        raise PrepError(f"--drop-failed {shown}: its `episodes` is {shown_value(rows, 60)}, not a list")
    failed: dict[int, str] = {}
    for i, row in enumerate(rows):
        where = f"--drop-failed {shown}: episodes[{i}]"
        if not isinstance(row, dict):
            raise PrepError(f"{where} is {shown_value(row, 60)}, not an object")
        ep, status = row.get("episode"), row.get("status")
        if type(ep) is not int:  # a bool or a float is refused, never read as 1 or 2
            raise PrepError(f"{where}.episode is {shown_value(ep, 60)}, not an episode index (an integer)")
        if ds.episodes.position(ep) is None:
            raise PrepError(f"{where}.episode is {shown_value(ep, 60)}, not an episode of {atomic.shown(ds.root)}: "
                            "verify this dataset again")
        if status not in ("passed", "failed"):
            raise PrepError(f"{where}.status is {shown_value(status, 60)}, not \"passed\" or \"failed\"")
        if status != "failed":
            continue
        checks = row.get("checks_failed", [])
        if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
            raise PrepError(f"{where}.checks_failed is {shown_value(checks, 60)}, not a list of check names")
        failed[ep] = _checks_reason(checks)
    return failed


def failed_in_report(report_path: Path, src: Path) -> dict[int, str]:
    """The episodes a `prep verify --out` report of `src` failed -> the checks they failed. Refuses a report
    of another dataset: its `dataset.fingerprint` (`pipeline.jobs.identity`) must be the source's, both the
    digest of every file under meta/ (info.json, the episode metadata) and that of the files of each episode it
    failed (size and mtime, or their bytes when verify ran with --fingerprint content); and a report whose
    episode list is not what verify writes (an id of another dataset, a bool, a float, a string)."""
    from pipeline.bounded import read_json
    from pipeline.formats import open_dataset
    from pipeline.jobs import identity

    shown = atomic.shown(report_path)
    try:
        doc = read_json(report_path)
    except (OSError, ValueError) as exc:
        raise PrepError(f"--drop-failed {shown}: cannot read the report ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "prep.verify/1":
        raise PrepError(f"--drop-failed {shown}: not a `prep verify --out` report (schema prep.verify/1)")
    found = doc.get("dataset")
    dataset: dict[str, Any] = found if isinstance(found, dict) else {}
    recorded = dataset.get("fingerprint")
    if identity.recorded_mode(recorded) is None:
        raise PrepError(f"--drop-failed {shown}: the report has no dataset fingerprint of this prep (written by an "
                        f"older prep): run `prep verify {atomic.shown(src)} --out REPORT` again")
    assert isinstance(recorded, dict)
    ds, _rejected = open_dataset(src)
    root = dataset.get("root")
    again = f"; report root {root!r}): verify this dataset again"[:300]
    differs = identity.metadata_mismatch(recorded, src)
    if differs is not None:
        raise PrepError(f"--drop-failed {shown}: the report is of another dataset or of other metadata ({differs}"
                        + again)
    failed = _report_episodes(doc, shown, ds)
    differs = identity.files_mismatch(recorded, ds, failed)
    if differs is not None:
        raise PrepError(f"--drop-failed {shown}: the report is of another dataset's files or of files since "
                        f"changed (fingerprint: {differs}" + again)
    return failed


def _resolve_tasks(given: Sequence[str], tasks: list[str], flag: str) -> set[int]:
    """Task texts or indices -> task indices (an exact text first, then an index); refuses an unknown one."""
    index_of = {t: i for i, t in enumerate(tasks)}
    out: set[int] = set()
    for g in given:
        if g in index_of:
            out.add(index_of[g])
        elif g.strip().isascii() and g.strip().isdigit() and len(g.strip()) < 19 and int(g) < len(tasks):
            out.add(int(g))
        else:
            raise PrepError(f"{flag}: {shown_value(g, 200)} is neither a task of the dataset nor a task_index "
                            f"0..{len(tasks) - 1}")
    return out


class _Members:
    """Membership of ascending indices in a sorted set of given ones, by a cursor (one pass, no Python set)."""

    def __init__(self, given: Sequence[int] | None) -> None:
        import numpy as np

        self.values = array("q", np.unique(np.asarray(given if given is not None else (), dtype=np.int64)).tobytes())
        self.pos = 0

    def __contains__(self, idx: int) -> bool:
        v, p = self.values, self.pos
        while p < len(v) and v[p] < idx:
            p += 1
        self.pos = p
        return p < len(v) and v[p] == idx

    def count_outside(self, total: int) -> int:
        v = self.values
        return len(v) - (bisect_right(v, total - 1) - bisect_right(v, -1))


def select(options: EditOptions, src: Path, info: dict[str, Any]) -> tuple[Selection, int]:
    """The kept episodes and the source's episode count, in one pass over the episode metadata (memory: the
    selection's runs, not the corpus); refuses an index outside it and an empty result."""
    if not options.given():
        raise PrepError("say which episodes to leave out: --drop EPISODES, --keep EPISODES, --drop-failed REPORT, "
                        "--drop-tasks TASK ... or --keep-tasks TASK ...")
    failed = failed_in_report(options.drop_failed, src) if options.drop_failed is not None else {}
    task_list = source_tasks(src, info["codebase_version"]) if options.drop_tasks or options.keep_tasks else []
    drop_t = _resolve_tasks(options.drop_tasks or (), task_list, "--drop-tasks")
    keep_t = _resolve_tasks(options.keep_tasks, task_list, "--keep-tasks") if options.keep_tasks else None
    index_of = {t: i for i, t in enumerate(task_list)}
    keep = _Members(options.keep) if options.keep is not None else None
    drop = _Members(options.drop)
    sel = Selection()
    total = 0
    for idx, texts, _n in episode_tasks(src, info):
        total += 1
        used = {index_of.get(t, -1) for t in texts} if task_list else set()
        reason: str | None = None
        if keep is not None and idx not in keep:
            reason = "not in --keep"
        elif idx in drop:
            reason = "--drop"
        elif idx in failed:
            reason = failed[idx]
        elif used & drop_t:
            reason = f"--drop-tasks: task {min(used & drop_t)}"
        elif keep_t is not None and not used <= keep_t:
            reason = "--keep-tasks: a task not kept" if used else "--keep-tasks: no task"
        sel.add(idx, reason)
    for flag, members in (("--drop", drop), ("--keep", keep)):
        if members is None:
            continue
        n_out = members.count_outside(total)
        if n_out:
            first = next(x for x in members.values if not 0 <= x < total)
            raise PrepError(f"{flag}: episode {first} is not in {atomic.shown(src)} (episodes 0..{total - 1})"
                            + (f" (and {n_out - 1} more)" if n_out > 1 else ""))
    if not sel.kept_count:
        raise PrepError(f"nothing would be left: every one of the {total} episodes is dropped")
    return sel, total


# ---- tasks ----------------------------------------------------------------------------------------


def source_tasks(src: Path, fmt: str) -> list[str]:
    return [t for _i, t in format_of(fmt).iter_tasks(src)]


def episode_tasks(src: Path, info: dict[str, Any]) -> Iterator[tuple[int, tuple[str, ...], int]]:
    """(episode, tasks, length) in order, either format (its strict reader)."""
    return format_of(info).iter_episode_tasks(src, info)


@dataclass(slots=True)
class TaskPlan:
    """The output's tasks (those the kept episodes use, in source order) and old -> new task_index."""

    tasks: list[str]
    old_to_new: dict[int, int]
    index_of: dict[str, int]  # source task text -> source task_index

    def map_for(self, texts: Sequence[str], src: Path, episode: int) -> tuple[tuple[int, int], ...]:
        out = []
        for t in texts:
            old = self.index_of.get(t)
            if old is None:
                raise DatasetError(src / "meta", f"episode {episode}: task {t!r} is not in the tasks table"[:300])
            out.append((old, self.old_to_new[old]))
        return tuple(sorted(set(out)))


def plan_tasks(src: Path, info: dict[str, Any], sel: Selection) -> TaskPlan:
    fmt = info["codebase_version"]
    tasks = source_tasks(src, fmt)
    index_of = {t: i for i, t in enumerate(tasks)}
    used: set[int] = set()
    for idx, texts, _n in episode_tasks(src, info):
        if sel.is_kept(idx):
            for t in texts:
                if t not in index_of:
                    raise DatasetError(src / "meta", f"episode {idx}: task {t!r} is not in the tasks table"[:300])
                used.add(index_of[t])
    new_tasks = [t for i, t in enumerate(tasks) if i in used]
    old_to_new = {old: new for new, old in enumerate(sorted(used))}
    return TaskPlan(new_tasks, old_to_new, index_of)


# ---- plan -----------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Placed:
    """Where one kept episode lands: its new index, first row, and (v3.0) data file and per-camera file and
    frames before it there."""

    episode: int
    new_episode: int
    length: int
    new_from_index: int
    data_file: tuple[int, int] = (0, 0)
    videos: tuple[tuple[str, int, int, int], ...] = ()  # (camera, chunk, file, frames before)


PlanItem = Placed | EditUnit


def plan_v21(s: Source, out: Path) -> Iterator[PlanItem]:
    src, info, sel, tasks = s.src, s.info, s.sel, s.tasks
    info_path = src / "meta/info.json"
    cameras = video_keys(info, info_path)
    cs, out_cs = int(info.get("chunks_size", 1000)), int(s.out_info.get("chunks_size", 1000))
    data_tpl, video_tpl = info["data_path"], str(info.get("video_path"))
    data_out_tpl, video_out_tpl = s.out_info["data_path"], str(s.out_info.get("video_path"))
    before = s.index_offset
    for idx, texts, length in iter_v21_episode_lines(src):
        new = sel.new_of(idx)
        if new is None:
            continue
        data_src = format_template(data_tpl, info_path, {"episode_chunk", "episode_index"},
                                   episode_chunk=idx // cs, episode_index=idx)
        data_out = format_template(data_out_tpl, info_path, {"episode_chunk", "episode_index"},
                                   episode_chunk=new // out_cs, episode_index=new)
        yield EditDataUnit(str(out), data_out, (DataInput(str(src), data_src, (DataPart(idx, new, length, before),),
                                                          tasks.map_for(texts, src, idx)),))
        for cam in cameras:
            rels = [format_template(tpl, info_path, {"episode_chunk", "episode_index", "video_key"},
                                    episode_chunk=e // c, episode_index=e, video_key=cam)
                    for tpl, c, e in ((video_tpl, cs, idx), (video_out_tpl, out_cs, new))]
            yield CopyVideoUnit(str(src), str(out), rels[0], rels[1], idx, new, length, float(info["fps"]), cam)
        yield Placed(idx, new, length, before)
        before += length


class _Run:
    """The consecutive episodes of one source file (a data file, or one camera's video file)."""

    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.spans: list[SpliceSpan] = []
        self.parts: list[DataPart] = []
        self.tasks: set[tuple[int, int]] = set()
        self.out: tuple[int, int] | None = None  # the output file, once a kept episode is in it
        self.kept_frames = 0  # frames of the output file before the run's next kept episode


class _Stream:
    """One output stream (the data files, or one camera's video files): LeRobot's chunk/file numbering, and
    the source runs each output file holds. Without a size limit every source run is a file of its own;
    with one (a merge) runs go into the open file, as LeRobot packs them, while it is below the limit and
    its codec parameters are the same (`key`)."""

    def __init__(self, chunks_size: int, limit_mb: float | None) -> None:
        self.chunks_size, self.limit_mb = chunks_size, limit_mb
        self.next = (0, 0)
        self.cur: tuple[int, int] | None = None
        self.key: Any = None
        self.size_mb = 0.0
        self.frames = 0
        self.members: list[Any] = []

    def open_run(self, key: Any, size_mb: float) -> tuple[tuple[int, int], int,
                                                          tuple[tuple[int, int], list[Any]] | None]:
        """The output file a new run goes into, the frames already in it, and the file this closed (if any)."""
        closed = None
        if self.cur is None or self.limit_mb is None or key != self.key or self.size_mb + size_mb >= self.limit_mb:
            closed = self.close()
            self.cur, self.next = self.next, next_chunk_file(*self.next, self.chunks_size)
            self.key, self.size_mb, self.frames, self.members = key, 0.0, 0, []
        self.size_mb += size_mb
        assert self.cur is not None
        return self.cur, self.frames, closed

    def reserve(self) -> tuple[int, int]:
        """A file of its own (a re-encoded episode), numbered next without closing the open one."""
        where, self.next = self.next, next_chunk_file(*self.next, self.chunks_size)
        return where

    def add(self, member: Any, frames: int) -> None:
        self.members.append(member)
        self.frames += frames

    def close(self) -> tuple[tuple[int, int], list[Any]] | None:
        if self.cur is None or not self.members:
            return None
        out = (self.cur, self.members)
        self.members = []
        return out


class _Streams:
    """The output's data stream and one video stream per camera (shared by a merge's sources). `pack`: the
    output's limits (data and video MB) to pack source files together up to; None: a file per source file."""

    def __init__(self, chunks_size: int, cameras: Sequence[str], pack: tuple[float, float] | None = None) -> None:
        self.data = _Stream(chunks_size, pack[0] if pack else None)
        self.video = {cam: _Stream(chunks_size, pack[1] if pack else None) for cam in cameras}
        self.pack = pack is not None


def _video_key(path: Path) -> Any:
    """What must be equal for two source files' packets to share an output file."""
    from pipeline.stages.edit_video import file_signature

    try:
        sig = file_signature(path)
    except PrepError:
        return ("unreadable", str(path))  # a file of its own; its unit fails with the reason
    return (sig.codec, sig.width, sig.height, sig.extradata, sig.time_base)


def _new(sel: Selection, idx: int) -> int:
    new = sel.new_of(idx)
    assert new is not None, idx
    return new


def plan_v30(s: Source, out: Path, *, streams: _Streams | None = None,
             checks: bool = False) -> Iterator[PlanItem | SpliceCheckUnit]:
    """Units (each when its output file closes), a `Placed` per kept episode; `checks`: instead, one
    `SpliceCheckUnit` per video run that loses an episode. `streams`: the output files to continue (a merge's
    earlier sources; the caller closes them with `close_streams`)."""
    src, info, sel, tasks = s.src, s.info, s.sel, s.tasks
    info_path = src / "meta/info.json"
    cameras = video_keys(info, info_path)
    cs = int(s.out_info.get("chunks_size", 1000))
    own = streams is None
    streams = streams if streams is not None else _Streams(cs, cameras)
    data_run: _Run | None = None
    video_run: dict[str, _Run] = {}
    before = s.index_offset

    def close_data(run: _Run) -> None:
        if run.out is not None:
            streams.data.add(DataInput(str(src), run.rel, tuple(run.parts), tuple(sorted(run.tasks))), 0)

    def close_video(cam: str, run: _Run) -> Iterator[SpliceCheckUnit]:
        if run.out is None:
            return
        if checks and not all(sp.keep for sp in run.spans):
            yield SpliceCheckUnit(str(src), run.rel, cam, tuple(run.spans))
        news = tuple(_new(sel, sp.episode) for sp in sorted(run.spans, key=lambda sp: sp.from_timestamp) if sp.keep)
        streams.video[cam].add(VideoSegment(str(src), run.rel, tuple(run.spans), news), 0)

    def opened(stream: _Stream, kind: str, cam: str | None, rel: str) -> tuple[tuple[int, int], int,
                                                                               Iterator[PlanItem]]:
        if streams.pack:
            path = resolve_inside(src, rel)
            key = _video_key(path) if cam is not None else None
            size = (file_mb(path) if cam is not None else parquet_uncompressed_mb(path)) if path.is_file() else 0.0
        else:
            key, size = None, 0.0
        where, frames, closed = stream.open_run(key, size)
        return where, frames, _units(s.out_info, src, out, kind, cam, closed, float(info["fps"]), checks)

    for ep, _row in iter_v30_episodes(src, info, cameras, stats=False):
        new = sel.new_of(ep.index)
        if data_run is None or data_run.rel != ep.data_rel:
            if data_run is not None:
                close_data(data_run)
            data_run = _Run(ep.data_rel)
        places = []
        for v in ep.videos:
            run = video_run.get(v.camera)
            if run is None or run.rel != v.rel:
                if run is not None:
                    yield from close_video(v.camera, run)
                run = video_run[v.camera] = _Run(v.rel)
            why = s.reencode.get((v.camera, ep.index)) if new is not None else None
            run.spans.append(SpliceSpan(ep.index, v.from_timestamp, v.to_timestamp, ep.length,
                                        new is not None and why is None))
            if new is not None and why is not None:
                chunk, file = streams.video[v.camera].reserve()
                places.append((v.camera, chunk, file, 0))
                if not checks:
                    rel = format_template(str(s.out_info.get("video_path")), info_path,
                                          {"chunk_index", "file_index", "video_key"}, chunk_index=chunk,
                                          file_index=file, video_key=v.camera)
                    feature = (info.get("features") or {}).get(v.camera) or {}
                    yield ReencodeVideoUnit(str(src), v.rel, str(out), rel, v.camera, float(info["fps"]),
                                            SpliceSpan(ep.index, v.from_timestamp, v.to_timestamp, ep.length, True),
                                            new, why, json.dumps(feature.get("info") or {}))
            elif new is not None:
                if run.out is None:
                    run.out, run.kept_frames, done = opened(streams.video[v.camera], "video", v.camera, v.rel)
                    yield from done
                places.append((v.camera, run.out[0], run.out[1], run.kept_frames))
                run.kept_frames += ep.length
                streams.video[v.camera].frames += ep.length
        if new is None:
            continue
        if data_run.out is None:
            data_run.out, _frames, done = opened(streams.data, "data", None, ep.data_rel)
            yield from done
        data_run.parts.append(DataPart(ep.index, new, ep.length, before))
        data_run.tasks.update(tasks.map_for(ep.tasks, src, ep.index))
        if not checks:
            yield Placed(ep.index, new, ep.length, before, data_run.out, tuple(places))
        before += ep.length
    if data_run is not None:
        close_data(data_run)
    for cam, run in video_run.items():
        yield from close_video(cam, run)
    if own:
        yield from close_streams(streams, s.out_info, src, out, float(info["fps"]), checks)


def _units(out_info: dict[str, Any], src: Path, out: Path, kind: str, cam: str | None,
           closed: tuple[tuple[int, int], list[Any]] | None, fps: float, checks: bool) -> Iterator[PlanItem]:
    """The unit of an output file just closed (none in `checks` mode)."""
    if closed is None or checks:
        return
    (chunk, file), members = closed
    info_path = src / "meta/info.json"
    if kind == "data":
        rel = format_template(out_info["data_path"], info_path, {"chunk_index", "file_index"},
                              chunk_index=chunk, file_index=file)
        yield EditDataUnit(str(out), rel, tuple(members))
    else:
        assert cam is not None
        rel = format_template(str(out_info.get("video_path")), info_path, {"chunk_index", "file_index", "video_key"},
                              chunk_index=chunk, file_index=file, video_key=cam)
        yield SpliceVideoUnit(str(out), rel, cam, fps, tuple(members))


def close_streams(streams: _Streams, out_info: dict[str, Any], src: Path, out: Path, fps: float,
                  checks: bool = False) -> Iterator[PlanItem]:
    """The units of the output files still open at the end."""
    yield from _units(out_info, src, out, "data", None, streams.data.close(), fps, checks)
    for cam, stream in streams.video.items():
        yield from _units(out_info, src, out, "video", cam, stream.close(), fps, checks)


def plan(sources: Sequence[Source], out: Path) -> Iterator[PlanItem]:
    """Every source's units and placements in order (v3.0: one file numbering across them)."""
    first = sources[0].info
    if not format_of(first).layout.shares_files:  # a file per episode: each copied under its new index
        for s in sources:
            yield from plan_v21(s, out)
        return
    layout = sources[0].out_info
    pack = (float(layout.get("data_files_size_in_mb", 100)), float(layout.get("video_files_size_in_mb", 200))) \
        if len(sources) > 1 else None
    streams = _Streams(int(layout.get("chunks_size", 1000)), video_keys(first, sources[0].src / "meta/info.json"),
                       pack)
    for s in sources:
        yield from (i for i in plan_v30(s, out, streams=streams) if not isinstance(i, SpliceCheckUnit))
    yield from close_streams(streams, layout, sources[0].src, out, float(first["fps"]))


def units_of(items: Iterator[PlanItem]) -> Iterator[EditUnit]:
    return (i for i in items if not isinstance(i, Placed))


def splice_refusals(s: Source, out: Path, engine: Engine) -> list[StartProblem]:
    units = (u for u in plan_v30(s, out, checks=True) if isinstance(u, SpliceCheckUnit))
    problems: list[StartProblem] = []
    for found in engine.results(check_splice, units, on_error=check_splice_failed, desc="keyframes",
                                unit_name="file", cost_s=None):
        problems += found[:max(0, FAILURES_LISTED - len(problems))]
    return sorted(problems, key=lambda p: (p.episode if p.episode is not None else -1, p.camera or ""))


@dataclass(slots=True, frozen=True)
class Overlap:
    """Two episodes whose spans in one video file (`length` frames from `from_timestamp`, what the reader reads)
    share frames: `episode` (the later in time order, or by index at the same start) and `other`."""

    episode: int
    other: int
    camera: str
    rel: str
    span: tuple[int, int]  # [first, end) frames of the file
    other_span: tuple[int, int]

    def line(self, fps: float, sel: Selection) -> str:
        def secs(span: tuple[int, int]) -> str:
            return f"[{span[0] / fps:.6f}, {span[1] / fps:.6f}) s"

        pair = f"{min(self.episode, self.other)},{max(self.episode, self.other)}"
        kept = sorted(e for e in (self.episode, self.other) if sel.is_kept(e))
        return (f"episode {self.episode} ({self.camera}): its span {secs(self.span)} in {self.rel} overlaps episode "
                f"{self.other}'s {secs(self.other_span)}: the metadata gives both the same frames, so the output "
                f"would hand one of them the other's (kept: {', '.join(map(str, kept))}). Neither a stream copy nor "
                f"--reencode-partial can tell whose frames they are: leave both out (--drop {pair}), or correct "
                "their from_timestamp in meta/episodes and verify again")


def _overlaps_in(camera: str, rel: str, spans: list[tuple[int, int, int]]) -> Iterator[Overlap]:
    """(first frame, end, episode) of one file's episodes -> each episode whose span starts before the end of
    an earlier one's (by start, then index), paired with the one it runs into."""
    best: tuple[int, int, int] | None = None  # the span reaching furthest so far
    for start, end, ep in sorted(spans):
        if best is not None and start < best[1] and end > start:
            yield Overlap(ep, best[2], camera, rel, (start, end), (best[0], best[1]))
        if best is None or end > best[1]:
            best = (start, end, ep)


def overlap_refusals(s: Source) -> list[Overlap]:
    """The overlaps (v3.0 metadata: two episodes' spans in one video file sharing frames) that involve a kept
    episode: an edit would copy (or re-encode) one episode's frames as another's. One pass over the episode
    metadata; each file's spans are held while its episodes are read (they are consecutive)."""
    src, info = s.src, s.info
    cameras = video_keys(info, src / "meta/info.json")
    fps = float(info["fps"])
    runs: dict[str, tuple[str, list[tuple[int, int, int]]]] = {}
    found: list[Overlap] = []

    def close(cam: str) -> None:
        rel, spans = runs.pop(cam)
        found.extend(o for o in _overlaps_in(cam, rel, spans)
                     if (s.sel.is_kept(o.episode) or s.sel.is_kept(o.other)) and len(found) < FAILURES_LISTED)

    for ep, _row in iter_v30_episodes(src, info, cameras, stats=False):
        for v in ep.videos:
            run = runs.get(v.camera)
            if run is not None and run[0] != v.rel:
                close(v.camera)
                run = None
            if run is None:
                run = runs[v.camera] = (v.rel, [])
            start = round(v.from_timestamp * fps)
            run[1].append((start, start + ep.length, ep.index))
    for cam in list(runs):
        close(cam)
    return sorted(found, key=lambda o: (o.episode, o.camera))


def refusal(problems: list[StartProblem]) -> EditRefused:
    episodes = sorted({p.episode for p in problems if p.episode is not None})
    shown = ", ".join(str(e) for e in episodes[:20]) + (" ..." if len(episodes) > 20 else "")
    return EditRefused(f"{len(episodes)} kept episode(s) cannot be cut out exactly by a stream copy: "
                       f"{shown}; first: {problems[0].line()}", problems)


# ---- stats ----------------------------------------------------------------------------------------


def _shift(value: Any, delta: float) -> Any:
    if isinstance(value, list):
        return [_shift(v, delta) for v in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    out = value + delta
    return int(out) if isinstance(value, int) and float(delta).is_integer() else float(out)


def _map_value(value: Any, mapping: dict[int, int]) -> Any:
    if isinstance(value, list):
        return [_map_value(v, mapping) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer() \
            and int(value) in mapping:
        new = mapping[int(value)]
        return new if isinstance(value, int) else float(new)
    return value


MOVED = ("min", "max", "mean")


def _moved(stats: dict[str, Any], delta: float) -> dict[str, Any]:
    return {k: _shift(v, delta) if k in MOVED or (k.startswith("q") and k[1:].isdigit()) else v
            for k, v in stats.items()}


def renumbered_stats(stats: dict[str, dict[str, Any]], *, episode_delta: int, index_delta: int,
                     task_map: dict[int, int]) -> dict[str, dict[str, Any]]:
    """An episode's stats after renumbering: `episode_index` and `index` moved by their shift (exact: min,
    max, mean and quantiles move with a shift, std does not), `task_index` moved by the tasks' shift when
    every task of the episode moves by the same amount (always for one task), else min and max mapped."""
    out = dict(stats)
    if "episode_index" in out and episode_delta:
        out["episode_index"] = _moved(out["episode_index"], episode_delta)
    if "index" in out and index_delta:
        out["index"] = _moved(out["index"], index_delta)
    if "task_index" in out and task_map:
        deltas = {new - old for old, new in task_map.items()}
        if len(deltas) == 1:
            d = deltas.pop()
            if d:
                out["task_index"] = _moved(out["task_index"], d)
        else:
            st = out["task_index"]
            out["task_index"] = {k: _map_value(v, task_map) if k in ("min", "max") else v for k, v in st.items()}
    return out


# ---- reduce ---------------------------------------------------------------------------------------


class EditReduce:
    def __init__(self, report: EditReport) -> None:
        self.report = report

    def add(self, r: EditResult) -> None:
        rep = self.report
        rep.files += 1
        if r.status == "failed":
            rep.failed += 1
            if len(rep.failures) < FAILURES_LISTED:
                rep.failures.append({"path": r.out_rel, "kind": r.kind, "reason": r.reason})
            return
        rep.out_bytes += r.out_bytes
        if r.kind == "video-reencode":
            rep.reencoded_total += 1
            if len(rep.reencoded) < FAILURES_LISTED:
                rep.reencoded.append({"path": r.out_rel, "status": r.status, "note": r.note})
        if r.status == "written":
            rep.written += 1
        else:
            rep.kept += 1


# ---- publish --------------------------------------------------------------------------------------


def _placements(sources: Sequence[Source], out: Path) -> Iterator[Placed]:
    return (p for p in plan(sources, out) if isinstance(p, Placed))


def _old_tasks(row_tasks: Sequence[str], tasks: TaskPlan) -> dict[int, int]:
    return {tasks.index_of[t]: tasks.old_to_new[tasks.index_of[t]] for t in row_tasks if t in tasks.index_of}


def _info(info: dict[str, Any], *, episodes: int, frames: int, tasks: int, cameras: int) -> dict[str, Any]:
    doc = dict(info)
    doc.update(total_episodes=episodes, total_frames=frames, total_tasks=tasks,
               splits={"train": f"0:{episodes}"})
    # the totals the format counts from the episodes (v2.1: total_videos, total_chunks), where info.json has them
    counted = format_of(info).counted_totals(episodes=episodes, cameras=cameras,
                                             chunks_size=int(info.get("chunks_size", 1000)))
    doc.update({k: v for k, v in counted.items() if k in info})
    return doc


def _global_stats(agg: StatsAggregator, src: Path) -> dict[str, Any]:
    """The aggregate of the kept episodes' stats, each value in the shape the source's meta/stats.json gives
    it (image stats (3, 1, 1) even where the per-episode rows store them flat)."""
    try:
        reference = json.loads((src / "meta/stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        reference = {}
    return shaped_like(agg.result(), reference if isinstance(reference, dict) else {})


def _copy_global_stats(src: Path, out: Path) -> None:
    """No per-episode stats to aggregate (an older dataset): the source's meta/stats.json, as `prep convert`
    carries it (the readers need the file; its values are the whole source's)."""
    if (src / "meta/stats.json").is_file():
        with atomic.atomic_path(out / "meta/stats.json", out) as tmp:
            shutil.copyfile(src / "meta/stats.json", tmp)


def publish_v21(sources: Sequence[Source], out: Path, info_out: dict[str, Any], report: EditReport) -> None:
    report.tasks = write_tasks_v21(out / "meta/tasks.jsonl", enumerate(sources[0].tasks.tasks), root=out)
    episodes = frames = 0
    agg = StatsAggregator()
    with_stats = all((s.src / EPISODES_STATS_REL).is_file() for s in sources)
    with V21EpisodesWriter(out, stats=with_stats) as writer:
        for s in sources:
            # episodes.jsonl and episodes_stats.jsonl both list episodes 0, 1, 2, ... (checked as they are read),
            # so each episode's stats are moved in step with its line: no per-episode map is held
            stats_of = iter_v21_stats(s.src) if with_stats else None
            pending: tuple[int, dict[str, Any]] | None = None
            old_from, new_from = 0, s.index_offset
            for _lineno, idx, length, _tasks, obj in iter_episode_lines(s.src / EPISODES_REL):
                new = s.sel.new_of(idx)
                if stats_of is not None:
                    while pending is None or pending[0] < idx:
                        pending = next(stats_of, None)
                        if pending is None:
                            stats_of = None
                            break
                if new is not None:
                    writer.add({**obj, "episode_index": new})
                    if with_stats and pending is not None and pending[0] == idx:
                        fixed = renumbered_stats(pending[1], episode_delta=new - idx,
                                                 index_delta=new_from - old_from,
                                                 task_map=_old_tasks(obj.get("tasks") or [], s.tasks))
                        agg.add(fixed, episode=idx)
                        writer.add_stats(new, fixed)
                    new_from += length
                    episodes += 1
                    frames += length
                old_from += length
    if with_stats:
        atomic.write_lerobot_json(out / "meta/stats.json", _global_stats(agg, sources[0].src), root=out)
    else:
        _copy_global_stats(sources[0].src, out)
    copy_root_files(sources[0].src, out)
    report.episodes, report.frames = episodes, frames
    cameras = len(video_keys(info_out, sources[0].src / "meta/info.json"))
    atomic.write_lerobot_json(out / "meta/info.json", _info(info_out, episodes=episodes, frames=frames,
                                                            tasks=report.tasks, cameras=cameras), root=out)


def publish_v30(sources: Sequence[Source], out: Path, info_out: dict[str, Any], report: EditReport) -> None:
    fps = float(info_out["fps"])
    report.tasks = write_tasks_v30(out / "meta/tasks.parquet", enumerate(sources[0].tasks.tasks), root=out)
    placed = _placements(sources, out)
    agg = StatsAggregator()
    writer = V30EpisodesWriter(out, float(info_out.get("data_files_size_in_mb", 100)),
                               int(info_out.get("chunks_size", 1000)))
    episodes = frames = 0
    has_stats = False
    try:
        for s in sources:
            cameras = video_keys(s.info, s.src / "meta/info.json")
            for ep, row in iter_v30_episodes(s.src, s.info, cameras):
                if not s.sel.is_kept(ep.index):
                    continue
                p = next(placed)
                assert p.episode == ep.index
                new_row = dict(row)
                new_row.update({
                    "episode_index": p.new_episode,
                    "data/chunk_index": p.data_file[0],
                    "data/file_index": p.data_file[1],
                    "dataset_from_index": p.new_from_index,
                    "dataset_to_index": p.new_from_index + p.length,
                })
                for cam, chunk, file, before in p.videos:
                    pre = f"videos/{cam}/"
                    new_row[pre + "chunk_index"] = chunk
                    new_row[pre + "file_index"] = file
                    new_row[pre + "from_timestamp"] = frames_to_seconds(before, fps)
                    new_row[pre + "to_timestamp"] = frames_to_seconds(before + p.length, fps)
                stats = stats_of_row(row)
                if stats:
                    has_stats = True
                    fixed = renumbered_stats(stats, episode_delta=p.new_episode - ep.index,
                                             index_delta=p.new_from_index - ep.dataset_from_index,
                                             task_map=_old_tasks(ep.tasks, s.tasks))
                    agg.add(fixed, episode=ep.index)
                    for feat, st in fixed.items():
                        for name, value in st.items():
                            new_row[f"stats/{feat}/{name}"] = value
                writer.add(new_row)
                episodes += 1
                frames += p.length
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if has_stats:
        atomic.write_lerobot_json(out / "meta/stats.json", _global_stats(agg, sources[0].src), root=out)
    else:
        _copy_global_stats(sources[0].src, out)
    copy_root_files(sources[0].src, out)
    report.episodes, report.frames = episodes, frames
    atomic.write_lerobot_json(out / "meta/info.json", _info(info_out, episodes=episodes, frames=frames,
                                                            tasks=report.tasks, cameras=0), root=out)


PUBLISH = {"v2.1": publish_v21, "v3.0": publish_v30}


# ---- the job --------------------------------------------------------------------------------------


def _open_source(src: Path, out: Path) -> dict[str, Any]:
    info = read_info(src)
    fmt = info["codebase_version"]
    if fmt not in FORMATS:
        raise DatasetError(src / "meta/info.json", f"codebase_version {fmt!r}: prep edit reads v2.1 and v3.0")
    check_paths(src, out)
    metadata_refusals(src, "edit")[0].raise_if_any()
    return info


def _check_output(out: Path) -> None:
    refuse_busy(out)
    refuse_foreign(out, OPTIONS_REL, "edit")
    check_output_tree(out)


def edit_dataset(src: Path, out: Path, options: EditOptions, engine: Engine, *, verify: bool = True,
                 reencode_partial: bool = False) -> EditReport:
    """Write `src` without the episodes `options` leaves out into the dataset `out` (same format) through
    `engine`; resumable; never writes under `src`. Raises `EditRefused` (a cut off a keyframe) and
    `PrepError` for a bad selection, dataset or output, before anything is written."""
    src, out = Path(src).absolute(), Path(out).absolute()
    info = _open_source(src, out)
    sel, total = select(options, src, info)
    _check_output(out)
    source = Source(src, info, sel, plan_tasks(src, info, sel))
    return write_edit([source], out, total, engine, verify=verify, reencode_partial=reencode_partial)


def partial_reencodes(s: Source, out: Path, engine: Engine) -> tuple[dict[tuple[str, int], str], list[StartProblem]]:
    """`--reencode-partial`: (camera, episode) -> why, for the kept episodes to re-encode so that every other
    one copies exactly (one demux per video file that loses an episode, as Dask tasks); and the files that
    could not be checked (refused)."""
    units = (u for u in plan_v30(s, out, checks=True) if isinstance(u, SpliceCheckUnit))
    found: dict[tuple[str, int], str] = {}
    unchecked: list[StartProblem] = []
    for problems in engine.results(check_partial, units, on_error=check_splice_failed, desc="keyframes",
                                   unit_name="file", cost_s=None):
        for p in problems:
            if p.reason.startswith("not checked") or p.episode is None:
                unchecked.append(p)
            else:
                found[(p.camera or "", p.episode)] = p.reason
    return found, unchecked


def check_cuts(sources: Sequence[Source], out: Path, engine: Engine, *, reencode_partial: bool = False) -> None:
    """Refuse (`EditRefused`) a v3.0 edit with a cut off a keyframe; nothing is written. `reencode_partial`:
    instead, the episodes whose cut is off a keyframe are set to be re-encoded (`Source.reencode`), and the
    rest is checked again."""
    for s in sources:  # before any cut: an episode whose span is another's frames is never written
        overlaps = overlap_refusals(s) if format_of(s.info).layout.shares_files else []
        if overlaps:
            more = f" (and {len(overlaps) - 1} more overlaps)" if len(overlaps) > 1 else ""
            raise EditRefused(f"{atomic.shown(s.src)}: {overlaps[0].line(float(s.info['fps']), s.sel)}{more}", [])
    problems: list[StartProblem] = []
    for s in sources:
        if format_of(s.info).layout.shares_files and s.sel.dropped_count:  # a shared file loses an episode
            found = splice_refusals(s, out, engine)
            if found and reencode_partial:
                s.reencode, unchecked = partial_reencodes(s, out, engine)
                found = unchecked or splice_refusals(s, out, engine)
            problems += found
    if problems:
        raise refusal(problems)


def write_edit(sources: Sequence[Source], out: Path, total: int, engine: Engine, *, verify: bool = True,
               settings_extra: dict[str, Any] | None = None, cuts_checked: bool = False,
               info_out: dict[str, Any] | None = None, reencode_partial: bool = False) -> EditReport:
    """The output `out` holding the episodes each source's selection keeps, in order (the sources and the
    output already checked). `info_out`: the output's info.json before its totals (default: the first
    source's)."""
    first = sources[0]
    fmt = first.info["codebase_version"]
    kept = sum(s.sel.kept_count for s in sources)
    dropped = [{"episode": e, "reason": r} for e, r in itertools.islice(
        (d for s in sources for d in s.sel.iter_dropped()), DROPPED_LISTED)]
    if len(sources) == 1:
        settings = {"format": fmt, "kept": first.sel.kept_ranges(), "source_episodes": total}
    else:
        settings = {"format": fmt, "kept": "all", "source_episodes": total,
                    "merge": [str(s.src.resolve()) for s in sources]}
    settings.update(settings_extra or {})
    if reencode_partial:
        settings["reencode_partial"] = True
    report = EditReport(str(first.src), str(out), fmt, settings, engine.backend, source_episodes=total,
                        dropped_total=sum(s.sel.dropped_count for s in sources), dropped=dropped)
    engine.size_hint(kept)
    if not cuts_checked:
        check_cuts(sources, out, engine, reencode_partial=reencode_partial)
    out.mkdir(parents=True, exist_ok=True)
    with output_lock(out, command_line("edit")):
        claim_output(first.src, out, settings, OPTIONS_REL, "edit_options")
        for sub in ("videos", "data", "meta"):
            atomic.remove_stale_temps(out / sub)
        t0 = time.perf_counter()
        reduce = EditReduce(report)
        for batch in engine.map(edit_unit, units_of(plan(sources, out)), on_error=edit_failed,
                                desc="edit", unit_name="file", cost_s=None,
                                measure=lambda rs: {"files": float(len(rs))}):
            for results in batch.results:
                for r in results:
                    reduce.add(r)
        for sub in ("videos", "data"):
            atomic.remove_stale_temps(out / sub)
        report.seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        try:
            if not report.failures:
                PUBLISH[fmt](sources, out, info_out if info_out is not None else first.info, report)
                report.complete = True
            report.publish_seconds = time.perf_counter() - t1
            write_report(out, report)
        except OSError as exc:
            raise PrepError(f"{out}: writing metadata failed: {exc.strerror or exc}"
                            f"{f' ({exc.filename})' if exc.filename else ''}; finished files are kept and "
                            "meta/info.json is written only when complete: free space and rerun") from None
    if report.complete and verify:
        report.verify = verify_output(out, engine)
        write_report(out, report)
    return report


def write_report(out: Path, report: EditReport) -> None:
    doc = {"schema": "prep.edit_report/1", **asdict(report)}
    validate(doc, "edit_report", source=str(out / REPORT_REL))
    atomic.write_json(out / REPORT_REL, doc, indent=2, root=out)


# ---- split ----------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class SplitPart:
    """One part of a split: a name (its folder under --out) and a fraction of the episodes or a list."""

    name: str
    fraction: float | None = None
    episodes: tuple[int, ...] | None = None


def _largest_remainder(n: int, fractions: Sequence[float]) -> list[int]:
    """Counts for `fractions` of `n` that sum to round(sum * n) (each at least its floor)."""
    exact = [f * n for f in fractions]
    counts = [int(x) for x in exact]
    target = min(n, round(sum(exact)))
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:max(0, target - sum(counts))]:
        counts[i] += 1
    return counts


def split_selections(parts: Sequence[SplitPart], base: Sequence[int], tasks_of: dict[int, tuple[str, ...]], *,
                     seed: int, shuffle: bool, group_by_task: bool, total: int) -> dict[str, list[int]]:
    """The episodes of each part (lists; `split_arrays` with the tasks given as a dict)."""
    import numpy as np

    base_arr = np.asarray(base, dtype=np.int64)
    keys = sorted({tasks_of.get(int(e), ()) for e in base_arr}) if group_by_task else [()]
    code = {k: i for i, k in enumerate(keys)}
    codes = np.array([code[tasks_of.get(int(e), ())] for e in base_arr], dtype=np.int32) if group_by_task else None
    chosen = split_arrays(parts, base_arr, codes, seed=seed, shuffle=shuffle, total=total)
    return {name: [int(e) for e in arr] for name, arr in chosen.items()}


def split_arrays(parts: Sequence[SplitPart], base: Any, codes: Any, *, seed: int, shuffle: bool,
                 total: int) -> dict[str, Any]:
    """The episodes of each part (sorted numpy int64 arrays): listed parts take their episodes (of `base`, the
    sorted source indices left after the other options), the fraction parts share the rest, shuffled with
    `seed` (numpy's default_rng) unless not `shuffle`. `codes` (aligned with `base`, or None: one group): each
    episode's group, numbered in the groups' sorted order (`--group-by-task`: the set of its tasks); the
    fractions are allocated within each group, so every part gets its share of every task."""
    import numpy as np

    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise PrepError(f"--split: a part name is given twice ({', '.join(names)})")
    taken: list[tuple[str, Any]] = []
    out: dict[str, Any] = {}
    for p in parts:
        if p.episodes is None:
            continue
        given = np.asarray(p.episodes, dtype=np.int64)
        bad = given[(given < 0) | (given >= total)]
        if len(bad):
            raise PrepError(f"--split {p.name}: episode {int(bad[0])} is not in the dataset (episodes 0..{total - 1})")
        for other, arr in taken:
            both = given[np.isin(given, arr)]
            if len(both):
                raise PrepError(f"--split: episode {int(both[0])} is in both {other!r} and {p.name!r}")
        arr = np.unique(given)
        taken.append((p.name, arr))
        out[p.name] = arr[np.isin(arr, base)]
    frac_parts = [p for p in parts if p.fraction is not None]
    fractions = [float(p.fraction or 0.0) for p in frac_parts]
    if sum(fractions) > 1.0 + 1e-9:
        raise PrepError(f"--split: the fractions sum to {sum(fractions):g}, more than 1")
    left = ~np.isin(base, np.concatenate([a for _n, a in taken])) if taken else np.ones(len(base), dtype=bool)
    rest = base[left]
    rest_codes = codes[left] if codes is not None else np.zeros(len(rest), dtype=np.int32)
    rng = np.random.default_rng(seed)
    pieces: dict[str, list[Any]] = {p.name: [] for p in frac_parts}
    for key in np.unique(rest_codes):
        members = rest[rest_codes == key]
        if shuffle:
            members = members[rng.permutation(len(members))]
        start = 0
        for p, n in zip(frac_parts, _largest_remainder(len(members), fractions), strict=True):
            pieces[p.name].append(members[start:start + n])
            start += n
    for name, got in pieces.items():
        out[name] = np.sort(np.concatenate(got)) if got else np.zeros(0, dtype=np.int64)
    for name in names:
        if not len(out[name]):
            raise PrepError(f"--split {name}: no episode falls in this part")
    return {n: out[n] for n in names}


SPLIT_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_part_name(name: str) -> None:
    if name == PREP_DIR:
        raise PrepError(f"--split: part name {name!r} is reserved: <out>/{PREP_DIR} holds prep's lock and records; "
                        "choose another name")
    if not name or name in (".", "..") or not set(name) <= SPLIT_NAME_CHARS:
        raise PrepError(f"--split: part name {name!r} must be a folder name of letters, digits, '_', '.', '-'"[:300])


@dataclass(slots=True)
class SplitReport:
    parts: dict[str, EditReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.parts.values())


def split_dataset(src: Path, out: Path, parts: Sequence[SplitPart], options: EditOptions, engine: Engine, *,
                  seed: int = 0, shuffle: bool = True, group_by_task: bool = False,
                  verify: bool = True, reencode_partial: bool = False) -> SplitReport:
    """One dataset per part under `out/<name>` (each an edit of `src`, the same rules and checks); `options`
    (if any) first leaves episodes out of every part. Every part's selection and output are checked before
    the first is written."""
    src, out = Path(src).absolute(), Path(out).absolute()
    if not parts:
        raise PrepError("--split: no part given (NAME=FRACTION or NAME=EPISODES)")
    for p in parts:
        check_part_name(p.name)
    info = _open_source(src, out)
    import numpy as np

    # one pass: the episode count and (--group-by-task) each episode's group, as int32 codes
    group_code: dict[tuple[str, ...], int] = {}
    group_of = array("i")
    total = 0
    for _e, texts, _n in episode_tasks(src, info):
        total += 1
        if group_by_task:
            group_of.append(group_code.setdefault(texts, len(group_code)))
    base_sel = select(options, src, info)[0] if options.given() else Selection.all(total)
    base = base_sel.kept_array()
    codes = None
    if group_by_task:
        keys = list(group_code)  # in order of first appearance; ranked in sorted order of the task tuples
        rank = np.empty(len(keys), dtype=np.int32)
        rank[np.array(sorted(range(len(keys)), key=lambda c: keys[c]), dtype=np.int64)] = np.arange(len(keys))
        codes = rank[np.frombuffer(group_of, dtype=np.int32)[base]]
        del group_of
    chosen = split_arrays(parts, base, codes, seed=seed, shuffle=shuffle, total=total)
    selections: dict[str, Selection] = {}
    for name, kept in chosen.items():
        members = _Members(kept)
        other = f"in another part of the split (not {name!r})"
        selections[name] = Selection.of((e, None if e in members else base_sel.reason_of(e) or other)
                                        for e in range(total))
        _check_output(out / name)
    sources = {name: Source(src, info, sel, plan_tasks(src, info, sel)) for name, sel in selections.items()}
    engine.size_hint(max(sel.kept_count for sel in selections.values()))
    for name, source in sources.items():
        check_cuts([source], out / name, engine, reencode_partial=reencode_partial)
    if out.exists():
        others = sorted(p.name for p in out.iterdir() if p.name not in chosen)
        if others:
            raise PrepError(f"output {atomic.shown(out)} holds {', '.join(atomic.shown(o) for o in others[:3])}, "
                            "which is not a part of this split; choose another --out")
    split_settings = {"split": {p.name: (p.fraction if p.fraction is not None else ranges(list(p.episodes or ())))
                                for p in parts}, "seed": seed, "shuffle": shuffle, "group_by_task": group_by_task}
    reports = {}
    for name, source in sources.items():
        reports[name] = write_edit([source], out / name, total, engine, verify=verify,
                                   settings_extra=split_settings, cuts_checked=True,
                                   reencode_partial=reencode_partial)
    return SplitReport(reports)


# ---- merge ----------------------------------------------------------------------------------------

# LeRobot's `features_equal_for_merge`: a video feature's encoder settings under `info` may differ
VIDEO_ENCODER_INFO_KEYS = frozenset(f"video.{k}" for k in ("g", "crf", "preset", "fast_decode", "extra_options",
                                                            "video_backend"))


def _without_encoder_keys(feature: Any) -> Any:
    if not isinstance(feature, dict) or feature.get("dtype") != "video" or not isinstance(feature.get("info"), dict):
        return feature
    return {**feature, "info": {k: v for k, v in feature["info"].items() if k not in VIDEO_ENCODER_INFO_KEYS}}


def merge_difference(first: dict[str, Any], other: dict[str, Any]) -> str | None:
    """What makes `other` not mergeable with `first` (LeRobot's rule: the same fps, robot_type and features,
    a video's encoder settings aside), or None."""
    for key in ("codebase_version", "fps", "robot_type"):
        if first.get(key) != other.get(key):
            return f"{key} {other.get(key)!r} (the first dataset's: {first.get(key)!r})"
    fa, fb = first.get("features") or {}, other.get("features") or {}
    for name in list(fa) + [n for n in fb if n not in fa]:
        if name not in fb:
            return f"feature {name!r} is missing (the first dataset has it)"
        if name not in fa:
            return f"feature {name!r} is not in the first dataset"
        a, b = _without_encoder_keys(fa[name]), _without_encoder_keys(fb[name])
        if a != b:
            keys = sorted({k for k in set(a) | set(b) if a.get(k) != b.get(k)}) if isinstance(a, dict) and \
                isinstance(b, dict) else []
            what = ", ".join(f"{k} {b.get(k)!r} vs {a.get(k)!r}" for k in keys[:3]) if keys else "differs"
            return f"feature {name!r}: {what}"[:400]
    return None


def merged_info(infos: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first source's info.json with each video's encoder settings kept where every source agrees, else
    null ({} for extra_options), as LeRobot's `merge_video_feature_info_for_aggregate`."""
    out = json.loads(json.dumps(infos[0]))
    for name, ft in out.get("features", {}).items():
        if not isinstance(ft, dict) or ft.get("dtype") != "video" or not isinstance(ft.get("info"), dict):
            continue
        for key in VIDEO_ENCODER_INFO_KEYS:
            values = [((i.get("features") or {}).get(name, {}).get("info") or {}).get(key) for i in infos]
            if any(v != values[0] for v in values[1:]):
                ft["info"][key] = {} if key == "video.extra_options" else None
    return out


def merge_datasets(srcs: Sequence[Path], out: Path, engine: Engine, *, verify: bool = True) -> EditReport:
    """One dataset holding every episode of `srcs`, in order (A's, then B's, ...), renumbered, tasks merged
    by text (first appearance), stats carried and aggregated; every file copied or spliced by stream copy and
    kept a file of its own (files with different codec parameters are never concatenated). Refuses datasets
    of different formats, fps, robot_type or features (naming the first difference) before writing."""
    srcs = [Path(s).absolute() for s in srcs]
    out = Path(out).absolute()
    if len(srcs) < 2:
        raise PrepError("--merge: give at least two datasets")
    if len({os.path.realpath(s) for s in srcs}) != len(srcs):
        raise PrepError("--merge: a dataset is given twice")
    infos = [_open_source(s, out) for s in srcs]
    for s, info in zip(srcs[1:], infos[1:], strict=True):
        diff = merge_difference(infos[0], info)
        if diff is not None:
            raise PrepError(f"--merge: {atomic.shown(s)} cannot be merged with {atomic.shown(srcs[0])}: {diff}")
    _check_output(out)
    layout = merged_info(infos)
    merged: list[str] = []
    at: dict[str, int] = {}
    sources: list[Source] = []
    offset = index_offset = total = 0
    for src, info in zip(srcs, infos, strict=True):
        n_eps = n_frames = 0
        for _e, _t, n in episode_tasks(src, info):
            n_eps += 1
            n_frames += n
        sel = Selection.all(n_eps, offset)
        own = plan_tasks(src, info, sel)
        for t in own.tasks:
            if t not in at:
                at[t] = len(merged)
                merged.append(t)
        tasks = TaskPlan(merged, {own.index_of[t]: at[t] for t in own.tasks}, own.index_of)
        sources.append(Source(src, info, sel, tasks, index_offset, layout))
        offset += n_eps
        index_offset += n_frames
        total += n_eps
    return write_edit(sources, out, total, engine, verify=verify, info_out=layout)


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


def edit_as(to: str, out: Path, engine: Engine, edit: Any, *, verify: bool = True) -> EditAsReport:
    """Run `edit(staged_out, verify)` (an edit or merge writing the source's format) into `<out>/prep/edited`,
    then `prep convert` it into `out` by stream copy (pipeline.jobs.convert, its checks and refusals: v3.0 ->
    v2.1 needs every episode to start on a keyframe) and remove the staged copy. Both steps resume per file."""
    from pipeline.formats.v30 import Limits
    from pipeline.jobs.convert import ConvertOptions, convert_dataset
    from pipeline.jobs.convert import check_options as check_convert

    out = Path(out).absolute()
    check_convert(ConvertOptions(to))
    refuse_busy(out)
    check_output_tree(out)
    staged = out / STAGED_REL
    first: EditReport = edit(staged, False)  # refusals before anything is written; its own lock
    result = EditAsReport(first)
    if not first.ok:
        return result
    info = read_info(staged)
    limits = Limits(chunks_size=int(info.get("chunks_size", 1000)),
                    data_files_size_in_mb=float(info.get("data_files_size_in_mb", 100)),
                    video_files_size_in_mb=float(info.get("video_files_size_in_mb", 200)))
    with output_lock(out, command_line("edit")):
        result.convert = convert_dataset(staged, out, ConvertOptions(to, limits), engine, verify=verify, staged=True)
        if result.convert.ok:
            atomic.write_json(out / REPORT_REL, json.loads(atomic.read_regular_text(staged / REPORT_REL)), indent=2,
                              root=out)
            shutil.rmtree(staged)
            result.staged_removed = True
    return result
