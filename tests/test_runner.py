"""The Dask runner on a real LocalCluster: order, failures recorded per unit, progress counters."""

from __future__ import annotations

from pipeline.runner import RunConfig, run_map


def square_or_fail(x: int) -> int:
    if x == 3:
        raise ValueError("bad unit 3")
    return x * x


def as_failure(x: int, exc: BaseException) -> int:
    return -1000 - x if isinstance(exc, ValueError) else -1


def test_run_map_keeps_order_and_records_failures() -> None:
    cfg = RunConfig(workers=2, progress=False, batch=2)
    out = run_map(square_or_fail, list(range(7)), on_error=as_failure, config=cfg, desc="t",
                  measure=lambda r: {"items": 1.0})
    assert out == [0, 1, 4, -1003, 16, 25, 36]


def test_run_map_empty() -> None:
    assert run_map(square_or_fail, [], on_error=as_failure, config=RunConfig(progress=False), desc="t") == []
