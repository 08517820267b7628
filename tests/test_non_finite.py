"""NaN/inf in a float feature of the data parquet (issue 25): every reader loads it (lerobot-doctor fails it), and
a NaN action is a NaN loss at the first batch that holds it. verify: an error of severity `trains_wrong`, named by
feature, episode and first row, counted per feature in the JSON report; the reader lines still say loads;
reencode is not refused for it (its output is as loadable as the source). Real synthetic datasets (PyAV h264)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.jobs.reencode import reencode_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions, non_finite_rows
from pipeline.synth import write_synthetic

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases.synth_cases import spec


def poison(root: Path, episode: int, feature: str, rows: dict[int, float]) -> None:
    """Put `value` into the first component of `feature` at the episode's frame_index `row`."""
    for path in sorted((root / "data").rglob("*.parquet")):
        t = pq.read_table(path)
        eps = t["episode_index"].to_pylist()
        frames = t["frame_index"].to_pylist()
        if episode not in eps:
            continue
        values = t[feature].to_pylist()
        for i, (e, f) in enumerate(zip(eps, frames, strict=True)):
            if e == episode and f in rows:
                values[i] = [rows[f], *values[i][1:]]
        i = t.schema.get_field_index(feature)
        t = t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))
        pq.write_table(t, path)


def test_non_finite_rows_of_list_and_scalar_columns() -> None:
    col = pa.chunked_array([pa.array([[1.0, 2.0], [math.nan, math.inf], [], [3.0, -math.inf]],
                                     type=pa.list_(pa.float32()))])
    assert non_finite_rows(col).tolist() == [0, 2, 0, 1]
    assert non_finite_rows(pa.chunked_array([pa.array([1.0, 2.0], type=pa.float64())])) is None
    assert non_finite_rows(pa.chunked_array([pa.array([1.0, math.nan])])).tolist() == [0, 1]
    fixed = pa.chunked_array([pa.FixedSizeListArray.from_arrays(pa.array([1.0, math.nan, 2.0, 3.0]), 2)])
    assert non_finite_rows(fixed).tolist() == [1, 0]


@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_nan_action_is_trains_wrong(fmt: str, tmp_path: Path) -> None:
    src = write_synthetic(tmp_path / "ds", spec(fmt))
    poison(src, 1, "action", {3: math.nan, 4: math.nan, 9: math.nan, 10: math.nan})
    poison(src, 0, "observation.state", {7: math.inf})
    report = verify_in_process(src, VerifyOptions(decode=True))
    assert not report.passed
    found = sorted((f.episode, f.camera, f.severity, f.found) for f in report.failures)
    assert found == [(0, "observation.state", "trains_wrong", "1 rows with NaN/inf (1 values), first at frame_index 7"),
                     (1, "action", "trains_wrong", "4 rows with NaN/inf (4 values), first at frame_index 3")]
    head = report.head_json()
    assert head["totals"]["non_finite_by_feature"] == {"action": {"episodes": 1, "rows": 4},
                                                       "observation.state": {"episodes": 1, "rows": 1}}
    assert head["totals"]["trains_wrong"] == 2
    for p in head["lerobot_loads"].values():  # every reader loads it
        assert p["loads"] is True and p["trains_wrong"] == 2 and p["errors"] == 0

    out = tmp_path / "v.json"
    r = run_prep("verify", src, "--out", out, "--decode", backend="inline", progress=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "predicted: loads; 2 findings that poison training (trains_wrong)" in r.stdout
    doc = json.loads(out.read_text())
    assert {f["check"] for f in doc["failures"]} == {"non_finite"}
    assert doc["episodes"][1]["checks_failed"] == ["non_finite"]

    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        result = reencode_dataset(src, tmp_path / "out", ReencodeOptions(size=(32, 32)), engine)
    assert result.ok  # not refused: the readers load it; the NaN stays where it was
    again = verify_in_process(tmp_path / "out", VerifyOptions())
    assert again.head_json()["totals"]["non_finite_by_feature"]["action"] == {"episodes": 1, "rows": 4}
