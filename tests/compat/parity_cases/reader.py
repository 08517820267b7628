"""Run the real reader on a dataset and say what it did: `LeRobotDataset(repo_id, root=...)` with each
backend (torchcodec, the default, and pyav), default tolerance, a 50-step action chunk, every sample.

Outcome per backend: `loads` (every sample, every frame the row's frame), `refuses_at_open` (with the
exception and the deepest lerobot frame that raised), `raises_at_sample` (the first sample that raised),
or `silently_wrong` (a sample whose frame is not the row's frame, told apart by comparing with the case's
ground truth: an independent PyAV decode of the clean file, or the raw frames the writer was given).

Imports torch and lerobot: run inside a LeRobot venv.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .meta import image_keys, read_json, video_keys
from .model import LOADS, RAISES, REFUSES, SILENTLY_WRONG, Built, Truth
from .mp4 import decode_all

BACKENDS = ("torchcodec", "pyav")
HORIZON = 50
EXACT_MEAN_DIFF = 2.0  # of 255: torchcodec and PyAV convert YUV->RGB with different rounding
EXACT_BAD_PIXELS = 0.005  # share of pixels more than 40 levels apart
LOSSY_FLOOR_DB = 18.0  # luma PSNR against the right frame, below which the frame is not it
LOSSY_MARGIN = 1.3  # another frame must match this much better to call the row's frame wrong
# A frame this far below the median luma PSNR of its camera in the same read is damaged (concealed
# corruption that survived a re-encode): clean 64x64 outputs spread within ~1 dB of their median
# (29-35 dB), frames rebuilt from 2,000 flipped bytes sit 6-10 dB below it.
LOSSY_DROP_DB = 4.0


class SampleTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def stop(_sig: int, _frame: Any) -> None:
        raise SampleTimeout(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def where(exc: BaseException) -> str:
    """The deepest frame of the traceback inside lerobot (else torchcodec/torchvision/datasets/huggingface_hub)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for pkg in ("/lerobot/", "/torchcodec/", "/torchvision/", "/datasets/", "/huggingface_hub/"):
        mine = [f for f in frames if pkg in f.filename]
        if mine:
            f = mine[-1]
            rel = f.filename.split("site-packages/")[-1]
            return f"{rel}:{f.name} (L{f.lineno})"
    f = frames[-1] if frames else None
    return f"{f.filename}:{f.name} (L{f.lineno})" if f else "?"


def message(exc: BaseException, width: int = 220) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:width]}"


def letterbox(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """openpi resize_with_pad (PIL bilinear, black bars), to width x height."""
    h, w = rgb.shape[:2]
    if (w, h) == (width, height):
        return rgb
    ratio = max(w / width, h / height)
    rw, rh = int(w / ratio), int(h / ratio)
    resized = Image.fromarray(rgb).resize((rw, rh), resample=Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (width, height), 0)
    canvas.paste(resized, (max(0, int((width - rw) / 2)), max(0, int((height - rh) / 2))))
    return np.asarray(canvas)


class TruthFrames:
    """Reference frames per (camera, episode): decoded once per file, brought to a target size."""

    def __init__(self, built: Built) -> None:
        self.built = built
        self._files: dict[str, tuple[list[float], list[np.ndarray]]] = {}
        self._cache: dict[tuple[str, int, tuple[int, int] | None, int], tuple[np.ndarray, list[int | None]]] = {}

    def _decoded(self, ref: str) -> tuple[list[float], list[np.ndarray]]:
        if ref not in self._files:
            if ref.endswith(".npy"):
                stack = np.load(ref)
                self._files[ref] = ([float(i) for i in range(len(stack))], list(stack))
            else:
                self._files[ref] = decode_all(Path(ref))
        return self._files[ref]

    def get(self, camera: str, episode: int, size: tuple[int, int] | None,
            rotation: int = 0) -> tuple[np.ndarray, list[int | None], bool]:
        """(candidates (n, h, w, 3) uint8, index of each row's frame among them or None, exact); `rotation`:
        degrees clockwise the reader turns the coded frames (a display matrix applied)."""
        t: Truth = self.built.truth[(camera, episode)]
        key = (camera, episode, size, rotation)
        if key not in self._cache:
            times, frames = self._decoded(t.ref)
            if t.ref.endswith(".npy"):
                idx = [None if p is None else int(p) for p in t.picks]
                wanted = sorted({i for i in idx if i is not None})
            else:
                arr = np.asarray(times)
                idx = []
                for p in t.picks:
                    if p is None:
                        idx.append(None)
                        continue
                    k = int(np.argmin(np.abs(arr - float(p))))
                    if abs(arr[k] - float(p)) > 1e-3:
                        raise ValueError(f"truth of {camera} episode {episode}: no frame at {p} s in {t.ref}")
                    idx.append(k)
                lo, hi = min(i for i in idx if i is not None), max(i for i in idx if i is not None)
                wanted = list(range(lo, hi + 1))
            pos = {k: n for n, k in enumerate(wanted)}
            cands = [frames[k] for k in wanted]
            if rotation:
                cands = [np.ascontiguousarray(np.rot90(c, k=-(rotation // 90))) for c in cands]
            if size is not None:
                cands = [letterbox(c, *size) for c in cands]
            self._cache[key] = (np.stack(cands), [None if i is None else pos[i] for i in idx])
        cands, rows = self._cache[key]
        return cands, rows, t.exact and size is None


def judge(frame: np.ndarray, cands: np.ndarray, expected: int | None, exact: bool,
          margins: dict[str, float] | None = None, psnrs: list[float] | None = None) -> str | None:
    """Why `frame` is not the row's frame, or None when it is. `margins` collects, over the frames
    judged right, the worst exact-mode mean difference and the worst lossy-mode luma PSNR; `psnrs`
    gets a lossy-mode frame's luma PSNR (for the relative test done after the whole read)."""
    if expected is None:
        return "no right frame exists for this row (the video lacks it)"
    if frame.shape != cands.shape[1:]:
        return f"frame {frame.shape[1]}x{frame.shape[0]}, the row's frame is {cands.shape[2]}x{cands.shape[1]}"
    right = cands[expected].astype(np.int16)
    diff = np.abs(frame.astype(np.int16) - right)
    if exact:
        mean, bad = float(diff.mean()), float((diff > 40).mean())
        if mean <= EXACT_MEAN_DIFF and bad <= EXACT_BAD_PIXELS:
            if margins is not None:
                margins["exact_worst_mean_diff"] = max(margins.get("exact_worst_mean_diff", 0.0), round(mean, 3))
            return None
        return f"differs from the row's frame (mean |diff| {mean:.1f}, {100 * bad:.1f}% pixels > 40)"
    luma = frame.astype(np.float64).mean(axis=-1)
    mse = ((cands.astype(np.float64).mean(axis=-1) - luma) ** 2).mean(axis=(1, 2))
    best = int(np.argmin(mse))
    psnr = 10 * np.log10(255.0**2 / max(float(mse[expected]), 1e-9))
    if best != expected and mse[expected] > LOSSY_MARGIN * mse[best]:
        return (f"matches frame {best - expected:+d} from the row's frame better "
                f"(luma PSNR {psnr:.1f} dB to the right one)")
    if psnr < LOSSY_FLOOR_DB:
        return f"luma PSNR {psnr:.1f} dB against the row's frame"
    if psnrs is not None:
        psnrs.append(float(psnr))
    return None


class StoredPictures:
    """The pictures a dataset stores for its image cameras, decoded by PIL from the data parquet (independently
    of datasets and LeRobot): what each sample of such a camera must show, at its own size and channels."""

    def __init__(self, root: Path, cameras: list[str]) -> None:
        self.root, self.cameras = root, cameras
        self._bytes: dict[tuple[str, int, int], bytes | None] | None = None

    def _load(self) -> dict[tuple[str, int, int], bytes | None]:
        import pyarrow.parquet as pq

        out: dict[tuple[str, int, int], bytes | None] = {}
        for p in sorted((self.root / "data").glob("*/*.parquet")):
            t = pq.read_table(p)
            for cam in self.cameras:
                if cam not in t.column_names:
                    continue
                for ep, fi, v in zip(t["episode_index"].to_pylist(), t["frame_index"].to_pylist(),
                                     t[cam].to_pylist(), strict=True):
                    out[(cam, int(ep), int(fi))] = (v or {}).get("bytes")
        return out

    def get(self, camera: str, episode: int, frame_index: int) -> np.ndarray | None:
        """(h, w, c) uint8, or None when the row stores no picture bytes."""
        import io

        if self._bytes is None:
            self._bytes = self._load()
        data = self._bytes.get((camera, episode, frame_index))
        if data is None:
            return None
        with Image.open(io.BytesIO(data)) as im:
            arr = np.asarray(im)
        return arr[:, :, None] if arr.ndim == 2 else arr


def judge_picture(item: Any, cam: str, stored: StoredPictures, ep: int, fi: int) -> str | None:
    """Why a sample's picture of an image camera is not the row's stored picture, or None. A sample without
    the picture (None, or no key) raises: a policy or the DataLoader's collate stops there."""
    value = item.get(cam) if hasattr(item, "get") else None
    if value is None:
        raise ValueError(f"the reader hands no picture for {cam} (None or no key) at episode {ep} frame_index {fi}: "
                         "a policy or the DataLoader's default collate raises here")
    frame = to_uint8(value)
    want = stored.get(cam, ep, fi)
    if want is None:
        return "the row stores no picture bytes, the reader hands one"
    if frame.shape != want.shape:
        return f"picture {frame.shape}, the stored picture is {want.shape}"
    if not np.array_equal(frame, want):
        return f"differs from the stored picture (mean |diff| {np.abs(frame.astype(int) - want).mean():.2f})"
    return None


def to_uint8(img: Any) -> np.ndarray:
    arr = img.numpy().transpose(1, 2, 0) * 255.0
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)


def open_reader(root: Path, backend: str, horizon: int | None = HORIZON) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    fps = read_json(root / "meta/info.json")["fps"]
    delta = {"action": [k / fps for k in range(horizon)]} if horizon else None
    return LeRobotDataset(f"parity/{root.name}", root=root, delta_timestamps=delta, video_backend=backend)


def parquet_rows(root: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in sorted((root / "data").glob("*/*.parquet")))


def clear_decoder_cache() -> None:
    with contextlib.suppress(Exception):
        from lerobot.datasets import video_utils

        cache = getattr(video_utils, "_default_decoder_cache", None)
        if cache is not None:
            cache.clear()


def torchcodec_applies_rotation() -> bool:
    """torchcodec >= 0.11 (lerobot 0.6's default backend) hands frames turned by the stream's display
    matrix; older torchcodec and the pyav backend hand the coded frames."""
    import importlib.metadata

    try:
        major, minor = (int(x) for x in importlib.metadata.version("torchcodec").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 11)


def read_backend(root: Path, built: Built, backend: str, size: tuple[int, int] | None,
                 timeout_s: int = 300) -> dict[str, Any]:
    """Open `root` with one backend and read every sample; judge each frame against `built`'s truth
    (brought to `size`, the output's frame size, when reading a re-encoded output). A source with a display
    matrix: its frames are expected turned for a backend that applies the matrix; a prep output holds them
    turned (prep bakes the rotation into the pixels), for every backend."""
    out: dict[str, Any] = {"backend": backend}
    rotation = 0
    if built.display_rotation and (size is not None or (backend == "torchcodec" and torchcodec_applies_rotation())):
        rotation = built.display_rotation
        out["expects_rotation"] = rotation
    info = read_json(root / "meta/info.json")
    cams = video_keys(info)
    pictures = image_keys(info)
    stored = StoredPictures(root, pictures)
    truth = TruthFrames(built)
    try:
        with time_limit(timeout_s):
            ds = open_reader(root, backend)
    except Exception as exc:
        out.update(outcome=REFUSES, message=message(exc), where=where(exc))
        return out
    n = len(ds)
    out.update(samples=n, rows=parquet_rows(root), wrong=0)
    margins: dict[str, float] = {}
    out["margins"] = margins
    first_wrong: dict[str, Any] | None = None
    lossy: dict[str, list[tuple[int, int, int, float]]] = {}  # camera -> (sample, episode, frame_index, psnr)
    reached = 0
    try:
        with time_limit(timeout_s):
            for i in range(n):
                reached = i
                item = ds[i]
                ep, fi = int(item["episode_index"]), int(item["frame_index"])
                for cam in pictures:
                    why_picture = judge_picture(item, cam, stored, ep, fi)
                    if why_picture:
                        out["wrong"] += 1
                        if first_wrong is None:
                            first_wrong = {"sample": i, "camera": cam, "episode": ep, "frame_index": fi,
                                           "why": why_picture}
                        break
                for cam in cams:
                    frame = to_uint8(item[cam])
                    if (cam, ep) not in built.truth:
                        why: str | None = f"no ground truth for {cam} episode {ep}"
                    else:
                        # a depth camera comes out of prep reencode unchanged (copied, never re-encoded lossy):
                        # its frames keep the source's size
                        cam_size = None if cam in built.depth_cameras and frame.shape[:2] != (size or (0, 0))[::-1] \
                            else size
                        cands, rows, exact = truth.get(cam, ep, cam_size, rotation)
                        expected = rows[fi] if 0 <= fi < len(rows) else None
                        got: list[float] = []
                        why = judge(frame, cands, expected, exact, margins, got)
                        if got:
                            lossy.setdefault(cam, []).append((i, ep, fi, got[0]))
                    if why:
                        out["wrong"] += 1
                        if first_wrong is None:
                            first_wrong = {"sample": i, "camera": cam, "episode": ep, "frame_index": fi, "why": why}
                        break
    except Exception as exc:
        out.update(outcome=RAISES, sample=reached, message=message(exc), where=where(exc))
        if first_wrong:
            out["first_wrong"] = first_wrong
        return out
    finally:
        clear_decoder_cache()
    for cam, frames in lossy.items():
        median = float(np.median([f[3] for f in frames]))
        margins[f"lossy_median_psnr_db {cam}"] = round(median, 2)
        ok = [f[3] for f in frames if f[3] >= median - LOSSY_DROP_DB]
        margins[f"lossy_worst_psnr_db {cam}"] = round(min(ok), 2) if ok else 0.0
        for i, ep, fi, psnr in frames:
            if psnr < median - LOSSY_DROP_DB:
                out["wrong"] += 1
                if first_wrong is None or i < first_wrong["sample"]:
                    first_wrong = {"sample": i, "camera": cam, "episode": ep, "frame_index": fi,
                                   "why": f"luma PSNR {psnr:.1f} dB, {median - psnr:.1f} dB below this camera's "
                                          f"median {median:.1f} dB (damaged)"}
    if first_wrong is not None:
        out.update(outcome=SILENTLY_WRONG, first_wrong=first_wrong)
    elif n < out["rows"]:
        out.update(outcome=SILENTLY_WRONG, first_wrong={"why": f"reads {n} samples of {out['rows']} parquet rows"})
    else:
        out["outcome"] = LOADS
    return out


def read_dataset(root: Path, built: Built, size: tuple[int, int] | None = None,
                 backends: tuple[str, ...] = BACKENDS) -> dict[str, Any]:
    """Both backends; `outcome` is the worse of the two (order: loads < silently_wrong < raises < refuses)."""
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per = {b: read_backend(root, built, b, size) for b in backends}
    order = [LOADS, SILENTLY_WRONG, RAISES, REFUSES]
    worst = max(per.values(), key=lambda r: order.index(r["outcome"]))
    return {"outcome": worst["outcome"], "backends": per}


def depth_report(src: Path, out: Path, cameras: tuple[str, ...]) -> dict[str, Any]:
    """Per depth camera: distinct 16-bit levels in the source's first file and in the output's."""
    import av

    res: dict[str, Any] = {}
    def levels(root: Path, cam: str) -> tuple[int, str]:
        files = sorted(p for p in (root / "videos").rglob("*.mp4") if cam in p.as_posix())
        with av.open(str(files[0])) as c:
            fmt = c.streams.video[0].codec_context.pix_fmt or "?"
        _t, frames = decode_all(files[0], fmt="gray16le")
        return len(np.unique(np.stack(frames))), fmt

    for cam in cameras:
        (ls, fs), (lo, fo) = levels(src, cam), levels(out, cam)
        res[cam] = {"source_levels": ls, "source_pix_fmt": fs, "output_levels": lo, "output_pix_fmt": fo,
                    "preserved": lo >= ls}
    return res

