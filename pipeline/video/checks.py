"""Checks of one video file against what the dataset expects of it: one implementation, used by
`prep verify` on any dataset and by `prep reencode` on each file it writes before renaming it.

A file holds one episode (v2.1) or several consecutive spans (v3.0); each span is checked on
its own: frame count, pts on the i/fps grid from the span's start, keyframes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np

from pipeline.checks import FAILING, Severity
from pipeline.errors import EpisodeError
from pipeline.storage import STREAM_BLOCK, FileProblem, Source, as_file
from pipeline.video.probe import VideoProbe, probe_video

TIMESTAMP_TOLERANCE_S = 1e-4  # LeRobot's default tolerance_s

# Severity of a finding, by what LeRobot's reader does with it (docs/verify.md, "Verdicts"; every check and its
# severity per reader is declared in `pipeline.checks`): error: the reader refuses the dataset, raises at some
# sample, or hands a frame that is not the row's; trains_wrong: it loads, but the values poison training;
# warning: metadata inconsistent, loading unaffected (LeRobot's own edit tools may trip over it); info: worth
# knowing, nothing wrong.


@dataclass(slots=True, frozen=True)
class Span:
    """One episode's frames in a file: [from_timestamp, to_timestamp) (None = to the end)."""

    episode: int | None
    from_timestamp: float
    to_timestamp: float | None
    frames_expected: int | None


@dataclass(slots=True, frozen=True)
class VideoExpect:
    fps: float
    size: tuple[int, int] | None = None  # (width, height)
    all_intra: bool = False
    decode: bool = False


@dataclass(slots=True, frozen=True)
class CheckFailure:
    check: str
    expected: str
    found: str
    episode: int | None = None
    camera: str | None = None
    path: str | None = None
    severity: Severity = Severity.ERROR

    @property
    def is_error(self) -> bool:
        """An error or trains_wrong: it fails the episode and the run (exit 1), and a file prep writes."""
        return self.severity in FAILING

    def line(self) -> str:
        ep = f"episode {self.episode}" if self.episode is not None else "dataset"
        cam = f" {self.camera}" if self.camera else ""
        tag = "" if self.is_error else f" [{self.severity}]"
        return f"{ep}{cam}: {self.check}{tag}: expected {self.expected}, found {self.found} ({self.path})"


def failing(failures: list[CheckFailure]) -> list[CheckFailure]:
    """The findings that refuse a file prep writes (reencode, convert, edit): errors (and trains_wrong), never a
    warning or an info finding, as in `prep verify`."""
    return [f for f in failures if f.is_error]


@dataclass(slots=True)
class DecodeScan:
    """A full decode of a file: each frame's presentation time (s), the frames the decoder flagged as
    corrupt (damage it concealed), the first frame whose picture size differs from the first frame's,
    and the error that stopped decoding early (None when the whole stream decoded)."""

    times: list[float]
    corrupt: list[int]
    size_change: tuple[int, int, int] | None  # (frame number, width, height)
    first_size: tuple[int, int] | None
    error: str | None


def decode_scan(path: Source | str) -> DecodeScan:
    """Decode every frame as LeRobot's decoders do (edit lists honoured), streaming the file through its store.
    Concealed damage is what FFmpeg's decoders flag per frame (AV_FRAME_FLAG_CORRUPT: error concealment ran on
    the frame)."""
    scan = DecodeScan([], [], None, None, None)
    try:
        with as_file(path).media(block_size=STREAM_BLOCK, what="video file") as media, av.open(media) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            tb = stream.time_base
            for frame in container.decode(stream):
                k = len(scan.times)
                if frame.pts is not None and tb is not None:
                    scan.times.append(float(frame.pts * tb))
                else:
                    scan.times.append(float(frame.time) if frame.time is not None else float("nan"))
                if frame.is_corrupt:
                    scan.corrupt.append(k)
                size = (frame.width, frame.height)
                if scan.first_size is None:
                    scan.first_size = size
                elif size != scan.first_size and scan.size_change is None:
                    scan.size_change = (k, *size)
    except FileProblem as exc:
        scan.error = f"decode failed after {len(scan.times)} frames ({exc.message})"
    except (av.FFmpegError, OSError, ValueError, IndexError) as exc:
        scan.error = f"decode failed after {len(scan.times)} frames ({type(exc).__name__}: {exc})"
    return scan


def decoded_times(path: Source | str) -> tuple[list[float], str | None]:
    """Decode every frame: the presentation time (s) of each decoded frame, and the error that
    stopped decoding early (None when the whole stream decoded)."""
    scan = decode_scan(path)
    return scan.times, scan.error


def frames_decoded(path: Source | str) -> int:
    """Decode every frame (catches corrupt packets a demux cannot see); raises EpisodeError."""
    times, error = decoded_times(path)
    if error is not None:
        raise EpisodeError(None, str(as_file(path)), error)
    return len(times)


def nominal_fps(probe: VideoProbe) -> float:
    """The frame rate from the median interval between presentation times (the header's average rate
    when there are fewer than two frames). A dropped or added frame changes the average rate of the
    whole file but not this: the gap itself is a `pts_grid` failure of the episode that holds it."""
    steps = np.diff(probe.pts)
    steps = np.sort(steps[steps > 0])
    if not len(steps):
        return probe.fps
    return 1.0 / float(steps[len(steps) // 2])


def episode_slice(probe: VideoProbe, span: Span) -> tuple[int, int]:
    """The packets (sorted by pts) that hold a span's frames as LeRobot finds them: it looks frame k of an
    episode up at `from_timestamp + timestamp_k` and never reads `to_timestamp`, so with a known length
    the episode is the `frames_expected` frames from `from_timestamp` (fewer at the end of the file);
    without one, [from_timestamp, to_timestamp)."""
    lo, hi = probe.span_slice(span.from_timestamp, span.to_timestamp, TIMESTAMP_TOLERANCE_S)
    if span.frames_expected is not None and span.to_timestamp is not None:
        hi = min(lo + span.frames_expected, len(probe.pts))
    return lo, hi


def in_span(t: float, span: Span, tolerance: float = TIMESTAMP_TOLERANCE_S) -> bool:
    """Whether a time (s) falls in the span [from_timestamp, to_timestamp)."""
    if t < span.from_timestamp - tolerance:
        return False
    return span.to_timestamp is None or t < span.to_timestamp - tolerance


def check_probe(
    probe: VideoProbe,
    expect: VideoExpect,
    spans: list[Span],
    *,
    camera: str | None = None,
) -> list[CheckFailure]:
    """Failures of an already-probed file (empty list = the file passes)."""
    return inspect_probe(probe, expect, spans, camera=camera).failures


@dataclass(slots=True, frozen=True)
class SpanCounts:
    """One span's frame counts by origin: packets (demux), keyframes, and (with decode) frames decoded."""

    episode: int | None
    frames_from_packets: int
    keyframes: int
    frames_decoded: int | None = None


@dataclass(slots=True)
class VideoCheck:
    """A checked file: its probe (None if unreadable), its failures and the counts of each span."""

    path: str
    probe: VideoProbe | None
    failures: list[CheckFailure]
    spans: list[SpanCounts]


def inspect_probe(
    probe: VideoProbe,
    expect: VideoExpect,
    spans: list[Span],
    *,
    camera: str | None = None,
) -> VideoCheck:
    """`check_probe` plus the per-span counts it compared."""
    out: list[CheckFailure] = []
    first_ep = spans[0].episode if spans else None

    def fail(check: str, expected: object, found: object, episode: int | None = first_ep) -> None:
        out.append(CheckFailure(check, str(expected), str(found), episode, camera, probe.path))

    if probe.frames_from_header != probe.frames_from_packets + probe.frames_discarded:
        fail("frames_from_header", f"{probe.frames_from_packets} (frames_from_packets)",
             probe.frames_from_header)
    elif probe.frames_discarded:
        out.append(CheckFailure("edit_list", f"{probe.frames_from_packets} frames presented",
                                f"{probe.frames_discarded} more packets hidden by the edit list (pre-roll; the "
                                "decoders skip them)", first_ep, camera, probe.path, Severity.INFO))
    rate = nominal_fps(probe)
    if not len(probe.pts):
        pass  # no frame, no rate (the header's would be 1/time_base): the frame counts name the problem
    elif abs(rate - expect.fps) > 1e-3:
        fail("fps", f"{expect.fps:g}", f"{rate:g} (median frame interval)")
    if expect.size is not None and (probe.width, probe.height) != expect.size:
        fail("size", f"{expect.size[0]}x{expect.size[1]}", f"{probe.width}x{probe.height}")
    step = 1.0 / expect.fps
    counts: list[SpanCounts] = []
    for span in spans:
        t1 = span.to_timestamp
        lo, hi = episode_slice(probe, span)
        pts = probe.pts[lo:hi]
        if span.frames_expected is not None and len(pts) != span.frames_expected:
            fail("frames_from_packets", f"{span.frames_expected} (frames_expected)", len(pts), span.episode)
        off = np.flatnonzero(np.abs(pts - (span.from_timestamp + np.arange(len(pts)) * step)) > TIMESTAMP_TOLERANCE_S)
        if len(off):
            i, t = int(off[0]), float(pts[off[0]])
            fail("pts_grid", f"frame {i} at {span.from_timestamp + i * step:.6f} s",
                 f"{t:.6f} s ({len(off)} frames off the 1/fps grid)", span.episode)
            window = probe.frames_in_span(span.from_timestamp, t1, TIMESTAMP_TOLERANCE_S)
            if t1 is not None and span.frames_expected is not None and window != span.frames_expected:
                # frames off the grid and a span that does not hold the length: a dropped or added frame
                fail("frames_from_packets", f"{span.frames_expected} (frames_expected)",
                     f"{window} in [from_timestamp, to_timestamp)", span.episode)
        if t1 is not None and span.frames_expected is not None:
            want = span.from_timestamp + span.frames_expected * step
            if abs(t1 - want) > TIMESTAMP_TOLERANCE_S:
                # LeRobot 0.4.4 loads every frame (it never reads to_timestamp), but its delete/split/merge
                # (dataset_tools.py) cut episodes by it and would drop or add a frame.
                out.append(CheckFailure("to_timestamp", f"{want:.6f} s (from_timestamp + length/fps)",
                                        f"{t1:.6f} s", span.episode, camera, probe.path, Severity.WARNING))
        keys = 0 if hi <= lo else \
            int(np.searchsorted(probe.keyframe_pts, probe.pts[hi - 1] + 1e-9, side="right")
                - np.searchsorted(probe.keyframe_pts, probe.pts[lo] - 1e-9, side="left"))
        if expect.all_intra and keys != len(pts):
            fail("keyframes", f"{len(pts)} (every frame)", keys, span.episode)
        counts.append(SpanCounts(span.episode, len(pts), keys))
    if expect.decode:
        counts = _check_decode(probe, spans, counts, fail)
    return VideoCheck(probe.path, probe, out, counts)


def _check_decode(
    probe: VideoProbe, spans: list[Span], counts: list[SpanCounts], fail: Callable[..., None]
) -> list[SpanCounts]:
    """Decode the file; compare decoded frames with packets (per span when the file holds several),
    and flag frames the decoder concealed damage in and a picture size that changes mid-stream."""
    scan = decode_scan(probe.source or probe.path)
    times, error = scan.times, scan.error
    decoded = np.asarray(times, dtype=np.float64)
    order = np.argsort(decoded, kind="stable")  # NaN (no timestamp) sorts last
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))

    def owner(k: int) -> int | None:
        """The episode whose span holds decoded frame k (by presentation order)."""
        r = int(rank[k]) if k < len(rank) else -1
        for span in spans:
            lo, hi = episode_slice(probe, span)
            if lo <= r < hi:
                return span.episode
        return spans[0].episode if spans else None

    if scan.corrupt:
        k = scan.corrupt[0]
        fail("decode_concealed", "frames decoded without damage",
             f"{len(scan.corrupt)} frames flagged corrupt by the decoder (first: frame {int(rank[k])})", owner(k))
    if scan.size_change is not None and scan.first_size is not None:
        k, w, h = scan.size_change
        fail("decoded_size", f"{scan.first_size[0]}x{scan.first_size[1]} (every frame)",
             f"{w}x{h} from frame {int(rank[k])}", owner(k))
    elif scan.first_size is not None and scan.first_size != (probe.width, probe.height):
        fail("decoded_size", f"{probe.width}x{probe.height} (header)", f"{scan.first_size[0]}x{scan.first_size[1]}")
    expected = f"{probe.frames_from_packets} (frames_from_packets)"
    if len(spans) <= 1:
        if error is not None:
            fail("frames_decoded", expected, error)
        elif len(times) != probe.frames_from_packets:
            fail("frames_decoded", expected, len(times))
        return [SpanCounts(c.episode, c.frames_from_packets, c.keyframes, len(times)) for c in counts]
    out: list[SpanCounts] = []
    short = False
    ordered = decoded[order]
    for span, c in zip(spans, counts, strict=True):
        lo = int(np.searchsorted(ordered, span.from_timestamp - TIMESTAMP_TOLERANCE_S, side="left"))
        if span.frames_expected is not None and span.to_timestamp is not None:
            hi = min(lo + span.frames_expected, len(ordered))
        else:
            hi = len(ordered) if span.to_timestamp is None else \
                int(np.searchsorted(ordered, span.to_timestamp - TIMESTAMP_TOLERANCE_S, side="left"))
        n = max(0, hi - lo)
        if n != c.frames_from_packets:
            short = True
            fail("frames_decoded", f"{c.frames_from_packets} (frames_from_packets)",
                 n if error is None else f"{n} ({error})", span.episode)
        out.append(SpanCounts(c.episode, c.frames_from_packets, c.keyframes, n))
    if error is not None and not short:
        fail("frames_decoded", expected, error)
    return out


def check_coverage(
    probe: VideoProbe, spans: list[Span], *, camera: str | None = None
) -> list[CheckFailure]:
    """Frames of a file that no span claims (v3.0: an extra frame after the last episode, or in a gap).

    Pass every span of the file. Each orphan run is blamed on the episode whose span precedes it.
    Cost: O(packets + spans x log packets).
    """
    claims = np.zeros(len(probe.pts) + 1, dtype=np.int64)
    slices = []
    for s in spans:
        lo, hi = episode_slice(probe, s)
        claims[lo] += 1
        claims[hi] -= 1
        slices.append((lo, hi, s))
    out = _overlaps(probe, slices, camera)
    orphans = probe.pts[np.cumsum(claims[:-1]) <= 0]
    if not len(orphans):
        return out
    first = float(orphans[0])
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    starts = np.array([s.from_timestamp for s in ordered], dtype=np.float64)
    k = int(np.searchsorted(starts, first + TIMESTAMP_TOLERANCE_S, side="right")) - 1
    episode = (ordered[k] if k >= 0 else ordered[0]).episode if ordered else None
    # LeRobot never reads a frame no episode claims: loading is unaffected (a warning).
    out.append(CheckFailure("frames_outside_spans", "0 (every frame in an episode's span)",
                            f"{len(orphans)} (first at {first:.6f} s)", episode, camera, probe.path, Severity.WARNING))
    return out


def _overlaps(probe: VideoProbe, slices: list[tuple[int, int, Span]], camera: str | None) -> list[CheckFailure]:
    """An episode whose `length` frames from its from_timestamp run into the next episode's: LeRobot hands
    the other episode's frames as this one's (a recorder that dropped frames but kept the row count)."""
    out = []
    ordered = sorted(slices, key=lambda x: (x[0], x[1]))
    for (lo, hi, s), (lo2, _hi2, s2) in itertools.pairwise(ordered):
        if hi > lo2 and lo2 >= lo:
            out.append(CheckFailure("frames_overlap", f"{s.frames_expected} frames of its own from "
                                    f"{s.from_timestamp:.6f} s", f"the last {hi - lo2} of them are episode "
                                    f"{s2.episode}'s (from {s2.from_timestamp:.6f} s)", s.episode, camera,
                                    probe.path))
    return out


def check_video(
    path: Source | str, expect: VideoExpect, spans: list[Span], *, camera: str | None = None
) -> tuple[VideoProbe | None, list[CheckFailure]]:
    """Probe and check a file; an unreadable file is one `readable` failure."""
    result = inspect_video(path, expect, spans, camera=camera)
    return result.probe, result.failures


def inspect_video(
    path: Source | str, expect: VideoExpect, spans: list[Span], *, camera: str | None = None
) -> VideoCheck:
    """`check_video` plus the per-span counts (no counts when the file is unreadable)."""
    episode = spans[0].episode if spans else None
    try:
        probe = probe_video(path, episode=episode)
    except EpisodeError as exc:
        shown = str(as_file(path))
        unreadable = CheckFailure("readable", "a readable video", exc.message, episode, camera, shown)
        return VideoCheck(shown, None, [unreadable], [])
    return inspect_probe(probe, expect, spans, camera=camera)
