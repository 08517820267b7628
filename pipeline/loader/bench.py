"""The timing loop of `prep bench dataloader`: one `RunSpec` in, one JSON-ready run record out.

A run builds a DataLoader (persistent workers, prefetch, pinned memory on cuda) over the items,
then measures two phases on the same workers:

1. ceiling: batches pulled back to back with no step: loader samples/s, worker CPU seconds per
   sample (the per-core cost), decode ms per frame;
2. train: each batch is followed by a step of `step_s` (sleep on cpu, GPU work on cuda);
   data_time = seconds blocked in `next(loader)`, percentiles after `warmup_steps`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

from pipeline.errors import PrepError
from pipeline.loader.guard import Guarded
from pipeline.loader.step import make_step
from pipeline.loader.verdict import busy_guard, explain, interval_text, p95_verdict, verdict_word
from pipeline.loader.workers import WorkerSample, machine_busy_s, sample_workers, self_cpu_s, worker_pids
from pipeline.storage import Location

# The budget model of docs/pi05-pretraining-sizing: wall_s(B) = 0.00359 * B + 0.25, B = global batch.
STEP_S_PER_SAMPLE = 0.00359
STEP_OVERHEAD_S = 0.25
GPUS_PER_NODE = 8
DATA_TIME_TARGET_S = 0.013  # data_time of the reference run
SAMPLES_FOREVER = 10**12  # sampler length: runs stop by step count or clock, never by exhaustion


def auto_step_s(per_gpu_batch: int, gpus: int = GPUS_PER_NODE) -> float:
    """wall_s of the global batch (per-GPU batch x gpus) from the budget model."""
    return STEP_S_PER_SAMPLE * per_gpu_batch * gpus + STEP_OVERHEAD_S


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass(slots=True, frozen=True)
class RunSpec:
    root: Path | Location  # a local folder, or where a dataset lives (an object-store prefix: the prep loader only)
    label: str
    loader: str = "prep"  # prep | lerobot
    batch: int = 256
    workers: int = 2
    train_steps: int = 10
    ceiling_steps: int = 4
    warmup_steps: int = 2
    step_s: float = 0.0
    step_source: str = "auto"  # auto | fixed
    device: str = "cpu"
    horizon: int = 50
    prefetch_factor: int = 2
    seed: int = 0
    threshold_s: float = DATA_TIME_TARGET_S
    video_backend: str | None = None  # lerobot only


@dataclass(slots=True)
class Tally:
    """What the batches themselves report (errors, worker-side timings)."""

    samples: int = 0
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    decode_s: float = 0.0
    decode_known: bool = True

    def add(self, batch: dict[str, Any]) -> None:
        err = batch["_error"]
        self.samples += int(err.numel())
        n_err = int(err.sum())
        if n_err:
            self.errors += n_err
            msgs = [m for m in batch["_error_msg"] if m]
            self.error_examples.extend(msgs[: max(0, 5 - len(self.error_examples))])
        self.sample_s.extend(batch["_sample_s"].tolist())
        dec = batch["_decode_s"]
        if torch.isnan(dec).any():
            self.decode_known = False
        else:
            self.decode_s += float(dec.sum())


def build_items(spec: RunSpec) -> Guarded:
    if spec.loader == "prep":
        from pipeline.loader.dataset import PrepFrameDataset

        return Guarded(PrepFrameDataset(spec.root, horizon=spec.horizon))
    if spec.loader == "lerobot":
        from pipeline.loader.lerobot_source import LeRobotItems

        if isinstance(spec.root, Location):
            if not spec.root.is_local:
                raise PrepError(f"{spec.root.shown}: --loader lerobot reads a local folder (LeRobotDataset opens its "
                                "files by path); use --loader prep, or copy the dataset to a local folder first")
            return Guarded(LeRobotItems(spec.root.path, horizon=spec.horizon, video_backend=spec.video_backend))
        return Guarded(LeRobotItems(spec.root, horizon=spec.horizon, video_backend=spec.video_backend))
    raise ValueError(f"unknown loader {spec.loader!r} (prep or lerobot)")


def make_loader(items: Guarded, spec: RunSpec) -> DataLoader[dict[str, Any]]:
    gen = torch.Generator()
    gen.manual_seed(spec.seed)
    sampler = RandomSampler(items, replacement=True, num_samples=SAMPLES_FOREVER, generator=gen)
    extra: dict[str, Any] = {}
    if spec.workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": spec.prefetch_factor}
    return DataLoader(
        items,
        batch_size=spec.batch,
        sampler=sampler,
        num_workers=spec.workers,
        pin_memory=spec.device == "cuda",
        drop_last=True,
        **extra,
    )


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        nan = float("nan")
        return {"p50": nan, "p95": nan, "p99": nan, "max": nan, "mean": nan}
    a = np.asarray(values, dtype=np.float64)
    return {
        "p50": float(np.percentile(a, 50)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "mean": float(a.mean()),
    }


def shutdown(iterator: Iterator[Any]) -> None:
    stop = getattr(iterator, "_shutdown_workers", None)
    if callable(stop):
        stop()


def verdict_line(p95: float, batch: int, workers: int, decided: dict[str, Any], steps: int) -> str:
    """The verdict, given only when the p95's confidence interval clears the threshold (`p95_verdict`) and the
    machine was not busy with other work (`busy_guard`)."""
    busy = decided["other_cpu_share"] if decided.get("withheld") else None
    return (f"data_time p95 = {p95:.4f} s at per-GPU batch {batch} with {workers} worker{'s' * (workers != 1)}: "
            f"{verdict_word(decided['keeps_up'], decided['rerun_steps'], busy)} "
            f"({interval_text(decided['p95_interval_s'], steps)})")


class OtherLoad:
    """The share of the machine's CPU that processes other than this one and its loader workers used between
    `start()` and `share()` (None where /proc/stat cannot be read)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.t0 = 0.0
        self.m0: tuple[float, int] | None = None
        self.own0 = 0.0

    def _own(self) -> float:
        return self_cpu_s() + (sample_workers(self.pids).cpu_s if self.pids else 0.0)

    def start(self) -> None:
        self.m0, self.own0, self.t0 = machine_busy_s(), self._own(), time.perf_counter()

    def share(self) -> float | None:
        m1, own1, elapsed = machine_busy_s(), self._own(), time.perf_counter() - self.t0
        if self.m0 is None or m1 is None or elapsed <= 0:
            return None
        others = (m1[0] - self.m0[0]) - (own1 - self.own0)
        return max(0.0, others) / (elapsed * m1[1])


def _cpu_now(pids: list[int]) -> float:
    return sample_workers(pids).cpu_s if pids else self_cpu_s()


def train_phase(it: Iterator[Any], spec: RunSpec, tally: Tally,
                pids: list[int]) -> tuple[list[float], list[float], float | None]:
    """Phase 2, the training loop at step_s: per-step data_time and step time after warm-up, and the share of the
    machine's CPU other processes used meanwhile (`OtherLoad`)."""
    step = make_step(spec.step_s, spec.device)
    load = OtherLoad(pids)
    load.start()
    data_times: list[float] = []
    step_times: list[float] = []
    for k in range(spec.warmup_steps + spec.train_steps):
        t = time.perf_counter()
        batch = next(it)
        dt = time.perf_counter() - t
        tally.add(batch)
        took = step(batch)
        # Free the consumed batch outside the timed region: unmapping its shared memory
        # (~20 ms for 115 MB) is not time spent waiting for the next batch.
        del batch
        if k >= spec.warmup_steps:
            data_times.append(dt)
            step_times.append(took)
    return data_times, step_times, load.share()


def measure(spec: RunSpec, items: Guarded | None = None) -> dict[str, Any]:
    """Run both phases for one spec and return its record (see schemas/bench.schema.json `run`)."""
    items = items if items is not None else build_items(spec)
    loader = make_loader(items, spec)
    tally = Tally()
    rss_samples: list[WorkerSample] = []
    started = time.perf_counter()
    it = iter(loader)
    try:
        pids = worker_pids(it)
        first_batch_s = time.perf_counter()
        for _ in range(spec.warmup_steps):
            tally.add(next(it))
        first_batch_s = time.perf_counter() - first_batch_s

        # Phase 1: the ceiling, no step time.
        cpu0, t0 = _cpu_now(pids), time.perf_counter()
        n0 = tally.samples
        for _ in range(spec.ceiling_steps):
            tally.add(next(it))
        elapsed = time.perf_counter() - t0
        cpu_s = _cpu_now(pids) - cpu0
        ceiling_samples = tally.samples - n0
        rss_samples.append(sample_workers(pids))

        data_times, step_times, other_share = train_phase(it, spec, tally, pids)
        rss_samples.append(sample_workers(pids))
    finally:
        shutdown(it)
    dt_stats = percentiles(data_times)
    decided = busy_guard(p95_verdict(data_times, spec.threshold_s), other_share)
    ceiling_sps = ceiling_samples / elapsed if elapsed > 0 else float("inf")
    n_cams = len(getattr(items.source, "cameras", ())) or 1
    record: dict[str, Any] = {
        "label": spec.label,
        "root": str(spec.root),
        "loader": spec.loader,
        "loader_detail": loader_detail(items),
        "batch": spec.batch,
        "workers": spec.workers,
        "prefetch_factor": spec.prefetch_factor,
        "device": spec.device,
        "horizon": spec.horizon,
        "cameras": n_cams,
        "step_s": spec.step_s,
        "step_source": spec.step_source,
        "ceiling": {
            "steps": spec.ceiling_steps,
            "samples": ceiling_samples,
            "elapsed_s": elapsed,
            "samples_per_s": ceiling_sps,
            "frames_per_s": ceiling_sps * n_cams,
            "worker_cpu_s": cpu_s,
            "samples_per_cpu_s": ceiling_samples / cpu_s if cpu_s > 0 else None,
        },
        "train": {
            "steps": spec.train_steps,
            "warmup_steps": spec.warmup_steps,
            "data_time_s": dt_stats,
            "step_s_measured": float(np.mean(step_times)) if step_times else None,
            "data_time_per_step": data_times,
        },
        "first_batches_s": first_batch_s,
        "sample_ms": {k: v * 1000 for k, v in percentiles(tally.sample_s).items()},
        "decode_ms_per_frame": (tally.decode_s / (tally.samples * n_cams) * 1000
                                if tally.decode_known and tally.samples else None),
        "worker_rss_mb": {
            "max": max((s.rss_mb_max for s in rss_samples), default=0.0),
            "sum": max((s.rss_mb_sum for s in rss_samples), default=0.0),
        },
        "samples": tally.samples,
        "errors": tally.errors,
        "error_examples": tally.error_examples,
        "threshold_s": spec.threshold_s,
        "keeps_up": decided["keeps_up"],
        "p95_interval_s": decided["p95_interval_s"],
        "confidence": decided["confidence"],
        "rerun_steps": decided["rerun_steps"],
        "other_cpu_share": decided["other_cpu_share"],
        "wall_s": time.perf_counter() - started,
        "verdict": verdict_line(dt_stats["p95"], spec.batch, spec.workers, decided, len(data_times)),
    }
    record["explain"] = explain(json_safe(record), os.getloadavg()[0], available_cores())
    return json_safe(record)


def loader_detail(items: Guarded) -> str:
    src = items.source
    backend = getattr(src, "video_backend", None)
    if backend is not None:
        from pipeline.loader.lerobot_source import lerobot_version

        return f"lerobot {lerobot_version()} LeRobotDataset, video_backend={backend}, openpi-style letterbox"
    return "prep PrepFrameDataset, PyAV decoders kept open per worker"


def json_safe(obj: Any) -> Any:
    """NaN/inf -> None, so the record is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj
