"""Writes tests/data/lerobot061_native_info.json: the meta/info.json of a dataset written natively by lerobot 0.6.1
(`LeRobotDataset.create` + `add_frame` + `save_episode` + `finalize`), with the features `pipeline.synth` gives a
v2.1 source of 4 joints and one 48x64 h264 camera. Run with the Python of a lerobot 0.6.1 environment:

    python tests/data/lerobot061_native_info.py OUT_DIR
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
from lerobot.configs import RGBEncoderConfig
from lerobot.datasets.lerobot_dataset import LeRobotDataset

joints = [f"joint_{i}" for i in range(4)]
features = {
    "observation.state": {"dtype": "float32", "shape": (4,), "names": joints},
    "action": {"dtype": "float32", "shape": (4,), "names": joints},
    "observation.images.top": {"dtype": "video", "shape": (48, 64, 3), "names": ["height", "width", "channels"]},
}
root = Path(sys.argv[1]) / "native"
ds = LeRobotDataset.create("local/native", fps=30, root=root, features=features, use_videos=True,
                           robot_type="synthetic",
                           rgb_encoder=RGBEncoderConfig(vcodec="h264", g=2, crf=23, preset="veryfast"))
for _episode in range(2):
    for _ in range(6):
        ds.add_frame({"observation.state": np.zeros(4, np.float32), "action": np.ones(4, np.float32),
                      "observation.images.top": np.zeros((48, 64, 3), np.uint8), "task": "pick"})
    ds.save_episode()
ds.finalize()
out = Path(__file__).with_suffix(".json")
out.write_text(json.dumps(json.loads((root / "meta/info.json").read_text()), indent=4) + "\n")
shutil.rmtree(root)
print(out)
