"""The output dataset's metadata after a re-encode.

- every file of the source that is neither a re-encoded video nor rewritten metadata (data parquet,
  tasks, episodes.jsonl, README, ...) is copied byte for byte;
- `meta/info.json`: each video feature's shape (in the source's own axis order), `video.height`,
  `video.width`, `video.codec`, `video.pix_fmt`, encoder keys where the source has them
  (`video.g`, `video.crf`, `video.preset`, `video.bf`), and what prep did as `prep.*` keys inside
  the feature's `info` (LeRobot ignores unknown keys there);
- image stats of the re-encoded cameras recomputed from the output files with LeRobot's sampling
  (the episode metadata by the format's own writer, `Format.write_reencoded_episodes`: v2.1
  `meta/episodes_stats.jsonl`, v3.0 `stats/<camera>/*` columns of `meta/episodes/*.parquet`;
  `meta/stats.json` of either version when present): min, max, mean, std, count; quantile keys of
  those cameras (LeRobot 0.4's q01..q99), if any, are removed; every other feature's stats are kept;
- v3.0 `videos/<camera>/from_timestamp|to_timestamp` set to the episode's frames in the new file.

Everything is written atomically, `meta/info.json` last: an output without it is not a dataset yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import atomic
from pipeline.dataset.model import Dataset
from pipeline.formats import format_of
from pipeline.formats.base import STAT_NAMES, DataStats, EpisodeVideos
from pipeline.storage import Entry, Store, StorePath, output_file, output_location, output_size, same_bytes

PREP_DIR = "prep"  # prep's own files inside an output (lock, options, manifests, report)


@dataclass(slots=True, frozen=True)
class VideoFeatureUpdate:
    """What the new files of one camera are."""

    width: int
    height: int
    codec: str
    pix_fmt: str
    prep: dict[str, Any]
    encoder: dict[str, Any]
    # a camera stored as images in the source, encoded into video files: its feature becomes a video feature
    # (`dtype: "video"` and the `info` block LeRobot's writer gives one), `video_path` is set where the source
    # had none (LeRobot's writer leaves it null without videos) and `total_videos` (v2.1) counts its `files`
    from_images: bool = False
    kept_images: bool = False  # `--keep-images`: still pictures in the data parquet, only resized (the shape)
    fps: float | None = None
    files: int = 0
    video_path: str | None = None


# ---- copying what does not change ----------------------------------------------------------------


@dataclass(slots=True)
class CopyTotals:
    """What the walk of the source saw: every file's bytes (the source's size, prep/ left out), and the
    files copied or found already in place (their bytes are the output's meta and other bytes)."""

    source: dict[str, int] = field(default_factory=lambda: {"video": 0, "data": 0, "meta": 0, "other": 0})
    source_files: int = 0
    prep_folder: int = 0
    output: dict[str, int] = field(default_factory=lambda: {"video": 0, "data": 0, "meta": 0, "other": 0})
    output_files: int = 0  # files copied or already in place
    copied: int = 0


def copy_unchanged(ds: Dataset, out: Path | str) -> CopyTotals:
    """One walk of the source (through its store): copy (byte for byte, atomically) every file that is neither a
    video we re-encode, an episode data parquet (the data-copy stage copies those), nor rewritten metadata, unless
    the output already holds the same bytes; and add up the source's bytes on the way.

    Streaming: nothing per dataset file is kept, but the files outside videos/, data/ and meta/ (normally a
    README or LICENSE) wait until the walk ends, in case they are the targets of symlinked videos (a
    blobs/ store), which stay behind. A hub snapshot's links into its blobs are its files (copied and counted).
    """
    from pipeline.dataset.files import FileIndex

    index = FileIndex(ds)
    fmt = format_of(ds)
    totals = CopyTotals()
    store = ds.root.store
    video_targets: set[str] = set()  # realpaths of symlinked videos we re-encode
    deferred: list[Entry] = []
    for entry in store.iter_entries():
        rel = entry.rel
        top = rel.split("/", 1)[0]
        in_prep = top == PREP_DIR and "/" in rel  # prep's folder (a file named prep at the top is the data's)
        if not entry.link and entry.stat is not None:
            if in_prep:
                totals.prep_folder += entry.stat.size
            else:
                totals.source[_KINDS.get(top, "other")] += entry.stat.size
                totals.source_files += 1
        if in_prep or entry.stat is None:  # any name: no file is ours
            continue
        kind = index.kind(rel)
        if kind is not None:
            if kind[0] == "video" and entry.link and entry.real is not None:
                video_targets.add(entry.real)
            continue
        if fmt.is_rewritten(rel):
            continue
        if entry.link and not entry.inside:  # a link inside the dataset is copied as its target's bytes; one
            continue  # leaving it is not followed
        if top in ("videos", "data", "meta"):
            _copy_one(store, out, rel, entry.stat.size, totals)
        else:
            deferred.append(entry)
    for entry in deferred:
        if entry.link or entry.real not in video_targets:
            assert entry.stat is not None
            _copy_one(store, out, entry.rel, entry.stat.size, totals)
    return totals


_KINDS = {"videos": "video", "data": "data", "meta": "meta"}


def _copy_one(store: Store, out: Path | str, rel: str, size: int, totals: CopyTotals) -> None:
    dst = output_file(out, rel)
    if not (dst.is_file() and output_size(dst) == size and same_bytes(StorePath(store.location, rel), dst)):
        # atomic: a local temp beside the target, renamed; an object PUT whole (server-side copy in one store)
        output_location(out).store().copy_in(store, rel, rel)
        totals.copied += 1
    totals.output[_KINDS.get(rel.split("/", 1)[0], "other")] += size
    totals.output_files += 1


# ---- info.json -----------------------------------------------------------------------------------


def updated_shape(shape: list[int], names: Any, width: int, height: int) -> list[int]:
    """The feature shape with the new size, in the source's own axis order (names, else HWC/CHW)."""
    new = list(shape)
    flat = [str(n).lower() for n in names] if isinstance(names, list) and len(names) == len(shape) else []
    if flat and "height" in flat and "width" in flat:
        new[flat.index("height")], new[flat.index("width")] = height, width
    elif len(shape) == 3 and shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4):
        new[1], new[2] = height, width  # channels first
    elif len(shape) == 3:
        new[0], new[1] = height, width
    return new


ENCODER_KEYS = ("video.g", "video.crf", "video.preset", "video.bf", "video.profile")


def updated_info(info: dict[str, Any], updates: dict[str, VideoFeatureUpdate]) -> dict[str, Any]:
    out = json.loads(json.dumps(info))
    for key, up in updates.items():
        feat = out["features"][key]
        if up.kept_images:  # still pictures: only their size changes
            feat["shape"] = updated_shape(feat["shape"], feat.get("names"), up.width, up.height)
            continue
        if up.from_images:  # as LeRobot's writer declares a video feature
            feat["dtype"] = "video"
            rest = [n for n in updated_shape(feat["shape"], feat.get("names"), 0, 0) if n]  # the channels
            feat["info"] = {"video.height": up.height, "video.width": up.width, "video.codec": up.codec,
                            "video.pix_fmt": up.pix_fmt, "video.is_depth_map": False,
                            "video.fps": up.fps if up.fps is None or up.fps != int(up.fps) else int(up.fps),
                            "video.channels": rest[0] if len(rest) == 1 else 3, "has_audio": False,
                            **{k: up.encoder[k] for k in ENCODER_KEYS if k in up.encoder}}
            if out.get("video_path") is None and up.video_path is not None:
                out["video_path"] = up.video_path
            if isinstance(out.get("total_videos"), int):
                out["total_videos"] += up.files
        feat["shape"] = updated_shape(feat["shape"], feat.get("names"), up.width, up.height)
        info_key = "info" if isinstance(feat.get("info"), dict) or "video_info" not in feat else "video_info"
        vinfo = feat.setdefault(info_key, {})
        vinfo.update({"video.height": up.height, "video.width": up.width, "video.codec": up.codec,
                      "video.pix_fmt": up.pix_fmt})
        for k in ENCODER_KEYS:
            if k in vinfo and k in up.encoder:
                vinfo[k] = up.encoder[k]
        # Provenance (`up.prep`) is not written here: keys that differ between two outputs (the source's
        # codec) would make LeRobot's merge refuse them ("Same features is expected"); it goes to
        # <out>/prep/provenance.json instead.
    return out


# ---- stats ---------------------------------------------------------------------------------------


class StatsAggregate:
    """Dataset image stats of each camera, combined one episode at a time (count-weighted mean, pooled
    variance by Chan's parallel formula, min, max), as `pipeline.dataset.stats.aggregate` does over all."""

    def __init__(self) -> None:
        self._acc: dict[str, list[Any]] = {}

    def add(self, camera: str, stats: dict[str, Any]) -> None:
        n_b = float(stats["count"][0])
        if n_b <= 0:
            return
        mean_b = np.asarray(stats["mean"], dtype=np.float64)
        m2_b = np.asarray(stats["std"], dtype=np.float64) ** 2 * n_b
        lo, hi = np.asarray(stats["min"], dtype=np.float64), np.asarray(stats["max"], dtype=np.float64)
        acc = self._acc.get(camera)
        if acc is None:
            self._acc[camera] = [n_b, mean_b, m2_b, lo, hi]
            return
        n_a, mean_a, m2_a, lo_a, hi_a = acc
        n = n_a + n_b
        delta = mean_b - mean_a
        acc[:] = [n, mean_a + delta * (n_b / n), m2_a + m2_b + delta * delta * (n_a * n_b / n),
                  np.minimum(lo_a, lo), np.maximum(hi_a, hi)]

    def result(self) -> dict[str, dict[str, Any]]:
        return {cam: {"min": lo.tolist(), "max": hi.tolist(), "mean": mean.tolist(),
                      "std": np.sqrt(np.maximum(m2 / n, 0.0)).tolist(), "count": [int(n)]}
                for cam, (n, mean, m2, lo, hi) in sorted(self._acc.items())}


def _write_stats_json(ds: Dataset, out: Path, agg: dict[str, dict[str, Any]], cameras: list[str]) -> None:
    path = ds.root / "meta/stats.json"
    if not path.is_file():
        return
    data = path.read_bytes()
    try:
        stats = json.loads(data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"))
    except (ValueError, RecursionError):  # a v2.1 stats.json no reader opens: carried as it is
        atomic.write_bytes(out / "meta/stats.json", data, root=out)
        return
    for cam in cameras:
        if cam in agg and isinstance(stats, dict):
            old = stats.get(cam, {})
            stats[cam] = {**old, **{k: agg[cam][k] for k in STAT_NAMES}}
            # Quantiles LeRobot 0.4 may add cannot be recomputed from sums: drop them rather than lie.
            for k in [k for k in stats[cam] if k not in STAT_NAMES]:
                del stats[cam][k]
    atomic.write_json(out / "meta/stats.json", stats, root=out)


def write_output_metadata(
    ds: Dataset,
    out: Path,
    videos: EpisodeVideos,
    aggregate: dict[str, dict[str, Any]],
    updates: dict[str, VideoFeatureUpdate],
    data_stats: DataStats | None = None,
    *,
    with_info: bool = True,
) -> list[Path]:
    """Write the output's metadata from each episode's new videos (`videos`) and the dataset stats of the
    re-encoded cameras (`aggregate`); info.json last (`with_info=False`: not at all, the caller writes it
    with `write_output_info` once everything else is written). Returns the files written."""
    cameras = list(updates)
    written = format_of(ds).write_reencoded_episodes(ds, out, videos, cameras, data_stats)  # the format's writer
    _write_stats_json(ds, out, aggregate, cameras)
    written.append(out / "meta/stats.json")
    if with_info:
        written.append(write_output_info(ds, out, updates))
    return [p for p in written if p.is_file()]


def write_output_info(ds: Dataset, out: Path, updates: dict[str, VideoFeatureUpdate]) -> Path:
    """meta/info.json of the output: the file that says the dataset is complete (written last)."""
    atomic.write_json(out / "meta/info.json", updated_info(ds.info, updates), root=out)
    return out / "meta/info.json"
