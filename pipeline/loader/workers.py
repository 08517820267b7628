"""Resident memory and CPU time of DataLoader worker processes (psutil, else /proc)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024


@dataclass(slots=True, frozen=True)
class WorkerSample:
    rss_mb: tuple[float, ...]  # one per live worker
    cpu_s: float  # user + system seconds, summed over workers

    @property
    def rss_mb_sum(self) -> float:
        return float(sum(self.rss_mb))

    @property
    def rss_mb_max(self) -> float:
        return float(max(self.rss_mb, default=0.0))


def worker_pids(iterator: Any) -> list[int]:
    """Pids of a DataLoader iterator's worker processes (empty with num_workers=0)."""
    workers = getattr(iterator, "_workers", None) or []
    return [int(w.pid) for w in workers if getattr(w, "pid", None)]


def _proc_sample(pid: int) -> tuple[float, float] | None:
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            return p.memory_info().rss / MB, float(t.user + t.system)
        except psutil.Error:
            return None
    try:  # Linux fallback
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def sample_workers(pids: Iterable[int]) -> WorkerSample:
    rss: list[float] = []
    cpu = 0.0
    for pid in pids:
        got = _proc_sample(pid)
        if got is not None:
            rss.append(got[0])
            cpu += got[1]
    return WorkerSample(tuple(rss), cpu)


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def machine_busy_s() -> tuple[float, int] | None:
    """CPU seconds the whole machine has spent busy since boot (user, nice, system, irq, softirq, steal: /proc/stat's
    `cpu` line) and how many CPUs it counts; None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    first = lines[0].split() if lines else []
    if not first or first[0] != "cpu" or len(first) < 8:
        return None
    ticks = [int(v) for v in first[1:]]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + (ticks[7] if len(ticks) > 7 else 0)
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return busy / os.sysconf("SC_CLK_TCK"), max(1, cpus)
