"""The dataset model: layouts, refusals and the root boundary."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.dataset import resolve_inside
from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats import open_dataset
from pipeline.stages.scan import scan_unit, scan_units


def test_real_fixture_model(real_v21: Path) -> None:
    ds, rejected = open_dataset(real_v21)
    assert rejected == []
    assert ds.codebase_version == "v2.1" and ds.fps == 30
    assert len(ds.episodes) == 10 and ds.total_frames_expected == 3608
    assert ds.tasks == {0: "Pick up the yellow bottle on the table."}
    ep = ds.episodes[3]
    assert ep.data.rel == "data/chunk-000/episode_000003.parquet"
    assert ep.videos[0].rel == "videos/chunk-000/observation.images.cam_high/episode_000003.mp4"


def test_v30_model(lowres_v30: Path) -> None:
    ds, rejected = open_dataset(lowres_v30)
    assert rejected == []
    assert [e.index for e in ds.episodes] == [0, 1, 2]
    e1 = ds.episodes[1]
    assert e1.data.from_index == 90 and e1.data.to_index == 180
    ref = e1.videos[0]
    assert (ref.from_timestamp, ref.to_timestamp) == (3.0, 6.0)
    assert ref.rel.endswith("chunk-000/file-000.mp4")
    assert ds.episodes[2].videos[0].rel.endswith("file-001.mp4")
    assert set(ds.tasks.values()) >= {"pick up the cup"}


def _edit_jsonl(path: Path, lineno: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[lineno] = text
    path.write_text("\n".join(lines) + "\n")


def test_bad_episode_lines_are_rejected_not_fatal(lowres_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(lowres_v21, "badlines")
    _edit_jsonl(root / "meta/episodes.jsonl", 0, "{broken")
    _edit_jsonl(root / "meta/episodes.jsonl", 1, json.dumps({"episode_index": 1, "tasks": [], "length": -5}))
    ds, rejected = open_dataset(root)
    assert [e.index for e in ds.episodes] == [2]
    assert "line is not JSON" in str(rejected[0]) and "episodes.jsonl:1" in str(rejected[0])
    assert rejected[1].episode == 1 and "invalid length -5" in str(rejected[1])


def test_missing_length(lowres_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(lowres_v21, "nolength")
    _edit_jsonl(root / "meta/episodes.jsonl", 2, json.dumps({"episode_index": 2, "tasks": []}))
    _, rejected = open_dataset(root)
    assert rejected[0].episode == 2 and "invalid length None" in rejected[0].message


def test_template_escaping_root_is_refused(lowres_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(lowres_v21, "escape")
    info = json.loads((root / "meta/info.json").read_text())
    info["video_path"] = "../../{video_key}/episode_{episode_index:06d}.mp4"
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="leaves the dataset root"):
        open_dataset(root)


def test_symlink_outside_root_fails_that_episode(lowres_v21: Path, copy_dataset: Callable[[Path, str], Path],
                                                 tmp_path: Path) -> None:
    root = copy_dataset(lowres_v21, "symlink")
    ds, _ = open_dataset(root)
    target = root / ds.episodes[0].videos[0].rel
    outside = tmp_path / "outside.mp4"
    os.replace(target, outside)
    target.symlink_to(outside)
    with pytest.raises(EpisodeError, match="symlink points outside"):
        resolve_inside(root, ds.episodes[0].videos[0].rel, episode=0)
    results = [s for u in scan_units(ds) for s in scan_unit(u)]
    assert results[0].status == "failed" and "outside" in (results[0].reason or "")
    assert [r.status for r in results[1:]] == ["ok", "ok"]


def test_v30_bad_episode_rows(lowres_v30: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = copy_dataset(lowres_v30, "v30bad")
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    lengths = table["length"].to_pylist()
    lengths[1] = 0
    table = table.set_column(table.column_names.index("length"), "length", pa.array(lengths, pa.int64()))
    pq.write_table(table, path)
    ds, rejected = open_dataset(root)
    assert [e.index for e in ds.episodes] == [0, 2]
    assert rejected[0].episode == 1 and "length" in rejected[0].message


def test_v30_episode_metadata_read_in_batches_reads_as_one(lowres_v30: Path, copy_dataset: Callable[[Path, str], Path],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar reader reads an episode metadata file a batch at a time (a file of millions of rows is never
    held whole): with batches of 2 rows and a bad row in the second batch, the model and the rejected lines (row
    numbers included) are those of one whole-file read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.formats import v30

    root = copy_dataset(lowres_v30, "v30batches")
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    assert table.num_rows >= 3
    lengths = table["length"].to_pylist()
    lengths[2] = -1  # the first row of the second 2-row batch
    table = table.set_column(table.column_names.index("length"), "length", pa.array(lengths, pa.int64()))
    pq.write_table(table, path, row_group_size=1)
    whole, whole_rejected = open_dataset(root)
    monkeypatch.setattr(v30, "OPEN_BATCH_ROWS", 2)
    batched, batched_rejected = open_dataset(root)
    assert [e for e in batched.episodes] == [e for e in whole.episodes]
    assert [str(r) for r in batched_rejected] == [str(r) for r in whole_rejected]
    assert len(whole_rejected) == 1 and "row 2" in str(whole_rejected[0])


def test_v30_missing_episode_metadata(lowres_v30: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(lowres_v30, "v30nometa")
    (root / "meta/episodes/chunk-000/file-000.parquet").unlink()
    with pytest.raises(DatasetError, match="meta/episodes"):
        open_dataset(root)
