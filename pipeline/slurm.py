"""SLURM job control for the engine's `slurm` backend (`--cluster slurm`): the worker job script, `sbatch`,
`squeue`, `scontrol`, `scancel`, and the jobs' states. No Dask here: `pipeline.runner` runs the scheduler in the
prep process, gives this module the worker's command line, and tells it which jobs' workers connected.

One `JobController` per engine session:

- `start()` submits `SlurmSpec.jobs` copies of one job script (each job: one `dask worker` with `cores`
  single-threaded processes); a refusal by sbatch (a partition that does not exist, an account it does not
  know) is `SlurmError`: one line, sbatch's own words, exit 2, before any work.
- `refresh()` reads the queue (`squeue --name`, then `scontrol show job` for the jobs that left it) and
  replaces every job that ended (walltime, preemption, a node failure, a cancelled job while others of the run
  live, a worker that exited) with a new job of the same script. Two bounds: a job that ends before its worker
  ever connected is a failed start, and after `MAX_FAILED_STARTS` of them in a row nothing more is submitted
  (a broken environment would otherwise be resubmitted forever); and every job of the run cancelled
  (`scancel` by an operator) is the operator's word: nothing is resubmitted. Replacing a job that reached
  its walltime is not bounded: a run longer than `--slurm-time` goes on through new jobs.
- `cancel_all()` scancels every job of the run (by id, and by the run's unique job name, which also catches a
  job whose sbatch was interrupted before it printed the id) and waits until squeue lists none.
- The records: `job.sh` (the script, exactly as submitted), `jobs.json` (every job: id, state, node, reason,
  times, what replaced it) and one log per job (`<id>.out`), in one folder per run. No environment is written:
  sbatch passes it to the job itself (its default `--export=ALL`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.clock import utc_now
from pipeline.errors import PrepError
from pipeline.text import one_line, printable

MAX_FAILED_STARTS = 3  # jobs in a row that ended before their worker connected: no more replacements after that
COMPLETING_WAIT_S = 30.0  # a job seen COMPLETING is acted on once it has its final state, or after this long
CANCEL_WAIT_S = 30.0  # cancel_all waits this long for squeue to list none of the run's jobs
COMMAND_TIMEOUT_S = 60.0  # one sbatch/squeue/scontrol/scancel call at most
NAME_PREFIX = "prep-"

TIME_RE = re.compile(r"(?:(\d{1,3})-)?(\d{1,3}):([0-5]\d):([0-5]\d)")
MEMORY_RE = re.compile(r"(\d{1,9})([KMGT]?)", re.IGNORECASE)
NAME_RE = re.compile(r"[A-Za-z0-9_.,:+@=-]{1,128}")  # partition, account and QOS names (and lists of them)
EXTRA_RE = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*(?:[= ][ -~]*)?")  # one sbatch option, printable ASCII
MEMORY_UNITS = {"": 2**20, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}  # sbatch --mem: MB unless suffixed


class SlurmError(PrepError):
    """SLURM refused or failed a request (sbatch's own error line), or its commands are missing."""


class JobState(StrEnum):
    """SLURM's job states (squeue %T, scontrol JobState) that prep acts on; others are kept as SLURM says them."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    STOPPED = "STOPPED"  # SIGSTOP through SLURM (`scancel --signal=STOP`): it keeps its allocation and can go on
    SIGNALING = "SIGNALING"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESIZING = "RESIZING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    GONE = "GONE"  # no longer known to SLURM (purged after MinJobAge) and never seen ending


# In the queue and still to run (or running, or stopped/suspended and able to go on): not lost, not replaced (a
# worker frozen that way is the stall watch's to name). COMPLETING is the end of a job (its worker is gone).
ALIVE = frozenset({JobState.PENDING, JobState.CONFIGURING, JobState.RUNNING, JobState.SUSPENDED, JobState.STOPPED,
                   JobState.SIGNALING, JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED,
                   JobState.RESIZING})
WAITING = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.CONFIGURING})


@dataclass(frozen=True, slots=True)
class SlurmSpec:
    """What each worker job asks SLURM for, and how many jobs. `time`: `[D-]HH:MM:SS`; `memory`: sbatch's
    `--mem` (`4G`, `4000M`; MB when unsuffixed) for the whole job, split evenly among its `cores` worker
    processes as Dask's memory limit; `extra`: more `#SBATCH` options, one per item (`--constraint=avx2`);
    `scheduler_host`: the address the workers reach the scheduler at (None: this machine's own address)."""

    jobs: int = 1
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    cores: int = 1
    memory: str | None = None
    extra: tuple[str, ...] = ()
    scheduler_host: str | None = None

    def check(self) -> None:
        """Every value is one sbatch option's worth of safe text (a newline would start a line of the script)."""
        if self.jobs < 1 or self.cores < 1:
            raise PrepError(f"--slurm-jobs and --slurm-cores must be >= 1, got {self.jobs} and {self.cores}")
        for flag, value in (("--slurm-partition", self.partition), ("--slurm-account", self.account),
                            ("--slurm-qos", self.qos)):
            if value is not None:
                check_name(value, flag)
        if self.time is not None:
            check_time(self.time)
        if self.memory is not None:
            memory_bytes(self.memory)
        for line in self.extra:
            check_extra(line)

    def worker_memory_limit(self) -> int:
        """Dask's memory limit of each worker process (bytes; 0 = none): the job's memory split among them."""
        return memory_bytes(self.memory) // self.cores if self.memory else 0


def check_name(value: str, flag: str = "a SLURM name") -> str:
    if not NAME_RE.fullmatch(value):
        raise PrepError(f"{flag}: expected a SLURM name (letters, digits, _ . , : + @ = -), got {value!r}")
    return value


def check_time(value: str) -> str:
    m = TIME_RE.fullmatch(value)
    if not m or not any(int(g or 0) for g in m.groups()):
        raise PrepError(f"--slurm-time: expected a walltime HH:MM:SS (or D-HH:MM:SS) above zero, got {value!r}")
    return value


def time_seconds(value: str) -> int:
    m = TIME_RE.fullmatch(check_time(value))
    assert m is not None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def memory_bytes(value: str) -> int:
    m = MEMORY_RE.fullmatch(value.strip())
    if not m or int(m.group(1)) == 0:
        raise PrepError(f"--slurm-memory: expected sbatch's --mem, such as 4G or 4000M (MB when unsuffixed), got "
                        f"{value!r}")
    return int(m.group(1)) * MEMORY_UNITS[m.group(2).upper()]


def check_extra(line: str) -> str:
    """One more sbatch option for the script (`--constraint=avx2`, `#SBATCH --gres=gpu:0` also accepted)."""
    text = line.strip()
    text = text[len("#SBATCH"):].strip() if text.startswith("#SBATCH") else text
    if not EXTRA_RE.fullmatch(text):
        raise PrepError(f"--slurm-extra: expected one sbatch option such as --constraint=avx2 (printable ASCII, one "
                        f"line), got {line!r}")
    return text


def render_script(spec: SlurmSpec, *, name: str, log_dir: Path, worker: list[str], env: dict[str, str],
                  about: str = "") -> str:
    """The worker job's batch script: its #SBATCH lines, the Dask settings of prep's workers, then `exec` the
    worker (so that SLURM's signals reach it). Values are checked (`SlurmSpec.check`) and quoted."""
    spec.check()
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --output={log_dir}/%j.out",
             "#SBATCH --ntasks=1",
             f"#SBATCH --cpus-per-task={spec.cores}"]
    for option, value in (("partition", spec.partition), ("account", spec.account), ("qos", spec.qos),
                          ("time", spec.time), ("mem", spec.memory)):
        if value is not None:
            lines.append(f"#SBATCH --{option}={value}")
    lines += [f"#SBATCH {check_extra(line)}" for line in spec.extra]
    if about:
        lines.append("# " + one_line(about).replace("\n", " "))
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append("exec " + " ".join(_quote(a) for a in worker))
    return "\n".join(lines) + "\n"


JOB_ID = "${SLURM_JOB_ID}"  # in a worker argument: the job's id, expanded by the job's shell


def _quote(arg: str) -> str:
    """Quoted for bash; `${SLURM_JOB_ID}` in it is still expanded by the job's shell."""
    if JOB_ID not in arg:
        return shlex.quote(arg)
    rest = arg.replace(JOB_ID, "")
    if any(c in rest for c in '"$`\\\n'):
        raise ValueError(f"cannot quote {arg!r} around {JOB_ID}")
    return f'"{arg}"'


@dataclass(slots=True)
class Job:
    """One worker job of the run, as prep last saw it."""

    id: str
    submitted_utc: str
    submitted: float  # monotonic
    state: str = JobState.PENDING
    reason: str = ""
    node: str = ""
    run_time: str = ""
    exit_code: str = ""
    started: float | None = None  # monotonic: first seen running
    started_utc: str | None = None  # first seen running
    connected_utc: str | None = None  # its Dask worker first seen connected
    ended_utc: str | None = None
    end_time: str = ""  # SLURM's own EndTime (scontrol; the cluster's local time), once it ended
    worker_connected: bool = False
    replaced_by: str | None = None
    handled: bool = False  # its end has been acted on (replaced, or not)
    completing_since: float | None = None  # monotonic: first seen COMPLETING (no final state yet)

    @property
    def alive(self) -> bool:
        return self.state in ALIVE

    def describe(self, *, with_id: bool = True) -> str:
        """`101 RUNNING on node7`, `102 PENDING (Resources)`, `103 TIMEOUT on node7 after 01:00:02`."""
        text = f"{self.id} {self.state}" if with_id else str(self.state)
        if self.node and self.state not in WAITING:
            text += f" on {self.node}"
        if self.state in WAITING and self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if not self.alive and self.run_time:
            text += f" after {self.run_time}"
        return text

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "state": str(self.state), "reason": self.reason, "node": self.node,
                "run_time": self.run_time, "exit_code": self.exit_code, "submitted_utc": self.submitted_utc,
                "started_utc": self.started_utc, "connected_utc": self.connected_utc, "ended_utc": self.ended_utc,
                "end_time": self.end_time,
                "worker_connected": self.worker_connected, "replaced_by": self.replaced_by}


Runner = Callable[[list[str], str | None], subprocess.CompletedProcess[str]]


def run_command(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A SLURM client command, bounded; in its own session, so that a Ctrl-C meant for prep does not kill an
    sbatch halfway (the job it submitted would have no id here)."""
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              start_new_session=True, check=False)
    except FileNotFoundError:
        raise SlurmError(f"--cluster slurm: the SLURM command {cmd[0]!r} is not installed on this machine (prep "
                         "submits the worker jobs from here: run it on a login node of the cluster)") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"{cmd[0]}: no answer within {COMMAND_TIMEOUT_S:g} s")


def sbatch_error(stderr: str, stdout: str = "") -> str:
    """sbatch's own error as one line: its `error:` lines, joined (`invalid partition specified: nope; Batch job
    submission failed: Invalid partition name specified`)."""
    found = [line.split("error:", 1)[1].strip() for line in stderr.splitlines() if "error:" in line]
    text = "; ".join(dict.fromkeys(f for f in found if f)) or (stderr.strip() or stdout.strip() or "no output")
    return one_line(text, 600)


@dataclass
class JobController:
    """The worker jobs of one run. `records`: the run's records folder (created by `start`)."""

    spec: SlurmSpec
    script: str
    name: str
    records: Path
    run: Runner = run_command
    clock: Callable[[], float] = time.monotonic
    jobs: dict[str, Job] = field(default_factory=dict)
    failed_starts: int = 0
    gave_up: str | None = None  # why no more jobs are submitted (None: they are)
    operator_cancelled: bool = False
    refreshed_at: float = 0.0
    submit_error: str | None = None
    attempted: bool = False  # an sbatch was run (its job may exist even without an id here: cancel_all by name)

    # ---- submitting ----------------------------------------------------------------------------------

    def start(self) -> list[Job]:
        """Submit `spec.jobs` jobs (the records folder made first: SLURM writes the jobs' logs there);
        SlurmError (sbatch's line) if the first is refused, and then the folders made for it are removed."""
        made = _missing_parents(self.records)
        try:
            atomic.make_dirs(self.records)
        except OSError as exc:
            raise PrepError(f"cannot write the SLURM records to {printable(self.records)}: "
                            f"{atomic.describe(self.records, exc)}") from None
        try:
            first = self.submit()
        except SlurmError:
            for folder in made:  # deepest first; only what this run made, and only if still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return [first, *(self.submit() for _ in range(self.spec.jobs - 1))]

    def submit(self) -> Job:
        self.attempted = True
        r = self.run(["sbatch", "--parsable"], self.script)
        if r.returncode != 0:
            raise SlurmError(f"sbatch refused the worker job: {sbatch_error(r.stderr, r.stdout)}")
        job_id = r.stdout.strip().split(";", 1)[0]  # --parsable: "ID" or "ID;CLUSTER"
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {one_line(r.stdout.strip(), 200)!r}, not a job id")
        job = Job(job_id, utc_now_ms(), self.clock())
        self.jobs[job_id] = job
        self.write_records()
        return job

    # ---- watching ------------------------------------------------------------------------------------

    def worker_connected(self, job_id: str) -> None:
        """The runner saw a Dask worker of this job connected: the job started, and the run's environment works."""
        job = self.jobs.get(job_id)
        if job is not None and not job.worker_connected:
            job.worker_connected, job.connected_utc = True, utc_now()
            self.failed_starts = 0
            self.write_records()

    def refresh(self) -> list[str]:
        """Read every job's state, act on the ones that ended (replace them, or say why not); the notes to print."""
        self.refreshed_at = self.clock()
        events: list[str] = []
        seen = self._squeue()
        if seen is None:
            return [f"squeue did not answer ({self.submit_error}); the SLURM jobs are looked at again later"]
        changed = False
        for job in self.jobs.values():
            if job.handled:
                continue
            row = seen.get(job.id)
            before = (job.state, job.node, job.reason)
            if row is not None and row[0] in ALIVE:
                job.state, job.reason, job.node, job.run_time = row
                if job.state == JobState.RUNNING and job.started is None:
                    job.started, job.started_utc = self.clock(), utc_now()
            else:  # it left the queue, or is completing: its final state from scontrol
                self._final_state(job)
            changed |= before != (job.state, job.node, job.reason)
        now = self.clock()
        for job in self.jobs.values():
            if job.state == JobState.COMPLETING and job.completing_since is None:
                job.completing_since = now
        # a job that is completing has no final state yet (TIMEOUT, CANCELLED, ...): acted on once it has one
        # (its worker is gone already: at most COMPLETING_WAIT_S later, whatever scontrol says)
        ended = [j for j in self.jobs.values() if not j.handled and not j.alive and (
            j.state != JobState.COMPLETING or now - (j.completing_since or now) >= COMPLETING_WAIT_S)]
        if ended:
            events += self._act_on(ended)
            changed = True
        if changed:
            self.write_records()
        return events

    def _squeue(self) -> dict[str, tuple[str, str, str, str]] | None:
        r = self.run(["squeue", "--noheader", f"--name={self.name}", "--format=%i|%T|%r|%N|%M"], None)
        if r.returncode != 0:
            self.submit_error = sbatch_error(r.stderr, r.stdout)
            return None
        rows: dict[str, tuple[str, str, str, str]] = {}
        for line in r.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 5:
                job_id, state, reason, node, run_time = parts
                rows[job_id] = (_state(state), reason, node, run_time)
        return rows

    def _final_state(self, job: Job) -> None:
        r = self.run(["scontrol", "show", "job", "--oneliner", job.id], None)
        fields = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w) if r.returncode == 0 else {}
        state = _state(fields.get("JobState", ""))
        if state in ALIVE:  # squeue missed it (a race): still in the queue
            job.state = state
            return
        job.state = state if fields else JobState.GONE
        job.reason = fields.get("Reason", job.reason)
        job.node = fields.get("NodeList", job.node) if fields.get("NodeList") not in (None, "(null)") else job.node
        job.run_time = fields.get("RunTime", job.run_time)
        job.exit_code = fields.get("ExitCode", job.exit_code)
        job.end_time = fields.get("EndTime", job.end_time) if fields.get("EndTime") != "Unknown" else job.end_time
        job.ended_utc = job.ended_utc or utc_now()

    def _act_on(self, ended: list[Job]) -> list[str]:
        """Replace each ended job (bounded), or say why not."""
        events: list[str] = []
        everyone_cancelled = all(not j.alive for j in self.jobs.values() if j.replaced_by is None) and \
            all(j.state == JobState.CANCELLED for j in ended)
        if everyone_cancelled and not self.operator_cancelled:
            self.operator_cancelled = True
            self.gave_up = "every job of this run was cancelled: not replaced"
            events.append(f"every SLURM job of this run was cancelled ({self.describe(ended)}): not replaced; "
                          "rerun the command to submit new ones")
        for job in ended:
            job.handled = True
            if not job.worker_connected:
                self.failed_starts += 1
            if self.operator_cancelled:
                continue
            if self.failed_starts >= MAX_FAILED_STARTS and self.gave_up is None:
                self.gave_up = (f"{self.failed_starts} jobs in a row ended before their Dask worker connected "
                                f"(see the log of job {job.id}: {self.log_of(job)}): not replaced")
                events.append(f"SLURM job {job.id} ended ({job.describe(with_id=False)}); {self.gave_up}")
            if self.gave_up is not None:
                continue
            try:
                new = self.submit()
            except SlurmError as exc:
                events.append(f"SLURM job {job.id} ended ({job.describe(with_id=False)}), and its replacement was "
                              f"refused: {exc}")
                continue
            job.replaced_by = new.id
            events.append(f"SLURM job {job.id} ended ({job.describe(with_id=False)}); submitted job {new.id} in its "
                          "place")
        return events

    # ---- what there is -------------------------------------------------------------------------------

    def unsettled(self) -> bool:
        """A job waits in the queue, starts (no worker yet), or ended and was not acted on yet: look again soon."""
        return any((j.alive and not j.worker_connected) or (not j.alive and not j.handled)
                   for j in self.jobs.values())

    def alive(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.alive]

    def waiting(self) -> list[Job]:
        """Jobs waiting in the queue, or running without their worker connected yet (starting)."""
        return [j for j in self.alive() if j.state in WAITING or not j.worker_connected]

    def describe(self, jobs: Iterable[Job] | None = None, limit: int = 6) -> str:
        shown = list(self.jobs.values() if jobs is None else jobs)
        text = ", ".join(j.describe() for j in shown[:limit])
        return text + (f" and {len(shown) - limit} more" if len(shown) > limit else "")

    def log_of(self, job: Job) -> Path:
        return self.records / f"{job.id}.out"

    # ---- the end -------------------------------------------------------------------------------------

    def cancel_all(self, wait_s: float = CANCEL_WAIT_S) -> list[str]:
        """scancel every job of the run (ids, and the run's unique name) and wait until squeue lists none; the
        ids still listed after `wait_s` (none, normally)."""
        ids = [j.id for j in self.jobs.values() if j.alive or j.state == JobState.COMPLETING or not j.handled]
        user = _user()
        # scancel ANDs its filters with the ids it is given: by name alone (every job of the run, also one whose
        # sbatch answer was lost or one prep replaced), then by id (a job squeue cannot select by name)
        self.run(["scancel", *([f"--user={user}"] if user else []), f"--name={self.name}"], None)
        if ids:
            self.run(["scancel", *ids], None)
        deadline = self.clock() + wait_s
        left: list[str] = []
        while True:
            seen = self._squeue()
            left = sorted(seen) if seen is not None else []
            if not left or self.clock() >= deadline:
                break
            time.sleep(0.5)
        for job in self.jobs.values():
            if job.alive:
                job.state, job.ended_utc = JobState.CANCELLED, utc_now()
        if self.jobs:
            with contextlib.suppress(PrepError, OSError):
                self.write_records()
        return left

    def write_records(self) -> None:
        """job.sh (once) and jobs.json (every change) in the records folder."""
        try:
            atomic.make_dirs(self.records)
            script = self.records / "job.sh"
            if not script.exists():
                atomic.write_text(script, self.script, root=self.records)
            atomic.write_json(self.records / "jobs.json", {
                "name": self.name, "script": "job.sh", "logs": "<id>.out",
                "spec": {k: getattr(self.spec, k) for k in ("jobs", "partition", "account", "qos", "time", "cores",
                                                            "memory")} | {"extra": list(self.spec.extra)},
                "failed_starts": self.failed_starts, "not_replaced": self.gave_up,
                "jobs": [j.record() for j in self.jobs.values()]}, root=self.records)
        except OSError as exc:
            raise PrepError(f"cannot write the SLURM records to {printable(self.records)}: "
                            f"{atomic.describe(self.records, exc)}") from None


def utc_now_ms() -> str:
    """`2026-12-05T08:21:42.123Z`: a job's submission, to the millisecond (its start latency is seconds)."""
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _missing_parents(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first."""
    out = []
    for p in (folder, *folder.parents):
        if os.path.lexists(p):
            break
        out.append(p)
    return out


def _state(text: str) -> str:
    """squeue's %T / scontrol's JobState as a JobState when prep knows it (`CANCELLED by 0` -> CANCELLED)."""
    word = text.strip().split(" ", 1)[0].upper()
    try:
        return JobState(word)
    except ValueError:
        return word or JobState.GONE


def _user() -> str:
    with contextlib.suppress(KeyError, ImportError, OSError):
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    return os.environ.get("USER", "")


def job_of_worker(name: object) -> str | None:
    """The SLURM job id in a worker's name (`slurm-123`, `slurm-123-0` with several processes per job)."""
    m = re.fullmatch(r"slurm-(\d+)(?:-\d+)?", str(name))
    return m.group(1) if m else None


def new_run_name() -> str:
    """A job name unique to this run (`prep-3f2a9c1e`): squeue and scancel select the run's jobs by it."""
    return NAME_PREFIX + os.urandom(4).hex()
