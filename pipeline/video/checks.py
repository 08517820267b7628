"""Checks of one video file against what the dataset expects of it: one implementation, used by
`prep verify` on any dataset and by `prep reencode` on each file it writes before renaming it.

A file holds one episode (v2.1) or several consecutive spans (v3.0); each span is checked on
its own: frame count, pts on the i/fps grid from the span's start, keyframes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from pipeline.errors import EpisodeError
from pipeline.video.probe import VideoProbe, probe_video

TIMESTAMP_TOLERANCE_S = 1e-4  # LeRobot's default tolerance_s


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

    def line(self) -> str:
        ep = f"episode {self.episode}" if self.episode is not None else "dataset"
        cam = f" {self.camera}" if self.camera else ""
        return f"{ep}{cam}: {self.check}: expected {self.expected}, found {self.found} ({self.path})"


def decoded_times(path: Path | str) -> tuple[list[float], str | None]:
    """Decode every frame: the presentation time (s) of each decoded frame, and the error that
    stopped decoding early (None when the whole stream decoded)."""
    times: list[float] = []
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            tb = stream.time_base
            for frame in container.decode(stream):
                if frame.pts is not None and tb is not None:
                    times.append(float(frame.pts * tb))
                else:
                    times.append(float(frame.time) if frame.time is not None else float("nan"))
    except (av.FFmpegError, OSError, ValueError, IndexError) as exc:
        return times, f"decode failed after {len(times)} frames ({type(exc).__name__}: {exc})"
    return times, None


def frames_decoded(path: Path | str) -> int:
    """Decode every frame (catches corrupt packets a demux cannot see); raises EpisodeError."""
    times, error = decoded_times(path)
    if error is not None:
        raise EpisodeError(None, path, error)
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

    if probe.frames_from_header != probe.frames_from_packets:
        fail("frames_from_header", f"{probe.frames_from_packets} (frames_from_packets)",
             probe.frames_from_header)
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
        lo, hi = probe.span_slice(span.from_timestamp, t1, TIMESTAMP_TOLERANCE_S)
        pts = probe.pts[lo:hi]
        if span.frames_expected is not None and len(pts) != span.frames_expected:
            fail("frames_from_packets", f"{span.frames_expected} (frames_expected)", len(pts), span.episode)
        off = np.flatnonzero(np.abs(pts - (span.from_timestamp + np.arange(len(pts)) * step)) > TIMESTAMP_TOLERANCE_S)
        if len(off):
            i, t = int(off[0]), float(pts[off[0]])
            fail("pts_grid", f"frame {i} at {span.from_timestamp + i * step:.6f} s",
                 f"{t:.6f} s ({len(off)} frames off the 1/fps grid)", span.episode)
        keys = probe.keyframes_in_span(span.from_timestamp, t1, TIMESTAMP_TOLERANCE_S)
        if expect.all_intra and keys != len(pts):
            fail("keyframes", f"{len(pts)} (every frame)", keys, span.episode)
        counts.append(SpanCounts(span.episode, len(pts), keys))
    if expect.decode:
        counts = _check_decode(probe, spans, counts, fail)
    return VideoCheck(probe.path, probe, out, counts)


def _check_decode(
    probe: VideoProbe, spans: list[Span], counts: list[SpanCounts], fail: Callable[..., None]
) -> list[SpanCounts]:
    """Decode the file; compare decoded frames with packets, per span when the file holds several."""
    times, error = decoded_times(probe.path)
    expected = f"{probe.frames_from_packets} (frames_from_packets)"
    if len(spans) <= 1:
        if error is not None:
            fail("frames_decoded", expected, error)
        elif len(times) != probe.frames_from_packets:
            fail("frames_decoded", expected, len(times))
        return [SpanCounts(c.episode, c.frames_from_packets, c.keyframes, len(times)) for c in counts]
    out: list[SpanCounts] = []
    short = False
    decoded = np.sort(np.asarray(times, dtype=np.float64))  # NaN (no timestamp) sorts last, as in_span counts it
    for span, c in zip(spans, counts, strict=True):
        lo = int(np.searchsorted(decoded, span.from_timestamp - TIMESTAMP_TOLERANCE_S, side="left"))
        hi = len(decoded) if span.to_timestamp is None else \
            int(np.searchsorted(decoded, span.to_timestamp - TIMESTAMP_TOLERANCE_S, side="left"))
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
    for s in spans:
        lo, hi = probe.span_slice(s.from_timestamp, s.to_timestamp, TIMESTAMP_TOLERANCE_S)
        claims[lo] += 1
        claims[hi] -= 1
    orphans = probe.pts[np.cumsum(claims[:-1]) <= 0]
    if not len(orphans):
        return []
    first = float(orphans[0])
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    starts = np.array([s.from_timestamp for s in ordered], dtype=np.float64)
    k = int(np.searchsorted(starts, first + TIMESTAMP_TOLERANCE_S, side="right")) - 1
    episode = (ordered[k] if k >= 0 else ordered[0]).episode if ordered else None
    return [CheckFailure("frames_outside_spans", "0 (every frame in an episode's span)",
                         f"{len(orphans)} (first at {first:.6f} s)", episode, camera, probe.path)]


def check_video(
    path: Path | str, expect: VideoExpect, spans: list[Span], *, camera: str | None = None
) -> tuple[VideoProbe | None, list[CheckFailure]]:
    """Probe and check a file; an unreadable file is one `readable` failure."""
    result = inspect_video(path, expect, spans, camera=camera)
    return result.probe, result.failures


def inspect_video(
    path: Path | str, expect: VideoExpect, spans: list[Span], *, camera: str | None = None
) -> VideoCheck:
    """`check_video` plus the per-span counts (no counts when the file is unreadable)."""
    episode = spans[0].episode if spans else None
    try:
        probe = probe_video(path, episode=episode)
    except EpisodeError as exc:
        unreadable = CheckFailure("readable", "a readable video", exc.message, episode, camera, str(path))
        return VideoCheck(str(path), None, [unreadable], [])
    return inspect_probe(probe, expect, spans, camera=camera)
