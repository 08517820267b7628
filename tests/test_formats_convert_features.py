"""v2.1 -> v3.0 conversion writes features as the target generation's own writer does (issue 25): no `fps` on
non-video features (LeRobot 0.4.4's converter adds it, `LeRobotDataset.create` of 0.4 and 0.6 does not) and the
depth flag spelled `is_depth_map` (0.6's writer), so lerobot 0.6.1's merge (`aggregate.validate_all_metadata` ->
`feature_utils.features_equal_for_merge`: non-video features equal, video features equal but for the encoder
keys) accepts a prep-converted dataset beside a natively written one. The reference is the info.json lerobot
0.6.1 wrote for the same features (tests/data/lerobot061_native_info.py makes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.cli import main
from pipeline.formats.v21 import info_to_v21
from pipeline.formats.v30 import Limits, info_to_v30
from pipeline.synth import SynthSpec, write_synthetic

NATIVE = Path(__file__).resolve().parent / "data" / "lerobot061_native_info.json"
# lerobot 0.6.1 configs/video.py VIDEO_ENCODER_INFO_KEYS: ignored by its merge
ENCODER_KEYS = {f"video.{k}" for k in ("g", "crf", "preset", "fast_decode", "extra_options", "video_backend")}
RUN = ["--backend", "inline", "--no-progress"]


def equal_for_merge(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The features where lerobot 0.6.1's `features_equal_for_merge` finds a difference (empty: it merges)."""
    def strip(ft: dict[str, Any]) -> dict[str, Any]:
        out = dict(ft)
        if isinstance(out.get("info"), dict):
            out["info"] = {k: v for k, v in out["info"].items() if k not in ENCODER_KEYS}
        return out

    if set(a) != set(b):
        return sorted(set(a) ^ set(b))
    return [k for k in a if (a[k] if a[k].get("dtype") != "video" else strip(a[k]))
            != (b[k] if b[k].get("dtype") != "video" else strip(b[k]))]


def test_converted_features_merge_with_a_natively_written_061_dataset(tmp_path: Path) -> None:
    native = json.loads(NATIVE.read_text())["features"]
    src = write_synthetic(tmp_path / "src", SynthSpec(version="v2.1", episodes=2, frames=6, height=48, width=64,
                                                      cameras=("observation.images.top",), state_dim=4, seed=4))
    source = json.loads((src / "meta/info.json").read_text())["features"]
    assert equal_for_merge(source, native)  # as written by a v2.1 writer, it does not merge as it is
    out = tmp_path / "v30"
    assert main(["convert", str(src), "--to", "v3.0", "--out", str(out), *RUN]) == 0
    converted = json.loads((out / "meta/info.json").read_text())["features"]
    assert equal_for_merge(converted, native) == []
    assert all("fps" not in ft for ft in converted.values() if ft["dtype"] != "video")
    assert converted["observation.images.top"]["info"]["is_depth_map"] is False
    back = tmp_path / "v21"
    assert main(["convert", str(out), "--to", "v2.1", "--out", str(back), *RUN]) == 0
    assert json.loads((back / "meta/info.json").read_text())["features"] == source  # 0.3's spelling again


def test_info_from_lerobots_converter_loses_its_fps_on_the_way_to_v21() -> None:
    """A v3.0 dataset LeRobot 0.4.4's converter wrote (fps on every non-video feature, legacy depth flag):
    to v2.1 and back gives the native v3.0 features."""
    native = json.loads(NATIVE.read_text())
    theirs = json.loads(json.dumps(native))
    for ft in theirs["features"].values():
        if ft["dtype"] != "video":
            ft["fps"] = 30
        else:
            ft["info"]["video.is_depth_map"] = ft["info"].pop("is_depth_map")
    v21 = info_to_v21(theirs, 1000, episodes=2, frames=12, tasks=1, cameras=1)
    assert all("fps" not in ft for ft in v21["features"].values())
    again = info_to_v30(v21, Limits(), episodes=2, frames=12, tasks=1)
    assert again["features"] == native["features"]
