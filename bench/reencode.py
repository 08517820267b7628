"""Benchmark `prep reencode` against a plain `ffmpeg` command line and against its own per-stage floor.

Corpus: synthetic v2.1, 480x640 h264 GOP 30, 3 cameras x 90-frame episodes (`--episodes`, default 48,
so that fixed costs are amortised), converted to 224x224 pad, h264-intra at the default crf, one
thread per process. In one run it prints and writes (bench/results/reencode.json):

1. floor: decode, scale (filter graph) and encode(+mux) measured in isolation on `--floor-files`
   files, CPU ms per frame; floor = their sum, as frames/s on one core;
2. per-frame breakdown of prep's stage in-process (same files): source probe (demux), decode+scale+
   encode+mux inside `encode_pyav` (the Python loop is what it costs above the floor), image stats,
   output check (header + demux of the written file), the rest of `reencode_unit` (temp name, fsync,
   rename, stats sidecar); then the Dask worker on top (in-worker stage time - in-process stage time,
   the worker's CPU and page faults per frame);
3. throughput, every case once per round, `--repeat` rounds (interleaved; best and median; load
   average with each run):
   `ffmpeg-cli` one process per file at 1 and 2 at a time (no checks, stats or metadata);
   `prep-inprocess`: `reencode_unit` over every file in this process, no Dask;
   `prep`: the command's job (`reencode_dataset`) through the runner, 1 and 2 workers, on a
   LocalCluster started before the clock exactly as the runner starts one (--scheduler);
4. experiments (bench-only): the same `prep` runs (`--variants`), and an A/B of the stage through the
   runner's map on one worker (`--ab-rounds`, `--ab-files`), on LocalClusters whose workers differ from
   the runner's settings (`runner.CLUSTER_SETTINGS`: no profiler, 1 s event-loop tick, 5 s system
   monitor) in one respect (`VARIANTS`): `dask defaults` (none of those settings, as before),
   `no-malloc-trim` (the nanny's MALLOC_TRIM_THRESHOLD_=65536 removed from the worker environment),
   `profiler-on` (distributed.worker.profile.enabled = True: a stack sample every 10 ms);
5. fixed costs: the whole `python -m pipeline.cli reencode` command on a `--fixed-episodes` corpus
   (default 6) at 1 and 2 workers: its wall time less the seconds of its own encode map (from its
   report); imports and a LocalCluster start/close timed alone;
6. quality: bytes per frame of every output, and PSNR (RGB) of the first `--quality-files` outputs
   against a crf-0 (lossless) encode of the same resized frames; `--sweep` adds x264 variants.

    python bench/reencode.py [--episodes 48] [--repeat 3] [--workdir DIR] [--sweep] [--variants LIST]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from masking import masked

from pipeline import __version__, atomic
from pipeline.clock import utc_now
from pipeline.formats import open_dataset
from pipeline.jobs.reencode import reencode_dataset
from pipeline.runner import RunConfig, machine_cores, open_engine
from pipeline.stages.reencode import ReencodeOptions, check_output, reencode_unit, reencode_units
from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.checks import Span
from pipeline.video.encode import (
    PROFILES,
    EncodeJob,
    Profile,
    _graph,
    encode_pyav,
    ffmpeg_command,
    h264_intra_options,
    open_source,
)
from pipeline.video.imagestats import SpanImageStats
from pipeline.video.probe import probe_video
from pipeline.video.resize import RESIZE_MODES, filter_chain

TARGET_PER_CORE = 1.3  # prep / ffmpeg CLI, frames/s at the same number of workers
TARGET_SPEEDUP = 1.9  # prep, 2 workers / 1 worker
TARGET_INPROCESS_GAP = 0.05  # in-process vs in-worker stage time
TARGET_FLOOR_SHARE = 0.80  # prep frames/s per worker / floor frames/s on one core
PROFILE = PROFILES["h264-intra"]
GEOMETRY = RESIZE_MODES["pad"](640, 480, 224, 224)
FRAMES_PER_EPISODE = 90


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def corpus(workdir: Path, episodes: int) -> Path:
    root = workdir / f"synth-v21-{episodes}"
    if not (root / "meta/info.json").is_file():
        write_synthetic(root, SynthSpec(version="v2.1", episodes=episodes))
    return root


def source_files(src: Path) -> list[Path]:
    ds, _ = open_dataset(src)
    return [src / rel for rel, _ in ds.iter_video_files()]


# ---- 1-2. floor and per-frame breakdown (in this process, one core) -----------------------------


@dataclasses.dataclass
class Timed:
    cpu_ms: float  # CPU ms per frame, best of the repeats
    wall_ms: float  # wall ms per frame of that repeat


def timed(files: list[Path], fn: Callable[[Path], Any], repeat: int, frames: int | None = None) -> Timed:
    n = frames if frames is not None else FRAMES_PER_EPISODE * len(files)
    best: Timed | None = None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        for f in files:
            fn(f)
        t = Timed((time.process_time() - c0) / n * 1e3, (time.perf_counter() - t0) / n * 1e3)
        if best is None or t.cpu_ms < best.cpu_ms:
            best = t
    assert best is not None
    return best


def decode_only(path: Path) -> None:
    inp, ist = open_source(path)
    with inp:
        for _ in inp.decode(ist):
            pass


def decode_filter(path: Path, keep: list[av.VideoFrame] | None = None) -> None:
    steps = filter_chain(GEOMETRY, PROFILE.pix_fmt)
    inp, ist = open_source(path)
    with inp:
        graph = None
        for frame in inp.decode(ist):
            if graph is None:
                graph = _graph(frame, steps)
            graph.push(frame)
            out = graph.pull()
            if keep is not None:
                assert isinstance(out, av.VideoFrame)
                keep.append(out)


def encode_frames(frames: list[av.VideoFrame], dst: Path | io.BytesIO, profile: Profile = PROFILE,
                  crf: int | None = None, mux: bool = True) -> None:
    """Encode resized frames already in memory (as encode_pyav does, without the decode)."""
    rate = Fraction(30)
    with av.open(dst if isinstance(dst, io.BytesIO) else str(dst), "w", format="mp4") as out:
        ost = out.add_stream(profile.encoder, rate=rate)
        assert isinstance(ost, av.VideoStream)
        ost.width, ost.height, ost.pix_fmt = 224, 224, profile.pix_fmt
        ost.codec_context.time_base = 1 / rate
        ost.codec_context.thread_count = 1
        ost.options = dict[str, object](profile.options(profile.default_crf if crf is None else crf))
        for i, frame in enumerate(frames):
            frame.pts, frame.time_base = i, 1 / rate
            packets = ost.encode(frame)
            if mux:
                out.mux(packets)
        packets = ost.encode(None)
        if mux:
            out.mux(packets)


def breakdown(src: Path, workdir: Path, n_files: int, repeat: int) -> dict[str, Any]:
    """CPU ms per frame of each part, measured alone; the floor; prep's stage in-process."""
    files = source_files(src)[:n_files]
    scratch = workdir / "breakdown"
    scratch.mkdir(exist_ok=True)
    dst = scratch / "out.mp4"
    resized: dict[Path, list[av.VideoFrame]] = {}
    for f in files:
        resized[f] = []
        decode_filter(f, resized[f])
    parts: dict[str, Timed] = {}
    parts["demux (source probe)"] = timed(files, lambda f: probe_video(f, pix_fmt=False), repeat)
    parts["decode"] = timed(files, decode_only, repeat)
    parts["decode+scale"] = timed(files, decode_filter, repeat)
    parts["encode (no mux)"] = timed(files, lambda f: encode_frames(resized[f], io.BytesIO(), mux=False), repeat)
    parts["encode+mux"] = timed(files, lambda f: encode_frames(resized[f], dst), repeat)
    parts["encode_pyav"] = timed(files, lambda f: encode_pyav(EncodeJob(f, dst, 30.0, GEOMETRY, PROFILE,
                                                                         PROFILE.default_crf)), repeat)

    def stats(f: Path) -> None:
        st = SpanImageStats([(0, FRAMES_PER_EPISODE)])
        for i, frame in enumerate(resized[f]):
            st.add(i, frame)
        st.result()

    parts["image stats"] = timed(files, stats, repeat)
    unit_opts = ReencodeOptions()
    ds, _ = open_dataset(src)
    probe_unit = next(iter(reencode_units(ds, scratch / "unit", unit_opts)))
    span = [Span(probe_unit.spans[0].episode, 0.0, None, FRAMES_PER_EPISODE)]
    parts["output check"] = timed(files, lambda f: check_output(dst, probe_unit, span, FRAMES_PER_EPISODE), repeat)
    units = [u for u in reencode_units(ds, scratch / "unit", unit_opts) if Path(u.src_root) / u.rel in set(files)]

    def whole(_f: Path) -> None:
        shutil.rmtree(scratch / "unit", ignore_errors=True)
        for u in units:
            r = reencode_unit(u)
            if r.status != "encoded":
                raise SystemExit(f"reencode_unit failed: {r.reason}")

    parts["reencode_unit (whole stage)"] = timed([files[0]], whole, repeat, frames=FRAMES_PER_EPISODE * len(units))
    for v in resized.values():
        v.clear()
    ms = {k: v.cpu_ms for k, v in parts.items()}
    scale = ms["decode+scale"] - ms["decode"]
    floor = ms["decode"] + scale + ms["encode+mux"]
    rows = [
        ("demux + header (source probe)", ms["demux (source probe)"]),
        ("decode (h264 480x640, 1 thread)", ms["decode"]),
        ("scale + pad (filter graph)", scale),
        ("encode (x264 veryfast intra 224)", ms["encode (no mux)"]),
        ("mux (mp4)", ms["encode+mux"] - ms["encode (no mux)"]),
        ("Python loop of encode_pyav", ms["encode_pyav"] - floor),
        ("image stats (rgb24 + histogram)", ms["image stats"]),
        ("output check (header + demux)", ms["output check"]),
    ]
    accounted = sum(v for _, v in rows)
    rows.append(("rest (fsync, rename, sidecar, ...)", ms["reencode_unit (whole stage)"] - accounted))
    return {"files": len(files), "cpu_ms_per_frame": ms, "wall_ms_per_frame": {k: v.wall_ms for k, v in parts.items()},
            "floor_ms_per_frame": floor, "floor_frames_per_s": 1e3 / floor,
            "stage_inprocess_ms_per_frame": ms["reencode_unit (whole stage)"],
            "rows": [{"part": k, "cpu_ms_per_frame": v} for k, v in rows], "load": load()}


# ---- 3-4. throughput ------------------------------------------------------------------------------


def cli_jobs(src: Path, out: Path) -> list[EncodeJob]:
    ds, _ = open_dataset(src)
    return [EncodeJob(src / rel, out / rel, ds.fps, GEOMETRY, PROFILE, PROFILE.default_crf)
            for rel, _ in ds.iter_video_files()]


def run_cli(src: Path, out: Path, workers: int) -> dict[str, float]:
    todo = cli_jobs(src, out)
    for j in todo:
        j.dst.parent.mkdir(parents=True, exist_ok=True)
    binary = shutil.which("ffmpeg") or "ffmpeg"

    def one(j: EncodeJob) -> None:
        subprocess.run(ffmpeg_command(j, binary), check=True, capture_output=True)

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, todo))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"seconds": wall, "cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)}


def run_inprocess(src: Path, out: Path) -> dict[str, float]:
    ds, _ = open_dataset(src)
    units = list(reencode_units(ds, out, ReencodeOptions()))
    c0, t0 = time.process_time(), time.perf_counter()
    stage = 0.0
    for u in units:
        r = reencode_unit(u)
        if r.status != "encoded":
            raise SystemExit(f"reencode_unit failed: {r.reason}")
        stage += r.seconds
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "stage_s": stage}


def _worker_usage() -> dict[str, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": r.ru_utime + r.ru_stime, "sys_s": r.ru_stime, "minflt": r.ru_minflt, "nvcsw": r.ru_nvcsw,
            "nivcsw": r.ru_nivcsw}


def run_prep(src: Path, out: Path, client: Any) -> dict[str, float]:
    """The command's job through the runner on an already started cluster (`--scheduler`)."""
    before = client.run(_worker_usage)
    with open_engine(RunConfig(scheduler=client.scheduler.address, progress=False)) as engine:
        report = reencode_dataset(src, out, ReencodeOptions(), engine)
    after = client.run(_worker_usage)
    if not report.ok:
        raise SystemExit(f"prep reencode failed: {report.failures[:3]}")
    delta = {k: sum(after[w][k] - before[w][k] for w in after) for k in after[next(iter(after))]}
    return {"seconds": report.seconds, **{f"worker_{k}": v for k, v in delta.items()}}


# Worker settings: "runner as is" is exactly what the runner applies (`runner.CLUSTER_SETTINGS`); the others
# differ from it in one respect each, so every row is a change the runner could make (or undo).
VARIANTS: dict[str, dict[str, Any]] = {
    "runner as is": {},
    "dask defaults": {"defaults": True},  # no CLUSTER_SETTINGS: the profiler on, a 20 ms tick, 0.5 s monitor
    "no-malloc-trim": {"drop_env": "MALLOC_TRIM_THRESHOLD_"},
    "profiler-on": {"config": {"distributed.worker.profile.enabled": True}},
}


@contextlib.contextmanager
def cluster(workers: int, variant: str) -> Iterator[Any]:
    """A LocalCluster started as the runner starts one, with the worker settings of `variant`."""
    import dask
    from distributed import Client, LocalCluster

    from pipeline.runner import CLUSTER_SETTINGS

    spec = VARIANTS[variant]
    settings: dict[str, Any] = {} if spec.get("defaults") else dict(CLUSTER_SETTINGS)
    settings.update(spec.get("config", {}))
    if "drop_env" in spec:
        env = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        env.pop(spec["drop_env"], None)
        settings["distributed.nanny.pre-spawn-environ"] = env
    with dask.config.set(settings):
        lc = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=logging.ERROR, memory_limit=0)
        client = Client(lc)
        try:
            yield client
        finally:
            client.close()
            lc.close()


@dataclasses.dataclass
class Case:
    name: str
    workers: int
    variant: str
    out: str  # output folder name under the workdir
    run: Callable[[Path], dict[str, float]]
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def run_rounds(cases: list[Case], workdir: Path, frames: int, repeat: int) -> list[dict[str, Any]]:
    """Every case once per round, `repeat` rounds (interleaved, so that a burst of load from other jobs on a
    shared machine does not fall on all runs of one case); best and median per case."""
    for k in range(repeat):
        print(f"  round {k + 1}/{repeat}", flush=True)
        for c in cases:
            out = workdir / c.out
            shutil.rmtree(out, ignore_errors=True)
            before = load()
            r = c.run(out)
            c.runs.append({**r, "load_before": before, "load_after": load()})
            extra = ""
            if "worker_cpu_s" in r:
                extra = (f"  worker CPU {r['worker_cpu_s'] / frames * 1e3:.3f} ms/frame, "
                         f"{r['worker_minflt'] / frames:.1f} faults/frame")
            print(f"    {c.name:15s} {c.variant:15s} workers={c.workers}  {frames / r['seconds']:7.1f} frames/s, "
                  f"load {before}" + extra, flush=True)
    return [{"case": c.name, "workers": c.workers, "variant": c.variant, "frames": frames, "runs": c.runs,
             "bytes_per_frame": video_bytes(workdir / c.out) / frames} for c in cases]


def derive(doc: dict[str, Any]) -> None:
    """Per-case figures and the summary, from the raw runs (so that an old result file can be re-derived)."""
    results, bd, frames = doc["results"], doc["breakdown"], doc["corpus"]["frames"]
    for r in results:
        secs = [float(run["seconds"]) for run in r["runs"]]
        best = min(range(len(secs)), key=lambda i: secs[i])
        r.update({"frames_per_s": frames / secs[best], "frames_per_s_median": frames / statistics.median(secs),
                  "spread": (max(secs) - min(secs)) / statistics.median(secs), "best": r["runs"][best],
                  # CPU of the worker processes (prep), of the ffmpeg processes (CLI), of this process (in-process)
                  "cpu_ms_per_frame_median": statistics.median(
                      float(run.get("worker_cpu_s", run.get("cpu_s", 0.0))) for run in r["runs"]) / frames * 1e3})

    def row(case: str, w: int, variant: str = "runner as is") -> dict[str, Any]:
        return dict(next(r for r in results if r["case"] == case and r["workers"] == w
                         and r["variant"] in (variant, "-")))

    def fps(case: str, w: int, variant: str = "runner as is") -> float:
        return float(row(case, w, variant)["frames_per_s"])

    def cpu(case: str, w: int, variant: str = "runner as is") -> float:
        return float(row(case, w, variant)["cpu_ms_per_frame_median"])

    summary: dict[str, Any] = {"variants": {}}
    for variant in dict.fromkeys(r["variant"] for r in results if r["case"] == "prep"):
        p1, p2 = fps("prep", 1, variant), fps("prep", 2, variant)
        summary["variants"][variant] = {
            "prep_vs_cli_1_worker": p1 / fps("ffmpeg-cli", 1),
            "prep_vs_cli_2_workers": p2 / fps("ffmpeg-cli", 2),
            "speedup_1_to_2": p2 / p1,
            "inprocess_vs_inworker_1": fps("prep-inprocess", 1) / p1 - 1,
            "share_of_floor_1_worker": p1 / bd["floor_frames_per_s"],
            "share_of_floor_2_workers": p2 / 2 / bd["floor_frames_per_s"],
            "worker_cpu_ms_per_frame_1": cpu("prep", 1, variant),
            "worker_cpu_ms_per_frame_2": cpu("prep", 2, variant),
            # CPU per frame is less disturbed by other jobs than wall time: the same ratios by CPU (medians)
            "cpu_cli_over_prep_1": cpu("ffmpeg-cli", 1) / cpu("prep", 1, variant),
            "cpu_cli_over_prep_2": cpu("ffmpeg-cli", 2) / cpu("prep", 2, variant),
            "cpu_inprocess_vs_inworker_1": cpu("prep", 1, variant) / cpu("prep-inprocess", 1) - 1,
            "cpu_floor_over_prep_1": bd["floor_ms_per_frame"] / cpu("prep", 1, variant),
            "cpu_floor_over_prep_2": bd["floor_ms_per_frame"] / cpu("prep", 2, variant),
        }
    summary["cli_speedup_1_to_2"] = fps("ffmpeg-cli", 2) / fps("ffmpeg-cli", 1)
    s0 = summary["variants"]["runner as is"]
    summary["targets_met"] = {
        "prep_vs_cli_per_core": min(s0["prep_vs_cli_1_worker"], s0["prep_vs_cli_2_workers"]) >= TARGET_PER_CORE,
        "speedup_1_to_2": s0["speedup_1_to_2"] >= TARGET_SPEEDUP,
        "inprocess_within_5pct_of_inworker": abs(s0["inprocess_vs_inworker_1"]) <= TARGET_INPROCESS_GAP,
        "share_of_floor": min(s0["share_of_floor_1_worker"], s0["share_of_floor_2_workers"]) >= TARGET_FLOOR_SHARE,
    }
    doc["summary"] = summary
    loads = [x for r in results for run in r["runs"] for x in (run["load_before"][0], run["load_after"][0])]
    doc["host"]["load1_min_max_during_runs"] = [min(loads), max(loads)]


def ab_experiment(src: Path, workdir: Path, variants: list[str], rounds: int, n_files: int) -> dict[str, Any]:
    """Worker settings A/B: the stage through the runner's map (`run_map`, its batching) on one worker, each
    variant once per round in turn, plus the stage in this process; CPU ms per frame of the worker process
    (less disturbed by other jobs than wall time) and the per-round difference against the runner as is."""
    from pipeline.stages.reencode import reencode_failed

    ds, _ = open_dataset(src)
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in ["in-process", *variants]}
    for k in range(rounds):
        for variant in runs:
            out = workdir / "out-ab"
            shutil.rmtree(out, ignore_errors=True)
            units = list(reencode_units(ds, out, ReencodeOptions()))[:n_files]
            frames = sum(s.frames_expected or 0 for u in units for s in u.spans)
            before = load()
            if variant == "in-process":
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                results = [reencode_unit(u) for u in units]
                wall = time.perf_counter() - t0
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                use = {"cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                       "minflt": r1.ru_minflt - r0.ru_minflt}
            else:
                with cluster(1, variant) as client:
                    (u0,) = client.run(_worker_usage).values()
                    t0 = time.perf_counter()
                    with open_engine(RunConfig(scheduler=client.scheduler.address, progress=False)) as engine:
                        results = [r for b in engine.map(reencode_unit, units, on_error=reencode_failed, desc="ab")
                                   for r in b.results]
                    wall = time.perf_counter() - t0
                    (u1,) = client.run(_worker_usage).values()
                use = {key: u1[key] - u0[key] for key in u0}
            if any(r.status != "encoded" for r in results):
                raise SystemExit(f"A/B {variant}: {[r.reason for r in results if r.status != 'encoded'][:3]}")
            row = {"cpu_ms_per_frame": use["cpu_s"] / frames * 1e3, "faults_per_frame": use["minflt"] / frames,
                   "wall_ms_per_frame": wall / frames * 1e3, "load_before": before[0]}
            runs[variant].append(row)
            print(f"    A/B round {k + 1} {variant:15s} CPU {row['cpu_ms_per_frame']:.3f} ms/frame, wall "
                  f"{row['wall_ms_per_frame']:.3f}, {row['faults_per_frame']:.1f} faults/frame, load {before[0]}",
                  flush=True)
    base = runs[variants[0]]
    summary = {v: {"cpu_ms_per_frame_median": statistics.median(r["cpu_ms_per_frame"] for r in rs),
                   "wall_ms_per_frame_median": statistics.median(r["wall_ms_per_frame"] for r in rs),
                   "faults_per_frame_median": statistics.median(r["faults_per_frame"] for r in rs),
                   "cpu_vs_runner_as_is_median": statistics.median(
                       r["cpu_ms_per_frame"] / b["cpu_ms_per_frame"] - 1 for r, b in zip(rs, base, strict=True))}
               for v, rs in runs.items()}
    return {"files": n_files, "rounds": rounds, "runs": runs, "summary": summary}


# ---- 5. fixed costs -------------------------------------------------------------------------------


def fixed_costs(src: Path, workdir: Path, frames: int) -> dict[str, Any]:
    """The whole command, timed from outside, against the seconds of its own encode map (its report)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import pipeline.cli, pipeline.commands.reencode, distributed"],
                   check=True, env=env)
    imports = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys"], check=True, env=env)
    bare = time.perf_counter() - t0
    from distributed import Client, LocalCluster

    cluster_s = {}
    for w in (1, 2):
        t0 = time.perf_counter()
        lc = LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=logging.ERROR, memory_limit=0)
        client = Client(lc)
        client.close()
        lc.close()
        cluster_s[w] = time.perf_counter() - t0
    rows = []
    for w in (1, 2):
        out = workdir / f"fixed-out-{w}"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "reencode", "--src", str(src), "--dst", "224",
                               "--out", str(out), "--workers", str(w), "--no-progress"],
                              capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"prep reencode failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        work = float(json.loads((out / "prep/reencode_report.json").read_text())["seconds"])
        rows.append({"workers": w, "command_wall_s": wall, "frames": frames, "encode_map_s": work,
                     "fixed_s": wall - work, "frames_per_s": frames / wall, "frames_per_s_in_map": frames / work,
                     "load": load()})
        shutil.rmtree(out, ignore_errors=True)
    return {"python_start_s": bare, "imports_s": imports - bare,
            "localcluster_start_close_s": cluster_s, "commands": rows}


# ---- 6. quality -----------------------------------------------------------------------------------


def rgb_frames(path: Path | io.BytesIO) -> np.ndarray:
    with av.open(path if isinstance(path, io.BytesIO) else str(path), "r") as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]).astype(np.float64)


def psnr(se: float, n: int) -> float | None:
    mse = se / n
    return None if mse == 0 else float(10 * np.log10(255**2 / mse))


def quality(src: Path, outs: dict[str, Path], n_files: int, sweep: bool) -> dict[str, Any]:
    """PSNR of each case's output against a crf-0 (lossless) encode of the same resized frames."""
    ds, _ = open_dataset(src)
    rels = [rel for rel, _ in ds.iter_video_files()][:n_files]
    refs: dict[str, np.ndarray] = {}
    resized: dict[str, list[av.VideoFrame]] = {}
    for rel in rels:
        resized[rel] = []
        decode_filter(src / rel, resized[rel])
        buf = io.BytesIO()
        encode_frames(resized[rel], buf, crf=0)
        buf.seek(0)
        refs[rel] = rgb_frames(buf)
    rows: dict[str, Any] = {}
    for name, out in outs.items():
        se, n, nbytes = 0.0, 0, 0
        for rel in rels:
            img = rgb_frames(out / rel)
            se += float(np.sum((img - refs[rel]) ** 2))
            n += img.size
            nbytes += (out / rel).stat().st_size
        rows[name] = {"psnr_vs_crf0_db": psnr(se, n), "bytes_per_frame": nbytes / (n / (224 * 224 * 3))}
    sweep_rows = []
    if sweep:
        base = h264_intra_options(PROFILE.default_crf)
        variants: dict[str, dict[str, str]] = {
            "veryfast (default)": {}, "superfast": {"preset": "superfast"}, "faster": {"preset": "faster"},
            "veryfast 8x8dct=0": {"x264-params": "8x8dct=0"}, "veryfast cabac=0": {"x264-params": "cabac=0"},
            "veryfast aq-mode=0": {"x264-params": "aq-mode=0"}, "veryfast psy=0": {"x264-params": "psy=0"},
        }
        for label, extra in variants.items():
            def options(crf: int, e: dict[str, str] = extra) -> dict[str, str]:
                return {**h264_intra_options(crf), **e}

            prof = dataclasses.replace(PROFILE, options=options)
            se, n, nbytes, cpu = 0.0, 0, 0, 0.0
            for rel in rels:
                buf = io.BytesIO()
                c0 = time.process_time()
                encode_frames(resized[rel], buf, profile=prof)
                cpu += time.process_time() - c0
                nbytes += buf.getbuffer().nbytes
                buf.seek(0)
                img = rgb_frames(buf)
                se += float(np.sum((img - refs[rel]) ** 2))
                n += img.size
            frames = n // (224 * 224 * 3)
            sweep_rows.append({"variant": label, "options": {**base, **extra},
                               "encode_cpu_ms_per_frame": cpu / frames * 1e3, "bytes_per_frame": nbytes / frames,
                               "psnr_vs_crf0_db": psnr(se, n)})
    return {"files": len(rels), "cases": rows, "x264_sweep": sweep_rows}


# ---- main -----------------------------------------------------------------------------------------


def ffmpeg_version() -> str:
    proc = subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True, check=False)
    return proc.stdout.split("\n")[0]


def video_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "videos").rglob("*.mp4"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=48, help="synthetic episodes (x3 cameras x 90 frames)")
    ap.add_argument("--fixed-episodes", type=int, default=6, help="corpus of the whole-command (fixed cost) run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (best and median are kept)")
    ap.add_argument("--floor-files", type=int, default=24, help="files of the floor / breakdown measurement")
    ap.add_argument("--quality-files", type=int, default=6, help="files of the PSNR measurement")
    ap.add_argument("--workdir", type=Path, help="where the corpora and outputs go (default: a temp folder)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"worker settings to run prep under (default: all of {', '.join(VARIANTS)})")
    ap.add_argument("--sweep", action="store_true", help="also x264 variants: CPU, size and PSNR")
    ap.add_argument("--ab-rounds", type=int, default=4, help="rounds of the worker-settings A/B (0: skip it)")
    ap.add_argument("--ab-files", type=int, default=48, help="files per A/B run")
    ap.add_argument("--out", type=Path, default=Path("bench/results/reencode.json"))
    ap.add_argument("--rederive", type=Path, help="only re-derive the figures of an earlier result file and print them")
    args = ap.parse_args()
    if args.rederive:
        doc = json.loads(args.rederive.read_text())
        derive(doc)
        atomic.write_json(args.out, masked(doc), indent=2)
        report(doc)
        print(f"wrote {args.out}")
        return 0

    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-reencode-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        src = corpus(workdir, args.episodes)
        small = corpus(workdir, args.fixed_episodes)
        ds, _ = open_dataset(src)
        frames = sum(len(ds.camera_keys) * e.frames_expected for e in ds.episodes)
        small_ds, _ = open_dataset(small)
        small_frames = sum(len(small_ds.camera_keys) * e.frames_expected for e in small_ds.episodes)

        print(f"floor and breakdown ({args.floor_files} files, in this process) ...", flush=True)
        bd = breakdown(src, workdir, args.floor_files, args.repeat)
        outs: dict[str, Path] = {}
        print(f"throughput ({frames} frames, {frames // FRAMES_PER_EPISODE} files) ...", flush=True)
        cases: list[Case] = []
        for w in (1, 2):

            def cli(out: Path, w: int = w) -> dict[str, float]:
                return run_cli(src, out, w)

            cases.append(Case("ffmpeg-cli", w, "-", f"out-cli-{w}", cli))
        cases.append(Case("prep-inprocess", 1, "-", "out-inproc", lambda out: run_inprocess(src, out)))
        variants = ["runner as is"] + [v for v in args.variants.split(",") if v and v != "runner as is"]
        for variant in variants:
            for w in (1, 2):

                def prep(out: Path, w: int = w, variant: str = variant) -> dict[str, float]:
                    with cluster(w, variant) as client:  # started and closed outside the clock
                        return run_prep(src, out, client)

                cases.append(Case("prep", w, variant, f"out-prep-{variant.replace(' ', '-')}-{w}", prep))
        results = run_rounds(cases, workdir, frames, args.repeat)
        outs["ffmpeg-cli"] = workdir / "out-cli-1"
        outs["prep"] = workdir / "out-prep-runner-as-is-1"

        ab = None
        if args.ab_rounds:
            print(f"worker settings A/B ({args.ab_files} files, 1 worker, {args.ab_rounds} rounds) ...", flush=True)
            ab = ab_experiment(src, workdir, list(VARIANTS), args.ab_rounds, args.ab_files)
        print("fixed costs ...", flush=True)
        fixed = fixed_costs(small, workdir, small_frames)
        print("quality ...", flush=True)
        qual = quality(src, outs, args.quality_files, args.sweep)

    doc = {
        "bench": "reencode", "prep_version": __version__, "created_utc": utc_now(), "command": sys.argv,
        "duration_s": time.perf_counter() - t_start,
        "host": {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
                 "cores_available": machine_cores(), "uptime_start": uptime_start,
                 "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip(),
                 "av": av.__version__,
                 "ffmpeg": ffmpeg_version()},
        "corpus": {"kind": "synthetic v2.1", "episodes": args.episodes, "cameras": 3,
                   "frames_per_episode": FRAMES_PER_EPISODE, "source": "480x640 h264 crf 23 GOP 30",
                   "files": frames // FRAMES_PER_EPISODE, "frames": frames, "fixed_cost_episodes": args.fixed_episodes},
        "conversion": {"size": "224x224", "resize": "pad", "profile": PROFILE.name, "crf": PROFILE.default_crf,
                       "preset": PROFILE.preset},
        "targets": {"prep_vs_cli_per_core": TARGET_PER_CORE, "speedup_1_to_2_workers": TARGET_SPEEDUP,
                    "inprocess_vs_inworker": TARGET_INPROCESS_GAP, "share_of_floor": TARGET_FLOOR_SHARE},
        "breakdown": bd, "results": results, "worker_settings_ab": ab, "fixed_costs": fixed, "quality": qual,
        "note": "frames/s = source frames / wall seconds of the encode phase (the runner's map; the cluster is "
                "started before the clock); best and median of --repeat runs, spread = (max-min)/median; "
                "breakdown = CPU ms per frame measured alone in this process; prep's time includes its per-file "
                "checks and image stats, the CLI's does not. CPU ms/frame = median over the runs of the CPU of the "
                "worker processes (prep), of the ffmpeg processes (CLI), of this process (in-process). The machine "
                "is shared: see the load averages.",
    }
    derive(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out, masked(doc), indent=2)
    report(doc)
    print(f"wrote {args.out}")
    return 0


def report(doc: dict[str, Any]) -> None:
    bd = doc["breakdown"]
    print(f"\nper-frame breakdown, CPU ms per frame, {bd['files']} files in-process (load {bd['load']}):")
    for row in bd["rows"]:
        print(f"  {row['part']:38s}{row['cpu_ms_per_frame']:8.3f}")
    print(f"  {'= stage in-process (reencode_unit)':38s}{bd['stage_inprocess_ms_per_frame']:8.3f}")
    print(f"  floor = decode + scale + encode+mux: {bd['floor_ms_per_frame']:.3f} ms/frame = "
          f"{bd['floor_frames_per_s']:.0f} frames/s per core")
    print(f"\n{'case':16s}{'variant':22s}{'workers':>8s}{'best f/s':>10s}{'median':>9s}{'spread':>8s}"
          f"{'B/frame':>9s}{'CPU ms/f':>9s}{'faults/f':>9s}  load (best run)")
    for r in doc["results"]:
        b = r["best"]
        cpu = f"{r['cpu_ms_per_frame_median']:.3f}"
        flt = f"{b['worker_minflt'] / r['frames']:.1f}" if "worker_minflt" in b else "-"
        print(f"{r['case']:16s}{r['variant']:22s}{r['workers']:>8d}{r['frames_per_s']:>10.1f}"
              f"{r['frames_per_s_median']:>9.1f}{r['spread']:>8.0%}{r['bytes_per_frame']:>9.0f}{cpu:>9s}{flt:>9s}"
              f"  {b['load_before']}")
    s = doc["summary"]
    t = doc["targets"]
    for variant, v in s["variants"].items():
        print(f"\n[{variant}] prep vs ffmpeg CLI: {v['prep_vs_cli_1_worker']:.2f}x at 1 worker, "
              f"{v['prep_vs_cli_2_workers']:.2f}x at 2 (target {t['prep_vs_cli_per_core']}x); 1 -> 2 workers "
              f"{v['speedup_1_to_2']:.2f}x (target {t['speedup_1_to_2_workers']}x, "
              f"CLI {s['cli_speedup_1_to_2']:.2f}x); "
              f"in-process {v['inprocess_vs_inworker_1']:+.1%} vs in-worker (target within "
              f"{t['inprocess_vs_inworker']:.0%}); {v['share_of_floor_1_worker']:.0%} / "
              f"{v['share_of_floor_2_workers']:.0%} of the floor per worker (target {t['share_of_floor']:.0%})\n"
              f"    by CPU per frame (medians): CLI/prep {v['cpu_cli_over_prep_1']:.2f}x / "
              f"{v['cpu_cli_over_prep_2']:.2f}x; in-worker {v['cpu_inprocess_vs_inworker_1']:+.1%} vs in-process; "
              f"floor/prep {v['cpu_floor_over_prep_1']:.0%} / {v['cpu_floor_over_prep_2']:.0%}")
    ab = doc.get("worker_settings_ab")
    if ab:
        print(f"\nworker settings A/B ({ab['files']} files, 1 worker, {ab['rounds']} rounds, medians; CPU of the "
              "worker process):")
        for v, row in ab["summary"].items():
            print(f"  {v:20s} CPU {row['cpu_ms_per_frame_median']:.3f} ms/frame "
                  f"({row['cpu_vs_runner_as_is_median']:+.1%} vs runner as is), "
                  f"wall {row['wall_ms_per_frame_median']:.3f}, "
                  f"{row['faults_per_frame_median']:.1f} page faults/frame")
    f = doc["fixed_costs"]
    print(f"\nfixed costs: python start {f['python_start_s']:.2f} s, imports {f['imports_s']:.2f} s, LocalCluster "
          "start+close " + ", ".join(f"{w} worker(s) {v:.2f} s" for w, v in f["localcluster_start_close_s"].items()))
    for c in f["commands"]:
        if "encode_map_s" not in c:  # a result file from before the fixed costs were read from the report
            continue
        print(f"  prep reencode, {doc['corpus']['fixed_cost_episodes']} episodes ({c['frames']} frames), "
              f"{c['workers']} worker(s): {c['command_wall_s']:.1f} s wall = {c['encode_map_s']:.1f} s encode map "
              f"({c['frames_per_s_in_map']:.0f} frames/s) + {c['fixed_s']:.1f} s fixed (imports, one LocalCluster, "
              f"metadata, output scan); {c['frames_per_s']:.0f} frames/s overall")
    q = doc["quality"]
    print(f"\nquality ({q['files']} files, RGB PSNR against a crf-0 encode of the same resized frames):")
    for name, row in q["cases"].items():
        print(f"  {name:12s} {row['bytes_per_frame']:7.0f} B/frame  {row['psnr_vs_crf0_db']:.2f} dB")
    for row in q["x264_sweep"]:
        print(f"  sweep {row['variant']:20s} {row['encode_cpu_ms_per_frame']:.3f} ms/frame  "
              f"{row['bytes_per_frame']:7.0f} B/frame  {row['psnr_vs_crf0_db']:.2f} dB")
    h = doc["host"]
    print(f"\nuptime at start: {h['uptime_start']}\nuptime at end:   {h['uptime_end']}\n"
          f"1-min load during the runs: {h['load1_min_max_during_runs'][0]}-{h['load1_min_max_during_runs'][1]} "
          f"on {h['cores_available']} cores")


if __name__ == "__main__":
    sys.exit(main())
