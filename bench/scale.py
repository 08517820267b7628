"""Benchmark prep at scale: scan and verify (no decode) of corpora from 10 k to 1 M episodes.

Corpora are built cheaply under --workdir (default /tmp/prep-scale, removed afterwards unless --keep):
- v2.1, N episodes x 3 cameras x 90 frames: three small h264 clips are encoded once and hard-linked
  (`os.link`) as every episode's videos (a scan or verify demuxes packets, it never decodes pixels; a hard
  link costs no inode and no bytes); every episode gets its own real parquet (timestamp, frame_index,
  episode_index, index, task_index, state, action: verify checks episode_index and the global index, so the
  parquets cannot be links) and its line in meta/episodes.jsonl;
- v3.0, 10,000 episodes with 10, 100 and 1,000 episodes per file: one video of k x 90 frames per k,
  hard-linked per camera and file; real data parquets and one episodes metadata parquet.

Each measurement runs in a fresh process (so its peak RSS is its own) with a LocalCluster of --workers
workers started before the clock: wall s, episodes/s, client peak RSS (the client process, which also
hosts the scheduler), workers' peak RSS (sum and max), tasks submitted. Then the kill-and-rerun check:
`prep scan` of the --resume-size corpus is SIGKILLed (its whole process group) once ~90 % of its units
are in completion records, rerun, and timed against an uninterrupted `prep scan`; the manifests must be
byte-identical apart from created_utc. Prints a table and writes bench/results/scale.json.

    python bench/scale.py                           # 10k, 100k, 1M v2.1; v3.0 10/100/1000 per file; resume
    python bench/scale.py --sizes 10000,100000 --per-file 10,1000 --resume-size 10000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
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
from pipeline.runner import machine_cores
from pipeline.synth import V21_DATA_PATH, V21_VIDEO_PATH, V30_DATA_PATH, V30_VIDEO_PATH, SynthSpec, _features
from pipeline.synth import encode_frames as encode_clip

CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist", "observation.images.cam_right_wrist")
FRAMES, FPS, STATE = 90, 30, 14
TASKS = ("pick up the cup", "put the pen in the holder", "fold the socks", "open the box")
SPEC = SynthSpec(frames=FRAMES, fps=FPS, height=48, width=64, cameras=CAMERAS, gop=30, state_dim=STATE)

# ---- corpora -----------------------------------------------------------------------------------------


def clip(path: Path, frames: int) -> Path:
    """A small h264 clip of `frames` frames (moving gradient), encoded once."""
    if not path.exists():
        y, x = np.mgrid[0:SPEC.height, 0:SPEC.width]
        frames_rgb = np.empty((frames, SPEC.height, SPEC.width, 3), dtype=np.uint8)
        for i in range(frames):
            frames_rgb[i, ..., 0] = (x * 4 + i * 3) % 256
            frames_rgb[i, ..., 1] = (y * 5 + i * 7) % 256
            frames_rgb[i, ..., 2] = (x + y + i) % 256
        path.parent.mkdir(parents=True, exist_ok=True)
        encode_clip(path, frames_rgb, SPEC)
    return path


class Links:
    """Hard links to one file, starting a fresh copy every `per_copy` links (ext4 allows 65,000 per inode)."""

    def __init__(self, src: Path, per_copy: int = 60_000) -> None:
        self.src, self.per_copy, self.n, self.copies = src, per_copy, 0, 0
        self.current = src

    def link(self, dst: Path) -> None:
        if self.n and self.n % self.per_copy == 0:
            self.copies += 1
            self.current = self.src.with_name(f"{self.src.stem}-{self.copies}{self.src.suffix}")
            if not self.current.exists():
                shutil.copyfile(self.src, self.current)
        os.link(self.current, dst)
        self.n += 1


def rows_table(episode: np.ndarray, frame: np.ndarray, start_index: int, task: np.ndarray) -> pa.Table:
    n = len(frame)
    vector = pa.ListArray.from_arrays(pa.array(np.arange(0, n * STATE + 1, STATE, dtype=np.int32)),
                                      pa.array(np.zeros(n * STATE, dtype=np.float32)))
    return pa.table({
        "observation.state": vector,
        "action": vector,
        "timestamp": pa.array((frame / FPS).astype(np.float32)),
        "frame_index": pa.array(frame.astype(np.int64)),
        "episode_index": pa.array(episode.astype(np.int64)),
        "index": pa.array(np.arange(start_index, start_index + n, dtype=np.int64)),
        "task_index": pa.array(task.astype(np.int64)),
    })


def info_json(version: str, episodes: int, files_per_camera: int) -> dict[str, Any]:
    v21 = version == "v2.1"
    return {
        "codebase_version": version, "robot_type": "synthetic", "total_episodes": episodes,
        "total_frames": episodes * FRAMES, "total_tasks": len(TASKS), "total_videos": files_per_camera * 3,
        "total_chunks": (episodes - 1) // 1000 + 1, "chunks_size": 1000, "fps": FPS,
        "splits": {"train": f"0:{episodes}"},
        "data_path": V21_DATA_PATH if v21 else V30_DATA_PATH,
        "video_path": V21_VIDEO_PATH if v21 else V30_VIDEO_PATH,
        "features": _features(SPEC),
    }


def build_v21(root: Path, episodes: int, clips: Path, link_parquet: bool = False) -> Path:
    """`link_parquet`: every episode's parquet is a hard link to one real 90-row file (for scan-only runs:
    the scan reads only the footer of a one-episode file, so its work is the same; verify would refuse)."""
    if (root / "meta/info.json").is_file():
        return root
    src = Links(clip(clips / f"clip-{FRAMES}.mp4", FRAMES))
    frame = np.arange(FRAMES)
    base = rows_table(np.zeros(FRAMES), frame, 0, np.zeros(FRAMES))
    parquet_links: Links | None = None
    if link_parquet:
        one = clips / "episode-rows.parquet"
        one.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(base, one, compression="snappy")
        parquet_links = Links(one)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    with open(root / "meta/episodes.jsonl", "w", encoding="utf-8") as fh:
        for ep in range(episodes):
            chunk = ep // 1000
            task = ep % len(TASKS)
            data = root / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=ep)
            if ep % 1000 == 0:
                data.parent.mkdir(parents=True, exist_ok=True)
            if parquet_links is not None:
                parquet_links.link(data)
            else:
                table = base.set_column(4, "episode_index", pa.array(np.full(FRAMES, ep, dtype=np.int64)))
                table = table.set_column(5, "index", pa.array(np.arange(ep * FRAMES, (ep + 1) * FRAMES,
                                                                        dtype=np.int64)))
                table = table.set_column(6, "task_index", pa.array(np.full(FRAMES, task, dtype=np.int64)))
                pq.write_table(table, data, compression="snappy")
            for cam in CAMERAS:
                video = root / V21_VIDEO_PATH.format(episode_chunk=chunk, episode_index=ep, video_key=cam)
                if ep % 1000 == 0:
                    video.parent.mkdir(parents=True, exist_ok=True)
                src.link(video)
            fh.write(json.dumps({"episode_index": ep, "tasks": [TASKS[task]], "length": FRAMES}) + "\n")
    with open(root / "meta/tasks.jsonl", "w", encoding="utf-8") as fh:
        for i, t in enumerate(TASKS):
            fh.write(json.dumps({"task_index": i, "task": t}) + "\n")
    atomic.write_json(root / "meta/info.json", info_json("v2.1", episodes, episodes), indent=2)
    return root


def build_v30(root: Path, episodes: int, per_file: int, clips: Path) -> Path:
    if (root / "meta/info.json").is_file():
        return root
    src = Links(clip(clips / f"clip-{per_file * FRAMES}.mp4", per_file * FRAMES))
    files = -(-episodes // per_file)
    meta: dict[str, list[Any]] = {k: [] for k in ("episode_index", "tasks", "length", "data/chunk_index",
                                                  "data/file_index", "dataset_from_index", "dataset_to_index")}
    for cam in CAMERAS:
        for k in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            meta[f"videos/{cam}/{k}"] = []
    for f in range(files):
        chunk, file_index = f // 1000, f % 1000
        first, last = f * per_file, min(episodes, (f + 1) * per_file)
        n = last - first
        ep = np.repeat(np.arange(first, last), FRAMES)
        table = rows_table(ep, np.tile(np.arange(FRAMES), n), first * FRAMES, ep % len(TASKS))
        data = root / V30_DATA_PATH.format(chunk_index=chunk, file_index=file_index)
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data)
        for cam in CAMERAS:
            video = root / V30_VIDEO_PATH.format(video_key=cam, chunk_index=chunk, file_index=file_index)
            video.parent.mkdir(parents=True, exist_ok=True)
            src.link(video)
        for i, e in enumerate(range(first, last)):
            meta["episode_index"].append(e)
            meta["tasks"].append([TASKS[e % len(TASKS)]])
            meta["length"].append(FRAMES)
            meta["data/chunk_index"].append(chunk)
            meta["data/file_index"].append(file_index)
            meta["dataset_from_index"].append(e * FRAMES)
            meta["dataset_to_index"].append((e + 1) * FRAMES)
            for cam in CAMERAS:
                meta[f"videos/{cam}/chunk_index"].append(chunk)
                meta[f"videos/{cam}/file_index"].append(file_index)
                meta[f"videos/{cam}/from_timestamp"].append(i * FRAMES / FPS)
                meta[f"videos/{cam}/to_timestamp"].append((i + 1) * FRAMES / FPS)
    (root / "meta/episodes/chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(meta), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": list(range(len(TASKS))), "task": list(TASKS)}), root / "meta/tasks.parquet")
    atomic.write_json(root / "meta/info.json", info_json("v3.0", episodes, files), indent=2)
    return root


# ---- one measurement in its own process ---------------------------------------------------------------

MEASURE = r"""
import json, sys, time
from pathlib import Path
from pipeline.runner import RunConfig, peak_rss_bytes, open_engine
command, root, out, workers = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
with open_engine(RunConfig(workers=workers, progress=False)) as engine:
    t0 = time.perf_counter()
    engine.client()
    startup = time.perf_counter() - t0
    t0 = time.perf_counter()
    if command == "scan":
        from pipeline.jobs.scan import scan_dataset
        manifest, _ = scan_dataset(root, out, engine)
        episodes, failed = manifest["totals"]["episodes"], manifest["totals"]["episodes_failed"]
    else:
        from pipeline.jobs.verify import verify_dataset
        from pipeline.stages.verify import VerifyOptions
        report = verify_dataset(root, VerifyOptions(), engine)
        episodes, failed = report.episodes_checked, len(report.failed_episodes)
    wall = time.perf_counter() - t0
    workers_rss = engine.worker_peak_rss()
    stats = engine.stats
print(json.dumps({"wall_s": wall, "cluster_start_s": startup, "episodes": episodes, "failed": failed,
                  "client_peak_rss": peak_rss_bytes(),  # VmHWM: ru_maxrss would carry this bench's peak over exec
                  "workers_peak_rss": sorted(workers_rss.values()), "tasks_submitted": stats.tasks_submitted,
                  "max_in_flight": stats.max_in_flight, "last_batch_sizes": stats.batch_sizes[-4:]}))
"""


def measure(command: str, root: Path, out: Path, workers: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", MEASURE, command, str(root), str(out), str(workers)],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{command} of {root} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if row["failed"]:
        raise SystemExit(f"{command} of {root}: {row['failed']} episodes failed")
    rss = row.pop("workers_peak_rss")
    row.update(command=command, episodes_per_s=row["episodes"] / row["wall_s"], workers_peak_rss_sum=sum(rss),
               workers_peak_rss_max=max(rss) if rss else 0, load_avg=os.getloadavg())
    return row


# ---- kill at ~90 % and rerun ---------------------------------------------------------------------------


def prep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", *args]


def covered(work: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for p in work.iterdir():
            if p.name.startswith("part-") and p.name.endswith(".jsonl.gz"):
                a, b = p.name[5:-9].split("-")
                total += int(b) - int(a)
    return total


def resume_check(root: Path, workdir: Path, workers: int, fraction: float) -> dict[str, Any]:
    args = ["--workers", str(workers), "--no-progress"]
    ref, out = workdir / "resume-ref.json", workdir / "resume.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t0 = time.perf_counter()
    subprocess.run(prep_cmd("scan", str(root), "--out", str(ref), *args), check=True, capture_output=True, env=env)
    uninterrupted = time.perf_counter() - t0
    units = json.loads(ref.read_text())["totals"]["episodes"]
    work = out.with_name(out.name + ".parts")
    proc = subprocess.Popen(prep_cmd("scan", str(root), "--out", str(out), *args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    t_kill = time.perf_counter()
    while proc.poll() is None and covered(work) < fraction * units:
        time.sleep(0.05)
    done = covered(work)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = time.perf_counter() - t_kill
    t0 = time.perf_counter()
    r = subprocess.run(prep_cmd("scan", str(root), "--out", str(out), *args), capture_output=True, text=True,
                       env=env, check=True)
    rerun = time.perf_counter() - t0

    def doc(p: Path) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(p.read_text())
        d.pop("created_utc")
        d.pop("episodes_table")
        return d

    same = doc(ref) == doc(out)
    text_same = [ln for ln in ref.read_text().splitlines() if "created_utc" not in ln and "episodes_table" not in ln] \
        == [ln for ln in out.read_text().splitlines() if "created_utc" not in ln and "episodes_table" not in ln]
    tables_same = ref.with_name("resume-ref.episodes.parquet").read_bytes() == \
        out.with_name("resume.episodes.parquet").read_bytes()
    return {"episodes": units, "uninterrupted_s": uninterrupted, "killed_after_s": killed_after,
            "covered_at_kill": done, "covered_fraction": done / units, "rerun_s": rerun,
            "rerun_pct_of_uninterrupted": 100 * rerun / uninterrupted, "manifest_identical_but_timestamps": same,
            "manifest_text_identical_but_timestamps": text_same, "episodes_table_byte_identical": tables_same,
            "resume_line": next((ln for ln in r.stderr.splitlines() if ln.startswith("[resume]")), None),
            "load_avg": os.getloadavg()}


# ---- a timed part of a scan too long to finish here ---------------------------------------------------------


def tree_rss(proc: Any) -> tuple[int, list[int]]:
    """RSS of a process and of its descendants that are Dask workers (spawned Python processes)."""
    import psutil

    client = proc.memory_info().rss
    workers = []
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "spawn_main" in " ".join(child.cmdline()) and "resource_tracker" not in " ".join(child.cmdline()):
                workers.append(child.memory_info().rss)
    return client, workers


def partial_scan(root: Path, workdir: Path, workers: int, seconds: float) -> dict[str, Any]:
    """`prep scan` of a corpus for `seconds`, then SIGKILL: RSS of the client and each worker sampled every
    2 s from the start (psutil), episodes finished (completion records) and their rate. Shows whether memory
    stays flat while a corpus of this size is opened, planned and streamed, without scanning all of it."""
    import psutil

    out = workdir / f"partial-{root.name}.json"
    work = out.with_name(out.name + ".parts")
    shutil.rmtree(work, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t0 = time.perf_counter()
    proc = subprocess.Popen(prep_cmd("scan", str(root), "--out", str(out), "--workers", str(workers),
                                     "--no-progress"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)
    ps = psutil.Process(proc.pid)
    samples: list[dict[str, Any]] = []
    first_done: tuple[float, int] | None = None
    while proc.poll() is None and time.perf_counter() - t0 < seconds:
        with contextlib.suppress(psutil.Error):
            client, wrss = tree_rss(ps)
            done = covered(work)
            t = time.perf_counter() - t0
            if done and first_done is None:
                first_done = (t, done)
            samples.append({"t_s": round(t, 1), "episodes_done": done, "client_rss": client,
                            "workers_rss": wrss})
        time.sleep(2.0)
    finished = proc.poll() is not None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    wall = time.perf_counter() - t0
    done = covered(work)
    shutil.rmtree(work, ignore_errors=True)
    streaming = [s for s in samples if s["episodes_done"]]
    rate = None
    if first_done and streaming and streaming[-1]["t_s"] > first_done[0]:
        rate = (streaming[-1]["episodes_done"] - first_done[1]) / (streaming[-1]["t_s"] - first_done[0])

    def peak(rows: list[dict[str, Any]], key: str) -> int:
        return max((r[key] if key == "client_rss" else max(r[key], default=0)) for r in rows) if rows else 0

    half = streaming[: len(streaming) // 2]
    return {"episodes_total": sum(1 for _ in open(root / "meta/episodes.jsonl", "rb")), "seconds": wall,
            "finished": finished, "episodes_done": done, "episodes_per_s_streaming": rate,
            "first_batch_done_s": first_done[0] if first_done else None,
            "client_peak_rss": peak(samples, "client_rss"), "workers_peak_rss_max": peak(samples, "workers_rss"),
            "client_peak_rss_first_half": peak(half, "client_rss"),
            "workers_peak_rss_max_first_half": peak(half, "workers_rss"),
            "samples": samples, "load_avg": os.getloadavg()}


# ---- main -------------------------------------------------------------------------------------------


def fit(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    x = np.array([r["episodes"] for r in rows], dtype=float)
    y = np.array([r[key] for r in rows], dtype=float)
    if len(x) < 2:
        return {}
    slope, intercept = np.polyfit(x, y, 1)
    return {"bytes_per_episode": float(slope), "intercept_bytes": float(intercept),
            "at_1M": float(intercept + slope * 1e6), "at_8M": float(intercept + slope * 8e6)}


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'corpus':<20}{'command':<8}{'episodes':>10}{'wall s':>9}{'ep/s':>8}{'client MB':>11}"
            f"{'workers MB sum':>16}{'max':>7}{'tasks':>8}{'load':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['corpus']:<20}{r['command']:<8}{r['episodes']:>10,}{r['wall_s']:>9.1f}"
                     f"{r['episodes_per_s']:>8.0f}{r['client_peak_rss'] / 1e6:>11.0f}"
                     f"{r['workers_peak_rss_sum'] / 1e6:>16.0f}{r['workers_peak_rss_max'] / 1e6:>7.0f}"
                     f"{r['tasks_submitted']:>8,}{r['load_avg'][0]:>6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000", help="v2.1 corpus sizes (episodes)")
    ap.add_argument("--per-file", default="10,100,1000", help="v3.0 episodes per file ('' to skip)")
    ap.add_argument("--v30-episodes", type=int, default=10_000)
    ap.add_argument("--commands", default="scan,verify")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--resume-size", type=int, default=100_000, help="0 to skip the kill-and-rerun check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/prep-scale"))
    ap.add_argument("--keep", action="store_true", help="keep the corpora")
    ap.add_argument("--partial", default="", metavar="EPISODES:SECONDS", help="also scan a v2.1 corpus of EPISODES "
                    "(parquets hard-linked) for SECONDS, then kill it: memory while opening, planning and "
                    "streaming a corpus too large to scan to the end here")
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    per_file = [int(s) for s in args.per_file.split(",") if s]
    commands = args.commands.split(",")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"disk: {shutil.disk_usage(args.workdir).free / 1e9:.1f} GB free; inodes free: "
          f"{os.statvfs(args.workdir).f_favail:,}", flush=True)
    result: dict[str, Any] = {
        "bench": "scale",
        "machine": {"cores": machine_cores(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg_start": os.getloadavg()},
        "corpus": {"cameras": len(CAMERAS), "frames_per_episode": FRAMES, "video": f"h264 {SPEC.width}x{SPEC.height}"
                   " GOP 30, hard-linked", "workers": args.workers},
        "runs": [], "builds": [],
    }
    clips = args.workdir / "clips"
    try:
        if args.partial:
            n, secs = (int(x) for x in args.partial.split(":"))
            t0 = time.perf_counter()
            root = build_v21(args.workdir / f"v21-{n}-linked", n, clips, link_parquet=True)
            result["builds"].append({"corpus": f"v2.1 {n} (linked parquet)", "seconds": time.perf_counter() - t0})
            print(f"built v2.1 {n:,} episodes (linked parquet) in {time.perf_counter() - t0:.0f} s", flush=True)
            p = result["partial"] = partial_scan(root, args.workdir, args.workers, secs)
            print(f"partial scan of {n:,}: {p['episodes_done']:,} episodes in {p['seconds']:.0f} s "
                  f"(first batch done at {p['first_batch_done_s']} s, {p['episodes_per_s_streaming'] or 0:.0f} "
                  f"episodes/s streaming); client peak {p['client_peak_rss'] / 1e6:.0f} MB (first half "
                  f"{p['client_peak_rss_first_half'] / 1e6:.0f}), worker peak {p['workers_peak_rss_max'] / 1e6:.0f} "
                  f"MB (first half {p['workers_peak_rss_max_first_half'] / 1e6:.0f}); load {p['load_avg'][0]:.1f}",
                  flush=True)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        for n in sorted(set(sizes) | ({args.resume_size} if args.resume_size else set())):
            t0 = time.perf_counter()
            root = build_v21(args.workdir / f"v21-{n}", n, clips)
            result["builds"].append({"corpus": f"v2.1 {n}", "seconds": time.perf_counter() - t0})
            print(f"built v2.1 {n:,} episodes in {time.perf_counter() - t0:.0f} s", flush=True)
            if n in sizes:
                for c in commands:
                    row = {"corpus": f"v2.1 {n:,}", **measure(c, root, args.workdir / f"m-{n}.json", args.workers)}
                    result["runs"].append(row)
                    print(table([row]).splitlines()[-1], flush=True)
            if n == args.resume_size:
                result["resume"] = resume_check(root, args.workdir, args.workers, 0.9)
                print(f"resume: {result['resume']}", flush=True)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        for k in per_file:
            t0 = time.perf_counter()
            root = build_v30(args.workdir / f"v30-{k}", args.v30_episodes, k, clips)
            print(f"built v3.0 {args.v30_episodes:,} episodes, {k}/file in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            for c in commands:
                row = {"corpus": f"v3.0 {k}/file", "episodes_per_file": k,
                       **measure(c, root, args.workdir / f"m30-{k}.json", args.workers)}
                result["runs"].append(row)
                print(table([row]).splitlines()[-1], flush=True)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    v21 = [r for r in result["runs"] if r["corpus"].startswith("v2.1")]
    summary: dict[str, Any] = {}
    for c in commands:
        rows = [r for r in v21 if r["command"] == c]
        if rows:
            small, big = min(rows, key=lambda r: r["episodes"]), max(rows, key=lambda r: r["episodes"])
            summary[c] = {"client_rss_fit": fit(rows, "client_peak_rss"),
                          "worker_max_rss_fit": fit(rows, "workers_peak_rss_max"),
                          "episodes_per_s_largest_vs_smallest": big["episodes_per_s"] / small["episodes_per_s"]}
        v30 = {r["episodes_per_file"]: r for r in result["runs"] if r.get("episodes_per_file") and r["command"] == c}
        if v30:
            lo, hi = min(v30), max(v30)
            summary.setdefault(c, {})["v30_cost_per_episode_ratio"] = (v30[hi]["wall_s"] / v30[hi]["episodes"]) / (
                v30[lo]["wall_s"] / v30[lo]["episodes"])
    result["summary"] = summary
    result["machine"]["load_avg_end"] = os.getloadavg()
    result["machine"]["bench_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print()
    print(table(result["runs"]))
    print(json.dumps(summary, indent=2))
    if "resume" in result:
        r = result["resume"]
        print(f"kill at {r['covered_fraction']:.0%} of {r['episodes']:,} episodes: rerun {r['rerun_s']:.1f} s = "
              f"{r['rerun_pct_of_uninterrupted']:.1f} % of {r['uninterrupted_s']:.1f} s uninterrupted; manifest "
              f"identical but timestamps: {r['manifest_text_identical_but_timestamps']}; table byte-identical: "
              f"{r['episodes_table_byte_identical']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
