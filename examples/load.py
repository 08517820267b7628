"""Load a prepared dataset with LeRobot (docs/walkthrough.md, "Loading the result"):

    HF_HUB_OFFLINE=1 LEROBOT_VENV/bin/python examples/load.py FOLDER

FOLDER is a local LeRobot dataset (v2.1 for lerobot 0.3.x and openpi, v3.0 for lerobot 0.4.x and later); the
repo_id is only a name here. `ds.meta.info` is a dict up to lerobot 0.4 and a `DatasetInfo` in 0.6, whose
dict-style access (`info["codebase_version"]`) warns DeprecationWarning: attribute access where it exists."""

import sys
from pathlib import Path

from lerobot.datasets.lerobot_dataset import LeRobotDataset

root = Path(sys.argv[1])
ds = LeRobotDataset(f"local/{root.name}", root=root)
item = ds[100]
info = ds.meta.info
version = info["codebase_version"] if isinstance(info, dict) else info.codebase_version
print(version, ds.num_episodes, "episodes", ds.num_frames, "frames", ds.fps, "fps")
print({k: tuple(v.shape) for k, v in item.items() if hasattr(v, "shape")})
