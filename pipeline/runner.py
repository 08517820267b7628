"""The engine session: the one module that knows Dask.

A command opens ONE engine for its whole run (`with open_engine(RunConfig(...)) as engine:`) and
every job of that command maps its stage through it:

    for batch in engine.map(stage, units, on_error=failed, desc="scan", total=n):
        ...  # batch.results, in plan order

Backends are chosen by name (`BACKENDS`, the keys are `RunConfig.backend`'s values):

- `inline`: in this process, one batch after another (tests, tiny inputs, debugging, callers that
  already run inside a worker);
- `local`: an embedded `distributed.LocalCluster` of single-threaded worker processes (the default),
  started lazily on the first map that needs it and reused by every later map of the session;
- `remote`: an existing scheduler (`--scheduler ADDRESS`: `dask scheduler` + `dask worker` on many
  nodes, or dask-jobqueue);
- `slurm`: a scheduler in this process whose workers are SLURM jobs (`--cluster slurm`): `pipeline.slurm`
  submits, watches, replaces and cancels the jobs; the watch below tells it which jobs' workers connected and
  says what the queue is doing while no worker is there.

`map` streams: units are pulled lazily from an iterator and grouped into tasks sized so that a task
runs about `task_seconds` (from a cost hint, then from the measured cost of finished tasks); at most
`window` tasks are in flight (a sliding `distributed.as_completed`), and finished tasks wait in a
bounded reorder buffer so that batches come out in plan order (deterministic outputs) while client
and scheduler memory stay independent of the number of units. A stage exception becomes a failure
result through `on_error`; a task whose worker died is retried (`retries`), and one that still
fails becomes failure results for its units (`Batch.failed`) -- nothing is raised mid-graph.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import resource
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pipeline.errors import ClusterError, PrepError, WorkerLost
from pipeline.slurm import JobController, SlurmSpec

U = TypeVar("U")
R = TypeVar("R")

MAX_BATCH = 4096  # units per task at most (bounds one task's argument and result payload)
BALANCE_TASKS_PER_WORKER = 4  # a short map is split into at least this many tasks per worker


@dataclass(slots=True, frozen=True)
class RunConfig:
    """How to execute.

    `backend`: "inline" | "local" | "remote" | "slurm"; None picks "slurm" when `slurm` is set, "remote" when
    `scheduler` is, else "local".
    `workers`: LocalCluster worker processes (default: the machine's cores).
    `batch`: units per task (None: sized so that a task runs about `task_seconds`).
    `window`: tasks in flight at most (None: 2 per worker, at least 4).
    `inline_max`: with the local backend, a map of at most this many units runs in-process
    (no cluster is started for it; the CLI raises it for small inputs, see `commands.common.run_config`).
    `worker_env` / `memory_limit`: settings of LocalCluster workers (environment variables such as
    MALLOC_TRIM_THRESHOLD_, and Dask's per-worker memory limit; 0 = none).
    `stall_timeout`: seconds a map waits with no worker connected, or on a worker holding its task that stopped
    answering (frozen, an NFS stall, a partition), or on an unresponsive scheduler, before it stops with
    `ClusterError` (0 = wait forever); progress notes are printed meanwhile.
    `connect_timeout`: seconds to reach the scheduler and complete Dask's handshake (and for a worker to answer
    the import check).
    `dashboard`: where the LocalCluster's dashboard listens, `HOST:PORT` (port 0 = a free one); the default is
    this machine only; None = no dashboard.
    `slurm`: the worker jobs of the slurm backend; `records`: the folder where a session keeps its own records
    (the slurm backend: one folder per run with the job script, the job ids and states, the workers' logs; it
    must be on the filesystem the nodes share).
    `shared`: paths on this machine that every worker of a remote or slurm cluster must see at the same place
    (the source, the output): a worker that cannot see one is one ClusterError before any task.
    """

    scheduler: str | None = None
    workers: int | None = None
    retries: int = 2
    progress: bool = True
    batch: int | None = None
    backend: str | None = None
    window: int | None = None
    task_seconds: float = 1.0
    inline_max: int = 1
    worker_env: tuple[tuple[str, str], ...] = ()
    memory_limit: str | int = 0
    stall_timeout: float = 300.0
    connect_timeout: float = 10.0
    dashboard: str | None = "127.0.0.1:0"
    slurm: SlurmSpec | None = None
    records: str | None = None
    shared: tuple[str, ...] = ()

    def backend_name(self) -> str:
        name = self.backend or ("slurm" if self.slurm else "remote" if self.scheduler else "local")
        if name not in BACKENDS:
            raise PrepError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
        if name == "remote" and not self.scheduler:
            raise PrepError("the remote backend needs a scheduler address (--scheduler ADDRESS)")
        if name == "slurm" and (self.slurm is None or not self.records):
            raise PrepError("the slurm backend needs its jobs (--cluster slurm) and a records folder")
        return name


def machine_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(slots=True)
class Batch(Generic[U, R]):
    """One task's units and their results. `first` is the position of its first unit in the map's input."""

    seq: int
    first: int
    units: list[U]
    results: list[R]
    seconds: float = 0.0  # stage time on the worker
    failed: bool = False  # the task itself failed (worker died beyond retries): results are on_error's


@dataclass(slots=True)
class EngineStats:
    """What the session did, for logs, tests and benchmarks."""

    clusters_started: int = 0
    tasks_submitted: int = 0
    units: int = 0
    max_in_flight: int = 0
    max_outstanding: int = 0  # submitted but not yet handed to the caller (in flight + reorder buffer)
    batch_sizes: list[int] = field(default_factory=list)  # last few, for logs


def _run_batch(units: Sequence[Any], fn: Callable[[Any], Any], on_error: Callable[[Any, BaseException], Any],
               threads: int = 1) -> tuple[list[Any], float]:
    """A task: `fn` over its units, results in their order; with `threads` > 1, that many units at once
    (threads: for a stage that waits on round trips, not on the CPU)."""
    t0 = time.perf_counter()

    def one(unit: Any) -> Any:
        try:
            return fn(unit)
        except Exception as exc:  # a stage bug or unexpected input: record it, keep going
            return on_error(unit, exc)

    if threads <= 1 or len(units) < 2:
        out = [one(unit) for unit in units]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(units)), thread_name_prefix="prep-unit") as pool:
            out = list(pool.map(one, units))
    return out, time.perf_counter() - t0


def peak_rss_bytes() -> int:
    """This process's own peak RSS: Linux's VmHWM, which starts afresh at exec. `ru_maxrss` does not: Linux
    carries it over fork and exec, so a process started by a big one reports its parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _Sizer:
    """Units per task: fixed, or about `task_seconds` of measured (else hinted) stage time per task,
    capped so that a short map still spreads over every worker, and at least `threads` (the units a task runs at
    once: fewer would leave its threads idle, and cost the task's time anyway)."""

    def __init__(self, config: RunConfig, workers: int, cost_s: float | None, threads: int = 1) -> None:
        self.fixed = config.batch
        self.target = config.task_seconds
        self.workers = max(1, workers)
        self.hint = cost_s
        self.threads = max(1, threads)
        self.units = 0
        self.seconds = 0.0

    def observe(self, units: int, seconds: float) -> None:
        self.units += units
        self.seconds += seconds

    def size(self, remaining: int | None) -> int:
        if self.fixed:
            return self.fixed
        per_unit = self.seconds / self.units if self.units else self.hint
        n = MAX_BATCH if not per_unit or per_unit <= 0 else math.ceil(self.target / per_unit)
        if not self.units and not self.hint:
            n = self.threads  # nothing known yet: small probes first
        if remaining is not None:
            n = min(n, max(self.threads, remaining // (self.workers * BALANCE_TASKS_PER_WORKER)))
        return max(1, min(n, MAX_BATCH))


def _take(it: Iterator[U], n: int) -> list[U]:
    out: list[U] = []
    for unit in it:
        out.append(unit)
        if len(out) >= n:
            break
    return out


class Engine:
    """One execution session. Use `open_engine`; `map` may be called any number of times."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.backend = config.backend_name()
        self.stats = EngineStats()
        self._stack = contextlib.ExitStack()
        self._client: Any = None
        self._jobs: JobController | None = None  # the slurm backend's worker jobs
        self._checked: dict[str, set[str]] = {}  # module -> workers that import it (remote clusters)
        self._probes: dict[tuple[str, str], Any] = {}  # (module, worker) -> its import check, in flight
        self._size_hint: int | None = None

    # ---- session -------------------------------------------------------------------------------

    def close(self) -> None:
        for probe in self._probes.values():
            probe.cancel()
        self._probes.clear()
        self._stack.close()
        self._client = None

    @property
    def started(self) -> bool:
        return self._client is not None

    def start(self, *, local: bool = True) -> None:
        """Bring the session up now (connect to the scheduler; with `local`, also start the LocalCluster),
        so that a job writes nothing (lock, options) for a session that cannot start. Inline: nothing."""
        if self.backend in ("remote", "slurm") or (self.backend == "local" and local):
            self.client()

    def client(self) -> Any:
        """The `distributed.Client` of the session, connecting (or starting the cluster) on first use."""
        if self.backend == "inline":
            raise PrepError("the inline backend has no Dask client")
        if self._client is None:
            import dask
            import distributed  # noqa: F401  (its configuration defaults first: the session's settings are restored
            # at the end by deleting the keys that did not exist before, which would drop all of distributed's)

            _quiet_gather_helpers()
            self._stack.enter_context(dask.config.set(SESSION_SETTINGS))  # restored when the session ends
            opened = self._stack.enter_context(BACKENDS[self.backend](self.config))
            self._client, self._jobs = (opened.client, opened.jobs) if isinstance(opened, SlurmSession) else \
                (opened, None)
            self.stats.clusters_started += 1
            _log_start(self.backend, self._client, self.config, self._jobs)
        return self._client

    def runs_inline(self, total: int | None) -> bool:
        """Whether a map of `total` units runs in this process: always on the inline backend; on the local one
        when the map is small (at most `inline_max` units; a map of unknown size: the job's `size_hint`) and no
        cluster was started yet."""
        n = total if total is not None else self._size_hint
        return self.backend == "inline" or (
            self.backend == "local" and n is not None and n <= self.config.inline_max and self._client is None)

    def size_hint(self, units: int) -> None:
        """The size of the job in the units its command's small-input threshold counts, for maps whose own
        size is not known before they run (streamed plans)."""
        self._size_hint = units

    def prepare(self, size_hint: int | None = None) -> float:
        """The one call a job makes into the session before it writes anything (a lock, an options file): the
        session is brought up now, so that one that cannot start (a scheduler out of reach) is refused first.
        `size_hint`: the job's size in the units its command's small-input threshold counts (it also sizes the
        job's maps whose own size is not known before they run); a job too large to run inline starts its
        cluster now. None: only a scheduler is reached now; a local cluster starts with the first map that needs
        one. Returns the seconds spent starting (0.0 when nothing was started)."""
        if size_hint is not None:
            self.size_hint(size_hint)
        if self.started:
            return 0.0
        t0 = time.perf_counter()
        self.start(local=size_hint is not None and not self.runs_inline(size_hint))
        return time.perf_counter() - t0 if self.started else 0.0

    @property
    def expected_workers(self) -> int:
        """The workers the session is meant to have: the slurm backend's jobs x cores (they join as their jobs
        start), else the workers there are."""
        if self.backend == "slurm" and self.config.slurm is not None:
            return self.config.slurm.jobs * self.config.slurm.cores
        return self.workers

    @property
    def workers(self) -> int:
        """Workers of the session's cluster (the configured count before it starts; 1 inline)."""
        if self.backend == "inline":
            return 1
        if self.backend == "slurm" and self._client is None:
            return self.expected_workers
        if self._client is not None:
            n = len(self._client.nthreads())  # every worker (scheduler_info() may list only the first few)
            if n:
                return n
        return self.config.workers or (machine_cores() if self.backend == "local" else 1)

    def worker_peak_rss(self) -> dict[str, int]:
        """Peak resident memory (bytes) of each worker process so far; {} inline or before a cluster started."""
        if self._client is None:
            return {}
        return {str(k): int(v) for k, v in self._client.run(peak_rss_bytes).items()}

    # ---- map -----------------------------------------------------------------------------------

    def map(self, fn: Callable[[U], R], units: Iterable[U], *, on_error: Callable[[U, BaseException], R],
            desc: str, unit_name: str = "unit", total: int | None = None, cost_s: float | None = None,
            measure: Callable[[R], dict[str, float]] | None = None, threads: int = 1) -> Iterator[Batch[U, R]]:
        """Batches of `fn` over `units`, in the order of `units` (see the module docstring).

        `total` (units, when known) sizes the progress bar and lets short maps spread over the workers
        (and run inline when tiny); `cost_s` is a hint of one unit's stage time in seconds;
        `measure` maps a result to counters shown as rates in the progress bar; `threads`: units of a task
        run at once (for a stage bound by round trips to an object store; 1 for CPU-bound stages).
        """
        from tqdm import tqdm

        inline = self.runs_inline(total)
        bar = tqdm(total=total, desc=desc, unit=unit_name, disable=not self.config.progress, dynamic_ncols=True,
                   file=sys.stderr)
        rates = _Rates(bar, measure)
        try:
            stream = self._inline(fn, units, on_error, total, cost_s, threads) if inline else \
                self._distributed(fn, units, on_error, desc, total, cost_s, threads)
            for batch in stream:
                rates.add(batch)
                yield batch
        finally:
            bar.close()

    def results(self, fn: Callable[[U], R], units: Iterable[U], **kwargs: Any) -> Iterator[R]:
        """`map`, flattened to the results (in the order of `units`)."""
        for batch in self.map(fn, units, **kwargs):
            yield from batch.results

    def _inline(self, fn: Callable[[U], R], units: Iterable[U], on_error: Callable[[U, BaseException], R],
                total: int | None, cost_s: float | None, threads: int = 1) -> Iterator[Batch[U, R]]:
        sizer = _Sizer(self.config, 1, cost_s, threads)
        it = iter(units)
        seq = first = 0
        while True:
            chunk = _take(it, sizer.size(None if total is None else total - first))
            if not chunk:
                return
            results, seconds = _run_batch(chunk, fn, on_error, threads)
            sizer.observe(len(chunk), seconds)
            self._count_submit(len(chunk), 1, 1)
            yield Batch(seq, first, chunk, results, seconds)
            seq += 1
            first += len(chunk)

    def _count_submit(self, units: int, in_flight: int, outstanding: int) -> None:
        s = self.stats
        s.tasks_submitted += 1
        s.units += units
        s.max_in_flight = max(s.max_in_flight, in_flight)
        s.max_outstanding = max(s.max_outstanding, outstanding)
        s.batch_sizes = [*s.batch_sizes[-15:], units]

    def _distributed(self, fn: Callable[[U], R], units: Iterable[U], on_error: Callable[[U, BaseException], R],
                     desc: str, total: int | None, cost_s: float | None, threads: int = 1) -> Iterator[Batch[U, R]]:
        client = self.client()
        watch = _Watch(self, client, desc)
        workers = watch.ready(fn)  # a worker is connected and every worker imports the stage (remote), before any task
        if self.backend == "slurm":  # workers join as their jobs start: size for the ones on their way too
            workers = max(workers, self.expected_workers)
        window = self.config.window or max(4, 2 * workers)
        cap = 4 * window  # in flight + finished but waiting for an earlier batch
        sizer = _Sizer(self.config, workers, cost_s, threads)
        it = iter(units)
        token = uuid.uuid4().hex[:8]
        inflight: dict[Any, tuple[Any, int, int, list[U]]] = {}  # key -> (future, seq, first, units)
        pending: dict[int, Batch[U, R]] = {}
        seq = emitted = first = 0
        exhausted = False
        try:
            while True:
                while not exhausted and len(inflight) < window and seq - emitted < cap:
                    chunk = _take(it, sizer.size(None if total is None else total - first))
                    if not chunk:
                        exhausted = True
                        break
                    with watch.translating():
                        fut = client.submit(_run_batch, chunk, fn, on_error, threads, key=f"{desc}-{token}-{seq}",
                                            retries=self.config.retries, pure=False)
                    inflight[fut.key] = (fut, seq, first, chunk)
                    seq += 1
                    first += len(chunk)
                    self._count_submit(len(chunk), len(inflight), seq - emitted)
                if not inflight:
                    return
                for fut in watch.wait(inflight):
                    _, bseq, bfirst, chunk = inflight[fut.key]
                    pending[bseq] = self._collect(watch, inflight, fut, bseq, bfirst, chunk, on_error, sizer)
                    del inflight[fut.key]
                while emitted in pending:
                    yield pending.pop(emitted)
                    emitted += 1
        finally:
            if inflight and client.status == "running":  # stopped early (an error, Ctrl-C): cancel what is queued
                with contextlib.suppress(Exception):
                    client.sync(client._cancel, [f for f, *_ in inflight.values()], callback_timeout=5)

    def _collect(self, watch: _Watch, inflight: dict[Any, tuple[Any, int, int, list[U]]], fut: Any, seq: int,
                 first: int, chunk: list[U], on_error: Callable[[U, BaseException], R],
                 sizer: _Sizer) -> Batch[U, R]:
        """A finished task's batch; a task that failed (its worker died on every attempt, ...) becomes failure
        results; a task lost with the scheduler raises ClusterError. The result is fetched from its worker in
        bounded waits: a worker that dies between finishing the task and handing its result over makes the
        scheduler run the task again, on a worker that may never come (the stall checks run meanwhile)."""
        try:
            while True:
                try:
                    with watch.translating():
                        results, seconds = fut.result(timeout=FETCH_S)
                    break
                except TimeoutError:
                    watch.check(inflight)
        except ClusterError:
            raise
        except Exception as exc:  # the task failed: its worker died beyond the retries, ...
            error: BaseException = watch.lost(exc, chunk) if _is_killed_worker(exc) else exc
            return Batch(seq, first, chunk, [on_error(u, error) for u in chunk], 0.0, failed=True)
        finally:
            fut.release()
        sizer.observe(len(chunk), seconds)
        return Batch(seq, first, chunk, results, seconds)


def _is_killed_worker(exc: BaseException) -> bool:
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)


def describe_units(units: Sequence[Any]) -> str:
    """What a task holds, for a message: its first unit's file (`rel`, `out_rel`, `src_rel`) or episodes, and
    how many more units there are."""
    if not units:
        return "an empty task"
    head = units[0]
    text = ""
    for attr in ("rel", "out_rel", "src_rel"):
        value = getattr(head, attr, None)
        if isinstance(value, str):
            text = value
            break
    episodes = getattr(head, "episodes", None)
    if episodes is None and getattr(head, "episode", None) is not None:
        episodes = (head.episode,)
    if episodes is None and getattr(head, "spans", None):
        episodes = tuple(s.episode for s in head.spans)
    if episodes:
        idx = [int(getattr(e, "index", e)) for e in episodes]
        what = f"episode {idx[0]}" if len(idx) == 1 else f"episodes {min(idx)}-{max(idx)}"
        if not text:  # a file set: name its first file
            data = getattr(episodes[0], "data", None)
            text = str(getattr(data, "rel", "") or "")
        text = f"{text} ({what})" if text else what
    text = text or type(head).__name__
    return text + (f" and {len(units) - 1} more unit{'s' * (len(units) > 2)}" if len(units) > 1 else "")


# ---- watching the cluster while a map waits --------------------------------------------------------

TICK_S = 1.0  # a map waits this long for a finished task before it looks at the cluster
FETCH_S = 5.0  # a finished task's result is fetched in waits this long, the cluster checked between them
POLL_S = 2.0  # the cluster's state is read at most this often while nothing finishes ...
POLL_BUSY_S = 10.0  # ... and this often while tasks finish (a frozen worker among busy ones)
NOTE_S = 30.0  # a waiting map prints a note this often
SLOW_NOTE_S = 60.0  # a map none of whose tasks finished for this long says what runs where
SQUEUE_S = 5.0  # the slurm backend reads the queue this often while a job waits, starts or was lost ...
SQUEUE_IDLE_S = 30.0  # ... and this often while every job's worker is connected
HEARTBEAT_SLACK_S = 5.0  # a worker not heard from for this long (heartbeats come every ~0.5-5 s) may be frozen


class _Watch:
    """The cluster as one map sees it while it waits: the scheduler's connection, the workers connected, the
    workers holding the map's tasks and whether they still answer (their heartbeat), and progress. A fault
    past `stall_timeout` becomes one ClusterError naming the scheduler, worker and units; a wait shorter
    than that prints a note every NOTE_S."""

    def __init__(self, engine: Engine, client: Any, desc: str) -> None:
        self.engine, self.client, self.desc = engine, client, desc
        self.remote = engine.backend in ("remote", "slurm")  # workers in another environment: checked
        self.jobs = engine._jobs  # the slurm backend's worker jobs
        self.address = str(engine.config.scheduler or (client.scheduler.address if self.jobs is not None else
                                                       "the embedded scheduler"))
        self.stall = float(engine.config.stall_timeout)
        self.timeout = float(engine.config.connect_timeout)
        now = time.monotonic()
        self.progress_at = now  # when a task of this map last finished (or the map started)
        self.polled_at = 0.0
        self.noted: dict[str, float] = {}  # what was noted -> when
        self.since: dict[str, float] = {}  # a condition -> since when it holds
        self.heard: dict[str, tuple[Any, float]] = {}  # worker -> (last heartbeat seen, when it changed here)
        self.module = "pipeline"  # the map's stage module (ready()): what every worker must import
        self.connected_jobs: set[str] = set()  # SLURM jobs with a worker connected, at the last look
        self.memory_advice = ("raise --memory-limit or lower --workers" if engine.backend == "local" else
                              "give the jobs more memory (--slurm-memory) or fewer cores (--slurm-cores)"
                              if self.jobs is not None else
                              "give the workers more memory (dask worker --memory-limit) or fewer threads")
        self.paths = tuple(engine.config.shared) + (
            (str(engine.config.records),) if self.jobs is not None and engine.config.records else ())

    # ---- waiting -----------------------------------------------------------------------------------

    def wait(self, inflight: dict[Any, tuple[Any, int, int, list[Any]]]) -> list[Any]:
        """The tasks of `inflight` that finished, at least one; looks at the cluster while none does."""
        from distributed import wait

        futures = [f for f, *_ in inflight.values()]
        while True:
            try:
                with self.translating():
                    done, _ = wait(futures, timeout=TICK_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            now = time.monotonic()
            if done:
                self.progress_at = now
                self.since.pop("no progress", None)
                if now - self.polled_at >= POLL_BUSY_S:
                    self.check(inflight)
                return list(done)
            if now - self.polled_at >= POLL_S:
                self.check(inflight)

    @contextlib.contextmanager
    def translating(self) -> Iterator[None]:
        """Dask's errors of a lost scheduler (a closed connection pool, a cancelled future, a closed comm) as
        one ClusterError; any other error as it is."""
        try:
            yield
        except ClusterError:
            raise
        except Exception as exc:
            if self.scheduler_lost(exc):
                raise self.lost_scheduler(exc) from None
            raise

    def scheduler_lost(self, exc: BaseException | None = None) -> bool:
        from concurrent.futures import CancelledError

        from distributed.comm.core import CommClosedError

        if self.client.status != "running":
            return True
        return isinstance(exc, (CancelledError, CommClosedError)) or (
            isinstance(exc, RuntimeError) and "closed" in str(exc).lower())

    def lost_scheduler(self, exc: BaseException) -> ClusterError:
        return ClusterError(f"lost the connection to the Dask scheduler {self.address} mid-run "
                            f"({type(exc).__name__}: {_first_line(exc)}); the tasks in flight are gone")

    # ---- before the first task ---------------------------------------------------------------------

    def ready(self, fn: Callable[..., Any]) -> int:
        """Wait (with notes, up to stall_timeout) until a worker is connected, then check that every worker
        imports `fn`'s module (remote clusters: their environment is not this one). The number of workers."""
        self.module = getattr(fn, "__module__", None) or "pipeline"
        if not self.remote:
            return self.engine.workers
        while True:
            ident = self.poll()
            workers = ident.get("workers", {})
            if workers:
                self.check_imports(workers, wait=True)
                self.since.pop("no workers", None)
                return len(workers)
            if not ident.get("unanswered"):
                self.no_workers()
            time.sleep(TICK_S)

    def check_imports(self, workers: dict[str, Any], *, wait: bool = False) -> None:
        """Every worker not yet checked imports the map's module, or ClusterError names the worker and error.

        The checks run in the background (one `client.run` per worker, on the client's event loop): a worker that
        does not answer (frozen, overloaded) never holds up the watch, whose heartbeat checks name it in time.
        `wait`: before the map's first task, wait up to connect_timeout for the workers' answers."""
        checked = self.engine._checked.setdefault(self.module, set())
        probes = self.engine._probes
        if not self.remote:
            return
        new = [w for w in workers if w not in checked]
        for w in new:
            if (self.module, w) not in probes:
                probes[(self.module, w)] = self._launch_probe(w)
        if wait and new:  # in short waits, the scheduler looked at between them (a frozen one is a stall)
            import concurrent.futures as cf

            waiting = [probes[(self.module, w)] for w in new if (self.module, w) in probes]
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline and cf.wait(waiting, timeout=TICK_S).not_done:
                if time.monotonic() - self.polled_at >= POLL_S:
                    self.poll()
        from pipeline import __version__

        for w in new:
            probe = probes.get((self.module, w))
            if probe is None or not probe.done():
                continue  # no answer yet: looked at again at the next check
            del probes[(self.module, w)]
            try:
                got = probe.result().get(w)
            except Exception as exc:  # the run itself failed (the scheduler went away, the worker left)
                if self.client.status != "running":
                    raise self.lost_scheduler(exc) from None
                continue
            if isinstance(got, BaseException):
                raise ClusterError(f"Dask worker {_worker_name(w, workers)} cannot import {self.module}: "
                                   f"{type(got).__name__}: {_first_line(got)}; install prep {__version__} (the "
                                   "version running here) in the workers' environment, then rerun")
            if got is None:
                continue  # the worker left before it answered
            got, missing = got if isinstance(got, tuple) else (got, [])
            if missing:
                raise ClusterError(f"Dask worker {_worker_name(w, workers)} cannot see {missing[0]}, a path of "
                                   "this machine: the workers need the same paths (a shared filesystem mounted at "
                                   "the same place on every node; docs/cluster.md)", kept=False)
            checked.add(w)
            if got != __version__ and f"version {w}" not in self.noted:
                self.noted[f"version {w}"] = time.monotonic()
                _note(f"worker {_worker_name(w, workers)} runs prep {got}, this client prep {__version__}")

    def _launch_probe(self, worker: str) -> Any:
        """`client.run(probe, workers=[worker])` as a concurrent future on the client's event loop."""
        import asyncio

        coro = self.client._run(_import_probe(self.module, self.paths), workers=[worker], on_error="return")
        return asyncio.run_coroutine_threadsafe(coro, self.client.loop.asyncio_loop)

    # ---- while waiting -----------------------------------------------------------------------------

    def poll(self) -> dict[str, Any]:
        """The scheduler's view (its identity with every worker), bounded: an unresponsive scheduler is a stall."""
        self.polled_at = asked = time.monotonic()
        try:
            with self.translating():
                ident: dict[str, Any] = self.client.sync(self.client.scheduler.identity, n_workers=-1,
                                                         callback_timeout=self.timeout)
        except TimeoutError:  # unanswered since it was asked, not since the answer was given up on
            self.stalled("scheduler", f"the Dask scheduler {self.address} has not answered for {{s}}",
                         time.monotonic() - asked)
            return {"workers": {}, "unanswered": True}
        self.since.pop("scheduler", None)
        if self.jobs is not None:
            self.track_jobs(ident.get("workers", {}))
        return ident

    def check(self, inflight: dict[Any, tuple[Any, int, int, list[Any]]]) -> None:
        """Look at the cluster: raise ClusterError for a fault that lasted stall_timeout; print notes."""
        ident = self.poll()
        if ident.get("unanswered"):
            return
        workers: dict[str, Any] = ident.get("workers", {})
        if not workers:
            self.no_workers()
            return
        self.since.pop("no workers", None)
        self.check_imports(workers)
        try:
            with self.translating():
                processing: dict[str, list[Any]] = self.client.sync(self.client.scheduler.processing,
                                                                    callback_timeout=self.timeout)
        except TimeoutError:
            return
        now = time.monotonic()
        held = {w: [inflight[k] for k in keys if k in inflight] for w, keys in processing.items()}
        for w, info in workers.items():
            seen = info.get("last_seen")
            before = self.heard.get(w)
            if before is None or before[0] != seen:
                self.heard[w] = (seen, now)
                self.since.pop(f"silent {w}", None)
                continue
            silent = now - before[1]
            mine = held.get(w) or []
            if mine and silent >= HEARTBEAT_SLACK_S:
                what = "; ".join(describe_units(t[3]) for t in mine[:3]) + (
                    f" and {len(mine) - 3} more task(s)" if len(mine) > 3 else "")
                self.stalled(f"silent {w}", f"Dask worker {_worker_name(w, workers)} has not been heard from for "
                             f"{{s}} while running {what} (frozen: stopped, an NFS stall, a network partition?)",
                             silent)
        if all(info.get("status") == "paused" for info in workers.values()):
            limit = min(int(i.get("memory_limit") or 0) for i in workers.values())
            self.stalled("paused", f"every Dask worker has been paused for {{s}} at its memory limit "
                         f"({limit / 2**30:.1f} GiB; Dask pauses a worker at 80%): a resource problem, not the data; "
                         f"{self.memory_advice}", None)
        else:
            self.since.pop("paused", None)
        idle = now - self.progress_at
        if idle >= SLOW_NOTE_S and now - self.noted.get("slow", 0.0) >= SLOW_NOTE_S:
            self.noted["slow"] = now
            running = [f"{describe_units(tasks[0][3])} on {_worker_name(w, workers)}"
                       for w, tasks in held.items() if tasks]
            _note(f"{self.desc}: no task finished for {idle:.0f} s; running: {'; '.join(running[:3]) or 'none'} "
                  "(their workers answer: slow tasks, or tasks blocked on I/O)")

    def no_workers(self) -> None:
        if self.jobs is not None:
            self.no_slurm_workers(self.jobs)
            return
        self.stalled("no workers", f"no Dask worker has been connected to {self.address} for {{s}}: start workers "
                     f"(dask worker {self.address}) or raise --stall-timeout", None)

    # ---- the slurm backend's jobs --------------------------------------------------------------------------

    def track_jobs(self, workers: dict[str, Any]) -> None:
        """Tell the jobs which of them have a worker connected; look at the queue when it is due (every
        SQUEUE_S while a job waits, starts or was lost, else every SQUEUE_IDLE_S); print what happened."""
        from pipeline.slurm import job_of_worker

        assert self.jobs is not None
        connected = {job_of_worker(info.get("name")) for info in workers.values()} - {None}
        for job_id in connected:
            self.jobs.worker_connected(str(job_id))
        lost = bool(self.connected_jobs - connected)
        self.connected_jobs = {str(j) for j in connected}
        since = time.monotonic() - self.jobs.refreshed_at
        busy = lost or not connected or self.jobs.unsettled()
        if since >= SQUEUE_IDLE_S or (busy and since >= SQUEUE_S):
            for event in self.jobs.refresh():
                _note(event)

    def no_slurm_workers(self, jobs: JobController) -> None:
        """No worker connected: jobs waiting in the queue (or starting) are not a stall, a note every NOTE_S says
        the queue's state; with no job of the run left (every one ended and none replaced), the stall clock
        runs, and its one line names the jobs and their SLURM states."""
        waiting = jobs.waiting()
        if waiting:
            self.since.pop("no workers", None)
            now = time.monotonic()
            first = self.since.setdefault("queued", now)
            if now - first >= NOTE_S / 3 and now - self.noted.get("queued", 0.0) >= NOTE_S:
                self.noted["queued"] = now
                _note(f"{self.desc}: no Dask worker yet, waiting for SLURM for {now - first:.0f} s: "
                      f"{jobs.describe(waiting)} (jobs in the queue are not a stall)")
            return
        self.since.pop("queued", None)
        why = f" ({jobs.gave_up})" if jobs.gave_up else ""
        self.stalled("no workers", f"no Dask worker has been connected to {self.address} for {{s}} and no SLURM "
                     f"job of this run is left{why}: {jobs.describe()}", None)

    def stalled(self, what: str, message: str, seconds: float | None) -> None:
        """A condition that holds: a note every NOTE_S, ClusterError once it has lasted stall_timeout.
        `message` has a `{s}` for how long; `seconds` is how long it has held already (None: from now)."""
        now = time.monotonic()
        since = self.since.setdefault(what, now - (seconds or 0.0))
        held = now - since
        if self.stall and held >= self.stall:
            raise ClusterError(message.format(s=f"{held:.0f} s") + f" (--stall-timeout {self.stall:g})")
        if held >= NOTE_S / 3 and now - self.noted.get(what, 0.0) >= NOTE_S:
            self.noted[what] = now
            limit = f"stopping after --stall-timeout {self.stall:g} s" if self.stall else "waiting (--stall-timeout 0)"
            _note(f"{self.desc}: " + message.format(s=f"{held:.0f} s") + f"; {limit}")

    # ---- a task lost with its worker -----------------------------------------------------------------

    def lost(self, exc: BaseException, units: Sequence[Any]) -> WorkerLost:
        """Dask's KilledWorker as WorkerLost: killed at the memory limit (the nanny's own event says so), or died."""
        last = getattr(exc, "last_worker", None)
        addr = str(getattr(last, "address", "") or "?")
        who = _worker_name(addr, {addr: {"name": getattr(last, "name", None)}})
        limit = int(getattr(last, "memory_limit", 0) or 0)
        rss = 0
        for attempt in range(3):  # the nanny's event may reach the scheduler just after the task failed
            with contextlib.suppress(Exception):
                events = self.client.sync(self.client.scheduler.events, topic="worker-restart-memory",
                                          callback_timeout=self.timeout)
                rss = max((int(e.get("rss") or 0) for _t, e in events if e.get("worker") == addr), default=0)
            if rss or attempt == 2:
                break
            time.sleep(0.2)
        return WorkerLost("memory" if rss else "died", who, describe_units(units), limit=limit, rss=rss,
                          advice=self.memory_advice)


def _import_probe(module: str, paths: Sequence[str] = ()) -> Callable[[], Any]:
    """A function for the workers that imports `module` and returns prep's version there, with the `paths` it
    cannot see (a (version, missing) pair when paths are asked). It is made here (a closure), so it travels by
    value: a worker without prep can still run it and say why the import fails."""

    def probe() -> Any:
        import importlib
        import os

        importlib.import_module(module)
        version = str(importlib.import_module("pipeline").__version__)
        return (version, [p for p in paths if not os.path.exists(p)]) if paths else version

    return probe


def _worker_name(address: str, workers: dict[str, Any]) -> str:
    """`tcp://10.0.0.5:40123 (node7-3)`: the address and the worker's name (`dask worker --name`; a LocalCluster
    numbers its workers: `(worker 0)`)."""
    name = (workers.get(address) or {}).get("name")
    if name in (None, "", address):
        return address
    return f"{address} (worker {name})" if isinstance(name, int) or str(name).isdigit() else f"{address} ({name})"


def _type_name(exc: BaseException) -> str:
    """`struct.error`, `MemoryError`: a name that says what it is (struct's exception is called `error`)."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__name__}" if kind.__name__ == "error" else kind.__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _note(message: str) -> None:
    """An `[engine]` line on stderr, on a line of its own: a progress bar being drawn is cleared first and
    redrawn below it (a plain print would glue the line onto the bar)."""
    from tqdm import tqdm

    tqdm.write(f"[engine] {message}", file=sys.stderr)
    sys.stderr.flush()


class _Rates:
    """Progress bar updates: units done and, with `measure`, counters per second."""

    def __init__(self, bar: Any, measure: Callable[[Any], dict[str, float]] | None) -> None:
        self.bar, self.measure = bar, measure
        self.totals: dict[str, float] = {}
        self.t0 = time.monotonic()

    def add(self, batch: Batch[Any, Any]) -> None:
        if self.measure is not None:
            for r in batch.results:
                for k, v in self.measure(r).items():
                    self.totals[k] = self.totals.get(k, 0.0) + v
            elapsed = max(time.monotonic() - self.t0, 1e-9)
            self.bar.set_postfix({f"{k}/s": f"{v / elapsed:,.0f}" for k, v in self.totals.items()}, refresh=False)
        self.bar.update(len(batch.units))


def _log_start(backend: str, client: Any, config: RunConfig, jobs: JobController | None = None) -> None:
    try:  # bounded: a scheduler that froze just after the handshake is the first map's stall, not a hang here
        info: dict[str, Any] = client.sync(client.scheduler.identity, n_workers=-1,
                                           callback_timeout=config.connect_timeout)
    except Exception:
        info = {}
    workers = len(info.get("workers", {}))
    where = {"local": "LocalCluster"}.get(backend) or client.scheduler.address
    link = dashboard_link(client, enabled=backend not in ("local", "slurm") or config.dashboard is not None,
                          info=info)
    if jobs is not None:  # the slurm backend: the scheduler is this process's, its workers are jobs on their way
        where = f"scheduler {where} in this process, SLURM jobs {', '.join(jobs.jobs)} ({jobs.name}; records in " \
                f"{jobs.records})"
        _note(f"{backend}: {where}, {workers} worker{'s' * (workers != 1)} yet, dashboard {link}")
        return
    _note(f"{backend}: {where}, {workers} worker{'s' * (workers != 1)}, dashboard {link}, {_memory_text(info)}")


def dashboard_link(client: Any, *, enabled: bool = True, info: dict[str, Any] | None = None) -> str:
    """The dashboard's address as it is bound: the embedded scheduler's own HTTP server (127.0.0.1 unless
    --dashboard opened it; 0.0.0.0 is named as every interface), else the remote scheduler's host and its
    dashboard port (from `info`, the scheduler's identity, when given); `off` when there is none."""
    if not enabled:
        return "off"
    cluster = getattr(client, "cluster", None)
    server = getattr(getattr(cluster, "scheduler", None), "http_server", None)
    if cluster is not None:
        if server is None or not getattr(server, "port", None):
            return "off"
        host = str(server.address)
        if host in ("0.0.0.0", "::", ""):
            import socket

            return f"http://{socket.gethostname()}:{server.port}/status (listening on every interface)"
        return f"http://{'[' + host + ']' if ':' in host else host}:{server.port}/status"
    try:
        port = (info if info is not None else client.scheduler_info(n_workers=0)).get("services", {}).get("dashboard")
    except Exception:
        port = None
    if not port:
        return "off"
    host = client.scheduler.address.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"http://{host}:{port}/status"


def _memory_text(info: dict[str, Any]) -> str:
    """`memory limit 11.7 GiB per worker` (Dask's own limit, from the scheduler's identity `info`), or `no memory
    limit`."""
    try:
        limits = {int(w.get("memory_limit") or 0) for w in info["workers"].values()}
    except Exception:  # an old scheduler without the field, or no answer: say nothing wrong
        return "memory limit unknown"
    if not limits or limits == {0}:
        return "no memory limit"
    lo = min(limits)
    return f"memory limit {lo / 2**30:.1f} GiB per worker" + (" (or more)" if len(limits) > 1 else "")


# ---- backends ------------------------------------------------------------------------------------


@contextlib.contextmanager
def remote_client(config: RunConfig) -> Iterator[Any]:
    """A `distributed.Client` to `config.scheduler`, once the address has answered Dask's handshake."""
    from distributed import Client

    timeout = config.connect_timeout
    try:
        _handshake(str(config.scheduler), timeout, config.stall_timeout)
        client = Client(config.scheduler, timeout=f"{timeout}s")
    except (OSError, TimeoutError) as exc:
        raise PrepError(f"cannot reach Dask scheduler {config.scheduler}: {exc}") from None
    except (ValueError, TypeError) as exc:  # a malformed address; tls:// without a security configuration
        hint = (" (tls:// needs the Dask TLS configuration: distributed.comm.tls.ca-file, .client.cert, "
                ".client.key)" if str(config.scheduler).startswith("tls://") else "")
        raise PrepError(f"cannot use Dask scheduler {config.scheduler!r}: {exc}{hint}") from None
    # Dask's client logs its own reconnect attempts and their tracebacks at ERROR when the scheduler goes away; the
    # run says it in one line of its own (ClusterError), as the embedded cluster's `silence_logs` does for it.
    from distributed.utils import silence_logging_cmgr

    with silence_logging_cmgr(logging.CRITICAL):
        try:
            yield client
        finally:
            _close_quietly(client)


class NotDask(PrepError):
    """The address answered, but not with Dask's handshake (another service on that port)."""


def _handshake(address: str, timeout: float, stall: float = 0.0) -> None:
    """Connect to `address` and complete Dask's handshake (Dask's own connect bounds the TCP connect but waits for
    the handshake forever).

    - refused, unroutable: OSError (Dask's own connect retries for `timeout` seconds first);
    - an answer that is not Dask's handshake (another service, junk bytes, a closed connection): NotDask, one
      line, whatever the bytes made Dask's reader raise (struct.error, a 2 EiB allocation, msgpack's errors);
    - the connection accepted and no answer (a frozen or overloaded scheduler, or a service that never speaks):
      the unresponsive scheduler of `--stall-timeout`, tried again until it answers, with a note every NOTE_S, and
      ClusterError (exit 4) once `stall` seconds have passed (0 = wait forever)."""
    import asyncio

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address
    from distributed.security import Security

    scheme, _ = parse_address(address)  # a malformed address: ValueError, before any connection
    args = Security().get_connection_args("client")
    if scheme == "tls" and args.get("ssl_context") is None:
        raise TypeError("TLS expects a `ssl_context` argument of type ssl.SSLContext (perhaps check your TLS "
                        "configuration?)")

    async def probe() -> None:
        comm = await connect(address, timeout=timeout, **args)
        await comm.close()

    bound = 2 * timeout  # connect's own bound first (a refused or unroutable address), then the handshake's
    t0 = time.monotonic()
    noted = 0.0
    while True:
        left = stall - (time.monotonic() - t0) if stall else bound
        try:  # never cut short the connect's own retries (a refused address must still say so)
            asyncio.run(asyncio.wait_for(probe(), max(timeout + 1, min(bound, left))))
            return
        except TimeoutError:
            pass  # accepted, no answer: below
        except OSError:
            raise
        except Exception as exc:
            raise NotDask(f"cannot reach Dask scheduler {address}: it answered with something other than Dask's "
                          f"handshake ({_type_name(exc)}: {_first_line(exc)[:200]}); is it a Dask scheduler? (a "
                          "TLS scheduler needs tls://)") from None
        held = time.monotonic() - t0
        what = (f"the Dask scheduler {address} accepted the connection but has not answered Dask's handshake for "
                f"{held:.0f} s (a frozen or overloaded scheduler? is it a Dask scheduler? a TLS scheduler needs "
                "tls://)")
        if stall and held >= stall:
            raise ClusterError(f"{what} (--stall-timeout {stall:g})", kept=False)
        if time.monotonic() - noted >= NOTE_S:
            noted = time.monotonic()
            _note(what + (f"; stopping after --stall-timeout {stall:g} s" if stall else
                          "; waiting (--stall-timeout 0)"))


@dataclass(slots=True)
class SlurmSession:
    """What the slurm backend opens: the client of the scheduler in this process, and the worker jobs."""

    client: Any
    jobs: JobController


WORKER_DEATH_TIMEOUT_S = 60  # a SLURM worker whose scheduler is gone this long exits (prep killed: its jobs end)


def worker_command(address: str, spec: SlurmSpec) -> list[str]:
    """The job's Dask worker: `spec.cores` single-threaded processes (as the LocalCluster's), named after the job
    (`slurm-<id>`, `slurm-<id>-<n>`), the job's memory split among them, no dashboard, and an exit when the
    scheduler has been gone for WORKER_DEATH_TIMEOUT_S (prep killed with SIGKILL: its jobs still end)."""
    from pipeline.slurm import JOB_ID

    return [sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", f"slurm-{JOB_ID}",
            "--nworkers", str(spec.cores), "--nthreads", "1", "--memory-limit", str(spec.worker_memory_limit()),
            "--no-dashboard", "--death-timeout", str(WORKER_DEATH_TIMEOUT_S)]


def worker_environment() -> dict[str, str]:
    """CLUSTER_SETTINGS as Dask's environment variables, for workers this process does not start."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
            for key, value in CLUSTER_SETTINGS.items()}


def scheduler_host() -> str:
    """This machine's address as the nodes see it: the one its default route leaves from (127.0.0.1 without
    one: a single-node SLURM)."""
    try:
        from distributed.utils import get_ip

        return str(get_ip())
    except Exception:
        return "127.0.0.1"


@contextlib.contextmanager
def slurm_client(config: RunConfig) -> Iterator[SlurmSession]:
    """A scheduler in this process (a LocalCluster with no worker of its own) whose workers are SLURM jobs: the
    jobs are submitted now (sbatch's refusal is one line, before any work) and every one of them is cancelled
    when the session ends, however it ends (the signals are held meanwhile, as `_close_quietly` does)."""
    from distributed import Client, LocalCluster

    from pipeline import slurm
    from pipeline.clock import utc_now

    spec = config.slurm
    assert spec is not None and config.records
    spec.check()
    name = slurm.new_run_name()
    records = Path(config.records) / f"{utc_now().replace(':', '').replace('-', '')}-{name}"
    host = spec.scheduler_host or scheduler_host()
    try:
        cluster = LocalCluster(n_workers=0, processes=True, host=host, scheduler_port=0,
                               dashboard_address=config.dashboard or "127.0.0.1:0", silence_logs=logging.CRITICAL)
    except Exception as exc:  # an address that is not this machine's, a port in use: one line, the root cause
        cause: BaseException = exc
        while cause.__cause__ is not None:
            cause = cause.__cause__
        raise PrepError(f"--cluster slurm: cannot start the Dask scheduler on {host} ({_type_name(cause)}: "
                        f"{_first_line(cause)}); --slurm-scheduler-host names an address of this machine that "
                        "the nodes reach") from None
    client = Client(cluster)
    jobs: slurm.JobController | None = None
    try:
        address = str(cluster.scheduler_address)
        script = slurm.render_script(spec, name=name, log_dir=records, worker=worker_command(address, spec),
                                     env=worker_environment(),
                                     about=f"prep's Dask worker for the scheduler at {address} (pid {os.getpid()})")
        jobs = slurm.JobController(spec, script, name, records)
        jobs.start()
        yield SlurmSession(client, jobs)
    finally:
        in_main = threading.current_thread() is threading.main_thread()
        saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
        try:
            left = jobs.cancel_all() if jobs is not None and jobs.attempted else []
            if left:
                _note(f"SLURM jobs still listed by squeue after scancel: {', '.join(left)} (scancel {' '.join(left)})")
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            _close_quietly(client, cluster)


# Settings of the embedded cluster's scheduler, nannies and workers (applied while it starts; a worker takes
# them from its nanny, also on a restart). Workers here run one CPU-bound task at a time, so the defaults'
# background work competes with the stage for the same cores: a stack sample every 10 ms (the profiler, whose
# history a long run also keeps in memory), an event-loop health tick every 20 ms and a system monitor every
# 0.5 s. Measured on 2 cores (bench/reencode.py, quiet machine): with these, 2 workers re-encode at 542
# frames/s instead of 512 (1.96x one worker instead of 1.84x). The nanny's MALLOC_TRIM_THRESHOLD_ stays: it
# keeps long-running workers' memory from creeping, and removing it measured -0.4 % CPU (noise).
# Every Dask comm that batches messages (client -> scheduler, scheduler -> each worker) keeps its last
# `low-level-log-length` messages (default 1,000) for debugging, each with the task it carried: here a
# task's units (a few hundred episodes' metadata), so the default let the client process (which hosts the
# embedded scheduler) grow by ~2 kB per episode up to ~1,000 tasks per comm (measured: 207 MB at 10 k
# episodes, 382 MB at 100 k). 16 keeps the debugging aid and bounds it. Applied to the whole session in this
# process (`SESSION_SETTINGS`: the client's and the embedded scheduler's comms, also to a worker that
# reconnects) and to the embedded cluster's workers; a remote scheduler takes it from its own configuration
# (DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH=16).
SESSION_SETTINGS: dict[str, Any] = {"distributed.admin.low-level-log-length": 16}
CLUSTER_SETTINGS: dict[str, Any] = {
    **SESSION_SETTINGS,
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
}


def local_cluster_kwargs(config: RunConfig) -> dict[str, Any]:
    """Keyword arguments of the embedded LocalCluster: the one place for worker settings.

    Workers start with the nanny's environment (`distributed.nanny.pre-spawn-environ`, which sets
    MALLOC_TRIM_THRESHOLD_=65536: kept on purpose, see CLUSTER_SETTINGS; bench/reencode.py's `no-malloc-trim`
    setting measures it) plus `worker_env`.
    """
    return {
        "n_workers": config.workers or machine_cores(),
        "threads_per_worker": 1,
        "processes": True,
        # this machine only by default (Dask's ":0" listens on every interface: an unauthenticated page with task
        # keys, logs and system information); port 0 = a free one, never colliding with another cluster's :8787
        "dashboard_address": config.dashboard,
        # with the dashboard off, the scheduler's HTTP server (health and metrics routes) still starts: on
        # loopback and a free port, not on Dask's default 8787 of the scheduler's host
        **({} if config.dashboard else {"scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"}}),
        # Worker logs at ERROR are comm chatter (a heartbeat to a scheduler that is closing prints a 40-line
        # traceback); a task's own error comes back through its future, a restart is a WARNING: quiet them.
        "silence_logs": logging.CRITICAL,
        "memory_limit": config.memory_limit,
        "env": dict(config.worker_env),
    }


@contextlib.contextmanager
def local_client(config: RunConfig) -> Iterator[Any]:
    """A `distributed.Client` to an embedded LocalCluster sized to the machine."""
    import dask
    from distributed import Client, LocalCluster

    # Worker processes inherit SIGINT ignored: a Ctrl-C reaches the whole process group, and only the
    # client should act on it (closing the cluster), not every worker printing its own traceback.
    # A SIGTERM that arrives while the cluster starts is held until it has started (acted on mid-start,
    # distributed cannot close the half-built cluster and prints tracebacks at exit), then re-raised.
    in_main = threading.current_thread() is threading.main_thread()
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    previous_term = signal.signal(signal.SIGTERM, lambda signum, _frame: held.append(signum)) if in_main else None
    try:
        with dask.config.set(CLUSTER_SETTINGS):
            cluster = LocalCluster(**local_cluster_kwargs(config))
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous_term is None else previous_term)
    if held:
        cluster.close()
        signal.raise_signal(signal.SIGTERM)  # the caller's handler (the CLI: resume hint, exit 143), or the default
    client = Client(cluster)
    try:
        yield client
    finally:
        _close_quietly(client, cluster)


QUIET_LOGGERS = ("distributed", "tornado", "asyncio")


class _DropGatherExit(logging.Filter):
    """Dask's gather stops its helper tasks with `AllExit` (its own control flow, never an error); a helper left
    behind by a bounded result fetch (`Engine._collect`) ends that way when the client closes, and asyncio would
    print it as "Task exception was never retrieved" with a traceback whenever the task is collected."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and type(exc).__name__ == "AllExit"
                    and type(exc).__module__.startswith("distributed"))


def _quiet_gather_helpers() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _DropGatherExit) for f in logger.filters):
        logger.addFilter(_DropGatherExit())


def _close_quietly(client: Any, cluster: Any = None) -> None:
    """Close the session on every exit path (normal end, an error, Ctrl-C, SIGTERM) without Dask's shutdown
    chatter on stderr (heartbeats to a closing scheduler, comms closed mid-message): the run's outcome has been
    decided by then, and a traceback here would only hide it. SIGINT/SIGTERM are ignored meanwhile, so a
    second Ctrl-C cannot leave worker processes behind."""
    in_main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        with contextlib.suppress(Exception):
            client.close(timeout=10)
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close(timeout=10)
        # the client's leftover asyncio tasks (a result fetch given up on a lost worker, a reconnect) are collected
        # now, while their "Task exception was never retrieved" cannot print; later, at exit, they would
        gc.collect()
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        for s, handler in saved.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _no_client(config: RunConfig) -> Iterator[Any]:  # pragma: no cover - the inline backend never asks
    raise PrepError("the inline backend has no Dask client")
    yield None


BACKENDS: dict[str, Callable[[RunConfig], contextlib.AbstractContextManager[Any]]] = {
    "inline": _no_client,
    "local": local_client,
    "remote": remote_client,
    "slurm": slurm_client,
}


@contextlib.contextmanager
def open_engine(config: RunConfig | None = None) -> Iterator[Engine]:
    """An engine session: a cluster (if any) is started on first need and closed on exit."""
    engine = Engine(config or RunConfig())
    try:
        yield engine
    finally:
        engine.close()
