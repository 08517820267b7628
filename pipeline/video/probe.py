"""Probe a video without decoding pixels: header fields, then its frames from one of two origins.

Counts are named by where they came from: `frames_from_header` is what the container says (mp4 `stsz`/`stts`,
what LeRobot trusts), `frames_from_index` what the container's sample index lists (`probe_index`: every
sample's size, decode time and sync flag from the mp4 sample tables, read with the header; no packet data is
read, so a header read costs tens of kB of a file of megabytes, which is what `prep scan` needs on object
storage), `frames_from_packets` what a demux of every packet finds (`probe_video`: reads the whole file; what
`prep verify` and the writers need).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import IO, Any

import av
import numpy as np

from pipeline.errors import EpisodeError
from pipeline.storage import STREAM_BLOCK, FileProblem, Source, StorePath, as_file
from pipeline.video import mp4header


class _Spans:
    """Span queries over sorted arrays (binary search), so a file of thousands of episodes costs O(log frames)
    per episode, not a pass over every frame."""

    __slots__ = ()
    pts: np.ndarray
    keyframe_pts: np.ndarray
    cum_bytes: np.ndarray

    @property
    def payload_bytes(self) -> int:
        return int(self.cum_bytes[-1])

    def span_slice(self, t0: float, t1: float | None, tolerance: float = 1e-4) -> tuple[int, int]:
        """(lo, hi): the frames (sorted by pts) whose pts falls in [t0, t1) are pts[lo:hi]."""
        return _span(self.pts, t0, t1, tolerance)

    def bytes_in_span(self, t0: float, t1: float | None, tolerance: float = 1e-4) -> int:
        """Frame payload bytes whose pts falls in [t0, t1)."""
        lo, hi = self.span_slice(t0, t1, tolerance)
        return int(self.cum_bytes[hi] - self.cum_bytes[lo])

    def frames_in_span(self, t0: float, t1: float | None, tolerance: float = 1e-4) -> int:
        """Frames whose pts falls in [t0, t1) (the whole file when t1 is None)."""
        lo, hi = self.span_slice(t0, t1, tolerance)
        return hi - lo

    def keyframes_in_span(self, t0: float, t1: float | None, tolerance: float = 1e-4) -> int:
        lo, hi = _span(self.keyframe_pts, t0, t1, tolerance)
        return hi - lo

    def frames_before(self, t: float, tolerance: float = 1e-4) -> int:
        """Frames whose pts is before t (less the tolerance)."""
        return int(np.searchsorted(self.pts, t - tolerance, side="left"))


def _sorted_arrays(obj: Any, pts_s: Any, keyframe_pts_s: Any, sizes_in: Any) -> None:
    pts = np.asarray(pts_s, dtype=np.float64)
    sizes = np.asarray(sizes_in, dtype=np.int64)
    if len(pts) > 1 and not bool(np.all(pts[1:] >= pts[:-1])):
        order = np.argsort(pts, kind="stable")
        pts, sizes = pts[order], sizes[order]
    cum = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    object.__setattr__(obj, "pts", pts)
    object.__setattr__(obj, "keyframe_pts", np.sort(np.asarray(keyframe_pts_s, dtype=np.float64)))
    object.__setattr__(obj, "cum_bytes", cum)


@dataclass(slots=True, frozen=True, eq=False)
class VideoProbe(_Spans):
    """A probed file: its header and a demux of every packet (`frames_from_packets`)."""

    path: str
    bytes: int
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float
    frames_from_header: int
    frames_from_packets: int
    keyframes: int
    duration_s: float
    pts_s: tuple[float, ...]
    keyframe_pts_s: tuple[float, ...]
    packet_bytes: tuple[int, ...]
    frames_discarded: int = 0  # packets the edit list hides (pre-roll of a stream-copy cut): not presented
    time_base_s: float = 0.0  # the stream's time base (s): pts are multiples of it
    source: StorePath | None = field(default=None, repr=False)  # the file probed (what a decode reads again)
    pts: np.ndarray = field(init=False, repr=False)  # pts_s as a sorted float64 array
    keyframe_pts: np.ndarray = field(init=False, repr=False)
    cum_bytes: np.ndarray = field(init=False, repr=False)  # cum_bytes[i] = payload of the first i packets (by pts)

    def __post_init__(self) -> None:
        _sorted_arrays(self, self.pts_s, self.keyframe_pts_s, self.packet_bytes)


@dataclass(slots=True, frozen=True, eq=False)
class IndexProbe(_Spans):
    """A file's header and its container sample index (`frames_from_index`), read without any packet data.
    Times are presentation times: the index holds decode times, which for the constant-rate streams LeRobot
    writes are the presentation times less one constant shift (the codec's reorder delay), restored here."""

    path: str
    bytes: int
    codec: str
    width: int
    height: int
    pix_fmt: str
    fps: float
    frames_from_header: int
    frames_from_index: int
    keyframes: int
    duration_s: float
    time_base_s: float
    frames_discarded: int
    pts_s: np.ndarray = field(repr=False)
    keyframe_pts_s: np.ndarray = field(repr=False)
    sample_bytes: np.ndarray = field(repr=False)
    pts: np.ndarray = field(init=False, repr=False)
    keyframe_pts: np.ndarray = field(init=False, repr=False)
    cum_bytes: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _sorted_arrays(self, self.pts_s, self.keyframe_pts_s, self.sample_bytes)


def open_media(source: Source | str, *, block_size: int = STREAM_BLOCK, what: str = "video file") -> str | IO[bytes]:
    """What `av.open` takes for a file it keeps open beyond one block: a local file's path (checked by its store:
    a regular file, inside its dataset), or an open reader of an object (`block_size` blocks) that the container
    holds until it is dropped. Raises `FileProblem`."""
    src = as_file(source)
    if src.location.is_local:
        with src.media(what=what) as media:
            return media
    return src.open(block_size=block_size, what=what)


def _span(sorted_times: np.ndarray, t0: float, t1: float | None, tolerance: float) -> tuple[int, int]:
    """Indices [lo, hi) of the sorted times t with t0 - tolerance <= t < t1 - tolerance (t1 None: no upper end)."""
    lo = int(np.searchsorted(sorted_times, t0 - tolerance, side="left"))
    hi = len(sorted_times) if t1 is None else int(np.searchsorted(sorted_times, t1 - tolerance, side="left"))
    return lo, max(lo, hi)


# Opening a container runs FFmpeg's stream-info probe, which decodes a frame of some codecs (h264) just
# to learn the pixel format; `skip_frame=all` stops that, making an open ~3.5x cheaper. Only the pixel
# format is lost (reported as "unknown" for such codecs), so the scan asks for it once per camera.
FAST_OPEN_OPTIONS = {"skip_frame": "all", "threads": "1"}
# A header read (`probe_index`): the same, and no stream-info probe of the packets. Without a frame decoded the
# probe cannot finish early and reads packets up to its limits (measured: 1.4 MB of a 1.4 MB 90-frame video,
# 1.7 MB of a 13 MB one; on object storage that is most of the bytes `prep scan` reads); everything the index
# probe reports comes from the header (the sample tables, avcC), the same values (measured on both).
INDEX_OPEN_OPTIONS = {**FAST_OPEN_OPTIONS, "analyzeduration": "1", "probesize": "32"}
UNKNOWN_PIX_FMT = "unknown"


def _packet_arrays(pts: list[int], sizes: list[int], keys: list[bool],
                   tb: Fraction) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds, bytes, keyframe flags) of the packets, sorted by (seconds, bytes, flag).

    Seconds are `pts * num / den` in float64: the int64 product is exact below 2**53 and IEEE division
    rounds correctly, so each value equals `float(pts * tb)` without a Fraction per packet (which cost
    ~0.3 ms per 90-packet file)."""
    num, den = tb.numerator, tb.denominator
    p = np.asarray(pts, dtype=np.int64)
    if len(p) and max(abs(int(p.max())), abs(int(p.min()))) * num >= 2**53:
        secs = np.asarray([float(v * tb) for v in pts], dtype=np.float64)  # beyond exact int64 arithmetic
    else:
        secs = (p * num) / den
    b = np.asarray(sizes, dtype=np.int64)
    k = np.asarray(keys, dtype=bool)
    order = np.lexsort((k, b, secs))  # the last key is the primary one
    return secs[order], b[order], k[order]


def probe_video(source: Source | str, *, episode: int | None = None, pix_fmt: bool = True) -> VideoProbe:
    """Header fields and a packet-level demux of the first video stream of `source` (a dataset's file through
    its store, streamed; or a local path); raises `EpisodeError`.

    `pix_fmt=False` opens without decoding any frame (faster; pix_fmt may be "unknown").
    """
    src = as_file(source)
    path = str(src)
    try:
        size = src.stat("video file").size  # missing, a folder, a FIFO (it would block the demuxer), outside
        if size == 0:
            raise EpisodeError(episode, path, "zero-byte video file")
        options = {"threads": "1"} if pix_fmt else FAST_OPEN_OPTIONS
        with src.media(block_size=STREAM_BLOCK, what="video file") as media, \
                av.open(media, mode="r", options=options) as container:
            if not container.streams.video:
                raise EpisodeError(episode, path, "no video stream in the container")
            stream = container.streams.video[0]
            tb: Fraction = stream.time_base or Fraction(1, 1)
            header_frames = int(stream.frames or 0)
            pts_list: list[int] = []
            size_list: list[int] = []
            key_list: list[bool] = []
            discarded = 0
            for packet in container.demux(stream):
                pts, nbytes = packet.pts, packet.size
                if nbytes == 0 or pts is None:
                    continue
                if packet.is_discard:  # hidden by the edit list: decoded as a reference, never presented
                    discarded += 1
                    continue
                pts_list.append(pts)
                size_list.append(nbytes)
                key_list.append(packet.is_keyframe)
            pts_s, sizes, keys = _packet_arrays(pts_list, size_list, key_list, tb)
            head = _header(container, stream, tb)
            probe = VideoProbe(
                path=str(path),
                bytes=size,
                frames_from_header=header_frames,
                frames_from_packets=len(pts_s),
                keyframes=int(keys.sum()),
                pts_s=tuple(pts_s.tolist()),
                keyframe_pts_s=tuple(pts_s[keys].tolist()),
                packet_bytes=tuple(sizes.tolist()),
                frames_discarded=discarded,
                time_base_s=float(tb),
                source=src,
                **head,
            )
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    except EpisodeError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(episode, path, unreadable(exc)) from None
    if probe.width <= 0 or probe.height <= 0:
        raise EpisodeError(episode, path, f"invalid video size {probe.width}x{probe.height}")
    return probe


def unreadable(exc: BaseException) -> str:
    """The reason for a video FFmpeg cannot read: its error without the file name FFmpeg appends (a path for a
    local file, '<none>' for an object read through a file object; the episode's record names the file)."""
    text = exc.strerror if isinstance(exc, av.FFmpegError) and exc.strerror else str(exc)
    return f"unreadable video ({type(exc).__name__}: {text})"


INDEXED_FORMATS = ("mov", "mp4", "m4a", "3gp", "3g2", "mj2")  # FFmpeg's mov demuxer: a complete sample index


def probe_index(source: str | IO[bytes], *, shown: str, size: int, episode: int | None = None,
                pix_fmt: bool = False) -> IndexProbe | None:
    """Header fields and the sample index of the first video stream of `source` (a path, or a seekable reader
    such as an object-store file: only the header is read). None when the container has no complete index
    (not an mp4/mov, or the index lists fewer samples than the header): the caller demuxes instead
    (`probe_video`). Raises `EpisodeError` naming `shown` for an unreadable file."""
    if size == 0:
        raise EpisodeError(episode, shown, "zero-byte video file")
    try:
        options = {"threads": "1"} if pix_fmt else INDEX_OPEN_OPTIONS
        with av.open(source, mode="r", options=options) as container:
            if not container.streams.video:
                raise EpisodeError(episode, shown, "no video stream in the container")
            if not set(container.format.name.split(",")) & set(INDEXED_FORMATS):
                return None
            stream = container.streams.video[0]
            try:
                entries = stream.index_entries
            except AttributeError:  # PyAV < 16 (lerobot 0.4.x's av 15): no sample index, the caller demuxes
                return None
            n = len(entries)
            ts = np.fromiter((e.timestamp for e in entries), dtype=np.int64, count=n)
            sizes = np.fromiter((e.size for e in entries), dtype=np.int64, count=n)
            keys = np.fromiter((e.is_keyframe for e in entries), dtype=bool, count=n)
            discard = np.fromiter((e.is_discard for e in entries), dtype=bool, count=n)
            header_frames = int(stream.frames or 0)
            if n < header_frames or n == 0:
                return None
            shown_ = ~discard & (sizes > 0)
            ts, sizes, keys = ts[shown_], sizes[shown_], keys[shown_]
            tb: Fraction = stream.time_base or Fraction(1, 1)
            if len(ts) and stream.start_time is not None:
                ts = ts + (int(stream.start_time) - int(ts.min()))  # decode times -> presentation times
            pts_s, sizes_s, keys_s = _packet_arrays(ts.tolist(), sizes.tolist(), keys.tolist(), tb)
            head = _header(container, stream, tb)
            if head["width"] <= 0 or head["height"] <= 0:
                raise EpisodeError(episode, shown, f"invalid video size {head['width']}x{head['height']}")
            return IndexProbe(path=shown, bytes=size, frames_from_header=header_frames,
                              frames_from_index=len(pts_s), keyframes=int(keys_s.sum()),
                              frames_discarded=int(discard.sum()), time_base_s=float(tb),
                              pts_s=pts_s, keyframe_pts_s=pts_s[keys_s], sample_bytes=sizes_s, **head)
    except EpisodeError:
        raise
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(episode, shown, unreadable(exc)) from None


def probe_header(fh: IO[bytes], *, shown: str, size: int, episode: int | None = None,
                 pix_fmt: bool = False) -> IndexProbe | None:
    """`probe_index` of an mp4 from its header boxes alone (`pipeline.video.mp4header`): 1-3 exact reads of `fh`
    (an `EXACT_READS` reader: on object storage ~1% of a 1.3 MB episode file, no sample read), the same values.
    With `pix_fmt`, one more read: the first sample, which FFmpeg decodes for the pixel format. None where the
    file is no plain mp4 (not an mp4, fragmented, odd boxes), FFmpeg cannot open its header alone, or its first
    sample gives no pixel format: the caller probes the file as it is (`probe_index`, else `probe_video`), which
    reports what is wrong with it. Raises `EpisodeError` for a zero-byte file or a failed read."""
    if size == 0:
        raise EpisodeError(episode, shown, "zero-byte video file")
    try:
        view = mp4header.walk(mp4header.read_at_of(fh), size)
    except mp4header.NotPlainMp4:
        return None
    except OSError as exc:
        raise EpisodeError(episode, shown, unreadable(exc)) from None
    try:
        probe = probe_index(view, shown=shown, size=size, episode=episode)  # type: ignore[arg-type]  # a reader
    except EpisodeError:  # what the header alone cannot tell (an h264 'avc3' keeps its parameters in the samples)
        return None  # the file's own open decides
    if probe is None or not pix_fmt:
        return probe
    try:
        view.seek(0)
        with av.open(view, mode="r", options=INDEX_OPEN_OPTIONS) as container:
            entries = container.streams.video[0].index_entries
            first = (int(entries[0].pos), int(entries[0].size)) if len(entries) else None
        if first is None or not view.add_sample(*first):
            return None
        view.seek(0)
        with av.open(view, mode="r", options={"threads": "1"}) as container:
            ctx = container.streams.video[0].codec_context
            fmt = ctx.format.name if ctx.format is not None else None
    except (av.FFmpegError, OSError, ValueError, IndexError):
        return None
    return replace(probe, pix_fmt=fmt) if fmt and fmt != UNKNOWN_PIX_FMT else None


def _header(container: Any, stream: Any, tb: Fraction) -> dict[str, Any]:
    """The header fields both probes report (codec, size, pixel format, rate, duration)."""
    ctx = stream.codec_context
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    if stream.duration is not None:
        duration = float(stream.duration * tb)
    elif container.duration is not None:
        duration = container.duration / 1_000_000
    else:
        duration = 0.0
    fmt = ctx.format.name if ctx.format is not None else (ctx.pix_fmt or UNKNOWN_PIX_FMT)
    width, height = int(ctx.width), int(ctx.height)
    return {"codec": ctx.codec.canonical_name, "width": width, "height": height, "pix_fmt": fmt,
            "fps": float(rate) if rate else 0.0, "duration_s": duration}
