"""Parity cases of cameras stored as images (`dtype: "image"`: a `{bytes, path}` struct column of the data
parquet, one PNG per row, as datasets' `Image` feature stores it and LeRobot writes with `use_videos=False`).

Every reader decodes such a camera alike: datasets' `features/image.py Image.decode_example` (PIL) on the row's
value, then `hf_transform_to_torch` (0.3.3 / 0.4.4 `datasets/utils.py`, 0.6.1 `datasets/io_utils.py`) turns the
PIL picture into a CHW tensor of its own shape; nothing compares it with info.json. The harness judges each
sample's picture against an independent PIL decode of the stored row (`reader.StoredPictures`).

The two controls also run `prep reencode --dst 64` (the image camera becomes a video) and read its output; the
faulty cases run no re-encode (prep reencode's handling of faulty pictures is its own tests'). The faulty cases
are `pipeline.synth` datasets with one edit (built without LeRobot, so the fast tier builds them
too: tests/test_verify_images.py); `lerobot-written-images` is written by the venv's own LeRobot.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.synth import SynthSpec, camera_frames, write_synthetic

from .meta import data_files, rewrite_parquet
from .model import LOADS, RAISES, REFUSES, Built, Expect, Truth, case

IMG = "observation.images.top"
BOTH = ("v2.1", "v3.0")
H, W, N = 48, 64, 8
ROW = 3  # the row of episode 0 (the first rows of the first data file) a fault is put in
DECODE = ("datasets/features/image.py:Image.decode_example (PIL.Image.open on the row's bytes) from "
          "hf_dataset[idx]; lerobot_dataset.py:__getitem__")
TO_TORCH = ("datasets/utils.py:hf_transform_to_torch (0.3.3, 0.4.4) / datasets/io_utils.py (0.6.1): a CHW tensor of "
            "the picture as it is; no reader compares it with info.json's shape")
NO_NONE = ("hf_transform_to_torch passes None through: __getitem__ hands None for the camera, which a policy or "
           "the DataLoader's default collate raises at (the harness counts it as a raise at that sample)")


def spec(fmt: str) -> SynthSpec:
    return SynthSpec(version=fmt, episodes=2, frames=N, height=H, width=W, cameras=(IMG,), image_cameras=(IMG,),
                     state_dim=6, seed=7)


def png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def set_picture(root: Path, value: dict[str, Any] | None, row: int = ROW, camera: str = IMG) -> None:
    """Put `value` (`{bytes, path}`, or None: a null struct) in `row` of the first data file's image column."""
    def edit(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index(camera)
        values = t[camera].to_pylist()
        values[row] = value
        return t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))

    rewrite_parquet(data_files(root)[0], edit)


def drop_column(root: Path, camera: str = IMG) -> None:
    """The first data file without the image column (v2.1: episode 0's file; v3.0: the file of both)."""
    rewrite_parquet(data_files(root)[0], lambda t: t.drop_columns([camera]))


def picture_truth(d: Path, fmt: str) -> dict[tuple[str, int], Truth]:
    """What each row of a prep reencode output (the image camera made a video) should show: the pictures the
    writer was given (a lossy encode: compared by luma PSNR). The source's pictures are judged against the
    stored rows themselves (`reader.StoredPictures`)."""
    out = {}
    for e in range(2):
        p = d / "raw" / f"{IMG}-{e}.npy"
        p.parent.mkdir(parents=True, exist_ok=True)
        np.save(p, camera_frames(spec(fmt), 0, e))
        out[(IMG, e)] = Truth(str(p), tuple(range(N)), exact=False)
    return out


def faulty(fault: Callable[[Path], None]) -> Callable[[Path, str], Built]:
    def build(d: Path, fmt: str) -> Built:
        root = write_synthetic(d / "ds", spec(fmt))
        fault(root)
        return Built(root, picture_truth(d, fmt), notes=[f"camera {IMG} stored as PNG pictures"])

    return build


FAULTS: dict[str, Callable[[Path], None]] = {
    "images-clean": lambda root: None,
    "images-undecodable": lambda root: set_picture(root, {"bytes": b"\x89PNG\r\n\x1a\nnot a picture", "path": None}),
    "images-wrong-size": lambda root: set_picture(root, {"bytes": png(np.zeros((2 * H, W, 3), np.uint8)),
                                                         "path": None}),
    "images-null": lambda root: set_picture(root, None),
    "images-path-only": lambda root: set_picture(root, {"bytes": None, "path": "frame_000003.png"}),
    "images-missing-column": drop_column,
}


def both(outcome: str, where: str, why: str, **per: Expect) -> dict[str, Expect]:
    return {"v2.1": Expect(outcome, where, why), "v3.0": Expect(outcome, where, why), **per}


case("images-clean", BOTH, f"pipeline.synth: 2 episodes x {N} rows, camera {IMG} stored as {W}x{H} PNG pictures",
     None, both(LOADS, DECODE, "every row's picture decodes"))(faulty(FAULTS["images-clean"]))
case("images-undecodable", BOTH, f"row {ROW} of episode 0 holds bytes PIL cannot identify (a PNG signature, then "
     "garbage)", "images-clean",
     both(RAISES, DECODE, "PIL raises UnidentifiedImageError at that sample"),
     reencode_variants=())(faulty(FAULTS["images-undecodable"]))
case("images-wrong-size", BOTH, f"row {ROW} of episode 0 holds a {W}x{2 * H} picture (declared {W}x{H})",
     "images-clean", both(LOADS, TO_TORCH, "the sample loads at the picture's own size: the model gets another "
                          "shape (verify: a picture_shape warning)"),
     reencode_variants=())(faulty(FAULTS["images-wrong-size"]))
case("images-null", BOTH, f"row {ROW} of episode 0 holds a null picture (the struct null)", "images-clean",
     both(RAISES, TO_TORCH, NO_NONE), reencode_variants=())(faulty(FAULTS["images-null"]))
case("images-path-only", BOTH, f"row {ROW} of episode 0 has null bytes and a relative path (a file that is not "
     "there)", "images-clean",
     both(RAISES, DECODE, "with bytes null, decode_example opens `path` from the working folder: FileNotFoundError"),
     reencode_variants=())(faulty(FAULTS["images-path-only"]))
case("images-missing-column", BOTH, "the first data file has no image column (v2.1: episode 0's file, the other "
     "file has it; v3.0: the one file)", "images-clean",
     {"v2.1": Expect(REFUSES, "lerobot_dataset.py:load_hf_dataset -> datasets load_dataset('parquet') (builder.py)",
                     "the data files' columns differ: DatasetGenerationError (CastError) at open"),
      "v3.0": Expect(RAISES, "datasets/utils.py:load_nested_dataset (0.4.4) / io_utils.py (0.6.1): "
                     "Dataset.from_parquet(features=...) fills the missing column with None; " + NO_NONE,
                     "every sample's picture is None")},
     reencode_variants=())(faulty(FAULTS["images-missing-column"]))


def write_lerobot_images(root: Path, cameras: tuple[str, ...], *, height: int, width: int, episodes: int,
                         frames: int, pictures: Callable[[int, int], np.ndarray],
                         row: Callable[[int, int], dict[str, Any]], task: str = "pick") -> Path:
    """This venv's LeRobot writes a dataset whose `cameras` are stored as images (`use_videos=False`):
    `LeRobotDataset.create`, `add_frame` (0.3.x: the task an argument; 0.4+: a key) per frame, `save_episode`, and
    `finalize` where it has one. `pictures(camera_no, episode)` gives an episode's (frames, H, W, 3) uint8 pictures,
    `row(episode, i)` its state and action; each feature has `len(row(...)[key])` values (float32)."""
    import inspect

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    first = row(0, 0)
    features: dict[str, Any] = {k: {"dtype": "float32", "shape": (len(v),), "names": [f"joint_{i}" for i in
                                                                                      range(len(v))]}
                                for k, v in first.items()}
    for cam in cameras:
        features[cam] = {"dtype": "image", "shape": (height, width, 3), "names": ["height", "width", "channels"]}
    ds = LeRobotDataset.create(f"prep-compat/{root.name}", fps=30, features=features, root=root,
                               robot_type="synthetic", use_videos=False)
    task_arg = "task" in inspect.signature(ds.add_frame).parameters  # 0.3.x: add_frame(frame, task)
    for e in range(episodes):
        imgs = [pictures(k, e) for k in range(len(cameras))]
        for i in range(frames):
            frame: dict[str, Any] = {**row(e, i), **{cam: imgs[k][i] for k, cam in enumerate(cameras)}}
            if task_arg:
                ds.add_frame(frame, task=task)
            else:
                ds.add_frame({**frame, "task": task})
        ds.save_episode()
    if hasattr(ds, "finalize"):
        ds.finalize()
    return root


@case("lerobot-written-images", BOTH, "written by LeRobot itself (0.3.3 / 0.4.4 / 0.6.1) with use_videos=False: "
      f"create/add_frame/save_episode, camera {IMG} stored as PNG pictures in the data parquet", None,
      both(LOADS, DECODE, "LeRobot reads what it wrote"), needs_lerobot=True)
def lerobot_written_images(d: Path, fmt: str) -> Built:
    root = write_lerobot_images(d / "ds", (IMG,), height=H, width=W, episodes=2, frames=N,
                                pictures=lambda _k, e: camera_frames(spec(fmt), 0, e),
                                row=lambda _e, i: {"observation.state": np.full(6, i, np.float32),
                                                   "action": np.full(6, i + 1, np.float32)},
                                task="pick up the cup")
    return Built(root, picture_truth(d, fmt), notes=["written by LeRobot with use_videos=False"])
