"""Image stats keep LeRobot's (3, 1, 1) shape through `prep edit` (issue 26): pipeline/synth.py writes them so in
v3.0's per-episode rows as LeRobot's writer does, and edit's global meta/stats.json keeps the shape the source's
has even where a source's per-episode rows store them flat, (3,), which LeRobot 0.6.1's aggregate_stats (its
merge) refuses. LeRobot's own merge of a prep-edited dataset is tests/compat/test_edit_v30.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.dataset.stats import shaped_like
from pipeline.formats.v30 import stats_of_row
from pipeline.jobs.edit import EditOptions, edit_dataset
from pipeline.runner import RunConfig, open_engine
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def image_shapes(stats: dict[str, dict[str, object]]) -> set[tuple[int, ...]]:
    return {np.asarray(v).shape for cam in CAMS for k, v in stats[cam].items() if k != "count"}


def drop(src: Path, out: Path) -> None:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = edit_dataset(src, out, EditOptions(drop=(1,)), engine)
    assert report.ok, report.failures


def test_image_stats_stay_3_1_1_through_synth_and_edit(tmp_path: Path) -> None:
    spec = SynthSpec(version="v3.0", episodes=3, frames=12, height=32, width=48, gop=12, cameras=CAMS,
                     episodes_per_file=3)
    src = write_synthetic(tmp_path / "src", spec)
    for row in pq.read_table(src / EPISODES).to_pylist():
        assert image_shapes(stats_of_row(row)) == {(3, 1, 1)}
        assert np.asarray(stats_of_row(row)["observation.state"]["mean"]).ndim == 1
    assert image_shapes(json.loads((src / "meta/stats.json").read_text())) == {(3, 1, 1)}
    drop(src, tmp_path / "out")
    for row in pq.read_table(tmp_path / "out" / EPISODES).to_pylist():
        assert image_shapes(stats_of_row(row)) == {(3, 1, 1)}
    stats = json.loads((tmp_path / "out/meta/stats.json").read_text())
    assert image_shapes(stats) == {(3, 1, 1)}
    assert np.asarray(stats["observation.state"]["mean"]).ndim == 1
    assert stats["index"]["count"] == [24]

    # a corpus whose per-episode rows hold the image stats flat (as synth wrote them before): the output's
    # global stats still take the source's stats.json shape, values unchanged
    table = pq.read_table(src / EPISODES)
    rows = table.to_pylist()
    for row in rows:
        for key in row:
            if key.startswith("stats/") and any(cam in key for cam in CAMS) and not key.endswith("/count"):
                row[key] = np.asarray(row[key], dtype=np.float64).ravel().tolist()
    pq.write_table(pa.Table.from_pylist(rows), src / EPISODES)
    assert image_shapes(stats_of_row(pq.read_table(src / EPISODES).to_pylist()[0])) == {(3,)}
    drop(src, tmp_path / "flat")
    flat = json.loads((tmp_path / "flat/meta/stats.json").read_text())
    assert image_shapes(flat) == {(3, 1, 1)}
    for cam in CAMS:
        assert np.asarray(flat[cam]["mean"]) == pytest.approx(np.asarray(stats[cam]["mean"]))


def test_shaped_like_reshapes_only_where_sizes_agree() -> None:
    stats = {"img": {"mean": [0.1, 0.2, 0.3], "count": [4]}, "state": {"mean": [1.0, 2.0]}, "new": {"min": [0.0]}}
    ref = {"img": {"mean": [[[0.0]], [[0.0]], [[0.0]]], "count": [9]}, "state": {"mean": [[1.0, 2.0, 3.0]]}}
    got = shaped_like(stats, ref)
    assert got["img"] == {"mean": [[[0.1]], [[0.2]], [[0.3]]], "count": [4]}
    assert got["state"] == {"mean": [1.0, 2.0]}  # 2 values against 3: left as they are
    assert got["new"] == {"min": [0.0]}
