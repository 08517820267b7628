"""A camera stored as images, read as a stream of frames: the pictures (PNG, JPEG, ...) of one image column of a
data parquet (`dtype: "image"`, a struct `{bytes, path}` per row, as `datasets`' Image feature stores it), the
rows of some episodes, in file order.

The encoder reads it as it reads a video file (`pipeline.video.encode.decoded_frames`): each picture decoded by
Pillow (what `datasets` decodes it with for every LeRobot reader) and handed over as an RGB `av.VideoFrame`, one
row group batch at a time: memory holds one batch of encoded pictures and one decoded frame, never an episode.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.errors import EpisodeError
from pipeline.storage import STREAM_BLOCK, Source, as_file

if TYPE_CHECKING:
    import av
    import numpy as np

BATCH_ROWS = 32  # pictures read from the parquet at a time


@dataclass(slots=True, frozen=True)
class Pictures:
    """The pictures of `column` in the data parquet `src`, for the rows of `episodes` (all rows when None)."""

    src: Source
    column: str
    episodes: frozenset[int] | None = None
    # ((width, height), resize mode): each picture resized by its own size's geometry before anything else sees
    # it (`pipeline.video.encode.decoded_frames`), so pictures of several sizes make one uniform stream
    resize: tuple[tuple[int, int], str] | None = None

    def __str__(self) -> str:
        return f"{self.src} (column {self.column})"


def picture_array(data: bytes) -> np.ndarray:
    """One picture decoded to an RGB uint8 array (height, width, 3), as Pillow reads it; ValueError if it is not
    a picture Pillow reads."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = im if im.mode == "RGB" else im.convert("RGB")
            return np.asarray(rgb)
    except UnidentifiedImageError:
        raise ValueError(f"not a picture Pillow reads (format not identified, {len(data):,} bytes)") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"undecodable picture ({type(exc).__name__}: {exc})") from None


def iter_pictures(p: Pictures) -> Iterator[tuple[int, bytes | None]]:
    """(episode index, the picture's bytes or None) per row of the chosen episodes, in file order."""
    import pyarrow.parquet as pq

    with as_file(p.src).media(block_size=STREAM_BLOCK, what="parquet file") as source:
        pf = pq.ParquetFile(source)
        names = pf.schema_arrow.names
        if p.column not in names:
            raise EpisodeError(None, p.src, f"no image column {p.column!r} in the data file")
        columns = [p.column, "episode_index"] if "episode_index" in names else [p.column]
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            pics = batch.column(0).field("bytes").to_pylist()
            eps = batch.column(1).to_pylist() if len(columns) == 2 else [-1] * batch.num_rows
            for ep, data in zip(eps, pics, strict=True):
                if p.episodes is None or ep in p.episodes:
                    yield int(ep), data


def picture_frames(p: Pictures) -> Iterator[av.VideoFrame]:
    """Each chosen row's picture as an RGB frame; a null or undecodable picture is an error naming the row."""
    import av

    seen: dict[int, int] = {}
    for episode, data in iter_pictures(p):
        n = seen[episode] = seen.get(episode, -1) + 1  # the row's frame number in its episode
        if not data:
            raise EpisodeError(episode, p.src, f"{p.column}: the picture of frame {n} is null (no bytes)")
        try:
            yield av.VideoFrame.from_ndarray(picture_array(data), format="rgb24")
        except ValueError as exc:
            raise EpisodeError(episode, p.src, f"{p.column}: frame {n}: {exc}") from None


def png_bytes(rgb: np.ndarray) -> bytes:
    """An RGB array as PNG (what `datasets`' Image feature stores for a uint8 array, as LeRobot records it)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()

