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
  nodes, or dask-jobqueue).

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
from typing import Any, Generic, TypeVar

from pipeline.errors import PrepError

U = TypeVar("U")
R = TypeVar("R")

MAX_BATCH = 4096  # units per task at most (bounds one task's argument and result payload)
BALANCE_TASKS_PER_WORKER = 4  # a short map is split into at least this many tasks per worker


@dataclass(slots=True, frozen=True)
class RunConfig:
    """How to execute.

    `backend`: "inline" | "local" | "remote"; None picks "remote" when `scheduler` is set, else "local".
    `workers`: LocalCluster worker processes (default: the machine's cores).
    `batch`: units per task (None: sized so that a task runs about `task_seconds`).
    `window`: tasks in flight at most (None: 2 per worker, at least 4).
    `inline_max`: with the local backend, a map of at most this many units runs in-process
    (no cluster is started for it).
    `worker_env` / `memory_limit`: settings of LocalCluster workers (environment variables such as
    MALLOC_TRIM_THRESHOLD_, and Dask's per-worker memory limit; 0 = none).
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

    def backend_name(self) -> str:
        name = self.backend or ("remote" if self.scheduler else "local")
        if name not in BACKENDS:
            raise PrepError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
        if name == "remote" and not self.scheduler:
            raise PrepError("the remote backend needs a scheduler address (--scheduler ADDRESS)")
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
    maps: int = 0
    tasks_submitted: int = 0
    units: int = 0
    max_in_flight: int = 0
    max_outstanding: int = 0  # submitted but not yet handed to the caller (in flight + reorder buffer)
    batch_sizes: list[int] = field(default_factory=list)  # last few, for logs


def _run_batch(units: Sequence[Any], fn: Callable[[Any], Any],
               on_error: Callable[[Any, BaseException], Any]) -> tuple[list[Any], float]:
    t0 = time.perf_counter()
    out = []
    for unit in units:
        try:
            out.append(fn(unit))
        except Exception as exc:  # a stage bug or unexpected input: record it, keep going
            out.append(on_error(unit, exc))
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
    capped so that a short map still spreads over every worker."""

    def __init__(self, config: RunConfig, workers: int, cost_s: float | None) -> None:
        self.fixed = config.batch
        self.target = config.task_seconds
        self.workers = max(1, workers)
        self.hint = cost_s
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
            n = 1  # nothing known yet: small probes first
        if remaining is not None:
            n = min(n, max(1, remaining // (self.workers * BALANCE_TASKS_PER_WORKER)))
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

    # ---- session -------------------------------------------------------------------------------

    def close(self) -> None:
        self._stack.close()
        self._client = None

    @property
    def started(self) -> bool:
        return self._client is not None

    def start(self, *, local: bool = True) -> None:
        """Bring the session up now (connect to the scheduler; with `local`, also start the LocalCluster),
        so that a job writes nothing (lock, options) for a session that cannot start. Inline: nothing."""
        if self.backend == "remote" or (self.backend == "local" and local):
            self.client()

    def client(self) -> Any:
        """The `distributed.Client` of the session, connecting (or starting the cluster) on first use."""
        if self.backend == "inline":
            raise PrepError("the inline backend has no Dask client")
        if self._client is None:
            import dask

            self._stack.enter_context(dask.config.set(SESSION_SETTINGS))  # restored when the session ends
            self._client = self._stack.enter_context(BACKENDS[self.backend](self.config))
            self.stats.clusters_started += 1
            _log_start(self.backend, self._client)
        return self._client

    @property
    def workers(self) -> int:
        """Workers of the session's cluster (the configured count before it starts; 1 inline)."""
        if self.backend == "inline":
            return 1
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
            measure: Callable[[R], dict[str, float]] | None = None) -> Iterator[Batch[U, R]]:
        """Batches of `fn` over `units`, in the order of `units` (see the module docstring).

        `total` (units, when known) sizes the progress bar and lets short maps spread over the workers
        (and run inline when tiny); `cost_s` is a hint of one unit's stage time in seconds;
        `measure` maps a result to counters shown as rates in the progress bar.
        """
        from tqdm import tqdm

        self.stats.maps += 1
        inline = self.backend == "inline" or (
            self.backend == "local" and total is not None and total <= self.config.inline_max
            and self._client is None)
        bar = tqdm(total=total, desc=desc, unit=unit_name, disable=not self.config.progress, dynamic_ncols=True,
                   file=sys.stderr)
        rates = _Rates(bar, measure)
        try:
            stream = self._inline(fn, units, on_error, total, cost_s) if inline else \
                self._distributed(fn, units, on_error, desc, total, cost_s)
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
                total: int | None, cost_s: float | None) -> Iterator[Batch[U, R]]:
        sizer = _Sizer(self.config, 1, cost_s)
        it = iter(units)
        seq = first = 0
        while True:
            chunk = _take(it, sizer.size(None if total is None else total - first))
            if not chunk:
                return
            results, seconds = _run_batch(chunk, fn, on_error)
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
                     desc: str, total: int | None, cost_s: float | None) -> Iterator[Batch[U, R]]:
        from distributed import as_completed

        client = self.client()
        workers = self.workers
        window = self.config.window or max(4, 2 * workers)
        cap = 4 * window  # in flight + finished but waiting for an earlier batch
        sizer = _Sizer(self.config, workers, cost_s)
        it = iter(units)
        token = uuid.uuid4().hex[:8]
        meta: dict[str, tuple[int, int, list[U]]] = {}
        pending: dict[int, Batch[U, R]] = {}
        ac = as_completed()
        seq = emitted = first = in_flight = 0
        exhausted = False
        try:
            while True:
                while not exhausted and in_flight < window and seq - emitted < cap:
                    chunk = _take(it, sizer.size(None if total is None else total - first))
                    if not chunk:
                        exhausted = True
                        break
                    fut = client.submit(_run_batch, chunk, fn, on_error, key=f"{desc}-{token}-{seq}",
                                        retries=self.config.retries, pure=False)
                    meta[fut.key] = (seq, first, chunk)
                    ac.add(fut)
                    in_flight += 1
                    seq += 1
                    first += len(chunk)
                    self._count_submit(len(chunk), in_flight, seq - emitted)
                if in_flight == 0:
                    return
                fut = next(ac)
                in_flight -= 1
                bseq, bfirst, chunk = meta.pop(fut.key)
                try:
                    results, seconds = fut.result()
                    batch = Batch(bseq, bfirst, chunk, results, seconds)
                    sizer.observe(len(chunk), seconds)
                except Exception as exc:  # the task failed (its worker died beyond the retries, ...)
                    batch = Batch(bseq, bfirst, chunk, [on_error(u, exc) for u in chunk], 0.0, failed=True)
                fut.release()
                pending[bseq] = batch
                while emitted in pending:
                    yield pending.pop(emitted)
                    emitted += 1
        finally:
            if meta:  # stopped early (an error or Ctrl-C in the caller): cancel what is still queued
                with contextlib.suppress(Exception):
                    client.cancel(list(ac.futures))


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


def _log_start(backend: str, client: Any) -> None:
    workers = len(client.nthreads())
    where = "LocalCluster" if backend == "local" else client.scheduler.address
    link = getattr(client, "dashboard_link", None)
    print(f"[engine] {backend}: {where}, {workers} worker{'s' * (workers != 1)}, dashboard {link or 'off'}, "
          f"{_memory_text(client)}", file=sys.stderr, flush=True)


def _memory_text(client: Any) -> str:
    """`memory limit 11.7 GiB per worker` (Dask's own limit, from the scheduler), or `no memory limit`."""
    try:
        limits = {int(w.get("memory_limit") or 0) for w in client.scheduler_info()["workers"].values()}
    except Exception:  # an old scheduler without the field: say nothing wrong
        return "memory limit unknown"
    if not limits or limits == {0}:
        return "no memory limit"
    lo = min(limits)
    return f"memory limit {lo / 2**30:.1f} GiB per worker" + (" (or more)" if len(limits) > 1 else "")


# ---- backends ------------------------------------------------------------------------------------


@contextlib.contextmanager
def remote_client(config: RunConfig) -> Iterator[Any]:
    """A `distributed.Client` to `config.scheduler`."""
    from distributed import Client

    try:
        client = Client(config.scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise PrepError(f"cannot reach Dask scheduler {config.scheduler}: {exc}") from None
    except (ValueError, TypeError) as exc:  # a malformed address; tls:// without a security configuration
        hint = (" (tls:// needs the Dask TLS configuration: distributed.comm.tls.ca-file, .client.cert, "
                ".client.key)" if str(config.scheduler).startswith("tls://") else "")
        raise PrepError(f"cannot use Dask scheduler {config.scheduler!r}: {exc}{hint}") from None
    try:
        yield client
    finally:
        _close_quietly(client)


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
    MALLOC_TRIM_THRESHOLD_=65536; see /work/shared/docs/lerobot-reader-notes.md) plus `worker_env`.
    """
    return {
        "n_workers": config.workers or machine_cores(),
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": ":0",  # a free port: never collides with another cluster's :8787
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
}


@contextlib.contextmanager
def open_engine(config: RunConfig | None = None) -> Iterator[Engine]:
    """An engine session: a cluster (if any) is started on first need and closed on exit."""
    engine = Engine(config or RunConfig())
    try:
        yield engine
    finally:
        engine.close()
