"""Benchmark `prep scan`: episodes/s on a synthetic corpus (>= 1,000 episodes), 1 and 2 workers.

The corpus reuses one encoded 90-frame 480x640 h264 clip per camera (copied per episode):
a scan never decodes pixels, so content does not matter, only file count and packets.
Each worker count runs on a pre-started LocalCluster (passed to the runner as a scheduler
address), so the rate measures the scan graph, not cluster start-up; start-up is reported apart.

    python bench/scan.py [--episodes 1000] [--out bench/results/scan.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from distributed import Client, LocalCluster

from pipeline.formats import open_dataset
from pipeline.jobs.scan import scan_dataset
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.scan import scan_unit, scan_units
from pipeline.synth import SynthSpec, write_synthetic


def in_process_rate(root: Path) -> float:
    ds, _ = open_dataset(root)
    units = scan_units(ds)
    t0 = time.perf_counter()
    for u in units:
        scan_unit(u)
    return len(ds.episodes) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--version", default="v2.1", choices=["v2.1", "v3.0"])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--out", type=Path, default=Path("bench/results/scan.json"))
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        t0 = time.perf_counter()
        write_synthetic(root, SynthSpec(version=args.version, episodes=args.episodes, reuse_video=True))
        build_s = time.perf_counter() - t0
        single = in_process_rate(root)
        for w in (int(x) for x in args.workers.split(",")):
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None,
                                   silence_logs=logging.ERROR)
            client = Client(cluster)
            startup = time.perf_counter() - t0
            cfg = RunConfig(scheduler=cluster.scheduler_address, progress=False)
            with open_engine(cfg) as engine:
                scan_dataset(root, Path(tmp) / f"m{w}.json", engine)  # warm the workers' imports
                t0 = time.perf_counter()
                manifest, _ = scan_dataset(root, Path(tmp) / f"m{w}.json", engine)
                wall = time.perf_counter() - t0
            client.close()
            cluster.close()
            eps = manifest["totals"]["episodes"]
            rows.append({"workers": w, "episodes": eps, "wall_s": wall, "episodes_per_s": eps / wall,
                         "episodes_per_s_per_worker": eps / wall / w, "cluster_startup_s": startup})
    result = {
        "benchmark": "scan",
        "corpus": {"version": args.version, "episodes": args.episodes, "cameras": 3, "frames_per_episode": 90,
                   "size": "480x640", "codec": "h264", "build_s": build_s},
        "in_process_single_core_episodes_per_s": single,
        "runs": rows,
        "speedup_1_to_2": (rows[1]["episodes_per_s"] / rows[0]["episodes_per_s"]) if len(rows) > 1 else None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
        "target_episodes_per_s_per_core": 200,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"scan benchmark: {args.episodes} episodes x 3 cameras ({args.version}), corpus built in {build_s:.1f} s")
    print(f"in-process, one core, no Dask: {single:,.0f} episodes/s")
    print(f"{'workers':>7} {'episodes':>8} {'wall s':>8} {'ep/s':>8} {'ep/s/worker':>11} {'startup s':>9}")
    for r in rows:
        print(f"{r['workers']:>7} {r['episodes']:>8} {r['wall_s']:>8.2f} {r['episodes_per_s']:>8.0f} "
              f"{r['episodes_per_s_per_worker']:>11.0f} {r['cluster_startup_s']:>9.2f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
