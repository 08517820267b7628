"""The reencode stage: one unit = one source video file (v3.0: all the episodes it holds).

For a unit: probe the source (demux only) and check each episode's frame count against the
metadata; map each episode to its span in the new file (frame i at i/fps); keep the output if it checks out
(resume: its sidecar says it is this very file, made from this very source with these settings, and it passes
the checks), else encode to a temp name, check it (size, frame count per episode and in total, pts grid, every
frame a keyframe), compute the image stats of the new frames, save them beside it (`prep/stats/<file>.json`, so
a resumed file is not decoded again) and rename it into place (`pipeline.stages.keep.keep_or_write`). Failures
are results with reasons.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import atomic
from pipeline.checks import Status
from pipeline.dataset.features import is_depth_feature, is_high_bit_gray
from pipeline.dataset.model import CameraInfo, Dataset
from pipeline.errors import EpisodeError
from pipeline.formats.base import EpisodeVideo
from pipeline.formats.write import PREP_DIR
from pipeline.stages.keep import (
    DEFAULT_FINGERPRINT,
    file_identity,
    fingerprint_matches,
    keep_or_write,
    source_fingerprint,
)
from pipeline.stages.result import StageResult, reason_of
from pipeline.storage import (
    STREAM_BLOCK,
    Location,
    Output,
    Source,
    StorePath,
    as_file,
    as_root,
    output_file,
    output_folder,
    output_size,
    read_output_text,
    write_output_bytes,
)
from pipeline.video.checks import (
    TIMESTAMP_TOLERANCE_S,
    CheckFailure,
    Span,
    VideoExpect,
    check_probe,
    episode_slice,
    failing,
)
from pipeline.video.encode import (
    DEFAULT_ENGINE,
    DEFAULT_PROFILE,
    ENGINES,
    ENGINES_WITH_HOOK,
    PROFILES,
    EncodeJob,
    filter_frames,
)
from pipeline.video.imagestats import SpanImageStats
from pipeline.video.indexed import probe_indexed, same_packets
from pipeline.video.pictures import Pictures, picture_frames
from pipeline.video.probe import VideoProbe, probe_video
from pipeline.video.quality import QualitySample
from pipeline.video.resize import DEFAULT_RESIZE, RESIZE_MODES, Geometry
from pipeline.video.rotation import display_filters, display_matrix, swaps_sides

FPS_TOLERANCE = 0.01  # relative: a source may jitter, but 25 fps labelled 30 is refused
# A frame is restamped onto the 1/fps grid only when it is already there up to rounding: LeRobot's tolerance
# (1e-4 s), half the stream's time base, or timestamps rounded to whole milliseconds by a recorder or muxer.
RESTAMP_TOLERANCE_S = 0.0005 + 1e-9


@dataclass(slots=True, frozen=True)
class ReencodeOptions:
    """What to produce: target size (width, height), resize mode, profile, quality, engine."""

    size: tuple[int, int] = (224, 224)
    resize: str = DEFAULT_RESIZE
    profile: str = DEFAULT_PROFILE
    crf: int | None = None  # None: the profile's default
    engine: str = DEFAULT_ENGINE
    repairs: tuple[str, ...] = ()  # `--repair NAME` (pipeline.checks.REPAIR_NAMES): they change the output
    fingerprint: str = DEFAULT_FINGERPRINT  # how a rerun tells a kept output's source is unchanged (FINGERPRINTS)
    keep_images: bool = False  # cameras stored as images stay images (resized) instead of becoming videos

    @property
    def quality(self) -> int:
        return PROFILES[self.profile].default_crf if self.crf is None else self.crf

    def output_settings(self) -> dict[str, object]:
        """What determines the output files (the engine does not change what is checked)."""
        out: dict[str, object] = {"size": list(self.size), "resize": self.resize, "profile": self.profile,
                                  "crf": self.quality}
        if self.repairs:
            out["repair"] = sorted(self.repairs)
        if self.keep_images:
            out["keep_images"] = True
        return out


@dataclass(slots=True, frozen=True)
class ReencodeUnit:
    src_root: Location | str  # the source dataset (a local folder's path: its Location): `rel` read through its store
    out_root: str
    rel: str
    camera: str
    fps: float
    spans: tuple[Span, ...]  # the episodes in the source file, by source timestamps
    options: ReencodeOptions
    declared_size: tuple[int, int] | None = None  # (width, height) as meta/info.json declares the camera
    depth: bool = False  # a depth map (`pipeline.dataset.features`): copied unchanged, never lossy
    # a camera stored as images: the data parquet its pictures are read from (`rel` is then the output video)
    pictures_from: str | None = None
    # the job checked the source from the container index (an object store's: `pipeline.jobs.preverify`): the
    # stage tells whether this file's demux agrees with its index (`ReencodeResult.index_agrees`)
    confirm_index: bool = False


@dataclass(slots=True)
class OutputCounts:
    """What the checks measured of a finished output file, as `prep scan` would count it: the header,
    and per episode span (in the order of `ReencodeResult.episodes`) frames, keyframes and bytes."""

    frames_from_header: int
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float
    spans: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ReencodeResult(StageResult):
    """One source video file's output: status "encoded" | "kept" (already complete and correct) | "copied" (a
    depth map) | "failed"."""

    rel: str
    camera: str
    episodes: list[EpisodeVideo] = field(default_factory=list)
    frames: int = 0
    src_bytes: int = 0
    out_bytes: int = 0
    seconds: float = 0.0
    src_width: int = 0
    src_height: int = 0
    src_codec: str = ""
    output: OutputCounts | None = None
    copied: bool = False  # a depth camera's file, copied unchanged (status "copied", or "kept" on a rerun)
    # PSNR/SSIM of a few sampled frames against the encoder's input (pipeline.video.quality; kept: from the
    # sidecar), None when not measured; quality_s: the seconds the sample cost in this run
    quality: dict[str, Any] | None = None
    quality_s: float = 0.0
    # with `ReencodeUnit.confirm_index`: whether the demux of the source found what its container index lists
    # (`pipeline.video.indexed.same_packets`); False sends the job back to check the source by demuxing it
    index_agrees: bool | None = None


def declared_size(cam: CameraInfo) -> tuple[int, int] | None:
    """(width, height) of a camera as info.json declares it: `video.width/height`, else the shape by its names."""
    if cam.width and cam.height:
        return cam.width, cam.height
    names = list(cam.names or ())
    if "height" in names and "width" in names and len(cam.shape) == len(names):
        return cam.shape[names.index("width")], cam.shape[names.index("height")]
    return None


def reencode_units(ds: Dataset, out: Path | str, options: ReencodeOptions, *,
                   confirm_index: bool = False) -> Iterator[ReencodeUnit]:
    """One unit per source video file (v3.0: with every episode it holds), lazily, in plan order."""
    cameras = {cam.key: cam for cam in ds.cameras}
    depth = {cam: cameras[cam].depth or is_depth_feature(ds.info, cam) for cam in cameras}
    for camera, rel, episodes in ds.iter_camera_files():
        spans = tuple(
            Span(ep.index, ep.video(camera).from_timestamp, ep.video(camera).to_timestamp, ep.frames_expected)
            for ep in episodes
        )
        pictures = episodes[0].data.rel if cameras[camera].from_images else None
        yield ReencodeUnit(ds.location, str(out), rel, camera, ds.fps, spans, options,
                           declared_size(cameras[camera]), depth[camera], pictures,
                           confirm_index and pictures is None)


def mean_fps(probe: VideoProbe) -> float:
    """Frames per second over the whole file (first to last pts): robust to jitter and to timestamps
    rounded to a coarse time base (1 ms), unlike the median frame interval."""
    pts = probe.pts_s
    if len(pts) < 2 or pts[-1] <= pts[0]:
        return probe.fps
    return (len(pts) - 1) / (pts[-1] - pts[0])


def check_source(probe: VideoProbe, unit: ReencodeUnit, quarter_turn: bool = False) -> None:
    """Refuse a source whose size or frame rate is not what meta/info.json says (LeRobot would misread it).
    A source rotated a quarter turn by its display matrix may declare either its coded or its displayed size."""
    episode = unit.spans[0].episode if unit.spans else None
    sizes = {(probe.width, probe.height), *([(probe.height, probe.width)] if quarter_turn else [])}
    if unit.declared_size is not None and unit.declared_size not in sizes:
        w, h = unit.declared_size
        raise EpisodeError(episode, probe.path, f"video is {probe.width}x{probe.height} but meta/info.json "
                                                f"declares {w}x{h} for {unit.camera}")
    rate = mean_fps(probe)
    if abs(rate - unit.fps) > FPS_TOLERANCE * unit.fps:
        raise EpisodeError(episode, probe.path, f"video runs at {rate:.3f} fps but meta/info.json says "
                                                f"{unit.fps:g} fps")


def reencode_failed(unit: ReencodeUnit, exc: BaseException) -> ReencodeResult:
    reason = str(exc) if isinstance(exc, atomic.WriteError) else reason_of(exc)
    return ReencodeResult(rel=unit.rel, camera=unit.camera, status=Status.FAILED, reason=reason)


def new_spans(probe: VideoProbe, spans: tuple[Span, ...], fps: float) -> list[Span]:
    """Each episode's span in the output, where frame i sits at i/fps; checks the source's counts.

    An episode's source frames are the ones LeRobot reads: its `length` frames from `from_timestamp`
    (`episode_slice`; a `to_timestamp` one frame short does not lose a frame). The output holds every
    source frame in order, so an episode starting at source frame k starts at k/fps and ends exactly at
    (k + length)/fps.
    """
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: s.from_timestamp):
        start, hi = episode_slice(probe, span)
        n = hi - start
        if span.frames_expected is not None and n != span.frames_expected:
            raise EpisodeError(span.episode, probe.path,
                               f"source holds {n} frames for episode {span.episode} but the metadata says "
                               f"{span.frames_expected}")
        if out and out[-1].frames_expected is not None and \
                round(out[-1].from_timestamp * fps) + out[-1].frames_expected > start:
            prev = out[-1]
            raise EpisodeError(prev.episode, probe.path,
                               f"episode {prev.episode}'s {prev.frames_expected} frames from "
                               f"{prev.from_timestamp:.6f} s run into episode {span.episode}'s (a recorder that "
                               "dropped frames but kept the rows): LeRobot would hand them as this episode's")
        to = None if span.to_timestamp is None else (start + n) / fps
        out.append(Span(span.episode, start / fps, to, n))
    return out


def check_timing(probe: VideoProbe, spans: tuple[Span, ...], fps: float) -> None:
    """Refuse a source whose frame k of an episode does not sit where LeRobot looks it up (from_timestamp +
    k/fps, up to the rounding of `RESTAMP_TOLERANCE_S` or of the stream's time base): restamping such a file
    (a variable frame rate) onto the grid would move a frame away from its state/action row."""
    tol = max(TIMESTAMP_TOLERANCE_S, RESTAMP_TOLERANCE_S, probe.time_base_s / 2 + 1e-9)
    step = 1.0 / fps
    for span in spans:
        lo, hi = episode_slice(probe, span)
        pts = probe.pts[lo:hi]
        off = np.abs(pts - (span.from_timestamp + np.arange(len(pts)) * step))
        bad = np.flatnonzero(off > tol)
        if len(bad):
            k = int(bad[0])
            raise EpisodeError(span.episode, probe.path,
                               f"episode {span.episode}: frame {k} is at {float(pts[k]):.6f} s, "
                               f"{float(off[k]) * 1000:.1f} ms from where LeRobot looks it up "
                               f"({span.from_timestamp + k * step:.6f} s; {len(bad)} frames off the 1/fps grid, "
                               "variable frame rate): not restamped")


def check_output(path: Source, unit: ReencodeUnit, spans: list[Span], total_frames: int) -> list[CheckFailure]:
    return inspect_output(path, unit, spans, total_frames)[1]


def output_counts(probe: VideoProbe, spans: list[Span]) -> OutputCounts:
    """Per-span counts of a checked output (bytes shared by packet payload, as the scan shares them)."""
    payload = probe.payload_bytes or 1
    counts = []
    for s in spans:
        frames = probe.frames_in_span(s.from_timestamp, s.to_timestamp)
        keys = probe.keyframes_in_span(s.from_timestamp, s.to_timestamp)
        nbytes = probe.bytes if s.to_timestamp is None else \
            round(probe.bytes * probe.bytes_in_span(s.from_timestamp, s.to_timestamp) / payload)
        counts.append((frames, keys, nbytes))
    return OutputCounts(probe.frames_from_header, probe.codec, probe.width, probe.height, probe.pix_fmt, probe.fps,
                        counts)


def inspect_output(path: Source, unit: ReencodeUnit, spans: list[Span],
                   total_frames: int) -> tuple[VideoProbe | None, list[CheckFailure]]:
    """`check_output` and the probe it made (None if unreadable): the per-file checks of `prep verify` on the
    file as it is on disk: its header and a demux of every packet (size, frame count per span and in total, header
    count = packets, pts grid from 0, every frame a keyframe). The open skips FFmpeg's probe decode (the pixel
    format is not checked)."""
    expect = VideoExpect(fps=unit.fps, size=unit.options.size, all_intra=True)
    episode = spans[0].episode if spans else None
    try:
        probe = probe_video(path, episode=episode, pix_fmt=False)
    except EpisodeError as exc:
        return None, [CheckFailure("readable", "a readable video", exc.message, episode, unit.camera, str(path))]
    failures = check_probe(probe, expect, spans, camera=unit.camera)
    if probe.frames_from_packets != total_frames:
        failures.append(CheckFailure("frames_total", f"{total_frames} (source frames)",
                                     str(probe.frames_from_packets), None, unit.camera, str(path)))
    if probe.pts_s and abs(probe.pts_s[0]) > TIMESTAMP_TOLERANCE_S:
        failures.append(CheckFailure("first_pts", "0", f"{probe.pts_s[0]:.6f}", None, unit.camera, str(path)))
    if display_matrix(path) is not None:
        failures.append(CheckFailure("display_matrix", "none (frames in display orientation)", "a display matrix",
                                     None, unit.camera, str(path)))
    return probe, failures


def stats_sidecar(unit: ReencodeUnit) -> Output:
    """Where the image stats of an output file are kept, so that a rerun need not decode it again (in the output:
    a local folder's, or an object store's, so that a resume on another machine finds them)."""
    return output_file(unit.out_root, f"{PREP_DIR}/stats/{unit.rel}.json")


def stats_key(unit: ReencodeUnit, probe: VideoProbe, spans: list[Span]) -> dict[str, Any]:
    """What the output file and its stats depend on: the output settings, the source file and the episode
    spans (as JSON reads back). The source's fingerprint is kept beside the key (`load_stats`)."""
    key = {"settings": unit.options.output_settings(), "source": unit.rel, "source_bytes": probe.bytes,
           "spans": [[s.episode, s.from_timestamp, s.frames_expected] for s in spans]}
    loaded: dict[str, Any] = json.loads(json.dumps(key))
    return loaded


def load_stats(path: Output, key: dict[str, Any], source: Source | None = None,
               mode: str = DEFAULT_FINGERPRINT, output: Source | None = None) -> list[dict[str, Any]] | None:
    """The stats saved beside an earlier output of the same settings and spans, made from this very source
    (`source`: its fingerprint matches by `mode`) into this very file (`output`: its size and block hash are the
    recorded ones), else None."""
    try:
        doc = json.loads(read_output_text(path))
    except (OSError, ValueError, RecursionError, EpisodeError):
        return None
    stats = doc.get("stats") if isinstance(doc, dict) and doc.get("key") == key else None
    if not (isinstance(stats, list) and len(stats) == len(key["spans"])):
        return None
    if source is not None and not fingerprint_matches(doc.get("source_fingerprint"), source, mode):
        return None
    if output is not None and doc.get("output") != file_identity(output):
        return None
    return stats


def load_quality(path: Output) -> dict[str, Any] | None:
    """The quality sample saved in a kept output's sidecar (`load_stats` has accepted it), if any."""
    try:
        doc = json.loads(read_output_text(path))
    except (OSError, ValueError, RecursionError, EpisodeError):
        return None
    quality = doc.get("quality") if isinstance(doc, dict) else None
    return quality if isinstance(quality, dict) else None


def save_stats(path: Output, doc: dict[str, Any], root: Path | None = None) -> None:
    """Write a stats sidecar under a temp name and rename it: atomic, but not fsynced. It is a cache:
    after a power loss it may be missing or empty, which `load_stats` reads as "no stats" (the file's
    stats are then computed again), so it need not pay two fsyncs (~4 ms per file here)."""
    write_output_bytes(path, json.dumps(doc).encode("utf-8"), root, fsync=False)


def reencode_unit(unit: ReencodeUnit) -> ReencodeResult:
    t0 = time.perf_counter()
    result = ReencodeResult(rel=unit.rel, camera=unit.camera, status=Status.FAILED)
    try:
        if unit.pictures_from is not None:  # a camera stored as images: its pictures in the data parquet
            src = as_root(unit.src_root) / unit.pictures_from
            with readable(src, "parquet file") as read:
                _encode_pictures(unit, src, read, result)
        else:
            src = as_root(unit.src_root) / unit.rel  # read through its store (its rules: inside the dataset)
            with readable(src) as read:
                _reencode(unit, src, read, result)
    except EpisodeError as exc:
        result.fail(exc.message)
    result.seconds = time.perf_counter() - t0
    return result


@contextlib.contextmanager
def readable(src: StorePath, what: str = "video file") -> Iterator[Source]:
    """Where the stage reads the source's bytes: a local file as it is; an object downloaded once to a local temp
    file (one per running task, deleted when the task ends), so that the demux, the decode, the content hash and
    the stats pass do not each fetch it again (bench/object_store.py measured 4.3x the corpus read without). Its
    identity (fingerprint: size, ETag, blocks) is still the object's; an error names the object, not the copy."""
    if src.location.is_local:
        yield src
        return
    src.store.learn_folder(src.rel)  # the source is never written: its stats from a listing, not a HEAD a file
    with src.local_copy(what) as path:
        try:
            yield path
        except EpisodeError as exc:
            raise EpisodeError(exc.episode, src, exc.message.replace(str(path), str(src))) from None


def _reencode(unit: ReencodeUnit, src: StorePath, read: Source, result: ReencodeResult) -> None:
    """The stage's work for one file: `src` is the source as the dataset names it (its fingerprint, its
    sidecar's check), `read` where its bytes are read."""
    dst = output_file(unit.out_root, unit.rel)
    episode = unit.spans[0].episode if unit.spans else None
    header = probe_indexed(read, episode=episode) if unit.confirm_index else None
    try:
        # pix_fmt=False: no probe decode at open (the source's pixel format is not needed here)
        probe = probe_video(read, episode=episode, pix_fmt=False)
    except EpisodeError:
        result.index_agrees = header is None if unit.confirm_index else None  # an index, and no demux
        raise
    if unit.confirm_index:
        result.index_agrees = header is None or same_packets(header.probe, probe)
    result.src_bytes, result.src_width, result.src_height = probe.bytes, probe.width, probe.height
    result.src_codec = probe.codec
    if unit.depth or is_high_bit_gray(probe.pix_fmt):
        _copy_depth(unit, src, read, dst, probe, result)
        return
    spans = new_spans(probe, unit.spans, unit.fps)  # frame counts first: a dropped frame is named as such
    matrix, rotate = display_filters(read, unit.spans[0].episode if unit.spans else None)
    check_source(probe, unit, swaps_sides(matrix))
    check_timing(probe, unit.spans, unit.fps)
    total = probe.frames_from_packets
    w, h = unit.options.size
    # Frames are turned to display orientation first (no display matrix in the output: every reader and
    # back-end hands back the same frame), then resized from the displayed size.
    sw, sh = (probe.height, probe.width) if swaps_sides(matrix) else (probe.width, probe.height)
    geometry = RESIZE_MODES[unit.options.resize](sw, sh, w, h)
    key = stats_key(unit, probe, spans)
    if matrix is not None:
        key["display_matrix"] = list(matrix)
    _encode_checked(unit, src, read, spans, total, geometry, tuple(rotate), key, result)


def _encode_checked(unit: ReencodeUnit, src: StorePath, read: Source | Pictures, spans: list[Span], total: int,
                    geometry: Geometry, rotate: tuple[tuple[str, dict[str, str]], ...], key: dict[str, Any],
                    result: ReencodeResult) -> None:
    """Encode `read` (a video file, or a camera's pictures) into the unit's output, check it, save its stats
    sidecar and rename it into place; or keep the finished output a rerun finds (its sidecar says it was made
    from this very source, `src`, with these settings and spans, and it passes its checks)."""
    dst = output_file(unit.out_root, unit.rel)
    root = output_folder(unit.out_root)
    content = read.src if isinstance(read, Pictures) else read  # where the source's bytes are read
    # Image stats of the resized frames before compression (as LeRobot computes them from the
    # frames it records), so they do not depend on the engine or on whether a file was resumed.
    stats = SpanImageStats([(round(s.from_timestamp * unit.fps), s.frames_expected or 0) for s in spans])
    sidecar = stats_sidecar(unit)
    hooked = unit.options.engine in ENGINES_WITH_HOOK or isinstance(read, Pictures)  # pictures: always pyav
    sample = QualitySample(total)
    fingerprint: dict[str, Any] = {}
    seen: dict[str, Any] = {}  # the output's probe, and a kept output's stats

    def keep(path: Source) -> bool:
        """A finished output is kept only when its sidecar says it was made from this very source (same
        fingerprint, settings and spans) into this very file, and it still passes its checks."""
        kept_stats = load_stats(sidecar, key, src, unit.options.fingerprint, output=path)
        out_probe, found = inspect_output(path, unit, spans, total) if kept_stats is not None else (None, [])
        if out_probe is None or failing(found):
            return False
        seen.update(probe=out_probe, stats=kept_stats)
        return True

    def frame_seen(i: int, frame: Any) -> None:
        stats.add(i, frame)
        sample.add(i, frame)

    def write(tmp: Path) -> None:
        # before the encode reads it (then from the page cache, or the local copy of an object)
        fingerprint.update(source_fingerprint(src, content_of=content))
        opts = unit.options
        ENGINES[opts.engine](EncodeJob(read, tmp, unit.fps, geometry, PROFILES[opts.profile], opts.quality,
                                       frame_seen if hooked else None, rotate))

    def check(tmp: Path) -> str | None:
        out_probe, found = inspect_output(tmp, unit, spans, total)
        failures = failing(found)  # a warning or info finding does not refuse the file
        if failures or out_probe is None:
            return "output failed its checks: " + "; ".join(
                f"{f.check}: expected {f.expected}, found {f.found}" for f in failures[:3])
        seen["probe"] = out_probe
        return None

    def checked(written: Path) -> None:
        """The output passed its checks: its stats, its quality sample and the sidecar (which says what the
        output was made from, and what it is) are written before the output is renamed into place, so a kept
        output always has one."""
        if not hooked:
            filter_frames(read, geometry, PROFILES[unit.options.profile].pix_fmt, frame_seen, rotate)
        result.quality = sample.measure(written)
        save_stats(sidecar, {"key": key, "source_fingerprint": fingerprint, "stats": stats.result(),
                             "quality": result.quality, "output": file_identity(written)}, root)
        seen["bytes"] = written.stat().st_size  # what is renamed or put whole: no stat of the output after

    if isinstance(dst, StorePath):  # whether a rerun finds it: from a listing of its folder, not a HEAD a file
        dst.store.learn_folder(dst.rel, absent=True)
    if keep_or_write(dst, root, write, check, keep=keep, saved=checked, blame=src) == Status.KEPT:
        result.status = Status.KEPT
        result.quality = load_quality(sidecar)
    else:
        result.quality_s = sample.seconds
        result.status = Status.ENCODED
    span_stats = seen["stats"] if result.status == Status.KEPT else stats.result()
    result.episodes = [
        EpisodeVideo(s.episode if s.episode is not None else -1, s.from_timestamp, s.to_timestamp, st)
        for s, st in zip(spans, span_stats, strict=True)
    ]
    result.frames, result.out_bytes = total, seen["bytes"] if "bytes" in seen else output_size(dst)
    result.output = output_counts(seen["probe"], spans)


def picture_spans(read: Source, unit: ReencodeUnit) -> tuple[list[Span], int, tuple[int, int]]:
    """A camera stored as images: each episode's span in the new file (its rows in file order: frame i of the
    file at i/fps), checked against the metadata lengths; the frames in all; the first picture's (width, height).
    Reads the `episode_index` column and one page of pictures. A picture of another size than info.json declares
    is not refused: every reader loads it (at its own size, which `prep verify` warns of), and each picture is
    resized to the output by its own geometry."""
    import pyarrow.parquet as pq

    episodes = {s.episode: s for s in unit.spans}
    order: list[int] = []
    rows: dict[int, int] = {}
    with as_file(read).media(block_size=STREAM_BLOCK, what="parquet file") as source:
        pf = pq.ParquetFile(source)
        if unit.camera not in pf.schema_arrow.names:
            raise EpisodeError(unit.spans[0].episode if unit.spans else None, read,
                               f"no image column {unit.camera!r} in the data file")
        for batch in pf.iter_batches(batch_size=1 << 16, columns=["episode_index"]):
            for e in batch.column(0).to_pylist():
                if e in episodes:
                    if e not in rows:
                        order.append(e)
                    rows[e] = rows.get(e, 0) + 1
    first = next(picture_frames(Pictures(read, unit.camera, frozenset(rows))), None)
    if first is None:
        raise EpisodeError(unit.spans[0].episode if unit.spans else None, read,
                           f"{unit.camera}: no rows for episodes {sorted(e for e in episodes if e is not None)[:5]}")
    size = (first.width, first.height)
    spans: list[Span] = []
    start = 0
    shared = any(s.to_timestamp is not None for s in unit.spans)
    for e in order:
        n, expected = rows[e], episodes[e].frames_expected
        if expected is not None and n != expected:
            raise EpisodeError(e, read, f"{unit.camera}: the data file holds {n} pictures for episode {e} but the "
                                        f"metadata says {expected}")
        spans.append(Span(e, start / unit.fps, (start + n) / unit.fps if shared else None, n))
        start += n
    missing = [e for e in episodes if e is not None and e not in rows]
    if missing:
        raise EpisodeError(missing[0], read, f"{unit.camera}: the data file holds no row of episode {missing[0]}")
    return spans, start, size


def _encode_pictures(unit: ReencodeUnit, src: StorePath, read: Source, result: ReencodeResult) -> None:
    """A camera stored as images: its pictures in the data parquet `src` (read from `read`) encoded as one video
    (v2.1: the episode's; v3.0: the data file's episodes, in file order), with every camera's encoding contract:
    the same resize, profile, checks, stats and resume."""
    spans, total, (sw, sh) = picture_spans(read, unit)
    result.src_bytes = src.stat("parquet file").size
    result.src_width, result.src_height = sw, sh
    result.src_codec = "images"
    w, h = unit.options.size
    # each picture is resized by its own size's geometry (the same filter chain as a video frame's) before the
    # encode, which then only converts the pixel format: pictures of several sizes make one uniform video
    geometry = RESIZE_MODES[unit.options.resize](w, h, w, h)
    key = {"settings": unit.options.output_settings(), "source": unit.pictures_from, "camera": unit.camera,
           "source_bytes": result.src_bytes,
           "spans": [[s.episode, s.from_timestamp, s.frames_expected] for s in spans]}
    key = json.loads(json.dumps(key))
    chosen = frozenset(s.episode for s in spans if s.episode is not None)
    pictures = Pictures(read, unit.camera, chosen, (unit.options.size, unit.options.resize))
    _encode_checked(unit, src, pictures, spans, total, geometry, (), key, result)


def _copy_depth(unit: ReencodeUnit, src: StorePath, read: Source, dst: Output, probe: VideoProbe,
                result: ReencodeResult) -> None:
    """A depth camera's file copied byte for byte (a lossy 8-bit 4:2:0 encode would squeeze thousands of
    depth levels into a few hundred): its spans, metadata and stats stay the source's. Kept on a rerun when
    the sidecar's source fingerprint matches."""
    spans = list(unit.spans)
    sidecar, key = stats_sidecar(unit), {**stats_key(unit, probe, spans), "copied": True}
    fingerprint: dict[str, Any] = {}

    def write(tmp: Path) -> None:
        fingerprint.update(source_fingerprint(src, content_of=read))
        with as_file(read).open(block_size=STREAM_BLOCK) as fin, open(tmp, "wb") as fout:  # through its store
            shutil.copyfileobj(fin, fout, STREAM_BLOCK)

    def saved(tmp: Path) -> None:
        save_stats(sidecar, {"key": key, "source_fingerprint": fingerprint, "stats": [{} for _ in spans],
                             "output": file_identity(tmp)}, output_folder(unit.out_root))

    if isinstance(dst, StorePath):
        dst.store.learn_folder(dst.rel, absent=True)
    status = keep_or_write(dst, output_folder(unit.out_root), write, lambda _path: None, saved=saved,
                           keep=lambda path: output_size(path) == probe.bytes and load_stats(
                               sidecar, key, src, unit.options.fingerprint, output=path) is not None)
    result.status = Status.KEPT if status == Status.KEPT else Status.COPIED
    result.copied = True
    result.episodes = [EpisodeVideo(s.episode if s.episode is not None else -1, s.from_timestamp, s.to_timestamp, {})
                       for s in spans]
    result.frames, result.out_bytes = probe.frames_from_packets, output_size(dst)
    result.output = output_counts(probe, spans)

