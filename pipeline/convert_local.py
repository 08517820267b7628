"""TEMPORARY glue: plan and run a v2.1 <-> v3.0 conversion sequentially, in this process.

Part 2 of issue 15 replaces this with a job on the jobs layer (units as Dask tasks through the runner,
`prep convert` and `prep reencode --format`). Until then the tests, the compatibility suite and
`bench/convert.py` drive the building blocks through `convert_inline`.

Order, as a job will do it: plan (from the source metadata, deterministic) -> one stage per output file
(kept if already complete and correct) -> metadata (tasks, episodes, stats), `meta/info.json` last, written
only when every output file succeeded. The source is only read.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import atomic
from pipeline.convert.layout import (
    DEFAULT_CHUNKS_SIZE,
    DataConcatUnit,
    DataSplitUnit,
    Limits,
    PlanItem,
    VideoConcatUnit,
    VideoCutUnit,
    placements_of,
    plan_keyframe_checks,
    plan_v21_to_v30,
    plan_v30_to_v21,
    units_of,
)
from pipeline.convert.meta import (
    AtomicWriter,
    StatsAggregator,
    V30EpisodesWriter,
    info_to_v21,
    info_to_v30,
    v21_episode_line,
    v21_stats_line,
    v30_episode_row,
    write_tasks_v21,
    write_tasks_v30,
)
from pipeline.convert.source import (
    V21_EPISODES_STATS,
    iter_v21_episodes,
    iter_v21_stats,
    iter_v21_tasks,
    iter_v30_episodes,
    iter_v30_tasks,
    stats_of_row,
    video_keys,
)
from pipeline.dataset.info import read_info
from pipeline.errors import DatasetError, PrepError
from pipeline.stages.convert import (
    ConvertResult,
    check_keyframes,
    concat_data,
    concat_video,
    cut_video,
    split_data,
)
from pipeline.video.remux import StartProblem

FORMATS = ("v2.1", "v3.0")


class ConvertRefused(PrepError):
    """The conversion cannot be done exactly (e.g. episodes that do not start on a keyframe)."""

    def __init__(self, message: str, problems: list[StartProblem]) -> None:
        self.problems = problems
        super().__init__(message)


@dataclass(slots=True)
class ConvertReport:
    src: str
    dst: str
    to: str
    results: list[ConvertResult] = field(default_factory=list)
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    seconds: float = 0.0
    complete: bool = False  # meta/info.json written

    @property
    def failed(self) -> list[ConvertResult]:
        return [r for r in self.results if r.status == "failed"]


def check_paths(src: Path, dst: Path) -> None:
    s, d = Path(os.path.realpath(src)), Path(os.path.realpath(dst))
    if s == d or s in d.parents or d in s.parents:
        raise DatasetError(dst, f"the output must be outside the source {src} (and not contain it)")


def convert_inline(src: Path | str, dst: Path | str, to: str, *, limits: Limits | None = None,
                   chunks_size: int = DEFAULT_CHUNKS_SIZE, data_size: str = "lerobot") -> ConvertReport:
    """Convert the dataset at `src` into `dst` in format `to` (stream copies, no re-encode)."""
    limits = limits or Limits()
    src, dst = Path(src).absolute(), Path(dst).absolute()
    if to not in FORMATS:
        raise ValueError(f"unknown format {to!r} (choose from {', '.join(FORMATS)})")
    info = read_info(src)
    if info["codebase_version"] == to:
        raise DatasetError(src / "meta/info.json", f"the dataset already is {to}")
    check_paths(src, dst)
    dst.mkdir(parents=True, exist_ok=True)
    atomic.remove_stale_temps(dst)
    report = ConvertReport(str(src), str(dst), to)
    t0 = time.perf_counter()
    if to == "v3.0":
        _to_v30(src, dst, info, limits, data_size, report)
    else:
        _to_v21(src, dst, info, chunks_size, report)
    report.seconds = time.perf_counter() - t0
    return report


def write_lerobot_json(path: Path, obj: object) -> None:
    """As LeRobot's `write_json` (indent 4, UTF-8 as is, no final newline), atomically."""
    atomic.write_text(path, json.dumps(obj, indent=4, ensure_ascii=False))


def copy_root_files(src: Path, dst: Path) -> None:
    """Files at the top of the source (README.md, LICENSE, ...) byte for byte."""
    for entry in sorted(src.iterdir()):
        if entry.is_file() and not entry.is_symlink() and atomic.TEMP_MARK not in entry.name:
            with atomic.atomic_path(dst / entry.name) as tmp:
                shutil.copyfile(entry, tmp)


# ---- v2.1 -> v3.0 ---------------------------------------------------------------------------------


def _to_v30(src: Path, dst: Path, info: dict, limits: Limits, data_size: str, report: ConvertReport) -> None:
    cameras, fps = video_keys(info), float(info["fps"])

    def plan() -> Iterator[PlanItem]:
        return plan_v21_to_v30(iter_v21_episodes(src, info, cameras, data_size), cameras, fps, str(src), str(dst),
                               limits)

    for unit in units_of(plan()):
        report.results.append(concat_video(unit) if isinstance(unit, VideoConcatUnit) else concat_data(unit))
        assert isinstance(unit, VideoConcatUnit | DataConcatUnit)
    if report.failed:
        return
    report.tasks = write_tasks_v30(dst / "meta/tasks.parquet", iter_v21_tasks(src))
    stats = iter_v21_stats(src) if (src / V21_EPISODES_STATS).is_file() else None
    agg = StatsAggregator()
    writer = V30EpisodesWriter(dst, limits.data_files_size_in_mb, limits.chunks_size)
    try:
        for p in placements_of(plan()):  # the same deterministic plan, streamed again for the metadata
            ep_stats = None
            if stats is not None:
                idx, ep_stats = next(stats, (None, None))
                if idx != p.episode or ep_stats is None:
                    raise DatasetError(src / V21_EPISODES_STATS, f"no stats line for episode {p.episode} "
                                                                 f"(found {idx})")
                agg.add(ep_stats, episode=p.episode)
            writer.add(v30_episode_row(p, fps, ep_stats))
            report.episodes += 1
            report.frames += p.length
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if stats is not None:
        write_lerobot_json(dst / "meta/stats.json", agg.result())
    elif (src / "meta/stats.json").is_file():
        with atomic.atomic_path(dst / "meta/stats.json") as tmp:
            shutil.copyfile(src / "meta/stats.json", tmp)
    copy_root_files(src, dst)
    write_lerobot_json(dst / "meta/info.json", info_to_v30(info, limits, episodes=report.episodes,
                                                          frames=report.frames, tasks=report.tasks))
    report.complete = True


# ---- v3.0 -> v2.1 ---------------------------------------------------------------------------------


def keyframe_problems(src: Path, info: dict) -> list[StartProblem]:
    """Every episode (per camera) of a v3.0 dataset that does not start on a keyframe."""
    cameras = video_keys(info)
    problems: list[StartProblem] = []
    episodes = (ep for ep, _row in iter_v30_episodes(src, info, cameras))
    for unit in plan_keyframe_checks(episodes, str(src)):
        problems += check_keyframes(unit)
    return sorted(problems, key=lambda p: (p.episode if p.episode is not None else -1, p.camera or ""))


def _to_v21(src: Path, dst: Path, info: dict, chunks_size: int, report: ConvertReport) -> None:
    cameras, fps = video_keys(info), float(info["fps"])
    problems = keyframe_problems(src, info)
    if problems:
        episodes = sorted({p.episode for p in problems if p.episode is not None})
        shown = ", ".join(str(e) for e in episodes[:20]) + (" ..." if len(episodes) > 20 else "")
        raise ConvertRefused(f"{len(episodes)} episode(s) cannot be cut out exactly by a stream copy: {shown} "
                             f"(first: {problems[0].line()}); use `prep reencode --format v2.1` instead", problems)
    batch: list[DataSplitUnit] = []
    source = (ep for ep, _row in iter_v30_episodes(src, info, cameras))
    for unit in plan_v30_to_v21(source, fps, str(src), str(dst), chunks_size):
        if isinstance(unit, DataSplitUnit):
            if batch and batch[-1].src_rel != unit.src_rel:
                report.results += split_data(batch)
                batch = []
            batch.append(unit)
        else:
            assert isinstance(unit, VideoCutUnit)
            report.results.append(cut_video(unit))
    if batch:
        report.results += split_data(batch)
    if report.failed:
        return
    report.tasks = write_tasks_v21(dst / "meta/tasks.jsonl", iter_v30_tasks(src))
    with AtomicWriter(dst / "meta/episodes.jsonl") as eps, AtomicWriter(dst / "meta/episodes_stats.jsonl") as st:
        for ep, row in iter_v30_episodes(src, info, cameras):
            eps.write_json_line(v21_episode_line(ep.index, ep.tasks, ep.length))
            st.write_json_line(v21_stats_line(ep.index, stats_of_row(row)))
            report.episodes += 1
            report.frames += ep.length
    copy_root_files(src, dst)
    write_lerobot_json(dst / "meta/info.json", info_to_v21(info, chunks_size, episodes=report.episodes,
                                                          frames=report.frames, tasks=report.tasks,
                                                          cameras=len(cameras)))
    report.complete = True
