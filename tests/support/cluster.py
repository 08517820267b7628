"""A real multi-process Dask cluster on loopback for tests: `dask scheduler` plus `dask worker`
processes started as subprocesses, so that a test can kill, freeze (SIGSTOP) or starve one worker, or the
scheduler, mid-run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LoopbackCluster:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_dir: Path = Path(".")
    port: int = 0

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i's whole process group (the nanny and its worker process)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.workers[i].pid, signal.SIGKILL)

    def kill_scheduler(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.scheduler.pid, signal.SIGKILL)
        self.scheduler.wait()

    def signal_worker(self, i: int, sig: signal.Signals) -> None:
        """Send `sig` to worker i's process group (SIGSTOP freezes it as an NFS stall would, SIGCONT resumes)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.workers[i].pid, sig)

    def add_worker(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        worker = _dask_cli("worker", self.address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard", "--name",
                           name, "--memory-limit", "0", log=self.log_dir / f"{name}.log", env=env)
        self.workers.append(worker)
        return worker

    def wait_for_workers(self, n: int, timeout: float = 60) -> None:
        from distributed import Client

        with Client(self.address, timeout="20s") as client:
            client.wait_for_workers(n, timeout=timeout)


def _dask_cli(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    dask = Path(sys.executable).with_name("dask")
    cmd = [str(dask)] if dask.exists() else [sys.executable, "-m", "distributed.cli.dask_spec"]
    return subprocess.Popen([*cmd, *args], stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)


def start_scheduler(port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    sched = _dask_cli("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                      log=log_dir / "scheduler.log")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.2)
    return sched


@contextlib.contextmanager
def loopback_cluster(n_workers: int, log_dir: Path, *, port: int | None = None,
                     worker_env: dict[str, str] | None = None) -> Iterator[LoopbackCluster]:
    """A scheduler on 127.0.0.1 (`port`, or a free one) and `n_workers` single-threaded workers w0, w1, ...
    (`worker_env`: their environment instead of this process's); every process is ended on exit."""
    port = port or free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = start_scheduler(port, log_dir)
    cluster = LoopbackCluster(address, sched, log_dir=log_dir, port=port)
    try:
        for i in range(n_workers):
            cluster.add_worker(f"w{i}", env=worker_env)
        if n_workers:
            cluster.wait_for_workers(n_workers)
        yield cluster
    finally:
        procs = [*cluster.workers, cluster.scheduler]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGCONT)  # a frozen worker cannot act on SIGTERM
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
