"""The engine session on a real LocalCluster and inline: order, failures recorded per unit, batching,
one cluster per session, and the bound on tasks in flight (measured on the scheduler itself)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.cli import run_prep

from pipeline.runner import CLUSTER_SETTINGS, MAX_BATCH, SESSION_SETTINGS, RunConfig, _Sizer, open_engine


def square_or_fail(x: int) -> int:
    if x == 3:
        raise ValueError("bad unit 3")
    return x * x


def as_failure(x: int, exc: BaseException) -> int:
    return -1000 - x if isinstance(exc, ValueError) else -1


def slow_square(x: int) -> int:
    time.sleep(0.02)
    return x * x


DONE = frozenset({"memory", "released", "forgotten", "erred"})


def counted(n: int, pulled: list[int]) -> Iterator[int]:
    for i in range(n):
        pulled.append(i)
        yield i


@pytest.mark.slow
@pytest.mark.cluster
def test_map_keeps_order_and_records_failures() -> None:
    cfg = RunConfig(workers=2, progress=False, batch=2)
    with open_engine(cfg) as engine:
        out = list(engine.results(square_or_fail, list(range(7)), on_error=as_failure, desc="t",
                                  measure=lambda r: {"items": 1.0}))
        assert engine.stats.clusters_started == 1 and engine.stats.tasks_submitted == 4
    assert out == [0, 1, 4, -1003, 16, 25, 36]


def test_inline_backend_same_results_no_cluster() -> None:
    with open_engine(RunConfig(backend="inline", progress=False, batch=3)) as engine:
        batches = list(engine.map(square_or_fail, range(7), on_error=as_failure, desc="t"))
        assert not engine.started and engine.stats.clusters_started == 0
    assert [b.first for b in batches] == [0, 3, 6]
    assert [r for b in batches for r in b.results] == [0, 1, 4, -1003, 16, 25, 36]


def concurrent_square(x: int) -> tuple[int, int]:
    """x*x and how many units ran at once (peak seen by this one), each unit waiting 0.2 s for the others."""
    global _RUNNING, _PEAK
    with _GATE:
        _RUNNING += 1
        _PEAK = max(_PEAK, _RUNNING)
    time.sleep(0.2)
    with _GATE:
        peak = _PEAK
        _RUNNING -= 1
    if x == 3:
        raise ValueError("bad unit 3")
    return x * x, peak


_GATE = threading.Lock()
_RUNNING = _PEAK = 0


def as_pair_failure(x: int, exc: BaseException) -> tuple[int, int]:
    return (-1000 - x if isinstance(exc, ValueError) else -1), 0


@pytest.mark.parametrize("threads", [1, 4])
def test_threads_run_a_tasks_units_at_once_in_order(threads: int) -> None:
    """`threads` runs that many of a task's units at once (a scan of an object store waits on round trips), the
    results still in unit order and a unit's failure its own; 1 (every CPU-bound stage) runs them in turn."""
    global _PEAK
    _PEAK = 0
    with open_engine(RunConfig(backend="inline", progress=False, batch=8)) as engine:
        out = list(engine.results(concurrent_square, range(8), on_error=as_pair_failure, desc="t",
                                  threads=threads))
    assert [r for r, _ in out] == [0, 1, 4, -1003, 16, 25, 36, 49]
    assert max(p for _, p in out) == threads


def test_a_task_holds_at_least_its_threads_units() -> None:
    """With `threads`, a task is never smaller than the units it runs at once (a short map's tail of one-unit
    tasks would leave the threads idle), unless fewer units are left; a fixed --batch stays fixed."""
    assert _Sizer(RunConfig(), workers=2, cost_s=None, threads=4).size(None) == 4  # nothing measured yet
    assert _Sizer(RunConfig(), workers=2, cost_s=0.004, threads=4).size(10) == 4  # 10 // 8 would be 1
    assert _Sizer(RunConfig(), workers=2, cost_s=0.004, threads=1).size(10) == 1
    assert _Sizer(RunConfig(batch=2), workers=2, cost_s=0.004, threads=4).size(10) == 2


@pytest.mark.slow
@pytest.mark.cluster
def test_threads_reach_the_workers_of_a_cluster() -> None:
    cfg = RunConfig(workers=1, progress=False, batch=4)
    with open_engine(cfg) as engine:
        out = list(engine.results(concurrent_square, range(8), on_error=as_pair_failure, desc="t", threads=4))
    assert [r for r, _ in out] == [0, 1, 4, -1003, 16, 25, 36, 49]
    assert max(p for _, p in out) == 4  # one worker process: its 4 threads ran a task's 4 units at once


def test_map_empty() -> None:
    with open_engine(RunConfig(progress=False, workers=1)) as engine:
        assert list(engine.results(square_or_fail, [], on_error=as_failure, desc="t", total=0)) == []
        assert not engine.started  # nothing to do: no cluster


@pytest.mark.slow
@pytest.mark.cluster
def test_one_cluster_for_every_map_of_a_session(capfd: pytest.CaptureFixture[str]) -> None:
    with open_engine(RunConfig(workers=2, progress=False)) as engine:
        for _ in range(3):
            assert list(engine.results(slow_square, range(10), on_error=as_failure, desc="t")) == \
                [i * i for i in range(10)]
        assert engine.stats.clusters_started == 1
    err = capfd.readouterr().err
    assert err.count("[engine] local: LocalCluster, 2 workers, dashboard http://127.0.0.1:") == 1


@pytest.mark.slow
@pytest.mark.cluster
def test_window_bounds_tasks_in_flight_on_the_scheduler() -> None:
    """The scheduler never has more of the map's tasks queued or running than the window, however many
    units there are, and the input is pulled lazily (never far ahead of what is done)."""
    window = 3
    pulled: list[int] = []
    cfg = RunConfig(workers=2, progress=False, batch=1, window=window)
    with open_engine(cfg) as engine:
        client = engine.client()

        def install(dask_scheduler: Any) -> None:
            from distributed.diagnostics.plugin import SchedulerPlugin

            class Peak(SchedulerPlugin):
                name = "peak-tasks"

                def __init__(self) -> None:
                    self.peak = 0

                def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
                    held = sum(1 for k, ts in dask_scheduler.tasks.items()
                               if str(k).startswith("w-") and ts.state not in DONE)
                    self.peak = max(self.peak, held)

            dask_scheduler.add_plugin(Peak())

        client.run_on_scheduler(install)
        seen = []
        for batch in engine.map(slow_square, counted(60, pulled), on_error=as_failure, desc="w"):
            seen.extend(batch.results)
            assert len(pulled) <= batch.first + len(batch.units) + 4 * window  # lazy input
        peak = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins["peak-tasks"].peak)
        assert engine.stats.max_in_flight == window
        assert engine.stats.tasks_submitted == 60
    assert seen == [i * i for i in range(60)]
    assert 1 <= peak <= window


def test_task_size_follows_the_measured_cost() -> None:
    sizer = _Sizer(RunConfig(task_seconds=1.0), workers=2, cost_s=None)
    assert sizer.size(None) == 1  # nothing known yet
    sizer.observe(10, 0.05)  # 5 ms per unit -> 200 units per 1 s task
    assert sizer.size(None) == 200
    assert sizer.size(1000) == 125  # a short map still spreads over 2 workers x 4 tasks
    assert _Sizer(RunConfig(), 2, cost_s=1e-9).size(None) == MAX_BATCH
    assert _Sizer(RunConfig(batch=7), 2, None).size(3) == 7


def test_tiny_map_runs_inline_without_a_cluster() -> None:
    with open_engine(RunConfig(workers=2, progress=False, inline_max=2)) as engine:
        assert list(engine.results(square_or_fail, [1, 2], on_error=as_failure, desc="t", total=2)) == [1, 4]
        assert not engine.started


def _worker_settings() -> tuple[Any, ...]:
    import dask

    return tuple(dask.config.get(k) for k in CLUSTER_SETTINGS)


@pytest.mark.slow
@pytest.mark.cluster
def test_embedded_workers_run_without_the_profiler_and_with_slow_ticks() -> None:
    """The embedded cluster's worker processes get `CLUSTER_SETTINGS` from their nanny; this process's own
    Dask configuration is left as it was."""
    import dask

    before = tuple(dask.config.get(k) for k in CLUSTER_SETTINGS)
    with open_engine(RunConfig(workers=1, progress=False)) as engine:
        seen = list(engine.client().run(_worker_settings).values())
    assert seen == [tuple(CLUSTER_SETTINGS.values())]
    assert seen[0] != before  # the defaults differ (profiler on, 20 ms tick), so the test can fail
    assert tuple(dask.config.get(k) for k in CLUSTER_SETTINGS) == before


def _stream_log_bounds(dask_scheduler: Any) -> list[int | None]:
    return [bs.recent_message_log.maxlen for bs in dask_scheduler.stream_comms.values()]


@pytest.mark.slow
@pytest.mark.cluster
def test_session_comms_keep_a_short_message_log() -> None:
    """The client's and the scheduler's batched comms keep SESSION_SETTINGS' few messages, not Dask's 1,000
    (each holding a task's units: the client grew ~2 kB per scanned episode)."""
    n = SESSION_SETTINGS["distributed.admin.low-level-log-length"]
    with open_engine(RunConfig(workers=2, progress=False, batch=1)) as engine:
        assert list(engine.results(square_or_fail, range(60), on_error=as_failure, desc="t"))[:3] == [0, 1, 4]
        client = engine.client()
        log = client.scheduler_comm.recent_message_log
        assert log.maxlen == n and len(log) <= n
        assert client.run_on_scheduler(_stream_log_bounds) == [n, n]


# ---- the embedded dashboard: this machine only, unless opened ------------------------------------------------


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (the one a route to a private network would use:
    connecting a UDP socket sends nothing), or None."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        host: str = s.getsockname()[0]
    return None if host.startswith("127.") or host == "0.0.0.0" else host


def reachable(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


def dashboard_port(link: str) -> int:
    import re

    m = re.fullmatch(r"http://[^/]+:(\d+)/status.*", link)
    assert m, link
    return int(m.group(1))


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("dashboard", ["127.0.0.1:0", "0.0.0.0:0"], ids=["default", "opened"])
def test_dashboard_listens_on_loopback_unless_opened(dashboard: str) -> None:
    """By default the LocalCluster's dashboard (an unauthenticated page: task keys, logs, system information) is
    reachable from this machine only; `--dashboard 0.0.0.0:0` opens it, which the same probe sees (so the
    probe can fail). The printed link is the bound address."""
    from pipeline.runner import dashboard_link

    host = non_loopback_address()
    if host is None:
        pytest.skip("this machine has no non-loopback IPv4 address to probe from")
    with open_engine(RunConfig(workers=1, progress=False, dashboard=dashboard)) as engine:
        link = dashboard_link(engine.client())
        port = dashboard_port(link)
        assert reachable("127.0.0.1", port), link
        if dashboard == "127.0.0.1:0":
            assert link == f"http://127.0.0.1:{port}/status"
            assert not reachable(host, port), f"the dashboard answers on {host}:{port}"
        else:
            assert link.endswith(f":{port}/status (listening on every interface)"), link
            assert reachable(host, port)


@pytest.mark.slow
@pytest.mark.cluster
def test_dashboard_off(capfd: pytest.CaptureFixture[str]) -> None:
    """`--dashboard off`: no dashboard, and the scheduler's remaining HTTP routes stay on loopback."""
    host = non_loopback_address()
    with open_engine(RunConfig(workers=1, progress=False, dashboard=None)) as engine:
        server = engine.client().cluster.scheduler.http_server
        assert server.address == "127.0.0.1" and server.port != 8787
        if host is not None:
            assert not reachable(host, server.port)
    assert ", dashboard off, " in capfd.readouterr().err


# ---- small inputs run in the command's process ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.cluster
def test_small_input_starts_no_cluster_unless_asked(tmp_path: Any) -> None:
    """`prep scan` of a 3-episode dataset runs in its own process (no [engine] line, no worker process); with
    --workers, --backend local or --scheduler the same command starts a cluster, and the manifests agree.
    Each command's --help states its threshold."""
    import json
    import subprocess

    from pipeline.synth import SynthSpec, write_synthetic

    src = write_synthetic(tmp_path / "ds", SynthSpec(episodes=3, frames=10, height=48, width=64))

    def scan(*extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        out = tmp_path / f"m{len(extra)}.json"
        r = run_prep("scan", src, "--out", out, "--no-progress", *extra)  # a child process when a cluster starts
        assert r.returncode == 0, r.stderr
        return r, json.loads(out.read_text())

    small, a = scan()
    assert "[engine]" not in small.stderr, small.stderr
    cluster, b = scan("--workers", "1")
    assert "[engine] local: LocalCluster, 1 worker" in cluster.stderr, cluster.stderr
    forced, _ = scan("--backend", "local", "--workers", "1")
    assert "[engine] local: LocalCluster" in forced.stderr
    assert a["totals"] == b["totals"] and a["dataset"] == b["dataset"]
    for command, text in [("scan", "at most 256 file sets"), ("verify", "at most 128 file sets"),
                          ("reencode", "at most 4 camera video files"), ("convert", "at most 64 episodes"),
                          ("edit", "at most 512 kept episodes")]:
        h = run_prep(command, "--help", env={"COLUMNS": "400", "PATH": ""}, timeout=120)
        assert text in " ".join(h.stdout.split()), (command, h.stdout)


def test_runs_inline_follows_the_threshold_and_the_size_hint() -> None:
    with open_engine(RunConfig(workers=1, progress=False, inline_max=3)) as engine:
        assert engine.runs_inline(3) and not engine.runs_inline(4)
        assert not engine.runs_inline(None)  # unknown size: a cluster
        engine.size_hint(2)
        assert engine.runs_inline(None)
        assert list(engine.results(square_or_fail, [1, 2, 4], on_error=as_failure, desc="t", total=3)) == [1, 4, 16]
        assert not engine.started
    with open_engine(RunConfig(backend="remote", scheduler="tcp://127.0.0.1:1", inline_max=100)) as engine:
        assert not engine.runs_inline(1)  # a --scheduler run always uses the cluster


@pytest.mark.slow
@pytest.mark.cluster
def test_prepare_starts_what_the_job_needs_before_it_writes() -> None:
    """`engine.prepare(size_hint)`, the one call a job makes into the session: a small job (or one of unknown
    size) starts no local cluster and costs no time; a large one starts it now, once; an unreachable scheduler is
    refused by the call itself (before the job writes anything)."""
    from pipeline.errors import PrepError

    with open_engine(RunConfig(workers=1, progress=False, inline_max=3)) as engine:
        assert engine.prepare() == 0.0 and engine.prepare(2) == 0.0 and not engine.started
        assert engine.runs_inline(None)  # the hint sizes the job's streamed maps
        seconds = engine.prepare(4)
        assert engine.started and seconds > 0.0 and engine.stats.clusters_started == 1
        assert engine.prepare(100) == 0.0 and engine.stats.clusters_started == 1
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        assert engine.prepare(10**6) == 0.0 and not engine.started
    with open_engine(RunConfig(backend="remote", scheduler="tcp://127.0.0.1:1", connect_timeout=1.0,
                               progress=False)) as engine, pytest.raises(PrepError):
        engine.prepare()


@pytest.mark.slow
@pytest.mark.cluster
def test_engine_line_is_not_glued_onto_the_progress_bar(tmp_path: Any) -> None:
    """The cluster starts while the first progress bar is drawn: its `[engine]` line gets a line of its own."""

    from pipeline.synth import SynthSpec, write_synthetic

    src = write_synthetic(tmp_path / "ds", SynthSpec(episodes=2, frames=10, height=48, width=64))
    r = run_prep("scan", src, "--out", tmp_path / "m.json", "--workers", "1")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.split("\n") if "[engine]" in line]
    assert len(lines) == 1 and "scan:" in r.stderr, r.stderr  # a bar was drawn
    assert lines[0].split("\r")[-1].startswith("[engine] local: LocalCluster, 1 worker, "), repr(lines[0])
