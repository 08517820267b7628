"""Conversion metadata (pipeline/formats/v21.py, v30.py, hf.py): info.json both ways, tasks, episode
rows, stats aggregation as LeRobot does it, incremental writers, strict source readers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.atomic import TEMP_MARK
from pipeline.dataset.stats import StatsAggregator
from pipeline.errors import DatasetError
from pipeline.formats.hf import features_from_info, retarget, target_metadata
from pipeline.formats.plan import Placement, VideoPlace
from pipeline.formats.v21 import info_to_v21, iter_v21_episode_lines, iter_v21_tasks, write_tasks_v21
from pipeline.formats.v30 import (
    Limits,
    V30EpisodesWriter,
    info_to_v30,
    iter_v30_tasks,
    stats_of_row,
    v30_episode_row,
    write_tasks_v30,
)


def real_info(real_v21: Path) -> dict:
    return json.loads((real_v21 / "meta/info.json").read_text())


def test_info_round_trip_is_identity(real_v21: Path) -> None:
    info = real_info(real_v21)
    v30 = info_to_v30(info, Limits(), episodes=10, frames=3608, tasks=1)
    assert v30["codebase_version"] == "v3.0"
    assert "total_chunks" not in v30 and "total_videos" not in v30
    assert (v30["data_files_size_in_mb"], v30["video_files_size_in_mb"], v30["chunks_size"]) == (100, 200, 1000)
    assert v30["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert v30["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    # features as the v3.0 writers write them: no fps on non-video features, 0.6's spelling of the depth flag
    assert "fps" not in v30["features"]["action"] and "fps" not in v30["features"]["observation.images.cam_high"]
    cam_info = dict(info["features"]["observation.images.cam_high"]["info"])
    cam_info["is_depth_map"] = cam_info.pop("video.is_depth_map")
    assert v30["features"]["observation.images.cam_high"]["info"] == cam_info
    back = info_to_v21(v30, 1000, episodes=10, frames=3608, tasks=1, cameras=1)
    assert back == info
    assert list(back) == list(info)  # key order too


def test_info_totals_come_from_the_conversion(real_v21: Path) -> None:
    info = real_info(real_v21)
    v21 = info_to_v21(info_to_v30(info, Limits(), episodes=10, frames=3608, tasks=1), 4,
                      episodes=2500, frames=9, tasks=3, cameras=2)
    assert (v21["total_episodes"], v21["total_chunks"], v21["total_videos"], v21["chunks_size"]) == (2500, 625, 5000, 4)
    assert v21["splits"] == {"train": "0:2500"}
    assert info_to_v30({**info, "fps": 29.97}, Limits(), episodes=1, frames=1, tasks=1)["fps"] == 29.97


def test_tasks_parquet_reads_as_lerobot_reads_it(tmp_path: Path) -> None:
    tasks = [(i, f"task number {i} ünïcode") for i in range(25)]
    path = tmp_path / "meta/tasks.parquet"
    assert write_tasks_v30(path, iter(tasks), batch=10) == 25
    df = pd.read_parquet(path)  # lerobot 0.4: load_tasks; tasks.iloc[task_index].name; tasks.loc[task].task_index
    assert [df.iloc[i].name for i in range(25)] == [t for _, t in tasks]
    assert int(df.loc["task number 7 ünïcode"].task_index) == 7
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    # the same schema as LeRobot's own `DataFrame(...).to_parquet()`
    ref = tmp_path / "ref.parquet"
    pd.DataFrame({"task_index": [i for i, _ in tasks]}, index=[t for _, t in tasks]).to_parquet(ref)
    assert pq.read_schema(path).equals(pq.read_schema(ref), check_metadata=True)
    assert list(iter_v30_tasks(tmp_path)) == tasks
    write_tasks_v21(tmp_path / "meta/tasks.jsonl", iter(tasks))
    assert list(iter_v21_tasks(tmp_path)) == tasks
    assert (tmp_path / "meta/tasks.jsonl").read_text(encoding="utf-8").splitlines()[1] == (
        '{"task_index": 1, "task": "task number 1 ünïcode"}')


def test_tasks_out_of_order_are_refused(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/tasks.jsonl").write_text('{"task_index": 1, "task": "a"}\n{"task_index": 0, "task": "b"}\n')
    with pytest.raises(DatasetError, match="line 1: task_index 1 where 0 was expected"):
        list(iter_v21_tasks(tmp_path))


def test_episodes_out_of_order_are_refused(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    lines = ['{"episode_index": 0, "tasks": [], "length": 3}', '{"episode_index": 2, "tasks": [], "length": 3}']
    (tmp_path / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match="line 2: episode_index 2 where 1 was expected"):
        list(iter_v21_episode_lines(tmp_path))
    (tmp_path / "meta/episodes.jsonl").write_text('{"episode_index": 0, "tasks": [], "length": 0}\n')
    with pytest.raises(DatasetError, match="invalid length 0"):
        list(iter_v21_episode_lines(tmp_path))


def lerobot_aggregate(stats_list: list[dict]) -> dict:
    """lerobot 0.4.4 compute_stats.aggregate_feature_stats, transcribed (two-pass, stacked arrays)."""
    out = {}
    for key in {k for s in stats_list for k in s}:
        ft = [{k: np.asarray(v, dtype=np.float64) for k, v in s[key].items()} for s in stats_list if key in s]
        means = np.stack([s["mean"] for s in ft])
        variances = np.stack([s["std"] ** 2 for s in ft])
        counts = np.stack([s["count"] for s in ft])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, axis=-1)
        mean = (means * counts).sum(axis=0) / total
        var = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        agg = {"min": np.min(np.stack([s["min"] for s in ft]), axis=0),
               "max": np.max(np.stack([s["max"] for s in ft]), axis=0), "mean": mean, "std": np.sqrt(var),
               "count": total}
        for q in [k for k in ft[0] if k.startswith("q") and k[1:].isdigit()]:
            if all(q in s for s in ft):
                agg[q] = (np.stack([s[q] for s in ft]) * counts).sum(axis=0) / total
        out[key] = agg
    return out


def random_stats(rng: np.random.Generator, n: int, quantiles: bool) -> dict:
    def feat(shape: tuple[int, ...], offset: float) -> dict:
        mean = rng.normal(offset, 1.0, size=shape)
        st = {"min": (mean - 3).tolist(), "max": (mean + 3).tolist(), "mean": mean.tolist(),
              "std": rng.uniform(0.01, 2.0, size=shape).tolist(), "count": [int(rng.integers(1, n))]}
        if quantiles:
            st["q01"] = (mean - 2).tolist()
            st["q99"] = (mean + 2).tolist()
        return st

    return {"action": feat((6,), 1e4), "observation.images.top": feat((3, 1, 1), 0.5), "index": feat((1,), 5e6)}


def test_stats_aggregate_as_lerobot_does() -> None:
    rng = np.random.default_rng(0)
    stats = [random_stats(rng, 900, quantiles=i != 17) for i in range(300)]
    agg = StatsAggregator()
    for i, s in enumerate(stats):
        agg.add(s, episode=i)
    got, ref = agg.result(), lerobot_aggregate(stats)
    assert set(got) == set(ref)
    for feat in ref:
        assert set(got[feat]) == set(ref[feat]) == {"min", "max", "mean", "std", "count"}  # q01/q99 not in ep 17
        for k, v in ref[feat].items():
            assert np.asarray(got[feat][k]).shape == v.shape, (feat, k)
            np.testing.assert_allclose(got[feat][k], v, rtol=1e-13, atol=1e-13 * max(1.0, float(np.abs(v).max())))
    assert got["action"]["count"] == [sum(s["action"]["count"][0] for s in stats)]


def test_stats_with_quantiles_in_every_episode() -> None:
    rng = np.random.default_rng(1)
    stats = [random_stats(rng, 50, quantiles=True) for _ in range(20)]
    agg = StatsAggregator()
    for s in stats:
        agg.add(s)
    ref = lerobot_aggregate(stats)
    for feat in ref:
        for q in ("q01", "q99"):
            np.testing.assert_allclose(agg.result()[feat][q], ref[feat][q], rtol=1e-12)


def placement(ep: int, length: int, before: int) -> Placement:
    return Placement(ep, length, ("a task",), 0, ep // 4, before, (VideoPlace("cam", 0, 0, before),))


def test_episode_rows_and_writer_rotation(tmp_path: Path) -> None:
    stats = {"action": {"min": [0.5, 1.0], "max": [2.0, 3.0], "mean": [1.0, 2.0], "std": [0.5, 0.5], "count": [9]},
             "frame_index": {"min": [0], "max": [8], "mean": [4.0], "std": [2.6], "count": [9]},
             "observation.images.cam": {"min": [[[0.0]], [[0.0]], [[0.1]]], "max": [[[1.0]], [[1.0]], [[1.0]]],
                                        "mean": [[[0.5]], [[0.5]], [[0.5]]], "std": [[[0.2]], [[0.2]], [[0.2]]],
                                        "count": [3]}}
    writer = V30EpisodesWriter(tmp_path, file_size_in_mb=0.0005, chunks_size=2, group_rows=4)
    before = 0
    for ep in range(13):
        writer.add(v30_episode_row(placement(ep, 9, before), 30.0, stats))
        before += 9
    files = writer.close()
    assert files[:3] == ["meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-001.parquet",
                         "meta/episodes/chunk-001/file-000.parquet"]
    table = pa.concat_tables(pq.read_table(tmp_path / f) for f in files)
    assert table["episode_index"].to_pylist() == list(range(13))
    where = list(zip(table["meta/episodes/chunk_index"].to_pylist(), table["meta/episodes/file_index"].to_pylist(),
                     strict=True))
    for f, rel in enumerate(files):  # each row says which file holds it
        chunk, file = divmod(f, 2)
        assert rel == f"meta/episodes/chunk-{chunk:03d}/file-{file:03d}.parquet"
        assert set(where[4 * f: 4 * f + 4]) == {(chunk, file)}
    assert table["videos/cam/from_timestamp"].to_pylist() == [9 * k / 30 for k in range(13)]
    assert table["videos/cam/to_timestamp"].to_pylist()[-1] == 117 / 30
    assert table.schema.field("stats/action/min").type == pa.list_(pa.float64())
    assert table.schema.field("stats/action/count").type == pa.list_(pa.int64())
    assert table.schema.field("stats/frame_index/max").type == pa.list_(pa.int64())  # as the JSON had it
    assert table.schema.field("stats/frame_index/mean").type == pa.list_(pa.float64())
    assert table.schema.field("stats/observation.images.cam/max").type == pa.list_(pa.list_(pa.list_(pa.float64())))
    assert table.schema.field("tasks").type == pa.list_(pa.string())
    row = table.slice(0, 1).to_pylist()[0]
    assert stats_of_row(row)["observation.images.cam"]["max"] == [[[1.0]], [[1.0]], [[1.0]]]
    assert list(table.column_names[:7]) == ["episode_index", "tasks", "length", "data/chunk_index",
                                            "data/file_index", "dataset_from_index", "dataset_to_index"]
    assert not list(tmp_path.rglob(f"*{TEMP_MARK}*"))


def test_writer_refuses_an_episode_with_other_stats(tmp_path: Path) -> None:
    writer = V30EpisodesWriter(tmp_path, 100, 1000, group_rows=2)
    ok = {"action": {"min": [0.0], "max": [1.0], "mean": [0.5], "std": [0.1], "count": [2]}}
    writer.add(v30_episode_row(placement(0, 2, 0), 30.0, ok))
    with pytest.raises(DatasetError, match="differ from the first episode's"):
        writer.add(v30_episode_row(placement(1, 2, 2), 30.0, {"state": ok["action"]}))
    writer.abort()
    assert not list(tmp_path.rglob("*.parquet"))


def test_hf_features_retargeted_per_version(real_v21: Path) -> None:
    schema = pq.read_schema(real_v21 / "data/chunk-000/episode_000000.parquet")
    v30 = json.loads(target_metadata(schema, {}, "v3.0")[b"huggingface"])
    assert v30["info"]["features"]["action"] == {"feature": {"dtype": "float32", "_type": "Value"}, "length": 26,
                                                 "_type": "List"}
    v21 = target_metadata(schema.with_metadata({b"huggingface": json.dumps(v30).encode()}), {}, "v2.1")
    assert v21 == {b"huggingface": schema.metadata[b"huggingface"]}  # back to the bytes LeRobot 0.3 wrote
    # a source without Hugging Face features (LeRobot's converter writes pandas metadata): from info.json
    info = real_info(real_v21)
    from_info = features_from_info(info["features"], "v2.1")
    assert from_info == json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert retarget({"a": {"_type": "Sequence", "feature": {"_type": "List"}}}, "v3.0") == {
        "a": {"_type": "List", "feature": {"_type": "List"}}}


def _stream_episodes(tmp_path: Path, n: int) -> int:
    """Feed n episodes (rows with stats) through the episodes writer and the stats aggregator; peak bytes."""
    import tracemalloc

    stats = {"action": {"min": [0.5] * 14, "max": [2.0] * 14, "mean": [1.0] * 14, "std": [0.5] * 14, "count": [90]},
             "observation.images.cam": {k: [[[0.5]], [[0.5]], [[0.5]]] for k in ("min", "max", "mean", "std")}
             | {"count": [9]}}
    tracemalloc.start()
    writer = V30EpisodesWriter(tmp_path / str(n), 100, 1000)
    agg = StatsAggregator()
    peak_arrow = 0
    for ep in range(n):
        writer.add(v30_episode_row(placement(ep, 90, 90 * ep), 30.0, stats))
        agg.add(stats)
        if ep % 500 == 0:
            peak_arrow = max(peak_arrow, pa.total_allocated_bytes())
    writer.close()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pq.read_metadata(tmp_path / str(n) / "meta/episodes/chunk-000/file-000.parquet").num_rows == n
    return peak + peak_arrow


@pytest.mark.slow
def test_metadata_memory_does_not_grow_with_episodes(tmp_path: Path) -> None:
    small, large = _stream_episodes(tmp_path, 2_000), _stream_episodes(tmp_path, 16_000)
    assert large < 1.5 * small + 2_000_000, (small, large)  # 8x the episodes, (nearly) the same peak
