"""The one module that knows Dask: map a stage over units on a LocalCluster or a remote scheduler.

Stages are plain functions `unit -> result`; the runner batches units into tasks, retries tasks
whose worker died, shows a progress bar, and turns any exception that escapes a stage into a
failure result (via the stage's `on_error`) so that one bad unit never stops the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tqdm import tqdm

from pipeline.errors import PrepError

U = TypeVar("U")
R = TypeVar("R")


@dataclass(slots=True, frozen=True)
class RunConfig:
    """How to execute: `scheduler=None` starts an embedded LocalCluster of `workers` processes."""

    scheduler: str | None = None
    workers: int | None = None
    retries: int = 2
    progress: bool = True
    batch: int | None = None


def machine_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_client(config: RunConfig) -> Iterator[Any]:
    """A `distributed.Client`: to `config.scheduler`, or to a LocalCluster sized to the machine."""
    from distributed import Client, LocalCluster

    if config.scheduler:
        try:
            client = Client(config.scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise PrepError(f"cannot reach Dask scheduler {config.scheduler}: {exc}") from None
        try:
            yield client
        finally:
            client.close()
        return
    workers = config.workers or machine_cores()
    # Worker processes inherit SIGINT ignored: a Ctrl-C reaches the whole process group, and only the
    # client should act on it (closing the cluster), not every worker printing its own traceback.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # a free port: never collides with another cluster's :8787
            silence_logs=logging.ERROR,
            memory_limit=0,
        )
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _run_batch(
    units: Sequence[Any], fn: Callable[[Any], Any], on_error: Callable[[Any, BaseException], Any]
) -> list[Any]:
    out = []
    for unit in units:
        try:
            out.append(fn(unit))
        except Exception as exc:  # a stage bug or unexpected input: record it, keep going
            out.append(on_error(unit, exc))
    return out


def run_map(
    fn: Callable[[U], R],
    units: Sequence[U],
    *,
    on_error: Callable[[U, BaseException], R],
    config: RunConfig,
    desc: str,
    measure: Callable[[R], dict[str, float]] | None = None,
    unit_name: str = "unit",
) -> list[R]:
    """Results of `fn` over `units`, in the order of `units`."""
    if not units:
        return []
    with dask_client(config) as client:
        n_workers = max(1, len(client.scheduler_info().get("workers", {})) or config.workers or 1)
        batch = config.batch or max(1, min(64, len(units) // (n_workers * 4) or 1))
        batches = [list(units[i : i + batch]) for i in range(0, len(units), batch)]
        return _gather(client, fn, batches, on_error, config, desc, measure, unit_name)


def _gather(
    client: Any,
    fn: Callable[[U], R],
    batches: list[list[U]],
    on_error: Callable[[U, BaseException], R],
    config: RunConfig,
    desc: str,
    measure: Callable[[R], dict[str, float]] | None,
    unit_name: str,
) -> list[R]:
    from distributed import as_completed

    futures = client.map(
        _run_batch,
        batches,
        fn=fn,
        on_error=on_error,
        retries=config.retries,
        pure=False,
        key=[f"{desc}-{i}-{time.monotonic_ns()}" for i in range(len(batches))],
    )
    index = {f.key: i for i, f in enumerate(futures)}
    results: list[list[R] | None] = [None] * len(batches)
    totals: dict[str, float] = {}
    t0 = time.monotonic()
    total_units = sum(len(b) for b in batches)
    with tqdm(total=total_units, desc=desc, unit=unit_name, disable=not config.progress, dynamic_ncols=True) as bar:
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                res = fut.result()
            except Exception as exc:  # the task itself failed (worker died beyond retries, ...)
                res = [on_error(u, exc) for u in batches[i]]
            results[i] = res
            if measure is not None:
                for r in res:
                    for k, v in measure(r).items():
                        totals[k] = totals.get(k, 0.0) + v
                elapsed = max(time.monotonic() - t0, 1e-9)
                bar.set_postfix({f"{k}/s": f"{v / elapsed:,.0f}" for k, v in totals.items()}, refresh=False)
            bar.update(len(res))
            fut.release()
    return [r for batch in results for r in (batch or [])]
