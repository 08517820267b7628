"""Benchmark `prep edit`'s planning at scale: select, plan and publish of a metadata-only corpus of 100 k and
1 M episodes (v2.1 and v3.0), peak RSS and seconds per phase.

The corpora hold only metadata (what select, plan and publish read; no unit is run, so no data or video
file is needed): v2.1 `meta/episodes.jsonl`, `meta/episodes_stats.jsonl` (stats of `episode_index`,
`index`, `task_index` and a 2-dim `action`, count 90) and `meta/tasks.jsonl`; v3.0 one
`meta/episodes/chunk-000/file-000.parquet` (3 cameras, 100 episodes per video file, 1,000 per data file,
the same stats as `stats/<feature>/<stat>` columns) and `meta/tasks.parquet`. Built in seconds under
--workdir (removed afterwards unless --keep).

The edit is `--drop` of 40 % of the episodes, spread through the whole corpus (every episode whose index
mod 5 is 1 or 3: the most fragmented selection, so no run of kept episodes is longer than 2), and a
`--drop` of 3 episodes (what `--drop-failed` usually leaves out). Each measurement runs in a fresh process;
its peak RSS (Linux VmHWM, reset with /proc/self/clear_refs between phases) is given per phase above the
process's RSS once the options are built:

- open:     `pipeline.jobs.edit.open_source` (info.json and the metadata rules every command checks; not
            edit's own, shown for scale);
- select:   `select` (the kept episodes and why each other one is dropped);
- plan:     `plan_tasks` and every unit and placement of `plan` (v3.0: what the Dask tasks get), counted;
- publish:  `PUBLISH[format]` into an empty folder (tasks, episodes metadata, per-episode stats moved,
            global stats aggregated, info.json).

    python bench/edit_scale.py                                 # 100k and 1M, v2.1 and v3.0
    python bench/edit_scale.py --sizes 100000 --label before --out /tmp/before.json
    python bench/edit_scale.py --merge-with bench/results/edit_scale_before.json   # before/after in one file
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from masking import masked

from pipeline import atomic
from pipeline.synth import V21_DATA_PATH, V21_VIDEO_PATH, V30_DATA_PATH, V30_VIDEO_PATH, SynthSpec, _features

CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist", "observation.images.cam_right_wrist")
FRAMES, FPS = 90, 30
TASKS = ("pick up the cup", "put the pen in the holder", "fold the socks", "open the box")
SPEC = SynthSpec(frames=FRAMES, fps=FPS, height=48, width=64, cameras=CAMERAS, gop=30, state_dim=2)
PER_VIDEO_FILE, PER_DATA_FILE = 100, 1000
BLOCK = 50_000


def _stats(ep: int) -> dict[str, dict[str, list[float]]]:
    first = ep * FRAMES
    task = ep % len(TASKS)
    return {
        "episode_index": {"min": [ep], "max": [ep], "mean": [float(ep)], "std": [0.0], "count": [FRAMES]},
        "index": {"min": [first], "max": [first + FRAMES - 1], "mean": [first + (FRAMES - 1) / 2],
                  "std": [25.97], "count": [FRAMES]},
        "task_index": {"min": [task], "max": [task], "mean": [float(task)], "std": [0.0], "count": [FRAMES]},
        "action": {"min": [-1.0, -2.0], "max": [1.0, 2.0], "mean": [0.01 * (ep % 7), 0.0], "std": [0.5, 0.7],
                   "count": [FRAMES]},
    }


def info_json(version: str, episodes: int) -> dict[str, Any]:
    v21 = version == "v2.1"
    files = episodes if v21 else -(-episodes // PER_VIDEO_FILE)
    return {
        "codebase_version": version, "robot_type": "synthetic", "total_episodes": episodes,
        "total_frames": episodes * FRAMES, "total_tasks": len(TASKS), "total_videos": files * len(CAMERAS),
        "total_chunks": (episodes - 1) // 1000 + 1, "chunks_size": 1000, "fps": FPS,
        "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
        "splits": {"train": f"0:{episodes}"},
        "data_path": V21_DATA_PATH if v21 else V30_DATA_PATH,
        "video_path": V21_VIDEO_PATH if v21 else V30_VIDEO_PATH,
        "features": _features(SPEC),
    }


def build_v21(root: Path, episodes: int) -> Path:
    if (root / "meta/info.json").is_file():
        return root
    (root / "meta").mkdir(parents=True, exist_ok=True)
    with open(root / "meta/episodes.jsonl", "w", encoding="utf-8") as eps, \
            open(root / "meta/episodes_stats.jsonl", "w", encoding="utf-8") as st:
        for ep in range(episodes):
            eps.write(json.dumps({"episode_index": ep, "tasks": [TASKS[ep % len(TASKS)]], "length": FRAMES}) + "\n")
            st.write(json.dumps({"episode_index": ep, "stats": _stats(ep)}) + "\n")
    with open(root / "meta/tasks.jsonl", "w", encoding="utf-8") as fh:
        for i, t in enumerate(TASKS):
            fh.write(json.dumps({"task_index": i, "task": t}) + "\n")
    atomic.write_json(root / "meta/info.json", info_json("v2.1", episodes), indent=2)
    return root


def _v30_block(lo: int, hi: int) -> pa.Table:
    ep = np.arange(lo, hi, dtype=np.int64)
    cols: dict[str, Any] = {
        "episode_index": ep,
        "tasks": pa.array([[TASKS[e % len(TASKS)]] for e in range(lo, hi)], type=pa.list_(pa.string())),
        "length": np.full(len(ep), FRAMES, dtype=np.int64),
        "data/chunk_index": (ep // PER_DATA_FILE) // 1000, "data/file_index": (ep // PER_DATA_FILE) % 1000,
        "dataset_from_index": ep * FRAMES, "dataset_to_index": (ep + 1) * FRAMES,
    }
    vfile = ep // PER_VIDEO_FILE
    pos = ep % PER_VIDEO_FILE
    for cam in CAMERAS:
        cols[f"videos/{cam}/chunk_index"] = vfile // 1000
        cols[f"videos/{cam}/file_index"] = vfile % 1000
        cols[f"videos/{cam}/from_timestamp"] = pos * FRAMES / FPS
        cols[f"videos/{cam}/to_timestamp"] = (pos + 1) * FRAMES / FPS
    rows = [_stats(e) for e in range(lo, hi)]
    for feat, st in rows[0].items():
        for name in st:
            values = [r[feat][name] for r in rows]
            cols[f"stats/{feat}/{name}"] = pa.array(values, type=pa.list_(pa.int64() if name == "count" else
                                                                          pa.float64()))
    return pa.table(cols)


def build_v30(root: Path, episodes: int) -> Path:
    if (root / "meta/info.json").is_file():
        return root
    (root / "meta/episodes/chunk-000").mkdir(parents=True, exist_ok=True)
    writer = None
    for lo in range(0, episodes, BLOCK):
        block = _v30_block(lo, min(episodes, lo + BLOCK))
        if writer is None:
            writer = pq.ParquetWriter(root / "meta/episodes/chunk-000/file-000.parquet", block.schema)
        writer.write_table(block)
    assert writer is not None
    writer.close()
    pq.write_table(pa.table({"task_index": list(range(len(TASKS))), "task": list(TASKS)}), root / "meta/tasks.parquet")
    atomic.write_json(root / "meta/info.json", info_json("v3.0", episodes), indent=2)
    return root


# ---- one measurement in its own process ---------------------------------------------------------------

MEASURE = r"""
import json, sys, time, shutil
from pathlib import Path
from pipeline.runner import peak_rss_bytes

def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0

def reset():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

root, out, edit, full = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "full"
from pipeline.jobs import edit as E
from pipeline.stages.edit import SpliceCheckUnit
from pipeline.formats import read_info
n = int(read_info(root)["total_episodes"])
drop = tuple(i for i in range(n) if i % 5 in (1, 3)) if edit == "drop40" else (1, n // 2, n - 2)
options = E.EditOptions(drop=drop)
phases = {}
def phase(name, fn):
    base = rss()
    reset()
    t0, c0 = time.perf_counter(), time.process_time()
    value = fn()
    phases[name] = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                    "peak_rss_above_start": peak_rss_bytes() - base, "rss_after": rss()}
    return value
info = phase("open", lambda: E.open_source(root, out)) if full else read_info(root)
sel, total = phase("select", lambda: E.select(options, root, info))
def planned():
    source = E.Source(root, info, sel, E.plan_tasks(root, info, sel))
    units = placed = 0
    for item in E.plan([source], out):
        if isinstance(item, E.Placed):
            placed += 1
        else:
            units += 1
    return source, units, placed
source, units, placed = phase("plan", planned)
report = E.EditReport(str(root), str(out), info["codebase_version"], {}, "bench")
out.mkdir(parents=True, exist_ok=True)
if full:
    phase("publish", lambda: E.PUBLISH[info["codebase_version"]]([source], out, info, report))
print(json.dumps({"episodes": total, "kept": report.episodes, "units": units, "placed": placed,
                  "phases": phases, "peak_rss": peak_rss_bytes(), "start_rss": None}))
"""


def measure(root: Path, out: Path, edit: str, full: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(root), str(out), edit,
                           "full" if full else "plan"], capture_output=True, text=True,
                          env=env, check=False)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"edit of {root} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    row.pop("start_rss", None)
    row["load_avg"] = os.getloadavg()
    return row


PHASES = ("open", "select", "plan", "publish")


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'label':<8}{'corpus':<12}{'edit':<8}{'episodes':>10}" + "".join(
        f"{p + ' cpu s':>11}{p + ' MB':>12}" for p in PHASES)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = "".join(f"{r['phases'][p]['cpu_seconds']:>11.1f}{r['phases'][p]['peak_rss_above_start'] / 1e6:>12.1f}"
                        if p in r["phases"] else f"{'-':>11}{'-':>12}" for p in PHASES)
        lines.append(f"{r.get('label', ''):<8}{r['corpus']:<12}{r['edit']:<8}{r['episodes']:>10,}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--formats", default="v2.1,v3.0")
    ap.add_argument("--edits", default="drop40,drop3")
    ap.add_argument("--full-max", type=int, default=100_000, help="open and publish only up to this many episodes "
                    "(select and plan at every size)")
    ap.add_argument("--label", default="after", help="a name for these runs (e.g. before/after a change)")
    ap.add_argument("--merge-with", type=Path, help="a result JSON of earlier runs to keep alongside these")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/prep-edit-scale"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/edit_scale.json"))
    args = ap.parse_args(argv)
    from pipeline.runner import machine_cores

    result: dict[str, Any] = {
        "bench": "edit_scale",
        "machine": {"cores": machine_cores(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg_start": os.getloadavg()},
        "corpus": {"cameras": len(CAMERAS), "frames_per_episode": FRAMES, "episodes_per_video_file": PER_VIDEO_FILE,
                   "episodes_per_data_file": PER_DATA_FILE, "metadata_only": True},
        "edits": {"drop40": "--drop of every episode whose index mod 5 is 1 or 3 (40 %)",
                  "drop3": "--drop of 3 episodes (1, n/2, n-2)"},
        "runs": [], "builds": [],
    }
    if args.merge_with is not None and args.merge_with.is_file():
        result["runs"] = [r for r in json.loads(args.merge_with.read_text())["runs"] if r.get("label") != args.label]
    try:
        for fmt in args.formats.split(","):
            for n in (int(s) for s in args.sizes.split(",") if s):
                t0 = time.perf_counter()
                root = (build_v21 if fmt == "v2.1" else build_v30)(args.workdir / f"{fmt}-{n}", n)
                result["builds"].append({"corpus": f"{fmt} {n}", "seconds": time.perf_counter() - t0})
                for edit in args.edits.split(","):
                    row = {"label": args.label, "corpus": f"{fmt} {n // 1000}k", "format": fmt, "edit": edit,
                           **measure(root, args.workdir / "out", edit, n <= args.full_max)}
                    result["runs"].append(row)
                    print(table([row]).splitlines()[-1], flush=True)
                if not args.keep:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print()
    print(table(result["runs"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
