"""Parity cases built on `pipeline.synth` (a clean tiny dataset) plus one fault each.

Every case's `expect` is what LeRobot's installed source says the reader does (lerobot 0.3.3 reads
v2.1, lerobot 0.4.4 reads v3.0); the harness records what the reader really does next to it.
Paths in `where` are relative to site-packages/lerobot/datasets/.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.synth import SynthSpec, camera_frames, write_synthetic

from . import mp4
from .meta import (
    data_files,
    edit_info,
    episodes_files,
    layout,
    read_json,
    read_jsonl,
    rewrite_parquet,
    set_column,
    truth_from_clean,
    write_json,
    write_jsonl,
)
from .model import LOADS, RAISES, REFUSES, SILENTLY_WRONG, Built, Expect, Truth, case

CAM = "observation.images.top"
CAM2 = "observation.images.wrist"
DEPTH = "observation.images.depth"
FPS = 30
BOTH = ("v2.1", "v3.0")
V30 = ("v3.0",)

# Where the readers decide (lerobot 0.3.3 for v2.1, 0.4.4 for v3.0).
V21_HUB = ("lerobot_dataset.py:LeRobotDatasetMetadata.__init__ (L93-101): a FileNotFoundError from load_metadata "
           "falls back to get_safe_version -> utils.get_repo_versions (L305), a Hub call: offline it raises")
V30_HUB = ("lerobot_dataset.py:LeRobotDatasetMetadata.__init__ (L105-113): a FileNotFoundError from load_metadata "
           "falls back to get_safe_version -> utils.get_repo_versions (L487), a Hub call: offline it raises")
V21_TOL = ("video_utils.py:decode_video_frames_torchcodec (L221) / decode_video_frames_torchvision (L145): "
           "`min_ < tolerance_s` (1e-4 s, strict) between the query and the nearest decoded pts")
V30_TOL = ("video_utils.py:decode_video_frames_torchcodec (L360) / decode_video_frames_torchvision (L229): "
           "`min_ < tolerance_s` (1e-4 s, strict), FrameTimestampError")
V30_QUERY = "lerobot_dataset.py:LeRobotDataset._query_videos (L1061): query = from_timestamp + parquet timestamp"
V21_QUERY = "lerobot_dataset.py:LeRobotDataset._query_videos (L683): query = parquet timestamp (file per episode)"
NO_PIXEL_CHECK = ("nothing in lerobot_dataset.py:__getitem__ or video_utils.py compares a decoded frame's size "
                  "or content with info.json")


def spec(fmt: str, **kw: Any) -> SynthSpec:
    base: dict[str, Any] = dict(version=fmt, episodes=2, frames=20, height=72, width=96, cameras=(CAM,), gop=10,
                                state_dim=6, seed=7)
    base.update(kw)
    return SynthSpec(**base)


def synth(case_dir: Path, fmt: str, **kw: Any) -> Built:
    root = write_synthetic(case_dir / "ds", spec(fmt, **kw))
    return Built(root, truth_from_clean(root, case_dir / "ref"))


def both(outcome: str, where21: str, where30: str, why: str) -> dict[str, Expect]:
    return {"v2.1": Expect(outcome, where21, why), "v3.0": Expect(outcome, where30, why)}


# ---------------------------------------------------------------- controls


@case("clean-synth", BOTH, "pipeline.synth: 2 episodes x 20 frames, 96x72 h264 GOP 10, 1 camera", None,
      both(LOADS, V21_QUERY, V30_QUERY, "every row's timestamp is on the grid and every frame is where it is queried"))
def clean_synth(d: Path, fmt: str) -> Built:
    return synth(d, fmt)


@case("clean-synth-2cam", BOTH, "pipeline.synth: 2 episodes x 20 frames, 96x72 h264, 2 cameras", None,
      both(LOADS, V21_QUERY, V30_QUERY, "as clean-synth, two cameras"))
def clean_synth_2cam(d: Path, fmt: str) -> Built:
    return synth(d, fmt, cameras=(CAM, CAM2))


# ---------------------------------------------------------------- metadata faults


@case("to-timestamp-short", V30, "custom v3.0 writer: to_timestamp = from_timestamp + (length-1)/fps", "clean-synth",
      {"v3.0": Expect(LOADS, V30_QUERY + "; to_timestamp is never read when loading",
                      "frames are looked up at from_timestamp + timestamp")})
def to_timestamp_short(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    for p in episodes_files(b.root):
        def short(t: pa.Table) -> pa.Table:
            lengths = t["length"].to_numpy()
            for name in t.column_names:
                if name.endswith("/to_timestamp"):
                    start = t[name.replace("/to_timestamp", "/from_timestamp")].to_numpy()
                    t = set_column(t, name, start + (lengths - 1) / FPS)
            return t
        rewrite_parquet(p, short)
    return b


@case("missing-episode-stats", BOTH,
      "per-episode stats missing (v2.1: no meta/episodes_stats.jsonl; v3.0: no stats/* columns in meta/episodes)",
      "clean-synth",
      {"v2.1": Expect(REFUSES, "utils.py:load_episodes_stats (L231) opens meta/episodes_stats.jsonl from "
                      "LeRobotDatasetMetadata.load_metadata (L103); then " + V21_HUB, "file opened unconditionally"),
       "v3.0": Expect(LOADS, "utils.py:load_episodes (L377-383) drops the stats/ columns when loading",
                      "per-episode stats are not read by the reader")},
      # --repair stats is v2.1's (a v3.0 source is refused with it: nothing to make right there)
      reencode_variants={"v2.1": ((), ("--repair", "stats")), "v3.0": ((),)})
def missing_episode_stats(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    if fmt == "v2.1":
        (b.root / "meta/episodes_stats.jsonl").unlink()
    else:
        for p in episodes_files(b.root):
            rewrite_parquet(p, lambda t: t.select([c for c in t.column_names if not c.startswith("stats/")]))
    return b


@case("missing-tasks", BOTH, "no meta/tasks.jsonl (v2.1) / meta/tasks.parquet (v3.0)", "clean-synth",
      {"v2.1": Expect(REFUSES, "utils.py:load_tasks (L208) from load_metadata; then " + V21_HUB,
                      "file opened unconditionally"),
       "v3.0": Expect(REFUSES, "utils.py:load_tasks (L342) pd.read_parquet from load_metadata (L163); then "
                      + V30_HUB, "file opened unconditionally")})
def missing_tasks(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    (b.root / ("meta/tasks.jsonl" if fmt == "v2.1" else "meta/tasks.parquet")).unlink()
    return b


@case("missing-stats-json", V30, "no meta/stats.json (v3.0)", "clean-synth",
      {"v3.0": Expect(LOADS, "utils.py:load_stats (L319-333) returns None when meta/stats.json is missing",
                      "stats are optional for the reader (a policy's normalisation needs them later)")})
def missing_stats_json(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    (b.root / "meta/stats.json").unlink()
    return b


def _wall_clock(n: int, seed: int) -> np.ndarray:
    """Timestamps of a wall-clock recorder: a drift reaching 0.25 s at the end plus +-5 ms jitter."""
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(-0.005, 0.005, size=n)
    jitter[0] = 0.0
    return np.arange(n) / FPS + 0.25 * np.arange(n) / (n - 1) + jitter


@case("wallclock-timestamps", BOTH,
      "parquet timestamps off the 1/fps grid by up to 0.25 s (wall clock); video on the grid", "clean-synth",
      {"v2.1": Expect(REFUSES, "utils.py:check_timestamps_sync (L511) called from LeRobotDataset.__init__ (L492)",
                      "steps differ from 1/fps by more than tolerance_s"),
       "v3.0": Expect(RAISES, V30_QUERY + "; " + V30_TOL, "no check at open; the first off-grid row raises")},
      reencode_variants=((), ("--repair", "timestamps", "--crf", "0")))
def wallclock(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    for p in data_files(b.root):
        def restamp(t: pa.Table) -> pa.Table:
            fi = t["frame_index"].to_numpy()
            ep = t["episode_index"].to_numpy()
            ts = np.empty(len(fi))
            for e in np.unique(ep):
                rows = np.flatnonzero(ep == e)
                ts[rows] = _wall_clock(len(rows), int(e))[fi[rows]]
            return set_column(t, "timestamp", ts.astype(np.float32))
        rewrite_parquet(p, restamp)
    return b


@case("episode-index-gap", BOTH, "episodes numbered 0 and 2 (episode 1 renumbered 2 everywhere)", "clean-synth",
      {"v2.1": Expect(REFUSES, "lerobot_dataset.py:LeRobotDataset.__init__ (L479): get_episodes_file_paths uses "
                      "range(total_episodes), episode_000001 is missing; then get_safe_version (L482) offline",
                      "episode indices must be 0..n-1"),
       "v3.0": Expect(REFUSES, "lerobot_dataset.py:_check_cached_episodes_sufficient (L900-918): range(total_episodes) "
                      "is not a subset of the parquet's episode_index; then get_safe_version (L752) offline",
                      "episode indices must be 0..n-1")})
def episode_gap(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    root = b.root
    info = read_json(root / "meta/info.json")
    renum = {1: 2}
    if fmt == "v2.1":
        for kind, template in (("data", info["data_path"]), ("video", info["video_path"])):
            for cam in ([CAM] if kind == "video" else [None]):
                old = root / template.format(episode_chunk=0, episode_index=1, video_key=cam)
                new = root / template.format(episode_chunk=0, episode_index=2, video_key=cam)
                old.rename(new)
        p = root / info["data_path"].format(episode_chunk=0, episode_index=2)
        rewrite_parquet(p, lambda t: set_column(t, "episode_index", np.full(t.num_rows, 2, dtype=np.int64)))
        for name in ("episodes.jsonl", "episodes_stats.jsonl"):
            rows = read_jsonl(root / "meta" / name)
            for r in rows:
                r["episode_index"] = renum.get(r["episode_index"], r["episode_index"])
            write_jsonl(root / "meta" / name, rows)
    else:
        for p in data_files(root):
            rewrite_parquet(p, lambda t: set_column(t, "episode_index",
                                                    pc.if_else(pc.equal(t["episode_index"], 1), 2, t["episode_index"])))
        for p in episodes_files(root):
            rewrite_parquet(p, lambda t: set_column(t, "episode_index",
                                                    pc.if_else(pc.equal(t["episode_index"], 1), 2, t["episode_index"])))
    b.truth = {(c, renum.get(e, e)): t for (c, e), t in b.truth.items()}
    return b


@case("missing-timestamp-column", BOTH, "data parquet without the `timestamp` column (info.json still declares it)",
      "clean-synth",
      {"v2.1": Expect(REFUSES, "lerobot_dataset.py:LeRobotDataset.__init__ (L489) reads hf_dataset['timestamp']",
                      "the column is required"),
       "v3.0": Expect(RAISES, "lerobot_dataset.py:LeRobotDataset.__getitem__ (L1099) item['timestamp'].item(): "
                      "utils.py:load_nested_dataset (L127) fills the declared but absent column with None",
                      "no check at open; the first sample raises")},
      reencode_variants=((), ("--repair", "timestamps")))
def missing_timestamp(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    for p in data_files(b.root):
        rewrite_parquet(p, lambda t: t.drop_columns(["timestamp"]))
    return b


@case("wrong-total-frames", BOTH, "info.json total_frames 7 more than the rows", "clean-synth",
      {"v2.1": Expect(LOADS, "lerobot_dataset.py:LeRobotDataset.num_frames (L625) = len(hf_dataset); total_frames "
                      "is not used when reading", "len(dataset) comes from the parquet"),
       "v3.0": Expect(RAISES, "lerobot_dataset.py:LeRobotDataset.num_frames (L944-953) = meta.total_frames; "
                      "__getitem__ (L1085) hf_dataset[idx] past the last row raises IndexError",
                      "len(dataset) comes from info.json")})
def wrong_total_frames(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    edit_info(b.root, lambda i: i.update(total_frames=i["total_frames"] + 7))
    return b


@case("wrong-total-episodes", BOTH, "info.json total_episodes one more than the episodes", "clean-synth",
      {"v2.1": Expect(REFUSES, "lerobot_dataset.py:LeRobotDataset.__init__ (L479): files of episode 2 missing; then "
                      "get_safe_version (L482) offline", "every episode < total_episodes must have its files"),
       "v3.0": Expect(REFUSES, "lerobot_dataset.py:_check_cached_episodes_sufficient (L918); then get_safe_version "
                      "(L752) offline", "every episode < total_episodes must be in the parquet")})
def wrong_total_episodes(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    edit_info(b.root, lambda i: i.update(total_episodes=i["total_episodes"] + 1))
    return b


@case("info-unread-fields", BOTH, "info.json robot_type 5, splits [\"train\"], total_videos \"two\", total_chunks -1 "
      "(keys of the wrong type that no reader reads when loading)", "clean-synth",
      both(LOADS, "lerobot_dataset.py:LeRobotDatasetMetadata (robot_type, total_chunks: properties for the writer and "
           "the hub card)", "utils.py:DatasetInfo (0.6: typed, unchecked; unknown keys ignored) / "
           "lerobot_dataset.py:LeRobotDatasetMetadata (0.4)", "nothing on the read path uses these keys"))
def info_unread(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    edit_info(b.root, lambda i: i.update(robot_type=5, splits=["train"], total_videos="two", total_chunks=-1))
    return b


@case("frames-outside-episodes", V30, "v3.0 video with 5 frames between episode 0's and episode 1's spans",
      "clean-synth",
      {"v3.0": Expect(LOADS, V30_QUERY, "frames no row queries are never decoded for a sample")})
def frames_outside(d: Path, fmt: str) -> Built:
    sp = spec(fmt)
    root = write_synthetic(d / "ds", sp)
    (cam, _e, rel, _s, _n), *_ = layout(root)
    frames = np.concatenate([camera_frames(sp, 0, 0), camera_frames(sp, 0, 9)[:5], camera_frames(sp, 0, 1)])
    mp4.encode_rgb(root / rel, list(frames), fps=FPS, gop=sp.gop)
    for p in episodes_files(root):
        def shift(t: pa.Table) -> pa.Table:
            for name in (f"videos/{cam}/from_timestamp", f"videos/{cam}/to_timestamp"):
                v = t[name].to_numpy().copy()
                v[t["episode_index"].to_numpy() == 1] += 5 / FPS
                t = set_column(t, name, v)
            return t
        rewrite_parquet(p, shift)
    ref = mp4.copy_file(root / rel, d / "ref" / rel)
    truth = {(cam, 0): Truth(str(ref), tuple(round(i / FPS, 6) for i in range(20))),
             (cam, 1): Truth(str(ref), tuple(round((25 + i) / FPS, 6) for i in range(20)))}
    return Built(root, truth)


@case("float-drift-from-timestamp", V30,
      "v3.0, 3 episodes in one file, from_timestamp summed from durations one 1/15360 tick long (lerobot #3177)",
      "clean-synth",
      {"v3.0": Expect(RAISES, V30_QUERY + "; " + V30_TOL,
                      "episode 1 is 6.5e-5 s off (inside the tolerance), episode 2 1.3e-4 s: its first sample raises")})
def float_drift(d: Path, fmt: str) -> Built:
    b = synth(d, fmt, episodes=3)
    tick = 1 / 15360
    for p in episodes_files(b.root):
        def drift(t: pa.Table) -> pa.Table:
            e = t["episode_index"].to_numpy().astype(np.float64)
            n = t["length"].to_numpy()
            for name in t.column_names:
                if name.endswith("/from_timestamp"):
                    start = e * (n / FPS + tick)
                    t = set_column(t, name, start)
                    t = set_column(t, name.replace("/from_timestamp", "/to_timestamp"), start + n / FPS + tick)
            return t
        rewrite_parquet(p, drift)
    return b


# ---------------------------------------------------------------- video faults


@case("preroll-cut", BOTH, "stream-copy cut with 5 hidden pre-roll frames (edit list): each file presents exactly "
      "the metadata's frames", "clean-synth",
      both(LOADS, "video_utils.py:decode_video_frames_torchcodec (L171): torchcodec presents the frames after the "
           "edit list, pts from 0", "video_utils.py:decode_video_frames_torchcodec (L306) / torchvision (L157)",
           "decoders honour the edit list: the presented frames are on the grid from 0"))
def preroll(d: Path, fmt: str) -> Built:
    sp = spec(fmt)
    root = write_synthetic(d / "ds", sp)
    for k, (rel, eps) in enumerate(_files(root).items()):
        frames = [f for e in eps for f in camera_frames(sp, 0, e)]
        pre = list(camera_frames(sp, 0, 50 + k)[:5])
        full = d / "uncut" / rel
        mp4.encode_rgb(full, pre + frames, fps=FPS, gop=sp.gop)
        mp4.cut_with_preroll(full, root / rel, 5, FPS)
    return Built(root, truth_from_clean(root, d / "ref"))


def _files(root: Path) -> dict[str, list[int]]:
    """Each video file of a one-camera dataset and the episodes it holds, in order."""
    out: dict[str, list[tuple[float, int]]] = {}
    for _c, e, rel, start, _n in layout(root):
        out.setdefault(rel, []).append((start, e))
    return {rel: [e for _s, e in sorted(v)] for rel, v in out.items()}


@case("flipped-bytes", BOTH, "2,000 bytes XOR-flipped in the middle of an h264 file (320x240): the decoder "
      "conceals the damage", "clean-synth",
      {**both(SILENTLY_WRONG, NO_PIXEL_CHECK + " (0.3.3)", NO_PIXEL_CHECK + " (0.4.4)",
              "concealed corruption decodes without an error; the frames are not the recorded ones"),
       "0.3": Expect(SILENTLY_WRONG, NO_PIXEL_CHECK + " (0.3.3)",
                     "concealed corruption decodes without an error; the frames are not the recorded ones",
                     cannot_agree="in the v2.1 layout the flipped bytes fall inside one frame's slice data (episode "
                     "0, frame 9) and FFmpeg decodes it with no error and no concealment report, so only the "
                     "recorded pixels could show it is wrong; prep has no copy of them (in the v3.0 layout, one longer "
                     "file, the same flip lands where FFmpeg reports the damage and verify --decode flags it)")})
def flipped(d: Path, fmt: str) -> Built:
    b = synth(d, fmt, height=240, width=320)
    rel = sorted({rel for _c, _e, rel, _s, _n in layout(b.root)})[0]
    lo, hi = mp4.flip_bytes(b.root / rel)
    b.notes.append(f"{rel}: bytes {lo}..{hi - 1} flipped")
    return b


@case("concealed-bytes", BOTH, "2,000 bytes XOR-ed with random values in the middle of an h264 file (320x240): "
      "the macroblocks no longer parse; the decoder conceals them and flags the frame", "clean-synth",
      both(SILENTLY_WRONG, NO_PIXEL_CHECK + " (0.3.3)", NO_PIXEL_CHECK + " (0.4.4)",
           "concealed corruption decodes without an exception; the frames are not the recorded ones"))
def concealed(d: Path, fmt: str) -> Built:
    b = synth(d, fmt, height=240, width=320)
    rel = sorted({rel for _c, _e, rel, _s, _n in layout(b.root)})[0]
    lo, hi = mp4.scramble_bytes(b.root / rel)
    b.notes.append(f"{rel}: bytes {lo}..{hi - 1} scrambled")
    return b


def _warp(n: int, amplitude: float) -> np.ndarray:
    """Capture times of a variable-rate camera over an episode of n frames: the mean interval is exactly
    1/fps (first and last frame on the grid) but frames run up to `amplitude` s late in the middle."""
    t = np.arange(n) / FPS
    span = (n - 1) / FPS
    return t + amplitude * np.sin(np.pi * t / span)


@case("vfr-mean-30", BOTH, "variable frame rate, mean exactly 30 fps: frames up to 233 ms (7 frames) late mid-"
      "episode (31 frames, time base 1/90000)", "clean-synth",
      both(RAISES, V21_TOL, V30_TOL, "the nearest frame to a row's time is further than 1e-4 s"),
      reencode_variants=((), ("--repair", "timestamps")))
def vfr(d: Path, fmt: str) -> Built:
    sp = spec(fmt, frames=31)
    root = write_synthetic(d / "ds", sp)
    tb = Fraction(1, 90000)
    by_file: dict[str, list[tuple[int, float]]] = {}
    for _cam, e, rel, start, _n in layout(root):
        by_file.setdefault(rel, []).append((e, start))
    truth = {}
    for rel, eps in by_file.items():
        frames, stamps = [], []
        for e, start in sorted(eps, key=lambda x: x[1]):
            times = start + _warp(sp.frames, 0.2333)
            frames += list(camera_frames(sp, 0, e))
            stamps += [round(float(t) / tb) for t in times]
            grid = start + np.arange(sp.frames) / FPS
            picks = [float(times[int(np.argmin(np.abs(times - g)))]) for g in grid]
            truth[(CAM, e)] = picks
        mp4.encode_rgb(root / rel, frames, fps=FPS, pts=stamps, time_base=tb, gop=sp.gop)
    refs = {rel: mp4.copy_file(root / rel, d / "ref" / rel) for rel in by_file}
    rel_of = {e: rel for rel, eps in by_file.items() for e, _s in eps}
    return Built(root, {(c, e): Truth(str(refs[rel_of[e]]), tuple(round(p, 6) for p in picks))
                        for (c, e), picks in truth.items()})


@case("ms-timebase", BOTH, "constant 30 fps but a 1/1000 s time base (pts rounded to whole ms)", "clean-synth",
      both(RAISES, V21_TOL, V30_TOL, "frame 1 sits at 0.033 s, 3.3e-4 s from the row's 1/30 s"),
      reencode_variants=((), ("--repair", "timestamps")))
def ms_timebase(d: Path, fmt: str) -> Built:
    sp = spec(fmt)
    root = write_synthetic(d / "ds", sp)
    truth = {}
    for rel, eps in _files(root).items():
        frames = [f for e in eps for f in camera_frames(sp, 0, e)]
        mp4.encode_rgb(root / rel, frames, fps=FPS, pts=[round(1000 * i / FPS) for i in range(len(frames))],
                       time_base=Fraction(1, 1000), gop=sp.gop)
        ref = mp4.copy_file(root / rel, d / "ref" / rel)
        for k, e in enumerate(eps):  # row i of the k-th episode of the file: the file's frame k*n + i
            truth[(CAM, e)] = Truth(str(ref), tuple(round(1000 * (k * sp.frames + i) / FPS) / 1000
                                                    for i in range(sp.frames)))
    return Built(root, truth)


def _depth_frames(n: int, episode: int, h: int, w: int) -> list[np.ndarray]:
    """12-bit depth (mm-like, 0..4095) in 16-bit words (<< 4): a sloped floor, a moving box, sensor noise."""
    rng = np.random.default_rng(1000 + episode)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for i in range(n):
        d = 600 + 3000 * (y / h) + 400 * (x / w) + rng.normal(0, 6, size=(h, w))
        bx = int((w - 24) * (0.5 + 0.45 * math.sin(i / 5 + episode)))
        d[20:44, bx:bx + 24] = 350 + 20 * i
        out.append(np.clip(np.rint(d), 0, 4095).astype(np.uint16) << 4)
    return out


def _rgb_stats(frames: list[np.ndarray]) -> dict[str, Any]:
    x = np.asarray(frames, dtype=np.float64).reshape(-1, 3) / 255.0

    def c11(v: np.ndarray) -> list[Any]:
        return [[[float(c)]] for c in v]

    return {"min": c11(x.min(0)), "max": c11(x.max(0)), "mean": c11(x.mean(0)), "std": c11(x.std(0)),
            "count": [len(frames)]}


@case("depth-12bit", BOTH, "an RGB camera plus a depth camera (is_depth_map: true, 12-bit in gray16be, "
      "lossless PNG-in-MP4)", "clean-synth",
      {**both(LOADS, "video_utils.py:decode_video_frames_torchcodec (L171) / torchvision (L73): frames come back "
              "as 8-bit RGB; is_depth_map is never read", "video_utils.py:decode_video_frames_torchcodec (L306) / "
              "torchvision (L157); is_depth_map is never read",
              "both backends decode gray16 to 8-bit RGB; loading works"),
       "0.6": Expect(REFUSES, "dataset_metadata.py (depth keys: is_depth_map in either spelling) -> "
                     "configs/video.py:resolve_vcodec", "0.6.1 builds a depth encoder config for every depth key at "
                     "open: 'Invalid vcodec png'")})
def depth(d: Path, fmt: str) -> Built:
    import pyarrow.parquet as pq

    sp = spec(fmt)
    root = write_synthetic(d / "ds", sp)
    info = read_json(root / "meta/info.json")
    ft = {**info["features"][CAM]}
    ft["shape"] = [sp.height, sp.width, 1]
    ft["info"] = {**ft["info"], "video.codec": "png", "video.pix_fmt": "gray16be", "video.is_depth_map": True,
                  "video.channels": 1}
    info["features"][DEPTH] = ft
    if fmt == "v2.1":
        info["total_videos"] = info["total_videos"] * 2
    write_json(root / "meta/info.json", info)
    if fmt == "v3.0":
        for p in episodes_files(root):
            t = pq.read_table(p)
            for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
                t = t.append_column(f"videos/{DEPTH}/{name}", t[f"videos/{CAM}/{name}"])
            pq.write_table(t, p)
    per_file: dict[str, list[int]] = {}
    for c, e, rel, _s, _n in layout(root):
        if c == DEPTH:
            per_file.setdefault(rel, []).append(e)
    stats = {}
    for rel, eps in per_file.items():
        frames = [f for e in sorted(eps) for f in _depth_frames(sp.frames, e, sp.height, sp.width)]
        mp4.encode_depth(root / rel, frames, FPS)
        _t, rgb = mp4.decode_all(root / rel)
        for k, e in enumerate(sorted(eps)):
            stats[e] = _rgb_stats(rgb[k * sp.frames:(k + 1) * sp.frames])
    if fmt == "v2.1":
        rows = read_jsonl(root / "meta/episodes_stats.jsonl")
        for r in rows:
            r["stats"][DEPTH] = stats[r["episode_index"]]
        write_jsonl(root / "meta/episodes_stats.jsonl", rows)
    else:
        for p in episodes_files(root):
            t = pq.read_table(p)
            e = t["episode_index"].to_numpy()
            for stat in ("min", "max", "mean", "std", "count"):
                typ = t[f"stats/{CAM}/{stat}"].type  # the RGB camera's: (3,1,1) as LeRobot writes, or flat
                nested = pa.types.is_list(typ) and pa.types.is_list(typ.value_type)
                vals = [stats[int(i)][stat] if nested else np.asarray(stats[int(i)][stat]).ravel().tolist() for i in e]
                t = t.append_column(f"stats/{DEPTH}/{stat}", pa.array(vals, type=typ))
            pq.write_table(t, p)
        glob = read_json(root / "meta/stats.json")
        glob[DEPTH] = stats[0]
        write_json(root / "meta/stats.json", glob)
    return Built(root, truth_from_clean(root, d / "ref"), depth_cameras=(DEPTH,))


@case("resolution-change", BOTH, "h264 whose picture size changes from 96x72 to 64x48 at frame 10 of the first "
      "file (new SPS in band; the header says 96x72)", "clean-synth",
      both(RAISES, "video_utils.py:decode_video_frames_torchcodec (L206): torchcodec's pre-allocated output "
           "tensor has the header's size; the pyav backend returns the smaller frames (" + NO_PIXEL_CHECK + ")",
           "video_utils.py:decode_video_frames_torchcodec (L345), as in 0.3.3; pyav: silently smaller frames",
           "torchcodec raises at the first changed frame; pyav hands training 64x48 frames"))
def resolution_change(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    sp = spec(fmt)
    rel = sorted({rel for _c, _e, rel, _s, _n in layout(b.root)})[0]
    small = spec(fmt, height=48, width=64)
    eps = 1 if fmt == "v2.1" else sp.episodes
    first = np.concatenate([camera_frames(sp, 0, e) for e in range(eps)])
    second = np.concatenate([camera_frames(small, 0, e) for e in range(eps)])
    mp4.resolution_change(b.root / rel, [list(first[:10]), list(second[10:])], FPS)
    # Reference: the clean encode of the same rows (another encode than the file: compare as pictures).
    changed = str(d / "ref" / rel)
    b.truth = {k: Truth(t.ref, t.picks, exact=t.ref != changed) for k, t in b.truth.items()}
    return b


@case("rotated", BOTH, "display matrix rotating 90 degrees on every video (coded frames unchanged)", "clean-synth",
      {**both(LOADS, "video_utils.py: neither torchcodec 0.4 nor torchvision's pyav reader applies the display matrix",
              "video_utils.py: neither torchcodec 0.10 nor torchvision's pyav reader applies the display matrix",
              "both backends present the coded orientation, the shape info.json declares"),
       "0.6": Expect(LOADS, "video_utils.py:decode_video_frames_torchcodec: torchcodec 0.11's VideoDecoder applies "
                     "the display matrix; the pyav backend (pyav_utils.py) does not",
                     "torchcodec hands the frame turned 90 degrees (display orientation), pyav the coded frame: "
                     "each backend loads, in its own orientation (verify warns)")},
      reencode_variants=((), ("--engine", "ffmpeg")))
def rotated(d: Path, fmt: str) -> Built:
    b = synth(d, fmt)
    for rel in sorted({rel for _c, _e, rel, _s, _n in layout(b.root)}):
        mp4.set_rotation(b.root / rel, 90)
    # prep's outputs hold display-oriented pixels (no matrix): every reader hands them back turned
    b.display_rotation = 90
    return b


@case("mpeg4-as-h264", BOTH, "mpeg4 (part 2) video declared as h264 in info.json", "clean-synth",
      both(LOADS, "video_utils.py: the decoder follows the stream, info.json's video.codec is never read",
           "video_utils.py: the decoder follows the stream, info.json's video.codec is never read",
           "declared codec is informational"))
def mpeg4(d: Path, fmt: str) -> Built:
    b = synth(d, fmt, codec="mpeg4")
    edit_info(b.root, lambda i: i["features"][CAM]["info"].update({"video.codec": "h264"}))
    return b
