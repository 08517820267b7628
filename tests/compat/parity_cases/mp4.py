"""Video constructions for the parity cases, with PyAV only (no ffmpeg program): frames encoded with
chosen presentation times, a stream-copy cut with hidden pre-roll (edit list), a display matrix, flipped
bytes, a mid-stream resolution change, 16-bit gray (depth) in PNG-in-MP4. All deterministic."""

from __future__ import annotations

import io
import shutil
import struct
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

H264_OPTIONS = {"crf": "23", "preset": "veryfast"}


def _x264_params(gop: int, extra: str = "") -> str:
    # no-mbtree: libx264's macroblock-tree rate control gives different bits run to run on these tiny
    # frames (measured: sizes vary by ~0.2 %, pictures by up to 4 dB); without it the bits repeat.
    return f"keyint={gop}:min-keyint={gop}:scenecut=0:no-mbtree=1" + (f":{extra}" if extra else "")


def encode_rgb(path: Path, frames: Sequence[np.ndarray], *, fps: int, pts: Sequence[int] | None = None,
               time_base: Fraction | None = None, codec: str = "libx264", pix_fmt: str = "yuv420p",
               gop: int = 30, options: dict[str, str] | None = None) -> Path:
    """Encode RGB frames (h, w, 3 uint8) to an mp4 whose frame i has presentation time pts[i] * time_base
    (default i/fps). One encoder thread, so the bits are the same on every run."""
    tb = time_base or Fraction(1, fps)
    stamps = list(pts) if pts is not None else list(range(len(frames)))
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    with av.open(str(path), mode="w", format="mp4") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        stream.codec_context.time_base = tb
        stream.time_base = tb
        opts = dict(options if options is not None else (H264_OPTIONS if codec == "libx264" else {}))
        opts.setdefault("g", str(gop))
        if codec == "libx264":
            opts["x264-params"] = _x264_params(gop, opts.pop("x264-extra", ""))
        stream.options = opts
        stream.codec_context.thread_count = 1
        for rgb, t in zip(frames, stamps, strict=True):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame.pts = int(t)
            frame.time_base = tb
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def cut_with_preroll(src: Path, dst: Path, preroll_frames: int, fps: int) -> Path:
    """Stream-copy `src` from frame `preroll_frames` on, as `ffmpeg -ss T -i src -c copy` does: every
    packet is kept (the GOP before T is needed to decode), timestamps shift by -T, and the mp4 muxer writes
    an edit list that hides the frames before 0. The file then presents len(src) - preroll frames."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(src)) as inp, av.open(str(dst), mode="w", format="mp4") as out:
        s = inp.streams.video[0]
        d = out.add_stream_from_template(s)
        d.time_base = s.time_base
        assert s.time_base is not None
        off = int(Fraction(preroll_frames, fps) / s.time_base)
        for p in inp.demux(s):
            if p.dts is None:
                continue
            p.pts = (p.pts or 0) - off
            p.dts -= off
            p.stream = d
            out.mux(p)
    return dst


def _boxes(b: bytes | bytearray, start: int, end: int) -> Iterator[tuple[str, int, int]]:
    i = start
    while i + 8 <= end:
        size, typ = struct.unpack(">I4s", b[i:i + 8])
        hdr = 8
        if size == 1:
            size = struct.unpack(">Q", b[i + 8:i + 16])[0]
            hdr = 16
        elif size == 0:
            size = end - i
        yield typ.decode("latin1"), i + hdr, i + size
        i += size


def set_rotation(path: Path, degrees: int) -> None:
    """Write a display matrix (rotation by 90, 180 or 270 degrees clockwise) into the first track's tkhd,
    as a phone or an `ffmpeg -display_rotation` remux does; the coded frames are unchanged."""
    b = bytearray(path.read_bytes())
    with av.open(str(path)) as c:
        h, w = c.streams.video[0].codec_context.height, c.streams.video[0].codec_context.width
    one, w30 = 0x10000, 0x40000000
    matrix = {90: [0, one, 0, -one, 0, 0, h << 16, 0, w30], 180: [-one, 0, 0, 0, -one, 0, w << 16, h << 16, w30],
              270: [0, -one, 0, one, 0, 0, 0, w << 16, w30]}[degrees]
    for typ, body, end in _boxes(b, 0, len(b)):
        if typ != "moov":
            continue
        for t2, b2, e2 in _boxes(b, body, end):
            if t2 != "trak":
                continue
            for t3, b3, _e3 in _boxes(b, b2, e2):
                if t3 == "tkhd":
                    version = b[b3]
                    off = b3 + 4 + (32 if version == 1 else 20) + 8 + 8
                    b[off:off + 36] = struct.pack(">9i", *matrix)
                    path.write_bytes(b)
                    return
    raise ValueError(f"{path}: no tkhd box")


def _payload_window(path: Path, count: int) -> tuple[bytearray, int]:
    """The file's bytes and the start of `count` bytes inside one packet's payload: the packet nearest the
    middle that is large enough, its first 16 bytes spared (the NAL length prefixes stay intact)."""
    with av.open(str(path)) as c:
        packets = [(p.pos, p.size) for p in c.demux(c.streams.video[0]) if p.size and p.pos is not None]
    b = bytearray(path.read_bytes())
    middle = len(b) // 2
    fits = [(pos, size) for pos, size in packets if size >= count + 32]
    if not fits:
        raise ValueError(f"{path}: no packet holds {count} bytes")
    pos, size = min(fits, key=lambda ps: abs(ps[0] + ps[1] // 2 - middle))
    return b, max(pos + 16, min(middle - count // 2, pos + size - count - 16))


def flip_bytes(path: Path, count: int = 2000) -> tuple[int, int]:
    """XOR `count` bytes in the middle of the file, inside one packet's payload (the packet nearest the
    middle that is large enough, its first 16 bytes spared): the NAL length prefixes stay intact, so
    the decoder does not reject the packet but conceals the damaged macroblocks, as it does for bit rot."""
    b, start = _payload_window(path, count)
    for i in range(start, start + count):
        b[i] ^= 0xFF
    path.write_bytes(b)
    return start, start + count


def scramble_bytes(path: Path, count: int = 2000, seed: int = 5) -> tuple[int, int]:
    """Like `flip_bytes`, but XOR with random non-zero values: the damaged macroblocks no longer parse, so
    the decoder logs "error while decoding MB", conceals them and flags the frame corrupt (bit rot). (A
    0xFF XOR, `flip_bytes`, often still parses as valid CABAC: nothing in the stream says it is damaged.)"""
    b, start = _payload_window(path, count)
    rng = np.random.default_rng(seed)
    for i, x in zip(range(start, start + count), rng.integers(1, 256, size=count), strict=True):
        b[i] ^= int(x)
    path.write_bytes(b)
    return start, start + count


def _raw_h264(frames: Sequence[np.ndarray], fps: int, gop: int) -> bytes:
    buf = io.BytesIO()
    h, w = frames[0].shape[:2]
    with av.open(buf, mode="w", format="h264") as out:
        s = out.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {**H264_OPTIONS, "x264-params": _x264_params(gop, "repeat-headers=1:bframes=0")}
        s.codec_context.thread_count = 1
        for i, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            f.pts = i
            out.mux(s.encode(f))
        out.mux(s.encode(None))
    return buf.getvalue()


def resolution_change(path: Path, segments: Sequence[Sequence[np.ndarray]], fps: int, gop: int = 10) -> Path:
    """One h264 track whose picture size changes between segments (new SPS in band, as a camera that
    renegotiates its mode mid-recording): the header keeps the first segment's size."""
    raw = path.with_suffix(".h264")
    raw.write_bytes(b"".join(_raw_h264(seg, fps, gop) for seg in segments))
    tb = Fraction(1, 15360)
    step = int(Fraction(1, fps) / tb)
    with av.open(str(raw), format="h264") as inp, av.open(str(path), mode="w", format="mp4") as out:
        s = inp.streams.video[0]
        d = out.add_stream_from_template(s)
        d.time_base = tb
        for i, p in enumerate(p for p in inp.demux(s) if p.size):
            p.pts = p.dts = i * step
            p.time_base = tb
            p.stream = d
            out.mux(p)
    raw.unlink()
    return path


def encode_depth(path: Path, depth: Sequence[np.ndarray], fps: int) -> Path:
    """16-bit gray frames (h, w uint16) losslessly as PNG-in-MP4 (gray16be), pts = i/fps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = depth[0].shape
    with av.open(str(path), mode="w", format="mp4") as out:
        s = out.add_stream("png", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "gray16be"
        s.codec_context.time_base = Fraction(1, fps)
        for i, d in enumerate(depth):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(d, dtype=np.uint16), format="gray16le")
            f = f.reformat(format="gray16be")
            f.pts = i
            f.time_base = Fraction(1, fps)
            out.mux(s.encode(f))
        out.mux(s.encode(None))
    return path


def decode_all(path: Path | str, fmt: str = "rgb24") -> tuple[list[float], list[np.ndarray]]:
    """Every presented frame (after edit lists) with its time in seconds, as PyAV decodes it."""
    times: list[float] = []
    frames: list[np.ndarray] = []
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        stream.codec_context.thread_count = 1
        for f in c.decode(stream):
            times.append(float(f.time) if f.time is not None else float("nan"))
            frames.append(f.to_ndarray(format=fmt))
    return times, frames


def copy_file(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst
