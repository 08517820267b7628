"""An mp4's header boxes, read in 1-3 exact ranges, as a file that FFmpeg opens without reading any sample.

`prep scan` needs only what an mp4 says of itself in its header: `ftyp` and `moov` (the codec, the size, the
sample tables). Through FFmpeg alone, a header read on object storage also fetched the first sample (FFmpeg's
stream-info probe reads one packet however small `probesize` is: ~15-25 kB of a 1.3 MB episode file) and whole
read blocks around the header (docs/storage.md, "Measured: local against S3"). Here the top-level boxes are
walked first, each by its 8- or 16-byte header (size and type only: this is not a box parser), every box but the
media data (`mdat`) and free space is fetched exactly, and `HeaderView` hands FFmpeg a file in which every
byte inside an `mdat` reads as end of file: its open parses the header, its probe finds no packet, and the sample index
(`stream.index_entries`) is the header's, as before (tests/test_mp4header.py compares every value).

Anything else (not an mp4; a fragmented mp4, whose index lives in `moof` boxes; no `moov` or two; a box whose
size is impossible or runs past the end of the file; more than `MAX_BOXES` top-level boxes or `MAX_HEADER` bytes
of them) is `NotPlainMp4`, and the caller opens the file as it is. A walk reads at most `MAX_HEADER` bytes plus
`FIRST_READ` and a `TAIL_READ`, and ends: each step moves past a box of at least 8 bytes, `MAX_BOXES` steps at most.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import IO

FIRST_READ = 8 << 10  # the first range: ftyp, a front moov of a short episode, the mdat's header
TAIL_READ = 256 << 10  # a range read at a box header after a skipped mdat, at most: a trailing moov whole (the
# range ends at the end of the file, so a last moov of ~20k samples or fewer costs one read of its own bytes)
MAX_BOXES = 64  # top-level boxes walked at most (a plain mp4 has 3-5: ftyp, free, mdat, moov, udta)
MAX_HEADER = 64 << 20  # bytes of non-media boxes fetched at most (a moov of a few million samples)
MAX_SAMPLE = 16 << 20  # the largest first sample fetched for its pixel format
MEDIA = b"mdat"  # read as end of file past its header
SKIPPED = frozenset({MEDIA, b"free", b"skip"})  # not fetched past their headers (FFmpeg skips free space too)...
SHORT_SKIP = 64 << 10  # ... unless at most this long: FFmpeg's IO reads through a skip within its buffer (32 KiB,
# PyAV's default buffer_size) plus 32 KiB (aviobuf.c SHORT_SEEK_THRESHOLD) instead of seeking, so such a box is
# fetched and served whole (a short video's mdat: what a 64 KiB block read anyway)
FRAGMENTED = frozenset({b"moof", b"mfra", b"sidx"})  # the sample index is not the moov's alone

ReadAt = Callable[[int, int], bytes]  # (offset, length) -> at most `length` bytes from `offset`


class NotPlainMp4(ValueError):
    """Not an mp4 whose header boxes hold its whole sample index: open the file as it is."""


def read_at_of(fh: IO[bytes]) -> ReadAt:
    """A `ReadAt` over a seekable binary reader: one seek and one read per range (with an object store's
    `EXACT_READS` reader, one ranged GET)."""

    def read_at(offset: int, length: int) -> bytes:
        fh.seek(offset)
        return bytes(fh.read(length))

    return read_at


class _Fetched:
    """The ranges read so far (1-3), a range that continues another joined to it."""

    def __init__(self, read_at: ReadAt, size: int) -> None:
        self.read_at, self.size, self.bytes, self.requests = read_at, size, 0, 0
        self.ranges: list[tuple[int, bytes]] = []

    def fetch(self, offset: int, end: int, budget: int) -> None:
        end = min(end, self.size)
        if end <= offset:
            return
        if self.bytes + (end - offset) > budget:
            raise NotPlainMp4(f"header boxes over {MAX_HEADER:,} bytes")
        data = self.read_at(offset, end - offset)
        self.bytes += len(data)
        self.requests += 1
        if len(data) != end - offset:
            raise NotPlainMp4(f"a read at {offset:,} gave {len(data):,} of {end - offset:,} bytes")
        for i, (start, prev) in enumerate(self.ranges):
            if start + len(prev) == offset:
                self.ranges[i] = (start, prev + data)
                return
        self.ranges.append((offset, data))

    def end_of(self, offset: int) -> int | None:
        """The end of the fetched range holding `offset`."""
        return next((s + len(d) for s, d in self.ranges if s <= offset < s + len(d)), None)

    def get(self, offset: int, length: int) -> bytes | None:
        """`length` bytes at `offset`, if fetched."""
        for start, data in self.ranges:
            if start <= offset and offset + length <= start + len(data):
                return data[offset - start:offset - start + length]
        return None


def box_header(head: bytes, pos: int, size: int) -> tuple[bytes, int, int]:
    """(type, header length, box length) of the box whose first 8-16 bytes are `head`, at `pos` in a file of
    `size` bytes; raises `NotPlainMp4` for a size that is impossible or runs past the end of the file."""
    size32, kind = struct.unpack(">I4s", head[:8])
    if not all(0x20 <= c < 0x7F for c in kind):
        raise NotPlainMp4(f"no box at {pos:,} (type {kind!r})")
    if size32 == 1:  # a 64-bit size follows the type
        if len(head) < 16:
            raise NotPlainMp4(f"box {kind!r} at {pos:,}: its 64-bit size is past the end of the file")
        header, box = 16, struct.unpack(">Q", head[8:16])[0]
    elif size32 == 0:  # to the end of the file
        header, box = 8, size - pos
    else:
        header, box = 8, size32
    if box < header:
        raise NotPlainMp4(f"box {kind!r} at {pos:,} claims {box:,} bytes")
    if pos + box > size:
        raise NotPlainMp4(f"box {kind!r} at {pos:,} claims {box:,} bytes, past the end of the file ({size:,})")
    return kind, header, box


def walk(read_at: ReadAt, size: int) -> HeaderView:
    """The file's top-level boxes, every box but a long `mdat` (or free space) fetched whole: 1 range (moov
    first, within `FIRST_READ`), 2 (moov last, or a larger front moov) or 3 (a last moov over `TAIL_READ`).
    Raises `NotPlainMp4`."""
    got = _Fetched(read_at, size)
    budget = MAX_HEADER + FIRST_READ + TAIL_READ
    boxes: list[tuple[int, int, bytes, int]] = []  # (start, end, type, bytes served from its start)
    pos = 0
    while pos < size:
        if len(boxes) >= MAX_BOXES:
            raise NotPlainMp4(f"more than {MAX_BOXES} top-level boxes")
        if size - pos < 8:
            raise NotPlainMp4(f"{size - pos} bytes after the last box")
        want = min(16, size - pos)
        head = got.get(pos, want)
        if head is None:  # a box header not read yet: it, and what follows (a trailing moov, whole)
            got.fetch(got.end_of(pos) or pos, pos + (TAIL_READ if pos else FIRST_READ), budget)
            head = got.get(pos, want)
            if head is None:
                raise NotPlainMp4(f"no box header at {pos:,}")
        kind, header, box = box_header(head, pos, size)
        if kind in FRAGMENTED:
            raise NotPlainMp4(f"a {kind.decode()} box: a fragmented mp4")
        served = header if kind in SKIPPED and box - header > SHORT_SKIP else box
        if served > MAX_HEADER:
            raise NotPlainMp4(f"a {kind.decode()} box of {box:,} bytes, over {MAX_HEADER:,}")
        boxes.append((pos, pos + box, kind, served))
        if served == box and got.get(pos, box) is None:  # the rest of the box, and the next box's header
            got.fetch(got.end_of(pos) or pos, pos + box + 16, budget)
        pos += box
    if sum(1 for b in boxes if b[2] == b"moov") != 1:
        raise NotPlainMp4("not one moov box")
    return HeaderView(size, boxes, got)


class HeaderView(io.RawIOBase):
    """The file as FFmpeg reads it: the header boxes' bytes where they lie, and end of file inside a media box of
    over `SHORT_SKIP` bytes (its own header excepted). Seekable, read-only, in memory: `fetched` bytes in
    `requests` reads."""

    def __init__(self, size: int, boxes: list[tuple[int, int, bytes, int]], got: _Fetched) -> None:
        super().__init__()
        self.size, self.pos, self._got = size, 0, got
        self.boxes = [(start, end, kind) for start, end, kind, _ in boxes]
        self._spans: list[tuple[int, bytes]] = []  # (start, bytes) served
        for start, _end, kind, served in boxes:
            data = got.get(start, served)
            if data is None:  # cannot be: walk fetched it
                raise NotPlainMp4(f"box {kind!r} at {start:,} not read")
            self._spans.append((start, data))

    @property
    def fetched(self) -> int:
        return self._got.bytes

    @property
    def requests(self) -> int:
        return self._got.requests

    def add_sample(self, offset: int, length: int) -> bool:
        """Fetch one sample (one exact read) and serve it, so that a decoder can learn the pixel format from it;
        False (nothing read) where it does not lie inside a media box or is over `MAX_SAMPLE`."""
        if not 0 < length <= MAX_SAMPLE:
            return False
        if any(s <= offset and offset + length <= s + len(d) for s, d in self._spans):  # a short mdat, served
            return True
        if not any(kind == MEDIA and start < offset and offset + length <= end for start, end, kind in self.boxes):
            return False
        try:  # what the first read already holds of it (a sample right after the mdat's header) is not read again
            self._got.fetch(self._got.end_of(offset) or offset, offset + length, self._got.bytes + length)
        except NotPlainMp4:
            return False
        data = self._got.get(offset, length)
        if data is None:
            return False
        self._spans.append((offset, data))
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buf: memoryview | bytearray) -> int:  # type: ignore[override]
        for start, data in reversed(self._spans):  # a sample added last lies inside the media box's span
            if start <= self.pos < start + len(data):
                n = min(len(buf), start + len(data) - self.pos)
                buf[:n] = data[self.pos - start:self.pos - start + n]
                self.pos += n
                return n
        return 0  # inside a media box, or past the end: end of file
