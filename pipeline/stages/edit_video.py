"""Stream-copy splicing of one v3.0 video file for `prep edit`: the kept episodes' packets back to back in a
new file, each episode re-based so that its first frame lands at `frames_before / fps` (exact, in ticks of
the output time base); packet payloads are copied byte for byte, never decoded or re-encoded.

A splice is exact only where every cut falls on a keyframe: a kept episode that follows a dropped one (or
opens the file) must start, in decode order, with a keyframe that is its earliest frame, and no packet of a
kept episode may be interleaved in decode order with a dropped one's (B-frames reordered across the
boundary). Consecutive kept episodes need nothing: their packets stay together as in the source, so a source
with GOP > 1 whose episodes do not start on keyframes can still be edited where whole runs are kept.
`splice_problems` finds the cuts that break this from one demux (no decode); `splice_segments` refuses
them too, so a splice never writes an inexact file.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from pipeline.errors import EpisodeError
from pipeline.storage import FileProblem, Source, as_file
from pipeline.video.checks import TIMESTAMP_TOLERANCE_S, Span, in_span
from pipeline.video.remux import (
    PacketCopy,
    StartProblem,
    StreamSignature,
    _open,
    _video_stream,
    demuxed,
    mp4_options,
    output_time_base,
    signature,
    ticks_per_frame,
)

WAY_FORWARD = ("rerun with --reencode-partial (re-encodes only the episodes whose cut is off a keyframe, with the "
               "source's codec settings, each into a file of its own), or re-encode the source all-intra first "
               "(`prep reencode`: every frame a keyframe, so every cut is exact)")


@dataclass(slots=True, frozen=True)
class SpliceSpan:
    """One episode of the source file: its span there, its frames, and whether it is kept."""

    episode: int
    from_timestamp: float
    to_timestamp: float
    frames: int
    keep: bool


def _assign(packets: Sequence[tuple[int, int, bool]], tb: Fraction, spans: Sequence[SpliceSpan]) -> list[int]:
    """The span (position in `spans`, sorted by start) of each packet, -1 for a packet outside every span.
    A packet's time is `pts * num / den` in int arithmetic (true division of ints rounds correctly: the same
    float as `float(pts * tb)`, without a Fraction per packet)."""
    starts = [s.from_timestamp - TIMESTAMP_TOLERANCE_S for s in spans]
    ranges = [Span(s.episode, s.from_timestamp, s.to_timestamp, s.frames) for s in spans]
    num, den = tb.numerator, tb.denominator
    out = []
    for pts, _dts, _key in packets:
        t = pts * num / den
        k = bisect_right(starts, t) - 1
        out.append(k if k >= 0 and in_span(t, ranges[k]) else -1)
    return out


def _problems(packets: Sequence[tuple[int, int, bool]], owner: Sequence[int], tb: Fraction,
              spans: Sequence[SpliceSpan]) -> dict[int, str]:
    """Position in `spans` of each kept episode a splice could not copy exactly -> why."""
    first: dict[int, tuple[int, bool]] = {}
    min_pts: dict[int, int] = {}
    problems: dict[int, str] = {}
    highest = -1
    for (pts, _dts, key), k in zip(packets, owner, strict=True):
        if k < 0:
            continue
        first.setdefault(k, (pts, key))
        min_pts[k] = min(min_pts.get(k, pts), pts)
        if k < highest and any(spans[j].keep != spans[k].keep for j in range(k, highest + 1)):
            kept = k if spans[k].keep else highest
            problems.setdefault(kept, f"a frame at {float(pts * tb):.6f} s is decoded after episode "
                                      f"{spans[highest].episode}'s first frame (frames reordered across a cut)")
        highest = max(highest, k)
    for k, span in enumerate(spans):
        if not span.keep:
            continue
        if k not in first:
            problems.setdefault(k, "no frame in the episode's span")
            continue
        if k > 0 and spans[k - 1].keep:
            continue  # no cut before it: its packets stay with the previous episode's, as in the source
        pts, key = first[k]
        if not key:
            problems.setdefault(k, f"a cut at {float(pts * tb):.6f} s falls on a frame that is not a keyframe")
        elif pts != min_pts[k]:
            problems.setdefault(k, "its first frame in decode order is not its earliest frame")
    return problems


_INDEX_MAX_PACKETS = 1_000_000  # ~100 MB of (pts, dts, key) tuples held at most
_index_cache: OrderedDict[tuple[str, int, int, str], tuple[Fraction, list[tuple[int, int, bool]]]] = OrderedDict()
_index_lock = threading.Lock()


def _packet_index(path: Source, episode: int | None) -> tuple[Fraction, list[tuple[int, int, bool]]]:
    """A file's time base and (pts, dts, keyframe) of its packets in decode order, from one open and one demux;
    kept (by path or URL, size, mtime and version: a local file's inode and ctime, an object's ETag; a few
    hundred MB of tuples at most) so that the cut check and the splice of the same file in one process demux it
    once. `path`: a dataset's file through its store, or a local path."""
    try:
        st = as_file(path).stat("video file")
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    key = (str(path), st.size, st.mtime_ns, st.version)
    with _index_lock:
        hit = _index_cache.get(key)
        if hit is not None:
            _index_cache.move_to_end(key)
            return hit
    with _open(path, episode) as c:
        stream = _video_stream(c, episode, path)
        tb = Fraction(stream.time_base or Fraction(1, 1))
        packets = [(int(p.pts), dts, bool(p.is_keyframe)) for p, dts in demuxed(c, stream) if p.pts is not None]
    with _index_lock:
        _index_cache[key] = (tb, packets)
        held = sum(len(v[1]) for v in _index_cache.values())
        while held > _INDEX_MAX_PACKETS and len(_index_cache) > 1:
            held -= len(_index_cache.popitem(last=False)[1][1])
    return tb, packets


def _time_base(path: Source, episode: int | None) -> Fraction:
    return _packet_index(path, episode)[0]


def splice_problems(path: Source, spans: Sequence[SpliceSpan], camera: str | None = None) -> list[StartProblem]:
    """The kept episodes of `path` whose cut a stream copy could not make exactly (one demux, no decode)."""
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    if all(s.keep for s in ordered):
        return []
    tb, packets = _packet_index(path, ordered[0].episode if ordered else None)
    found = _problems(packets, _assign(packets, tb, ordered), tb, ordered)
    return [StartProblem(ordered[k].episode, camera, str(path), f"{reason}: {WAY_FORWARD}")
            for k, reason in sorted(found.items())]


@dataclass(slots=True, frozen=True)
class SpliceResult:
    frames: int
    time_base: Fraction


def _prepare(src: Source, spans: Sequence[SpliceSpan], before: int, out_tb: Fraction | None,
             fps_rate: Fraction) -> tuple[list[SpliceSpan], list[int], Fraction, dict[int, int], int, Fraction]:
    """One source file's splice, before anything is written: its spans in time order, each packet's span,
    the output time base (the first segment's, made exact at the frame rate), each kept span's pts offset
    (in output ticks) and the frames before the next segment."""
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    first_ep = ordered[0].episode if ordered else None
    tb, packets = _packet_index(src, first_ep)
    owner = _assign(packets, tb, ordered)
    problems = _problems(packets, owner, tb, ordered)
    if problems:
        k, reason = min(problems.items())
        raise EpisodeError(ordered[k].episode, src, f"{reason}: {WAY_FORWARD}")
    out_tb = out_tb if out_tb is not None else output_time_base(tb, fps_rate)
    scale = tb / out_tb
    if scale.denominator != 1:
        raise EpisodeError(first_ep, src, f"time base {tb} is not a whole number of the output's {out_tb} ticks")
    tpf = ticks_per_frame(out_tb, fps_rate)
    base: dict[int, int] = {}
    counts: dict[int, int] = {}
    for (pts, _dts, _key), k in zip(packets, owner, strict=True):
        if k >= 0 and ordered[k].keep:
            base[k] = min(base.get(k, pts), pts)
            counts[k] = counts.get(k, 0) + 1
    offset: dict[int, int] = {}
    for k, span in enumerate(ordered):
        if span.keep:
            if counts.get(k, 0) != span.frames:
                raise EpisodeError(span.episode, src, f"{counts.get(k, 0)} frames in the episode's span "
                                                      f"(frames_from_packets) but the metadata length is {span.frames}")
            offset[k] = before * tpf - base[k] * int(scale)
            before += span.frames
    return ordered, owner, out_tb, offset, before, scale


def splice_segments(segments: Sequence[tuple[Source, Sequence[SpliceSpan]]], out: Path,
                    fps_rate: Fraction) -> SpliceResult:
    """Write each segment's kept spans (a source file and its episodes) back to back into `out` (an mp4), episode
    k's first frame at `frames_before(k) / fps`; several segments when a merge packs source files together (every
    segment's codec parameters must be the first's: one `avcC`/`av1C` serves a file). Raises `EpisodeError` for
    a cut off a keyframe or a frame count that is not the metadata's."""
    if not segments:
        raise ValueError("nothing to splice")
    out_tb: Fraction | None = None
    before = 0
    ref = None
    first_path = segments[0][0]
    try:
        with av.open(str(out), mode="w", format="mp4",
                     options=mp4_options(_out_tb(first_path, segments[0][1], fps_rate))) as oc:
            mux: PacketCopy | None = None
            for src, spans in segments:
                ordered, owner, out_tb, offset, after, scale = _prepare(src, spans, before, out_tb, fps_rate)
                first_ep = ordered[0].episode if ordered else None
                with _open(src, first_ep) as ic:
                    ist = _video_stream(ic, first_ep, src)
                    sig = signature(ist)
                    if ref is None:
                        ref = sig
                    elif ref.differences(sig):
                        raise EpisodeError(first_ep, src, "cannot share a file with the previous source file: "
                                           + "; ".join(ref.differences(sig)))
                    if mux is None:
                        mux = PacketCopy(oc, out_tb, ticks_per_frame(out_tb, fps_rate))
                    mux.start(ist)
                    i = 0
                    for pkt, src_dts in demuxed(ic, ist):
                        if pkt.pts is None:
                            continue
                        k = owner[i]
                        i += 1
                        if k < 0 or not ordered[k].keep:
                            continue
                        pts = int(pkt.pts) * int(scale) + offset[k]
                        dts = src_dts * int(scale) + offset[k]
                        if mux.overlaps(dts):
                            raise EpisodeError(ordered[k].episode, src, f"decode timestamps overlap the previous kept "
                                                                        f"episode's ({dts} <= {mux.last_dts} ticks of "
                                                                        f"{out_tb})")
                        mux.write(pkt, pts, dts)
                before = after
    except EpisodeError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(None, first_path, f"stream copy failed ({type(exc).__name__}: {exc})") from None
    assert out_tb is not None and mux is not None
    return SpliceResult(mux.frames, out_tb)


def _out_tb(src: Source, spans: Sequence[SpliceSpan], fps_rate: Fraction) -> Fraction:
    return output_time_base(_time_base(src, spans[0].episode if spans else None), fps_rate)


def file_signature(path: Source) -> StreamSignature:
    """The codec parameters a file's packets need (what must be equal for two files to share one)."""
    with _open(path, None) as c:
        return signature(_video_stream(c, None, path))


# ---- --reencode-partial ---------------------------------------------------------------------------


def partial_reencode(path: Source, spans: Sequence[SpliceSpan]) -> dict[int, str]:
    """The kept episodes of `path` to re-encode so that a stream copy of the others is exact -> why (one
    demux, no decode). An episode taken out of the splice is a new cut for its neighbours (a kept episode after
    it must now start on a keyframe), so the check is repeated until nothing more is found."""
    ordered = sorted(spans, key=lambda s: s.from_timestamp)
    if all(s.keep for s in ordered):
        return {}
    tb, packets = _packet_index(path, ordered[0].episode if ordered else None)
    owner = _assign(packets, tb, ordered)
    out: dict[int, str] = {}
    current = list(ordered)
    while True:
        found = _problems(packets, owner, tb, current)
        if not found:
            return out
        for k, reason in found.items():
            out[current[k].episode] = reason
            sp = current[k]
            current[k] = SpliceSpan(sp.episode, sp.from_timestamp, sp.to_timestamp, sp.frames, False)


# the encoders prep uses for a source codec (the first one FFmpeg has)
ENCODERS: dict[str, tuple[str, ...]] = {
    "h264": ("libx264",), "hevc": ("libx265",), "av1": ("libsvtav1", "libaom-av1"), "vp9": ("libvpx-vp9",),
    "mpeg4": ("mpeg4",), "mjpeg": ("mjpeg",),
}


@dataclass(slots=True, frozen=True)
class EncodeSettings:
    """How a re-encoded episode is encoded: the source's codec and pixel format, and `video.g`, `video.crf` and
    `video.preset` from info.json where they are given (else the encoder's defaults)."""

    codec: str  # the source's codec name (h264, av1, ...)
    encoder: str
    pix_fmt: str
    options: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        opts = " ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.encoder} {self.pix_fmt}" + (f" {opts}" if opts else "")


def encode_settings(path: Source, feature_info: dict[str, object] | None) -> EncodeSettings:
    """The settings to re-encode an episode of `path` with (see `EncodeSettings`)."""
    info = feature_info or {}
    with _open(path, None) as c:
        ist = _video_stream(c, None, path)
        ctx = ist.codec_context
        codec = ctx.codec.canonical_name if ctx.codec is not None else ctx.name
        pix_fmt = ctx.pix_fmt or "yuv420p"
    declared = info.get("video.pix_fmt")
    if isinstance(declared, str) and declared:
        pix_fmt = declared
    encoder = next((e for e in ENCODERS.get(codec, (codec,)) if e in av.codecs_available), None)
    if encoder is None:
        raise EpisodeError(None, path, f"no encoder for the source's codec {codec} in this FFmpeg (tried "
                                       f"{', '.join(ENCODERS.get(codec, (codec,)))})")
    options = []
    for key in ("g", "crf", "preset"):
        value = info.get(f"video.{key}")
        if value is not None and not isinstance(value, bool) and isinstance(value, int | float | str) and str(value):
            options.append((key, str(value)))
    return EncodeSettings(codec, encoder, pix_fmt, tuple(options))


def reencode_span(src: Source, out: Path, span: SpliceSpan, fps_rate: Fraction, settings: EncodeSettings) -> int:
    """Decode exactly the frames of `span` in `src` (from the keyframe before it) and encode them into `out`
    (an mp4 of their own, frame i at i / fps) with `settings`; returns the frames written."""
    from pipeline.video.checks import TIMESTAMP_TOLERANCE_S as TOL

    episode = span.episode
    try:
        with _open(src, episode) as ic:
            ist = _video_stream(ic, episode, src)
            tb = Fraction(ist.time_base or Fraction(1, 1))
            out_tb = output_time_base(tb, fps_rate)
            with av.open(str(out), mode="w", format="mp4", options=mp4_options(out_tb)) as oc:
                ost = oc.add_stream(settings.encoder, rate=fps_rate)
                assert isinstance(ost, av.VideoStream)
                ost.width, ost.height = ist.codec_context.width, ist.codec_context.height
                ost.pix_fmt = settings.pix_fmt
                ost.codec_context.time_base = 1 / fps_rate
                ost.time_base = out_tb
                ost.options = dict(settings.options)
                ic.seek(max(0, int(span.from_timestamp / tb) - 1), stream=ist, backward=True, any_frame=False)
                n = 0
                for frame in ic.decode(ist):
                    if frame.pts is None:
                        continue
                    t = float(frame.pts * tb)
                    if t < span.from_timestamp - TOL:
                        continue
                    if t >= span.to_timestamp - TOL:
                        break
                    img = frame.reformat(format=settings.pix_fmt) if frame.format.name != settings.pix_fmt else frame
                    img.pts, img.time_base = n, 1 / fps_rate
                    oc.mux(ost.encode(img))
                    n += 1
                oc.mux(ost.encode(None))
    except EpisodeError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(episode, src, f"re-encode failed ({type(exc).__name__}: {exc})") from None
    if n != span.frames:
        raise EpisodeError(episode, src, f"{n} frames decoded in the episode's span but the metadata length is "
                                         f"{span.frames}")
    return n
