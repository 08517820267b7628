"""The same items through the real `lerobot` `LeRobotDataset`, configured as openpi configures it.

openpi builds `LeRobotDataset(repo_id, delta_timestamps={"action": [k / fps for k in range(H)]})`
and, in its data transforms (inside the DataLoader workers), turns each camera's float CHW frame
into uint8 HWC and letterboxes it to 224x224. This wrapper does exactly that, so the two loaders
hand the training loop the same tensors. `lerobot` is imported lazily: it lives in its own venv.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

from pipeline.errors import PrepError
from pipeline.loader.dataset import DEFAULT_HORIZON, IMAGE_SIZE
from pipeline.loader.resize import resize_with_pad
from pipeline.loader.rows import ACTION_KEY, STATE_KEY

MODULES = ("lerobot.datasets.lerobot_dataset", "lerobot.common.datasets.lerobot_dataset")


def lerobot_version() -> str | None:
    try:
        return importlib.metadata.version("lerobot")
    except importlib.metadata.PackageNotFoundError:
        return None


def _lerobot_module() -> Any:
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                raise PrepError(f"lerobot is installed but cannot be imported: {exc}") from None
    raise PrepError(
        "--loader lerobot needs the `lerobot` package, which is not installed in this Python "
        "(it brings its own torch; use its venv, e.g. /opt/prep-venvs/lerobot-v30/bin/python "
        "-m pipeline.commands.bench dataloader ... --loader lerobot, with PYTHONPATH at this repository)"
    )


class LeRobotItems(TorchDataset[dict[str, Any]]):
    """LeRobotDataset items converted to this package's item layout (uint8 HWC 224x224 frames)."""

    def __init__(
        self,
        root: Path | str,
        *,
        horizon: int = DEFAULT_HORIZON,
        image_size: int = IMAGE_SIZE,
        video_backend: str | None = None,
    ) -> None:
        module = _lerobot_module()
        root = Path(root).absolute()
        repo_id = f"local/{root.name}"
        fps = float(module.LeRobotDatasetMetadata(repo_id, root=root).fps)
        kwargs: dict[str, Any] = {"root": root, "delta_timestamps": {ACTION_KEY: [k / fps for k in range(horizon)]}}
        if video_backend:
            kwargs["video_backend"] = video_backend
        self.ds = module.LeRobotDataset(repo_id, **kwargs)
        self.cameras: tuple[str, ...] = tuple(self.ds.meta.camera_keys)
        self.horizon = horizon
        self.image_size = image_size
        self.video_backend = str(getattr(self.ds, "video_backend", video_backend or "default"))
        self.state_dim = int(self.ds.meta.features[STATE_KEY]["shape"][0])
        self.action_dim = int(self.ds.meta.features[ACTION_KEY]["shape"][0])

    def __len__(self) -> int:
        return len(self.ds)

    def _frame(self, value: torch.Tensor) -> torch.Tensor:
        arr = value.numpy() if value.dtype == torch.uint8 else (value.clamp(0, 1) * 255).round().byte().numpy()
        if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
            arr = np.ascontiguousarray(arr.transpose(1, 2, 0))
        return torch.from_numpy(resize_with_pad(arr, self.image_size, self.image_size))

    def __getitem__(self, i: int) -> dict[str, Any]:
        raw = self.ds[int(i)]
        item: dict[str, Any] = {cam: self._frame(raw[cam]) for cam in self.cameras}
        item[STATE_KEY] = raw[STATE_KEY].to(torch.float32)
        item[ACTION_KEY] = raw[ACTION_KEY].to(torch.float32)
        item[ACTION_KEY + "_is_pad"] = raw[ACTION_KEY + "_is_pad"].to(torch.bool)
        for key in ("episode_index", "frame_index", "index"):
            item[key] = torch.as_tensor(raw[key]).to(torch.int64).reshape(())
        item["timestamp"] = torch.as_tensor(raw["timestamp"]).to(torch.float64).reshape(())
        item["_decode_s"] = torch.tensor(float("nan"), dtype=torch.float64)  # not separable inside lerobot
        return item

    def empty_item(self) -> dict[str, Any]:
        s = self.image_size
        item: dict[str, Any] = {cam: torch.zeros((s, s, 3), dtype=torch.uint8) for cam in self.cameras}
        item[STATE_KEY] = torch.zeros(self.state_dim, dtype=torch.float32)
        item[ACTION_KEY] = torch.zeros((self.horizon, self.action_dim), dtype=torch.float32)
        item[ACTION_KEY + "_is_pad"] = torch.ones(self.horizon, dtype=torch.bool)
        for key in ("episode_index", "frame_index", "index"):
            item[key] = torch.tensor(-1, dtype=torch.int64)
        item["timestamp"] = torch.tensor(float("nan"), dtype=torch.float64)
        item["_decode_s"] = torch.tensor(float("nan"), dtype=torch.float64)
        return item
