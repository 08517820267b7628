"""What the re-encode's cheaper paths must not change: image stats equal a full computation with
LeRobot's own sampling, the output check (header + demux of the file on disk) still catches bad
files, and a source opened without the probe decode gives every frame, pixel for pixel."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.stages.reencode import ReencodeOptions, ReencodeUnit, check_output
from pipeline.synth import SynthSpec, camera_frames
from pipeline.video.checks import Span
from pipeline.video.encode import PROFILES, EncodeJob, encode_pyav, filter_frames, open_source
from pipeline.video.imagestats import SpanImageStats, estimate_num_samples, sample_indices
from pipeline.video.resize import RESIZE_MODES

SPEC = SynthSpec(frames=130, height=240, width=320)


def lerobot_sample_indices(data_len: int) -> list[int]:
    """lerobot/datasets/compute_stats.py (0.3.3 and 0.4.4), verbatim but for names."""
    min_num_samples, max_num_samples, power = 100, 10_000, 0.75
    if data_len < min_num_samples:
        min_num_samples = data_len
    num_samples = max(min_num_samples, min(int(data_len**power), max_num_samples))
    return list(np.round(np.linspace(0, data_len - 1, num_samples)).astype(int).tolist())


def write_clip(path: Path, frames: int, gop: int = 12) -> Path:
    rgb = camera_frames(SPEC, 1, 0)[:frames]
    with av.open(str(path), "w", format="mp4") as out:
        s = out.add_stream("libx264", rate=30)
        assert isinstance(s, av.VideoStream)
        s.width, s.height, s.pix_fmt = SPEC.width, SPEC.height, "yuv420p"
        s.codec_context.time_base = Fraction(1, 30)
        s.options = {"g": str(gop), "crf": "23", "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        for i, img in enumerate(rgb):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, 30)
            out.mux(s.encode(f))
        out.mux(s.encode(None))
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(tmp_path_factory.mktemp("src") / "clip.mp4", SPEC.frames)


def test_sampling_is_lerobots() -> None:
    for n in [*range(1, 400), 499, 500, 501, 1000, 5000, 20_000, 300_000]:
        assert sample_indices(n) == lerobot_sample_indices(n), n
    assert estimate_num_samples(90) == 90 and estimate_num_samples(130) == 100 and estimate_num_samples(1000) == 177


@pytest.mark.parametrize("profile", list(PROFILES))
def test_stats_equal_full_computation(clip: Path, tmp_path: Path, profile: str) -> None:
    """Two spans (30 frames: all sampled; 100 frames: ...) fed during a real encode equal LeRobot's
    get_feature_stats over its sampled frames, computed from every resized frame in RGB with numpy."""
    spans = [(0, 30), (30, 100)]
    geometry = RESIZE_MODES["pad"](SPEC.width, SPEC.height, 224, 224)
    prof = PROFILES[profile]
    stats = SpanImageStats(spans)
    assert encode_pyav(EncodeJob(clip, tmp_path / "o.mp4", 30.0, geometry, prof, prof.default_crf, stats.add)) == 130
    got = stats.result()
    frames: list[np.ndarray] = []
    filter_frames(clip, geometry, prof.pix_fmt, lambda _i, f: frames.append(f.to_ndarray(format="rgb24")))
    for (start, n), st in zip(spans, got, strict=True):
        chw = np.stack([frames[start + i] for i in lerobot_sample_indices(n)]).transpose(0, 3, 1, 2)
        axes = (0, 2, 3)
        want = {"min": chw.min(axis=axes), "max": chw.max(axis=axes), "mean": chw.mean(axis=axes),
                "std": chw.std(axis=axes)}
        assert st["count"] == [len(lerobot_sample_indices(n))]
        for key, value in want.items():  # min/max/mean exact; std from sums: float rounding only
            atol = 1e-9 if key == "std" else 1e-12
            np.testing.assert_allclose(np.asarray(st[key]).reshape(3), value / 255.0, rtol=0, atol=atol, err_msg=key)
    assert got[1]["count"] == [100]  # 100 frames: all of them; the sample only thins longer spans
    assert got[0]["mean"] != got[1]["mean"]


def test_stats_of_a_long_span_use_only_the_sample(clip: Path) -> None:
    """130 frames -> LeRobot samples 100: frames outside the sample must not count."""
    geometry = RESIZE_MODES["stretch"](SPEC.width, SPEC.height, 224, 224)
    frames: list[np.ndarray] = []
    filter_frames(clip, geometry, "yuv420p", lambda _i, f: frames.append(f.to_ndarray(format="rgb24")))
    stats = SpanImageStats([(0, 130)])
    filter_frames(clip, geometry, "yuv420p", stats.add)
    (st,) = stats.result()
    picked = np.stack([frames[i] for i in lerobot_sample_indices(130)])
    every = np.stack(frames)
    assert st["count"] == [100]
    mean = np.asarray(st["mean"]).reshape(3)
    np.testing.assert_allclose(mean, picked.mean(axis=(0, 1, 2)) / 255.0, rtol=0, atol=1e-12)
    assert not np.allclose(mean, every.mean(axis=(0, 1, 2)) / 255.0, rtol=0, atol=1e-9)


def test_source_opened_without_probe_decode_gives_every_frame(clip: Path) -> None:
    with av.open(str(clip)) as c:
        plain = [f.to_ndarray() for f in c.decode(video=0)]
    inp, ist = open_source(clip)
    with inp:
        fast = [f.to_ndarray() for f in inp.decode(ist)]
    assert len(fast) == len(plain) == 130
    assert all(np.array_equal(a, b) for a, b in zip(plain, fast, strict=True))


def unit_for(path: Path) -> ReencodeUnit:
    return ReencodeUnit(str(path.parent), str(path.parent), path.name, "cam", 30.0, (), ReencodeOptions())


def remux(src: Path, dst: Path, keep: int) -> Path:
    """`dst` = the first `keep` packets of `src`, re-muxed (a file missing its last frames)."""
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4") as out:
        ist = inp.streams.video[0]
        ost = out.add_stream_from_template(ist)
        for k, packet in enumerate(inp.demux(ist)):
            if packet.size == 0 or k >= keep:
                continue
            packet.stream = ost
            out.mux(packet)
    return dst


def test_output_check_catches_bad_files(clip: Path, tmp_path: Path) -> None:
    geometry = RESIZE_MODES["pad"](SPEC.width, SPEC.height, 224, 224)
    good = tmp_path / "good.mp4"
    encode_pyav(EncodeJob(clip, good, 30.0, geometry, PROFILES["h264-intra"], 23))
    spans = [Span(0, 0.0, 30 / 30, 30), Span(1, 30 / 30, None, 100)]
    assert check_output(good, unit_for(good), spans, 130) == []

    def checks(path: Path) -> set[str]:
        return {f.check for f in check_output(path, unit_for(path), spans, 130)}

    assert {"frames_from_packets", "frames_total"} <= checks(remux(good, tmp_path / "short.mp4", 129))
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    # prep writes faststart mp4s (moov first): a file cut in half keeps its index, so the demuxer opens it
    # and the packets past the cut are missing (frame counts fail); a file whose index is cut is unreadable
    assert {"frames_from_packets", "frames_total"} <= checks(cut)
    tail_cut = tmp_path / "tail_cut.mp4"
    data = good.read_bytes()
    moov = data.find(b"moov")
    assert 0 < moov < data.find(b"mdat"), "prep's mp4s are faststart"
    tail_cut.write_bytes(data[: moov + 16])
    assert checks(tail_cut) == {"readable"}
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    assert checks(empty) == {"readable"}
    assert "keyframes" in checks(remux(clip, tmp_path / "gop12.mp4", 130))  # GOP 12: not all-intra
    assert "size" in checks(remux(clip, tmp_path / "gop12b.mp4", 130))  # and 320x240, not 224x224
