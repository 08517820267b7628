"""pipeline/formats/validate.py: the metadata rules on real and synthetic datasets, the cap on listed
problems, and the shape cache (a cached verdict must equal the schema's own on every line)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from pipeline.errors import MetadataError
from pipeline.formats.problems import MAX_LISTED, ShapeCache, _validator, shape
from pipeline.formats.validate import open_validated, validate_metadata
from pipeline.synth import SynthSpec, write_synthetic


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_synthetic_datasets_are_valid(version: str, tmp_path: Path) -> None:
    root = write_synthetic(tmp_path / "ds", SynthSpec(version=version, episodes=3, frames=8, height=32, width=32))
    assert validate_metadata(root).lines == []
    ds, rejected = open_validated(root)
    assert len(ds.episodes) == 3 and not rejected


def test_real_dataset_is_valid(real_v21: Path) -> None:
    assert validate_metadata(real_v21).lines == []


def test_many_bad_lines_are_counted_but_listed_up_to_the_cap(tmp_path: Path) -> None:
    root = write_synthetic(tmp_path / "ds", SynthSpec(version="v2.1", episodes=3, frames=8, height=32, width=32))
    path = root / "meta/episodes.jsonl"
    good = path.read_text()
    path.write_text(good + "".join(json.dumps({"episode_index": 3 + i, "length": 0}) + "\n" for i in range(500)))
    with pytest.raises(MetadataError) as info:
        open_validated(root)
    err = info.value
    assert err.total == 500 and len(err.problems) == MAX_LISTED
    assert err.problems[0] == f"{path}:4: length: 0 is less than the minimum of 1"
    assert str(err).splitlines()[-1].endswith(f"500 metadata problems ({500 - MAX_LISTED} more not listed); "
                                              "nothing was started: fix the metadata and rerun")


def _value(depth: int = 0) -> object:
    pick = random.random()
    if depth < 3 and pick < 0.25:
        return [_value(depth + 1) for _ in range(random.randint(0, 4))]
    if depth < 3 and pick < 0.4:
        return {random.choice("abc"): _value(depth + 1) for _ in range(random.randint(0, 3))}
    return random.choice([0, 1, -1, 7, 2**63, 0.0, 2.0, 2.5, -0.5, float("nan"), "x", "", True, None])


@pytest.mark.parametrize("schema", ["lerobot_episode", "lerobot_task", "lerobot_episode_stats", "lerobot_stats"])
def test_shape_cache_gives_the_schema_verdict(schema: str) -> None:
    """Random lines made of the kinds of value the schemas tell apart: the cached verdict always equals
    jsonschema's own."""
    rng = random.Random(schema)
    random.seed(rng.random())
    cache = ShapeCache(schema)
    keys = {"lerobot_episode": ["episode_index", "length", "tasks"], "lerobot_task": ["task_index", "task"],
            "lerobot_episode_stats": ["episode_index", "stats"], "lerobot_stats": ["action", "state"]}[schema]
    stat = ["min", "max", "mean", "std", "count"]
    for _ in range(3000):
        obj: dict[str, object] = {k: _value() for k in keys if random.random() < 0.9}
        if "stats" in obj or schema == "lerobot_stats":
            feats = {f: {s: _value(1) for s in stat if random.random() < 0.9} for f in ("a", "b")}
            obj = feats if schema == "lerobot_stats" else {**obj, "stats": feats}
        assert cache.is_valid(obj) == _validator(schema).is_valid(obj), (obj, shape(obj))


def test_stats_line_shapes_repeat_across_episodes(tmp_path: Path) -> None:
    root = write_synthetic(tmp_path / "ds", SynthSpec(version="v2.1", episodes=30, frames=8, height=32, width=32))
    cache = ShapeCache("lerobot_episode_stats")
    for line in (root / "meta/episodes_stats.jsonl").read_text().splitlines():
        assert cache.is_valid(json.loads(line))
    assert len(cache.known) <= 6  # 30 lines, a few shapes: one schema walk per shape, not per line


def test_a_folder_where_a_metadata_file_belongs(tmp_path: Path) -> None:
    root = write_synthetic(tmp_path / "ds", SynthSpec(version="v2.1", episodes=2, frames=8, height=32, width=32))
    (root / "meta/tasks.jsonl").unlink()
    (root / "meta/tasks.jsonl").mkdir()
    assert validate_metadata(root).lines == [f"{root}/meta/tasks.jsonl: not a regular file"]
    shutil.rmtree(root / "meta/tasks.jsonl")


def test_schema_errors_name_the_top_level_key(tmp_path: Path) -> None:
    """validate_metadata classifies info.json's problems by the error's own path, not by re-parsing its text:
    a nested bad value (features/<name>/dtype) and top-level ones (robot_type, splits) carry their key; a missing
    required key carries None (a problem of the object itself)."""
    from pipeline.formats.problems import schema_errors

    root = write_synthetic(tmp_path / "ds", SynthSpec(episodes=1, frames=4, height=32, width=32))
    info = json.loads((root / "meta/info.json").read_text())
    info.update(robot_type=5, splits=["train"])
    next(iter(info["features"].values()))["dtype"] = 5
    del info["fps"]
    keys = {key for key, _text in schema_errors(info, "lerobot_info", limit=None)}
    assert keys == {"robot_type", "splits", "features", None}
    assert all(": " in text for _key, text in schema_errors(info, "lerobot_info", limit=None))
    assert len(schema_errors(info, "lerobot_info", limit=1)) == 1
