"""The edit's reduce and publish: `EditReduce` counts the stage results into the `EditReport`; `PUBLISH[format]`
writes, only when every output file succeeded, the tasks (those the kept episodes use, renumbered in source
order), the episodes metadata (renumbered; v3.0 `dataset_from/to_index`, file indices and exact
`from/to_timestamp`), the per-episode stats carried (`episode_index`, `index`, `task_index` moved with the
renumbering) and the global stats aggregated from them as LeRobot does, then meta/info.json last (totals,
`splits`); `write_report` writes prep/edit_report.json."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.dataset.info import video_keys
from pipeline.dataset.stats import StatsAggregator, shaped_like
from pipeline.errors import PrepError
from pipeline.formats import format_of
from pipeline.formats.v21 import (
    EPISODES_REL,
    EPISODES_STATS_REL,
    V21EpisodesWriter,
    iter_episode_lines,
    iter_v21_stats,
    write_tasks_v21,
)
from pipeline.formats.v30 import V30EpisodesWriter, iter_v30_episodes, stats_of_row, write_tasks_v30
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.convert import copy_root_files
from pipeline.jobs.edit.features import FeatureMap
from pipeline.jobs.edit.plan import Placed, plan
from pipeline.jobs.edit.selection import Source, SrcRoot, TaskPlan
from pipeline.jobs.output import FAILURES_LISTED, count_file
from pipeline.rates import frames_to_seconds
from pipeline.schemas import validate
from pipeline.stages.edit import EditResult
from pipeline.storage import as_file, output_file, output_folder, write_output_bytes

REPORT_REL = f"{PREP_DIR}/edit_report.json"


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
        if count_file(rep, r) and r.kind == "video-reencode":
            rep.reencoded_total += 1
            if len(rep.reencoded) < FAILURES_LISTED:
                rep.reencoded.append({"path": r.out_rel, "status": r.status, "note": r.note})


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


def _source_stats(src: SrcRoot) -> dict[str, Any]:
    try:
        reference = json.loads((src / "meta/stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, PrepError):
        reference = {}
    return reference if isinstance(reference, dict) else {}


def _global_stats(agg: StatsAggregator, src: SrcRoot, features: FeatureMap) -> dict[str, Any]:
    """The aggregate of the kept episodes' stats, each value in the shape the source's meta/stats.json gives
    it (image stats (3, 1, 1) even where the per-episode rows store them flat), in the output's keys."""
    return shaped_like(agg.result(), features.stats(_source_stats(src)))


def _copy_global_stats(src: SrcRoot, out: Path, features: FeatureMap) -> None:
    """No per-episode stats to aggregate (an older dataset): the source's meta/stats.json, as `prep convert`
    carries it (the readers need the file; its values are the whole source's), without the features left out
    and in the output's keys."""
    if not (src / "meta/stats.json").is_file():
        return
    if features.changes:
        atomic.write_lerobot_json(out / "meta/stats.json", features.stats(_source_stats(src)), root=out)
        return
    with atomic.atomic_path(out / "meta/stats.json", out) as tmp, \
            as_file(src / "meta/stats.json").open() as fin, open(tmp, "wb") as fout:  # through its store
        shutil.copyfileobj(fin, fout)


def _finish(src: SrcRoot, out: Path, info_out: dict[str, Any], report: EditReport, agg: StatsAggregator | None,
            episodes: int, frames: int, cameras: int, features: FeatureMap) -> None:
    """Either format's last files: the global stats (the kept episodes' aggregate, else the source's), the
    source's top-level files, then meta/info.json with the output's totals."""
    if agg is not None:
        atomic.write_lerobot_json(out / "meta/stats.json", _global_stats(agg, src, features), root=out)
    else:
        _copy_global_stats(src, out, features)
    copy_root_files(src, out)
    report.episodes, report.frames = episodes, frames
    atomic.write_lerobot_json(out / "meta/info.json", _info(info_out, episodes=episodes, frames=frames,
                                                            tasks=report.tasks, cameras=cameras), root=out)


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
                        fixed = s.features.stats(renumbered_stats(pending[1], episode_delta=new - idx,
                                                                  index_delta=new_from - old_from,
                                                                  task_map=_old_tasks(obj.get("tasks") or [], s.tasks)))
                        agg.add(fixed, episode=idx)
                        writer.add_stats(new, fixed)
                    new_from += length
                    episodes += 1
                    frames += length
                old_from += length
    cameras = len(video_keys(info_out, str(sources[0].src / "meta/info.json")))
    _finish(sources[0].src, out, info_out, report, agg if with_stats else None, episodes, frames, cameras,
            sources[0].features)


def publish_v30(sources: Sequence[Source], out: Path, info_out: dict[str, Any], report: EditReport) -> None:
    fps = float(info_out["fps"])
    report.tasks = write_tasks_v30(out / "meta/tasks.parquet", enumerate(sources[0].tasks.tasks), root=out)
    placed = _placements(sources, out)
    agg = StatsAggregator()
    writer = V30EpisodesWriter(out, float(info_out.get("data_files_size_in_mb", 100)),
                               int(info_out.get("chunks_size", 1000)))
    episodes = frames = 0
    has_stats = False
    order: list[str] | None = None  # the first row's columns: a merge's later sources' rows in that order
    try:
        for s in sources:
            cameras = tuple(k for k, _new in s.features.cameras(s.info))
            for ep, row in iter_v30_episodes(s.src, s.info, cameras):
                if not s.sel.is_kept(ep.index):
                    continue
                p = next(placed)
                assert p.episode == ep.index
                new_row = s.features.row(row)  # a camera left out: its columns too; renamed keys
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
                    fixed = s.features.stats(renumbered_stats(stats, episode_delta=p.new_episode - ep.index,
                                                              index_delta=p.new_from_index - ep.dataset_from_index,
                                                              task_map=_old_tasks(ep.tasks, s.tasks)))
                    agg.add(fixed, episode=ep.index)
                    for feat, st in fixed.items():
                        for name, value in st.items():
                            new_row[f"stats/{feat}/{name}"] = value
                if order is None:
                    order = list(new_row)
                elif list(new_row) != order and set(new_row) == set(order):
                    new_row = {k: new_row[k] for k in order}
                writer.add(new_row)
                episodes += 1
                frames += p.length
        writer.close()
    except BaseException:
        writer.abort()
        raise
    _finish(sources[0].src, out, info_out, report, agg if has_stats else None, episodes, frames, 0,
            sources[0].features)


PUBLISH = {"v2.1": publish_v21, "v3.0": publish_v30}


def write_report(out: Path | str, report: EditReport) -> None:
    doc = {"schema": "prep.edit_report/1", **asdict(report)}
    path = output_file(out, REPORT_REL)
    validate(doc, "edit_report", source=str(path))
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")  # as atomic.write_json
    write_output_bytes(path, data, output_folder(out))
