"""Which episodes an edit keeps: `EditOptions` (--drop, --keep, --drop-failed REPORT, --drop-tasks, --keep-tasks)
-> a `Selection` (the kept episodes as runs, renumbered 0, 1, 2, ... in source order, and why each other one was
dropped), in one pass over the episode metadata; the tasks the kept episodes use (`TaskPlan`); and `Source`, one
source of an output (its root, info.json, selection and task numbering)."""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import DatasetError, PrepError
from pipeline.formats import format_of
from pipeline.jobs.edit.features import FeatureMap
from pipeline.storage import StorePath
from pipeline.text import printable
from pipeline.text import shown as shown_value

SrcRoot = Path | StorePath  # a source dataset's root: a local folder, or where it lives (an object store's prefix)
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
    """One source of the output: its root, info.json, kept episodes, task numbering, the rows before it and
    what becomes of its features."""

    src: SrcRoot
    info: dict[str, Any]
    sel: Selection
    tasks: TaskPlan
    index_offset: int = 0  # the output rows before this source's first kept episode
    layout: dict[str, Any] | None = None  # the output's info.json (paths, chunks_size); None: the source's
    # --reencode-partial: (camera, source episode) -> why its cut needs a re-encode (each in a file of its own)
    reencode: dict[tuple[str, int], str] = field(default_factory=dict)
    features: FeatureMap = field(default_factory=FeatureMap)  # the cameras left out, the keys renamed

    @property
    def out_info(self) -> dict[str, Any]:
        return self.layout if self.layout is not None else self.info



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
            raise PrepError(f"{where}.episode is {shown_value(ep, 60)}, not an episode of {printable(ds.root)}: "
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


def failed_in_report(report_path: Path, src: SrcRoot) -> dict[int, str]:
    """The episodes a `prep verify --out` report of `src` failed -> the checks they failed. Refuses a report
    of another dataset: its `dataset.fingerprint` (`pipeline.jobs.identity`) must be the source's, both the
    digest of every file under meta/ (info.json, the episode metadata) and that of the files of each episode it
    failed (size and mtime, or their bytes when verify ran with --fingerprint content); and a report whose
    episode list is not what verify writes (an id of another dataset, a bool, a float, a string)."""
    from pipeline.bounded import read_json
    from pipeline.formats import open_dataset
    from pipeline.jobs import identity

    shown = printable(report_path)
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
                        f"older prep): run `prep verify {printable(src)} --out REPORT` again")
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


class Members:
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


def select(options: EditOptions, src: SrcRoot, info: dict[str, Any], *,
           keep_all: bool = False) -> tuple[Selection, int]:
    """The kept episodes and the source's episode count, in one pass over the episode metadata (memory: the
    selection's runs, not the corpus); refuses an index outside it and an empty result. No option given:
    every episode when `keep_all` (an edit of the features alone), else refused."""
    if not options.given() and not keep_all:
        raise PrepError("say which episodes to leave out: --drop EPISODES, --keep EPISODES, --drop-failed REPORT, "
                        "--drop-tasks TASK ... or --keep-tasks TASK ...; or which cameras and keys to change: "
                        "--keep-cameras, --drop-cameras KEY ..., --rename OLD=NEW ...")
    failed = failed_in_report(options.drop_failed, src) if options.drop_failed is not None else {}
    task_list = source_tasks(src, info["codebase_version"]) if options.drop_tasks or options.keep_tasks else []
    drop_t = _resolve_tasks(options.drop_tasks or (), task_list, "--drop-tasks")
    keep_t = _resolve_tasks(options.keep_tasks, task_list, "--keep-tasks") if options.keep_tasks else None
    index_of = {t: i for i, t in enumerate(task_list)}
    keep = Members(options.keep) if options.keep is not None else None
    drop = Members(options.drop)
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
            raise PrepError(f"{flag}: episode {first} is not in {printable(src)} (episodes 0..{total - 1})"
                            + (f" (and {n_out - 1} more)" if n_out > 1 else ""))
    if not sel.kept_count:
        raise PrepError(f"nothing would be left: every one of the {total} episodes is dropped")
    return sel, total


# ---- tasks ----------------------------------------------------------------------------------------


def source_tasks(src: SrcRoot, fmt: str) -> list[str]:
    return [t for _i, t in format_of(fmt).iter_tasks(src)]


def episode_tasks(src: SrcRoot, info: dict[str, Any]) -> Iterator[tuple[int, tuple[str, ...], int]]:
    """(episode, tasks, length) in order, either format (its strict reader)."""
    return format_of(info).iter_episode_tasks(src, info)


@dataclass(slots=True)
class TaskPlan:
    """The output's tasks (those the kept episodes use, in source order) and old -> new task_index."""

    tasks: list[str]
    old_to_new: dict[int, int]
    index_of: dict[str, int]  # source task text -> source task_index

    def map_for(self, texts: Sequence[str], src: SrcRoot, episode: int) -> tuple[tuple[int, int], ...]:
        out = []
        for t in texts:
            old = self.index_of.get(t)
            if old is None:
                raise DatasetError(src / "meta", f"episode {episode}: task {t!r} is not in the tasks table"[:300])
            out.append((old, self.old_to_new[old]))
        return tuple(sorted(set(out)))


def plan_tasks(src: SrcRoot, info: dict[str, Any], sel: Selection) -> TaskPlan:
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
