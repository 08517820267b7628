"""Property-based tests of the metadata readers: any info.json / episodes.jsonl / episodes parquet
yields a dataset (plus rejected episodes) or one `DatasetError`, never an unhandled exception."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import DatasetError
from pipeline.formats import open_dataset

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _open(root: Path) -> None:
    try:
        ds, rejected = open_dataset(root)
    except DatasetError as exc:
        assert str(root) in str(exc) or "meta" in str(exc)
        return
    for ep in ds.episodes:
        assert ep.frames_expected > 0
    for err in rejected:
        assert err.message


def _base_info(version: str) -> dict[str, Any]:
    return {
        "codebase_version": version, "fps": 30, "chunks_size": 1000,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        "features": {"cam": {"dtype": "video", "shape": [480, 640, 3], "names": ["height", "width", "channel"]}},
    }


info_mutations = st.fixed_dictionaries(
    {},
    optional={
        "codebase_version": st.sampled_from(["v2.1", "v3.0", "v2.0", "v1.6", ""]) | json_values,
        "fps": json_values,
        "chunks_size": json_values,
        "data_path": json_values | st.sampled_from(["../x/{episode_index}.parquet", "{nope}.parquet", "/abs/{x}"]),
        "video_path": json_values | st.sampled_from(["../../{video_key}.mp4", "{video_key}/{episode_index:06d}.mp4"]),
        "features": json_values,
    },
)


@SETTINGS
@given(mut=info_mutations, drop=st.lists(st.sampled_from(["fps", "data_path", "features", "video_path"]), max_size=2))
def test_any_info_json(mut: dict[str, Any], drop: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "meta").mkdir()
        info = {**_base_info("v2.1"), **mut}
        for k in drop:
            info.pop(k, None)
        (root / "meta/info.json").write_text(json.dumps(info))
        (root / "meta/episodes.jsonl").write_text('{"episode_index": 0, "tasks": ["t"], "length": 90}\n')
        _open(root)


@SETTINGS
@given(lines=st.lists(json_values.map(json.dumps) | st.text(max_size=30), max_size=6))
def test_any_episodes_jsonl(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "meta").mkdir()
        (root / "meta/info.json").write_text(json.dumps(_base_info("v2.1")))
        (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
        _open(root)


row_values = st.none() | st.integers(-5, 500) | st.floats(-10, 10) | st.just(float("nan"))


@SETTINGS
@given(rows=st.lists(st.fixed_dictionaries({
    "episode_index": row_values, "length": row_values, "data/chunk_index": row_values,
    "data/file_index": row_values, "dataset_from_index": row_values, "dataset_to_index": row_values,
    "videos/cam/chunk_index": row_values, "videos/cam/file_index": row_values,
    "videos/cam/from_timestamp": row_values, "videos/cam/to_timestamp": row_values,
}), min_size=0, max_size=5), garbage=st.booleans())
def test_any_v30_episodes_parquet(rows: list[dict[str, Any]], garbage: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ep_dir = root / "meta/episodes/chunk-000"
        ep_dir.mkdir(parents=True)
        info = {**_base_info("v3.0"), "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"}
        (root / "meta/info.json").write_text(json.dumps(info))
        path = ep_dir / "file-000.parquet"
        if garbage:
            path.write_bytes(b"PAR1 not really parquet")
        else:
            cols = {k: [r[k] for r in rows] for k in (rows[0] if rows else {"episode_index": None})}
            table = pa.Table.from_pydict({k: pa.array([None if v is None else float(v) if isinstance(v, float)
                                                       else v for v in vals]) for k, vals in cols.items()})
            pq.write_table(table, path)
        _open(root)
        shutil.rmtree(root / "meta")
