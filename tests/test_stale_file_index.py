"""A stale `data/file_index` (issue 25): LeRobot 0.4.4's own v2.1 -> v3.0 converter writes the first episode of
every new data file with the previous file's index. LeRobot reads all data files in sorted order and finds rows
by `dataset_from_index` (`load_nested_dataset`), so it loads every sample. prep finds the rows the same way: scan
counts them, verify warns naming the real file, reencode and `convert --to v2.1` carry the right rows, prep's own
loader reads them. Real synthetic v3.0 (PyAV h264, 3 data files), the real jobs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.formats import open_dataset
from pipeline.formats.v30 import Limits
from pipeline.jobs.convert import ConvertOptions, convert_dataset
from pipeline.jobs.reencode import reencode_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.loader.rows import load_rows
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

FRAMES = 20
STALE = {2: 0, 4: 1}  # episode -> the previous file's index, as LeRobot's converter writes it


def stale_dataset(d: Path) -> Path:
    """5 episodes, 2 per data file (files 0, 1, 2); episodes 2 and 4 (the first of files 1 and 2) name the
    previous data file."""
    spec = SynthSpec(version="v3.0", episodes=5, episodes_per_file=2, frames=FRAMES, height=48, width=64,
                     cameras=("observation.images.cam",), gop=10)
    root = write_synthetic(d / "ds", spec)
    for p in sorted((root / "meta/episodes").rglob("*.parquet")):
        t = pq.read_table(p)
        eps = t["episode_index"].to_pylist()
        files = [STALE.get(e, f) for e, f in zip(eps, t["data/file_index"].to_pylist(), strict=True)]
        i = t.schema.get_field_index("data/file_index")
        t = t.set_column(i, t.schema.field(i), pa.array(files, type=t.schema.field(i).type))
        pq.write_table(t, p)
    return root


def source_rows(root: Path, episode: int) -> dict[str, list[object]]:
    tables = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    whole = pa.concat_tables(tables)
    picked = whole.filter(pc.equal(whole["episode_index"], episode))
    return {c: picked[c].to_pylist() for c in ("index", "frame_index", "action", "observation.state")}


@pytest.fixture(scope="module")
def stale(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stale_dataset(tmp_path_factory.mktemp("stale"))


def test_rows_are_found_where_lerobot_finds_them(stale: Path) -> None:
    ds, _ = open_dataset(stale)
    assert ds.stale_data_files_total == 2
    assert [(s.episode, s.named, s.real) for s in ds.stale_data_files] == [
        (2, "data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet"),
        (4, "data/chunk-000/file-001.parquet", "data/chunk-000/file-002.parquet")]
    assert [ep.data.rel for ep in ds.episodes] == [f"data/chunk-000/file-00{k // 2}.parquet" for k in range(5)]
    rows = load_rows(ds)  # prep's own loader
    assert rows.total == 5 * FRAMES


def test_verify_warns_naming_the_real_file(stale: Path) -> None:
    report = verify_in_process(stale, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures]
    found = sorted((f.episode, f.severity, f.path) for f in report.failures)
    assert found == [(2, "warning", str(stale / "data/chunk-000/file-001.parquet")),
                     (4, "warning", str(stale / "data/chunk-000/file-002.parquet"))]
    assert {f.check for f in report.failures} == {"stale_file_index"}
    assert all(e.frames_in_parquet == FRAMES for e in report.episodes)
    assert all(p["loads"] for p in report.head_json()["lerobot_loads"].values())


def test_scan_counts_rows_and_warns(stale: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    r = run_prep("scan", stale, "--out", out, backend="inline", progress=False)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads(out.read_text())
    assert m["warnings_total"] == 2 and "episode 2: data/file_index names" in m["warnings"][0]
    assert "warning   episode 2: data/file_index names data/chunk-000/file-000.parquet" in r.stdout
    table = pq.read_table(out.with_name(out.stem + ".episodes.parquet"))
    assert table["frames_in_parquet"].to_pylist() == [FRAMES] * 5
    assert table["status"].to_pylist() == ["ok"] * 5


def test_reencode_carries_the_rows(stale: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = reencode_dataset(stale, out, ReencodeOptions(size=(32, 32)), engine)
    assert report.ok
    checked = verify_in_process(out, VerifyOptions(size=(32, 32), all_intra=True, decode=True))
    assert checked.passed, [f.line() for f in checked.failures]
    for ep in (2, 3, 4):
        assert source_rows(out, ep) == source_rows(stale, ep)


def test_convert_to_v21_reads_the_real_rows(stale: Path, tmp_path: Path) -> None:
    out = tmp_path / "v21"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = convert_dataset(stale, out, ConvertOptions("v2.1", Limits()), engine)
    assert report.complete, report
    for ep in range(5):
        got = pq.read_table(out / f"data/chunk-000/episode_{ep:06d}.parquet")
        want = source_rows(stale, ep)
        assert got["index"].to_pylist() == want["index"]
        assert np.array_equal(np.asarray(got["action"].to_pylist()), np.asarray(want["action"]))
    assert verify_in_process(out, VerifyOptions()).passed
