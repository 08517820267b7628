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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from av.video.reformatter import VideoReformatter

from pipeline import atomic
from pipeline.dataset.model import Dataset, resolve_inside
from pipeline.dataset.stats import aggregate
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


# ---- image stats of a re-encoded file (LeRobot's sampling) -------------------------------------


def estimate_num_samples(n: int, lo: int = 100, hi: int = 10_000, power: float = 0.75) -> int:
    """LeRobot's `estimate_num_samples` (compute_stats.py)."""
    lo = min(lo, n)
    return max(lo, min(int(n**power), hi))


def sample_indices(n: int) -> list[int]:
    """LeRobot's `sample_indices`: evenly spaced frame indices of an episode."""
    return [int(i) for i in np.round(np.linspace(0, n - 1, estimate_num_samples(n))).astype(int)]


class SpanImageStats:
    """Image stats per episode span of a file, fed frame by frame: per-channel min/max/mean/std in
    [0, 1] shaped (3, 1, 1) and count = frames sampled, as LeRobot stores them. Exact integer
    histograms, so the numbers are identical however often (and by whichever engine) they are made."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self.wanted: dict[int, int] = {}
        for k, (start, n) in enumerate(spans):
            for i in sample_indices(n):
                self.wanted[start + i] = k
        self.hist = np.zeros((len(spans), 3, 256), dtype=np.int64)
        self.frames = np.zeros(len(spans), dtype=np.int64)
        self.rgb = VideoReformatter()  # one scaler for all frames (frame.to_ndarray(format=...) builds one per call)

    def add(self, index: int, frame: av.VideoFrame) -> None:
        k = self.wanted.get(index)
        if k is None:
            return
        flat = self.rgb.reformat(frame, format="rgb24").to_ndarray().reshape(-1, 3)
        for c in range(3):
            self.hist[k, c] += np.bincount(flat[:, c], minlength=256)
        self.frames[k] += 1

    def result(self) -> list[dict[str, Any]]:
        levels = np.arange(256, dtype=np.int64)
        out = []
        for k in range(len(self.spans)):
            h = self.hist[k]
            n = np.maximum(h.sum(axis=1), 1)
            s1, s2 = h @ levels, h @ (levels * levels)
            mean = s1 / n
            var = np.maximum(s2 / n - mean * mean, 0.0)
            present = h > 0
            lo = np.array([levels[p].min() if p.any() else 0 for p in present])
            hi = np.array([levels[p].max() if p.any() else 0 for p in present])

            def c11(v: np.ndarray) -> list[Any]:
                return [[[float(x)]] for x in v]

            out.append({"min": c11(lo / 255.0), "max": c11(hi / 255.0), "mean": c11(mean / 255.0),
                        "std": c11(np.sqrt(var) / 255.0), "count": [int(self.frames[k])]})
        return out


# ---- copying what does not change ----------------------------------------------------------------


def files_to_copy(ds: Dataset) -> list[str]:
    """Relative paths of the source files copied unchanged: all but videos we re-encode and rewritten meta."""
    videos = [rel for rel, _eps in ds.iter_video_files()]
    skip = set(videos)
    rewritten = REWRITTEN_V21 if ds.codebase_version == "v2.1" else REWRITTEN_V30
    skip.update(rewritten)
    if ds.codebase_version == "v3.0":
        skip.update(p.relative_to(ds.root).as_posix() for p in episode_meta_files(ds.root))
    # Files that are only the targets of symlinked videos we re-encode (e.g. a blobs/ store) stay behind.
    video_targets = {os.path.realpath(ds.root / rel) for rel in videos}
    out: list[str] = []
    for dirpath, dirs, names in os.walk(ds.root):
        rel_dir = Path(dirpath).relative_to(ds.root)
        if rel_dir == Path("."):
            dirs[:] = [d for d in dirs if d != PREP_DIR]
        for name in names:
            full = Path(dirpath) / name
            rel = full.relative_to(ds.root).as_posix()
            if rel in skip or atomic.TEMP_MARK in name or not full.is_file():
                continue
            if full.is_symlink():
                try:  # a link inside the dataset is copied as its target's bytes; one leaving it is not followed
                    resolve_inside(ds.root, rel)
                except EpisodeError:
                    continue
            elif os.path.realpath(full) in video_targets:
                continue
            out.append(rel)
    return sorted(out)


def copy_unchanged(ds: Dataset, out: Path) -> int:
    """Copy (byte for byte, atomically) what is not there yet or differs; returns files copied."""
    copied = 0
    for rel in files_to_copy(ds):
        src, dst = ds.root / rel, out / rel
        if dst.is_file() and dst.stat().st_size == src.stat().st_size and filecmp.cmp(src, dst, shallow=False):
            continue
        with atomic.atomic_path(dst) as tmp:
            shutil.copyfile(src, tmp)
        copied += 1
    return copied


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
        vinfo.update({f"prep.{k}": v for k, v in up.prep.items()})
    return out


# ---- stats ---------------------------------------------------------------------------------------


def _episode_camera_stats(results: Iterable[tuple[str, list[EpisodeVideo]]]) -> dict[int, dict[str, Any]]:
    per_ep: dict[int, dict[str, Any]] = {}
    for camera, eps in results:
        for ev in eps:
            per_ep.setdefault(ev.episode, {})[camera] = ev.stats
    return per_ep


def _write_v21_stats(ds: Dataset, out: Path, per_ep: dict[int, dict[str, Any]]) -> None:
    path = ds.root / "meta/episodes_stats.jsonl"
    if not path.is_file():
        return
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        new = per_ep.get(row.get("episode_index"), {})
        if isinstance(row.get("stats"), dict):
            row["stats"] = {k: new.get(k, v) for k, v in row["stats"].items()} | {
                k: v for k, v in new.items() if k not in row["stats"]}
        rows.append(row)
    atomic.write_jsonl(out / "meta/episodes_stats.jsonl", rows)


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


def _write_v30_episodes(ds: Dataset, out: Path, eps_by_cam: dict[str, dict[int, EpisodeVideo]]) -> None:
    for path in episode_meta_files(ds.root):
        table = pq.read_table(path)
        index = table["episode_index"].to_pylist()
        for cam, by_ep in eps_by_cam.items():
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
        with atomic.atomic_path(dst) as tmp:
            pq.write_table(table, tmp)


def _write_stats_json(ds: Dataset, out: Path, per_ep: dict[int, dict[str, Any]], cameras: list[str]) -> None:
    path = ds.root / "meta/stats.json"
    if not path.is_file():
        return
    stats = json.loads(path.read_text(encoding="utf-8"))
    agg = aggregate([{c: s[c] for c in cameras if c in s} for s in per_ep.values()]) if per_ep else {}
    for cam in cameras:
        if cam in agg and isinstance(stats, dict):
            old = stats.get(cam, {})
            stats[cam] = {**old, **{k: agg[cam][k] for k in STAT_NAMES}}
            # Quantiles LeRobot 0.4 may add cannot be recomputed from sums: drop them rather than lie.
            for k in [k for k in stats[cam] if k not in STAT_NAMES]:
                del stats[cam][k]
    atomic.write_json(out / "meta/stats.json", stats)


def write_output_metadata(
    ds: Dataset,
    out: Path,
    files: list[tuple[str, list[EpisodeVideo]]],
    updates: dict[str, VideoFeatureUpdate],
) -> None:
    """Write the output's metadata from the per-file results `(camera, episodes)`; info.json last."""
    per_ep = _episode_camera_stats(files)
    if ds.codebase_version == "v2.1":
        _write_v21_stats(ds, out, per_ep)
    else:
        eps_by_cam: dict[str, dict[int, EpisodeVideo]] = {}
        for camera, eps in files:
            for ev in eps:
                eps_by_cam.setdefault(camera, {})[ev.episode] = ev
        _write_v30_episodes(ds, out, eps_by_cam)
    _write_stats_json(ds, out, per_ep, list(updates))
    atomic.write_json(out / "meta/info.json", updated_info(ds.info, updates))
