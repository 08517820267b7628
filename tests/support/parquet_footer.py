"""Rewrite the row counts a parquet file's footer claims (FileMetaData.num_rows and every
RowGroup.num_rows), leaving the pages as they are: the "footer claims 10^15 rows" fault.

The footer is Thrift's compact protocol; this walks it generically (skipping every field it does
not rewrite), so any file pyarrow writes can be patched. Only for tests.
"""

from __future__ import annotations

import struct
from pathlib import Path

I64 = 6
LIST = 9
STRUCT = 12


def _varint(buf: bytes | bytearray, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _list_header(buf: bytes | bytearray, i: int) -> tuple[int, int, int]:
    h = buf[i]
    i += 1
    n, elem = h >> 4, h & 0x0F
    if n == 15:
        n, i = _varint(buf, i)
    return n, elem, i


def _skip(buf: bytes | bytearray, i: int, t: int) -> int:
    if t in (1, 2):  # a bool field: the value is in the type nibble
        return i
    if t == 3:  # byte
        return i + 1
    if t in (4, 5, 6):  # i16, i32, i64: zigzag varints
        return _varint(buf, i)[1]
    if t == 7:  # double
        return i + 8
    if t == 8:  # binary
        n, i = _varint(buf, i)
        return i + n
    if t in (LIST, 10):  # list, set
        n, elem, i = _list_header(buf, i)
        for _ in range(n):
            i = i + 1 if elem in (1, 2) else _skip(buf, i, elem)
        return i
    if t == 11:  # map
        n, i = _varint(buf, i)
        if n:
            kv = buf[i]
            i += 1
            for _ in range(n):
                i = _skip(buf, i, kv >> 4)
                i = _skip(buf, i, kv & 0x0F)
        return i
    if t == STRUCT:
        return _struct(buf, i, None, ())
    raise ValueError(f"unknown thrift compact type {t}")


def _struct(buf: bytes | bytearray, i: int, hits: list[tuple[int, int]] | None, path: tuple[int, ...]) -> int:
    """Skip one struct from `i`; record in `hits` the spans of FileMetaData.num_rows (field 3) and
    RowGroup.num_rows (field 4 / field 3)."""
    last = 0
    while True:
        h = buf[i]
        i += 1
        if h == 0:
            return i
        delta, t = h >> 4, h & 0x0F
        if delta:
            fid = last + delta
        else:
            n, i = _varint(buf, i)
            fid = (n >> 1) ^ -(n & 1)
        last = fid
        here = (*path, fid)
        if hits is not None and t == I64 and here in ((3,), (4, 3)):
            start = i
            i = _varint(buf, i)[1]
            hits.append((start, i))
        elif hits is not None and t == LIST and here == (4,):
            n, _elem, i = _list_header(buf, i)
            for _ in range(n):
                i = _struct(buf, i, hits, (4,))
        else:
            i = _skip(buf, i, t)


def set_num_rows(path: Path, num_rows: int) -> None:
    """Make the footer of the parquet file at `path` claim `num_rows` rows (file and every row group)."""
    data = Path(path).read_bytes()
    assert data[-4:] == b"PAR1", f"{path}: not a parquet file"
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = bytearray(data[start:-8])
    hits: list[tuple[int, int]] = []
    _struct(footer, 0, hits, ())
    assert hits, f"{path}: no num_rows field found in the footer"
    encoded = _encode_varint((num_rows << 1) ^ (num_rows >> 63))
    for a, b in sorted(hits, reverse=True):
        footer[a:b] = encoded
    Path(path).write_bytes(data[:start] + bytes(footer) + struct.pack("<I", len(footer)) + b"PAR1")
