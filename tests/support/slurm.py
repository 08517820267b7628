"""A real single-node SLURM for tests and benchmarks: Debian's `slurm-wlm` and `munge`, started directly (no
systemd), every path under one temp folder, free ports, `SLURM_CONF` exported to the clients.

    with single_node_slurm(tmp_path) as slurm:      # skips the test (with the reason) where it cannot start
        slurm.env                                     # the environment for sbatch/squeue/scancel and prep
        slurm.squeue()                                # [(job id, state, name)] of every job in the queue

`python tests/support/slurm.py` starts one and holds it until Ctrl-C (it prints `export SLURM_CONF=...`).

What it needs: root (slurmd runs jobs as their user and must be root; munged's key and socket), the packages
(`apt-get install slurm-wlm munge`), and a cgroup filesystem on /sys/fs/cgroup (slurmd 22.05 refuses to start
without one, even with proctrack/linuxproc and task/none; inside a debootstrap root: `mount --rbind
/sys/fs/cgroup $ROOT/sys/fs/cgroup`, as .ci/fresh_root.sh does). Where any is missing, `skip_reason()` says
which, and the fixture skips with it: the tests never pass without a SLURM.

Teardown always: `scancel` every job, wait until `squeue` is empty (killing slurmd does not end running jobs:
their slurmstepd survives and ignores SIGTERM), then stop slurmd, slurmctld and munged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NODE = "prepnode"
PARTITION = "debug"  # the default partition
HOLD_PARTITION = "held"  # a partition that is DOWN: jobs submitted there stay PENDING (the queue note's test)
DAEMONS = ("munged", "slurmctld", "slurmd")
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol")


def skip_reason() -> str | None:
    """Why a single-node SLURM cannot start here, or None."""
    if sys.platform != "linux":
        return "needs Linux"
    missing = [p for p in PROGRAMS if not _which(p)]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "needs root (slurmd runs the jobs as their user; munged's key)"
    if not os.path.isdir("/sys/fs/cgroup") or not os.listdir("/sys/fs/cgroup"):
        return "no cgroup filesystem on /sys/fs/cgroup (slurmd 22.05 needs one: mount --rbind /sys/fs/cgroup)"
    return None


def _which(program: str) -> str | None:
    return shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class SingleNodeSlurm:
    root: Path
    conf: Path
    env: dict[str, str]
    cpus: int
    memory_mb: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A SLURM client command (sbatch, squeue, scancel, scontrol) against this cluster."""
        return subprocess.run([_which(cmd[0]) or cmd[0], *cmd[1:]], env=self.env, capture_output=True, text=True,
                              check=check, timeout=timeout)

    def squeue(self) -> list[tuple[str, str, str]]:
        """(job id, state, name) of every job squeue lists (pending, running, completing)."""
        out = self.run("squeue", "--noheader", "--format=%i|%T|%j", check=False).stdout
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]  # type: ignore[misc]

    def job_ids(self, state: str | None = None) -> list[str]:
        return [j for j, s, _ in self.squeue() if state is None or s == state]

    def job_state(self, job_id: str) -> str:
        """A job's state as `scontrol show job` has it (finished jobs are kept there for MinJobAge)."""
        out = self.run("scontrol", "show", "job", job_id, check=False).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "UNKNOWN"

    def wait_until(self, predicate: object, timeout: float = 60, interval: float = 0.25) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return True
            time.sleep(interval)
        return bool(predicate())  # type: ignore[operator]

    def cancel_all(self, timeout: float = 60) -> list[str]:
        """scancel every job and wait until squeue lists none; the ids still listed afterwards."""
        self.run("scancel", "--full", *self.job_ids(), check=False) if self.job_ids() else None
        self.wait_until(lambda: not self.squeue(), timeout=timeout)
        return self.job_ids()

    def log(self, daemon: str) -> str:
        with contextlib.suppress(OSError):
            return (self.root / f"{daemon}.log").read_text(errors="replace")
        return ""


def _conf_text(root: Path, ctld_port: int, slurmd_port: int, cpus: int, memory_mb: int) -> str:
    return f"""# written by tests/support/slurm.py: one node on 127.0.0.1, everything under {root}
ClusterName=prep
SlurmctldHost={socket.gethostname().split(".")[0]}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
MinJobAge=600
KillWait=5
OverTimeLimit=0
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
DefMemPerCPU=500
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName={HOLD_PARTITION} Nodes={NODE} Default=NO MaxTime=INFINITE State=DOWN
"""


def _wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if proc.poll() is not None:
            return path.exists()
        time.sleep(0.05)
    return path.exists()


class SlurmStartError(RuntimeError):
    pass


@contextlib.contextmanager
def single_node_slurm(*, memory_mb: int = 4000) -> Iterator[SingleNodeSlurm]:
    """munged, slurmctld and slurmd on 127.0.0.1 under a fresh folder; raises SlurmStartError (with the daemon's
    log) when one does not come up; every job cancelled and every daemon stopped on exit."""
    reason = skip_reason()
    if reason:
        raise SlurmStartError(reason)
    # Unix socket paths are limited to 107 bytes: the folder is a short one of its own (pytest's are long).
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    for sub in ("munge", "state", "spool"):
        (root / sub).mkdir()
    os.chmod(root, 0o755)
    os.chmod(root / "munge", 0o755)  # munged warns about a socket folder others cannot enter
    cpus = os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(_conf_text(root, free_port(), free_port(), cpus, memory_mb))
    (root / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[key]  # a test run inside a SLURM job must not inherit that job's settings
    cluster = SingleNodeSlurm(root, conf, env, cpus, memory_mb)
    try:
        key = root / "munge" / "munge.key"
        subprocess.run([_which("mungekey") or "mungekey", "--create", f"--keyfile={key}"], check=True,
                       capture_output=True, timeout=30)
        os.chmod(key, 0o600)
        _start(cluster, "munged", [_which("munged") or "munged", "--foreground", "--force",
                                   f"--socket={root}/munge/munge.socket.2", f"--key-file={key}",
                                   f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munged.log",
                                   f"--seed-file={root}/munge/munged.seed"],
               ready=root / "munge" / "munge.socket.2")
        _start(cluster, "slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(conf)],
               ready=None)
        _start(cluster, "slurmd", [_which("slurmd") or "slurmd", "-D", "-N", NODE, "-f", str(conf)], ready=None)
        if not cluster.wait_until(lambda: _node_idle(cluster), timeout=60, interval=0.2):
            raise SlurmStartError("the node never became idle:\n" + cluster.log("slurmd")[-1500:]
                                  + cluster.log("slurmctld")[-1500:])
        yield cluster
    finally:
        stop(cluster)


def _node_idle(cluster: SingleNodeSlurm) -> bool:
    for name, proc in cluster.procs.items():
        if proc.poll() is not None:
            raise SlurmStartError(f"{name} exited ({proc.returncode}):\n{cluster.log(name)[-2000:]}")
    out = cluster.run("sinfo", "--noheader", "--format=%T", "--partition", PARTITION, check=False).stdout
    return out.strip().lower() in ("idle", "mixed", "allocated")


def _start(cluster: SingleNodeSlurm, name: str, cmd: list[str], ready: Path | None) -> None:
    log = (cluster.root / f"{name}.stdout").open("ab")
    proc = subprocess.Popen(cmd, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    cluster.procs[name] = proc
    if ready is not None and not _wait_file(ready, proc, 30):
        raise SlurmStartError(f"{name} did not start ({proc.poll()}):\n{cluster.log(name)[-2000:]}")


def stop(cluster: SingleNodeSlurm) -> None:
    """Cancel every job, wait for the queue to drain, then stop the daemons (newest first) and remove the folder."""
    if cluster.procs.get("slurmctld") is not None and cluster.procs["slurmctld"].poll() is None:
        with contextlib.suppress(Exception):
            cluster.cancel_all(timeout=60)
    for name in reversed([n for n in DAEMONS if n in cluster.procs]):
        proc = cluster.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _kill_leftover_steps(cluster.root)
    if os.environ.get("PREP_KEEP_SLURM"):
        print(f"kept {cluster.root}", file=sys.stderr)
    else:
        shutil.rmtree(cluster.root, ignore_errors=True)


def _kill_leftover_steps(root: Path) -> None:
    """A slurmstepd of this cluster that outlived its slurmd (a job scancel could not end): SIGKILL, by its pid."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
            if cmdline and cmdline[0].endswith(b"slurmstepd") and str(root).encode() in environ:
                os.kill(int(entry.name), signal.SIGKILL)


def main() -> int:  # pragma: no cover - a tool for people
    # SIGTERM as Ctrl-C (a `cmd &` of a script ignores SIGINT): the daemons are stopped either way
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with single_node_slurm() as cluster:
        print(f"export SLURM_CONF={cluster.conf}\n(Ctrl-C or SIGTERM stops it; logs in {cluster.root})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
