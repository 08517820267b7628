"""A video's packets as its container index lists them, for the per-file checks of a source that a demux would
otherwise read whole: `prep reencode`'s check of an object-store source (`pipeline.jobs.preverify`).

`probe_indexed` reads an mp4's header boxes alone (`pipeline.video.mp4header`: 1-3 exact ranges, ~10 kB of a 1.4 MB
episode file, where a demux reads every byte) and makes of its sample index the `VideoProbe` a demux would give:
each sample's presentation time and sync flag, the frames the header counts, the samples its edit list hides. It
declines (None) where the index cannot stand for the packets: no plain mp4 (another container, fragmented, a box
past the end of the file), an index shorter than the header's count, or a sample that lies past the end of the file
(a truncated copy whose index survived: the demux would find fewer packets). Its display matrix is read from the
same header boxes.

What the index says is the demux's only as far as FFmpeg builds both from the same tables; `same_packets` tells,
for a file whose bytes are at hand, whether the two agree on everything the checks read (the reencode stage asks
it of each downloaded source: a file where they differ sends the job back to the demux of every file, so that a
verdict never rests on the index alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, cast

import av
import numpy as np

from pipeline.errors import EpisodeError
from pipeline.storage import EXACT_READS, FileProblem, Source, as_file
from pipeline.video import mp4header
from pipeline.video.probe import INDEX_OPEN_OPTIONS, IndexProbe, VideoProbe, probe_index
from pipeline.video.rotation import read_display_matrix


@dataclass(slots=True, frozen=True)
class IndexedVideo:
    """A video as its header describes it: the probe a demux would give, and its display matrix."""

    probe: VideoProbe
    matrix: tuple[int, ...] | None


def probe_indexed(source: Source | str, *, episode: int | None = None) -> IndexedVideo | None:
    """The header-only probe of `source` (a dataset's file through its store, or a local path), or None where its
    index cannot stand for a demux (the caller demuxes). Never raises for the file's content: an unreadable or odd
    file is left to the demux, which names the problem as it always has."""
    src = as_file(source)
    try:
        size = src.stat("video file").size
        if size == 0:
            return None
        with src.open(block_size=EXACT_READS, what="video file") as fh:  # the header boxes: 1-3 exact reads
            view = mp4header.walk(mp4header.read_at_of(fh), size)
        index = probe_index(cast(IO[bytes], view), shown=str(src), size=size, episode=episode)
        if index is None or _samples_end(view) > size:
            return None
        matrix = read_display_matrix(cast(IO[bytes], view))
    except (EpisodeError, FileProblem, OSError, av.FFmpegError, ValueError):  # NotPlainMp4 is a ValueError
        return None
    return IndexedVideo(as_video_probe(index, src), matrix)


def _samples_end(fh: object) -> int:
    """Where the last byte of the first video stream's samples lies (the index's offsets and sizes)."""
    fh.seek(0)  # type: ignore[attr-defined]
    with av.open(fh, mode="r", options=INDEX_OPEN_OPTIONS) as container:
        entries = container.streams.video[0].index_entries
        return max((int(e.pos) + int(e.size) for e in entries if e.size > 0), default=0)


def as_video_probe(index: IndexProbe, source: Source) -> VideoProbe:
    """The `VideoProbe` of an index: its samples as the packets (`frames_from_packets` = `frames_from_index`)."""
    return VideoProbe(path=index.path, bytes=index.bytes, codec=index.codec, width=index.width, height=index.height,
                      pix_fmt=index.pix_fmt, fps=index.fps, frames_from_header=index.frames_from_header,
                      frames_from_packets=index.frames_from_index, keyframes=index.keyframes,
                      duration_s=index.duration_s, pts_s=tuple(index.pts_s.tolist()),
                      keyframe_pts_s=tuple(index.keyframe_pts_s.tolist()),
                      packet_bytes=tuple(index.sample_bytes.tolist()),
                      frames_discarded=index.frames_discarded, time_base_s=index.time_base_s,
                      source=as_file(source))


def same_packets(indexed: VideoProbe, demuxed: VideoProbe) -> bool:
    """Whether a header-only probe and a demux of the same file agree on everything the per-file checks read: the
    header (codec, size, rate, time base, frames it counts) and each presented frame's time and sync flag, and the
    frames the edit list hides. Sample sizes are left out (no check reads them)."""
    return (indexed.bytes == demuxed.bytes and indexed.codec == demuxed.codec and indexed.width == demuxed.width
            and indexed.height == demuxed.height and indexed.fps == demuxed.fps
            and indexed.time_base_s == demuxed.time_base_s and indexed.duration_s == demuxed.duration_s
            and indexed.frames_from_header == demuxed.frames_from_header
            and indexed.frames_from_packets == demuxed.frames_from_packets
            and indexed.frames_discarded == demuxed.frames_discarded and indexed.keyframes == demuxed.keyframes
            and np.array_equal(indexed.pts, demuxed.pts) and np.array_equal(indexed.keyframe_pts,
                                                                           demuxed.keyframe_pts))
