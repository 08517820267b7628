"""The edit's plan: the source metadata and its selection -> one unit per output file, lazily and
deterministically, and a `Placed` per kept episode (where it lands). v2.1 (`plan_v21`): each kept episode's
parquet and mp4s under its new index (a file copy; one episode per file, so no cut). v3.0 (`plan_v30`): each
source file that holds a kept episode becomes one output file holding only its kept episodes (so every output
file is within the size limits the source kept), numbered chunk/file in order per stream; a merge packs source
files with the same codec parameters together up to the limits.

Before anything is written, `check_cuts` refuses (`EditRefused`, exit 2) an episode whose span is another's
frames, and maps `check_splice` over the v3.0 video files that lose an episode: a kept episode after a cut must
start on a keyframe, unless `--reencode-partial` re-encodes just those episodes."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.dataset.info import format_template, video_keys
from pipeline.dataset.model import resolve_inside
from pipeline.errors import PrepError
from pipeline.formats import format_of
from pipeline.formats.plan import file_mb, parquet_uncompressed_mb
from pipeline.formats.v21 import iter_v21_episode_lines
from pipeline.formats.v30 import iter_v30_episodes, next_chunk_file
from pipeline.jobs.edit.selection import Selection, Source, SrcRoot
from pipeline.jobs.output import FAILURES_LISTED
from pipeline.runner import Engine
from pipeline.stages.edit import (
    CopyVideoUnit,
    DataInput,
    DataPart,
    EditDataUnit,
    EditUnit,
    ReencodeVideoUnit,
    SpliceCheckUnit,
    SpliceVideoUnit,
    VideoSegment,
    check_partial,
    check_splice,
    check_splice_failed,
)
from pipeline.stages.edit_video import SpliceSpan
from pipeline.storage import Location, StorePath
from pipeline.text import printable
from pipeline.video.remux import StartProblem


class EditRefused(PrepError):
    """The edit cannot be done exactly by stream copy (a cut off a keyframe)."""

    def __init__(self, message: str, problems: list[StartProblem]) -> None:
        self.problems = problems
        super().__init__(message)



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


def plan_v21(s: Source, out: Path | str) -> Iterator[PlanItem]:
    src, info, sel, tasks = s.src, s.info, s.sel, s.tasks
    info_path = src / "meta/info.json"
    video_keys(info, str(info_path))  # checked
    cameras = s.features.cameras(info)
    columns = s.features.columns()
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
        yield EditDataUnit(str(out), data_out, (DataInput(root_arg(src), data_src,
                                                          (DataPart(idx, new, length, before),),
                                                          tasks.map_for(texts, src, idx), columns),))
        for cam, out_cam in cameras:
            rels = [format_template(tpl, info_path, {"episode_chunk", "episode_index", "video_key"},
                                    episode_chunk=e // c, episode_index=e, video_key=key)
                    for tpl, c, e, key in ((video_tpl, cs, idx, cam), (video_out_tpl, out_cs, new, out_cam))]
            yield CopyVideoUnit(root_arg(src), str(out), rels[0], rels[1], idx, new, length, float(info["fps"]), cam)
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


def _video_key(path: Path | StorePath) -> Any:
    """What must be equal for two source files' packets to share an output file."""
    from pipeline.stages.edit_video import file_signature

    try:
        sig = file_signature(path)
    except PrepError:
        return ("unreadable", str(path))  # a file of its own; its unit fails with the reason
    return (sig.codec, sig.width, sig.height, sig.extradata, sig.time_base)


def root_arg(src: SrcRoot) -> str | Location:
    """What a unit carries of its source dataset: a local folder's path (as text), or an object store's
    `Location` (picklable, no secret; each worker opens its own store from it)."""
    return str(src) if isinstance(src, Path) else src.location


def source_path(src: SrcRoot, rel: str) -> Path | StorePath:
    """A source file the plan reads (its size, its codec parameters): a local one checked to lie inside the
    dataset, an object through its store."""
    return resolve_inside(src, rel) if isinstance(src, Path) else src / rel


def _new(sel: Selection, idx: int) -> int:
    new = sel.new_of(idx)
    assert new is not None, idx
    return new


def plan_v30(s: Source, out: Path | str, *, streams: _Streams | None = None,
             checks: bool = False) -> Iterator[PlanItem | SpliceCheckUnit]:
    """Units (each when its output file closes), a `Placed` per kept episode; `checks`: instead, one
    `SpliceCheckUnit` per video run that loses an episode. `streams`: the output files to continue (a merge's
    earlier sources; the caller closes them with `close_streams`)."""
    src, info, sel, tasks = s.src, s.info, s.sel, s.tasks
    info_path = src / "meta/info.json"
    video_keys(info, str(info_path))  # checked
    out_of = dict(s.features.cameras(info))  # the kept cameras: source key -> output key
    cameras = tuple(out_of)
    columns = s.features.columns()
    cs = int(s.out_info.get("chunks_size", 1000))
    own = streams is None
    streams = streams if streams is not None else _Streams(cs, list(out_of.values()))
    data_run: _Run | None = None
    video_run: dict[str, _Run] = {}
    before = s.index_offset

    def close_data(run: _Run) -> None:
        if run.out is not None:
            streams.data.add(DataInput(root_arg(src), run.rel, tuple(run.parts), tuple(sorted(run.tasks)), columns), 0)

    def close_video(cam: str, run: _Run) -> Iterator[SpliceCheckUnit]:
        if run.out is None:
            return
        if checks and not all(sp.keep for sp in run.spans):
            yield SpliceCheckUnit(root_arg(src), run.rel, cam, tuple(run.spans))
        news = tuple(_new(sel, sp.episode) for sp in sorted(run.spans, key=lambda sp: sp.from_timestamp) if sp.keep)
        streams.video[out_of[cam]].add(VideoSegment(root_arg(src), run.rel, tuple(run.spans), news), 0)

    def opened(stream: _Stream, kind: str, cam: str | None, rel: str) -> tuple[tuple[int, int], int,
                                                                               Iterator[PlanItem]]:
        if streams.pack:
            path = source_path(src, rel)
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
            out_cam = out_of[v.camera]
            if new is not None and why is not None:
                chunk, file = streams.video[out_cam].reserve()
                places.append((out_cam, chunk, file, 0))
                if not checks:
                    rel = format_template(str(s.out_info.get("video_path")), info_path,
                                          {"chunk_index", "file_index", "video_key"}, chunk_index=chunk,
                                          file_index=file, video_key=out_cam)
                    feature = (info.get("features") or {}).get(v.camera) or {}
                    yield ReencodeVideoUnit(root_arg(src), v.rel, str(out), rel, v.camera, float(info["fps"]),
                                            SpliceSpan(ep.index, v.from_timestamp, v.to_timestamp, ep.length, True),
                                            new, why, json.dumps(feature.get("info") or {}))
            elif new is not None:
                if run.out is None:
                    run.out, run.kept_frames, done = opened(streams.video[out_cam], "video", out_cam, v.rel)
                    yield from done
                places.append((out_cam, run.out[0], run.out[1], run.kept_frames))
                run.kept_frames += ep.length
                streams.video[out_cam].frames += ep.length
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


def _units(out_info: dict[str, Any], src: SrcRoot, out: Path | str, kind: str, cam: str | None,
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


def close_streams(streams: _Streams, out_info: dict[str, Any], src: SrcRoot, out: Path | str, fps: float,
                  checks: bool = False) -> Iterator[PlanItem]:
    """The units of the output files still open at the end."""
    yield from _units(out_info, src, out, "data", None, streams.data.close(), fps, checks)
    for cam, stream in streams.video.items():
        yield from _units(out_info, src, out, "video", cam, stream.close(), fps, checks)


def plan(sources: Sequence[Source], out: Path | str) -> Iterator[PlanItem]:
    """Every source's units and placements in order (v3.0: one file numbering across them)."""
    first = sources[0].info
    if not format_of(first).layout.shares_files:  # a file per episode: each copied under its new index
        for s in sources:
            yield from plan_v21(s, out)
        return
    layout = sources[0].out_info
    pack = (float(layout.get("data_files_size_in_mb", 100)), float(layout.get("video_files_size_in_mb", 200))) \
        if len(sources) > 1 else None
    video_keys(first, str(sources[0].src / "meta/info.json"))  # checked
    streams = _Streams(int(layout.get("chunks_size", 1000)), [c for _k, c in sources[0].features.cameras(first)],
                       pack)
    for s in sources:
        yield from (i for i in plan_v30(s, out, streams=streams) if not isinstance(i, SpliceCheckUnit))
    yield from close_streams(streams, layout, sources[0].src, out, float(first["fps"]))


def units_of(items: Iterator[PlanItem]) -> Iterator[EditUnit]:
    return (i for i in items if not isinstance(i, Placed))


def splice_refusals(s: Source, out: Path | str, engine: Engine) -> list[StartProblem]:
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
    video_keys(info, str(src / "meta/info.json"))  # checked
    cameras = tuple(k for k, _new in s.features.cameras(info))  # a camera left out is not copied: not checked
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


def partial_reencodes(s: Source, out: Path | str,
                      engine: Engine) -> tuple[dict[tuple[str, int], str], list[StartProblem]]:
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


def check_cuts(sources: Sequence[Source], out: Path | str, engine: Engine, *,
               reencode_partial: bool = False) -> None:
    """Refuse (`EditRefused`) a v3.0 edit with a cut off a keyframe; nothing is written. `reencode_partial`:
    instead, the episodes whose cut is off a keyframe are set to be re-encoded (`Source.reencode`), and the
    rest is checked again."""
    for s in sources:  # before any cut: an episode whose span is another's frames is never written
        overlaps = overlap_refusals(s) if format_of(s.info).layout.shares_files else []
        if overlaps:
            more = f" (and {len(overlaps) - 1} more overlaps)" if len(overlaps) > 1 else ""
            raise EditRefused(f"{printable(s.src)}: {overlaps[0].line(float(s.info['fps']), s.sel)}{more}", [])
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
