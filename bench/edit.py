"""Benchmark `prep edit` against LeRobot 0.6.1's own dataset tools on the same input, in one run.

The inputs (built once, cached under --work): corpus A, a v3.0 dataset of --episodes episodes x 3 cameras x
--frames frames of 480x640 h264 written by LeRobot 0.6.1's own writer (`LeRobotDataset.create(...,
rgb_encoder=RGBEncoderConfig(vcodec="h264"))`, its defaults otherwise: GOP 2, crf 30, every episode encoded
afresh and appended to one file per camera), corpus B (--merge-episodes more, another seed) for the merge, and
`prep reencode --dst 224` of each (all-intra h264, every frame a keyframe).

On each input (the h264 source and the 224 output) the same three edits, prep (on a --workers LocalCluster and
on the inline engine, one process) then LeRobot:
- drop: `prep edit SRC --drop LIST` of 40 % of the episodes (every 5th+1 and 5th+3) vs
  `dataset_tools.delete_episodes`;
- split: `prep edit SRC --no-shuffle --split train=LIST val=LIST` vs `dataset_tools.split_dataset` with the same
  lists (val every 5th episode);
- merge: `prep edit --merge A B` vs `dataset_tools.merge_datasets`;
- drop-camera: `prep edit SRC --drop-cameras observation.images.side` vs `dataset_tools.remove_feature` of that
  camera (a video feature: LeRobot rewrites every data parquet through pandas, copies the other cameras' files
  and meta/episodes as they are);
- rename: `prep edit SRC --rename observation.images.top=observation.images.base_0_rgb` (LeRobot 0.6.1 has no
  tool that renames a feature: prep's row alone).
For the camera edits, `camera_left` counts what still names the dropped (or renamed) camera in each output:
its info.json feature, its meta/episodes columns (`videos/<key>/...`, `stats/<key>/...`), its meta/stats.json
entry and its video files.
Each tool runs as its own process; `process_s` is the whole process (imports, prep's start-up and any
cluster included: what a user waits for), `cpu_s` the CPU seconds of the process and its descendants (the
cost on a shared machine, where wall time also counts the waits for a core), `seconds` the edit inside it
(LeRobot: around the call, imports and opening the source excluded; prep: the job's own timing from its
report). Ratios are LeRobot / prep on `process_s` (x wall) and on `cpu_s` (x cpu). prep runs with
--no-verify (LeRobot's tools verify nothing); `prep verify --decode` of each prep output is run apart (not
timed) and its exit codes recorded.

Bit-exactness: every output episode is matched to its source episode (by the edit's own mapping) and, per
camera, the payload bytes of its packets (PyAV demux, pts in the episode's [from_timestamp, to_timestamp))
compared with the source episode's: `packets_equal / packets` for prep's output and for LeRobot's, and how many
output packets end with the source packet's payload (the same slice data with something put in front, such as
parameter sets repeated in-band).

    python bench/edit.py [--episodes 50] [--frames 90] [--merge-episodes 25] [--work DIR] [--workers 2]
                         [--no-inline] [--only drop,split,merge,drop-camera,rename] [--inputs h264,224]
                         [--out bench/results/edit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import pyarrow as pa
import pyarrow.parquet as pq
from masking import masked

from pipeline import atomic
from pipeline.runner import machine_cores

REPO = Path(__file__).resolve().parents[1]
# lerobot 0.6.1's interpreter: $PREP_LEROBOT06_PY, else the reader venv .ci/lerobot_envs.sh makes
LEROBOT_PY = Path(os.environ.get("PREP_LEROBOT06_PY")
                  or Path(os.environ.get("PREP_VENVS", "/opt/prep-venvs")) / "lerobot-v06" / "bin" / "python")
CAMS = ("observation.images.top", "observation.images.wrist", "observation.images.side")

BUILD_SCRIPT = r'''
import json, logging, shutil, sys, time
from pathlib import Path
import numpy as np
logging.disable(logging.INFO)
from lerobot.configs.video import RGBEncoderConfig
from lerobot.datasets.lerobot_dataset import LeRobotDataset

root, episodes, frames, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
CAMS = ("observation.images.top", "observation.images.wrist", "observation.images.side")
H, W = 480, 640
features = {cam: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"]} for cam in CAMS}
for name in ("observation.state", "action"):
    features[name] = {"dtype": "float32", "shape": [6], "names": [f"j{i}" for i in range(6)]}
shutil.rmtree(root, ignore_errors=True)
t0 = time.perf_counter()
ds = LeRobotDataset.create(repo_id=f"bench/{root.name}", fps=30, root=root, features=features, robot_type="bench",
                           use_videos=True, image_writer_threads=4, rgb_encoder=RGBEncoderConfig(vcodec="h264"))
rng = np.random.default_rng(seed)
tasks = ["pick the cube", "place the cube", "open the drawer", "close the drawer"]
ys = np.arange(H)[:, None]
for ep in range(episodes):
    bases = [np.kron(rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8), np.ones((40, 40, 1), np.uint8))
             for _ in CAMS]
    task = tasks[int(rng.integers(len(tasks)))]
    state = rng.standard_normal(6).astype(np.float32)
    for f in range(frames):
        frame = {"task": task, "observation.state": (state + 0.01 * f).astype(np.float32),
                 "action": (state + 0.01 * (f + 1)).astype(np.float32)}
        for c, cam in enumerate(CAMS):
            img = np.roll(bases[c], shift=(2 * f, 3 * f), axis=(0, 1))
            img[np.broadcast_to((ys - 8 * f) % H < 20, (H, W))] = 255  # a moving bar
            frame[cam] = img
        ds.add_frame(frame)
    ds.save_episode()
ds.finalize()
print(json.dumps({"seconds": time.perf_counter() - t0}))
'''

VERSION_SCRIPT = "import importlib.metadata as m; print(m.version('lerobot'))"
EDIT_SCRIPT = r'''
import json, logging, sys, time
from pathlib import Path
logging.disable(logging.INFO)
from lerobot.datasets.dataset_tools import delete_episodes, merge_datasets, remove_feature, split_dataset
from lerobot.datasets.lerobot_dataset import LeRobotDataset

op, out, args = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
srcs = [LeRobotDataset(f"bench/{Path(r).name}", root=r) for r in args["roots"]]
t0 = time.perf_counter()
if op == "drop":
    delete_episodes(srcs[0], episode_indices=args["drop"], output_dir=out, repo_id="bench/dropped")
elif op == "split":
    split_dataset(srcs[0], splits=args["splits"], output_dir=out)
elif op == "merge":
    merge_datasets(srcs, output_repo_id="bench/merged", output_dir=out)
elif op == "drop-camera":
    remove_feature(srcs[0], feature_names=[args["camera"]], output_dir=out, repo_id="bench/removed")
print(json.dumps({"seconds": time.perf_counter() - t0}))
'''


# ---------------------------------------------------------------- helpers


def lerobot_env(work: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(work / "hf"),
            "HF_LEROBOT_HOME": str(work / "hf-lerobot"), "PYTHONPATH": ""}


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children and the descendants they waited for
    (a LocalCluster's workers included): on a shared machine, what a run cost apart from what it waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run `cmd`; (result, wall seconds, CPU seconds of the process and its descendants)."""
    c0, t0 = children_cpu(), time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return r, time.perf_counter() - t0, children_cpu() - c0


def prep(*args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return timed([sys.executable, "-m", "pipeline.cli", *args], env)


def du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def build_lerobot(root: Path, episodes: int, frames: int, seed: int, work: Path) -> float:
    stamp = root.with_name(root.name + ".build.json")  # beside the dataset: the dataset holds only the writer's files
    want = {"episodes": episodes, "frames": frames, "seed": seed}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return 0.0
    t0 = time.perf_counter()
    r = subprocess.run([str(LEROBOT_PY), "-c", BUILD_SCRIPT, str(root), str(episodes), str(frames), str(seed)],
                       capture_output=True, text=True, env=lerobot_env(work), check=False)
    if r.returncode != 0:
        raise SystemExit(f"building {root} with lerobot failed:\n{r.stderr[-3000:]}")
    atomic.write_json(stamp, want)
    return time.perf_counter() - t0


def build_224(src: Path, out: Path, workers: int) -> float:
    if (out / "meta" / "info.json").is_file():
        return 0.0
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    r, _, _ = prep("reencode", str(src), "--dst", "224", "--out", str(out), "--workers", str(workers),
                   "--no-progress")
    if r.returncode != 0:
        raise SystemExit(f"prep reencode {src} failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


FLAG = {"drop": "--drop", "split": "--split", "merge": "--merge", "drop-camera": "--drop-cameras",
        "rename": "--rename"}
LEROBOT_TOOL = {"drop": "delete_episodes", "split": "split_dataset", "merge": "merge_datasets",
                "drop-camera": "remove_feature"}  # rename: LeRobot 0.6.1 has none


def prep_edit_features() -> set[str]:
    r, _, _ = prep("edit", "--help")
    return {flag for flag in FLAG.values() if flag in r.stdout}


# ---------------------------------------------------------------- bit-exactness


def episode_rows(root: Path) -> list[dict[str, Any]]:
    tables = [pq.read_table(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))]
    rows = pa.concat_tables(t.select([c for c in t.column_names if not c.startswith("stats/")])
                            for t in tables).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


class Packets:
    """Per (root, camera, episode): the payloads of the episode's packets in demux order."""

    def __init__(self) -> None:
        self.files: dict[Path, list[tuple[Fraction, bytes]]] = {}

    def _file(self, path: Path) -> list[tuple[Fraction, bytes]]:
        if path not in self.files:
            with av.open(str(path)) as c:
                s = c.streams.video[0]
                tb = s.time_base
                self.files[path] = [(Fraction(p.pts) * tb, bytes(p)) for p in c.demux(s)
                                    if p.size and p.pts is not None]
        return self.files[path]

    def episode(self, root: Path, row: dict[str, Any], cam: str, fps: float) -> list[bytes]:
        path = root / "videos" / cam / f"chunk-{row[f'videos/{cam}/chunk_index']:03d}" / \
            f"file-{row[f'videos/{cam}/file_index']:03d}.mp4"
        lo, hi = row[f"videos/{cam}/from_timestamp"], row[f"videos/{cam}/to_timestamp"]
        half = 0.5 / fps
        return [b for t, b in self._file(path) if lo - half <= t < hi - half]


def bit_exact(pairs: list[tuple[Path, int, Path, int]], fps: float,
              cams: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """pairs: (output root, output episode, source root, source episode); cams: (output camera, source camera)
    (default: every camera under its own key)."""
    cache = Packets()
    rows: dict[Path, list[dict[str, Any]]] = {}
    total = equal = contains = frames_mismatch = 0
    for out, oep, src, sep in pairs:
        for root in (out, src):
            if root not in rows:
                rows[root] = episode_rows(root)
        for cam, src_cam in cams if cams is not None else [(c, c) for c in CAMS]:
            a = cache.episode(out, rows[out][oep], cam, fps)
            b = cache.episode(src, rows[src][sep], src_cam, fps)
            frames_mismatch += len(a) != len(b)
            total += len(b)
            equal += sum(x == y for x, y in zip(a, b, strict=False))
            contains += sum(x.endswith(y) for x, y in zip(a, b, strict=False))
    return {"packets": total, "packets_equal": equal, "packets_ending_with_source_payload": contains,
            "episodes_with_other_frame_count": frames_mismatch,
            "bit_exact": total > 0 and equal == total and frames_mismatch == 0}


# ---------------------------------------------------------------- the edits


def plan(episodes: int, merge_episodes: int) -> dict[str, Any]:
    drop = [i for i in range(episodes) if i % 5 in (1, 3)]  # 40 %, spread through every file
    val = [i for i in range(episodes) if i % 5 == 4]
    train = [i for i in range(episodes) if i % 5 != 4]
    return {"drop": drop, "splits": {"train": train, "val": val}, "merge_episodes": merge_episodes,
            "camera": CAMS[2], "rename": [CAMS[0], "observation.images.base_0_rgb"]}


def camera_pairs(op: str, p: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(output camera, source camera) of a camera edit's output; None: every camera as it is."""
    if op == "drop-camera":
        return [(c, c) for c in CAMS if c != p["camera"]]
    if op == "rename":
        old, new = p["rename"]
        return [(new if c == old else c, c) for c in CAMS]
    return None


def camera_left(root: Path, cam: str) -> dict[str, int]:
    """What still names camera `cam` in an output: its info.json feature, meta/episodes columns, meta/stats.json
    entry, video files."""
    info = json.loads((root / "meta/info.json").read_text())
    stats = json.loads((root / "meta/stats.json").read_text()) if (root / "meta/stats.json").is_file() else {}
    columns = {c for f in (root / "meta/episodes").glob("*/*.parquet") for c in pq.read_schema(f).names}
    return {"info_features": int(cam in info.get("features", {})),
            "episode_columns": sum(1 for c in columns if c.startswith((f"videos/{cam}/", f"stats/{cam}/"))),
            "stats_json": int(cam in stats), "video_files": len(list((root / "videos" / cam).rglob("*.mp4")))}


def mapping(op: str, p: dict[str, Any], episodes: int, out: Path,
            srcs: list[Path]) -> list[tuple[Path, int, Path, int]]:
    if op == "drop":
        kept = [i for i in range(episodes) if i not in set(p["drop"])]
        return [(out, n, srcs[0], e) for n, e in enumerate(kept)]
    if op == "split":
        return [(out / name, n, srcs[0], e) for name, eps in p["splits"].items() for n, e in enumerate(sorted(eps))]
    if op in ("drop-camera", "rename"):
        return [(out, e, srcs[0], e) for e in range(episodes)]
    pairs, n = [], 0
    for src in srcs:
        for e in range(len(episode_rows(src))):
            pairs.append((out, n, src, e))
            n += 1
    return pairs


def episode_list(eps: list[int]) -> str:
    return ",".join(str(e) for e in eps)


def run_prep(op: str, p: dict[str, Any], srcs: list[Path], out: Path, workers: int | None) -> dict[str, Any]:
    """`prep edit` as one process; workers None: the inline engine (this process only), else a LocalCluster."""
    shutil.rmtree(out, ignore_errors=True)
    engine = ["--workers", str(workers)] if workers else ["--backend", "inline"]
    tool = f"prep edit, {workers} workers" if workers else "prep edit, inline"
    if op == "drop":
        args = ["edit", str(srcs[0]), "--out", str(out), "--drop", episode_list(p["drop"])]
    elif op == "split":
        args = ["edit", str(srcs[0]), "--out", str(out), "--no-shuffle", "--split",
                *(f"{name}={episode_list(eps)}" for name, eps in p["splits"].items())]
    elif op == "drop-camera":
        args = ["edit", str(srcs[0]), "--out", str(out), "--drop-cameras", p["camera"]]
    elif op == "rename":
        args = ["edit", str(srcs[0]), "--out", str(out), "--rename", "=".join(p["rename"])]
    else:
        args = ["edit", "--merge", *map(str, srcs), "--out", str(out)]
    load = os.getloadavg()[0]
    r, wall, cpu = prep(*args, *engine, "--no-verify", "--no-progress")
    if r.returncode != 0:
        return {"tool": tool, "error": f"rc {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}",
                "process_s": wall, "cpu_s": cpu, "load_avg_1m_at_start": load}
    seconds = None
    for rep in [out / "prep/edit_report.json", *sorted(out.glob("*/prep/edit_report.json"))]:
        if rep.is_file():
            seconds = json.loads(rep.read_text()).get("seconds")
            break
    short = " ".join(a if len(a) < 40 else a[:37] + "..." for a in args)
    return {"tool": tool, "process_s": wall, "cpu_s": cpu, "seconds": seconds, "load_avg_1m_at_start": load,
            "out_bytes": du(out), "command": f"prep {short} {' '.join(engine)} --no-verify"}


def run_lerobot(op: str, p: dict[str, Any], srcs: list[Path], out: Path, work: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    arg = {"roots": [str(s) for s in srcs], "drop": p["drop"], "splits": p["splits"]}
    load = os.getloadavg()[0]
    arg["camera"] = p["camera"]
    r, wall, cpu = timed([str(LEROBOT_PY), "-c", EDIT_SCRIPT, op, str(out), json.dumps(arg)], lerobot_env(work))
    name = LEROBOT_TOOL[op]
    if r.returncode != 0:
        return {"tool": f"lerobot 0.6.1 {name}", "error": r.stderr.strip()[-600:], "process_s": wall,
                "cpu_s": cpu, "load_avg_1m_at_start": load}
    inner = json.loads(r.stdout.strip().splitlines()[-1])
    return {"tool": f"lerobot 0.6.1 {name}", "process_s": wall, "cpu_s": cpu, "seconds": inner["seconds"],
            "load_avg_1m_at_start": load, "out_bytes": du(out)}


def run_verify(roots: list[Path], workers: int) -> dict[str, Any]:
    codes = []
    t0 = time.perf_counter()
    for root in roots:
        r, _, _ = prep("verify", str(root), "--decode", "--workers", str(workers), "--no-progress")
        codes.append(r.returncode)
    return {"exit_codes": codes, "process_s": time.perf_counter() - t0}


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'input':<6}{'edit':<12}{'tool':<32}{'process s':>10}{'cpu s':>8}{'edit s':>8}{'x wall':>8}{'x cpu':>7}"
            f"{'packets equal':>16}{'verify':>8}{'load':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ex = r.get("exact") or {}
        eq = f"{ex['packets_equal']}/{ex['packets']}" if ex else ("error" if "error" in r else "-")
        verify = r.get("verify", {}).get("exit_codes")
        lines.append(f"{r['input']:<6}{r['op']:<12}{r['tool']:<32}{fmt(r.get('process_s'), '.2f'):>10}"
                     f"{fmt(r.get('cpu_s'), '.2f'):>8}{fmt(r.get('seconds'), '.2f'):>8}"
                     f"{fmt(r.get('ratio'), '.1f'):>8}{fmt(r.get('ratio_cpu'), '.1f'):>7}{eq:>16}"
                     f"{'-' if verify is None else ','.join(map(str, verify)):>8}"
                     f"{r['load_avg_1m_at_start']:>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=90)
    ap.add_argument("--merge-episodes", type=int, default=25, help="episodes of corpus B (the merge's second input)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/prep-bench-edit"), help="corpora are cached here")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default="drop,split,merge")
    ap.add_argument("--inputs", default="h264,224")
    ap.add_argument("--no-inline", action="store_true", help="skip prep's inline-engine runs")
    ap.add_argument("--lerobot-from", type=Path, metavar="JSON",
                    help="take LeRobot's rows from an earlier result of this bench (same corpus) instead of running "
                         "LeRobot again: re-measures prep alone, e.g. after a change to prep edit")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/edit.json"))
    args = ap.parse_args(argv)
    if not LEROBOT_PY.is_file():
        raise SystemExit(f"needs lerobot 0.6.1's python at {LEROBOT_PY} (PREP_LEROBOT06_PY)")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    corpora = {"h264": (work / "a", work / "b"), "224": (work / "a_224", work / "b_224")}
    inputs, ops = args.inputs.split(","), args.only.split(",")
    built = {"a": build_lerobot(work / "a", args.episodes, args.frames, 0, work)}
    if "merge" in ops:  # corpus B only for a merge, the 224 inputs only when asked for
        built["b"] = build_lerobot(work / "b", args.merge_episodes, args.frames, 1, work)
    if "224" in inputs:
        built["a_224"] = build_224(work / "a", work / "a_224", args.workers)
        if "merge" in ops:
            built["b_224"] = build_224(work / "b", work / "b_224", args.workers)
    for name, secs in built.items():
        root = work / name
        print(f"corpus {name}: {len(episode_rows(root))} episodes, {du(root) / 1e6:.1f} MB"
              + (f" (built in {secs:.0f} s)" if secs else " (cached)"), flush=True)
    if args.build_only:
        return 0
    have = prep_edit_features()
    earlier = json.loads(args.lerobot_from.read_text()) if args.lerobot_from else None
    p = plan(args.episodes, args.merge_episodes)
    rows: list[dict[str, Any]] = []
    for inp in args.inputs.split(","):
        a, b = corpora[inp]
        fps = float(json.loads((a / "meta/info.json").read_text())["fps"])
        for op in args.only.split(","):
            srcs = [a, b] if op == "merge" else [a]
            group: list[dict[str, Any]] = []
            engines: list[int | None] = [args.workers, None] if not args.no_inline else [args.workers]
            for workers in engines:
                if FLAG[op] not in have:
                    group.append({"tool": "prep edit", "error": f"prep edit has no {FLAG[op]} yet",
                                  "load_avg_1m_at_start": os.getloadavg()[0]})
                    break
                out = work / "out" / f"prep-{inp}-{op}-{workers or 'inline'}"
                row = run_prep(op, p, srcs, out, workers)
                if "error" not in row:
                    row["exact"] = bit_exact(mapping(op, p, args.episodes, out, srcs), fps, camera_pairs(op, p))
                    parts = [out / n for n in p["splits"]] if op == "split" else [out]
                    row["verify"] = run_verify(parts, args.workers)
                    if op in ("drop-camera", "rename"):
                        row["camera_left"] = camera_left(out, p["camera"] if op == "drop-camera" else p["rename"][0])
                group.append(row)
            out = work / "out" / f"lerobot-{inp}-{op}"
            if op not in LEROBOT_TOOL:  # nothing of LeRobot's to compare with
                for row in group:
                    row.update(input=inp, op=op)
                    rows.append(row)
                    print(table([row]).splitlines()[-1], flush=True)
                continue
            if earlier is not None:
                theirs = next(r for r in earlier["results"] if r["input"] == inp and r["op"] == op
                              and r["tool"].startswith("lerobot"))
                theirs = {**theirs, "from": f"{args.lerobot_from.name} (commit {earlier.get('prep_commit')})"}
            else:
                theirs = run_lerobot(op, p, srcs, out, work)
                if "error" not in theirs:
                    theirs["exact"] = bit_exact(mapping(op, p, args.episodes, out, srcs), fps, camera_pairs(op, p))
                    if op == "drop-camera":
                        theirs["camera_left"] = camera_left(out, p["camera"])
                        theirs["verify"] = run_verify([out], args.workers)
            if "error" not in theirs:
                for row in group:
                    if "error" not in row:
                        row["ratio"] = theirs["process_s"] / row["process_s"]
                        row["ratio_cpu"] = theirs["cpu_s"] / row["cpu_s"]
                        if row.get("seconds"):
                            row["ratio_edit_s"] = theirs["seconds"] / row["seconds"]
            for row in [*group, theirs]:
                row.update(input=inp, op=op)
                rows.append(row)
                print(table([row]).splitlines()[-1], flush=True)
                if "error" in row:
                    print(f"   {row['tool']}: {row['error'][-300:]}", flush=True)
    load_after = os.getloadavg()
    print()
    print(table(rows))
    print("x wall = lerobot process s / prep process s; x cpu = the same with CPU seconds (process and descendants)")
    print(f"load average (1, 5, 15 min) before {load_before}, after "
          f"{load_after}, on {machine_cores()} cores")
    result = {
        "bench": "edit",
        "machine": {"cores": machine_cores(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_avg_before": list(load_before), "load_avg_after": list(load_after)},
        "corpus": {"writer": "lerobot 0.6.1 LeRobotDataset.create, RGBEncoderConfig(vcodec='h264') (GOP 2, crf 30)",
                   "episodes": args.episodes, "merge_episodes": args.merge_episodes, "cameras": 3,
                   "frames_per_episode": args.frames, "size": "480x640", "fps": 30,
                   "bytes": {name: du(work / name) for name in ("a", "b", "a_224", "b_224") if (work / name).is_dir()}},
        "plan": p,
        "lerobot_rows_from": args.lerobot_from.name if args.lerobot_from else None,
        "prep_commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                      text=True, check=False).stdout.strip() or None,
        "lerobot": subprocess.run([str(LEROBOT_PY), "-c", VERSION_SCRIPT], capture_output=True, text=True,
                                  env=lerobot_env(work), check=False).stdout.strip(),
        "command": "python bench/edit.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "note": "process_s: the whole process of each tool (imports, start-up, cluster); seconds: the edit inside it "
                "where the tool reports it; cpu_s: CPU seconds (user + system) of the process and its descendants. "
                "ratio: lerobot process_s / prep process_s; ratio_cpu: the same in CPU seconds. packets equal: output "
                "packets whose payload bytes equal the matching source episode's packet (PyAV demux). prep runs "
                "--no-verify; `prep verify --decode` of its outputs is run apart (exit codes in verify).",
        "results": rows,
    }
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
