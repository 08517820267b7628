"""Engines and profiles in-process: every combination passes the same per-file checks."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.commands.reencode import default_out
from pipeline.commands.reencode import dst_size as parse_size
from pipeline.errors import PrepError
from pipeline.stages.reencode import ReencodeOptions, ReencodeUnit, new_spans, reencode_unit
from pipeline.synth import SynthSpec, camera_frames
from pipeline.video.checks import Span, VideoExpect, check_video
from pipeline.video.encode import ENGINES, PROFILES, EncodeJob, ffmpeg_command
from pipeline.video.probe import probe_video
from pipeline.video.resize import RESIZE_MODES

SPEC = SynthSpec(frames=24, height=240, width=320)


def write_source(path: Path, pts: list[int], tb: Fraction = Fraction(1, 1000)) -> Path:
    """A 320x240 h264 GOP-12 clip whose frame i has pts[i] in `tb` (jitter allowed)."""
    rgb = camera_frames(SPEC, 0, 0)[: len(pts)]
    with av.open(str(path), "w", format="mp4") as out:
        s = out.add_stream("libx264", rate=30)
        assert isinstance(s, av.VideoStream)
        s.width, s.height, s.pix_fmt = 320, 240, "yuv420p"
        s.codec_context.time_base = tb
        s.options = {"g": "12", "crf": "23"}
        for p, img in zip(pts, rgb, strict=True):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = p, tb
            out.mux(s.encode(f))
        out.mux(s.encode(None))
    return path


@pytest.fixture(scope="module")
def jittery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pts = [round(i * 1000 / 30) + (3 if i % 3 == 1 else 0) for i in range(24)]  # up to 3 ms off the grid
    return write_source(tmp_path_factory.mktemp("src") / "jitter.mp4", pts)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_engines_profiles_pass_checks(jittery: Path, tmp_path: Path, engine: str, profile: str) -> None:
    dst = tmp_path / "out.mp4"
    job = EncodeJob(jittery, dst, 30.0, RESIZE_MODES["pad"](320, 240, 224, 224), PROFILES[profile],
                    PROFILES[profile].default_crf)
    assert ENGINES[engine](job) == 24
    expect = VideoExpect(30.0, (224, 224), all_intra=True, decode=True)
    probe, failures = check_video(dst, expect, [Span(0, 0.0, None, 24)])
    assert not failures, [f.line() for f in failures]
    assert probe is not None and probe.frames_from_header == 24 and probe.keyframes == 24
    assert probe.pts_s[0] == 0.0 and abs(probe.fps - 30.0) < 1e-6
    assert probe.codec == PROFILES[profile].codec
    assert probe.pix_fmt == PROFILES[profile].pix_fmt


def test_engines_agree(jittery: Path, tmp_path: Path) -> None:
    out = {}
    for engine in ENGINES:
        dst = tmp_path / f"{engine}.mp4"
        ENGINES[engine](EncodeJob(jittery, dst, 30.0, RESIZE_MODES["crop"](320, 240, 224, 224),
                                  PROFILES["h264-intra"], 0))
        with av.open(str(dst)) as c:
            out[engine] = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]).astype(np.float64)
    mse = np.mean((out["pyav"] - out["ffmpeg"]) ** 2)
    assert 10 * np.log10(255**2 / max(mse, 1e-9)) > 40


def test_ffmpeg_command_settings(jittery: Path) -> None:
    job = EncodeJob(jittery, Path("o.mp4"), 30.0, RESIZE_MODES["pad"](640, 480, 224, 224), PROFILES["h264-intra"], 23)
    cmd = " ".join(ffmpeg_command(job))
    for part in ("-fps_mode passthrough", "-g 1", "-bf 0", "-crf 23", "-threads 1", "settb=1/30", "setpts=N",
                 "-c:v libx264", "-pix_fmt yuv420p", "scale=", "flags=bilinear", "pad=", "y=28"):
        assert part in cmd, part


def test_new_spans_follow_frames_not_timestamps(tmp_path: Path) -> None:
    """Two episodes in one file (v3.0) on a jittery clock: spans become frame counts / fps."""
    pts = [round(i * 1000 / 30) + (2 if i % 2 else 0) for i in range(24)]
    src = write_source(tmp_path / "two.mp4", pts)
    probe = probe_video(src)
    spans = new_spans(probe, (Span(1, 10 / 30 - 0.001, 24 / 30, 14), Span(0, 0.0, 10 / 30 - 0.001, 10)), 30.0)
    assert [(s.episode, s.from_timestamp, s.to_timestamp, s.frames_expected) for s in spans] == [
        (0, 0.0, 10 / 30, 10), (1, 10 / 30, 24 / 30, 14)]


def test_unit_reports_count_mismatch(jittery: Path, tmp_path: Path) -> None:
    unit = ReencodeUnit(str(jittery.parent), str(tmp_path), jittery.name, "cam", 30.0, (Span(0, 0.0, None, 30),),
                        ReencodeOptions())
    r = reencode_unit(unit)
    assert r.status == "failed" and "24 frames" in (r.reason or "") and "metadata says 30" in (r.reason or "")
    assert not (tmp_path / jittery.name).exists()


def test_size_and_default_out(tmp_path: Path) -> None:
    assert parse_size("224") == (224, 224)
    assert parse_size("320x240") == (320, 240)
    for bad in ("x", "224x", "0", "-3"):
        with pytest.raises(PrepError):
            parse_size(bad)
    assert default_out(tmp_path / "merged", (224, 224)) == tmp_path / "merged_224"
    assert default_out(tmp_path / "merged", (320, 240)) == tmp_path / "merged_320x240"
