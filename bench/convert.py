"""Benchmark v2.1 -> v3.0 conversion: `prep convert SRC --to v3.0` on a 2-worker LocalCluster (and on the
inline engine: one process, one unit after another) against lerobot 0.4.4's own converter
(`convert_dataset_v21_to_v30`, run in its venv) on the same synthetic corpus, interleaved.

The corpus: N episodes x 3 cameras x 90 frames of 480x640 h264 (each camera's first episode encoded once and
copied, so that building it is fast; both converters stream-copy, so content does not change their work).
LeRobot's converter works in place, so it runs on a fresh copy (the copy is not timed). Each converter runs as
its own process; `seconds` is the conversion inside it (LeRobot: around `convert_dataset(...)`, imports
excluded; prep: the job's output files plus its metadata, from prep/convert_report.json, imports and the
cluster's start-up excluded, the latter reported as `engine_start_s`), `process_seconds` the whole process.
prep runs with --no-verify (LeRobot's converter verifies nothing); `prep verify` of prep's output is timed
apart. Also reported: each output's largest |from_timestamp - frames_before / fps|, and the 1-minute load
average at each start (the machine is shared).

    python bench/convert.py [--episodes 200] [--repeat 1] [--workers 2] [--workdir DIR]
                            [--out bench/results/convert.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from masking import masked

from pipeline import atomic
from pipeline.dataset.info import video_keys
from pipeline.formats.v30 import exact_offsets_error
from pipeline.runner import machine_cores
from pipeline.synth import SynthSpec, write_synthetic

LEROBOT_PY = Path(os.environ.get("PREP_VENVS", "/opt/prep-venvs")) / "lerobot-v30" / "bin" / "python"
LEROBOT_SCRIPT = r'''
import json, sys, time, logging
logging.disable(logging.INFO)
from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset
t0 = time.perf_counter()
convert_dataset(repo_id=sys.argv[2], root=sys.argv[1], push_to_hub=False)
print(json.dumps({"seconds": time.perf_counter() - t0}))
'''


def build(workdir: Path, episodes: int) -> Path:
    root = workdir / f"v21-{episodes}"
    if not (root / "meta/info.json").is_file():
        write_synthetic(root, SynthSpec(version="v2.1", episodes=episodes, reuse_video=True))
    return root


def du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def offsets(root: Path) -> float:
    info = json.loads((root / "meta/info.json").read_text())
    tables = [pq.read_table(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))]
    rows = pa.concat_tables(t.select([c for c in t.column_names if not c.startswith("stats/")])
                            for t in tables).to_pylist()
    return exact_offsets_error(rows, float(info["fps"]), video_keys(info))


def prep(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", *args, "--no-progress"], capture_output=True,
                       text=True, env=env, check=False)
    return r, time.perf_counter() - t0


def run_prep(src: Path, out: Path, workers: int | None) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    engine = ["--workers", str(workers)] if workers else ["--backend", "inline"]
    load = os.getloadavg()[0]
    r, wall = prep("convert", str(src), "--to", "v3.0", "--out", str(out), "--no-verify", *engine)
    if r.returncode != 0:
        raise SystemExit(f"prep convert failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    doc = json.loads((out / "prep/convert_report.json").read_text())
    name = f"prep convert, LocalCluster {workers} workers" if workers else "prep convert, inline (1 process)"
    return {"converter": name, "seconds": doc["seconds"] + doc["publish_seconds"], "process_seconds": wall,
            "engine_start_s": doc["engine_start_seconds"],
            "load_avg_1m_at_start": load, "output_files": doc["files"], "out_bytes": du(out),
            "max_offset_error_s": offsets(out)}


def run_verify(out: Path, workers: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    r, wall = prep("verify", str(out), "--workers", str(workers))
    return {"what": f"prep verify of prep's output, LocalCluster {workers} workers", "exit": r.returncode,
            "process_seconds": wall, "load_avg_1m_at_start": load,
            "summary": [line for line in r.stdout.splitlines() if line.strip()][:3]}


def run_lerobot(src: Path, workdir: Path) -> dict[str, Any]:
    base = workdir / "lerobot"
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(src, base / "ds")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(workdir / "hf"),
           "PYTHONPATH": ""}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    r = subprocess.run([str(LEROBOT_PY), "-c", LEROBOT_SCRIPT, str(base), "ds"], capture_output=True, text=True,
                       env=env, check=False)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"lerobot converter failed:\n{r.stderr[-3000:]}")
    inner = json.loads(r.stdout.strip().splitlines()[-1])
    out = base / "ds"
    return {"converter": "lerobot 0.4.4 convert_dataset_v21_to_v30", "seconds": inner["seconds"],
            "process_seconds": wall, "load_avg_1m_at_start": load,
            "output_files": len(list(out.glob("videos/*/*/*.mp4"))) + len(list(out.glob("data/*/*.parquet"))),
            "out_bytes": du(out), "max_offset_error_s": offsets(out)}


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'converter':<44}{'seconds':>9}{'process s':>11}{'start s':>9}{'files':>7}{'out MB':>9}"
            f"{'max offset err s':>18}{'load':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['converter']:<44}{r['seconds']:>9.2f}{r['process_seconds']:>11.2f}"
                     f"{r.get('engine_start_s', 0.0):>9.2f}{r['output_files']:>7}"
                     f"{r['out_bytes'] / 1e6:>9.1f}{r['max_offset_error_s']:>18.1e}{r['load_avg_1m_at_start']:>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1, help="runs of each converter, alternating")
    p.add_argument("--workers", type=int, default=2, help="prep's LocalCluster workers (default: 2)")
    p.add_argument("--no-inline", action="store_true", help="skip prep's inline run")
    p.add_argument("--workdir", type=Path, help="where to build (and reuse) the corpus (default: a temp dir)")
    p.add_argument("--out", type=Path, default=Path("bench/results/convert.json"))
    args = p.parse_args(argv)
    if not LEROBOT_PY.is_file():
        raise SystemExit(f"needs the lerobot 0.4.4 venv at {LEROBOT_PY} (bash .ci/lerobot_envs.sh)")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        workdir = args.workdir or Path(tmp)
        t0 = time.perf_counter()
        src = build(workdir, args.episodes)
        src_bytes = du(src)
        print(f"corpus: {args.episodes} episodes x 3 cameras x 90 frames 480x640 h264, {src_bytes / 1e6:.0f} MB "
              f"(built in {time.perf_counter() - t0:.0f} s)", flush=True)
        rows = []
        for _ in range(args.repeat):
            rows.append(run_prep(src, workdir / "prep-v30", args.workers))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            rows.append(run_lerobot(src, workdir))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            if not args.no_inline:
                rows.append(run_prep(src, workdir / "prep-v30-inline", None))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
        verify = run_verify(workdir / "prep-v30", args.workers)
        print(f"{verify['what']}: exit {verify['exit']}, {verify['process_seconds']:.1f} s (load "
              f"{verify['load_avg_1m_at_start']:.1f})", flush=True)
    print(table(rows))
    local = f"prep convert, LocalCluster {args.workers} workers"
    best = {name: min(r["seconds"] for r in rows if r["converter"].startswith(name)) for name in (local, "lerobot")}
    best_process = {name: min(r["process_seconds"] for r in rows if r["converter"].startswith(name))
                    for name in (local, "lerobot")}
    ratio = best["lerobot"] / best[local]
    ratio_process = best_process["lerobot"] / best_process[local]
    load_after = os.getloadavg()
    print(f"lerobot / prep {args.workers} workers: {ratio:.2f}x (conversion seconds), {ratio_process:.2f}x "
          "(whole processes)")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}, on {machine_cores()} cores")
    result = {
        "bench": "convert",
        "machine": {"cores": machine_cores(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_avg_before": list(load_before), "load_avg_after": list(load_after)},
        "corpus": {"episodes": args.episodes, "cameras": 3, "frames_per_episode": 90, "size": "480x640",
                   "codec": "h264", "bytes": src_bytes},
        "note": "seconds: the conversion inside each process (lerobot: convert_dataset; prep: the job's files + "
                "metadata); process_seconds: the whole process (imports, prep's cluster start-up included). prep "
                "runs `prep convert --no-verify`; its verify is timed apart.",
        "workers": args.workers,
        "ratio_lerobot_over_prep": ratio,
        "ratio_lerobot_over_prep_process": ratio_process,
        "results": rows,
        "verify": verify,
    }
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
