"""The convert job: a LeRobot dataset rewritten in the other layout (v2.1 <-> v3.0) without re-encoding
(`prep convert`), and the re-encode into the other layout (`prep reencode --format`).

plan     the source metadata -> units, lazily and deterministically (`pipeline/formats/`: the source format's
         strict reader, the target format's packing rule):
         v2.1 -> v3.0 one unit per output file (a camera's video file, a data file), packed with LeRobot's
         rule up to the size limits; v3.0 -> v2.1 one unit per episode mp4, and the episode parquets of one
         v3.0 data file together (`DataSplitGroup`: the source is read once for them). v3.0 -> v2.1 first
         maps `check_keyframes` over every v3.0 video file and refuses, listing the episodes, when one
         does not start on a keyframe (a stream copy could not cut it exactly).
stage    `pipeline.stages.convert.convert_unit` (write under a temp name, check, rename; or keep a file
         that already exists and passes the checks)
reduce   `ConvertReduce`: counts and the first failures (memory flat in the corpus)
publish  only when every output file succeeded: tasks, episodes (+ per-episode stats), global stats, the
         source's top-level files, meta/info.json last; then prep/convert_report.json; then `prep verify`
         of the output through the same engine.

Resumable per output file: the plan is a pure function of the source metadata and the options, so a
rerun redoes only the files that are missing or fail their checks. prep's files live in `<out>/prep/`:
convert_options.json (a rerun with other options is refused), output.lock while running (any command's),
convert_report.json.

`prep reencode --format` (`pipeline.jobs.reencode_as`) converts a re-encode staged in the source's layout
with this job.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.dataset.info import video_keys
from pipeline.dataset.stats import StatsAggregator
from pipeline.errors import DatasetError, PrepError
from pipeline.formats import VERSIONS, format_of, read_info
from pipeline.formats.plan import DATA_SIZE_MEASURES, DataSplitUnit, PlanItem, VideoCutUnit, placements_of, units_of
from pipeline.formats.v21 import (
    EPISODES_STATS_REL,
    V21EpisodesWriter,
    info_to_v21,
    iter_v21_episodes,
    iter_v21_stats,
    iter_v21_tasks,
    plan_v30_to_v21,
    v21_episode_line,
    write_tasks_v21,
)
from pipeline.formats.v30 import (
    Limits,
    V30EpisodesWriter,
    info_to_v30,
    iter_v30_episodes,
    iter_v30_tasks,
    plan_keyframe_checks,
    plan_v21_to_v30,
    stats_of_row,
    v30_episode_row,
    write_tasks_v30,
)
from pipeline.formats.validate import metadata_refusals
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.output import FAILURES_LISTED, OptionsFile, claim_output, count_file, publish_files
from pipeline.runner import Engine
from pipeline.schemas import validate
from pipeline.stages.convert import (
    ConvertResult,
    ConvertUnit,
    DataSplitGroup,
    check_keyframes,
    convert_failed,
    convert_unit,
    keyframes_failed,
)
from pipeline.storage import (
    Location,
    StorePath,
    as_file,
    as_root,
    local_location,
    output_file,
    output_location,
    publish_tree,
    write_output_bytes,
)
from pipeline.video.remux import StartProblem

SrcRoot = Path | StorePath  # a source dataset's root: a local folder, or where it lives (its store's rules)

FORMATS = VERSIONS
OPTIONS_REL = f"{PREP_DIR}/convert_options.json"
OPTIONS = OptionsFile(OPTIONS_REL, "convert_options", "convert")
REPORT_REL = f"{PREP_DIR}/convert_report.json"
WRITTEN_LISTED = 10_000
SPLIT_GROUP_MAX = 1000  # episode parquets per task at most (a larger v3.0 file is read once per group)
# No cost hint for the maps: a unit's cost ranges from a 1-episode cut (~10 ms) to a 200 MB concat (seconds),
# so the runner starts with one unit per task and sizes tasks from the measured cost (the number of units is
# not known before the plan is streamed, so a hint would put a short plan into one task on one worker).
COST_S: float | None = None
KEYFRAME_COST_S: float | None = None
DEFAULT_LIMITS = Limits()


@dataclass(slots=True, frozen=True)
class ConvertOptions:
    """The target format and, for v3.0 output, LeRobot's layout limits (`chunks_size` is also the v2.1
    episodes per chunk). `data_size`: how a data file's size counts against its limit (`DATA_SIZE_MEASURES`)."""

    to: str
    limits: Limits = DEFAULT_LIMITS
    data_size: str = "lerobot"

    def settings(self) -> dict[str, Any]:
        """What determines the output files."""
        return {"to": self.to, "chunks_size": self.limits.chunks_size,
                "data_files_size_in_mb": self.limits.data_files_size_in_mb,
                "video_files_size_in_mb": self.limits.video_files_size_in_mb, "data_size": self.data_size}


class ConvertRefused(PrepError):
    """The conversion cannot be done exactly (episodes that do not start on a keyframe)."""

    def __init__(self, message: str, problems: list[StartProblem]) -> None:
        self.problems = problems
        super().__init__(message)


@dataclass(slots=True)
class ConvertReport:
    src: str
    out: str
    to: str
    options: dict[str, Any]
    engine: str
    files: int = 0
    written: int = 0
    kept: int = 0
    failed: int = 0
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    out_bytes: int = 0
    index_rewritten: int = 0  # rows whose `index` was not continuous in the source
    seconds: float = 0.0  # the output files (plan + stages; v3.0 -> v2.1 with the keyframe check)
    engine_start_seconds: float = 0.0  # starting the engine's cluster (before `seconds`)
    publish_seconds: float = 0.0
    complete: bool = False  # meta/info.json written
    failures: list[dict[str, Any]] = field(default_factory=list)  # the first FAILURES_LISTED
    written_files: list[str] = field(default_factory=list)  # the first WRITTEN_LISTED files written this run
    verify: dict[str, Any] | None = None  # `prep verify` of the output

    @property
    def ok(self) -> bool:
        return self.complete and not self.failures and (self.verify is None or bool(self.verify["passed"]))


# ---- refusals before anything is written ----------------------------------------------------------


def check_options(options: ConvertOptions) -> None:
    if options.to not in FORMATS:
        raise PrepError(f"unknown format {options.to!r} (choose from {', '.join(FORMATS)})")
    if options.data_size not in DATA_SIZE_MEASURES:
        raise PrepError(f"unknown data size measure {options.data_size!r} "
                        f"(choose from {', '.join(DATA_SIZE_MEASURES)})")


# ---- plan ------------------------------------------------------------------------------------------


def plan_to_v30(src: SrcRoot, out: Path | str, info: dict[str, Any],
                options: ConvertOptions) -> Iterator[PlanItem]:
    """The v2.1 -> v3.0 plan: every episode's placement and every output file's unit (streamed)."""
    cameras = video_keys(info, str(src / "meta/info.json"))
    episodes = iter_v21_episodes(src, info, cameras, options.data_size)
    return plan_v21_to_v30(episodes, cameras, float(info["fps"]), src, str(out), options.limits)


def units_to_v21(src: SrcRoot, out: Path | str, info: dict[str, Any],
                 options: ConvertOptions) -> Iterator[ConvertUnit]:
    """The v3.0 -> v2.1 units: each episode mp4 as soon as planned, the episode parquets grouped by their
    v3.0 data file (at most `SPLIT_GROUP_MAX` per group)."""
    source = (ep for ep, _row in iter_v30_episodes(src, info, video_keys(info, str(src / "meta/info.json")),
                                                   stats=False))
    group: list[DataSplitUnit] = []
    for unit in plan_v30_to_v21(source, float(info["fps"]), src, str(out), options.limits.chunks_size):
        if isinstance(unit, DataSplitUnit):
            if group and (group[-1].src_rel != unit.src_rel or len(group) >= SPLIT_GROUP_MAX):
                yield DataSplitGroup(tuple(group))
                group = []
            group.append(unit)
        else:
            assert isinstance(unit, VideoCutUnit)
            yield unit
    if group:
        yield DataSplitGroup(tuple(group))


def _episodes(info: dict[str, Any]) -> int:
    n = info.get("total_episodes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1 << 62


def keyframe_problems(src: SrcRoot, info: dict[str, Any], engine: Engine) -> list[StartProblem]:
    """Every episode (per camera) of a v3.0 dataset that does not start on a keyframe (one demux per file)."""
    episodes = (ep for ep, _row in iter_v30_episodes(src, info, video_keys(info, str(src / "meta/info.json")),
                                                     stats=False))
    problems: list[StartProblem] = []
    for found in engine.results(check_keyframes, plan_keyframe_checks(episodes, src),
                                on_error=keyframes_failed, desc="keyframes", unit_name="file",
                                cost_s=KEYFRAME_COST_S):
        problems += found[:FAILURES_LISTED - len(problems)] if len(problems) < FAILURES_LISTED else []
    return sorted(problems, key=lambda p: (p.episode if p.episode is not None else -1, p.camera or ""))


def refusal(problems: list[StartProblem]) -> ConvertRefused:
    episodes = sorted({p.episode for p in problems if p.episode is not None})
    shown = ", ".join(str(e) for e in episodes[:20]) + (" ..." if len(episodes) > 20 else "")
    return ConvertRefused(f"{len(episodes)} episode(s) cannot be cut out exactly by a stream copy: {shown} "
                          f"(first: {problems[0].line()}); use `prep reencode --format v2.1` instead", problems)


# ---- reduce ----------------------------------------------------------------------------------------


class ConvertReduce:
    """Counts, bytes, the first failures and the first files written."""

    def __init__(self, report: ConvertReport) -> None:
        self.report = report

    def add(self, r: ConvertResult) -> None:
        if not count_file(self.report, r):
            return
        self.report.index_rewritten += r.index_rewritten
        if r.status == "written" and len(self.report.written_files) < WRITTEN_LISTED:
            self.report.written_files.append(r.out_rel)


# ---- publish ---------------------------------------------------------------------------------------


def copy_root_files(src: SrcRoot, dst: Path) -> None:
    """Files at the top of the source (README.md, LICENSE, ...) byte for byte, whatever their names (a
    symlink is not followed out of the source: left out). An object store's: the objects directly below the
    prefix (one listing)."""
    root = as_root(src)
    if root.location.is_local:
        for entry in sorted(root.local.iterdir()):
            if entry.is_file() and not entry.is_symlink():
                with atomic.atomic_path(dst / entry.name, dst) as tmp:
                    shutil.copyfile(entry, tmp)
        return
    out = local_location(dst).store()
    for rel in root.store.glob(root.rel, "*"):
        out.copy_in(root.store, rel, rel.rsplit("/", 1)[-1])


def publish_v30(src: SrcRoot, out: Path, info: dict[str, Any], options: ConvertOptions, report: ConvertReport) -> None:
    """tasks.parquet, meta/episodes/*.parquet (from the same plan, streamed again), stats.json, info.json last."""
    fps = float(info["fps"])
    report.tasks = write_tasks_v30(out / "meta/tasks.parquet", iter_v21_tasks(src), root=out)
    stats = iter_v21_stats(src) if (src / EPISODES_STATS_REL).is_file() else None
    agg = StatsAggregator()
    writer = V30EpisodesWriter(out, options.limits.data_files_size_in_mb, options.limits.chunks_size)
    episodes = frames = 0
    try:
        for p in placements_of(plan_to_v30(src, out, info, options)):
            ep_stats = None
            if stats is not None:
                idx, ep_stats = next(stats, (None, None))
                if idx != p.episode or ep_stats is None:
                    raise DatasetError(src / EPISODES_STATS_REL, f"no stats line for episode {p.episode} "
                                                                 f"(found {idx})")
                agg.add(ep_stats, episode=p.episode)
            writer.add(v30_episode_row(p, fps, ep_stats))
            episodes += 1
            frames += p.length
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if stats is not None:
        atomic.write_lerobot_json(out / "meta/stats.json", agg.result(), root=out)
    elif (src / "meta/stats.json").is_file():
        with atomic.atomic_path(out / "meta/stats.json", out) as tmp, \
                as_file(src / "meta/stats.json").open() as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
    copy_root_files(src, out)
    report.episodes, report.frames = episodes, frames
    atomic.write_lerobot_json(out / "meta/info.json", info_to_v30(info, options.limits, episodes=episodes,
                                                                  frames=frames, tasks=report.tasks), root=out)


def publish_v21(src: SrcRoot, out: Path, info: dict[str, Any], options: ConvertOptions, report: ConvertReport) -> None:
    """tasks.jsonl, episodes.jsonl and episodes_stats.jsonl (streamed from the v3.0 episodes), info.json last."""
    cameras = video_keys(info, str(src / "meta/info.json"))
    report.tasks = write_tasks_v21(out / "meta/tasks.jsonl", iter_v30_tasks(src), root=out)
    episodes = frames = 0
    with V21EpisodesWriter(out) as writer:
        for ep, row in iter_v30_episodes(src, info, cameras):
            writer.add(v21_episode_line(ep.index, ep.tasks, ep.length))
            writer.add_stats(ep.index, stats_of_row(row))
            episodes += 1
            frames += ep.length
    copy_root_files(src, out)
    report.episodes, report.frames = episodes, frames
    atomic.write_lerobot_json(out / "meta/info.json", info_to_v21(info, options.limits.chunks_size,
                                                                  episodes=episodes, frames=frames,
                                                                  tasks=report.tasks, cameras=len(cameras)),
                              root=out)


PUBLISH = {"v3.0": publish_v30, "v2.1": publish_v21}


# ---- verify ----------------------------------------------------------------------------------------


def verify_output(out: Path | Location, engine: Engine, *, all_intra: bool = False) -> dict[str, Any]:
    """`prep verify` of the output (demux checks of every file and episode) through the same engine."""
    from pipeline.jobs.verify import verify_dataset
    from pipeline.stages.verify import VerifyOptions

    report = verify_dataset(out, VerifyOptions(all_intra=all_intra), engine)
    return {"passed": report.passed, "episodes_checked": report.episodes_checked,
            "episodes_passed": report.episodes_passed, "failures_total": report.failures_total,
            "failures": [f.line() for f in report.failures[:20]]}


# ---- the job ---------------------------------------------------------------------------------------


def convert_dataset(src: Path | Location, out: Path | Location, options: ConvertOptions, engine: Engine, *,
                    verify: bool = True, all_intra: bool = False, staged: bool = False,
                    extra_settings: dict[str, Any] | None = None) -> ConvertReport:
    """Convert `src` into the dataset `out` in `options.to` (stream copies) through `engine`; resumable;
    never writes under `src`. Raises `ConvertRefused` (v3.0 -> v2.1 where an episode is off a keyframe)
    and `PrepError` for a bad dataset or output (`MetadataError`, before anything is written, for metadata
    that breaks its rules). `all_intra`: `prep verify` also requires every frame to
    be a keyframe (`reencode_as`).

    `src` and `out` may be object-store locations: the stages read and write through the stores (each output
    file put whole after its checks, its record first), and the metadata is made in a local temp folder and put,
    meta/info.json last."""
    root = as_root(src if isinstance(src, Location) else Path(src).absolute())
    where = output_location(out if isinstance(out, Location) else Path(out).absolute())
    out_root: Path | str = Path(where.root) if where.is_local else where.url
    check_options(options)
    info = read_info(root)
    if info["codebase_version"] == options.to:
        raise DatasetError(root / "meta/info.json", f"the dataset already is {options.to}")
    # in or around the source, busy (any command's), not this command's, or holding a link: refused now
    claim = claim_output(Path(where.root) if where.is_local else where, "convert", OPTIONS, sources=[root.location],
                         staged=staged)
    metadata_refusals(root, "convert")[0].raise_if_any()  # every metadata file checked before anything is written
    report = ConvertReport(str(root), str(out_root), options.to, options.settings(), engine.backend)
    # a small dataset is converted in this process (the CLI's threshold); the cluster's start-up timed apart
    report.engine_start_seconds = engine.prepare(_episodes(info))
    with claim.hold({**options.settings(), **(extra_settings or {})}, source=root.location):
        t0 = time.perf_counter()
        if format_of(options.to).layout.shares_files:  # into files episodes share: packed by LeRobot's rule
            units: Iterator[Any] = units_of(plan_to_v30(root, out_root, info, options))
        else:  # a file per episode: each cut out of its source file, which needs it to start on a keyframe
            problems = keyframe_problems(root, info, engine)
            if problems:
                raise refusal(problems)
            units = units_to_v21(root, out_root, info, options)
        reduce = ConvertReduce(report)
        for batch in engine.map(convert_unit, units, on_error=convert_failed, desc="convert", unit_name="unit",
                                cost_s=COST_S, measure=lambda rs: {"files": float(len(rs))}):
            for results in batch.results:
                for r in results:
                    reduce.add(r)
        claim.remove_temps()  # temp files of workers killed mid-task (their task was retried)
        report.seconds = time.perf_counter() - t0
        if where.is_local:
            out_path = Path(where.root)
            publish_files(out_path, report, lambda: PUBLISH[options.to](root, out_path, info, options, report),
                          write_report)
        else:  # the metadata made in a local temp folder, then put (meta/info.json last); the report put after it
            with tempfile.TemporaryDirectory(prefix="prep-publish-") as spool:

                def publish() -> None:
                    PUBLISH[options.to](root, Path(spool), info, options, report)
                    publish_tree(Path(spool), where, last="meta/info.json")

                publish_files(Path(spool), report, publish, lambda _spool, r: write_report(out_root, r))
    if report.complete and verify:
        report.verify = verify_output(Path(where.root) if where.is_local else where, engine, all_intra=all_intra)
        write_report(out_root, report)
    return report


def write_report(out: Path | str, report: ConvertReport) -> None:
    doc = {"schema": "prep.convert_report/1", **asdict(report)}
    path = output_file(out, REPORT_REL)
    validate(doc, "convert_report", source=str(path))
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")  # as atomic.write_json
    write_output_bytes(path, data, None if isinstance(path, StorePath) else Path(out))
