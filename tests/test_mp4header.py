"""The mp4 header-box reader (`pipeline.video.mp4header`, `pipeline.video.probe.probe_header`): what `prep scan`
reads of an mp4 on object storage.

- moov last (as PyAV/FFmpeg write by default) and first (`movflags=+faststart`), h264, HEVC and AV1: the same
  values as the full demux (`probe_video`) and as FFmpeg's open of the whole file (`probe_index`), from 1 read
  (moov first) or 2 (moov last), no sample byte read; with the pixel format, one read more (the first sample);
- an mdat whose size is 0 ("to the end of the file") or 64-bit (largesize): the same values;
- a short mdat (FFmpeg reads through it rather than seek): served whole, the same values;
- a truncated file, an mkv, a fragmented mp4, hostile box sizes: `NotPlainMp4` (the caller opens the file as it
  is), after a bounded number of bytes read, never a hang.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.errors import EpisodeError
from pipeline.video import mp4header
from pipeline.video.mp4header import FIRST_READ, MAX_BOXES, NotPlainMp4, walk
from pipeline.video.probe import IndexProbe, probe_header, probe_index, probe_video


def encode(path: Path, codec: str = "libx264", *, frames: int = 40, size: tuple[int, int] = (96, 128),
           fmt: str = "mp4", options: dict[str, str] | None = None) -> Path:
    """Noise frames (they compress badly: an mdat of a few hundred kB), a fixed GOP of 10."""
    h, w = size
    rng = np.random.default_rng(7)
    with av.open(str(path), "w", format=fmt, options=options or {}) as out:
        stream = out.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 30)
        if codec == "libx264":
            stream.options = {"g": "10", "keyint_min": "10", "sc_threshold": "0", "crf": "10"}
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mp4header")
    return {
        "last": encode(d / "last.mp4"),
        "first": encode(d / "first.mp4", options={"movflags": "+faststart"}),
        "short": encode(d / "short.mp4", frames=6, size=(32, 48)),  # an mdat under SHORT_SKIP
        "mkv": encode(d / "noise.mkv", fmt="matroska"),
        "fragmented": encode(d / "frag.mp4", options={"movflags": "+frag_keyframe+empty_moov"}),
    }


class Counting:
    """A `ReadAt` over bytes that counts reads and bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads, self.bytes = data, 0, 0

    def __call__(self, offset: int, length: int) -> bytes:
        self.reads += 1
        out = self.data[offset:offset + length]
        self.bytes += len(out)
        return out


def boxes_of(data: bytes) -> list[tuple[int, int, bytes]]:
    return walk(Counting(data), len(data)).boxes


def same_values(probe: IndexProbe, path: Path, *, pix_fmt: bool = False) -> None:
    """`probe` holds what the full demux and FFmpeg's open of the whole file find."""
    demux = probe_video(path, pix_fmt=pix_fmt)
    whole = probe_index(str(path), shown=str(path), size=path.stat().st_size, pix_fmt=pix_fmt)
    assert whole is not None
    assert probe.frames_from_index == demux.frames_from_packets == whole.frames_from_index
    assert probe.frames_from_header == demux.frames_from_header == whole.frames_from_header
    assert probe.keyframes == demux.keyframes == whole.keyframes
    assert (probe.codec, probe.width, probe.height, probe.fps) == (demux.codec, demux.width, demux.height, demux.fps)
    assert probe.duration_s == demux.duration_s == whole.duration_s
    assert probe.pix_fmt == whole.pix_fmt
    if pix_fmt:
        assert probe.pix_fmt == demux.pix_fmt == "yuv420p"
    assert np.array_equal(probe.pts, demux.pts) and np.array_equal(probe.pts, whole.pts)
    assert np.array_equal(probe.keyframe_pts, demux.keyframe_pts)
    assert np.array_equal(probe.sample_bytes, whole.sample_bytes)
    assert probe.payload_bytes == demux.payload_bytes
    assert (probe.time_base_s, probe.frames_discarded) == (whole.time_base_s, whole.frames_discarded)


def header_probe(data: bytes, shown: str = "x.mp4", *, pix_fmt: bool = False) -> tuple[IndexProbe | None, Counting]:
    """`probe_header` over bytes in memory, counting what it reads."""
    reads = Counting(data)

    class Reader:
        pos = 0

        def seek(self, offset: int, whence: int = 0) -> int:
            self.pos = offset
            return offset

        def read(self, n: int) -> bytes:
            out = reads(self.pos, n)
            self.pos += len(out)
            return out

    return probe_header(Reader(), shown=shown, size=len(data), pix_fmt=pix_fmt), reads  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["last", "first"])
def test_header_boxes_give_the_demux_values_without_a_sample(videos: dict[str, Path], layout: str) -> None:
    path = videos[layout]
    data = path.read_bytes()
    kinds = [k for _, _, k in boxes_of(data)]
    assert kinds.index(b"moov") > kinds.index(b"mdat") if layout == "last" else kinds.index(b"moov") < kinds.index(
        b"mdat")
    probe, reads = header_probe(data)
    assert probe is not None
    same_values(probe, path)
    moov = next(e - s for s, e, k in boxes_of(data) if k == b"moov")
    assert reads.reads == (2 if layout == "last" else 1)
    assert reads.bytes <= FIRST_READ + moov
    assert reads.bytes < 0.05 * len(data)
    # the pixel format: the first sample read too (one read, from where the first read ended), decoded once
    probe, reads = header_probe(data, pix_fmt=True)
    assert probe is not None
    same_values(probe, path, pix_fmt=True)
    assert reads.reads == (3 if layout == "last" else 2)


def test_a_served_view_answers_end_of_file_inside_the_mdat(videos: dict[str, Path]) -> None:
    data = videos["last"].read_bytes()
    view = walk(Counting(data), len(data))
    start, end, _ = next(b for b in view.boxes if b[2] == b"mdat")
    assert end - start > mp4header.SHORT_SKIP
    view.seek(start)
    assert view.read(64) == data[start:start + 8]  # the mdat's header, then nothing
    view.seek(start + 100)
    assert view.read(64) == b""
    view.seek(0)
    assert view.read(8) == data[:8]
    assert view.seek(0, 2) == len(data)


@pytest.mark.parametrize("codec", ["libx265", "libsvtav1"])
def test_hevc_and_av1(tmp_path: Path, codec: str) -> None:
    if codec not in av.codecs_available:
        pytest.skip(f"{codec} not in this FFmpeg")
    for layout, options in (("last", {}), ("first", {"movflags": "+faststart"})):
        path = encode(tmp_path / f"{codec}-{layout}.mp4", codec, frames=24, size=(128, 160), options=options)
        probe, reads = header_probe(path.read_bytes(), pix_fmt=True)
        assert probe is not None, (codec, layout)
        same_values(probe, path, pix_fmt=True)
        assert reads.reads <= 3


def test_a_short_mdat_is_served_whole(videos: dict[str, Path]) -> None:
    path = videos["short"]
    data = path.read_bytes()
    mdat = next(e - s for s, e, k in boxes_of(data) if k == b"mdat")
    assert mdat <= mp4header.SHORT_SKIP  # FFmpeg reads through a skip this short instead of seeking
    probe, _ = header_probe(data)
    assert probe is not None
    same_values(probe, path)


def rewrite_mdat(data: bytes, header: Callable[[int, int], bytes]) -> bytes:
    """`data` with its `free` (8 bytes) + `mdat` headers, which FFmpeg writes side by side, replaced by
    `header(start, payload)` (16 bytes), so that no sample moves."""
    boxes = boxes_of(data)
    i = next(n for n, (_, _, k) in enumerate(boxes) if k == b"mdat")
    free_start, free_end, kind = boxes[i - 1]
    assert kind == b"free" and free_end - free_start == 8
    start, end, _ = boxes[i]
    new = header(free_start, end - start - 8)
    assert len(new) == 16
    return data[:free_start] + new + data[start + 8:]


@pytest.mark.parametrize("layout", ["last", "first"])
def test_a_64_bit_mdat_size(videos: dict[str, Path], tmp_path: Path, layout: str) -> None:
    data = rewrite_mdat(videos[layout].read_bytes(), lambda start, payload: struct.pack(">I4sQ", 1, b"mdat",
                                                                                        16 + payload))
    path = tmp_path / "large.mp4"
    path.write_bytes(data)
    kinds = [(k, e - s) for s, e, k in boxes_of(data)]
    assert (b"free", 8) not in kinds
    probe, _ = header_probe(data)
    assert probe is not None
    same_values(probe, path)


def test_an_mdat_to_the_end_of_the_file(videos: dict[str, Path], tmp_path: Path) -> None:
    data = bytearray(videos["first"].read_bytes())
    start = next(s for s, _, k in boxes_of(bytes(data)) if k == b"mdat")
    data[start:start + 4] = struct.pack(">I", 0)  # size 0: the box runs to the end of the file
    path = tmp_path / "to-end.mp4"
    path.write_bytes(data)
    assert boxes_of(bytes(data))[-1] == (start, len(data), b"mdat")
    probe, _ = header_probe(bytes(data))
    assert probe is not None
    same_values(probe, path)


@pytest.mark.parametrize("layout", ["last", "first"])
def test_a_truncated_file_falls_back(videos: dict[str, Path], layout: str) -> None:
    data = videos[layout].read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 20):
        with pytest.raises(NotPlainMp4, match=r"past the end|after the last box"):
            walk(Counting(data[:cut]), cut)
        assert header_probe(data[:cut])[0] is None  # the caller opens the file as it is


def test_other_containers_fall_back(videos: dict[str, Path]) -> None:
    for name, why in (("mkv", "no box"), ("fragmented", "fragmented")):
        data = videos[name].read_bytes()
        with pytest.raises(NotPlainMp4, match=why):
            walk(Counting(data), len(data))
        probe, reads = header_probe(data)
        assert probe is None and reads.bytes <= FIRST_READ + mp4header.TAIL_READ


def test_hostile_box_sizes_end_in_a_bounded_read(videos: dict[str, Path]) -> None:
    data = videos["first"].read_bytes()
    ftyp = data[:data.index(b"moov") - 4]
    cases = {
        "a size under its header": ftyp + struct.pack(">I4s", 4, b"moov") + bytes(64),
        "a 64-bit size under its header": ftyp + struct.pack(">I4sQ", 1, b"moov", 8) + bytes(64),
        "a size past the end": ftyp + struct.pack(">I4s", 2**32 - 1, b"moov") + bytes(64),
        "a 64-bit size past the end": ftyp + struct.pack(">I4sQ", 1, b"mdat", 2**63) + bytes(64),
        "many tiny boxes": ftyp + struct.pack(">I4s", 8, b"free") * (MAX_BOXES + 10),
        "a box type of control bytes": ftyp + struct.pack(">I4s", 16, b"\x00\x01\x02\x03") + bytes(8),
        "trailing bytes": ftyp + bytes(5),
        "no moov": ftyp + struct.pack(">I4s", 16, b"free") + bytes(8),
        "two moov": data[:len(ftyp)] + 2 * (struct.pack(">I4s", 16, b"moov") + bytes(8)),
    }
    for name, bad in cases.items():
        reads = Counting(bad)
        with pytest.raises(NotPlainMp4):
            walk(reads, len(bad))
        assert reads.bytes <= FIRST_READ + mp4header.TAIL_READ, name
    # a box within the file but over MAX_HEADER: refused before it is read
    size = len(ftyp) + mp4header.MAX_HEADER + 64

    def read_at(offset: int, length: int) -> bytes:
        assert length <= mp4header.TAIL_READ, "read past the budget"
        head = ftyp + struct.pack(">I4s", mp4header.MAX_HEADER + 64, b"moov")
        return (head + bytes(max(0, offset + length - len(head))))[offset:offset + length]

    with pytest.raises(NotPlainMp4, match="over"):
        walk(read_at, size)


def test_a_zero_byte_file_is_one_line() -> None:
    with pytest.raises(EpisodeError, match="zero-byte"):
        header_probe(b"")


def test_a_header_ffmpeg_cannot_open_falls_back(videos: dict[str, Path], tmp_path: Path) -> None:
    """A moov whose body is garbage: the walk succeeds, FFmpeg's open of the header fails, and the caller opens
    the file as it is, which names what is wrong in one line."""
    data = bytearray(videos["last"].read_bytes())
    start, end, _ = next(b for b in boxes_of(bytes(data)) if b[2] == b"moov")
    data[start + 8:end] = bytes(end - start - 8)
    probe, _ = header_probe(bytes(data))
    assert probe is None
    path = tmp_path / "bad-moov.mp4"
    path.write_bytes(data)
    with pytest.raises(EpisodeError, match=r"unreadable video|no video stream"):
        probe_index(str(path), shown=str(path), size=len(data))
