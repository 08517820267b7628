"""lerobot 0.6.1's own writer -> prep -> lerobot 0.6.1 (issue 25).

Datasets written by 0.6.1's `LeRobotDataset.create(rgb_encoder=RGBEncoderConfig(vcodec=...))` / `add_frame` /
`save_episode` / `finalize`, in h264 and in its default AV1 (libsvtav1), with 3 RGB cameras and a depth camera
(hevc gray12le lossless, `is_depth_map` at the top of the feature's info, as 0.6.1 writes it):
- `prep verify --decode` passes them; `prep reencode --dst 224` writes an output that passes the README's own
  check (`prep verify OUT --size 224x224 --all-intra --decode`: the depth camera, copied unchanged, is checked
  as a copy) and 0.6.1 loads every sample of it with torchcodec and with pyav, the depth frames bit-exact;
- 0.6.1's own edit tools accept prep's outputs: `delete_episodes` (its output still all-intra, as 0.6.1 rebuilds
  the encoder from the `video.g` prep declares), `split_dataset`, `merge_datasets` of the h264 and AV1 outputs;
- a natively written dataset taken to v2.1 and back by `prep convert` merges with a natively written one in
  0.6.1's `merge_datasets` (conversion writes the features as 0.6.1's writer does), and 0.6.1 loads the merge.

Runs inside the lerobot-v06 venv (`.ci/compat.sh` runs it: ids hold `v06`); skipped elsewhere.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compat_support import report, require_lerobot
from support.cli import run_prep

LEROBOT = require_lerobot("0.6.", "v3.0")

pytestmark = pytest.mark.readers

H, W, N, EPISODES, FPS = 72, 96, 15, 3, 30
RGB = ("observation.images.top", "observation.images.left", "observation.images.right")
DEPTH = "observation.images.depth"
CODECS = {"h264-v06": "h264", "av1-v06": "libsvtav1"}
TIMEOUT_S = 1200


# `prep ARGS` with this interpreter (prep is installed in the reader's venv), as a child process
prep = functools.partial(run_prep, timeout=TIMEOUT_S, inprocess=False)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    cmd = " ".join(map(str, r.args))
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def depth_frame(episode: int, i: int) -> np.ndarray:
    """uint16 millimetres (0.6.1 infers the unit from the dtype): a slope plus a moving box."""
    y, x = np.mgrid[0:H, 0:W]
    d = 600 + 20 * y + 5 * x + 100 * episode
    bx = (7 * i + 11 * episode) % (W - 16)
    d[20:36, bx:bx + 16] = 350 + 10 * i
    return d.astype(np.uint16)[..., None]


def write_native(root: Path, vcodec: str, seed: int = 7) -> Path:
    """0.6.1's own writer: 3 RGB cameras (`vcodec`) and a depth camera (0.6.1's depth encoder defaults)."""
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from pipeline.synth import SynthSpec, camera_frames

    names = [f"joint_{i}" for i in range(6)]
    features: dict[str, Any] = {"observation.state": {"dtype": "float32", "shape": (6,), "names": names},
                                "action": {"dtype": "float32", "shape": (6,), "names": names}}
    for cam in RGB:
        features[cam] = {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]}
    features[DEPTH] = {"dtype": "video", "shape": (H, W, 1), "names": ["height", "width", "channels"],
                       "info": {"is_depth_map": True}}
    ds = LeRobotDataset.create(f"prep-compat/{root.name}", fps=FPS, features=features, root=root,
                               robot_type="synthetic", use_videos=True, rgb_encoder=RGBEncoderConfig(vcodec=vcodec))
    for e in range(EPISODES):
        imgs = [camera_frames(SynthSpec(frames=N, height=H, width=W, seed=seed), k, e) for k in range(len(RGB))]
        for i in range(N):
            t = i / FPS
            frame: dict[str, Any] = {"observation.state": np.sin(t + np.arange(6) + e).astype(np.float32),
                                     "action": np.cos(t + np.arange(6) + e).astype(np.float32), "task": "pick"}
            frame.update({cam: imgs[k][i] for k, cam in enumerate(RGB)})
            frame[DEPTH] = depth_frame(e, i)
            ds.add_frame(frame)
        ds.save_episode(parallel_encoding=False)
    ds.finalize()
    return root


def info_of(root: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((root / "meta/info.json").read_text())
    return info


def read_all(root: Path, backend: str) -> dict[str, Any]:
    """0.6.1 opens `root` with `backend` and hands every sample; each image has its feature's shape and
    finite values. Returns {"samples": n, "depth": (n, h, w) float array of the depth camera or None}."""
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = info_of(root)
    cams = [k for k, ft in info["features"].items() if ft["dtype"] == "video"]
    ds = LeRobotDataset(f"prep-compat/{root.name}", root=root, video_backend=backend)
    assert len(ds) == info["total_frames"], (len(ds), info["total_frames"])
    depth = []
    for i in range(len(ds)):
        item = ds[i]
        for cam in cams:
            h, w, c = info["features"][cam]["shape"]
            img = item[cam]
            assert tuple(img.shape) == (c, h, w), f"{root.name} sample {i} {cam}: {tuple(img.shape)} != {(c, h, w)}"
            assert bool(torch.isfinite(img).all()), f"{root.name} sample {i} {cam}: not finite"
            if cam == DEPTH:
                depth.append(img[0].numpy().astype(np.float64))
            else:
                assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0, f"{root.name} sample {i} {cam}"
        assert bool(torch.isfinite(item["action"]).all())
    return {"samples": len(ds), "depth": np.stack(depth) if depth else None}


def loads_everywhere(root: Path) -> dict[str, dict[str, Any]]:
    got = {b: read_all(root, b) for b in ("torchcodec", "pyav")}
    a, b = got["torchcodec"]["depth"], got["pyav"]["depth"]
    if a is not None:
        assert np.array_equal(a, b), f"{root.name}: depth differs between torchcodec and pyav"
    return got


class Corpora:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.built: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str) -> Path:
        out = self.base / name
        if name.startswith("native-"):
            return write_native(out, CODECS[name.removeprefix("native-")])
        if name.startswith("out224-"):
            src = self.get("native-" + name.removeprefix("out224-"))
            ok(prep("reencode", "--src", str(src), "--dst", "224", "--out", str(out), "--workers", "1",
                    "--no-progress"))
            return out
        raise KeyError(name)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Corpora:
    return Corpora(tmp_path_factory.mktemp("writer-v06"))


@pytest.mark.parametrize("codec", list(CODECS))
def test_native_passes_verify_and_loads(corpora: Corpora, codec: str) -> None:
    src = corpora.get(f"native-{codec}")
    info = info_of(src)
    assert info["codebase_version"] == "v3.0"
    assert info["features"][DEPTH]["info"]["is_depth_map"] is True
    assert "video.is_depth_map" not in info["features"][DEPTH]["info"]
    ok(prep("verify", str(src), "--decode", "--workers", "1", "--no-progress"))
    got = loads_everywhere(src)
    rgb, depth = info["features"][RGB[0]]["info"], info["features"][DEPTH]["info"]
    report(f"compat v06 writer {codec}: lerobot {LEROBOT}'s own dataset ({rgb['video.codec']}, 3 RGB + depth "
           f"{depth['video.codec']} {depth['video.pix_fmt']}): prep verify --decode passes; "
           f"{got['pyav']['samples']} samples read with torchcodec and pyav")


@pytest.mark.parametrize("codec", list(CODECS))
def test_reencode_output_passes_the_readme_check_and_loads(corpora: Corpora, codec: str) -> None:
    src, out = corpora.get(f"native-{codec}"), corpora.get(f"out224-{codec}")
    info = info_of(out)
    for cam in RGB:
        assert info["features"][cam]["shape"][:2] == [224, 224]
    assert info["features"][DEPTH]["shape"] == info_of(src)["features"][DEPTH]["shape"]
    # the README's output check; the depth camera is copied, so checked as a copy
    text = ok(prep("verify", str(out), "--size", "224x224", "--all-intra", "--decode", "--workers", "1",
                   "--no-progress"))
    assert "depth" in text and DEPTH in text, text[-2000:]
    got = loads_everywhere(out)
    native = read_all(src, "pyav")
    assert np.array_equal(got["pyav"]["depth"], native["depth"]), "depth frames changed by prep reencode"
    report(f"compat v06 writer {codec}: prep reencode --dst 224 output passes verify --size 224x224 --all-intra "
           f"--decode (depth checked as a copy); lerobot {LEROBOT} reads its {got['pyav']['samples']} samples with "
           f"torchcodec and pyav, depth bit-exact with the source")


def test_lerobot_edit_tools_accept_prep_outputs(corpora: Corpora, tmp_path: Path) -> None:
    from lerobot.datasets.dataset_tools import delete_episodes, merge_datasets, split_dataset
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    a, b = corpora.get("out224-h264-v06"), corpora.get("out224-av1-v06")
    deleted = tmp_path / "deleted"
    delete_episodes(LeRobotDataset("prep-compat/a", root=a), [1], output_dir=deleted, repo_id="prep-compat/deleted")
    assert read_all(deleted, "torchcodec")["samples"] == (EPISODES - 1) * N
    assert read_all(deleted, "pyav")["samples"] == (EPISODES - 1) * N
    # 0.6.1 re-encodes what it cuts with the encoder prep declared (video.g 1): still all-intra
    ok(prep("verify", str(deleted), "--size", "224x224", "--all-intra", "--decode", "--workers", "1", "--no-progress"))
    split_dataset(LeRobotDataset("prep-compat/b", root=b), {"train": [0, 1], "val": [2]}, output_dir=tmp_path / "split")
    for part, n in (("train", 2), ("val", 1)):
        assert loads_everywhere(tmp_path / "split" / part)["pyav"]["samples"] == n * N
    merged = tmp_path / "merged"
    merge_datasets([LeRobotDataset("prep-compat/a", root=a), LeRobotDataset("prep-compat/b", root=b)],
                   output_repo_id="prep-compat/merged", output_dir=merged)
    assert loads_everywhere(merged)["pyav"]["samples"] == 2 * EPISODES * N
    report(f"compat v06 writer: lerobot {LEROBOT}'s delete_episodes (output still all-intra), split_dataset and "
           "merge_datasets accept prep reencode's h264 and AV1-source outputs; every result read with both backends")


def test_prep_converted_merges_with_native(corpora: Corpora, tmp_path: Path) -> None:
    """native (h264) -> prep convert --to v2.1 -> prep convert --to v3.0, merged by 0.6.1 with a native dataset."""
    from lerobot.datasets.dataset_tools import merge_datasets
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = corpora.get("native-h264-v06")
    v21, back = tmp_path / "v21", tmp_path / "v30"
    ok(prep("convert", str(native), "--to", "v2.1", "--out", str(v21), "--workers", "1", "--no-progress"))
    ok(prep("convert", str(v21), "--to", "v3.0", "--out", str(back), "--workers", "1", "--no-progress"))
    ours, theirs = info_of(back)["features"], info_of(native)["features"]
    for key, ft in theirs.items():
        if ft["dtype"] != "video":
            assert ours[key] == ft, f"{key}: prep convert wrote {ours[key]}, 0.6.1 writes {ft}"
    assert loads_everywhere(back)["pyav"]["samples"] == EPISODES * N
    merged = tmp_path / "merged"
    merge_datasets([LeRobotDataset("prep-compat/native", root=native), LeRobotDataset("prep-compat/back", root=back)],
                   output_repo_id="prep-compat/merged", output_dir=merged)
    assert loads_everywhere(merged)["pyav"]["samples"] == 2 * EPISODES * N
    report(f"compat v06 writer: a native dataset through prep convert v3.0 -> v2.1 -> v3.0 merges with a native one "
           f"in lerobot {LEROBOT}'s merge_datasets; the merge read with both backends")
