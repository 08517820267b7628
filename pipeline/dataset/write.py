"""The output dataset's metadata after a re-encode.

- every file of the source that is neither a re-encoded video nor rewritten metadata (data parquet,
  tasks, episodes.jsonl, README, ...) is copied byte for byte;
- `meta/info.json`: each video feature's shape (in the source's own axis order), `video.height`,
  `video.width`, `video.codec`, `video.pix_fmt`, encoder keys where the source has them
  (`video.g`, `video.crf`, `video.preset`, `video.bf`), and what prep did as `prep.*` keys inside
  the feature's `info` (LeRobot ignores unknown keys there);
- image stats of the re-encoded cameras recomputed from the output files with LeRobot's sampling
  (v2.1 `meta/episodes_stats.jsonl`, v3.0 `stats/<camera>/*` columns of `meta/episodes/*.parquet`,
  `meta/stats.json` of either version when present): min, max, mean, std, count; quantile keys of
  those cameras (LeRobot 0.4's q01..q99), if any, are removed; every other feature's stats are kept;
- v3.0 `videos/<camera>/from_timestamp|to_timestamp` set to the episode's frames in the new file.

Everything is written atomically, `meta/info.json` last: an output without it is not a dataset yet.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import atomic
from pipeline.bounded import loads_json
from pipeline.dataset.model import Dataset, resolve_inside
from pipeline.dataset.v30 import episode_meta_files
from pipeline.errors import EpisodeError

PREP_DIR = "prep"  # prep's own files inside an output (lock, options, manifests, report)
REWRITTEN_V21 = ("meta/info.json", "meta/episodes_stats.jsonl", "meta/stats.json")
REWRITTEN_V30 = ("meta/info.json", "meta/stats.json")
STAT_NAMES = ("min", "max", "mean", "std", "count")


@dataclass(slots=True)
class EpisodeVideo:
    """One episode's span in a re-encoded file and the image stats of its new frames."""

    episode: int
    from_timestamp: float
    to_timestamp: float | None
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class VideoFeatureUpdate:
    """What the new files of one camera are."""

    width: int
    height: int
    codec: str
    pix_fmt: str
    prep: dict[str, Any]
    encoder: dict[str, Any]


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


def copy_unchanged(ds: Dataset, out: Path) -> CopyTotals:
    """One walk of the source: copy (byte for byte, atomically) every file that is neither a video we
    re-encode, an episode data parquet (the data-copy stage copies those), nor rewritten metadata, unless the
    output already holds the same bytes; and add up the source's bytes on the way.

    Streaming: nothing per dataset file is kept, but the files outside videos/, data/ and meta/ (normally a
    README or LICENSE) wait until the walk ends, in case they are the targets of symlinked videos (a
    blobs/ store), which stay behind.
    """
    from pipeline.dataset.files import FileIndex

    index = FileIndex(ds)
    rewritten = set(REWRITTEN_V21 if ds.codebase_version == "v2.1" else REWRITTEN_V30)
    totals = CopyTotals()
    video_targets: set[str] = set()  # realpaths of symlinked videos we re-encode
    deferred: list[str] = []
    for dirpath, _dirs, names in os.walk(ds.root):
        rel_dir = Path(dirpath).relative_to(ds.root)
        for name in names:
            full = Path(dirpath) / name
            rel = full.relative_to(ds.root).as_posix()
            top = rel.split("/", 1)[0]
            is_link = full.is_symlink()
            if not is_link and full.is_file():
                size = full.lstat().st_size
                if top == PREP_DIR and rel_dir != Path("."):
                    totals.prep_folder += size
                else:
                    totals.source[_KINDS.get(top, "other")] += size
                    totals.source_files += 1
            if (top == PREP_DIR and rel_dir != Path(".")) or not full.is_file():  # any name: no file is ours
                continue
            kind = index.kind(rel)
            if kind is not None:
                if kind[0] == "video" and is_link:
                    video_targets.add(os.path.realpath(full))
                continue
            if rel in rewritten or (ds.codebase_version == "v3.0" and rel.startswith("meta/episodes/")
                                    and rel.endswith(".parquet")):
                continue
            if is_link:
                try:  # a link inside the dataset is copied as its target's bytes; one leaving it is not followed
                    resolve_inside(ds.root, rel)
                except EpisodeError:
                    continue
            if top in ("videos", "data", "meta"):
                _copy_one(ds.root, out, rel, totals)
            else:
                deferred.append(rel)
    for rel in deferred:
        if (ds.root / rel).is_symlink() or os.path.realpath(ds.root / rel) not in video_targets:
            _copy_one(ds.root, out, rel, totals)
    return totals


_KINDS = {"videos": "video", "data": "data", "meta": "meta"}


def _copy_one(root: Path, out: Path, rel: str, totals: CopyTotals) -> None:
    src, dst = root / rel, out / rel
    size = src.stat().st_size
    if not (dst.is_file() and dst.stat().st_size == size and filecmp.cmp(src, dst, shallow=False)):
        with atomic.atomic_path(dst, out) as tmp:
            shutil.copyfile(src, tmp)
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


class EpisodeVideos(Protocol):
    """The new span and image stats of one episode's re-encoded video of one camera (None: not re-encoded)."""

    def get(self, episode: int, camera: str) -> EpisodeVideo | None: ...


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


DataStats = Callable[[int], dict[str, Any]]  # episode -> {column: stats} (`--repair stats`)


def _write_v21_stats_anew(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                          data_stats: DataStats) -> None:
    """meta/episodes_stats.jsonl written from scratch (`--repair stats`), one line per episode in order:
    each numeric column's stats from the parquet rows, each re-encoded camera's from its new frames."""
    with atomic.atomic_path(out / "meta/episodes_stats.jsonl", out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for e in ds.episodes.episode_index:
            ep = int(e)
            stats = dict(data_stats(ep))
            for cam in cameras:
                ev = videos.get(ep, cam)
                if ev is not None:
                    stats[cam] = ev.stats
            fh.write(json.dumps({"episode_index": ep, "stats": stats}, ensure_ascii=False) + "\n")


def _write_v21_stats(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str],
                     data_stats: DataStats | None = None) -> None:
    """meta/episodes_stats.jsonl line by line (streaming), each re-encoded camera's stats replaced."""
    from pipeline.dataset.v21 import iter_lines

    if data_stats is not None:
        _write_v21_stats_anew(ds, out, videos, cameras, data_stats)
        return
    path = ds.root / "meta/episodes_stats.jsonl"
    if not path.is_file():
        return
    with atomic.atomic_path(out / "meta/episodes_stats.jsonl", out) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for _lineno, line in iter_lines(path):
            if not line.strip():
                continue
            row = loads_json(line)
            ep = row.get("episode_index")
            new: dict[str, Any] = {}
            if isinstance(ep, int) and not isinstance(ep, bool):
                for cam in cameras:
                    ev = videos.get(ep, cam)
                    if ev is not None:
                        new[cam] = ev.stats
            if isinstance(row.get("stats"), dict):
                row["stats"] = {k: new.get(k, v) for k, v in row["stats"].items()} | {
                    k: v for k, v in new.items() if k not in row["stats"]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _shaped(value: list[Any], typ: pa.DataType) -> Any:
    """`value` (nested (3,1,1) lists or a flat list) reshaped to the nesting depth of `typ`."""
    depth = 0
    t = typ
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        depth += 1
        t = t.value_type
    arr = np.asarray(value)
    if depth == 0:
        return arr.ravel()[0].item()
    if depth == 1:
        return arr.ravel().tolist()
    return arr.tolist()


def _write_v30_episodes(ds: Dataset, out: Path, videos: EpisodeVideos, cameras: list[str]) -> None:
    """Each meta/episodes parquet (one file at a time): new spans and stats of the re-encoded cameras."""
    for path in episode_meta_files(ds.root):
        table = pq.read_table(path)
        index = table["episode_index"].to_pylist()
        for cam in cameras:
            by_ep = {e: ev for e in index if isinstance(e, int) and (ev := videos.get(e, cam)) is not None}
            for col, attr in ((f"videos/{cam}/from_timestamp", "from_timestamp"),
                              (f"videos/{cam}/to_timestamp", "to_timestamp")):
                if col in table.column_names:
                    old = table[col].to_pylist()
                    new = [getattr(by_ep[e], attr) if e in by_ep else o for e, o in zip(index, old, strict=True)]
                    table = table.set_column(table.column_names.index(col), table.schema.field(col),
                                             pa.array(new, type=table.schema.field(col).type))
            stale = [c for c in table.column_names
                     if c.startswith(f"stats/{cam}/") and c.rsplit("/", 1)[1] not in STAT_NAMES]
            table = table.drop_columns(stale)  # quantiles cannot be recomputed from sums: dropped, not kept stale
            for name in STAT_NAMES:
                col = f"stats/{cam}/{name}"
                if col not in table.column_names:
                    continue
                typ = table.schema.field(col).type
                old = table[col].to_pylist()
                new = [_shaped(by_ep[e].stats[name], typ) if e in by_ep else o for e, o in zip(index, old, strict=True)]
                table = table.set_column(table.column_names.index(col), table.schema.field(col),
                                         pa.array(new, type=typ))
        dst = out / path.relative_to(ds.root)
        with atomic.atomic_path(dst, out) as tmp:
            pq.write_table(table, tmp)


def _write_stats_json(ds: Dataset, out: Path, agg: dict[str, dict[str, Any]], cameras: list[str]) -> None:
    path = ds.root / "meta/stats.json"
    if not path.is_file():
        return
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):  # a v2.1 stats.json no reader opens: carried as it is
        with atomic.atomic_path(out / "meta/stats.json", out) as tmp:
            shutil.copyfile(path, tmp)
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
    written = []
    if ds.codebase_version == "v2.1":
        _write_v21_stats(ds, out, videos, cameras, data_stats)
        written.append(out / "meta/episodes_stats.jsonl")
    else:
        _write_v30_episodes(ds, out, videos, cameras)
        written += [out / p.relative_to(ds.root) for p in episode_meta_files(ds.root)]
    _write_stats_json(ds, out, aggregate, cameras)
    written.append(out / "meta/stats.json")
    if with_info:
        written.append(write_output_info(ds, out, updates))
    return [p for p in written if p.is_file()]


def write_output_info(ds: Dataset, out: Path, updates: dict[str, VideoFeatureUpdate]) -> Path:
    """meta/info.json of the output: the file that says the dataset is complete (written last)."""
    atomic.write_json(out / "meta/info.json", updated_info(ds.info, updates), root=out)
    return out / "meta/info.json"
