"""`prep scan --scheduler`: the same graph on a real multi-process Dask cluster on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_prep as prep
from support.cluster import loopback_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_scan_on_external_cluster_equals_local(synth_v30: Path, tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    assert prep("scan", str(synth_v30), "--out", str(local), "--workers", "1", "--no-progress").returncode == 0
    with loopback_cluster(2, tmp_path) as cluster:
        remote = tmp_path / "remote.json"
        res = prep("scan", str(synth_v30), "--out", str(remote), "--scheduler", cluster.address, "--no-progress")
        assert res.returncode == 0, res.stderr
    a, b = json.loads(local.read_text()), json.loads(remote.read_text())
    assert a["totals"] == b["totals"]
    assert a["dataset"] == b["dataset"]


def test_unreachable_scheduler_is_one_line(synth_v21: Path, tmp_path: Path) -> None:
    from support.cluster import free_port

    res = prep("scan", str(synth_v21), "--out", str(tmp_path / "m.json"), "--scheduler",
               f"tcp://127.0.0.1:{free_port()}", "--no-progress")
    assert res.returncode == 2
    assert "cannot reach Dask scheduler" in res.stderr and "Traceback" not in res.stderr
