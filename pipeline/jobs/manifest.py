"""Storage/hours manifests: what a dataset holds (episodes, frames, hours) and weighs (bytes by kind).

Frames come from the metadata lengths of the episodes that scanned cleanly. Bytes come from the
files stored (regular files under the root; each stored byte once: a symlink in a plain folder is not
counted, a hub snapshot's links into its blobs are its files): `prep scan` lists the root once through its
store (`pipeline.storage`: a streaming walk, or a paginated listing of an object-store prefix; running
sums only) so `totals.bytes.total` is the dataset's size to the byte, including files no episode
references; `prep reencode` sums the files it wrote and copied (no walk).
GB = 1e9 bytes, kB = 1e3 bytes.

The manifest is reduced incrementally (`ScanTotals.add` per episode result) and its per-episode rows
are streamed to Parquet row groups, so neither grows in memory with the corpus; `failures` lists the
first `FAILURES_LISTED` failures (the per-episode table holds them all, `failures_omitted` counts the rest).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline import __version__, atomic
from pipeline.bounded import MAX_JSON_CHARS, loads_json, read_json
from pipeline.clock import utc_now
from pipeline.dataset.files import FileIndex
from pipeline.dataset.model import Dataset
from pipeline.errors import EpisodeError, PrepError
from pipeline.schemas import validate
from pipeline.stages.scan import CameraScan, EpisodeScan, ImageScan, probe_camera
from pipeline.storage import Location, MissingFile, StorePath
from pipeline.video.probe import UNKNOWN_PIX_FMT

MANIFEST_SCHEMA = "manifest"
FAILURES_LISTED = 10_000
KINDS = {"videos": "video", "data": "data", "meta": "meta"}


def table_path_for(out: Path) -> Path:
    """The per-episode table beside a manifest: m.json -> m.episodes.parquet."""
    return out.with_name(out.stem + ".episodes.parquet")


# ---- bytes -------------------------------------------------------------------------------------


class ByteCounter:
    """Running sums of file sizes by kind (top folder) and camera."""

    def __init__(self, ds: Dataset) -> None:
        self.files = FileIndex(ds)
        self.kinds = {"video": 0, "data": 0, "meta": 0, "other": 0}
        self.per_camera: dict[str, int] = {cam: 0 for cam in ds.camera_keys}
        self.count = 0

    def add(self, rel: str, size: int, camera: str | None = None) -> None:
        self.count += 1
        kind = KINDS.get(rel.split("/", 1)[0], "other")
        self.kinds[kind] += size
        if kind == "video":
            cam = camera or self.files.camera(rel)
            if cam is not None:
                self.per_camera[cam] += size

    def result(self) -> dict[str, Any]:
        return {"total": sum(self.kinds.values()), **self.kinds, "per_camera": self.per_camera, "files": self.count}


def bytes_on_disk(ds: Dataset, skip: Iterable[Path] = (), location: Location | None = None) -> dict[str, Any]:
    """Sizes of every file stored under the root, by kind and by camera (one listing, running sums); `skip`:
    folders and files (absolute paths) left out (a report or work folder written inside the dataset)."""
    where = location or ds.location
    base = where.root.rstrip("/") + "/"
    skipped = tuple(str(p)[len(base):] for p in skip if str(p).startswith(base))
    counter = ByteCounter(ds)
    for rel, st in where.store().iter_files():
        if skipped and any(rel == k or rel.startswith(k + "/") for k in skipped):
            continue
        counter.add(rel, st.size)
    return counter.result()


# ---- the reduce ------------------------------------------------------------------------------


class ScanTotals:
    """The manifest's totals, reduced one episode result at a time."""

    def __init__(self, cameras: tuple[str, ...]) -> None:
        self.cameras = cameras
        self.ok = 0
        self.failed = 0
        self.frames = 0
        self.min_len: int | None = None
        self.max_len = 0
        self.failures: list[dict[str, Any]] = []
        self.seen: dict[str, tuple[int | None, CameraScan]] = {}  # camera -> first clean episode's probe
        self.images: dict[str, ImageScan] = {}  # image camera -> its totals (pictures, bytes) and first header

    def add(self, s: EpisodeScan) -> None:
        if s.status != "ok":
            self.failed += 1
            if len(self.failures) < FAILURES_LISTED:
                self.failures.append({"episode": s.episode, "path": s.path, "reason": s.reason or "failed"})
            return
        self.ok += 1
        n = s.frames_expected
        self.frames += n
        self.min_len = n if self.min_len is None else min(self.min_len, n)
        self.max_len = max(self.max_len, n)
        for cam, c in s.cameras.items():
            if cam not in self.seen:
                self.seen[cam] = (s.episode, c)
        for cam, i in s.images.items():
            t = self.images.setdefault(cam, ImageScan(0, 0))
            t.frames_from_footer += i.frames_from_footer
            t.bytes += i.bytes
            if t.format is None and i.format is not None:
                t.format, t.width, t.height, t.pix_fmt = i.format, i.width, i.height, i.pix_fmt


def _pix_fmt(ds: Dataset, episode: int | None, seen: CameraScan, camera: str) -> str | None:
    """The camera's pixel format: the first unit's full probe gives it; else one probe of the first clean file."""
    if seen.pix_fmt != UNKNOWN_PIX_FMT or episode is None:
        return seen.pix_fmt
    try:
        rel = ds.episodes.by_index(episode).video(camera).rel
        return probe_camera(ds.location.store(), rel, episode=episode, pix_fmt=True).pix_fmt
    except (EpisodeError, KeyError):
        return None


def build_manifest(ds: Dataset, totals: ScanTotals, rejected: list[EpisodeError], disk: dict[str, Any],
                   *, rejected_count: int | None = None) -> dict[str, Any]:
    frames = totals.frames
    seconds = frames / ds.fps
    hours = seconds / 3600
    total = disk["total"]
    cams: list[dict[str, Any]] = []
    for cam in ds.cameras:
        first = totals.seen.get(cam.key)
        seen = first[1] if first else None
        cams.append(
            {
                "key": cam.key,
                "stored": "video",
                "codec": seen.codec if seen else cam.codec,
                "width": seen.width if seen else cam.width,
                "height": seen.height if seen else cam.height,
                "pix_fmt": _pix_fmt(ds, first[0], seen, cam.key) if first and seen else cam.pix_fmt,
                "fps": seen.fps if seen else cam.fps,
                "declared": {"codec": cam.codec, "width": cam.width, "height": cam.height, "pix_fmt": cam.pix_fmt},
            }
        )
    image_bytes = 0
    per_camera = dict(disk["per_camera"])
    for icam in ds.image_cameras:  # a camera too: its pictures are bytes of the data files
        img = totals.images.get(icam.key)
        cams.append({"key": icam.key, "stored": "image", "codec": img.format if img else None,
                     "width": img.width if img and img.width else icam.width,
                     "height": img.height if img and img.height else icam.height,
                     "pix_fmt": img.pix_fmt if img else None, "fps": ds.fps,
                     "pictures": img.frames_from_footer if img else 0,
                     "declared": {"codec": None, "width": icam.width, "height": icam.height, "pix_fmt": None}})
        per_camera[icam.key] = img.bytes if img else 0
        image_bytes += per_camera[icam.key]
    n_rejected = max(rejected_count or 0, len(rejected))
    listed = totals.failures + [{"episode": e.episode, "path": e.path, "reason": e.message}
                                for e in rejected[: max(0, FAILURES_LISTED - len(totals.failures))]]
    n_failures = totals.failed + n_rejected
    doc: dict[str, Any] = {
        "schema": "prep.manifest/1",
        "prep_version": __version__,
        "created_utc": utc_now(),
        "dataset": {
            "root": str(ds.root),
            "codebase_version": ds.codebase_version,
            "fps": ds.fps,
            "robot_type": rt if isinstance(rt := ds.info.get("robot_type"), str) else None,  # a warning if not
            "cameras": cams,
            "declared_total_episodes": ds.info.get("total_episodes"),
            "declared_total_frames": ds.info.get("total_frames"),
        },
        "totals": {
            "episodes": totals.ok,
            "episodes_failed": n_failures,
            "frames": frames,
            "frames_per_episode": {
                "mean": (frames / totals.ok) if totals.ok else 0.0,
                "min": totals.min_len or 0,
                "max": totals.max_len,
            },
            "seconds": seconds,
            "hours": hours,
            # `images`: the part of `data` that is cameras stored as images; per_camera holds those cameras too
            "bytes": {**{k: disk[k] for k in ("total", "video", "data", "meta", "other")}, "images": image_bytes,
                      "per_camera": per_camera},
            "files": disk["files"],
            "gb_per_hour": (total / 1e9 / hours) if hours else 0.0,
            "kb_per_frame": (total / 1e3 / frames) if frames else 0.0,
            "video_share": (disk["video"] / total) if total else 0.0,
        },
        "failures": listed,
    }
    if n_failures > len(listed):
        doc["failures_omitted"] = n_failures - len(listed)
    if ds.warnings_total:  # what the readers do not refuse (stale data/file_index, rules they ignore)
        doc["warnings"] = list(ds.warnings)
        doc["warnings_total"] = ds.warnings_total
    return doc


# ---- the per-episode table --------------------------------------------------------------------


def episodes_schema(cameras: Iterable[str], image_cameras: Iterable[str] = ()) -> pa.Schema:
    fields = [("episode_index", pa.int64()), ("status", pa.string()), ("reason", pa.string()),
              ("frames_expected", pa.int64()), ("frames_in_parquet", pa.int64()), ("parquet_bytes", pa.int64())]
    for cam in cameras:
        fields += [(f"{cam}/frames_from_header", pa.int64()), (f"{cam}/frames_from_index", pa.int64()),
                   (f"{cam}/frames_from_packets", pa.int64()), (f"{cam}/keyframes", pa.int64()),
                   (f"{cam}/bytes", pa.int64())]
    for cam in image_cameras:
        fields += [(f"{cam}/frames_from_footer", pa.int64()), (f"{cam}/bytes", pa.int64())]
    return pa.schema(fields)


def episode_row(s: EpisodeScan, cameras: Iterable[str], image_cameras: Iterable[str] = ()) -> dict[str, Any]:
    row: dict[str, Any] = {"episode_index": s.episode, "status": s.status, "reason": s.reason,
                           "frames_expected": s.frames_expected, "frames_in_parquet": s.frames_in_parquet,
                           "parquet_bytes": s.parquet_bytes}
    for cam in cameras:
        c = s.cameras.get(cam)
        if c is not None:
            row |= {f"{cam}/frames_from_header": c.frames_from_header, f"{cam}/frames_from_index": c.frames_from_index,
                    f"{cam}/frames_from_packets": c.frames_from_packets, f"{cam}/keyframes": c.keyframes,
                    f"{cam}/bytes": c.bytes}
    for cam in image_cameras:
        i = s.images.get(cam)
        if i is not None:
            row |= {f"{cam}/frames_from_footer": i.frames_from_footer, f"{cam}/bytes": i.bytes}
    return row


# ---- publish ---------------------------------------------------------------------------------


def publish_manifest(manifest: dict[str, Any], table: Path, out: Path, root: Path | None = None) -> Path:
    """Validate the manifest, move its finished per-episode table beside it, then write the JSON (last).
    `root`: the output folder the manifest is in (`pipeline.atomic.atomic_path`)."""
    table_path = table_path_for(out)
    manifest["episodes_table"] = table_path.name
    validate(manifest, MANIFEST_SCHEMA, source=str(out))
    with atomic.atomic_path(table_path, root) as tmp:
        os.replace(table, tmp)
    atomic.write_json(out, manifest, indent=2, root=root)
    return table_path


def copy_manifest(src: Path, dst: Path, root: Path | None = None) -> dict[str, Any]:
    """Copy a manifest and its per-episode table (byte for byte, streaming) to `dst`."""
    manifest = load_manifest(src)
    table = src.with_name(manifest["episodes_table"])
    with atomic.atomic_path(table_path_for(dst), root) as tmp:
        shutil.copyfile(table, tmp)
    manifest["episodes_table"] = table_path_for(dst).name
    atomic.write_json(dst, manifest, indent=2, root=root)
    return manifest


def read_json_at(source: Path | StorePath, what: str = "manifest") -> Any:
    """A JSON file where it lives, bounded as `pipeline.bounded.read_json` bounds a local one: its size before it
    is read (an object: its listing or HEAD, then one GET), its depth before it is parsed. Raises what `read_json`
    raises; an object also `MissingFile` and `StorageError` (one line naming its URL: credentials, endpoint)."""
    if not isinstance(source, StorePath):
        return read_json(Path(source))
    data = source.read_bytes(limit=4 * MAX_JSON_CHARS, what=what)  # UTF-8: at most 4 bytes a character
    return loads_json(data.decode("utf-8"))


def load_manifest(path: Path | str | StorePath) -> dict[str, Any]:
    """A `prep scan` manifest, schema-checked: a local path, or an object (`pipeline.storage.parse_file`)."""
    path = path if isinstance(path, StorePath) else Path(path)
    try:
        obj = read_json_at(path)  # size and depth bounded before parsing
    except (FileNotFoundError, MissingFile):
        raise PrepError(f"{path}: manifest not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PrepError(f"{path}: cannot read manifest: {exc}") from None
    validate(obj, MANIFEST_SCHEMA, source=str(path))
    result: dict[str, Any] = obj
    return result
