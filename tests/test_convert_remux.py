"""Stream copies (pipeline/video/remux.py) on real h264 encoded and decoded with PyAV: concatenation with
exact frame offsets, cuts that give back the source packets, refusals with the episode named, and the
keyframe-start check."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from support.media import decoded, packets

from pipeline.errors import EpisodeError
from pipeline.synth import SynthSpec, camera_frames, encode_frames
from pipeline.video.checks import Span, VideoExpect, check_video
from pipeline.video.remux import ConcatInput, concat_stream_copy, cut_stream_copy, episodes_off_keyframe

SPEC = SynthSpec(height=48, width=64, frames=20, gop=30, cameras=("cam",))  # x264 veryfast: B-frames, dts < pts
RATE = Fraction(30)


def header(path: Path) -> tuple[int, int, Fraction]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return int(s.frames), int(s.duration), Fraction(s.time_base)


@pytest.fixture(scope="module")
def episode_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("eps")
    out = []
    for ep, n in enumerate((20, 13, 31)):
        spec = SynthSpec(**{**{f: getattr(SPEC, f) for f in SPEC.__slots__}, "frames": n})
        path = base / f"episode_{ep:06d}.mp4"
        encode_frames(path, camera_frames(spec, 0, ep), spec)
        out.append(path)
    return out


def test_concat_exact_offsets_and_identical_packets(episode_files: list[Path], tmp_path: Path) -> None:
    lengths = [20, 13, 31]
    out = tmp_path / "file-000.mp4"
    result = concat_stream_copy([ConcatInput(i, p, n) for i, (p, n) in enumerate(zip(episode_files, lengths,
                                                                                     strict=True))], out, RATE)
    assert result.frames == 64
    frames, duration, tb = header(out)
    tpf = int(1 / (RATE * tb))
    assert (frames, duration) == (64, 64 * tpf)  # header count and duration exact: torchcodec's average_fps is 30
    got = packets(out)
    src = [pk for p in episode_files for pk in packets(p)]
    assert [g[0] for g in got] == [s[0] for s in src]  # payload byte for byte
    before = 0
    k = 0
    for p, n in zip(episode_files, lengths, strict=True):
        for data, pts, dts, key in packets(p):
            assert got[k] == (data, pts + before * tpf, dts + before * tpf, key)
            k += 1
        before += n
    assert sorted(g[1] for g in got) == [i * tpf for i in range(64)]  # frame i at exactly i/30 s
    spans = [Span(0, 0.0, 20 / 30, 20), Span(1, 20 / 30, 33 / 30, 13), Span(2, 33 / 30, 64 / 30, 31)]
    probe, failures = check_video(out, VideoExpect(fps=30), spans)
    assert failures == [] and probe is not None
    ref = [f for p in episode_files for f in decoded(p)]
    assert all(np.array_equal(a, b) for a, b in zip(decoded(out), ref, strict=True))


def test_cut_gives_back_the_source_packets(episode_files: list[Path], tmp_path: Path) -> None:
    lengths = [20, 13, 31]
    cat = tmp_path / "cat.mp4"
    concat_stream_copy([ConcatInput(i, p, n) for i, (p, n) in enumerate(zip(episode_files, lengths, strict=True))],
                       cat, RATE)
    starts = [0, 20, 33, 64]
    for ep in range(3):
        out = tmp_path / f"ep{ep}.mp4"
        res = cut_stream_copy(cat, out, Span(ep, starts[ep] / 30, starts[ep + 1] / 30, lengths[ep]), RATE)
        assert res.frames == lengths[ep] and res.first_pts_s == pytest.approx(starts[ep] / 30, abs=1e-12)
        assert packets(out) == packets(episode_files[ep])  # bytes, pts, dts and keyframe flags
        frames, duration, tb = header(out)
        assert (frames, duration) == (lengths[ep], lengths[ep] * int(1 / (RATE * tb)))  # exact, unlike the source's
        assert all(np.array_equal(a, b) for a, b in zip(decoded(out), decoded(episode_files[ep]), strict=True))


def test_250_episodes_in_one_file_land_on_the_frame_grid(episode_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "many.mp4"
    n = 250
    concat_stream_copy([ConcatInput(i, episode_files[1], 13) for i in range(n)], out, RATE)
    frames, duration, tb = header(out)
    tpf = int(1 / (RATE * tb))
    assert frames == 13 * n and duration == 13 * n * tpf
    assert sorted(p[1] for p in packets(out)) == [i * tpf for i in range(13 * n)]
    spans = [Span(e, e * 13 / 30, (e + 1) * 13 / 30, 13) for e in range(n)]
    assert check_video(out, VideoExpect(fps=30), spans)[1] == []
    assert episodes_off_keyframe(out, spans) == []


def test_differing_codec_parameters_are_refused(episode_files: list[Path], tmp_path: Path) -> None:
    odd = tmp_path / "episode_444.mp4"
    spec = SynthSpec(**{**{f: getattr(SPEC, f) for f in SPEC.__slots__}, "pix_fmt": "yuv444p"})
    encode_frames(odd, camera_frames(spec, 0, 5), spec)
    with pytest.raises(EpisodeError, match="extradata differs") as info:
        concat_stream_copy([ConcatInput(0, episode_files[0], 20), ConcatInput(7, odd, 20)], tmp_path / "x.mp4", RATE)
    assert info.value.episode == 7 and "after episode 0" in info.value.message
    small = tmp_path / "episode_small.mp4"
    spec = SynthSpec(**{**{f: getattr(SPEC, f) for f in SPEC.__slots__}, "height": 32, "width": 32})
    encode_frames(small, camera_frames(spec, 0, 5), spec)
    with pytest.raises(EpisodeError, match="size 32x32 vs 64x48"):
        concat_stream_copy([ConcatInput(0, episode_files[0], 20), ConcatInput(1, small, 20)], tmp_path / "y.mp4", RATE)


def test_frame_count_against_metadata(episode_files: list[Path], tmp_path: Path) -> None:
    with pytest.raises(EpisodeError, match=r"13 frames \(frames_from_packets\) but the metadata length is 14") as info:
        concat_stream_copy([ConcatInput(0, episode_files[0], 20), ConcatInput(1, episode_files[1], 14)],
                           tmp_path / "x.mp4", RATE)
    assert info.value.episode == 1


def encode_gop(path: Path, frames: np.ndarray, gop: int, bframes: int) -> None:
    with av.open(str(path), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.codec_context.time_base = Fraction(1, 30)
        stream.options = {"preset": "veryfast", "bf": str(bframes),
                          "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 30)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


@pytest.fixture(scope="module")
def shared_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One encode of 80 frames, keyframes every 40, no B-frames: episodes of 20 frames at 0, 20, 40, 60."""
    spec = SynthSpec(**{**{f: getattr(SPEC, f) for f in SPEC.__slots__}, "frames": 80})
    path = tmp_path_factory.mktemp("shared") / "file-000.mp4"
    encode_gop(path, camera_frames(spec, 0, 0), gop=40, bframes=0)
    return path


SPANS4 = [Span(e, e * 20 / 30, (e + 1) * 20 / 30, 20) for e in range(4)]


def test_episodes_not_starting_on_a_keyframe_are_named(shared_file: Path, tmp_path: Path) -> None:
    spans = SPANS4
    problems = episodes_off_keyframe(shared_file, spans, camera="cam")
    assert [p.episode for p in problems] == [1, 3]
    assert "not a keyframe" in problems[0].reason and problems[0].camera == "cam"
    with pytest.raises(EpisodeError, match="not a keyframe") as info:
        cut_stream_copy(shared_file, tmp_path / "ep1.mp4", spans[1], RATE)
    assert info.value.episode == 1
    # episode 2 starts on the keyframe at frame 40: its cut decodes to frames 40..59 of the file exactly
    out = tmp_path / "ep2.mp4"
    assert cut_stream_copy(shared_file, out, spans[2], RATE).frames == 20
    assert all(np.array_equal(a, b) for a, b in zip(decoded(out), decoded(shared_file)[40:60], strict=True))
    assert check_video(out, VideoExpect(fps=30), [Span(2, 0.0, None, 20)])[1] == []


def test_b_frames_across_a_boundary_make_the_earlier_episode_inexact(tmp_path: Path) -> None:
    """With B-frames, the last frames before a boundary that is not a keyframe are decoded after (and from)
    the next episode's first frame: cutting the earlier episode would lose their reference."""
    spec = SynthSpec(**{**{f: getattr(SPEC, f) for f in SPEC.__slots__}, "frames": 80})
    path = tmp_path / "file-000.mp4"
    encode_gop(path, camera_frames(spec, 0, 0), gop=40, bframes=3)
    problems = {p.episode: p.reason for p in episodes_off_keyframe(path, SPANS4)}
    assert sorted(problems) == [0, 1, 2, 3]
    assert "decoded after episode 1's first frame" in problems[0] and "not a keyframe" in problems[1]
    with pytest.raises(EpisodeError, match="decoded after the next episode's first frame"):
        cut_stream_copy(path, tmp_path / "ep0.mp4", SPANS4[0], RATE)
