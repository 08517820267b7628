"""Checks of one video file against what the dataset expects of it: one implementation, used by
`prep verify` on any dataset and by `prep reencode` on each file it writes before renaming it.

A file holds one episode (v2.1) or several consecutive spans (v3.0); each span is checked on
its own: frame count, pts on the i/fps grid from the span's start, keyframes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av

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


def frames_decoded(path: Path | str) -> int:
    """Decode every frame (catches corrupt packets a demux cannot see); raises EpisodeError."""
    n = 0
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            for _ in container.decode(stream):
                n += 1
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(None, path, f"decode failed after {n} frames ({type(exc).__name__}: {exc})") from None
    return n


def check_probe(
    probe: VideoProbe,
    expect: VideoExpect,
    spans: list[Span],
    *,
    camera: str | None = None,
) -> list[CheckFailure]:
    """Failures of an already-probed file (empty list = the file passes)."""
    out: list[CheckFailure] = []
    first_ep = spans[0].episode if spans else None

    def fail(check: str, expected: object, found: object, episode: int | None = first_ep) -> None:
        out.append(CheckFailure(check, str(expected), str(found), episode, camera, probe.path))

    if probe.frames_from_header != probe.frames_from_packets:
        fail("frames_from_header", f"{probe.frames_from_packets} (frames_from_packets)", probe.frames_from_header)
    if abs(probe.fps - expect.fps) > 1e-3:
        fail("fps", f"{expect.fps:g}", f"{probe.fps:g}")
    if expect.size is not None and (probe.width, probe.height) != expect.size:
        fail("size", f"{expect.size[0]}x{expect.size[1]}", f"{probe.width}x{probe.height}")
    step = 1.0 / expect.fps
    for span in spans:
        t1 = span.to_timestamp
        pts = [t for t in probe.pts_s if span.from_timestamp - TIMESTAMP_TOLERANCE_S <= t
               and (t1 is None or t < t1 - TIMESTAMP_TOLERANCE_S)]
        if span.frames_expected is not None and len(pts) != span.frames_expected:
            fail("frames_from_packets", f"{span.frames_expected} (frames_expected)", len(pts), span.episode)
        bad = [(i, t) for i, t in enumerate(pts) if abs(t - (span.from_timestamp + i * step)) > TIMESTAMP_TOLERANCE_S]
        if bad:
            i, t = bad[0]
            fail("pts_grid", f"frame {i} at {span.from_timestamp + i * step:.6f} s",
                 f"{t:.6f} s ({len(bad)} frames off the 1/fps grid)", span.episode)
        if expect.all_intra:
            keys = probe.keyframes_in_span(span.from_timestamp, t1, TIMESTAMP_TOLERANCE_S)
            if keys != len(pts):
                fail("keyframes", f"{len(pts)} (every frame)", keys, span.episode)
    if expect.decode:
        try:
            n = frames_decoded(probe.path)
        except EpisodeError as exc:
            fail("frames_decoded", f"{probe.frames_from_packets} (frames_from_packets)", exc.message)
        else:
            if n != probe.frames_from_packets:
                fail("frames_decoded", f"{probe.frames_from_packets} (frames_from_packets)", n)
    return out


def check_video(
    path: Path | str, expect: VideoExpect, spans: list[Span], *, camera: str | None = None
) -> tuple[VideoProbe | None, list[CheckFailure]]:
    """Probe and check a file; an unreadable file is one `readable` failure."""
    episode = spans[0].episode if spans else None
    try:
        probe = probe_video(path, episode=episode)
    except EpisodeError as exc:
        return None, [CheckFailure("readable", "a readable video", exc.message, episode, camera, str(path))]
    return probe, check_probe(probe, expect, spans, camera=camera)
