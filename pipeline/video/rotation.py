"""A video's display matrix (rotation) and the filters that put its frames in display orientation.

An MP4/MOV track may carry a display matrix (`tkhd`, composed with the movie's `mvhd`), as phones and
`ffmpeg -display_rotation` write it: the coded frames stay as recorded and players rotate them. The readers
differ (docs/verify.md): lerobot 0.3.x / 0.4.x (torchcodec < 0.11, pyav) and 0.6.x's pyav backend hand back the
coded orientation; torchcodec 0.11 (0.6.x's default backend) applies the matrix. prep's outputs therefore hold
the frames in display orientation, rotated in the pixels, with no display matrix left: every reader and
back-end hands back the same frame.

`display_matrix` reads the matrix from the boxes (a few header reads, no demux, no decode) the way FFmpeg's
mov demuxer composes it; `rotation_filters` chooses the filters exactly as the `ffmpeg` program's autorotate
does (FFmpeg 5.1 `fftools/ffmpeg_filter.c`), so the `pyav` and `ffmpeg` engines give the same pixels.
"""

from __future__ import annotations

import math
import struct
from typing import IO

from pipeline.errors import EpisodeError
from pipeline.storage import HEADER_BLOCK, FileProblem, Source, as_file

IDENTITY = (0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
_CONTAINERS = {b"moov", b"trak", b"mdia"}
MAX_BOXES = 10_000  # per level: a corrupt size cannot make the walk run on


def _boxes(fh: IO[bytes], start: int, end: int) -> list[tuple[bytes, int, int]]:
    """(type, body offset, end offset) of the boxes in [start, end), reading only their headers."""
    out: list[tuple[bytes, int, int]] = []
    pos = start
    while pos + 8 <= end and len(out) < MAX_BOXES:
        fh.seek(pos)
        head = fh.read(16)
        if len(head) < 8:
            break
        size, typ = struct.unpack(">I4s", head[:8])
        hdr = 8
        if size == 1:
            if len(head) < 16:
                break
            size, hdr = struct.unpack(">Q", head[8:16])[0], 16
        elif size == 0:
            size = end - pos
        if size < hdr or pos + size > end:
            break
        out.append((typ, pos + hdr, pos + size))
        pos += size
    return out


def _matrix_at(fh: IO[bytes], offset: int) -> tuple[int, ...] | None:
    fh.seek(offset)
    raw = fh.read(36)
    return struct.unpack(">9i", raw) if len(raw) == 36 else None


def _compose(track: tuple[int, ...], movie: tuple[int, ...]) -> tuple[int, ...]:
    """FFmpeg's mov.c: res[i][j] = sum_e track[i][e] * movie[e][j] >> (16, 16, 30)[e]."""
    shifts = (16, 16, 30)
    res = []
    for i in range(3):
        for j in range(3):
            res.append(sum((track[i * 3 + e] * movie[e * 3 + j]) >> shifts[e] for e in range(3)))
    return tuple(res)


def display_matrix(path: Source | str) -> tuple[int, ...] | None:
    """The first video track's display matrix (9 int32: a b u c d v x y w) as FFmpeg's mov demuxer exports it,
    or None when it is the identity, the file is not MP4/MOV, or its boxes cannot be read."""
    try:
        with as_file(path).open(block_size=HEADER_BLOCK, what="video file") as fh:  # the boxes: a few ranged reads
            return read_display_matrix(fh)
    except (OSError, FileProblem):
        return None


def read_display_matrix(fh: IO[bytes]) -> tuple[int, ...] | None:
    """`display_matrix` of an open seekable reader (a file, or a header view that serves the boxes alone:
    `pipeline.video.mp4header.HeaderView`). Raises OSError where a read fails."""
    fh.seek(0, 2)
    size = fh.tell()
    moov = next(((b, e) for t, b, e in _boxes(fh, 0, size) if t == b"moov"), None)
    if moov is None:
        return None
    movie: tuple[int, ...] | None = IDENTITY
    for typ, body, end in _boxes(fh, *moov):
        if typ == b"mvhd":
            fh.seek(body)
            version = fh.read(1)
            movie = _matrix_at(fh, body + (48 if version == b"\x01" else 36))
        elif typ == b"trak":
            track = _video_track_matrix(fh, body, end)
            if track is None:
                continue
            if movie is None:
                return None
            res = _compose(track, movie)
            return None if res == IDENTITY else res
    return None


def _video_track_matrix(fh: IO[bytes], body: int, end: int) -> tuple[int, ...] | None:
    """The tkhd matrix of a trak box whose handler is 'vide', else None."""
    children = _boxes(fh, body, end)
    is_video = False
    for typ, b, e in children:
        if typ == b"mdia":
            for t2, b2, _e2 in _boxes(fh, b, e):
                if t2 == b"hdlr":
                    fh.seek(b2 + 8)
                    is_video = fh.read(4) == b"vide"
    if not is_video:
        return None
    for typ, b, _e in children:
        if typ == b"tkhd":
            fh.seek(b)
            version = fh.read(1)
            return _matrix_at(fh, b + (52 if version == b"\x01" else 40))
    return None


def rotation_get(m: tuple[int, ...]) -> float:
    """FFmpeg's av_display_rotation_get: the counter-clockwise rotation in degrees (NaN if degenerate)."""
    s0, s1 = math.hypot(m[0] / 65536, m[3] / 65536), math.hypot(m[1] / 65536, m[4] / 65536)
    if s0 == 0 or s1 == 0:
        return math.nan
    return -math.degrees(math.atan2(m[1] / 65536 / s1, m[0] / 65536 / s0))


def clockwise_degrees(m: tuple[int, ...] | None) -> float:
    """FFmpeg 5.1 cmdutils `get_rotation`: the clockwise rotation a player applies, in [0, 360)."""
    if m is None:
        return 0.0
    r = rotation_get(m)
    if math.isnan(r):
        return math.nan
    theta = -float(round(r))
    theta -= 360 * math.floor(theta / 360 + 0.9 / 360)
    return theta


def rotation_filters(m: tuple[int, ...] | None) -> list[tuple[str, dict[str, str]]] | None:
    """The filters that put a frame in display orientation, as the `ffmpeg` program's autorotate inserts them
    (FFmpeg 5.1 ffmpeg_filter.c); [] for none; None for a rotation that is not a multiple of 90 degrees (which
    prep refuses: it would need interpolation and a larger canvas)."""
    if m is None:
        return []
    theta = clockwise_degrees(m)
    if math.isnan(theta):
        return None
    if abs(theta - 90) < 1.0:
        return [("transpose", {"dir": "cclock_flip" if m[3] > 0 else "clock"})]
    if abs(theta - 180) < 1.0:
        return [*([("hflip", {})] if m[0] < 0 else []), *([("vflip", {})] if m[4] < 0 else [])]
    if abs(theta - 270) < 1.0:
        return [("transpose", {"dir": "clock_flip" if m[3] < 0 else "cclock"})]
    if abs(theta) > 1.0:
        return None
    return [("vflip", {})] if m[4] < 0 else []


def swaps_sides(m: tuple[int, ...] | None) -> bool:
    """Whether display orientation swaps width and height (a quarter turn)."""
    return any(name == "transpose" for name, _ in rotation_filters(m) or [])


def display_filters(path: Source | str, episode: int | None = None) -> tuple[tuple[int, ...] | None,
                                                                             list[tuple[str, dict[str, str]]]]:
    """The file's display matrix and the filters that apply it; raises `EpisodeError` for a rotation prep
    cannot apply exactly (not a multiple of 90 degrees)."""
    m = display_matrix(path)
    steps = rotation_filters(m)
    if steps is None:
        raise EpisodeError(episode, str(as_file(path)), f"the display matrix rotates by {clockwise_degrees(m):g} "
                                                        "degrees, not a multiple of 90: not supported")
    return m, steps


def describe(m: tuple[int, ...] | None) -> str:
    """'rotated 90 degrees clockwise' (and mirrored), for a finding or a note."""
    theta = clockwise_degrees(m)
    mirrored = m is not None and (m[0] * m[4] - m[1] * m[3]) < 0
    return f"rotated {theta:g} degrees clockwise" + (" and mirrored" if mirrored else "")
