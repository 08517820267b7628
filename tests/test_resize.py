"""Resize geometry, and `pad` against openpi's resize_with_pad (PIL bilinear, paste on zeros)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.media import decoded as frames_of
from support.media import psnr

from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.encode import ENGINES, PROFILES, EncodeJob
from pipeline.video.resize import RESIZE_MODES, Geometry, filter_chain, filter_string

REAL_EP0 = "videos/chunk-000/observation.images.cam_high/episode_000000.mp4"
SYNTH_EP0 = "videos/chunk-000/observation.images.cam_high/episode_000000.mp4"


def test_pad_is_openpi_geometry() -> None:
    g = RESIZE_MODES["pad"](640, 480, 224, 224)
    assert g == Geometry(size=(224, 224), scaled=(224, 168), offset=(0, 28))
    assert RESIZE_MODES["pad"](224, 224, 224, 224).identity_scale
    assert RESIZE_MODES["pad"](1280, 720, 224, 224) == Geometry((224, 224), (224, 126), (0, 49))
    assert RESIZE_MODES["pad"](480, 640, 224, 224) == Geometry((224, 224), (168, 224), (28, 0))


def test_stretch_and_crop() -> None:
    assert RESIZE_MODES["stretch"](640, 480, 224, 224) == Geometry((224, 224), (224, 224))
    assert RESIZE_MODES["crop"](640, 480, 224, 224) == Geometry((224, 224), (224, 224), crop=(80, 0, 480, 480))
    assert RESIZE_MODES["crop"](480, 640, 224, 224).crop == (0, 80, 480, 480)
    assert RESIZE_MODES["crop"](224, 224, 224, 224).identity_scale


def test_filter_chains() -> None:
    assert filter_string(filter_chain(RESIZE_MODES["pad"](640, 480, 224, 224), "yuv420p")) == (
        "scale=w=224:h=168:flags=bilinear,pad=width=224:height=224:x=0:y=28:color=black,format=pix_fmts=yuv420p")
    assert filter_chain(RESIZE_MODES["pad"](224, 224, 224, 224), "yuv420p") == [("format", {"pix_fmts": "yuv420p"})]
    odd = filter_chain(RESIZE_MODES["pad"](1280, 720, 224, 224), "yuv420p")
    assert ("format", {"pix_fmts": "yuv444p"}) in odd  # odd offsets are padded in 4:4:4


def decoded(path: Path) -> np.ndarray:
    return np.stack(frames_of(path))


def openpi_pad(frame: np.ndarray) -> np.ndarray:
    """openpi's resize_with_pad from its definition, for a 640x480 frame."""
    small = Image.fromarray(frame).resize((224, 168), resample=Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (224, 224), 0)
    canvas.paste(small, (0, 28))
    return np.asarray(canvas)


def encode_pad(src: Path, dst: Path, engine: str, profile: str, crf: int) -> np.ndarray:
    job = EncodeJob(src, dst, 30.0, RESIZE_MODES["pad"](640, 480, 224, 224), PROFILES[profile], crf)
    ENGINES[engine](job)
    return decoded(dst)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["pyav", "ffmpeg"])
def test_pad_matches_openpi_on_real_footage(real_v21: Path, tmp_path: Path, engine: str) -> None:
    src = real_v21 / REAL_EP0
    reference = np.stack([openpi_pad(f) for f in decoded(src)])
    out = encode_pad(src, tmp_path / "crf0.mp4", engine, "h264-intra", 0)
    assert out.shape == reference.shape
    value = psnr(out, reference)
    print(f"\n{engine} pad vs openpi resize_with_pad, real AV1 640x480, h264-intra crf 0: {value:.2f} dB")
    assert value >= 35.0
    assert out[:, :28].max() <= 2 and out[:, 196:].max() <= 2  # black bars
    default = PROFILES["h264-intra"].default_crf
    lossy = encode_pad(src, tmp_path / "default.mp4", engine, "h264-intra", default)
    print(f"{engine} at the default crf {default}: {psnr(lossy, reference):.2f} dB "
          f"({(tmp_path / 'default.mp4').stat().st_size / len(lossy):.0f} B/frame)")


def test_pad_matches_openpi_on_synthetic(tmp_path: Path) -> None:
    """The synthetic texture is chroma-heavy: 4:2:0 at 224 alone costs ~29 dB against an RGB reference,
    so geometry and scaling are shown with the 4:4:4 profile, and 4:2:0 is reported."""
    root = write_synthetic(tmp_path / "s", SynthSpec(episodes=1, frames=30, cameras=("observation.images.cam_high",)))
    src = root / SYNTH_EP0
    reference = np.stack([openpi_pad(f) for f in decoded(src)])
    out = encode_pad(src, tmp_path / "444.mp4", "pyav", "h264-intra-444", 0)
    value = psnr(out, reference)
    assert value >= 35.0, value
    assert out[:, :28].max() <= 2 and out[:, 196:].max() <= 2
    yuv420 = psnr(encode_pad(src, tmp_path / "420.mp4", "pyav", "h264-intra", 0), reference)
    luma420 = psnr(decoded(tmp_path / "420.mp4").mean(axis=-1), reference.mean(axis=-1))
    print(f"\nsynthetic crf 0: 4:4:4 {value:.2f} dB, 4:2:0 {yuv420:.2f} dB (channel mean {luma420:.2f} dB)")
    assert luma420 >= 35.0
