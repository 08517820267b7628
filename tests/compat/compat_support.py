"""Helpers for the real-LeRobot compatibility tests (issue 8).

These tests run inside the virtual environments made by `.ci/lerobot_envs.sh`, where the
real `lerobot` (0.3.3 for format v2.1, 0.4.4 for format v3.0) is installed next to this
package. Nothing here imports torch or lerobot at module level, so that the plain test run
(without lerobot) collects the compat modules and skips them cleanly.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from PIL import Image
from support.cli import run_prep

REPO = Path(__file__).resolve().parents[2]
REAL_FIXTURE_CANDIDATES = (
    REPO.parent / "shared" / "fixtures" / "real" / "g1_inspire_v21",
    REPO / "shared" / "fixtures" / "real" / "g1_inspire_v21",
)
ACTION_HORIZON = 50  # openpi's pi0 / pi0.5 action chunk
TARGET = 224
REENCODE_TIMEOUT_S = 1800


def lerobot_version() -> str | None:
    try:
        return importlib.metadata.version("lerobot")
    except importlib.metadata.PackageNotFoundError:
        return None


def reader_of_venv(venv: str) -> str:
    """This environment's reader line ("0.3", "0.4", "0.6") when it is the one of `venv` (v21, v30, v06: the name
    `.ci/compat.sh` selects with -k); the test is skipped in every other environment."""
    from parity_cases.model import VENV_OF_READER, reader_line

    version = lerobot_version()
    line = reader_line(version) if version else None
    if line is None:
        pytest.skip("needs the real lerobot 0.3.x, 0.4.x or 0.6.x (run in a venv made by .ci/lerobot_envs.sh)")
    if VENV_OF_READER[line] != venv:
        pytest.skip(f"the {venv} reader's case; this env has lerobot {version}")
    return line


def require_lerobot(prefix: str, fmt: str) -> str:
    """Skip the calling test module unless lerobot `prefix`* is importable; return its version."""
    version = lerobot_version()
    if version is None or importlib.util.find_spec("lerobot") is None:
        pytest.skip(
            f"compat {fmt}: needs the real lerobot {prefix}x (run in the venv made by .ci/lerobot_envs.sh)",
            allow_module_level=True,
        )
    if not version.startswith(prefix):
        pytest.skip(f"compat {fmt}: needs lerobot {prefix}x, this env has {version}", allow_module_level=True)
    return version


def backend_arg(backend: str) -> str | None:
    """A test's backend id as `open_dataset` takes it ("default": the reader's own default)."""
    return None if backend == "default" else backend


def backend_of(ds: Any) -> str:
    """The video backend a LeRobotDataset decodes with (0.3/0.4: `video_backend`; 0.6: `_video_backend`)."""
    return str(getattr(ds, "video_backend", None) or getattr(ds, "_video_backend", None) or "?")


def lerobot_convert_v21_to_v30(parent: Path, name: str) -> Path:
    """The installed lerobot's own v2.1 -> v3.0 converter on the local dataset `parent/name`, offline, in place
    (the original moves to `<name>_old`). 0.4.x: `lerobot.datasets.v30...convert_dataset(repo_id, root=PARENT)`;
    0.6.x: `lerobot.scripts...convert_dataset(repo_id, root=DATASET)`."""
    try:
        from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset

        convert_dataset(repo_id=name, root=parent, push_to_hub=False)
    except ImportError:  # lerobot 0.6 moved it, and its root is the dataset's own folder
        from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset as convert_06

        convert_06(repo_id=name, root=parent / name, push_to_hub=False)
    return parent / name


def real_fixture() -> Path | None:
    for candidate in REAL_FIXTURE_CANDIDATES:
        if (candidate / "meta" / "info.json").is_file():
            return candidate
    return None


def writable_copy(src: Path, dst: Path) -> Path:
    """Copy a (possibly read-only) dataset tree; the copy is writable."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for dirpath, _dirnames, _files in os.walk(dst):
        os.chmod(dirpath, 0o755)
    return dst


# ---------------------------------------------------------------- prep reencode


def run_reencode(src: Path, out: Path, options: list[str] | None = None) -> Path:
    """`prep reencode --src SRC --dst 224 --out OUT [options]`, run with this interpreter."""
    r = run_prep("reencode", "--src", src, "--dst", TARGET, "--out", out, "--no-progress", *(options or []),
                 timeout=REENCODE_TIMEOUT_S, inprocess=False)  # a child of this interpreter (the reader's venv)
    cmd = r.args
    assert r.returncode == 0, f"{' '.join(cmd)} failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert (out / "meta" / "info.json").is_file(), f"{out} has no meta/info.json after prep reencode"
    return out


# ---------------------------------------------------------------- dataset access


def load_info(root: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((root / "meta" / "info.json").read_text())
    return info


def video_keys(info: dict[str, Any]) -> list[str]:
    return [k for k, ft in info["features"].items() if ft["dtype"] == "video"]


def chw_shape(feature: dict[str, Any]) -> tuple[int, int, int]:
    """(channels, height, width) of a video feature from its shape and axis names."""
    shape = list(feature["shape"])
    names = [str(n).lower() for n in (feature.get("names") or [])]
    if len(names) == 3 and names[0].startswith("channel"):
        c, h, w = shape
    else:
        h, w, c = shape
    return int(c), int(h), int(w)


def open_dataset(root: Path, backend: str | None = None, horizon: int | None = ACTION_HORIZON) -> Any:
    """`LeRobotDataset(repo_id, root=...)` with the default tolerance, as training opens it."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    fps = load_info(root)["fps"]
    delta = {"action": [k / fps for k in range(horizon)]} if horizon else None
    return LeRobotDataset(f"prep-compat/{root.name}", root=root, delta_timestamps=delta, video_backend=backend)


def episode_length(ds: Any, ep: int) -> int:
    return int(ds.meta.episodes[ep]["length"])


def iterate_all(ds: Any, root: Path, horizon: int | None = ACTION_HORIZON,
                indices: Iterable[int] | None = None) -> int:
    """Read every sample (or those of `indices`); check images (shape, dtype, value range) and action chunks.
    Returns the count read."""
    import torch

    info = load_info(root)
    cams = video_keys(info)
    assert cams, f"{root}: no video features"
    shapes = {cam: chw_shape(info["features"][cam]) for cam in cams}
    adim = int(info["features"]["action"]["shape"][0])
    fps = float(info["fps"])
    assert len(ds) == info["total_frames"], f"{len(ds)} samples, info.json says {info['total_frames']}"
    read = 0
    for i in range(len(ds)) if indices is None else indices:
        read += 1
        item = ds[i]
        for cam in cams:
            img = item[cam]
            assert tuple(img.shape) == shapes[cam], f"sample {i} {cam}: shape {tuple(img.shape)} != {shapes[cam]}"
            assert img.dtype == torch.float32, f"sample {i} {cam}: dtype {img.dtype}"
            lo, hi = float(img.min()), float(img.max())
            assert lo >= 0.0 and hi <= 1.0, f"sample {i} {cam}: values in [{lo}, {hi}], expected [0, 1]"
            assert hi - lo > 0.05, f"sample {i} {cam}: flat image [{lo}, {hi}]"
        fi, ep = int(item["frame_index"]), int(item["episode_index"])
        assert abs(float(item["timestamp"]) - fi / fps) < 1e-4, f"sample {i}: timestamp {float(item['timestamp'])}"
        if horizon:
            act, pad = item["action"], item["action_is_pad"]
            assert tuple(act.shape) == (horizon, adim), f"sample {i}: action chunk {tuple(act.shape)}"
            assert tuple(pad.shape) == (horizon,), f"sample {i}: action_is_pad {tuple(pad.shape)}"
            valid = min(horizon, episode_length(ds, ep) - fi)
            assert int((~pad).sum()) == valid, f"sample {i}: {int((~pad).sum())} valid actions, expected {valid}"
            assert bool(torch.isfinite(act).all()), f"sample {i}: non-finite action"
    return read


def video_file(ds: Any, root: Path, ep: int, cam: str) -> tuple[Path, float]:
    """The mp4 holding episode `ep` of camera `cam` and the episode's start time in it."""
    row = ds.meta.episodes[ep]
    start = float(row.get(f"videos/{cam}/from_timestamp", 0.0)) if hasattr(row, "get") else 0.0
    return root / ds.meta.get_video_file_path(ep, cam), start


def sample_indices(ds: Any, per_episode: int = 6) -> list[int]:
    """A spread of sample indices: first, last and evenly spaced frames of every episode."""
    out: list[int] = []
    start = 0
    for ep in range(ds.meta.total_episodes):
        n = episode_length(ds, ep)
        picks = {0, n - 1, *np.linspace(0, n - 1, per_episode).round().astype(int).tolist()}
        out += [start + p for p in sorted(picks)]
        start += n
    return out


def decode_rgb(path: Path, wanted: Iterable[int], fps: float) -> dict[int, np.ndarray]:
    """Decode `path` with PyAV (rgb24) and keep the frames whose pts*fps rounds to a wanted index."""
    want = set(wanted)
    out: dict[int, np.ndarray] = {}
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            idx = round(float(frame.pts * frame.time_base) * fps)
            if idx in want:
                out[idx] = frame.to_ndarray(format="rgb24")
                if len(out) == len(want):
                    break
    missing = want - set(out)
    assert not missing, f"{path}: PyAV found no frame for indices {sorted(missing)[:10]}"
    return out


def lerobot_frames(ds: Any, root: Path, indices: list[int]) -> dict[tuple[str, int, int], np.ndarray]:
    """{(camera, episode, frame_index): HxWx3 uint8} as LeRobot returns them (float [0,1] -> x255)."""
    cams = video_keys(load_info(root))
    out: dict[tuple[str, int, int], np.ndarray] = {}
    for i in indices:
        item = ds[i]
        ep, fi = int(item["episode_index"]), int(item["frame_index"])
        for cam in cams:
            img = item[cam].numpy().transpose(1, 2, 0) * 255.0
            out[(cam, ep, fi)] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def reference_frames(
    ds: Any, root: Path, keys: Iterable[tuple[str, int, int]]
) -> dict[tuple[str, int, int], np.ndarray]:
    """The same (camera, episode, frame_index) frames decoded by PyAV straight from the mp4 files."""
    fps = float(load_info(root)["fps"])
    by_file: dict[Path, dict[int, tuple[str, int, int]]] = {}  # one decode pass per file
    for cam, ep, fi in keys:
        path, start = video_file(ds, root, ep, cam)
        by_file.setdefault(path, {})[round(start * fps) + fi] = (cam, ep, fi)
    out: dict[tuple[str, int, int], np.ndarray] = {}
    for path, wanted in by_file.items():
        for idx, frame in decode_rgb(path, wanted, fps).items():
            out[wanted[idx]] = frame
    return out


def letterbox(rgb: np.ndarray, size: int = TARGET) -> np.ndarray:
    """openpi's resize_with_pad (PIL, bilinear, zero padding), written from its definition."""
    h, w = rgb.shape[:2]
    if (h, w) == (size, size):
        return rgb
    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = Image.fromarray(rgb).resize((rw, rh), resample=Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), 0)
    canvas.paste(resized, (max(0, int((size - rw) / 2)), max(0, int((size - rh) / 2))))
    return np.asarray(canvas)


def psnr(mse: float) -> float:
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))


# ---------------------------------------------------------------- negative control


def drop_last_frame(path: Path) -> int:
    """Re-mux `path` in place without the packet of its last frame (largest pts). Returns the new count."""
    tmp = path.with_name(path.stem + ".drop.mp4")
    with av.open(str(path)) as inp, av.open(str(tmp), mode="w", format="mp4") as out:
        src = inp.streams.video[0]
        packets = [p for p in inp.demux(src) if p.size > 0 and p.pts is not None]
        last = max(range(len(packets)), key=lambda k: packets[k].pts)
        dst = out.add_stream_from_template(src)
        for k, packet in enumerate(packets):
            if k == last:
                continue
            packet.stream = dst
            out.mux(packet)
    tmp.replace(path)
    with av.open(str(path)) as check:
        return sum(1 for _ in check.decode(video=0))


# ---------------------------------------------------------------- report


def report(line: str) -> None:
    """A line for the summary that .ci/compat.sh prints (and pytest's terminal summary)."""
    REPORT_LINES.append(line)
    target = os.environ.get("PREP_COMPAT_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


REPORT_LINES: list[str] = []
