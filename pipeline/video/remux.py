"""Stream copies between the two LeRobot video layouts, without decoding a frame.

- `concat_stream_copy`: episode mp4s back to back in one mp4, as LeRobot's converter does with FFmpeg's
  concat demuxer (same packets, the first file's codec parameters and time base, `movflags=faststart`),
  except that each episode's timestamps are shifted by `frames_before / fps` computed in exact ticks of
  the time base, never by the previous files' durations. Frame k of the output lands at k/fps (to the
  tick, when the source's frames sit on the grid). Files whose codec parameters differ are refused:
  one set of parameters (the mp4 `avcC`/`av1C` extradata) serves the whole file.
- `cut_stream_copy`: one episode's span of a shared file into its own mp4, re-based to start at 0.
  Exact only when the span starts on a keyframe and its packets are not interleaved in decode order
  with another span's (no open GOP across the boundary); otherwise it refuses.
- `episodes_off_keyframe`: which episodes of a file a cut could not copy exactly, from one demux.

Packets keep their payload byte for byte; only pts, dts and duration are rewritten.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from pipeline.errors import EpisodeError
from pipeline.storage import FileProblem, Source
from pipeline.video.checks import TIMESTAMP_TOLERANCE_S, Span, in_span
from pipeline.video.probe import FAST_OPEN_OPTIONS, open_media, unreadable

REORDER_MARGIN_FRAMES = 32  # decode-order lookahead past a span's end (B-frame reordering is far shorter)


def mp4_options(tb: Fraction) -> dict[str, str]:
    """moov first (as LeRobot writes), and the movie timescale = the track's, so that the edit list FFmpeg
    writes for B-frame delay (first dts < 0) is exact: with the default 1/1000 s the header duration, which
    torchcodec divides the frame count by, is rounded to the millisecond."""
    return {"movflags": "faststart", "movie_timescale": str(tb.denominator)}


@dataclass(slots=True, frozen=True)
class StreamSignature:
    """What must be equal for packets of two files to be decodable as one stream."""

    codec: str
    width: int
    height: int
    extradata: bytes
    time_base: Fraction

    def differences(self, other: StreamSignature) -> list[str]:
        out = []
        if self.codec != other.codec:
            out.append(f"codec {other.codec} vs {self.codec}")
        if (self.width, self.height) != (other.width, other.height):
            out.append(f"size {other.width}x{other.height} vs {self.width}x{self.height}")
        if self.extradata != other.extradata:
            out.append(f"codec extradata differs ({len(other.extradata)} vs {len(self.extradata)} bytes: "
                       "other encoder settings or parameter sets)")
        return out


def signature(stream: av.video.stream.VideoStream) -> StreamSignature:
    ctx = stream.codec_context
    tb = stream.time_base or Fraction(1, 1)
    return StreamSignature(ctx.codec.canonical_name if ctx.codec is not None else ctx.name, int(ctx.width),
                           int(ctx.height), bytes(ctx.extradata or b""), Fraction(tb))


def output_time_base(src: Fraction, fps: Fraction) -> Fraction:
    """The source time base, made finer when one frame is not a whole number of its ticks (1/1000 s at 30
    fps -> 1/3000 s), so that every frame offset is exact."""
    ticks = 1 / (fps * src)
    return src / ticks.denominator


def ticks_per_frame(tb: Fraction, fps: Fraction) -> int:
    ticks = 1 / (fps * tb)
    if ticks.denominator != 1:
        raise ValueError(f"one frame at {fps} fps is not a whole number of {tb} ticks")
    return int(ticks)


@dataclass(slots=True, frozen=True)
class ConcatInput:
    episode: int
    path: Source  # a dataset's file (read through its store), or a local path
    frames: int  # frames_expected (metadata length)


@dataclass(slots=True, frozen=True)
class ConcatResult:
    frames: int
    time_base: Fraction
    ticks_per_frame: int


def _open(path: Source, episode: int | None) -> av.container.InputContainer:
    try:
        return av.open(open_media(path), mode="r", options=FAST_OPEN_OPTIONS)  # through its store
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    except FileNotFoundError:
        raise EpisodeError(episode, path, "missing video file") from None
    except (av.FFmpegError, OSError) as exc:
        raise EpisodeError(episode, path, unreadable(exc)) from None


def _video_stream(container: av.container.InputContainer, episode: int | None,
                  path: Source) -> av.video.stream.VideoStream:
    if not container.streams.video:
        raise EpisodeError(episode, path, "no video stream in the container")
    return container.streams.video[0]


def demuxed(container: av.container.InputContainer,
            stream: av.video.stream.VideoStream) -> Iterator[tuple[av.Packet, int]]:
    """A stream's packets in decode order and their decode timestamps, without the demuxer's flush packets (no
    dts, or no bytes: LeRobot skips them too)."""
    for pkt in container.demux(stream):
        if pkt.dts is not None and pkt.size:
            yield pkt, int(pkt.dts)


class PacketCopy:
    """The one mux loop of every stream copy (concat, cut, splice): source packets, their payload untouched, re-timed
    into one output stream made from the first input stream (its codec parameters), in `time_base`; each packet
    lasts `tpf` ticks when given. `frames`: packets written; `last_dts`: the last one's decode timestamp."""

    def __init__(self, oc: av.container.OutputContainer, time_base: Fraction, tpf: int | None) -> None:
        self.oc, self.time_base, self.tpf = oc, time_base, tpf
        self.stream: av.video.stream.VideoStream | None = None
        self.frames = 0
        self.last_dts: int | None = None

    def start(self, ist: av.video.stream.VideoStream) -> None:
        """The output stream, from the first input stream (later ones must have the same codec parameters)."""
        if self.stream is None:
            self.stream = self.oc.add_stream_from_template(ist, opaque=True)
            self.stream.time_base = self.time_base

    def overlaps(self, dts: int) -> bool:
        """A packet at `dts` would not come after the last one in decode order (its caller names the episode)."""
        return self.last_dts is not None and dts <= self.last_dts

    def write(self, pkt: av.Packet, pts: int, dts: int) -> None:
        pkt.pts, pkt.dts = pts, dts
        if self.tpf is not None:
            pkt.duration = self.tpf
        pkt.time_base = self.time_base
        pkt.stream = self.stream
        self.oc.mux(pkt)
        self.last_dts = dts
        self.frames += 1


def concat_stream_copy(inputs: Sequence[ConcatInput], out: Path, fps_rate: Fraction) -> ConcatResult:
    """Write `inputs` back to back into `out` (an mp4); raises `EpisodeError` naming the episode at fault."""
    if not inputs:
        raise ValueError("nothing to concatenate")
    first = inputs[0]
    with _open(first.path, first.episode) as c:
        ref = signature(_video_stream(c, first.episode, first.path))
    tb = output_time_base(ref.time_base, fps_rate)
    tpf = ticks_per_frame(tb, fps_rate)
    frames_before = 0
    try:
        with av.open(str(out), mode="w", format="mp4", options=mp4_options(tb)) as oc:
            mux = PacketCopy(oc, tb, tpf)
            for item in inputs:
                with _open(item.path, item.episode) as ic:
                    ist = _video_stream(ic, item.episode, item.path)
                    sig = signature(ist)
                    diff = ref.differences(sig)
                    if diff:
                        raise EpisodeError(item.episode, item.path,
                                           f"cannot stream-copy after episode {first.episode}: " + "; ".join(diff)
                                           + " (re-encode instead)")
                    scale = sig.time_base / tb
                    if scale.denominator != 1:
                        raise EpisodeError(item.episode, item.path,
                                           f"time base {sig.time_base} is finer than the output's {tb}")
                    mux.start(ist)
                    offset = frames_before * tpf
                    n = 0
                    for pkt, src_dts in demuxed(ic, ist):
                        if pkt.pts is None:
                            raise EpisodeError(item.episode, item.path, f"packet {n} has no pts")
                        pts, dts = int(pkt.pts * scale) + offset, int(src_dts * scale) + offset
                        if mux.overlaps(dts):
                            raise EpisodeError(item.episode, item.path,
                                               f"decode timestamps overlap the previous episode's ({dts} <= "
                                               f"{mux.last_dts} ticks of {tb})")
                        mux.write(pkt, pts, dts)
                        n += 1
                    if n != item.frames:
                        raise EpisodeError(item.episode, item.path,
                                           f"{n} frames (frames_from_packets) but the metadata length is {item.frames}")
                    frames_before += n
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(None, out, f"stream copy failed ({type(exc).__name__}: {exc})") from None
    return ConcatResult(frames_before, tb, tpf)


@dataclass(slots=True, frozen=True)
class CutResult:
    frames: int
    first_pts_s: float  # where the episode started in the source file


def cut_stream_copy(src: Source, out: Path, span: Span, fps_rate: Fraction) -> CutResult:
    """Copy the packets of `span` (pts in [from_timestamp, to_timestamp), LeRobot's tolerance) into `out`,
    re-based so the first frame is at 0; refuses a span that does not start on a keyframe or whose packets
    interleave with another span's in decode order."""
    episode = span.episode
    tol = TIMESTAMP_TOLERANCE_S
    hi = math.inf if span.to_timestamp is None else span.to_timestamp - tol
    with _open(src, episode) as ic:
        ist = _video_stream(ic, episode, src)
        tb = Fraction(ist.time_base or Fraction(1, 1))
        try:
            tpf: int | None = ticks_per_frame(tb, fps_rate)
        except ValueError:
            tpf = None
        seek = max(0, math.floor((span.from_timestamp - tol) / tb))
        n, base = 0, 0
        state = "before"
        margin = REORDER_MARGIN_FRAMES / float(fps_rate)
        try:
            if seek > 0:
                ic.seek(seek, stream=ist, backward=True, any_frame=False)
            with av.open(str(out), mode="w", format="mp4", options=mp4_options(tb)) as oc:
                mux = PacketCopy(oc, tb, tpf)
                mux.start(ist)
                for pkt, dts in demuxed(ic, ist):
                    if pkt.pts is None:
                        raise EpisodeError(episode, src, "a packet has no pts")
                    t = float(pkt.pts * tb)
                    inside = in_span(t, span)
                    if state == "before":
                        if not inside:
                            continue
                        if not pkt.is_keyframe:
                            raise EpisodeError(episode, src, f"the episode starts at {t:.6f} s on a frame that is "
                                                             "not a keyframe: a stream copy cannot cut it exactly "
                                                             "(re-encode instead)")
                        state, base = "inside", int(pkt.pts)
                    elif state == "inside" and not inside:
                        if t < span.from_timestamp - tol:
                            raise EpisodeError(episode, src, f"a frame of the previous episode ({t:.6f} s) is decoded "
                                                             "after this episode's keyframe (open GOP)")
                        state = "after"
                        if float(dts * tb) >= hi + margin:
                            break
                        continue
                    elif state == "after":
                        if inside:
                            raise EpisodeError(episode, src, f"a frame of this episode ({t:.6f} s) is decoded after "
                                                             "the next episode's first frame (it depends on it)")
                        if float(dts * tb) >= hi + margin:
                            break
                        continue
                    if pkt.pts < base:
                        raise EpisodeError(episode, src, f"a frame at {t:.6f} s precedes the episode's keyframe")
                    mux.write(pkt, int(pkt.pts) - base, dts - base)
                    n += 1
        except EpisodeError:
            raise
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise EpisodeError(episode, src, f"stream copy failed ({type(exc).__name__}: {exc})") from None
    if span.frames_expected is not None and n != span.frames_expected:
        raise EpisodeError(episode, src, f"{n} frames in the episode's span (frames_from_packets) but the "
                                         f"metadata length is {span.frames_expected}")
    return CutResult(n, float(base * tb))


@dataclass(slots=True, frozen=True)
class StartProblem:
    """An episode a stream copy cannot cut exactly out of its file, and why."""

    episode: int | None
    camera: str | None
    path: str
    reason: str

    def line(self) -> str:
        cam = f" {self.camera}" if self.camera else ""
        return f"episode {self.episode}{cam}: {self.reason} ({self.path})"


def decode_order_packets(path: Source, episode: int | None = None) -> list[tuple[int, int, bool]]:
    """(pts, dts, keyframe) of every packet in decode order, in ticks of the stream's time base."""
    with _open(path, episode) as c:
        stream = _video_stream(c, episode, path)
        return [(int(pkt.pts), dts, bool(pkt.is_keyframe)) for pkt, dts in demuxed(c, stream)
                if pkt.pts is not None]


def episodes_off_keyframe(path: Source, spans: Sequence[Span], camera: str | None = None) -> list[StartProblem]:
    """The spans of a file that `cut_stream_copy` could not copy exactly, from one demux (no decode): an
    episode must start on a keyframe (its first packet in decode order is a keyframe holding the span's
    earliest frame) and its packets must not interleave with another episode's in decode order."""
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    starts = [s.from_timestamp - TIMESTAMP_TOLERANCE_S for s in ordered]
    with _open(path, ordered[0].episode if ordered else None) as c:
        tb = Fraction(_video_stream(c, None, path).time_base or Fraction(1, 1))
    packets = decode_order_packets(path)
    first: dict[int, tuple[int, bool]] = {}  # span -> (pts, keyframe) of its first packet in decode order
    min_pts: dict[int, int] = {}
    problems: dict[int, str] = {}
    highest = -1
    for pts, _dts, key in packets:
        t = float(pts * tb)
        k = bisect_right(starts, t) - 1
        if k < 0 or not in_span(t, ordered[k]):
            continue  # a frame outside every span (verify reports those)
        if k not in first:
            first[k] = (pts, key)
        min_pts[k] = min(min_pts.get(k, pts), pts)
        if k < highest and k not in problems:
            problems[k] = (f"a frame at {t:.6f} s is decoded after episode {ordered[highest].episode}'s first frame "
                           "(frames reordered across the boundary: it depends on the next episode)")
        highest = max(highest, k)
    out = []
    for k, span in enumerate(ordered):
        reason = problems.get(k)
        if k not in first:
            reason = "no frame in the episode's span"
        elif not first[k][1]:
            reason = f"starts at {float(first[k][0] * tb):.6f} s on a frame that is not a keyframe"
        elif first[k][0] != min_pts[k]:
            reason = "its first frame in decode order is not its earliest frame"
        if reason is not None:
            out.append(StartProblem(span.episode, camera, str(path), reason))
    return out
