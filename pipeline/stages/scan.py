"""The scan stage: per episode, what its files hold and weigh, without decoding a pixel."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.dataset.model import Dataset, Episode, require_file, resolve_inside
from pipeline.errors import EpisodeError
from pipeline.video.probe import VideoProbe, probe_video


@dataclass(slots=True)
class CameraScan:
    frames_from_header: int
    frames_from_packets: int
    keyframes: int
    bytes: int
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float


@dataclass(slots=True)
class EpisodeScan:
    episode: int | None
    frames_expected: int
    status: str = "ok"
    reason: str | None = None
    path: str | None = None
    frames_in_parquet: int | None = None
    parquet_bytes: int = 0
    cameras: dict[str, CameraScan] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ScanUnit:
    """Episodes that share their files (v2.1: one episode; v3.0: the episodes of one set of files)."""

    root: str
    episodes: tuple[Episode, ...]
    pix_fmt: bool = False  # probe the pixel format too (a full open; the plan asks it of its first unit only)


def scan_units(ds: Dataset) -> Iterator[ScanUnit]:
    """One unit per set of files (v2.1: per episode), lazily, in plan order; the first also probes pix_fmt."""
    root = str(ds.root)
    for k, positions in enumerate(ds.iter_file_sets()):
        yield ScanUnit(root, tuple(ds.episodes[int(p)] for p in positions), pix_fmt=k == 0)


def failed(ep: Episode | None, exc: BaseException, frames_expected: int = 0) -> EpisodeScan:
    if isinstance(exc, EpisodeError):
        return EpisodeScan(
            episode=ep.index if ep else exc.episode, frames_expected=ep.frames_expected if ep else frames_expected,
            status="failed", reason=exc.message, path=exc.path,
        )
    return EpisodeScan(
        episode=ep.index if ep else None, frames_expected=ep.frames_expected if ep else frames_expected,
        status="failed", reason=f"{type(exc).__name__}: {exc}",
    )


def scan_unit_failed(unit: ScanUnit, exc: BaseException) -> list[EpisodeScan]:
    return [failed(ep, exc) for ep in unit.episodes]


def _share(total: int, part: int, whole: int) -> int:
    return round(total * part / whole) if whole else 0


def _parquet_rows(path: Path, episodes: tuple[Episode, ...]) -> tuple[dict[int, int], int]:
    """Rows per episode index in a parquet file and the file's size."""
    size = path.stat().st_size
    if len(episodes) == 1 and episodes[0].data.from_index is None:
        return {episodes[0].index: pq.read_metadata(path).num_rows}, size
    col = pq.read_table(path, columns=["episode_index"])["episode_index"]
    counts = pc.value_counts(col).to_pylist()
    return {int(c["values"]): int(c["counts"]) for c in counts}, size


def scan_unit(unit: ScanUnit) -> list[EpisodeScan]:
    """Scan the episodes of one unit; a bad file fails the episodes that use it, not the run."""
    root = Path(unit.root)
    first = unit.episodes[0]
    results = {ep.index: EpisodeScan(episode=ep.index, frames_expected=ep.frames_expected) for ep in unit.episodes}

    def fail(exc: EpisodeError) -> None:
        for ep in unit.episodes:
            r = results[ep.index]
            if r.status == "ok":
                r.status, r.reason, r.path = "failed", exc.message, exc.path
                r.episode = ep.index

    try:
        data_path = resolve_inside(root, first.data.rel, episode=first.index)
        require_file(data_path, "parquet file", episode=first.index)
        try:
            rows, size = _parquet_rows(data_path, unit.episodes)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise EpisodeError(first.index, data_path, f"unreadable parquet ({exc})") from None
        total_rows = sum(rows.values()) or 1
        for ep in unit.episodes:
            results[ep.index].frames_in_parquet = rows.get(ep.index, 0)
            results[ep.index].parquet_bytes = _share(size, rows.get(ep.index, 0), total_rows)
    except EpisodeError as exc:
        fail(exc)

    for cam_ref in first.videos:
        try:
            path = resolve_inside(root, cam_ref.rel, episode=first.index)
            probe: VideoProbe = probe_video(path, episode=first.index, pix_fmt=unit.pix_fmt)
        except EpisodeError as exc:
            fail(exc)
            continue
        payload = probe.payload_bytes or 1
        for ep in unit.episodes:
            ref = ep.video(cam_ref.camera)
            if ref.to_timestamp is None:
                frames, nbytes, keys = probe.frames_from_packets, probe.bytes, probe.keyframes
            else:
                frames = probe.frames_in_span(ref.from_timestamp, ref.to_timestamp)
                keys = probe.keyframes_in_span(ref.from_timestamp, ref.to_timestamp)
                nbytes = _share(probe.bytes, probe.bytes_in_span(ref.from_timestamp, ref.to_timestamp), payload)
            results[ep.index].cameras[cam_ref.camera] = CameraScan(
                frames_from_header=probe.frames_from_header,
                frames_from_packets=frames,
                keyframes=keys,
                bytes=nbytes,
                codec=probe.codec,
                width=probe.width,
                height=probe.height,
                pix_fmt=probe.pix_fmt,
                fps=probe.fps,
            )
    return [results[ep.index] for ep in unit.episodes]
