"""Encoder profiles and engines: decode a source file, apply a resize geometry, encode all-intra.

`PROFILES` (by name) say what the output stream is; `ENGINES` (by name) say how the work runs:
- `pyav`: in-process PyAV: demux, decode, one reused filter graph (crop/scale/pad), encode, mux;
  one thread per codec, no process start per file.
- `ffmpeg`: the same filter chain and encoder options as one `ffmpeg` command line, built with
  ffmpeg-python (needs the `ffmpeg` program on PATH, e.g. Debian's `ffmpeg`).

Both write frame i at pts = i/fps (the source's timestamps are replaced, so jittery sources come
out on the exact grid), never drop or duplicate a frame, and make every frame a keyframe.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import EpisodeError
from pipeline.rates import fps_fraction
from pipeline.storage import Source, as_file
from pipeline.video.pictures import Pictures, picture_frames
from pipeline.video.resize import Geometry, filter_args, filter_chain

if TYPE_CHECKING:
    import av

# PyAV is imported inside the functions that encode: this module's PROFILES and ENGINES are the CLI's
# choices, read by `prep reencode --help` and the argument parser, which must not load FFmpeg.


@dataclass(slots=True, frozen=True)
class Profile:
    """An output stream: encoder, pixel format, the quality knob (`crf`) and its encoder options."""

    name: str
    encoder: str  # FFmpeg encoder name
    codec: str  # codec name as info.json's video.codec records it
    pix_fmt: str
    default_crf: int
    crf_range: tuple[int, int]
    options: Callable[[int], dict[str, str]]
    preset: str | None = None


# Measured with `python bench/reencode.py --sweep` (480x640 -> 224x224 pad, one core):
#   preset veryfast is ~40% smaller than ultrafast at the same crf for ~0.5 ms/frame more;
#   fast is slower again for ~2-4% size. crf 23 (x264's own default) gives 2.9x less than the
#   synthetic crf-23 source (5.0 kB/frame) and 4.2x less than the real AV1 fixture (2.1 kB/frame)
#   at 34 dB PSNR against the crf-0 output on real footage (crf 20: 35.8 dB, 3.1x).
H264_PRESET = "veryfast"
H264_DEFAULT_CRF = 23
MJPEG_DEFAULT_Q = 4  # real fixture: 5.7 kB/frame, 38.7 dB against crf-0 h264


def h264_intra_options(crf: int) -> dict[str, str]:
    """libx264, every frame an IDR keyframe (GOP 1), no B-frames, constant quality `crf`."""
    return {"crf": str(crf), "preset": H264_PRESET, "g": "1", "keyint_min": "1", "bf": "0", "sc_threshold": "0"}


def mjpeg_options(q: int) -> dict[str, str]:
    """MJPEG at a fixed quantiser: qmin = qmax = q (qscale/global_quality alone silently give q=2)."""
    return {"qmin": str(q), "qmax": str(q)}


PROFILES: dict[str, Profile] = {
    "h264-intra": Profile("h264-intra", "libx264", "h264", "yuv420p", H264_DEFAULT_CRF, (0, 51),
                          h264_intra_options, H264_PRESET),
    # 4:4:4 chroma: exact colours at 224 (synthetic PSNR vs openpi's RGB reference 46 dB instead of
    # 29 dB with 4:2:0 at crf 0) but not hardware-decodable on most GPUs and ~1.4x bigger.
    "h264-intra-444": Profile("h264-intra-444", "libx264", "h264", "yuv444p", H264_DEFAULT_CRF, (0, 51),
                              h264_intra_options, H264_PRESET),
    "mjpeg": Profile("mjpeg", "mjpeg", "mjpeg", "yuvj420p", MJPEG_DEFAULT_Q, (2, 31), mjpeg_options),
}
DEFAULT_PROFILE = "h264-intra"


FrameHook = Callable[[int, "av.VideoFrame"], None]
# moov before mdat (`faststart`, as LeRobot's writers are moving to): a reader of a remote file finds the index
# in the first bytes. The muxer rewrites the file once at the end (one extra pass over the output).
MUX_OPTIONS = {"movflags": "faststart"}


@dataclass(slots=True, frozen=True)
class EncodeJob:
    """`hook(i, frame)` sees each resized frame before it is encoded, where the engine can offer it
    (see `ENGINES_WITH_HOOK`); `filter_frames` gives the same frames without encoding."""

    src: Source | Pictures  # a dataset's file (read through its store) or a local path; or a camera stored as images
    dst: Path
    fps: float
    geometry: Geometry
    profile: Profile
    crf: int
    hook: FrameHook | None = None
    # Filters that put a frame in display orientation (`pipeline.video.rotation`), before the resize: the pyav
    # engine runs them; the ffmpeg program inserts the same ones itself (autorotate) and drops the matrix.
    rotate: tuple[tuple[str, dict[str, str]], ...] = ()


# Opening an input runs FFmpeg's stream-info probe, which decodes the first frame(s) of some codecs
# (h264) only to learn the pixel format: ~1.7 ms per 480x640 file (0.02 ms per frame of a 90-frame
# clip). `skip_frame=all` stops that probe decode; the decoder we read frames from is a separate
# context, set back to decode every frame (and to one thread) explicitly.
SOURCE_OPEN_OPTIONS = {"skip_frame": "all", "threads": "1"}
# One thread per filter graph (the ffmpeg CLI's `-filter_threads 1`). The default (one per core)
# runs the scaler in slices on every core: measured +0.22 ms of CPU per frame (~7 %) on 2 cores,
# for no gain when every core already runs its own file.
FILTER_THREADS = 1


def set_filter_threads(graph: av.filter.Graph, threads: int = FILTER_THREADS) -> None:
    """`graph.threads = threads` where PyAV has it (>= 16); older PyAV (15.x, in lerobot 0.4.4's
    environment) keeps FFmpeg's default threading, which gives the same pixels."""
    if hasattr(graph, "threads"):
        graph.threads = threads


def open_source(path: Source) -> tuple[av.container.InputContainer, av.VideoStream]:
    """The source and its first video stream, set to decode every frame on one thread. A local file is read
    natively (its path checked by its store); an object streams through a reader of `STREAM_BLOCK` blocks,
    which the container holds until it is dropped."""
    import av

    from pipeline.video.probe import open_media

    inp = av.open(open_media(path), mode="r", options=SOURCE_OPEN_OPTIONS)
    try:
        ist = inp.streams.video[0]
        ist.codec_context.skip_frame = "DEFAULT"
        ist.codec_context.thread_count = 1
    except BaseException:
        inp.close()
        raise
    return inp, ist


@contextlib.contextmanager
def decoded_frames(src: Source | Pictures) -> Iterator[Iterator[av.VideoFrame]]:
    """The source's frames in order: a video file decoded (`open_source`), or the pictures of an image camera
    (`pipeline.video.pictures`)."""
    if isinstance(src, Pictures):
        frames = picture_frames(src)
        if src.resize is not None:
            resizer = PictureResizer(*src.resize)
            frames = (resizer(f) for f in frames)
        yield frames
        return
    inp, ist = open_source(src)
    with inp:
        yield inp.decode(ist)


def check_source_frame(frame: av.VideoFrame, n: int, first: tuple[int, int] | None,
                       src: Source | Pictures) -> tuple[int, int]:
    """Refuse a source frame the decoder flagged corrupt (it concealed damage: the pixels are not the
    recorded ones) or whose picture size differs from the first frame's; returns the first frame's size."""
    size = (frame.width, frame.height)
    if frame.is_corrupt:
        raise EpisodeError(None, src, f"source frame {n} is corrupt (the decoder concealed damaged data)")
    if first is not None and size != first:
        raise EpisodeError(None, src, f"source frame {n} is {size[0]}x{size[1]} but frame 0 is "
                                      f"{first[0]}x{first[1]} (the picture size changes mid-stream)")
    return first or size


def encode_pyav(job: EncodeJob) -> int:
    """In-process: decode, filter graph (built once), encode; returns frames written."""
    import av

    rate = fps_fraction(job.fps)
    tb = 1 / rate
    steps = [*job.rotate, *filter_chain(job.geometry, job.profile.pix_fmt)]
    n = 0
    try:
        with decoded_frames(job.src) as frames, av.open(str(job.dst), mode="w", format="mp4",
                                                        options=dict(MUX_OPTIONS)) as out:
            ost = out.add_stream(job.profile.encoder, rate=rate)
            assert isinstance(ost, av.VideoStream)
            w, h = job.geometry.size
            ost.width, ost.height, ost.pix_fmt = w, h, job.profile.pix_fmt
            ost.codec_context.time_base = tb
            ost.codec_context.thread_count = 1
            ost.options = dict[str, object](job.profile.options(job.crf))
            graph: av.filter.Graph | None = None
            first: tuple[int, int] | None = None
            for frame in frames:
                first = check_source_frame(frame, n, first, job.src)
                if graph is None:
                    graph = _graph(frame, steps)
                graph.push(frame)
                out_frame = graph.pull()
                assert isinstance(out_frame, av.VideoFrame)
                if job.hook is not None:
                    job.hook(n, out_frame)
                out_frame.pts = n
                out_frame.time_base = tb
                out.mux(ost.encode(out_frame))
                n += 1
            out.mux(ost.encode(None))
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(None, job.src, f"re-encode failed after {n} frames ({type(exc).__name__}: {exc})") from None
    if n == 0:
        raise EpisodeError(None, job.src, "no frames decoded")
    return n


def filter_frames(src: Source | Pictures, geometry: Geometry, pix_fmt: str, hook: FrameHook,
                  rotate: tuple[tuple[str, dict[str, str]], ...] = ()) -> int:
    """Decode, rotate and resize exactly as `encode_pyav` does, without encoding; `hook` sees each frame."""
    import av

    steps = [*rotate, *filter_chain(geometry, pix_fmt)]
    n = 0
    try:
        with decoded_frames(src) as frames:
            graph: av.filter.Graph | None = None
            first: tuple[int, int] | None = None
            for frame in frames:
                first = check_source_frame(frame, n, first, src)
                if graph is None:
                    graph = _graph(frame, steps)
                graph.push(frame)
                out_frame = graph.pull()
                assert isinstance(out_frame, av.VideoFrame)
                hook(n, out_frame)
                n += 1
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise EpisodeError(None, src, f"decode failed after {n} frames ({type(exc).__name__}: {exc})") from None
    return n


def _graph(frame: av.VideoFrame, steps: list[tuple[str, dict[str, str]]]) -> av.filter.Graph:
    import av

    graph = av.filter.Graph()
    set_filter_threads(graph)
    nodes = [graph.add_buffer(width=frame.width, height=frame.height, format=frame.format,
                              time_base=Fraction(1, 1000))]
    nodes += [graph.add(name, filter_args(opts)) for name, opts in steps]
    nodes.append(graph.add("buffersink"))
    graph.link_nodes(*nodes).configure()
    return graph


class PictureResizer:
    """Pictures (`pipeline.video.pictures`) resized exactly as a video camera's frames are before they are encoded
    (the same geometry and filter graph: crop/scale/pad), to RGB; one graph per picture size, built once."""

    def __init__(self, size: tuple[int, int], resize: str) -> None:
        self.size, self.resize = size, resize
        self._graphs: dict[tuple[int, int], av.filter.Graph] = {}

    def __call__(self, frame: av.VideoFrame) -> av.VideoFrame:
        import av

        from pipeline.video.resize import RESIZE_MODES

        key = (frame.width, frame.height)
        graph = self._graphs.get(key)
        if graph is None:
            geometry = RESIZE_MODES[self.resize](frame.width, frame.height, *self.size)
            graph = self._graphs[key] = _graph(frame, filter_chain(geometry, "rgb24"))
        graph.push(frame)
        out = graph.pull()
        assert isinstance(out, av.VideoFrame)
        return out


def ffmpeg_command(job: EncodeJob, binary: str = "ffmpeg") -> list[str]:
    """The `ffmpeg` argument list for a job (also what bench/reencode.py times as the CLI baseline)."""
    import ffmpeg  # ffmpeg-python: only builds the argument list here

    if isinstance(job.src, Pictures):
        raise ValueError("a camera stored as images has no ffmpeg command line (the pyav engine encodes it)")
    rate = fps_fraction(job.fps)
    # A display matrix: the ffmpeg program's autorotate inserts the filters `job.rotate` holds (the pyav engine
    # runs them itself) and writes no matrix. Without one (or one prep does not read, outside MP4/MOV),
    # -noautorotate keeps both engines alike.
    stream = ffmpeg.input(str(job.src), threads=1) if job.rotate else \
        ffmpeg.input(str(job.src), threads=1, noautorotate=None)
    # Restamp: time base 1/fps and pts = frame number, so the output sits on the i/fps grid.
    stream = stream.filter("settb", f"{rate.denominator}/{rate.numerator}").filter("setpts", "N")
    for name, opts in filter_chain(job.geometry, job.profile.pix_fmt):
        stream = stream.filter(name, **opts)
    out_opts: dict[str, str | int | None] = {
        "c:v": job.profile.encoder, "pix_fmt": job.profile.pix_fmt, "fps_mode": "passthrough",
        "threads": 1, "filter_threads": 1, "an": None, "f": "mp4", **MUX_OPTIONS,
        **job.profile.options(job.crf),
    }
    if job.profile.encoder == "libx264":
        out_opts["x264-params"] = "threads=1"
    # No edit list: the frames start at pts 0 with no B-frames, so none is needed, and FFmpeg 7.1's program
    # (Debian 13) sizes it one frame short after setpts=N (the last frame's duration unknown), which hides
    # the last frame from every reader (measured: 40 frames muxed, 39 presented; FFmpeg 5.1 sizes it right).
    out_opts["use_editlist"] = 0
    stream = stream.output(str(job.dst), **out_opts)
    args: list[str] = stream.global_args("-y", "-nostdin", "-hide_banner", "-loglevel", "error").compile(cmd=binary)
    return args


def encode_ffmpeg(job: EncodeJob) -> int:
    """One `ffmpeg` process per file; returns frames written (counted by a demux of the output)."""
    import av

    if isinstance(job.src, Pictures):  # pictures in a parquet are no input the ffmpeg program reads
        return encode_pyav(job)
    binary = shutil.which("ffmpeg")
    if binary is None:
        raise EpisodeError(None, job.src, "the ffmpeg engine needs the `ffmpeg` program on PATH "
                           "(e.g. apt install ffmpeg)")
    with as_file(job.src).local_copy("video file") as local:  # a program reads a local path: a local file
        # itself, an object downloaded to a temp file (deleted on exit)
        proc = subprocess.run(ffmpeg_command(replace(job, src=local), binary), capture_output=True, text=True,
                              check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise EpisodeError(None, job.src, f"ffmpeg exited {proc.returncode}: {tail}")
    try:
        with av.open(str(job.dst)) as c:
            return sum(1 for p in c.demux(c.streams.video[0]) if p.size)
    except (av.FFmpegError, OSError) as exc:
        raise EpisodeError(None, job.dst, f"ffmpeg wrote an unreadable file ({exc})") from None


ENGINES: dict[str, Callable[[EncodeJob], int]] = {"pyav": encode_pyav, "ffmpeg": encode_ffmpeg}
ENGINES_WITH_HOOK = frozenset({"pyav"})
DEFAULT_ENGINE = "pyav"
