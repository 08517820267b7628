"""The scan stage: per episode, what its files hold and weigh, without decoding a pixel or reading a packet.

Videos are counted from their container index: an mp4's header boxes (`pipeline.video.probe.probe_header`:
~10 kB of a 1.3 MB episode file in 2 reads, no sample read), any other container opened as it is
(`probe_index`), parquet files from their `episode_index` column. A camera
stored as images (`dtype: "image"`, a struct column `{bytes, path}` of the data parquet) is counted from the
parquet footer: its pictures are the rows whose `bytes` are not null (the column chunk statistics' null count),
its bytes the column chunks' stored sizes, shared among a file's episodes by rows; the first unit also reads
one picture's header (format, size, mode), from the column's first page. Every
file is read through the dataset's store (`pipeline.storage`): a local folder, a hub snapshot or an object
store alike.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.checks import Status
from pipeline.dataset.model import Dataset, Episode
from pipeline.errors import EpisodeError
from pipeline.stages.result import StageResult
from pipeline.storage import EXACT_READS, HEADER_BLOCK, Location, Store
from pipeline.video.probe import IndexProbe, VideoProbe, probe_header, probe_index, probe_video


@dataclass(slots=True)
class CameraScan:
    frames_from_header: int
    frames_from_index: int | None  # the container's sample index (mp4); None where it has none complete
    frames_from_packets: int | None  # a demux, only where the container has no complete index
    keyframes: int
    bytes: int
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float


@dataclass(slots=True)
class ImageScan:
    """A camera stored as images, in one episode: counted from the parquet footer, never decoded."""

    frames_from_footer: int  # rows whose picture bytes are not null (the column statistics' null count)
    bytes: int  # the column chunks' stored (compressed) size, shared by rows in a file of many episodes
    format: str | None = None  # of the first picture ("png", "jpeg", ...): the unit that probes only
    width: int | None = None
    height: int | None = None
    pix_fmt: str | None = None  # the first picture's mode, as FFmpeg names it (rgb24, gray, rgba, ...)


@dataclass(slots=True)
class EpisodeScan(StageResult):
    """One episode's scan: status "ok" | "failed" (its reason and the file at fault)."""

    episode: int | None
    frames_expected: int
    frames_in_parquet: int | None = None
    parquet_bytes: int = 0
    cameras: dict[str, CameraScan] = field(default_factory=dict)
    images: dict[str, ImageScan] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ScanUnit:
    """Episodes that share their files (v2.1: one episode; v3.0: the episodes of one set of files)."""

    location: Location
    episodes: tuple[Episode, ...]
    pix_fmt: bool = False  # probe the pixel format too (a full open; the plan asks it of its first unit only)
    image_cameras: tuple[str, ...] = ()  # the cameras stored as images in the data parquet


def scan_units(ds: Dataset, location: Location | None = None) -> Iterator[ScanUnit]:
    """One unit per set of files (v2.1: per episode), lazily, in plan order; the first also probes pix_fmt."""
    where = location or ds.location
    images = ds.image_camera_keys
    for k, positions in enumerate(ds.iter_file_sets()):
        yield ScanUnit(where, tuple(ds.episodes[int(p)] for p in positions), pix_fmt=k == 0, image_cameras=images)


def failed(ep: Episode | None, exc: BaseException, frames_expected: int = 0) -> EpisodeScan:
    if isinstance(exc, EpisodeError):
        return EpisodeScan(
            episode=ep.index if ep else exc.episode, frames_expected=ep.frames_expected if ep else frames_expected,
            status=Status.FAILED, reason=exc.message, path=exc.path,
        )
    return EpisodeScan(
        episode=ep.index if ep else None, frames_expected=ep.frames_expected if ep else frames_expected,
        status=Status.FAILED, reason=f"{type(exc).__name__}: {exc}",
    )


def scan_unit_failed(unit: ScanUnit, exc: BaseException) -> list[EpisodeScan]:
    return [failed(ep, exc) for ep in unit.episodes]


def _share(total: int, part: int, whole: int) -> int:
    return round(total * part / whole) if whole else 0


# The largest row count a row group may claim in its footer: `datasets`' parquet loader, which every
# LeRobot reader (0.3.x, 0.4.x, 0.6.x) loads data files with, takes a row group's count as a C int and
# raises OverflowError above it (seen with all three). Below it the readers get what the pages hold,
# cut at the footer's count when that is smaller: what `iter_batches` hands over, counted here.
READERS_MAX_ROW_GROUP_ROWS = 2**31 - 1
COUNT_BATCH = 1 << 16


# FFmpeg's names for the picture modes Pillow opens (what a decoder of the picture hands over)
IMAGE_PIX_FMTS = {"RGB": "rgb24", "RGBA": "rgba", "L": "gray", "LA": "ya8", "I;16": "gray16le", "P": "pal8",
                  "CMYK": "cmyk", "1": "monob"}


@dataclass(slots=True)
class ImageColumn:
    """What a data file's footer says of one image camera: pictures (non-null rows) and stored bytes, and the
    first picture's header when asked."""

    pictures: int
    bytes: int
    rows: int
    format: str | None = None
    width: int | None = None
    height: int | None = None
    pix_fmt: str | None = None


def picture_header(data: bytes) -> tuple[str | None, int, int, str | None]:
    """(format, width, height, pix_fmt) of an encoded picture, from its header (Pillow opens lazily: no decode)."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format.lower() if im.format else None
            return fmt, im.width, im.height, IMAGE_PIX_FMTS.get(im.mode, im.mode.lower())
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"not a picture Pillow reads ({exc})") from None


def image_columns(pf: pq.ParquetFile, cameras: tuple[str, ...], *, header: bool) -> dict[str, ImageColumn]:
    """Each image camera's pictures and stored bytes, from the footer (the `bytes` child's null count; its
    rows where the writer kept no statistics), and with `header` the first picture's header (one page read)."""
    md = pf.metadata
    paths = {md.schema.column(i).path: i for i in range(md.num_columns)}
    out: dict[str, ImageColumn] = {}
    for cam in cameras:
        if f"{cam}.bytes" not in paths:
            raise KeyError(f"no image column {cam!r} ({{bytes, path}}) in the data file")
        cols = [i for p, i in paths.items() if p == cam or p.startswith(cam + ".")]
        col = ImageColumn(pictures=0, bytes=0, rows=md.num_rows)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            col.bytes += sum(rg.column(i).total_compressed_size for i in cols)
            st = rg.column(paths[f"{cam}.bytes"]).statistics
            nulls = st.null_count if st is not None and st.has_null_count else 0
            col.pictures += rg.num_rows - nulls
        if header:
            for batch in pf.iter_batches(batch_size=1, columns=[cam]):
                value = batch.column(0)[0].as_py() if batch.num_rows else None
                data = value.get("bytes") if isinstance(value, dict) else None
                if data:
                    col.format, col.width, col.height, col.pix_fmt = picture_header(data)
                break
        out[cam] = col
    return out


LISTED_AT_MOST = 2_000  # files of a folder an object-store process lists before it stats one of them (2 LISTs)
_LISTED: set[tuple[int, str]] = set()
_LISTING = threading.Lock()


def _list_folder_once(store: Store, rel: str) -> None:
    """On an object store, list the folder of `rel` once a process (its first `LISTED_AT_MOST` files): the store
    then knows their sizes and ETags, and a file read needs no HEAD (v2.1: a folder per camera and chunk, up to
    1,000 episode files, one LIST request instead of a HEAD a file)."""
    if store.location.is_local:
        return
    folder = rel.rpartition("/")[0]
    with _LISTING:  # a task's units run in threads (UNITS_IN_FLIGHT): one LIST a folder, the others wait for it
        if (id(store), folder) in _LISTED:
            return
        for n, _ in enumerate(store.iter_files(folder)):
            if n + 1 >= LISTED_AT_MOST:
                break
        _LISTED.add((id(store), folder))


def _parquet_rows(store: Store, rel: str, episodes: tuple[Episode, ...], images: tuple[str, ...] = (),
                  header: bool = False) -> tuple[dict[int, int], int, dict[str, ImageColumn]]:
    """Rows per episode index in a parquet file, as the readers would get them (counted from the pages,
    streaming, never from the footer's claim alone), the file's size, and its image cameras' columns."""
    _list_folder_once(store, rel)
    size = store.stat(rel, "parquet file").size
    with store.media(rel, block_size=HEADER_BLOCK, what="parquet file") as source:
        pf = pq.ParquetFile(source)
        return _rows_of(pf, episodes, store, rel), size, image_columns(pf, images, header=header)


def _rows_of(pf: pq.ParquetFile, episodes: tuple[Episode, ...], store: Store, rel: str) -> dict[int, int]:
    path = store.location.child(rel).url
    md = pf.metadata
    for g in range(md.num_row_groups):
        claimed = md.row_group(g).num_rows
        if claimed > READERS_MAX_ROW_GROUP_ROWS:
            pages = sum(b.num_rows for b in pf.iter_batches(batch_size=COUNT_BATCH, row_groups=[g],
                                                             columns=[pf.schema_arrow.names[0]]))
            v21 = episodes[0].data.from_index is None
            readers = "LeRobot 0.3.x (v2.1)" if v21 else "LeRobot 0.4.x and 0.6.x (v3.0)"
            raise EpisodeError(episodes[0].index, path, f"the footer's row group {g} claims {claimed:,} rows where "
                               f"its pages hold {pages:,}: {readers} raise(s) loading this file (datasets' parquet "
                               f"loader: OverflowError above {READERS_MAX_ROW_GROUP_ROWS:,} rows a row group)")
    if len(episodes) == 1 and episodes[0].data.from_index is None:
        column = "episode_index" if "episode_index" in pf.schema_arrow.names else pf.schema_arrow.names[0]
        rows = sum(b.num_rows for b in pf.iter_batches(batch_size=COUNT_BATCH, columns=[column]))
        return {episodes[0].index: rows}
    counts: dict[int, int] = {}
    for batch in pf.iter_batches(batch_size=COUNT_BATCH, columns=["episode_index"]):
        for c in pc.value_counts(batch.column(0)).to_pylist():
            counts[int(c["values"])] = counts.get(int(c["values"]), 0) + int(c["counts"])
    return counts


def probe_camera(store: Store, rel: str, *, episode: int | None, pix_fmt: bool) -> IndexProbe | VideoProbe:
    """A video's header and frames, from its container index: an mp4's header boxes alone (1-3 exact reads;
    with `pix_fmt` one more, its first sample), else the file opened as it is (a header read), else a demux."""
    _list_folder_once(store, rel)
    size = store.stat(rel, "video file").size
    shown = store.location.child(rel).url
    if size:
        with store.open(rel, block_size=EXACT_READS, what="video file") as fh:
            probe = probe_header(fh, shown=shown, size=size, episode=episode, pix_fmt=pix_fmt)
        if probe is not None:
            return probe
    with store.media(rel, block_size=HEADER_BLOCK, what="video file") as source:
        probe = probe_index(source, shown=shown, size=size, episode=episode, pix_fmt=pix_fmt)
    if probe is not None:
        return probe
    with store.local_copy(rel, "video file") as path:  # no complete index (not an mp4): every packet
        return probe_video(path, episode=episode, pix_fmt=pix_fmt)


READS_IN_FLIGHT = 8  # an object store's header reads of one unit at once (its cameras): each costs a round trip
# Units a scan task runs at once on an object store (threads). A v2.1 unit is ~7 requests in 3 rounds (its
# parquet file; each camera's ftyp+moov, cameras at once) and ~35 ms of the client's CPU (aiobotocore's per-request
# work, FFmpeg's header parse): at a region's round trip (20-50 ms) one unit at a time leaves a worker waiting
# most of the time. Measured (50 three-camera episodes, 2 workers, moto with 50 ms added to each request, 2 cores):
# 11.1-11.4 s with 1 unit in flight, 8.4-9.4 s with 4, 8.9-9.4 s with 8; on loopback (no added latency, the scan
# CPU-bound) 1 and 4 are within noise. A local folder scans one unit at a time.
UNITS_IN_FLIGHT = 4


def units_in_flight(location: Location) -> int:
    """Units of one scan task to run at once for a dataset at `location`."""
    return 1 if location.is_local else UNITS_IN_FLIGHT


def _probes(store: Store, first: Episode, pix_fmt: bool) -> list[IndexProbe | VideoProbe | EpisodeError]:
    """Each camera's probe (or its EpisodeError), in the episode's camera order. On an object store the
    cameras' header reads run at once (threads: each is ~2 round trips and no CPU), so a unit costs the round
    trips of one camera, not of all; a local folder reads them one after another, as ever."""
    def one(rel: str) -> IndexProbe | VideoProbe | EpisodeError:
        try:
            return probe_camera(store, rel, episode=first.index, pix_fmt=pix_fmt)
        except EpisodeError as exc:
            return exc

    rels = [v.rel for v in first.videos]
    if store.location.is_local or len(rels) < 2:
        return [one(rel) for rel in rels]
    return list(_reads_pool().map(one, rels))


_POOL: dict[int, ThreadPoolExecutor] = {}  # pid -> this process's pool for camera reads (one, not one a unit:
_POOL_LOCK = threading.Lock()  # starting 3 threads a unit cost ~5% of an object-store scan's CPU)


def _reads_pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        pool = _POOL.get(os.getpid())  # a forked child starts its own (its parent's threads are not in it)
        if pool is None:
            _POOL.clear()
            pool = _POOL[os.getpid()] = ThreadPoolExecutor(max_workers=READS_IN_FLIGHT,
                                                             thread_name_prefix="prep-scan")
        return pool


def scan_unit(unit: ScanUnit) -> list[EpisodeScan]:
    """Scan the episodes of one unit; a bad file fails the episodes that use it, not the run."""
    store = unit.location.store()
    first = unit.episodes[0]
    results = {ep.index: EpisodeScan(episode=ep.index, frames_expected=ep.frames_expected) for ep in unit.episodes}

    def fail(exc: EpisodeError) -> None:
        for ep in unit.episodes:
            r = results[ep.index]
            if r.status == Status.OK:
                r.fail(exc.message, exc.path)
                r.episode = ep.index

    try:
        try:
            rows, size, images = _parquet_rows(store, first.data.rel, unit.episodes, unit.image_cameras,
                                               unit.pix_fmt)
        except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
            raise EpisodeError(first.index, unit.location.child(first.data.rel).url,
                               f"unreadable parquet ({exc})") from None
        total_rows = sum(rows.values()) or 1
        for ep in unit.episodes:
            n = rows.get(ep.index, 0)
            results[ep.index].frames_in_parquet = n
            results[ep.index].parquet_bytes = _share(size, n, total_rows)
            for cam, col in images.items():
                results[ep.index].images[cam] = ImageScan(
                    frames_from_footer=n if col.pictures == col.rows else _share(col.pictures, n, col.rows),
                    bytes=_share(col.bytes, n, col.rows or 1), format=col.format, width=col.width,
                    height=col.height, pix_fmt=col.pix_fmt)
    except EpisodeError as exc:
        fail(exc)

    for cam_ref, probe in zip(first.videos, _probes(store, first, unit.pix_fmt), strict=True):
        if isinstance(probe, EpisodeError):
            fail(probe)
            continue
        whole = probe.frames_from_index if isinstance(probe, IndexProbe) else probe.frames_from_packets
        payload = probe.payload_bytes or 1
        for ep in unit.episodes:
            ref = ep.video(cam_ref.camera)
            if ref.to_timestamp is None:
                frames, nbytes, keys = whole, probe.bytes, probe.keyframes
            else:
                frames = probe.frames_in_span(ref.from_timestamp, ref.to_timestamp)
                keys = probe.keyframes_in_span(ref.from_timestamp, ref.to_timestamp)
                nbytes = _share(probe.bytes, probe.bytes_in_span(ref.from_timestamp, ref.to_timestamp), payload)
            indexed = isinstance(probe, IndexProbe)
            results[ep.index].cameras[cam_ref.camera] = CameraScan(
                frames_from_header=probe.frames_from_header,
                frames_from_index=frames if indexed else None,
                frames_from_packets=None if indexed else frames,
                keyframes=keys,
                bytes=nbytes,
                codec=probe.codec,
                width=probe.width,
                height=probe.height,
                pix_fmt=probe.pix_fmt,
                fps=probe.fps,
            )
    return [results[ep.index] for ep in unit.episodes]
