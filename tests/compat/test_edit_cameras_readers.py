"""`prep edit --keep-cameras/--drop-cameras/--rename` (and `--merge` after renames) read by the real readers (issue 35):
lerobot 0.3.3 (v2.1), 0.4.4 and 0.6.1 (v3.0).

In each reader's venv, prep (run as a command with that venv's interpreter) edits corpora built there:
- `drop`: a synthetic corpus A (cameras cam_high, wrist) with episode 1 and the wrist camera left out and
  `observation.state` renamed `observation.joints` (a data column renamed);
- `rename`: A with both cameras renamed (base_0_rgb, left_wrist_0_rgb: their files moved, bytes unchanged);
- `merge`: `--merge A B` where B's cameras have other names (base, left_wrist), both renamed to the same keys;
- `no-cameras`: A with every camera left out (a state/action dataset; `video_path` null as LeRobot writes it);
- `images`: a dataset this venv's LeRobot wrote with `use_videos=False` (two cameras stored as images), one
  image camera left out (its data column) and the other renamed.
Then: every sample of each output loads in the reader; each output sample equals (exactly) the sample the same
reader hands back from the source episode and frame it came from, camera by camera under the mapped keys, and
state and action; `prep verify --decode` passes; and where the reader has its own dataset tools (0.4.4, 0.6.1:
`lerobot.datasets.dataset_tools`), its `merge_datasets` takes prep's camera-renamed outputs and its
`delete_episodes` a camera-dropped one, and what they write loads.

Runs inside the reader venvs (`.ci/compat.sh`: the ids hold v21, v30 or v06); skipped elsewhere.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compat_support import reader_of_venv, report
from parity_cases.image_cases import write_lerobot_images
from support.cli import run_prep

from pipeline.synth import SynthSpec, camera_frames, write_synthetic

pytestmark = pytest.mark.readers

HIGH, WRIST = "observation.images.cam_high", "observation.images.wrist"
BASE, LEFT = "observation.images.base", "observation.images.left_wrist"
BASE_0, LEFT_0 = "observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb"
IMG_TOP, IMG_WRIST, IMG_NEW = "observation.images.top", "observation.images.wrist", "observation.images.wrist_0_rgb"
VENVS = ("v21", "v30", "v06")
OUTPUTS = ("drop", "rename", "merge", "no-cameras", "images")
prep = functools.partial(run_prep, timeout=900, inprocess=False)
Mapping = list[tuple[str, int]]  # per output episode: (source name, source episode)


def ok(r: subprocess.CompletedProcess[str]) -> str:
    cmd = " ".join(map(str, r.args))
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def write_images_with_lerobot(root: Path) -> Path:
    """This venv's LeRobot writes 3 episodes x 10 frames whose two cameras are stored as images."""
    h, w, n = 48, 64, 10
    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_lerobot_images(tmp, (IMG_TOP, IMG_WRIST), height=h, width=w, episodes=3, frames=n,
                         pictures=lambda k, e: camera_frames(SynthSpec(frames=n, height=h, width=w, seed=5), k, e),
                         row=lambda e, i: {"observation.state": np.sin(i / 30 + np.arange(6) + e).astype(np.float32),
                                           "action": np.cos(i / 30 + np.arange(6) + e).astype(np.float32)})
    tmp.rename(root)
    return root


class Outputs:
    """The sources and prep's outputs of one venv, built lazily once per module."""

    def __init__(self, base: Path, version: str) -> None:
        self.base, self.version = base, version
        self.built: dict[str, tuple[Path, Mapping, dict[str, str]]] = {}

    def source(self, name: str) -> Path:
        root = self.base / "src" / name
        if (root / "meta/info.json").is_file():
            return root
        common: dict[str, Any] = {"version": self.version, "frames": 30, "height": 96, "width": 128, "gop": 10,
                                  "episodes_per_file": 2}
        if name == "A":
            return write_synthetic(root, SynthSpec(episodes=4, cameras=(HIGH, WRIST), seed=0, **common))
        if name == "B":
            return write_synthetic(root, SynthSpec(episodes=3, cameras=(BASE, LEFT), seed=1, **common))
        if name == "I":
            return write_images_with_lerobot(root)
        raise KeyError(name)

    def get(self, name: str) -> tuple[Path, Mapping, dict[str, str]]:
        """(output, where each of its episodes came from, output key -> source key of the compared features)."""
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str) -> tuple[Path, Mapping, dict[str, str]]:
        out = self.base / "out" / name
        a = self.source("A")
        same = {"action": "action"}
        if name == "drop":
            ok(prep("edit", a, "--out", out, "--drop", "1", "--drop-cameras", WRIST, "--rename",
                    "observation.state=observation.joints", "--no-progress"))
            return out, [("A", e) for e in (0, 2, 3)], {HIGH: HIGH, "observation.joints": "observation.state", **same}
        if name == "rename":
            ok(prep("edit", a, "--out", out, "--rename", f"{HIGH}={BASE_0}", f"{WRIST}={LEFT_0}", "--no-progress"))
            return out, [("A", e) for e in range(4)], {BASE_0: HIGH, LEFT_0: WRIST, **same}
        if name == "merge":
            b = self.source("B")
            ok(prep("edit", "--merge", a, b, "--out", out, "--no-progress", "--rename", f"{HIGH}={BASE_0}",
                    f"{BASE}={BASE_0}", f"{WRIST}={LEFT_0}", f"{LEFT}={LEFT_0}"))
            return out, [("A", e) for e in range(4)] + [("B", e) for e in range(3)], {BASE_0: "", LEFT_0: "", **same}
        if name == "no-cameras":
            ok(prep("edit", a, "--out", out, "--drop-cameras", HIGH, WRIST, "--no-progress"))
            return out, [("A", e) for e in range(4)], {"observation.state": "observation.state", **same}
        if name == "images":
            ok(prep("edit", self.source("I"), "--out", out, "--drop-cameras", IMG_TOP, "--rename",
                    f"{IMG_WRIST}={IMG_NEW}", "--no-progress"))
            return out, [("I", e) for e in range(3)], {IMG_NEW: IMG_WRIST, **same}
        raise KeyError(name)


def open_ds(root: Path) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = json.loads((root / "meta/info.json").read_text())
    return LeRobotDataset(f"prep-compat/{root.name}", root=root, revision=info["codebase_version"])


def starts(ds: Any) -> list[int]:
    out, at = [], 0
    for ep in range(ds.meta.total_episodes):
        out.append(at)
        at += int(ds.meta.episodes[ep]["length"])
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outputs]:
    return {}


def outputs_of(cache: dict[str, Outputs], venv: str, tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    if venv not in cache:
        cache[venv] = Outputs(tmp_path_factory.mktemp(f"cams-{venv}"), "v2.1" if venv == "v21" else "v3.0")
    return cache[venv]


@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("venv", VENVS)
def test_samples_are_the_source_samples(outputs: dict[str, Outputs], tmp_path_factory: pytest.TempPathFactory,
                                        venv: str, name: str) -> None:
    """Every sample of the output loads, and equals the source sample it came from under the mapped keys."""
    line = reader_of_venv(venv)
    built = outputs_of(outputs, venv, tmp_path_factory)
    root, mapping, keys = built.get(name)
    info = json.loads((root / "meta/info.json").read_text())
    cams = [k for k, ft in info["features"].items() if ft["dtype"] in ("video", "image")]
    ds = open_ds(root)
    assert len(ds) == info["total_frames"] and ds.meta.total_episodes == len(mapping)
    sources: dict[str, Any] = {}
    compared = 0
    for new, (src_name, old) in enumerate(mapping):
        if src_name not in sources:
            sources[src_name] = open_ds(built.source(src_name))
        sds = sources[src_name]
        src_info = json.loads((built.source(src_name) / "meta/info.json").read_text())
        src_cams = [k for k, ft in src_info["features"].items() if ft["dtype"] in ("video", "image")]
        length = int(ds.meta.episodes[new]["length"])
        assert length == int(sds.meta.episodes[old]["length"])
        s0, o0 = starts(sds)[old], starts(ds)[new]
        for f in range(length):
            a, b = ds[o0 + f], sds[s0 + f]
            assert int(a["frame_index"]) == int(b["frame_index"]) == f and int(a["episode_index"]) == new
            assert sorted(k for k in a if k in cams) == sorted(cams)
            assert not [k for k in a if k in src_cams and k not in cams]  # a camera left out is not read
            for out_key, src_key in keys.items():
                src_key = src_key or {BASE_0: HIGH if src_name == "A" else BASE,
                                      LEFT_0: WRIST if src_name == "A" else LEFT}[out_key]
                assert bool((a[out_key] == b[src_key]).all()), f"{name} episode {new} frame {f} {out_key}"
            compared += 1
    report(f"compat {venv} edit cameras lerobot {line} {name}: {compared} samples x {len(cams)} cameras identical "
           f"to the source samples (keys mapped)")


@pytest.mark.parametrize("name", OUTPUTS)
@pytest.mark.parametrize("venv", VENVS)
def test_prep_verify_decode_passes(outputs: dict[str, Outputs], tmp_path_factory: pytest.TempPathFactory,
                                   venv: str, name: str) -> None:
    reader_of_venv(venv)
    root, _mapping, _keys = outputs_of(outputs, venv, tmp_path_factory).get(name)
    assert "PASSED" in ok(prep("verify", root, "--decode", "--no-progress"))


@pytest.mark.parametrize("venv", ["v30", "v06"])
def test_lerobot_tools_take_the_outputs(outputs: dict[str, Outputs], tmp_path_factory: pytest.TempPathFactory,
                                        venv: str, tmp_path: Path) -> None:
    """LeRobot's own merge_datasets merges prep's `rename` and `merge` outputs (the same keys after prep's
    renames), and its delete_episodes edits prep's `drop`; what they write loads, every sample."""
    line = reader_of_venv(venv)
    from lerobot.datasets.dataset_tools import delete_episodes, merge_datasets

    built = outputs_of(outputs, venv, tmp_path_factory)
    renamed, merged = open_ds(built.get("rename")[0]), open_ds(built.get("merge")[0])
    both = merge_datasets([renamed, merged], output_repo_id="prep-compat/cams-merged", output_dir=tmp_path / "m")
    assert both.meta.total_episodes == renamed.meta.total_episodes + merged.meta.total_episodes
    assert sorted(both.meta.video_keys) == sorted([BASE_0, LEFT_0])
    n = sum(1 for i in range(len(both)) if both[i] is not None)
    dropped = open_ds(built.get("drop")[0])
    fewer = delete_episodes(dropped, episode_indices=[0], output_dir=tmp_path / "d", repo_id="prep-compat/cams-d")
    assert fewer.meta.total_episodes == dropped.meta.total_episodes - 1 and fewer.meta.video_keys == [HIGH]
    n += sum(1 for i in range(len(fewer)) if fewer[i] is not None)
    report(f"compat {venv} edit cameras lerobot {line}: its merge_datasets of prep's renamed outputs and its "
           f"delete_episodes of prep's camera drop load, {n} samples read")
