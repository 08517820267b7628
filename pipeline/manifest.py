"""Storage/hours manifests: what a dataset holds (episodes, frames, hours) and weighs (bytes by kind).

Bytes come from the files on disk (regular files under the root, symlinks not followed), so
`totals.bytes.total` is the dataset's size to the byte; frames come from the metadata lengths
of the episodes that scanned cleanly. GB = 1e9 bytes, kB = 1e3 bytes.
"""

from __future__ import annotations

import json
import os
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import __version__, atomic
from pipeline.clock import utc_now
from pipeline.dataset.model import Dataset, resolve_inside
from pipeline.errors import EpisodeError, PrepError
from pipeline.schemas import validate
from pipeline.stages.scan import EpisodeScan
from pipeline.video.probe import UNKNOWN_PIX_FMT, probe_video

MANIFEST_SCHEMA = "manifest"


def camera_matcher(ds: Dataset) -> Callable[[str], str | None]:
    """The camera a video file belongs to, from its path: info.json's video_path with the camera's key
    filled in (any number for the other fields), else the first camera named as a folder of the path."""
    template = ds.info.get("video_path")
    patterns: list[tuple[str, re.Pattern[str]]] = []
    if isinstance(template, str):
        for cam in ds.camera_keys:
            rx = "".join(re.escape(lit) + ("" if name is None else re.escape(cam) if name == "video_key" else r"-?\d+")
                         for lit, name, _spec, _conv in string.Formatter().parse(template))
            patterns.append((cam, re.compile(rx)))

    def camera(rel: str) -> str | None:
        for cam, rx in patterns:
            if rx.fullmatch(rel):
                return cam
        return next((c for c in ds.camera_keys if f"/{c}/" in f"/{rel}"), None)

    return camera


def bytes_on_disk(ds: Dataset) -> dict[str, Any]:
    """Sizes of every regular file under the root, by kind and by camera (one streaming walk: running sums)."""
    camera_of = camera_matcher(ds)
    kinds = {"video": 0, "data": 0, "meta": 0, "other": 0}
    per_camera: dict[str, int] = {cam: 0 for cam in ds.camera_keys}
    files = 0
    for dirpath, _dirs, names in os.walk(ds.root):
        for name in names:
            full = Path(dirpath) / name
            st = full.lstat()
            if not full.is_file() or full.is_symlink():
                continue
            files += 1
            rel = full.relative_to(ds.root).as_posix()
            top = rel.split("/", 1)[0]
            kind = {"videos": "video", "data": "data", "meta": "meta"}.get(top, "other")
            kinds[kind] += st.st_size
            if kind == "video":
                cam = camera_of(rel)
                if cam is not None:
                    per_camera[cam] += st.st_size
    return {"total": sum(kinds.values()), **kinds, "per_camera": per_camera, "files": files}


def _pix_fmt(ds: Dataset, ok: list[EpisodeScan], camera: str) -> str | None:
    """The camera's pixel format: the scan's fast probe may not know it, so one full probe settles it."""
    scan = next(s for s in ok if camera in s.cameras)
    if scan.cameras[camera].pix_fmt != UNKNOWN_PIX_FMT:
        return scan.cameras[camera].pix_fmt
    assert scan.episode is not None
    episode = ds.episodes.by_index(scan.episode)
    try:
        return probe_video(resolve_inside(ds.root, episode.video(camera).rel), pix_fmt=True).pix_fmt
    except EpisodeError:
        return None


def build_manifest(ds: Dataset, scans: list[EpisodeScan], rejected: list[EpisodeError]) -> dict[str, Any]:
    ok = [s for s in scans if s.status == "ok"]
    failed = [s for s in scans if s.status != "ok"]
    frames = sum(s.frames_expected for s in ok)
    seconds = frames / ds.fps
    hours = seconds / 3600
    disk = bytes_on_disk(ds)
    total = disk["total"]
    lengths = [s.frames_expected for s in ok]
    cams: list[dict[str, Any]] = []
    for cam in ds.cameras:
        seen = next((s.cameras[cam.key] for s in ok if cam.key in s.cameras), None)
        cams.append(
            {
                "key": cam.key,
                "codec": seen.codec if seen else cam.codec,
                "width": seen.width if seen else cam.width,
                "height": seen.height if seen else cam.height,
                "pix_fmt": _pix_fmt(ds, ok, cam.key) if seen else cam.pix_fmt,
                "fps": seen.fps if seen else cam.fps,
                "declared": {"codec": cam.codec, "width": cam.width, "height": cam.height, "pix_fmt": cam.pix_fmt},
            }
        )
    failures = [
        {"episode": s.episode, "path": s.path, "reason": s.reason or "failed"} for s in failed
    ] + [{"episode": e.episode, "path": e.path, "reason": e.message} for e in rejected]
    return {
        "schema": "prep.manifest/1",
        "prep_version": __version__,
        "created_utc": utc_now(),
        "dataset": {
            "root": str(ds.root),
            "codebase_version": ds.codebase_version,
            "fps": ds.fps,
            "robot_type": ds.info.get("robot_type"),
            "cameras": cams,
            "declared_total_episodes": ds.info.get("total_episodes"),
            "declared_total_frames": ds.info.get("total_frames"),
        },
        "totals": {
            "episodes": len(ok),
            "episodes_failed": len(failures),
            "frames": frames,
            "frames_per_episode": {
                "mean": (frames / len(ok)) if ok else 0.0,
                "min": min(lengths, default=0),
                "max": max(lengths, default=0),
            },
            "seconds": seconds,
            "hours": hours,
            "bytes": {k: disk[k] for k in ("total", "video", "data", "meta", "other", "per_camera")},
            "files": disk["files"],
            "gb_per_hour": (total / 1e9 / hours) if hours else 0.0,
            "kb_per_frame": (total / 1e3 / frames) if frames else 0.0,
            "video_share": (disk["video"] / total) if total else 0.0,
        },
        "failures": failures,
    }


def episodes_table(ds: Dataset, scans: list[EpisodeScan]) -> pa.Table:
    cols: dict[str, list[Any]] = {
        "episode_index": [s.episode for s in scans],
        "status": [s.status for s in scans],
        "reason": [s.reason for s in scans],
        "frames_expected": [s.frames_expected for s in scans],
        "frames_in_parquet": [s.frames_in_parquet for s in scans],
        "parquet_bytes": [s.parquet_bytes for s in scans],
    }
    for cam in ds.camera_keys:
        cams = [s.cameras.get(cam) for s in scans]
        cols[f"{cam}/frames_from_header"] = [c.frames_from_header if c else None for c in cams]
        cols[f"{cam}/frames"] = [c.frames_from_packets if c else None for c in cams]
        cols[f"{cam}/keyframes"] = [c.keyframes if c else None for c in cams]
        cols[f"{cam}/bytes"] = [c.bytes if c else None for c in cams]
    schema = pa.schema(
        [
            ("episode_index", pa.int64()), ("status", pa.string()), ("reason", pa.string()),
            ("frames_expected", pa.int64()), ("frames_in_parquet", pa.int64()), ("parquet_bytes", pa.int64()),
        ]
        + [(k, pa.int64()) for k in cols if "/" in k]
    )
    return pa.Table.from_pydict(cols, schema=schema)


def write_manifest(manifest: dict[str, Any], table: pa.Table, out: Path) -> Path:
    """Validate and write the manifest JSON and its per-episode Parquet table beside it."""
    table_path = out.with_name(out.stem + ".episodes.parquet")
    manifest = {**manifest, "episodes_table": table_path.name}
    validate(manifest, MANIFEST_SCHEMA, source=str(out))
    with atomic.atomic_path(table_path) as tmp:
        pq.write_table(table, tmp)
    atomic.write_json(out, manifest, indent=2)
    return table_path


def load_manifest(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrepError(f"{path}: manifest not found") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise PrepError(f"{path}: cannot read manifest: {exc}") from None
    validate(obj, MANIFEST_SCHEMA, source=str(path))
    result: dict[str, Any] = obj
    return result
