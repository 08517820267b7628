"""A rotated source (display matrix in the track header, coded frames unchanged; issue 25): every output prep
writes holds display-oriented frames, rotated in the pixels, and no display matrix, for both engines; verify
warns on the source, naming what each reader and back-end hands back. Real video: PyAV/libx264, the `ffmpeg`
program, decoded with PyAV (which reports a frame's display matrix as `frame.rotation`)."""

from __future__ import annotations

import functools
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from support.media import psnr as psnr_of

from pipeline.jobs.reencode import reencode_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import write_synthetic
from pipeline.video.rotation import clockwise_degrees, display_matrix, rotation_filters, swaps_sides

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases import mp4
from parity_cases.synth_cases import spec

ENGINES = ["pyav", pytest.param("ffmpeg", marks=pytest.mark.skipif(shutil.which("ffmpeg") is None,
                                                                   reason="needs the ffmpeg program"))]


def frames(path: Path) -> tuple[list[np.ndarray], list[int]]:
    """Every frame's luma (chroma is resampled on the 4:2:0 -> 4:4:4 path), and the rotation PyAV reads from
    each frame's display matrix side data."""
    with av.open(str(path)) as c:
        decoded = list(c.decode(c.streams.video[0]))
        return [f.to_ndarray(format="gray") for f in decoded], [int(f.rotation) for f in decoded]


psnr = functools.partial(psnr_of, identical=99.0)


def rotated_source(tmp_path: Path, fmt: str, degrees: int = 90) -> Path:
    root = write_synthetic(tmp_path / "src", spec(fmt))
    for mp4_path in sorted((root / "videos").rglob("*.mp4")):
        mp4.set_rotation(mp4_path, degrees)
    return root


def reencode(src: Path, out: Path, engine: str, size: tuple[int, int]) -> Any:
    options = ReencodeOptions(size=size, engine=engine, profile="h264-intra-444", crf=0)
    with open_engine(RunConfig(backend="inline", progress=False)) as eng:
        return reencode_dataset(src, out, options, eng)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_output_holds_display_orientation_and_no_matrix(fmt: str, engine: str, tmp_path: Path) -> None:
    """96x72 coded, rotated 90 degrees clockwise by the matrix: the output (at the displayed 72x96, so no
    scaling) is the source's frames turned clockwise in the pixels, and carries no matrix."""
    src = rotated_source(tmp_path, fmt)
    out = tmp_path / "out"
    report = reencode(src, out, engine, (72, 96))
    assert report.ok, report.failures
    videos = sorted((src / "videos").rglob("*.mp4"))
    assert videos
    for s in videos:
        o = out / s.relative_to(src)
        src_frames, src_rot = frames(s)
        out_frames, out_rot = frames(o)
        assert set(src_rot) == {-90} and set(out_rot) == {0}  # PyAV: the source's matrix, none in the output
        assert display_matrix(s) is not None and display_matrix(o) is None
        assert len(out_frames) == len(src_frames)
        for a, b in zip(src_frames, out_frames, strict=True):
            assert b.shape == (96, 72)
            clockwise = np.rot90(a, k=-1)
            assert psnr(clockwise, b) > 40, psnr(clockwise, b)
            assert psnr(np.rot90(a, k=1), b) < psnr(clockwise, b) - 10  # not turned the other way
    assert not verify_in_process(out, VerifyOptions(size=(72, 96), all_intra=True, decode=True)).failures


def test_both_engines_give_the_same_pixels(tmp_path: Path) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("needs the ffmpeg program")
    src = rotated_source(tmp_path, "v2.1", 270)
    outs = [tmp_path / e for e in ("pyav", "ffmpeg")]
    for e, o in zip(("pyav", "ffmpeg"), outs, strict=True):
        assert reencode(src, o, e, (64, 64)).ok
    for s in sorted((src / "videos").rglob("*.mp4")):
        a, _ = frames(outs[0] / s.relative_to(src))
        b, _ = frames(outs[1] / s.relative_to(src))
        assert len(a) == len(b) and all(psnr(x, y) > 45 for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_verify_warns_on_a_rotated_source_naming_each_reader(fmt: str, tmp_path: Path) -> None:
    src = rotated_source(tmp_path, fmt)
    report = verify_in_process(src, VerifyOptions())
    assert report.passed  # every reader loads it
    found = [f for f in report.failures if f.check == "display_rotation"]
    assert found and {f.severity for f in found} == {"warning"}
    text = found[0].found
    assert "rotated 90 degrees clockwise" in text and "coded 96x72" in text
    if fmt == "v3.0":
        assert "torchcodec 0.11" in text and "72x96" in text
    else:
        assert "lerobot 0.3.x" in text
    clean = verify_in_process(write_synthetic(tmp_path / "clean", spec(fmt)), VerifyOptions())
    assert not [f for f in clean.failures if f.check == "display_rotation"]


def _matrix(a: int, b: int, c: int, d: int) -> tuple[int, ...]:
    one = 0x10000
    return (a * one, b * one, 0, c * one, d * one, 0, 0, 0, 0x40000000)


def test_rotation_filters_mirror_ffmpeg_autorotate() -> None:
    assert rotation_filters(None) == []
    assert rotation_filters(_matrix(0, 1, -1, 0)) == [("transpose", {"dir": "clock"})]  # 90 clockwise
    assert rotation_filters(_matrix(0, -1, 1, 0)) == [("transpose", {"dir": "cclock"})]  # 270
    assert rotation_filters(_matrix(-1, 0, 0, -1)) == [("hflip", {}), ("vflip", {})]  # 180
    assert rotation_filters(_matrix(1, 0, 0, -1)) == [("vflip", {})]
    assert clockwise_degrees(_matrix(0, 1, -1, 0)) == 90 and swaps_sides(_matrix(0, 1, -1, 0))
    m = (46341, 46341, 0, -46341, 46341, 0, 0, 0, 0x40000000)  # 45 degrees: refused (None)
    assert rotation_filters(m) is None


def test_display_matrix_reads_a_file_without_moov_as_none(tmp_path: Path) -> None:
    p = tmp_path / "x.mp4"
    p.write_bytes(struct.pack(">I4s", 16, b"ftyp") + b"isom" + b"\0" * 4)
    assert display_matrix(p) is None
    p.write_bytes(b"\xff" * 7)
    assert display_matrix(p) is None
