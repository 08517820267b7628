"""A real multi-process Dask cluster on loopback for tests: `dask scheduler` plus `dask worker`
processes started as subprocesses, so that a test can kill one worker mid-run."""

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

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i's whole process group (the nanny and its worker process)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.workers[i].pid, signal.SIGKILL)

    def wait_for_workers(self, n: int, timeout: float = 60) -> None:
        from distributed import Client

        with Client(self.address, timeout="20s") as client:
            client.wait_for_workers(n, timeout=timeout)


def _dask_cli(*args: str, log: Path) -> subprocess.Popen[bytes]:
    dask = Path(sys.executable).with_name("dask")
    cmd = [str(dask)] if dask.exists() else [sys.executable, "-m", "distributed.cli.dask_spec"]
    return subprocess.Popen([*cmd, *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


@contextlib.contextmanager
def loopback_cluster(n_workers: int, log_dir: Path) -> Iterator[LoopbackCluster]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = _dask_cli("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                      log=log_dir / "scheduler.log")
    cluster = LoopbackCluster(address, sched)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.2)
        for i in range(n_workers):
            cluster.workers.append(_dask_cli(
                "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard", "--name", f"w{i}",
                "--memory-limit", "0", log=log_dir / f"worker{i}.log",
            ))
        cluster.wait_for_workers(n_workers)
        yield cluster
    finally:
        for p in [*cluster.workers, sched]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in [*cluster.workers, sched]:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
