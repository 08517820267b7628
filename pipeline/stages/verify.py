"""The verify stage: per unit (one episode, or the episodes sharing a set of v3.0 files), every
frame count by origin and every check that LeRobot's loader would trip over later.

Plain functions, no Dask: `verify_unit(unit) -> list[EpisodeVerify]`. The per-file video checks
are `pipeline.video.checks` (shared with `prep reencode`); this module adds the parquet checks,
the v3.0 span coverage, the comparison with the metadata, and the cameras stored as images (`dtype:
"image"`, a `{bytes, path}` column of the data parquet): the column, one picture per row (the footer's null
count), the first picture's header against the declared shape, and with --decode every picture decoded,
streamed a few rows at a time.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.checks import Severity, found_severity, is_file_check, reader_lines, target_severity
from pipeline.dataset.features import is_high_bit_gray
from pipeline.dataset.model import CameraInfo, Dataset, Episode, ImageCamera
from pipeline.errors import EpisodeError, WorkerLost
from pipeline.formats import format_of
from pipeline.stages.result import reason_of
from pipeline.storage import STREAM_BLOCK, Location, OutsideRoot, StorePath
from pipeline.text import printable
from pipeline.video.checks import (
    TIMESTAMP_TOLERANCE_S,
    CheckFailure,
    Span,
    VideoCheck,
    VideoExpect,
    check_coverage,
    inspect_probe,
)
from pipeline.video.indexed import IndexedVideo, probe_indexed
from pipeline.video.probe import VideoProbe, probe_video
from pipeline.video.rotation import describe, display_matrix, swaps_sides

PARQUET_COLUMNS = ("timestamp", "frame_index", "episode_index", "index")
# Failures about a whole file (not one span of it: `pipeline.checks`, scope "file") fail every episode in the file.


@dataclass(slots=True, frozen=True)
class VerifyOptions:
    """What to enforce beyond agreement: the episode length, the frame size, all-intra, a full decode."""

    expect_frames: int | None = None
    size: tuple[int, int] | None = None  # (width, height)
    all_intra: bool = False
    decode: bool = False
    reader: str = "all"  # the reader lines the severity follows (`pipeline.checks.targeted`)
    # each video checked from its container index first (`pipeline.video.indexed`: its header read, no packet),
    # demuxed only where that finds anything or cannot stand for a demux (reencode's check of an object-store
    # source); the verdicts are a demux's whenever the index lists the packets a demux finds
    index: bool = False

    @property
    def indexable(self) -> bool:
        """Whether the index may stand for the demux: no check here needs a packet's bytes or a decoded pixel."""
        return self.index and self.size is None and not self.all_intra and not self.decode


@dataclass(slots=True)
class CameraCounts:
    """One camera of one episode. `frames_from_header` is None in v3.0 (the header counts the file)."""

    frames_from_header: int | None = None
    frames_from_packets: int | None = None
    frames_decoded: int | None = None
    keyframes: int | None = None
    codec: str | None = None  # a camera stored as images: the first picture's format (png, jpeg, ...)
    width: int | None = None
    height: int | None = None
    stored: str = "video"  # "image": one picture per row of the data parquet (the frames_* counts are None)
    pictures_from_footer: int | None = None  # rows holding a picture, from the parquet footer's null count
    pictures_in_parquet: int | None = None  # the same, read from the column (--decode, or the footer has nulls)
    pictures_decoded: int | None = None  # with --decode: pictures PIL decoded


@dataclass(slots=True)
class EpisodeVerify:
    episode: int | None
    frames_expected: int
    frames_in_parquet: int | None = None
    cameras: dict[str, CameraCounts] = field(default_factory=dict)
    failures: list[CheckFailure] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No error among the findings (warnings and info do not fail an episode)."""
        return not any(f.is_error for f in self.failures)


@dataclass(slots=True, frozen=True)
class VerifyUnit:
    """Episodes that share their files, with what the dataset says about them.

    `index_from` is each episode's expected first global `index` (None when unknown);
    `file_spans` holds every span of each video file in the whole dataset (for v3.0 coverage).
    """

    location: Location  # the dataset (`pipeline.storage`): its files are read through its store
    codebase_version: str
    fps: float
    cameras: tuple[CameraInfo, ...]
    episodes: tuple[Episode, ...]
    options: VerifyOptions
    index_from: tuple[int | None, ...]
    file_spans: tuple[tuple[str, tuple[Span, ...]], ...] = ()
    float_columns: tuple[str, ...] = ()  # float features of the data parquet (checked for NaN/inf)
    image_cameras: tuple[ImageCamera, ...] = ()  # cameras stored as images in the data parquet


def verify_units(ds: Dataset, options: VerifyOptions, *, contiguous_index: bool = True) -> Iterator[VerifyUnit]:
    """One unit per set of files (v2.1: per episode), lazily, in plan order. With `contiguous_index`,
    v2.1 episodes are expected to number their global `index` consecutively in episode order
    (LeRobot's layout)."""
    cols = ds.episodes.columns
    if cols.from_index is not None:  # v3.0: each episode's span of the global index
        starts: np.ndarray | None = cols.from_index
    elif contiguous_index:
        starts = np.zeros(len(cols), dtype=np.int64)
        np.cumsum(cols.length[:-1], out=starts[1:])
    else:
        starts = None
    cached: dict[str, tuple[int, tuple[Span, ...]]] = {}  # camera -> (file group, all its spans)

    def file_spans(camera: str, position: int) -> tuple[Span, ...]:
        groups = ds.file_groups(camera)
        g = groups.of(position)
        if camera not in cached or cached[camera][0] != g:
            assert cols.cameras is not None
            c = cols.cameras[camera]
            cached[camera] = (g, tuple(Span(int(cols.index[p]), float(c.t0[p]), float(c.t1[p]), int(cols.length[p]))
                                       for p in groups.positions(g)))
        return cached[camera][1]

    floats = float_features(ds.info)
    for positions in ds.iter_file_sets():
        eps = tuple(ds.episodes[int(p)] for p in positions)
        first = int(positions[0])
        shared = tuple((ref.rel, file_spans(ref.camera, first)) for ref in eps[0].videos
                       if ref.to_timestamp is not None)
        yield VerifyUnit(
            location=ds.location, codebase_version=ds.codebase_version, fps=ds.fps, cameras=ds.cameras, episodes=eps,
            options=options, index_from=tuple(None if starts is None else int(starts[p]) for p in positions),
            file_spans=shared, float_columns=floats, image_cameras=ds.image_cameras,
        )


FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})


def float_features(info: dict[str, object]) -> tuple[str, ...]:
    """The float features of the data parquet (state, action, others), timestamp aside (its own checks)."""
    feats = info.get("features")
    if not isinstance(feats, dict):
        return ()
    return tuple(k for k, f in feats.items() if isinstance(f, dict) and f.get("dtype") in FLOAT_DTYPES
                 and k != "timestamp")


NON_FINITE = "non_finite"  # NaN or inf in a float feature (severity trains_wrong)
WORKER_LOST = "worker_lost"  # the check name of episodes whose worker died on every attempt (not a data finding)


def verify_unit_failed(unit: VerifyUnit, exc: BaseException) -> list[EpisodeVerify]:
    """Every episode of a unit failed by an exception that escaped the stage (a bug), or whose task's worker
    died on every attempt (`WorkerLost`: check `worker_lost`, naming the worker, its memory limit and the unit's
    first file, so that no caller takes it for a finding about the data)."""
    if isinstance(exc, WorkerLost):
        path = unit.episodes[0].data.rel if unit.episodes else None
        return [EpisodeVerify(ep.index, ep.frames_expected,
                              failures=[CheckFailure(WORKER_LOST, "the checks to run", str(exc), ep.index, None,
                                                     path)])
                for ep in unit.episodes]
    found = reason_of(exc)
    return [
        EpisodeVerify(ep.index, ep.frames_expected,
                      failures=[CheckFailure("stage", "the checks to run", found, ep.index, None, None)])
        for ep in unit.episodes
    ]


def verify_unit(unit: VerifyUnit) -> list[EpisodeVerify]:
    """Check the parquet rows and every camera's video of the unit's episodes."""
    results = {ep.index: EpisodeVerify(ep.index, ep.frames_expected) for ep in unit.episodes}
    file_failures: list[tuple[CheckFailure, set[int]]] = []
    for ep in unit.episodes:
        n = unit.options.expect_frames
        if n is not None and ep.frames_expected != n:
            results[ep.index].failures.append(
                CheckFailure("frames_expected", f"{n} (--expect-frames)", str(ep.frames_expected), ep.index,
                             None, None))
    if unit.options.index and unit.episodes:  # a source read by its job alone: its files' stats from listings
        store = unit.location.store()
        for rel in (unit.episodes[0].data.rel, *(ref.rel for ref in unit.episodes[0].videos)):
            store.learn_folder(rel)
    rows = _parquet(unit, results, file_failures)
    _videos(unit, results, file_failures)
    if rows is not None:  # else the data file failed already (unreadable, or without its columns)
        _images(unit, rows, results, file_failures)
    # A whole-file failure fails every episode of the unit that lives in that file; it is listed
    # once (under the episode it names) and the others are marked failed by reference.
    for failure, episodes in file_failures:
        for idx in sorted(episodes):
            r = results[idx]
            r.failures.append(failure if idx == failure.episode else _by_reference(failure, idx))
    out = [results[ep.index] for ep in unit.episodes]
    for r in out:
        r.failures = retarget(r.failures, unit.codebase_version, unit.options.reader)
    return out


def retarget(failures: list[CheckFailure], codebase_version: str, reader: str) -> list[CheckFailure]:
    """Each finding's severity for the readers the user targets (`pipeline.checks.target_severity`)."""
    out = []
    for f in failures:
        sev = target_severity(f.check, f.severity, codebase_version, reader)
        out.append(f if sev == f.severity else replace(f, severity=sev))
    return out


def _by_reference(failure: CheckFailure, episode: int) -> CheckFailure:
    return CheckFailure(failure.check, failure.expected, failure.found, episode, failure.camera, failure.path,
                        failure.severity)


@dataclass(slots=True, frozen=True)
class FileRows:
    """Where each episode of a unit lies in its data file: its row positions, and every row's frame_index."""

    of: dict[int, np.ndarray]  # episode -> its rows' positions in the file
    frame_index: np.ndarray
    total: int


def _parquet(unit: VerifyUnit, results: dict[int, EpisodeVerify],
             file_failures: list[tuple[CheckFailure, set[int]]]) -> FileRows | None:
    first = unit.episodes[0]
    everyone = {ep.index for ep in unit.episodes}
    path = StorePath(unit.location, "") / first.data.rel
    try:
        path.stat("parquet file")  # missing, not a regular file, or leaving the dataset (the store's rules)
        try:
            with path.media(block_size=STREAM_BLOCK, what="parquet file") as source:
                schema = pq.read_schema(source)
                missing = [c for c in PARQUET_COLUMNS if c not in schema.names]
                if missing:
                    file_failures.append((CheckFailure("parquet_columns", ", ".join(PARQUET_COLUMNS),
                                                       f"missing {', '.join(missing)}", first.index, None,
                                                       str(path)), everyone))
                    return None
                floats = [c for c in unit.float_columns if c in schema.names]
                if not isinstance(source, str):
                    source.seek(0)
                table = pq.read_table(source, columns=[*PARQUET_COLUMNS, *floats])
            bad_rows = {c: non_finite_rows(table[c]) for c in floats}  # row -> values not finite, per feature
        except (pa.ArrowException, OSError) as exc:
            raise EpisodeError(first.index, path, f"unreadable parquet ({exc})") from None
    except EpisodeError as exc:
        file_failures.append((CheckFailure("parquet_readable", "a readable parquet file", exc.message,
                                           first.index, None, exc.path), everyone))
        return None
    cols = {c: table[c].to_numpy(zero_copy_only=False) for c in PARQUET_COLUMNS}
    where = FileRows({}, np.asarray(cols["frame_index"]), len(cols["index"]))
    for ep, start in zip(unit.episodes, unit.index_from, strict=True):
        r = results[ep.index]
        if first.data.from_index is None:  # v2.1: the file is the episode
            rows = np.arange(len(cols["index"]))
        else:
            rows = np.flatnonzero(cols["episode_index"] == ep.index)
        r.failures.extend(_parquet_episode(ep, start, {c: v[rows] for c, v in cols.items()}, cols, unit.fps,
                                           str(path)))
        r.failures.extend(_non_finite(ep.index, rows, cols["frame_index"], bad_rows, str(path)))
        r.frames_in_parquet = len(rows)
        where.of[ep.index] = rows
    return where


def non_finite_rows(column: pa.ChunkedArray) -> np.ndarray | None:
    """Per row, how many of its values are NaN or infinite (a scalar or list<float> column); None when none is
    (the common case: one vectorised pass over the values)."""
    arr = column.combine_chunks()
    typ = arr.type
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        if pa.types.is_fixed_size_list(typ):
            values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False))
            bad = ~np.isfinite(values)
            return bad.reshape(len(arr), -1).sum(axis=1) if bad.any() else None
        values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False))
        bad = ~np.isfinite(values)
        if not bad.any():
            return None
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        offsets = offsets - offsets[0]
        per = np.add.reduceat(np.append(bad, False).astype(np.int64), offsets[:-1]) if len(arr) else bad[:0]
        return np.where(np.diff(offsets) > 0, per, 0)
    values = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))
    bad = ~np.isfinite(values)
    return bad.astype(np.int64) if bad.any() else None


def _non_finite(episode: int, rows: np.ndarray, frame_index: np.ndarray, bad_rows: dict[str, np.ndarray | None],
                path: str) -> list[CheckFailure]:
    """NaN or inf in a float feature: every reader loads it, training is poisoned (`trains_wrong`), named by
    feature, episode and first row (frame_index); the found text starts with the rows affected."""
    out = []
    for feature, per_row in bad_rows.items():
        if per_row is None:
            continue
        mine = per_row[rows]
        hit = np.flatnonzero(mine)
        if hit.size:
            k = int(hit[0])
            out.append(CheckFailure(NON_FINITE, "finite values (NaN/inf load, but poison training)",
                                    f"{hit.size} rows with NaN/inf ({int(mine.sum())} values), first at frame_index "
                                    f"{int(frame_index[rows[k]])}", episode, feature, path, Severity.TRAINS_WRONG))
    return out


def _parquet_episode(ep: Episode, start: int | None, c: dict[str, np.ndarray], whole: dict[str, np.ndarray],
                     fps: float, path: str) -> list[CheckFailure]:
    out: list[CheckFailure] = []

    def fail(check: str, expected: object, found: object) -> None:
        out.append(CheckFailure(check, str(expected), str(found), ep.index, None, path))

    n = len(c["index"])
    if n != ep.frames_expected:
        fail("frames_in_parquet", f"{ep.frames_expected} (frames_expected)", n)
    if n == 0:
        return out
    fi = c["frame_index"].astype(np.int64)
    bad = np.flatnonzero(fi != np.arange(n))
    if bad.size:
        fail("frame_index", f"0..{n - 1} in order", f"row {bad[0]} has {fi[bad[0]]} ({bad.size} rows off)")
    epi = c["episode_index"].astype(np.int64)
    others = np.flatnonzero(epi != ep.index)
    if others.size:
        fail("episode_index", ep.index, f"{epi[others[0]]} in row {others[0]} ({others.size} rows)")
    idx = c["index"].astype(np.int64)
    if start is not None:
        want = np.arange(start, start + n)
        off = np.flatnonzero(idx != want)
        if off.size:
            fail("index", f"{start}..{start + ep.frames_expected - 1}",
                 f"{idx[off[0]]} at row {off[0]} ({off.size} rows off)")
        lo, hi = ep.data.from_index, ep.data.to_index
        if lo is not None and hi is not None:  # v3.0: rows in the span must all belong to this episode
            span = whole["index"].astype(np.int64)
            inside = (span >= lo) & (span < hi)
            strangers = np.flatnonzero(inside & (whole["episode_index"] != ep.index))
            if strangers.size:
                fail("episode_index", f"{ep.index} for index {lo}..{hi - 1}",
                     f"{whole['episode_index'][strangers[0]]} at index {span[strangers[0]]} "
                     f"({strangers.size} rows)")
    elif n > 1 and np.any(np.diff(idx) != 1):
        fail("index", "consecutive values", f"a gap after {idx[np.flatnonzero(np.diff(idx) != 1)[0]]}")
    ts = c["timestamp"].astype(np.float64)
    if abs(ts[0]) > TIMESTAMP_TOLERANCE_S:
        fail("timestamp_start", "0 s", f"{ts[0]:.6f} s")
    if n > 1:
        steps = np.diff(ts)
        off = np.flatnonzero(np.abs(steps - 1.0 / fps) > TIMESTAMP_TOLERANCE_S)
        if off.size:
            k = int(off[0])
            fail("timestamp_step", f"{1.0 / fps:.6f} s (1/fps, within {TIMESTAMP_TOLERANCE_S:g} s)",
                 f"{steps[k]:.6f} s after frame_index {fi[k]} ({off.size} steps off)")
    return out


def _inspect_camera(path: StorePath, expect: VideoExpect, spans: list[Span], cam: str,
                    info: CameraInfo | None, codebase_version: str,
                    indexed: IndexedVideo | None = None) -> VideoCheck:
    """`inspect_video`, except that a depth map (flagged or declared in info.json, or stored in more than 8 bits
    of gray) is checked as the copy prep makes of it: not against --size / --all-intra. A depth map found by
    its file's pixel format only is named by an info finding (`depth_copy`). `indexed`: the file's header-only
    probe and display matrix, checked instead of a demux."""
    episode = spans[0].episode if spans else None
    try:
        probe = indexed.probe if indexed is not None else probe_video(path, episode=episode)
    except EpisodeError as exc:
        unreadable = CheckFailure("readable", "a readable video", exc.message, episode, cam, str(path))
        return VideoCheck(str(path), None, [unreadable], [])
    known = info is not None and info.depth
    if not (known or is_high_bit_gray(probe.pix_fmt)) or (expect.size is None and not expect.all_intra):
        checked = inspect_probe(probe, expect, spans, camera=cam)
    else:
        checked = inspect_probe(probe, replace(expect, size=None, all_intra=False), spans, camera=cam)
        if not known:
            checked.failures.append(CheckFailure("depth_copy", "--size / --all-intra", f"a depth map "
                                                 f"({probe.pix_fmt}) prep copies unchanged: checked as a copy, not "
                                                 "against these rules", episode, cam, str(path), Severity.INFO))
    rotation = rotation_finding(probe, codebase_version, cam, episode,
                                matrix=indexed.matrix if indexed is not None else READ_IT)
    if rotation is not None:
        checked.failures.append(rotation)
    return checked


READ_IT = (0,)  # rotation_finding's default: read the matrix from the file


def rotation_finding(probe: VideoProbe, codebase_version: str, camera: str | None,
                     episode: int | None, *, matrix: tuple[int, ...] | None = READ_IT) -> CheckFailure | None:
    """A display matrix: every reader loads the file, but not all hand back the same orientation (lerobot
    0.3.x/0.4.x and 0.6.x's pyav backend: the coded frames; 0.6.x's torchcodec 0.11: rotated). `matrix`: the
    file's, when already read (None: it has none)."""
    m = display_matrix(probe.source or probe.path) if matrix is READ_IT else matrix
    severity = found_severity("display_rotation", codebase_version)
    if m is None or severity is None:
        return None
    coded = f"{probe.width}x{probe.height}"
    shown = f"{probe.height}x{probe.width}" if swaps_sides(m) else coded
    readers = format_of(codebase_version).rotation_readers(coded, shown, describe(m))
    return CheckFailure("display_rotation", "no display matrix (every reader hands back the same frame)",
                        f"{describe(m)}: {readers}; prep reencode writes display orientation, no matrix",
                        episode, camera, probe.path, severity)


@dataclass(slots=True)
class _CameraFindings:
    """What the checks of one camera's file found for a unit: findings about the whole file (they fail every
    episode of the unit), findings about one episode, and each episode's counts."""

    whole: list[CheckFailure] = field(default_factory=list)
    episodes: list[CheckFailure] = field(default_factory=list)
    counts: dict[int, CameraCounts] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return bool(self.whole or self.episodes)


def _videos(unit: VerifyUnit, results: dict[int, EpisodeVerify],
            file_failures: list[tuple[CheckFailure, set[int]]]) -> None:
    opts = unit.options
    first = unit.episodes[0]
    everyone = {ep.index for ep in unit.episodes}
    for ref0 in first.videos:
        found = None
        if opts.indexable:  # the index first: a demux only where it finds anything, or cannot stand for one
            found = _camera(unit, ref0.camera, ref0.rel, results, indexed=True)
            if found is not None and found.found:
                found = None
        if found is None:
            found = _camera(unit, ref0.camera, ref0.rel, results)
        assert found is not None
        file_failures.extend((f, everyone) for f in found.whole)
        for f in found.episodes:
            results[f.episode if f.episode in results else first.index].failures.append(f)
        for episode, counts in found.counts.items():
            results[episode].cameras[ref0.camera] = counts


def _camera(unit: VerifyUnit, cam: str, rel: str, results: dict[int, EpisodeVerify], *,
            indexed: bool = False) -> _CameraFindings | None:
    """The checks of one camera's file for the unit's episodes, from a demux of it, or with `indexed` from its
    container index alone (None where the index cannot stand for a demux: `pipeline.video.indexed`)."""
    root = StorePath(unit.location, "")
    opts = unit.options
    expect = VideoExpect(fps=unit.fps, size=opts.size, all_intra=opts.all_intra, decode=opts.decode)
    declared = {c.key: c for c in unit.cameras}
    all_spans = dict(unit.file_spans)
    first = unit.episodes[0]
    out = _CameraFindings()

    def add(f: CheckFailure) -> None:
        if is_file_check(f.check) or f.episode is None:
            out.whole.append(f)
        else:
            out.episodes.append(f)

    spans = [Span(ep.index, ep.video(cam).from_timestamp, ep.video(cam).to_timestamp, ep.frames_expected)
             for ep in unit.episodes]
    path = root / rel
    try:
        path.store.check(path.rel)  # inside the dataset (its links too): else not read at all
    except OutsideRoot as exc:
        if indexed:
            return None
        add(CheckFailure("readable", "a video inside the dataset", exc.message, first.index, cam, exc.path))
        return out
    header = None
    if indexed:
        header = probe_indexed(path, episode=spans[0].episode if spans else None)
        if header is None:
            return None
    checked = _inspect_camera(path, expect, spans, cam, declared.get(cam), unit.codebase_version, header)
    for f in checked.failures:
        add(f)
    if checked.probe is None:
        return out
    probe = checked.probe
    info = declared.get(cam)
    if info is not None and info.width and info.height and (info.width, info.height) != (probe.width,
                                                                                          probe.height):
        out.whole.append(CheckFailure("declared_size", f"{info.width}x{info.height} (info.json)",
                                      f"{probe.width}x{probe.height}", first.index, cam, str(path)))
    if info is not None and info.codec and info.codec != probe.codec:  # LeRobot decodes what the stream is
        out.whole.append(CheckFailure("declared_codec", f"{info.codec} (info.json)", probe.codec, first.index,
                                      cam, str(path), Severity.WARNING))
    if rel in all_spans:
        for f in check_coverage(probe, list(all_spans[rel]), camera=cam):
            if f.episode in results:  # reported by the unit that holds the blamed episode
                out.episodes.append(f)
    whole_file = len(all_spans.get(rel, ())) <= 1  # v2.1, or a v3.0 file of one episode
    for span_counts in checked.spans:
        if span_counts.episode not in results:
            continue
        out.counts[span_counts.episode] = CameraCounts(
            frames_from_header=probe.frames_from_header if whole_file else None,
            frames_from_packets=span_counts.frames_from_packets,
            frames_decoded=span_counts.frames_decoded,
            keyframes=span_counts.keyframes,
            codec=probe.codec,
            width=probe.width,
            height=probe.height,
        )
    return out


# ---- cameras stored as images ------------------------------------------------------------------------

PICTURE_BATCH = 16  # rows of one image column held at once: memory bounded whatever the file's size


def image_column_problem(schema: pa.Schema, key: str) -> str | None:
    """Why the data file's schema holds no picture column for `key` (a struct with a binary `bytes`, as
    datasets' `Image` feature stores it), or None."""
    if key not in schema.names:
        return "no such column"
    typ = schema.field(key).type
    if not pa.types.is_struct(typ):
        return f"a column of type {typ}"
    child = next((typ.field(i) for i in range(typ.num_fields) if typ.field(i).name == "bytes"), None)
    if child is None or not (pa.types.is_binary(child.type) or pa.types.is_large_binary(child.type)):
        return f"a column of type {typ}"
    return None


def footer_nulls(pf: pq.ParquetFile, key: str) -> int | None:
    """Rows of the file whose picture bytes are null, from the footer's statistics (a null struct counts: its
    leaf is undefined); None when a row group keeps no null count."""
    md = pf.metadata
    leaf = next((i for i in range(md.num_columns) if md.schema.column(i).path == f"{key}.bytes"), None)
    if leaf is None:
        return None
    total = 0
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(leaf).statistics
        if st is None or not st.has_null_count:
            return None
        total += st.null_count
    return total


def open_picture(data: bytes, decode: bool) -> tuple[str | None, int, int, int]:
    """(format, width, height, channels) of an encoded picture: from its header, or with `decode` from every
    pixel (PIL, as datasets' `Image` feature decodes it). Raises ValueError naming why it cannot."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            if decode:
                im.load()
            return (im.format.lower() if im.format else None), im.width, im.height, len(im.getbands())
    except UnidentifiedImageError:
        raise ValueError("not a picture PIL identifies") from None
    except Exception as exc:  # foreign bytes: whatever PIL raises here, the reader raises at that sample too
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def stream_pictures(pf: pq.ParquetFile, key: str, wanted: np.ndarray | None,
                    visit: Callable[[int, dict[str, object] | None], None]) -> None:
    """Call `visit(row, value)` for every row of the image column (`wanted` None) or the sorted `wanted` rows,
    reading PICTURE_BATCH rows at a time through the row groups that hold them (value: the row's
    `{bytes, path}`, None for a null struct)."""
    md = pf.metadata
    start = 0
    for g in range(md.num_row_groups):
        n = md.row_group(g).num_rows
        lo, hi = start, start + n
        start = hi
        if wanted is not None:
            inside = wanted[(wanted >= lo) & (wanted < hi)]
            if not inside.size:
                continue
            mine: set[int] | None = {int(x) for x in inside}
            last = int(inside[-1])
        else:
            mine, last = None, hi - 1
        row = lo
        for batch in pf.iter_batches(batch_size=PICTURE_BATCH, row_groups=[g], columns=[key]):
            col = batch.column(0)
            for k in range(batch.num_rows):
                if mine is None or (row + k) in mine:
                    visit(row + k, col[k].as_py())
            row += batch.num_rows
            if row > last:
                break


def _footer_pictures(nulls: int | None, rows: int, whole_file: bool) -> int | None:
    """An episode's pictures as the footer says: its rows less the file's nulls when the file is the episode
    (v2.1), its rows when the file has no null; None when the footer cannot tell (no null count, or nulls in a
    file of several episodes: the rows are then named from the column)."""
    if nulls is None:
        return None
    if whole_file:
        return rows - nulls
    return rows if nulls == 0 else None


@dataclass(slots=True)
class _Tally:
    """What one episode's pictures of one camera showed: counts, and the first row of each kind of finding."""

    pictures: int = 0
    decoded: int = 0
    nulls: int = 0
    first_null: tuple[int, str] | None = None
    unreadable: int = 0
    first_unreadable: tuple[int, str] | None = None
    wrong: int = 0
    first_wrong: tuple[int, str] | None = None
    first: tuple[str | None, int, int] | None = None  # the first picture's format, width, height


def _null_text(value: dict[str, object] | None) -> str:
    if value is None:
        return "a null value (the reader hands None)"
    path = value.get("path")
    if path is None:
        return "bytes and path null (the reader raises ValueError)"
    return f"bytes null, path {printable(repr(path))} (the reader opens that file from its working folder)"


def _images(unit: VerifyUnit, rows: FileRows, results: dict[int, EpisodeVerify],
            file_failures: list[tuple[CheckFailure, set[int]]]) -> None:
    """Each image camera of the unit's data file: the column, a picture per row, the first picture's header
    against the declared shape; with --decode every picture decoded (size, channels)."""
    if not unit.image_cameras:
        return
    first = unit.episodes[0]
    everyone = {ep.index for ep in unit.episodes}
    path = StorePath(unit.location, "") / first.data.rel
    try:
        with path.media(block_size=STREAM_BLOCK, what="parquet file") as source:
            pf = pq.ParquetFile(source)
            for cam in unit.image_cameras:
                problem = image_column_problem(pf.schema_arrow, cam.key)
                if problem is not None:
                    file_failures.append((CheckFailure(
                        "image_column", f"a {{bytes, path}} picture column {printable(repr(cam.key))} (dtype image "
                        "in info.json)", problem, first.index, cam.key, str(path)), everyone))
                    continue
                _image_camera(pf, cam, unit, rows, results, str(path))
    except (pa.ArrowException, OSError) as exc:
        file_failures.append((CheckFailure("parquet_readable", "a readable parquet file",
                                           f"unreadable parquet ({printable(exc)})", first.index, None, str(path)),
                              everyone))


def _image_camera(pf: pq.ParquetFile, cam: ImageCamera, unit: VerifyUnit, rows: FileRows,
                  results: dict[int, EpisodeVerify], path: str) -> None:
    decode = unit.options.decode
    nulls = footer_nulls(pf, cam.key)
    owner = np.full(rows.total, -1, dtype=np.int64)
    for ep, at in rows.of.items():
        owner[at] = ep
    tallies = {ep: _Tally() for ep in rows.of}
    whole = decode or nulls != 0  # every row read: to decode, or to find the rows without a picture
    starts = np.array(sorted(int(at[0]) for at in rows.of.values() if at.size), dtype=np.int64)

    def visit(row: int, value: dict[str, object] | None) -> None:
        ep = int(owner[row])
        if ep < 0:
            return
        t = tallies[ep]
        fi = int(rows.frame_index[row])
        data = value.get("bytes") if value is not None else None
        if not isinstance(data, bytes):
            t.nulls += 1
            t.first_null = t.first_null or (fi, _null_text(value))
            return
        t.pictures += 1
        if not decode and t.first is not None:
            return  # without --decode only the first picture of the episode is opened (its header)
        try:
            fmt, w, h, c = open_picture(data, decode)
        except ValueError as exc:
            t.unreadable += 1
            t.first_unreadable = t.first_unreadable or (fi, printable(exc))
            return
        t.decoded += decode
        if t.first is None:
            t.first = (fmt, w, h)
        off = [(got, want) for got, want in ((h, cam.height), (w, cam.width), (c, cam.channels)) if want is not None]
        if any(got != want for got, want in off):
            t.wrong += 1
            t.first_wrong = t.first_wrong or (fi, f"{h}x{w}x{c}")

    stream_pictures(pf, cam.key, None if whole else starts, visit)
    readers = " and ".join(r.label for r in reader_lines(unit.codebase_version)) or "the readers"
    declared = "x".join("?" if v is None else str(v) for v in (cam.height, cam.width, cam.channels))
    for ep, t in tallies.items():
        r = results[ep]
        n = int(rows.of[ep].size)
        footer = _footer_pictures(nulls, n, whole_file=unit.episodes[0].data.from_index is None)
        fmt, w, h = t.first or (None, None, None)
        r.cameras[cam.key] = CameraCounts(codec=fmt, width=w, height=h, stored="image", pictures_from_footer=footer,
                                          pictures_in_parquet=t.pictures + t.unreadable if whole else None,
                                          pictures_decoded=t.decoded if decode else None)
        have = footer if footer is not None else t.pictures + t.unreadable
        if t.nulls or have != n:
            where = f", first at frame_index {t.first_null[0]}: {t.first_null[1]}" if t.first_null else ""
            r.failures.append(CheckFailure("pictures_from_footer", f"{n} (one picture per row)",
                                           f"{have} pictures, {n - have} rows without one{where}", ep, cam.key, path))
        if t.first_unreadable is not None:
            what = "decodes" if decode else "opens"
            r.failures.append(CheckFailure("picture_readable", f"a picture PIL {what} in every row",
                                           f"frame_index {t.first_unreadable[0]}: {t.first_unreadable[1]}"
                                           + (f" ({t.unreadable} pictures)" if t.unreadable > 1 else ""),
                                           ep, cam.key, path))
        if t.first_wrong is not None:
            some = f"{t.wrong} pictures" if decode else "the first picture"
            r.failures.append(CheckFailure(
                "picture_shape", f"{declared} (info.json shape, height x width x channels)",
                f"{t.first_wrong[1]} at frame_index {t.first_wrong[0]} ({some}): {readers} load it at that shape, "
                "the policy is configured for the declared one", ep, cam.key, path, Severity.WARNING))
