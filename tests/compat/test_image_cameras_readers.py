"""Cameras stored as images, written by LeRobot itself (issue 35), in every reader generation.

In each reader's venv, that LeRobot's own writer (`LeRobotDataset.create(..., use_videos=False)`, `add_frame`,
`save_episode`, and `finalize` where it has one: 0.3.3 writes v2.1, 0.4.4 and 0.6.1 write v3.0) records a dataset
whose two cameras are `dtype: "image"` (PNG in the data parquet). Then:
- `prep scan` counts both cameras (stored as images) with every picture;
- `prep verify --decode` passes it;
- `prep reencode --dst 224` writes an output that passes the README's check (`prep verify OUT --size 224x224
  --all-intra --decode`) in which both cameras are video features;
- the same reader loads every sample of the source and of the output: each camera (3, 224, 224) in [0, 1], and
  each output frame is the source picture resized (the pad geometry: 96x72 -> 224x168 between black bars).

Runs inside the reader venvs (`.ci/compat.sh`: ids hold v21, v30 or v06); skipped elsewhere.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from compat_support import reader_of_venv, report
from parity_cases.image_cases import write_lerobot_images
from support.cli import run_prep

pytestmark = pytest.mark.readers

H, W, N, EPISODES, FPS = 72, 96, 10, 3, 30
CAMERAS = ("observation.images.top", "observation.images.wrist")
prep = functools.partial(run_prep, timeout=900, inprocess=False)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    cmd = " ".join(map(str, r.args))
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def write_with_lerobot(root: Path) -> Path:
    """This venv's LeRobot writes a dataset with its cameras stored as images (smooth synthetic frames)."""
    from pipeline.synth import SynthSpec, camera_frames

    return write_lerobot_images(root, CAMERAS, height=H, width=W, episodes=EPISODES, frames=N,
                                pictures=lambda k, e: camera_frames(SynthSpec(frames=N, height=H, width=W, seed=3),
                                                                    k, e),
                                row=lambda e, i: {"observation.state": np.sin(i / FPS + np.arange(6) + e)
                                                  .astype(np.float32),
                                                  "action": np.cos(i / FPS + np.arange(6) + e).astype(np.float32)})


def samples(root: Path, line: str) -> list[dict[str, np.ndarray]]:
    """Every sample's cameras, as this venv's reader hands them (float CHW in [0, 1])."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    revision = "v2.1" if line == "0.3" else "v3.0"
    ds = LeRobotDataset(f"prep-compat/{root.name}", root=root, revision=revision)
    info = json.loads((root / "meta/info.json").read_text())
    assert len(ds) == info["total_frames"] == EPISODES * N
    out = []
    for i in range(len(ds)):
        item = ds[i]
        cams = {}
        for cam in CAMERAS:
            img = item[cam].numpy()
            assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0, (root.name, i, cam)
            cams[cam] = img
        out.append(cams)
    return out


@pytest.mark.parametrize("venv", ["v21", "v30", "v06"])
def test_lerobot_image_dataset_scans_verifies_reencodes_and_loads(venv: str, tmp_path: Path) -> None:
    line = reader_of_venv(venv)
    src = write_with_lerobot(tmp_path / f"images-{venv}")
    info = json.loads((src / "meta/info.json").read_text())
    assert {info["features"][c]["dtype"] for c in CAMERAS} == {"image"}

    manifest = tmp_path / "scan.json"
    text = ok(prep("scan", str(src), "--out", str(manifest), "--workers", "1", "--no-progress"))
    assert "2 cameras, 2 stored as images" in text, text
    cams = {c["key"]: c for c in json.loads(manifest.read_text())["dataset"]["cameras"]}
    for cam in CAMERAS:
        assert (cams[cam]["stored"], cams[cam]["codec"], cams[cam]["width"], cams[cam]["height"]) == \
            ("image", "png", W, H)
        assert cams[cam]["pictures"] == EPISODES * N

    ok(prep("verify", str(src), "--decode", "--workers", "1", "--no-progress"))
    out = tmp_path / f"out224-{venv}"
    ok(prep("reencode", str(src), "--dst", "224", "--out", str(out), "--workers", "1", "--no-progress"))
    ok(prep("verify", str(out), "--size", "224x224", "--all-intra", "--decode", "--workers", "1", "--no-progress"))
    out_info = json.loads((out / "meta/info.json").read_text())
    for cam in CAMERAS:
        assert out_info["features"][cam]["dtype"] == "video"
        assert out_info["features"][cam]["shape"] == [224, 224, 3]

    native, prepared = samples(src, line), samples(out, line)
    assert len(native) == len(prepared) == EPISODES * N
    worst = 0.0
    for a, b in zip(native, prepared, strict=True):
        for cam in CAMERAS:
            assert a[cam].shape == (3, H, W) and b[cam].shape == (3, 224, 224)
            # pad: 96x72 -> 224x168, rows 28..196; compare the picture, sampled on the source's grid
            inner = b[cam][:, 28:196, :]
            ys = (np.arange(H) * 168 / H + 168 / H / 2).astype(int)
            xs = (np.arange(W) * 224 / W + 224 / W / 2).astype(int)
            worst = max(worst, float(np.abs(inner[:, ys][:, :, xs] - a[cam]).mean()))
            assert float(b[cam][:, :20, :].max()) < 0.1  # the pad bar is black
    assert worst < 0.06, worst

    kept = tmp_path / f"kept224-{venv}"  # --keep-images: pictures resized in place, the same pixels before h264
    ok(prep("reencode", str(src), "--dst", "224", "--keep-images", "--out", str(kept), "--workers", "1",
            "--no-progress"))
    ok(prep("verify", str(kept), "--decode", "--workers", "1", "--no-progress"))
    kept_info = json.loads((kept / "meta/info.json").read_text())
    for cam in CAMERAS:
        assert kept_info["features"][cam]["dtype"] == "image"
        assert kept_info["features"][cam]["shape"] == [224, 224, 3]
    as_images = samples(kept, line)
    gap = max(float(np.abs(a[cam] - b[cam]).mean()) for a, b in zip(as_images, prepared, strict=True)
              for cam in CAMERAS)
    assert all(a[cam].shape == (3, 224, 224) for a in as_images for cam in CAMERAS)
    assert gap < 0.03, gap  # the same resized pixels; the video side only adds h264's loss
    report(f"compat {venv} images --keep-images: lerobot {line} loads all {len(as_images)} samples, pictures "
           f"224x224 PNG, within {gap:.3f} mean abs of the video output's frames")
    report(f"compat {venv} images: lerobot {line}'s own use_videos=False dataset ({len(CAMERAS)} image cameras, "
           f"{EPISODES * N} frames) scanned (2 cameras stored as images), verify --decode passes; reencode --dst 224 "
           f"makes them video features that pass verify --size 224x224 --all-intra --decode; lerobot {line} loads "
           f"all {len(prepared)} samples of both, output frames within {worst:.3f} mean abs of the source pictures")
