"""The reencode job: a dataset re-encoded to e.g. 224x224 all-intra, as a new dataset (`prep reencode`).

plan     dataset -> one `ReencodeUnit` per source video file (v3.0: with all its episodes), then one
         `DataUnit` per episode data parquet; lazily, in episode order
stage    `pipeline.stages.reencode.reencode_unit` (encode, check, rename; or keep a finished file) and
         `pipeline.stages.copy.copy_data` (copy the parquet, count its rows)
reduce   `ReencodeReduce`: counts, failures, the new cameras' settings, dataset image stats combined per
         episode, and per episode and camera what the checks measured of each output file (compact arrays)
publish  the other files copied, then (only when every file succeeded) the rewritten metadata with
         meta/info.json last; the output's manifest (+ per-episode table) from the results already in hand
         (no second scan, cluster or probe), comparison.json from the same bytes (one GB/hr everywhere),
         and reencode_report.json

Resumable per file: a rerun keeps every output file that passes its checks (and its saved image stats).
prep's files live in `<out>/prep/`: options.json, output.lock while running (any command's), stats/<file>.json,
reencode_report.json, manifest.json (+ .episodes.parquet) and comparison.json.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import __version__, atomic
from pipeline.dataset import Dataset
from pipeline.dataset.info import cameras_from_info, format_template, image_cameras_from_info
from pipeline.errors import PrepError
from pipeline.formats import format_of
from pipeline.formats.base import EpisodeVideo
from pipeline.formats.validate import open_validated
from pipeline.formats.write import (
    PREP_DIR,
    StatsAggregate,
    VideoFeatureUpdate,
    copy_unchanged,
    updated_info,
    write_output_info,
    write_output_metadata,
)
from pipeline.jobs.manifest import (
    ByteCounter,
    ScanTotals,
    build_manifest,
    episode_row,
    episodes_schema,
    publish_manifest,
)
from pipeline.jobs.output import OptionsFile, claim_output
from pipeline.jobs.preverify import SOURCE_CHECK_REL, SourceCheck, check_repairs, check_source
from pipeline.runner import Engine
from pipeline.schemas import validate
from pipeline.stages.copy import (
    DataCopied,
    DataUnit,
    KeepImages,
    copy_data,
    copy_failed,
    data_stats_sidecar,
    images_stats_sidecar,
)
from pipeline.stages.keep import FINGERPRINTS
from pipeline.stages.reencode import (
    ReencodeOptions,
    ReencodeResult,
    ReencodeUnit,
    reencode_failed,
    reencode_unit,
    reencode_units,
    stats_sidecar,
)
from pipeline.stages.scan import CameraScan, EpisodeScan, ImageScan
from pipeline.storage import Location, local_location, output_file, output_location, publish_tree, read_output_text
from pipeline.tables import RowGroupWriter
from pipeline.video.encode import ENGINES, PROFILES
from pipeline.video.quality import FRAMES_PER_SAMPLE, QUALITY_FRAMES
from pipeline.video.resize import RESIZE_MODES

OPTIONS_REL = f"{PREP_DIR}/options.json"
OPTIONS = OptionsFile(OPTIONS_REL, "reencode_options", "reencode")
REPORT_REL = f"{PREP_DIR}/reencode_report.json"
MANIFEST_REL = f"{PREP_DIR}/manifest.json"
COMPARISON_REL = f"{PREP_DIR}/comparison.json"
PROVENANCE_REL = f"{PREP_DIR}/provenance.json"
FAILURES_LISTED = 10_000
STATS_HELD = 8_192  # episode stats of the output files the reduce keeps for the metadata (~1-2 kB each)
ENCODE_COST_S = 0.3  # seconds per 90-frame file before any is measured
COPY_COST_S = 0.002


@dataclass(slots=True)
class ReencodeReport:
    src: str
    out: str
    options: dict[str, Any]
    engine: str
    files: int = 0
    encoded: int = 0
    kept: int = 0
    copied: int = 0  # depth cameras' files copied unchanged
    failed: int = 0
    frames: int = 0
    frames_encoded: int = 0
    seconds: float = 0.0
    complete: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    manifest: str | None = None
    depth_copied: list[str] = field(default_factory=list)  # cameras copied unchanged (depth maps)
    source_errors: int = 0  # errors verify found in the source (before any repair)
    source_warnings: int = 0
    repaired: dict[str, int] = field(default_factory=dict)  # repair -> episodes it rewrote (listed in prep/)
    repaired_checks: list[str] = field(default_factory=list)  # the source's failed checks the repairs cover
    accepted_invalid_source: bool = False  # errors remain in the output: never a drop-in dataset
    drop_in: bool = False  # complete, and made from a source with no unrepaired error
    quality_seconds: float = 0.0  # what this run's quality sample cost, in the stage (part of `seconds`' work)

    @property
    def ok(self) -> bool:
        return self.complete and not self.failures


# ---- refusals before anything is written ----------------------------------------------------------


def check_options(options: ReencodeOptions) -> None:
    if options.resize not in RESIZE_MODES:
        raise PrepError(f"unknown resize mode {options.resize!r} (choose from {', '.join(RESIZE_MODES)})")
    if options.profile not in PROFILES:
        raise PrepError(f"unknown profile {options.profile!r} (choose from {', '.join(PROFILES)})")
    if options.engine not in ENGINES:
        raise PrepError(f"unknown engine {options.engine!r} (choose from {', '.join(ENGINES)})")
    prof = PROFILES[options.profile]
    lo, hi = prof.crf_range
    if not lo <= options.quality <= hi:
        raise PrepError(f"--crf {options.quality} is outside {lo}..{hi} for profile {prof.name}")
    w, h = options.size
    if prof.pix_fmt.endswith("420p") and (w % 2 or h % 2):
        raise PrepError(f"--dst {w}x{h}: {prof.pix_fmt} needs an even width and height")
    if options.fingerprint not in FINGERPRINTS:
        raise PrepError(f"unknown fingerprint {options.fingerprint!r} (choose from {', '.join(FINGERPRINTS)})")
    if options.engine == "ffmpeg" and shutil.which("ffmpeg") is None:
        raise PrepError("--engine ffmpeg needs the `ffmpeg` program on PATH (e.g. apt install ffmpeg)")


# What the output holds when a phase fails to write (a full disk, a read-only mount): nothing half-written
# is ever under a final name, and meta/info.json (written last) is absent, so LeRobot will not load it.
PHASE_STATE = {
    "copy": "the finished videos are kept; parquet and metadata copies are incomplete; meta/info.json is "
            "not written",
    "metadata": "every video and parquet is written; the metadata and reports are incomplete; meta/info.json "
                "is not written",
    "info": "every video, parquet, metadata file and report is written; only meta/info.json (the file that "
            "says the dataset is complete) is not",
}


def _write_error(phase: str, error: str) -> str:
    """One line for a failed write: the error (path and cause), what is and is not there, and the fix."""
    return f"{error}; {PHASE_STATE[phase]}: free space (or fix the output) and rerun the same command to finish"


def _os_error(exc: OSError, out: Path) -> str:
    if exc.errno in atomic.WRITE_ERRNOS:
        where = exc.filename2 if exc.filename2 is not None else exc.filename
        return atomic.describe(where or out, exc)
    return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")


# ---- plan ----------------------------------------------------------------------------------------


def plan_videos(ds: Dataset, out: Path | str, options: ReencodeOptions) -> Iterator[ReencodeUnit]:
    # an object-store source was checked from its videos' container index: each stage confirms its file's
    return reencode_units(ds, out, options, confirm_index=indexed_check(ds.location))


def indexed_check(src: Location) -> bool:
    """Whether the source is checked from its videos' container index (`check_source(index=True)`): an object
    store's, whose demux before the encode would fetch every video once more (bench/object_store.py: the corpus
    read twice); a local file's demux costs what its index read does."""
    return not src.is_local


def as_output_cameras(ds: Dataset) -> Dataset:
    """The source as the output sees it: each camera stored as images becomes a video camera, one file per data
    file (v2.1: per episode, `videos/chunk-*/KEY/episode_*.mp4`; v3.0: `videos/KEY/chunk-*/file-*.mp4` of the
    data file's chunk and file index), named by the source's `video_path` (LeRobot's default where it has none)."""
    if not ds.image_cameras:
        return ds
    template = ds.info.get("video_path")
    template = template if isinstance(template, str) else format_of(ds).video_path
    fields = ds.layout.video_fields

    def video_rel(camera: str, ep: Any) -> str:
        values = {"episode_chunk": ep.data.chunk_index, "episode_index": ep.index, "video_key": camera,
                  "chunk_index": ep.data.chunk_index, "file_index": ep.data.file_index}
        return format_template(template, INFO_REL, fields, key="video_path",
                               **{k: v for k, v in values.items() if k in fields})

    return ds.with_image_cameras_as_videos(video_rel)


def pictures_cameras(ds: Dataset) -> tuple[str, ...]:
    """The cameras the output encodes from pictures (their columns leave the data files)."""
    return tuple(c.key for c in ds.cameras if c.from_images)


def stats_features(ds: Dataset) -> tuple[str, ...]:
    """The columns LeRobot 0.3.x keeps per-episode stats of: every feature but videos, images and strings."""
    feats = ds.info.get("features") or {}
    return tuple(k for k, v in feats.items() if isinstance(v, dict) and v.get("dtype") not in ("video", "image",
                                                                                               "string"))


def stats_file_of(ds: Dataset) -> bool:
    """Whether the format keeps per-episode stats in a file of their own (v2.1 episodes_stats.jsonl), which
    `--repair stats` writes anew."""
    return format_of(ds).episodes_stats_rel is not None


def plan_data(ds: Dataset, out: Path | str, options: ReencodeOptions | None = None) -> Iterator[DataUnit]:
    shared = ds.layout.shares_files
    repairs = options.repairs if options is not None else ()
    fps = ds.fps if "timestamps" in repairs else None
    feats = stats_features(ds) if "stats" in repairs and stats_file_of(ds) else ()
    drop = pictures_cameras(ds)
    keep = KeepImages(ds.image_camera_keys, options.size, options.resize) \
        if options is not None and options.keep_images and ds.image_cameras else None
    for rel, eps in ds.iter_data_files():
        yield DataUnit(ds.location, str(out), rel, tuple(e.index for e in eps), shared or len(eps) > 1, fps,
                       feats, drop, keep)


# ---- reduce --------------------------------------------------------------------------------------


class ReencodeReduce:
    """What the job keeps of the results: counts and the first failures, the cameras' new settings, the
    image stats combined per camera, and per episode position and camera the output's measured counts and
    new span (numpy arrays: ~60-100 bytes per episode, whatever the corpus)."""

    def __init__(self, ds: Dataset, report: ReencodeReport, options: ReencodeOptions) -> None:
        self.ds, self.report, self.options = ds, report, options
        n, k = len(ds.episodes), len(ds.cameras)
        self.cam_no = {c: i for i, c in enumerate(ds.camera_keys)}
        self.done = np.zeros((n, k), dtype=bool)
        self.header = np.zeros((n, k), dtype=np.int64)
        self.counts = np.zeros((n, k, 3), dtype=np.int64)  # frames, keyframes, bytes
        self.spans = np.full((n, k, 2), np.nan) if ds.layout.shares_files else None  # spans in shared files
        self.rows = np.full(n, -1, dtype=np.int64)  # rows in the episode's parquet (-1: unknown)
        self.parquet_bytes = np.zeros(n, dtype=np.int64)
        self.parquet_error: dict[int, tuple[str, str]] = {}  # position -> (path, reason): unreadable parquets
        self.cameras_seen: dict[str, tuple[ReencodeResult, Any]] = {}
        self.stats = StatsAggregate()
        self.bytes = ByteCounter(ds)
        self.write_errors: list[str] = []
        self.data_failures: list[dict[str, Any]] = []
        self.repaired_timestamps = array("q")  # episodes whose parquet timestamps were rewritten
        self.quality: dict[str, QualityTally] = {}  # camera -> its sampled frames' PSNR/SSIM, combined
        self.pictures = frozenset(pictures_cameras(ds))  # cameras encoded from pictures
        self.kept_pictures: dict[str, list[int]] = {}  # --keep-images: camera -> [pictures, stored bytes]
        self.index_disagrees: list[str] = []  # source videos whose demux found other than their index listed
        # output file -> {episode: its image stats}, as its sidecar holds them, for the first STATS_HELD episodes:
        # the metadata is written from these without reading the sidecars back (2 requests a file in an object
        # store); the rest are read back (`SidecarVideos`), so memory stays bounded whatever the corpus
        self.video_stats: dict[str, dict[int, dict[str, Any]]] = {}
        self._stats_held = 0

    def fail(self, entry: dict[str, Any]) -> None:
        if len(self.report.failures) < FAILURES_LISTED:
            self.report.failures.append(entry)

    def add_video(self, unit: ReencodeUnit, r: ReencodeResult) -> None:
        rep = self.report
        rep.files += 1
        rep.frames += r.frames
        if r.index_agrees is False and len(self.index_disagrees) < FAILURES_LISTED:
            self.index_disagrees.append(r.rel)
        if r.status == "failed":
            rep.failed += 1
            self.fail({"path": r.rel, "camera": r.camera, "reason": r.reason,
                       "episodes": sorted(s.episode for s in unit.spans if s.episode is not None)})
            return
        rep.encoded += r.status == "encoded"
        rep.kept += r.status == "kept"
        rep.copied += r.status == "copied"
        rep.frames_encoded += r.frames if r.status == "encoded" else 0
        self.cameras_seen.setdefault(r.camera, (r, r.output))
        if r.copied and r.camera not in rep.depth_copied:
            rep.depth_copied.append(r.camera)
        self.bytes.add(r.rel, r.out_bytes, camera=r.camera)
        rep.quality_seconds += r.quality_s
        if r.quality is not None:
            self.quality.setdefault(r.camera, QualityTally()).add(r.quality)
        elif not r.copied:
            self.quality.setdefault(r.camera, QualityTally()).unmeasured += 1
        if self._stats_held + len(r.episodes) <= STATS_HELD:  # as json.loads gives them from the sidecar
            self.video_stats[r.rel] = {ev.episode: json.loads(json.dumps(ev.stats)) for ev in r.episodes}
            self._stats_held += len(r.episodes)
        c = self.cam_no[r.camera]
        out = r.output
        for i, ev in enumerate(r.episodes):
            if not r.copied:
                self.stats.add(r.camera, ev.stats)
            pos = self.ds.episodes.position(ev.episode)
            if pos is None:
                continue
            self.done[pos, c] = True
            if out is not None:
                self.header[pos, c] = out.frames_from_header
                self.counts[pos, c] = out.spans[i]
            if self.spans is not None:
                self.spans[pos, c] = (ev.from_timestamp, np.nan if ev.to_timestamp is None else ev.to_timestamp)

    def add_data(self, d: DataCopied) -> None:
        if d.write_error is not None:
            self.write_errors.append(d.write_error)
            return
        if d.status == "failed":
            for e in d.episodes:
                if len(self.data_failures) < FAILURES_LISTED:
                    self.data_failures.append({"path": d.path, "episode": e, "reason": d.reason})
            return
        self.bytes.add(d.rel, d.bytes)
        self.repaired_timestamps.extend(d.repaired)
        for per_camera in d.image_stats.values():  # --keep-images: the resized pictures' stats
            for cam, st in per_camera.items():
                self.stats.add(cam, st)
        for cam, (n, stored) in d.pictures.items():
            tally = self.kept_pictures.setdefault(cam, [0, 0])
            tally[0] += n
            tally[1] += stored
        for e, rows in zip(d.episodes, d.rows, strict=True):
            pos = self.ds.episodes.position(e)
            if pos is None:
                continue
            if rows is None:
                self.parquet_error[pos] = (str(self.ds.root / d.rel), d.rows_error or "unreadable parquet")
                continue
            self.rows[pos] = rows
            self.parquet_bytes[pos] = round(d.bytes * rows / (d.total_rows or 1))

    def updates(self) -> dict[str, VideoFeatureUpdate]:
        prof = PROFILES[self.options.profile]
        encoder: dict[str, Any] = {"video.crf": self.options.quality}
        if prof.encoder == "libx264":
            encoder.update({"video.g": 1, "video.bf": 0, "video.preset": prof.preset})
        out: dict[str, VideoFeatureUpdate] = {}
        for cam in self.ds.camera_keys:
            if cam not in self.cameras_seen or self.cameras_seen[cam][0].copied:
                continue  # a depth camera copied unchanged keeps its metadata
            r = self.cameras_seen[cam][0]
            prep = {"resize": self.options.resize, "profile": self.options.profile, "crf": self.options.quality,
                    "source_width": r.src_width, "source_height": r.src_height, "source_codec": r.src_codec}
            out[cam] = VideoFeatureUpdate(self.options.size[0], self.options.size[1], prof.codec, prof.pix_fmt,
                                          prep, encoder)
            if cam in self.pictures:  # stored as images in the source: a video feature from now on
                template = self.ds.info.get("video_path")
                out[cam] = replace(out[cam], from_images=True, fps=self.ds.fps,
                                   files=len(self.ds.file_groups(cam)),
                                   video_path=template if isinstance(template, str)
                                   else format_of(self.ds).video_path)
        for cam in self.kept_pictures:  # --keep-images: still pictures, resized
            out[cam] = VideoFeatureUpdate(self.options.size[0], self.options.size[1], "png", "rgb24",
                                          {"resize": self.options.resize, "kept_images": True}, {}, kept_images=True)
        return out


@dataclass(slots=True)
class QualityTally:
    """A camera's quality sample, combined over its files: O(1) memory whatever the corpus."""

    files: int = 0
    unmeasured: int = 0  # encoded or kept files without a sample (an older sidecar, a file not readable frame by frame)
    frames: int = 0
    psnr_sum: float = 0.0
    psnr_min: float = float("inf")
    ssim_sum: float = 0.0
    ssim_min: float = float("inf")
    ssim_frames: int = 0

    def add(self, q: dict[str, Any]) -> None:
        self.files += 1
        for v in q.get("psnr_db", []):
            self.frames += 1
            self.psnr_sum += v
            self.psnr_min = min(self.psnr_min, v)
        for v in q.get("ssim", []):
            if v == v:  # not NaN (a frame smaller than the window)
                self.ssim_frames += 1
                self.ssim_sum += v
                self.ssim_min = min(self.ssim_min, v)

    def to_json(self) -> dict[str, Any]:
        return {"files_sampled": self.files, "files_unmeasured": self.unmeasured, "frames_sampled": self.frames,
                "psnr_db_mean": self.psnr_sum / self.frames if self.frames else None,
                "psnr_db_min": self.psnr_min if self.frames else None,
                "ssim_mean": self.ssim_sum / self.ssim_frames if self.ssim_frames else None,
                "ssim_min": self.ssim_min if self.ssim_frames else None}


QUALITY_METHOD = (f"per output file, one frame per started {FRAMES_PER_SAMPLE} frames (at most {QUALITY_FRAMES}), "
                  "evenly spread, decoded from the output and compared with the same source frames decoded, turned "
                  "and resized exactly as for the encode (the encoder's input): PSNR over RGB (100 = identical), "
                  "SSIM on BT.601 luma over 8x8 blocks; what the encode lost, the resize being in both")


class SidecarDataStats:
    """`--repair stats`: each episode's column stats, read back from the sidecar the copy stage saved beside
    each data parquet (`prep/stats/data/<rel>.json`), a few files cached."""

    def __init__(self, ds: Dataset, out: Path | str) -> None:
        self.ds, self.out = ds, out
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __call__(self, episode: int) -> dict[str, Any]:
        pos = self.ds.episodes.position(episode)
        if pos is None:
            return {}
        rel = self.ds.episodes[pos].data.rel
        if rel not in self._cache:
            self._cache[rel] = json.loads(read_output_text(data_stats_sidecar(self.out, rel)))
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        stats: dict[str, Any] = self._cache[rel].get(str(episode), {})
        return stats


class SidecarVideos:
    """`EpisodeVideos` of the output: each episode's new span (from the reduce) and image stats (those the reduce
    kept, `ReencodeReduce.video_stats`; the others read back from the stats sidecar saved beside each output file,
    a few files cached), so the stats held in memory are bounded whatever the corpus."""

    def __init__(self, reduce: ReencodeReduce, out: Path | str) -> None:
        self.reduce, self.out = reduce, out
        self._cache: OrderedDict[str, dict[int, dict[str, Any]]] = OrderedDict()

    def _stats(self, rel: str, camera: str) -> dict[int, dict[str, Any]]:
        held = self.reduce.video_stats.get(rel)
        if held is not None:
            return held
        if rel not in self._cache:
            unit = ReencodeUnit(self.reduce.ds.location, str(self.out), rel, camera, 0.0, (), self.reduce.options)
            doc = json.loads(read_output_text(stats_sidecar(unit)))
            self._cache[rel] = {int(s[0]): st for s, st in zip(doc["key"]["spans"], doc["stats"], strict=True)}
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        return self._cache[rel]

    def _image_stats(self, rel: str) -> dict[int, dict[str, Any]]:
        key = "images:" + rel
        if key not in self._cache:
            doc = json.loads(read_output_text(images_stats_sidecar(self.out, rel)))
            self._cache[key] = {int(e): st for e, st in doc.items()}
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        return self._cache[key]

    def get(self, episode: int, camera: str) -> EpisodeVideo | None:
        r = self.reduce
        pos = r.ds.episodes.position(episode)
        if camera in r.kept_pictures:  # --keep-images: the stats the data stage saved beside the data file
            if pos is None:
                return None
            stats = self._image_stats(r.ds.episodes[pos].data.rel).get(episode, {}).get(camera)
            return None if stats is None else EpisodeVideo(episode, 0.0, None, stats)
        c = r.cam_no.get(camera)
        if pos is None or c is None or not r.done[pos, c]:
            return None
        rel = r.ds.episodes[pos].video(camera).rel
        stats = self._stats(rel, camera).get(episode, {})
        if r.spans is None:
            return EpisodeVideo(episode, 0.0, None, stats)
        t0, t1 = r.spans[pos, c]
        return EpisodeVideo(episode, float(t0), None if np.isnan(t1) else float(t1), stats)


# ---- publish: the output's manifest and the comparison ---------------------------------------------


def provenance(ds: Dataset, reduce: ReencodeReduce, updates: dict[str, VideoFeatureUpdate]) -> dict[str, Any]:
    """What each camera of the output was made from and how (outside info.json, which LeRobot's merge
    compares feature by feature)."""
    return {"schema": "prep.provenance/1", "prep_version": __version__, "source": str(ds.root),
            "cameras": {cam: up.prep for cam, up in updates.items()}}


def output_manifest(ds: Dataset, out: Path, reduce: ReencodeReduce, info: dict[str, Any],
                    table: RowGroupWriter, where: Location | None = None) -> dict[str, Any]:
    """The output's manifest, as `prep scan` of the output would write it, from the job's own results."""
    cams = ds.camera_keys
    totals = ScanTotals(cams)
    cols = ds.episodes.columns
    for pos in range(len(ds.episodes)):
        s = EpisodeScan(episode=int(cols.index[pos]), frames_expected=int(cols.length[pos]))
        if pos in reduce.parquet_error:
            path, reason = reduce.parquet_error[pos]
            s.fail(reason, path)
        else:
            s.frames_in_parquet = int(reduce.rows[pos])
            s.parquet_bytes = int(reduce.parquet_bytes[pos])
        for c, cam in enumerate(cams):
            probe = reduce.cameras_seen[cam][1]
            frames, keys, nbytes = (int(v) for v in reduce.counts[pos, c])
            s.cameras[cam] = CameraScan(int(reduce.header[pos, c]), None, frames, keys, nbytes, probe.codec,
                                        probe.width, probe.height, probe.pix_fmt, probe.fps)  # written: demuxed
        totals.add(s)
        table.add(episode_row(s, cams))
    for cam, (n, stored) in reduce.kept_pictures.items():  # --keep-images: what the data stage wrote
        w, h = reduce.options.size
        totals.images[cam] = ImageScan(n, stored, "png", w, h, "rgb24")
    out_ds = Dataset(location=where or local_location(out), codebase_version=ds.codebase_version, fps=ds.fps, info=info,
                     cameras=cameras_from_info(info, out / "meta/info.json"), episodes=ds.episodes,
                     layout=ds.layout, file_keys=ds.file_keys,
                     image_cameras=image_cameras_from_info(info, out / "meta/info.json"))
    return build_manifest(out_ds, totals, [], reduce.bytes.result())


def comparison(native: Dataset, source_bytes: dict[str, int], prep_bytes: int, prepared: dict[str, Any],
               prepared_cameras: list[str], quality: dict[str, QualityTally] | None = None) -> dict[str, Any]:
    """Native vs prepared: the prepared side is the output manifest's own numbers (one GB/hr)."""
    frames = native.total_frames_expected
    hours = frames / native.fps / 3600
    total = sum(source_bytes.values())
    a = {"root": str(native.root), "bytes": total, "video_bytes": source_bytes["video"],
         "gb_per_hour": total / 1e9 / hours if hours else 0.0,
         "video_gb_per_hour": source_bytes["video"] / 1e9 / hours if hours else 0.0,
         "kb_per_frame": total / 1e3 / frames if frames else 0.0,
         "cameras": [f"{c.key}: {c.codec} {c.width}x{c.height}" for c in native.cameras],
         "excluded_prep_folder_bytes": prep_bytes}
    t = prepared["totals"]
    b = {"root": prepared["dataset"]["root"], "bytes": t["bytes"]["total"], "video_bytes": t["bytes"]["video"],
         "gb_per_hour": t["gb_per_hour"], "video_gb_per_hour": t["bytes"]["video"] / 1e9 / t["hours"] if t["hours"]
         else 0.0, "kb_per_frame": t["kb_per_frame"], "cameras": prepared_cameras, "excluded_prep_folder_bytes": 0}
    sampled = {cam: q.to_json() for cam, q in sorted((quality or {}).items())}
    return {"schema": "prep.comparison/1", "prep_version": __version__, "frames": frames, "hours": hours,
            "native": a, "prepared": b,
            **({"quality": {"method": QUALITY_METHOD, "cameras": sampled}} if sampled else {}),
            "ratio": a["bytes"] / b["bytes"] if b["bytes"] else None,
            "video_ratio": a["video_bytes"] / b["video_bytes"] if a["video_bytes"] and b["video_bytes"] else None,
            "note": "GB = 1e9 bytes; native: every file under the source except a prep/ folder; prepared: the "
                    "output's manifest (every file reencode wrote or copied, prep/ excluded); hours = frames "
                    "in the metadata / fps; video bytes are video files' (a camera stored as images is data bytes "
                    "in the source, video bytes in the output)"}


# ---- the job -------------------------------------------------------------------------------------


def reencode_dataset(src: Path | Location, out: Path | Location, options: ReencodeOptions, engine: Engine, *,
                     accept_invalid_source: bool = False, reader: str = "all") -> ReencodeReport:
    """Re-encode `src` into the dataset `out` through `engine`; resumable; never writes under `src`.

    `src` and `out` are where they live: a local folder, or a `Location` (an object-store prefix; a source may
    also be a hub-cache snapshot). An object-store output is written file by file through its store (each
    video and parquet put whole after its checks, its sidecar first, so that a resume finds it), and the
    metadata is made in a local temp folder then put, meta/info.json last.

    The source is verified first (no decode): errors that `options.repairs` do not fix refuse it
    (`SourceRefused`, nothing written) unless `accept_invalid_source`; `reader` names the reader generations
    whose errors count (`prep verify --reader`; default all: the strictest of the format's line)."""
    src = src if isinstance(src, Location) and not src.is_local else Path(src.root if isinstance(src, Location)
                                                                                   else src).absolute()
    where = output_location(out if isinstance(out, Location) else Path(out).absolute())
    out_root: Path | str = Path(where.root) if where.is_local else where.url  # what each unit writes below
    check_options(options)
    # in or around the source, busy (any command's), not this command's, or holding a link: refused before the session
    claim = claim_output(where if not where.is_local else Path(where.root), "reencode", OPTIONS, sources=[src],
                         folders=None)
    ds, rejected = open_validated(src, "reencode", reader)  # metadata checked before any unit
    if not options.keep_images:  # cameras stored as images: encoded into videos like every other camera
        ds = as_output_cameras(ds)
    check_repairs(options.repairs, ds.codebase_version)
    files = sum(len(ds.file_groups(cam)) for cam in ds.camera_keys)
    engine.prepare(files)  # scheduler reached, cluster started unless the encode is small: before anything is written
    # verify without decode (an object store's videos from their index; `plan_videos`)
    source = check_source(src, engine, options.repairs, accept_invalid_source, reader,
                          index=indexed_check(ds.location))
    if where.is_local:  # read-only, full or blocked outputs are refused before any work
        atomic.check_writable(Path(where.root) / PREP_DIR, root=Path(where.root))
    report = ReencodeReport(str(src) if isinstance(src, Path) else src.url, str(out_root), options.output_settings(),
                            options.engine, source_errors=source.errors_total,
                            source_warnings=source.warnings_total, accepted_invalid_source=source.accepted_invalid,
                            repaired_checks=list(source.repaired_checks))
    with claim.hold(options.output_settings(), source=src):
        reduce = ReencodeReduce(ds, report, options)
        t0 = time.perf_counter()
        for batch in engine.map(reencode_unit, plan_videos(ds, out_root, options), on_error=reencode_failed,
                                desc="reencode", unit_name="file", total=files,
                                cost_s=ENCODE_COST_S, measure=lambda r: {"frames": float(r.frames)}):
            for unit, result in zip(batch.units, batch.results, strict=True):
                reduce.add_video(unit, result)
        report.seconds = time.perf_counter() - t0
        if reduce.index_disagrees:  # a video's index said less than its demux: the source is checked by demuxing
            source = check_source(src, engine, options.repairs, accept_invalid_source, reader)  # may refuse it
            report.source_errors, report.source_warnings = source.errors_total, source.warnings_total
            report.accepted_invalid_source = source.accepted_invalid
            report.repaired_checks = list(source.repaired_checks)
        claim.remove_temps(src)  # temp files of workers killed mid-task (their task was retried)
        for d in engine.results(copy_data, plan_data(ds, out_root, options), on_error=copy_failed, desc="copy data",
                                unit_name="file", total=len(ds.file_groups("data")), cost_s=COPY_COST_S):
            reduce.add_data(d)
        claim.remove_temps(src)
        if reduce.write_errors:
            raise atomic.WriteError(_write_error("copy", reduce.write_errors[0]))
        try:
            copied = copy_unchanged(ds, out_root)
        except atomic.WriteError as exc:
            raise atomic.WriteError(_write_error("copy", str(exc)), exc.path, exc.errno) from None
        except OSError as exc:
            raise atomic.WriteError(_write_error("copy", _os_error(exc, Path(str(out_root))))) from None
        for kind, n in copied.output.items():
            reduce.bytes.kinds[kind] += n
        reduce.bytes.count += copied.output_files
        for e in rejected:
            reduce.fail({"path": e.path, "episode": e.episode, "reason": e.message})
        for entry in reduce.data_failures:  # after the metadata's, as before (missing parquet files)
            reduce.fail(entry)
        if where.is_local:
            _publish_all(ds, Path(where.root), reduce, report, copied, source, where)
        else:  # made in a local temp folder (metadata and reports: small), then put, meta/info.json last
            with tempfile.TemporaryDirectory(prefix="prep-publish-") as spool:
                _publish_all(ds, Path(spool), reduce, report, copied, source, where)
                publish_tree(Path(spool), where, last=INFO_REL)
    return report


INFO_REL = "meta/info.json"


def _publish_all(ds: Dataset, out: Path, reduce: ReencodeReduce, report: ReencodeReport, copied: Any,
                 source: SourceCheck, where: Location) -> None:
    """Every file the job writes after its map, into the local folder `out` (the output, or the temp folder an
    object-store output's metadata is made in): meta/info.json last, and only when every file succeeded."""
    sidecars: Path | str = out if where.is_local else where.url
    phase = "metadata"
    try:
        _publish_source_check(out, source, reduce, report)
        updates = _publish(ds, out, reduce, report, copied, sidecars, where) if not report.failures else None
        if updates is not None:
            report.drop_in = not source.accepted_invalid
        doc = {"schema": "prep.reencode_report/1", **asdict(report)}
        validate(doc, "reencode_report", source=str(output_file(sidecars, REPORT_REL)))
        atomic.write_json(out / REPORT_REL, doc, indent=2, root=out)
        if updates is not None:  # last: info.json present means every other file and report is there
            phase = "info"
            write_output_info(ds, out, updates)
    except atomic.WriteError as exc:
        raise atomic.WriteError(_write_error(phase, str(exc)), exc.path, exc.errno) from None
    except OSError as exc:
        raise atomic.WriteError(_write_error(phase, _os_error(exc, out))) from None


def _publish_source_check(out: Path, source: SourceCheck, reduce: ReencodeReduce, report: ReencodeReport) -> None:
    """<out>/prep/source_check.json: what verify found in the source, what was repaired (every episode),
    and whether the output may be called drop-in."""
    if reduce.repaired_timestamps:
        report.repaired["timestamps"] = len(reduce.repaired_timestamps)
    if "stats" in reduce.options.repairs and stats_file_of(reduce.ds):
        report.repaired["stats"] = len(reduce.ds.episodes)  # episodes_stats.jsonl written anew for every one
    repaired: dict[str, list[int]] = {"timestamps": sorted(set(reduce.repaired_timestamps))}
    if "stats" in report.repaired:
        repaired["stats"] = [int(e) for e in reduce.ds.episodes.episode_index]
    doc = {**source.to_json(), "repaired_episodes": repaired}
    atomic.write_json(out / SOURCE_CHECK_REL, doc, indent=1, root=out)


def _publish(ds: Dataset, out: Path, reduce: ReencodeReduce, report: ReencodeReport, copied: Any,
             sidecars: Path | str, where: Location) -> dict[str, VideoFeatureUpdate]:
    """The output's metadata (all but meta/info.json), its manifest and the comparison; returns the camera
    updates of info.json, which the job writes last (after reencode_report.json)."""
    updates = reduce.updates()
    data_stats = SidecarDataStats(ds, sidecars) if "stats" in reduce.options.repairs and stats_file_of(ds) else None
    written = write_output_metadata(ds, out, SidecarVideos(reduce, sidecars), reduce.stats.result(), updates,
                                    data_stats, with_info=False)
    for path in written:
        reduce.bytes.add(path.relative_to(out).as_posix(), path.stat().st_size)
    info = updated_info(ds.info, updates)
    info_bytes = len((json.dumps(info, indent=4, ensure_ascii=False) + "\n").encode("utf-8"))
    reduce.bytes.add("meta/info.json", info_bytes)  # counted now, written last (atomic.write_json's bytes)
    atomic.write_json(out / PROVENANCE_REL, provenance(ds, reduce, updates), indent=2, root=out)
    report.complete = True
    table = RowGroupWriter(out / PREP_DIR / "manifest.episodes.parquet.tmp", episodes_schema(ds.camera_keys),
                           root=out)
    try:
        manifest = output_manifest(ds, out, reduce, info, table, where)
        table.close()
    except BaseException:
        table.abort()
        raise
    publish_manifest(manifest, table.path, out / MANIFEST_REL, root=out)
    report.manifest = str(output_file(sidecars, MANIFEST_REL))
    prepared_cams = [f"{c.key}: {c.codec} {c.width}x{c.height}" for c in cameras_from_info(info, out)]
    report.comparison = comparison(ds, copied.source, copied.prep_folder, manifest, prepared_cams, reduce.quality)
    validate(report.comparison, "comparison", source=str(out / COMPARISON_REL))
    atomic.write_json(out / COMPARISON_REL, report.comparison, indent=2, root=out)
    return updates
