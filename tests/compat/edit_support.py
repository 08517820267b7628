"""The `prep edit` outputs that test_edit_v21.py and test_edit_v30.py hand to the real readers (issue 26).

Built lazily, once per module, by running prep as a command with this interpreter (the reader's venv):
- `drop`: `prep edit A --drop 1,4` of a synthetic corpus A (6 episodes x 2 cameras x 30 frames, 96x128 h264
  GOP 10; v3.0: 3 episodes per file, so the edit cuts inside files);
- `split-train`, `split-val`: `prep edit A --split train=0,2,3,5 val=1,4 --no-shuffle`;
- `merge`: `prep edit --merge DROP B` (the dropped output and a second corpus B of 3 episodes);
- `drop-224`: `prep edit A_224 --drop 1,4` of `prep reencode A --dst 224` (all-intra);
- `lerobot-drop` (v3.0): `prep edit L --drop 1,3` of a corpus L written by the reader's own LeRobot writer
  (h264, its default GOP 2: episode starts are keyframes, the cuts inside its file are exact);
- `loop-fixed`, `loop-fixed-224`: the repair loop of tests/test_edit_loop.py (verify -> edit --drop-failed ->
  reencode 224).
Each output comes with where its episodes came from: [(source root, source episode)] per output episode, or
None where the frames were re-encoded (the 224 outputs of the loop).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from compat_support import (
    backend_arg,
    backend_of,
    iterate_all,
    load_info,
    open_dataset,
    report,
    run_reencode,
    video_keys,
)
from support.cli import run_prep
from test_edit_loop import BROKEN, loop_spec, repair_loop

from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
DROP = (1, 4)
SPLIT = {"train": (0, 2, 3, 5), "val": (1, 4)}
LEROBOT_DROP = (1, 3)
PREP_TIMEOUT_S = 900
Mapping = list[tuple[Path, int]] | None


def spec(version: str, episodes: int, seed: int) -> SynthSpec:
    return SynthSpec(version=version, episodes=episodes, frames=30, height=96, width=128, gop=10, cameras=CAMS,
                     episodes_per_file=3, seed=seed)


# a command with this interpreter (the reader's venv), as a child process, as the readers' users run it
prep = functools.partial(run_prep, timeout=PREP_TIMEOUT_S, inprocess=False)


def must(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    what = " ".join(map(str, r.args[3:]))
    assert r.returncode == 0, f"prep {what}: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def episodes_of(root: Path) -> int:
    return int(json.loads((root / "meta/info.json").read_text())["total_episodes"])


def lerobot_written(root: Path, episodes: int = 5, frames: int = 24) -> Path:
    """A small corpus written by this venv's own LeRobot writer (0.4.x: `vcodec="h264"`; 0.6.x:
    `rgb_encoder=RGBEncoderConfig(vcodec="h264")`), its other encoder settings left at their defaults."""
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        from lerobot.configs.video import RGBEncoderConfig
        codec: dict[str, Any] = {"rgb_encoder": RGBEncoderConfig(vcodec="h264")}
    except ImportError:
        codec = {"vcodec": "h264"}
    features: dict[str, Any] = {cam: {"dtype": "video", "shape": (96, 128, 3), "names": ["height", "width", "channels"]}
                                for cam in CAMS}
    features["observation.state"] = {"dtype": "float32", "shape": (4,), "names": [f"j{i}" for i in range(4)]}
    features["action"] = {"dtype": "float32", "shape": (4,), "names": [f"j{i}" for i in range(4)]}
    ds = LeRobotDataset.create(repo_id="prep-compat/lerobot-written", fps=30, root=root, features=features,
                               robot_type="compat", use_videos=True, **codec)
    rng = np.random.default_rng(7)
    for ep in range(episodes):
        bases = [np.kron(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8), np.ones((16, 16, 1), np.uint8))
                 for _ in CAMS]
        state = rng.standard_normal(4).astype(np.float32)
        for f in range(frames):
            frame: dict[str, Any] = {"task": f"task {ep % 2}", "observation.state": state + np.float32(0.01 * f),
                                     "action": state + np.float32(0.01 * (f + 1))}
            for c, cam in enumerate(CAMS):
                frame[cam] = np.roll(bases[c], shift=(2 * f, 3 * f), axis=(0, 1))
            ds.add_frame(frame)
        ds.save_episode()
    if hasattr(ds, "finalize"):
        ds.finalize()
    return root


class EditOutputs:
    def __init__(self, base: Path, version: str) -> None:
        self.base, self.version = base, version
        self.built: dict[str, tuple[Path, Mapping]] = {}

    def source(self, name: str) -> Path:
        root = self.base / "src" / name
        if not (root / "meta/info.json").is_file():
            if name == "A":
                write_synthetic(root, spec(self.version, 6, 0))
            elif name == "B":
                write_synthetic(root, spec(self.version, 3, 1))
            elif name == "A_224":
                run_reencode(self.source("A"), root)
            elif name == "L":  # written beside, then renamed: a failed build leaves no half corpus
                tmp = root.with_name(root.name + ".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                lerobot_written(tmp).rename(root)
            else:
                raise KeyError(name)
        return root

    def get(self, name: str) -> tuple[Path, Mapping]:
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _drop(self, src: Path, out: Path, drop: tuple[int, ...]) -> tuple[Path, Mapping]:
        must(prep("edit", src, "--out", out, "--drop", ",".join(map(str, drop)), "--no-progress"))
        return out, [(src, e) for e in range(episodes_of(src)) if e not in drop]

    def _build(self, name: str) -> tuple[Path, Mapping]:
        out = self.base / "out" / name
        if name == "drop":
            return self._drop(self.source("A"), out, DROP)
        if name == "drop-224":
            return self._drop(self.source("A_224"), out, DROP)
        if name == "lerobot-drop":
            return self._drop(self.source("L"), out, LEROBOT_DROP)
        if name.startswith("split-"):
            split = self.base / "out" / "split"
            if not (split / name.removeprefix("split-") / "meta/info.json").is_file():
                must(prep("edit", self.source("A"), "--out", split, "--no-shuffle", "--no-progress", "--split",
                          *(f"{part}={','.join(map(str, eps))}" for part, eps in SPLIT.items())))
            part = name.removeprefix("split-")
            return split / part, [(self.source("A"), e) for e in SPLIT[part]]
        if name == "merge":
            dropped, first = self.get("drop")
            b = self.source("B")
            must(prep("edit", "--merge", dropped, b, "--out", out, "--no-progress"))
            assert first is not None
            return out, [*first, *((b, e) for e in range(episodes_of(b)))]
        if name.startswith("loop-"):
            if "loop" not in self.built:
                loop = repair_loop(self.base / "loop", self.version, inprocess=False)
                kept = [e for e in range(episodes_of(loop.broken)) if e not in BROKEN]
                # v2.1: the broken corpus does not open in lerobot 0.3.x (it checks every timestamp at load);
                # its kept episodes' files are untouched, so they are the clean corpus's
                ref = loop.broken if self.version == "v3.0" else write_synthetic(self.base / "loop-clean",
                                                                                  loop_spec(self.version))
                self.built["loop-fixed"] = (loop.fixed, [(ref, e) for e in kept])
                self.built["loop-fixed-224"] = (loop.fixed_224, None)
                self.built["loop"] = (loop.fixed, None)
            return self.built[name]
        raise KeyError(name)


def global_starts(ds: Any) -> list[int]:
    """The first sample index of each episode of an open LeRobotDataset."""
    starts, at = [], 0
    for ep in range(ds.meta.total_episodes):
        starts.append(at)
        at += int(ds.meta.episodes[ep]["length"])
    return starts


# ---- the checks both reader generations run (test_edit_v21.py: lerobot 0.3.x; test_edit_v30.py: 0.4.x, 0.6.x) ----

BACKENDS = ("default", "pyav")


def check_every_sample_loads(outputs: EditOutputs, name: str, backend: str, reader: str, lerobot: str) -> None:
    """Every sample of output `name` loads with the reader's `backend`; `reader` labels the report line."""
    root, _ = outputs.get(name)
    assert load_info(root)["codebase_version"] == outputs.version
    ds = open_dataset(root, backend_arg(backend))
    n = iterate_all(ds, root)
    report(f"compat {reader} edit lerobot {lerobot} {name} backend={backend_of(ds)}: {n} samples x "
           f"{len(video_keys(load_info(root)))} cameras read")


def check_frames_are_the_source_episodes(outputs: EditOutputs, name: str, backend: str, reader: str,
                                         lerobot: str) -> None:
    """Every frame of every camera of every output episode equals, exactly, the frame the same reader returns
    for the same frame of the source episode it came from (a stream copy decodes to the same pixels; an
    episode shifted by one frame or taken from the wrong place does not)."""
    root, mapping = outputs.get(name)
    assert mapping is not None
    ds = open_dataset(root, backend_arg(backend), horizon=None)
    cams = video_keys(load_info(root))
    assert ds.meta.total_episodes == len(mapping)
    sources: dict[Path, Any] = {}
    starts = global_starts(ds)
    compared = 0
    for new, (src, old) in enumerate(mapping):
        if src not in sources:
            sources[src] = open_dataset(src, backend_arg(backend), horizon=None)
        sds = sources[src]
        length = int(ds.meta.episodes[new]["length"])
        assert length == int(sds.meta.episodes[old]["length"]), f"episode {new} (source {old}): length differs"
        s0 = global_starts(sds)[old]
        for f in range(length):
            a, b = ds[starts[new] + f], sds[s0 + f]
            assert int(a["frame_index"]) == int(b["frame_index"]) == f
            for cam in cams:
                assert bool((a[cam] == b[cam]).all()), f"{name} episode {new} (source {old}) frame {f} {cam} differs"
            compared += 1
    report(f"compat {reader} edit lerobot {lerobot} {name} backend={backend_of(ds)}: {compared} samples x "
           f"{len(cams)} cameras identical to the source episodes' frames")


def check_prep_verify_decode_passes(outputs: EditOutputs, name: str) -> None:
    root, _ = outputs.get(name)
    r = must(prep("verify", root, "--decode", "--no-progress"))
    assert "PASSED" in r.stdout, r.stdout
