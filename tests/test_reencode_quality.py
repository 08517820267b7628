"""A quality figure on the user's own footage (issue 36: comparison.json had sizes only). Re-encode's summary and
prep/comparison.json carry, per camera, the PSNR and SSIM of a deterministic sample of frames against the source
frames resized the same way, measured in the stage on the frames it already decodes (its cost: bench/quality_cost.py);
a resumed run reports the same figures from the sidecars."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.cli import run_prep

from pipeline.schemas import validate
from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.quality import PSNR_IDENTICAL, psnr, sample_indices, ssim

REPO = Path(__file__).resolve().parents[1]
CAMS = ("observation.images.cam_high", "observation.images.cam_wrist")


def prep(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_prep(*args, timeout=600)


def test_the_sample_is_deterministic_and_spread() -> None:
    assert sample_indices(90) == [45]  # one frame per started 150 frames, at most 3
    assert sample_indices(316) == [52, 158, 263]
    assert sample_indices(151) == [37, 113]
    assert sample_indices(10_000) == [1666, 5000, 8333]
    assert sample_indices(1) == [0] and sample_indices(0) == []


def test_psnr_and_ssim_by_hand() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    assert psnr(a, a) == PSNR_IDENTICAL and ssim(a, a) == pytest.approx(1.0)
    b = a.copy()
    b[a < 255] += 1
    mse = float(np.mean((a.astype(float) - b.astype(float)) ** 2))
    assert psnr(a, b) == pytest.approx(10 * math.log10(255**2 / mse))
    assert 0.9 < ssim(a, b) < 1.0
    assert ssim(a, 255 - a) < 0.1


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(episodes=2, frames=40, height=96, width=128, cameras=CAMS, gop=10)
    return write_synthetic(tmp_path_factory.mktemp("quality") / "src", spec)


def test_reencode_reports_psnr_and_ssim_per_camera(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = prep("reencode", source, "--dst", "64", "--out", out, "--backend", "inline", "--no-progress")
    assert res.returncode == 0, res.stderr
    comparison = json.loads((out / "prep/comparison.json").read_text())
    validate(comparison, "comparison")
    quality = comparison["quality"]
    assert "resized exactly as for the encode" in quality["method"]
    assert sorted(quality["cameras"]) == sorted(CAMS)
    for cam, q in quality["cameras"].items():
        assert (q["files_sampled"], q["files_unmeasured"], q["frames_sampled"]) == (2, 0, 2), (cam, q)
        assert 15 < q["psnr_db_min"] <= q["psnr_db_mean"] < PSNR_IDENTICAL
        assert 0 < q["ssim_min"] <= q["ssim_mean"] < 1
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"quality   {cam}: "))
        assert f"PSNR {q['psnr_db_mean']:.1f} dB mean (min {q['psnr_db_min']:.1f})" in line
        assert "over 2 sampled frames against the source, resized the same way" in line
    report = json.loads((out / "prep/reencode_report.json").read_text())
    assert 0 < report["quality_seconds"] < report["seconds"]
    assert report["comparison"] == comparison

    # an independent check of one file: the output frame and prep's own resize of the source frame (filter_frames)
    from pipeline.video.encode import PROFILES, filter_frames
    from pipeline.video.resize import RESIZE_MODES

    rel = "videos/chunk-000/observation.images.cam_high/episode_000000.mp4"
    (k,) = sample_indices(40)
    refs: dict[int, np.ndarray] = {}
    filter_frames(source / rel, RESIZE_MODES["pad"](128, 96, 64, 64), PROFILES["h264-intra"].pix_fmt,
                  lambda i, f: refs.update({i: f.to_ndarray(format="rgb24")}) if i == k else None)
    import av

    with av.open(str(out / rel)) as c:
        got = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)][k]
    sidecar = json.loads((out / "prep/stats" / f"{rel}.json").read_text())
    assert sidecar["quality"]["frames"] == [k]
    assert sidecar["quality"]["psnr_db"][0] == pytest.approx(psnr(refs[k], got))

    # resume: every file kept, the same figures read back from the sidecars
    again = prep("reencode", source, "--dst", "64", "--out", out, "--backend", "inline", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "4 kept" in again.stdout
    assert json.loads((out / "prep/comparison.json").read_text())["quality"] == quality


def test_lossless_profile_scores_near_identical(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "lossless"
    res = prep("reencode", source, "--dst", "64", "--profile", "h264-intra-444", "--crf", "0", "--out", out,
               "--backend", "inline", "--no-progress")
    assert res.returncode == 0, res.stderr
    cams = json.loads((out / "prep/comparison.json").read_text())["quality"]["cameras"]
    assert all(q["psnr_db_min"] >= 45 and q["ssim_min"] > 0.99 for q in cams.values()), cams
