"""Benchmark `prep reencode` against a plain `ffmpeg` command line, side by side on the same files.

Cases, each with 1 and 2 workers on the same synthetic corpus (480x640 h264 GOP 30, 90-frame
episodes, 3 cameras), all converting to 224x224 pad, h264-intra at the default crf:
- `ffmpeg-cli`: one `ffmpeg` process per file (the same filter chain and encoder options as the
  ffmpeg engine), N files at a time; nothing else (no checks, no stats, no metadata);
- `prep-pyav` / `prep-ffmpeg`: `prep reencode` with that engine through the runner on a Dask
  LocalCluster started before the clock (connected via --scheduler, so cluster start-up is not
  timed), including everything the command does per file: probe and count checks of the source,
  encode, per-file checks of the output, image stats, atomic rename.
frames/s = source frames / wall seconds of that phase. Also bytes per frame and the size ratio.
With `--sweep`: size and PSNR (against the crf-0 output) by crf and preset, the data behind the
default crf. Prints a table and writes bench/results/reencode.json.

    python bench/reencode.py [--episodes 8] [--repeat 2] [--sweep] [--out bench/results/reencode.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import av
import numpy as np

from pipeline import __version__, atomic
from pipeline.dataset import open_dataset
from pipeline.jobs.reencode import reencode_dataset
from pipeline.runner import RunConfig, machine_cores, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.encode import PROFILES, EncodeJob, encode_pyav, ffmpeg_command, h264_intra_options
from pipeline.video.resize import RESIZE_MODES

TARGET_PER_CORE = 1.2
TARGET_SPEEDUP = 1.7


def corpus(workdir: Path, episodes: int) -> Path:
    root = workdir / f"synth-v21-{episodes}"
    if not (root / "meta/info.json").is_file():
        write_synthetic(root, SynthSpec(version="v2.1", episodes=episodes))
    return root


def jobs(src: Path, out: Path) -> list[EncodeJob]:
    ds, _ = open_dataset(src)
    prof = PROFILES["h264-intra"]
    geom = RESIZE_MODES["pad"](640, 480, 224, 224)
    return [EncodeJob(src / rel, out / rel, ds.fps, geom, prof, prof.default_crf) for rel, _ in ds.iter_video_files()]


def run_cli(src: Path, out: Path, workers: int) -> float:
    todo = jobs(src, out)
    for j in todo:
        j.dst.parent.mkdir(parents=True, exist_ok=True)
    binary = shutil.which("ffmpeg") or "ffmpeg"

    def one(j: EncodeJob) -> None:
        subprocess.run(ffmpeg_command(j, binary), check=True, capture_output=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, todo))
    return time.perf_counter() - t0


def run_prep(src: Path, out: Path, engine: str, scheduler: str) -> float:
    with open_engine(RunConfig(scheduler=scheduler, progress=False)) as session:
        report = reencode_dataset(src, out, ReencodeOptions(engine=engine), session)
    if not report.ok:
        raise SystemExit(f"prep reencode failed: {report.failures[:3]}")
    return report.seconds


def ffmpeg_version() -> str:
    proc = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True, check=False)
    return proc.stdout.split("\n")[0]


def video_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4"))


def sweep(src: Path, workdir: Path) -> list[dict[str, Any]]:
    """Size and PSNR (vs the crf-0 output, i.e. compression only) by preset and crf, first file per camera."""
    ds, _ = open_dataset(src)
    files = [src / ep.video(cam).rel for ep in ds.episodes[:1] for cam in ds.camera_keys]
    geom = RESIZE_MODES["pad"](640, 480, 224, 224)
    rows: list[dict[str, Any]] = []
    base: dict[Path, np.ndarray] = {}
    src_bytes = sum(f.stat().st_size for f in files)
    for preset in ("ultrafast", "veryfast", "fast"):
        for crf in (0, 18, 20, 23, 25, 27, 30):
            prof = dataclasses.replace(PROFILES["h264-intra"],
                                       options=lambda c, p=preset: {**h264_intra_options(c), "preset": p})
            nbytes, frames, se = 0, 0, 0.0
            t0 = time.perf_counter()
            for f in files:
                dst = workdir / "sweep.mp4"
                n = encode_pyav(EncodeJob(f, dst, ds.fps, geom, prof, crf))
                nbytes += dst.stat().st_size
                frames += n
                with av.open(str(dst)) as c:
                    img = np.stack([x.to_ndarray(format="rgb24") for x in c.decode(video=0)]).astype(np.float64)
                if crf == 0 and preset == "ultrafast":
                    base[f] = img
                se += float(np.sum((img - base[f]) ** 2))
            secs = time.perf_counter() - t0
            mse = se / (frames * 224 * 224 * 3)
            rows.append({"preset": preset, "crf": crf, "bytes_per_frame": nbytes / frames,
                         "size_ratio_vs_source": src_bytes / nbytes,
                         "psnr_vs_crf0_db": None if mse == 0 else 10 * np.log10(255**2 / mse),
                         "frames_per_s_incl_decode_check": frames / secs})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=8, help="synthetic episodes (x3 cameras x 90 frames)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per case; the best (least disturbed) is kept")
    ap.add_argument("--workdir", type=Path, help="where the corpus and outputs go (default: a temp folder)")
    ap.add_argument("--sweep", action="store_true", help="also the crf/preset size-quality sweep")
    ap.add_argument("--out", type=Path, default=Path("bench/results/reencode.json"))
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-reencode-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        src = corpus(workdir, args.episodes)
        ds, _ = open_dataset(src)
        frames = sum(len(ds.camera_keys) * e.frames_expected for e in ds.episodes)
        results: list[dict[str, Any]] = []
        for workers in (1, 2):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                   memory_limit=0)
            client = Client(cluster)
            try:
                address = cluster.scheduler_address
                cases = {
                    "ffmpeg-cli": lambda out, w=workers: run_cli(src, out, w),
                    "prep-pyav": lambda out, a=address: run_prep(src, out, "pyav", a),
                    "prep-ffmpeg": lambda out, a=address: run_prep(src, out, "ffmpeg", a),
                }
                for name, fn in cases.items():
                    times = []
                    for k in range(args.repeat):
                        out = workdir / f"out-{name}-{workers}-{k}"
                        shutil.rmtree(out, ignore_errors=True)
                        times.append(fn(out))
                    best = min(times)
                    vb = video_bytes(out)
                    results.append({"case": name, "workers": workers, "seconds": best, "seconds_all": times,
                                    "frames": frames, "frames_per_s": frames / best,
                                    "bytes_per_frame": vb / frames, "source_bytes_per_frame": video_bytes(src) / frames,
                                    "size_ratio": video_bytes(src) / vb})
                    print(f"  {name:12s} workers={workers}  {frames / best:7.1f} frames/s  ({best:.2f} s)", flush=True)
            finally:
                client.close()
                cluster.close()
        sweep_rows = sweep(src, workdir) if args.sweep else []

    def fps(case: str, w: int) -> float:
        return float(next(r["frames_per_s"] for r in results if r["case"] == case and r["workers"] == w))

    summary = {
        "prep_pyav_vs_cli_1_worker": fps("prep-pyav", 1) / fps("ffmpeg-cli", 1),
        "prep_ffmpeg_vs_cli_1_worker": fps("prep-ffmpeg", 1) / fps("ffmpeg-cli", 1),
        "speedup_1_to_2": {c: fps(c, 2) / fps(c, 1) for c in ("ffmpeg-cli", "prep-pyav", "prep-ffmpeg")},
        "faster_engine": "pyav" if fps("prep-pyav", 1) >= fps("prep-ffmpeg", 1) else "ffmpeg",
    }
    summary["target_per_core_met"] = summary["prep_pyav_vs_cli_1_worker"] >= TARGET_PER_CORE
    summary["target_speedup_met"] = summary["speedup_1_to_2"]["prep-pyav"] >= TARGET_SPEEDUP
    doc = {
        "bench": "reencode", "prep_version": __version__,
        "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "command": sys.argv,
        "host": {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
                 "cores_available": machine_cores(), "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                 "av": av.__version__,
                 "ffmpeg": ffmpeg_version()},
        "corpus": {"kind": "synthetic v2.1", "episodes": args.episodes, "cameras": 3, "frames_per_episode": 90,
                   "source": "480x640 h264 crf 23 GOP 30", "files": frames // 90, "frames": frames},
        "conversion": {"size": "224x224", "resize": "pad", "profile": "h264-intra",
                       "crf": PROFILES["h264-intra"].default_crf, "preset": PROFILES["h264-intra"].preset},
        "targets": {"prep_vs_cli_per_core": TARGET_PER_CORE, "speedup_1_to_2_workers": TARGET_SPEEDUP},
        "results": results, "summary": summary, "sweep": sweep_rows,
        "note": "frames/s = source frames / wall seconds; best of --repeat runs; the Dask cluster is started "
                "before timing; prep's time includes its per-file checks and image stats, the CLI's does not.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out, doc, indent=2)

    print(f"\n{'case':14s}{'workers':>8s}{'frames/s':>10s}{'B/frame':>10s}{'size ratio':>12s}")
    for r in results:
        print(f"{r['case']:14s}{r['workers']:>8d}{r['frames_per_s']:>10.1f}{r['bytes_per_frame']:>10.0f}"
              f"{r['size_ratio']:>12.2f}")
    s = summary
    print(f"\nprep pyav vs ffmpeg CLI, 1 worker: {s['prep_pyav_vs_cli_1_worker']:.2f}x (target {TARGET_PER_CORE}x)")
    print(f"prep ffmpeg vs ffmpeg CLI, 1 worker: {s['prep_ffmpeg_vs_cli_1_worker']:.2f}x")
    print("speed-up 1 -> 2 workers: " + ", ".join(f"{k} {v:.2f}x" for k, v in s["speedup_1_to_2"].items())
          + f" (target {TARGET_SPEEDUP}x)")
    print(f"load average start {load_start}, end {os.getloadavg()} on {machine_cores()} cores")
    for row in sweep_rows:
        db = row["psnr_vs_crf0_db"] or float("inf")
        print(f"sweep {row['preset']:9s} crf {row['crf']:2d}: {row['bytes_per_frame']:7.0f} B/frame, "
              f"{row['size_ratio_vs_source']:5.2f}x smaller, PSNR vs crf 0 {db:.2f} dB")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
