"""The columnar metadata readers equal the per-record readers they replaced (tests/support/legacy_metadata.py),
on any episodes.jsonl or episodes parquet: the same episodes (paths, spans, tasks), the same rejected
records (episode, where, reason, in file order), or the same dataset-level error."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.legacy_metadata import legacy_v21, legacy_v30

from pipeline.errors import DatasetError
from pipeline.formats import open_dataset, read_info

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CAMS = ("cam", "wrist")


def _features() -> dict[str, Any]:
    return {c: {"dtype": "video", "shape": [480, 640, 3], "names": ["height", "width", "channel"]} for c in CAMS}


def _compare(root: Path, legacy: Any) -> None:
    try:
        want = legacy(root, read_info(root))
    except DatasetError as exc:
        try:
            open_dataset(root)
        except DatasetError as got:
            assert str(got) == str(exc)
            return
        raise AssertionError(f"the legacy reader refused the dataset ({exc}), the columnar one did not") from None
    ds, rejected = open_dataset(root)
    episodes, refused = want
    assert list(ds.episodes) == episodes
    assert [(r.episode, r.path, r.message) for r in rejected] == [(r.episode, r.path, r.message) for r in refused]
    assert rejected.total == len(refused) and ds.rejected_count == len(refused)
    assert ds.total_frames_expected == sum(e.frames_expected for e in episodes)


small = st.integers(-2, 6)
value = st.none() | st.booleans() | small | st.integers(0, 400) | st.floats(-1, 500) | st.text(max_size=4)
tasks = st.lists(st.sampled_from(["a", "b", "pick"]), max_size=3) | st.lists(st.none() | st.integers(), max_size=2)
record = st.fixed_dictionaries(
    {"episode_index": st.integers(0, 6)}, optional={"length": st.integers(1, 300) | value, "tasks": tasks | value,
                                                    "extra": value})
good = st.builds(lambda i, n, t: {"episode_index": i, "length": n, "tasks": t}, st.integers(0, 8),
                 st.integers(1, 300), st.lists(st.sampled_from(["a", "b"]), max_size=2))
line = good.map(json.dumps) | record.map(json.dumps) | st.text(max_size=20) | st.sampled_from(
    ["", "  ", "[1]", '{"episode_index": 3, "length": 9', "\r", "\u2028", '{"episode_index": 1}\r{"x": 1}'])


@SETTINGS
@given(lines=st.lists(line, max_size=10), sep=st.sampled_from(["\n", "\r\n", "\r"]))
def test_v21_episodes_jsonl(lines: list[str], sep: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "meta").mkdir()
        info = {"codebase_version": "v2.1", "fps": 30, "chunks_size": 4,
                "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
                "features": _features()}
        (root / "meta/info.json").write_text(json.dumps(info))
        (root / "meta/episodes.jsonl").write_text(sep.join(lines) + sep, encoding="utf-8", newline="")
        _compare(root, legacy_v21)


def test_v21_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text(json.dumps({
        "codebase_version": "v2.1", "fps": 30, "data_path": "d/{episode_index}.parquet", "features": {}}))
    (tmp_path / "meta/episodes.jsonl").write_bytes(b'{"episode_index": 0, "length": 3}\n\xff\xfe\n')
    _compare(tmp_path, legacy_v21)


def _v30_good(i: int, n: int) -> dict[str, Any]:
    row: dict[str, Any] = {"episode_index": i, "length": n, "tasks": ["a"], "data/chunk_index": 0,
                           "data/file_index": i // 2, "dataset_from_index": 10 * i, "dataset_to_index": 10 * i + n}
    for c in CAMS:
        row |= {f"videos/{c}/chunk_index": 0, f"videos/{c}/file_index": i // 3,
                f"videos/{c}/from_timestamp": float(i), f"videos/{c}/to_timestamp": i + n / 30}
    return row


cell = st.none() | st.integers(-3, 400) | st.floats(-5, 500) | st.just(float("nan"))


@st.composite
def v30_rows(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(0, 8))
    rows = [_v30_good(draw(st.integers(0, 6)), draw(st.integers(1, 9))) for _ in range(n)]
    for row in rows:
        for key in draw(st.lists(st.sampled_from(sorted(row)), max_size=2)):
            row[key] = draw(cell | st.lists(st.sampled_from(["a", "b"]), max_size=2) if key == "tasks" else cell)
    return rows


@SETTINGS
@given(files=st.lists(v30_rows(), min_size=1, max_size=3), stats=st.booleans())
def test_v30_episodes_parquet(files: list[list[dict[str, Any]]], stats: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ep_dir = root / "meta/episodes/chunk-000"
        ep_dir.mkdir(parents=True)
        info = {"codebase_version": "v3.0", "fps": 30,
                "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
                "features": _features()}
        (root / "meta/info.json").write_text(json.dumps(info))
        for k, rows in enumerate(files):
            keys = sorted({key for r in rows for key in r}) or ["episode_index"]
            cols = {key: [r.get(key) for r in rows] for key in keys}
            try:
                table = pa.Table.from_pydict({key: pa.array(v) for key, v in cols.items()})
            except (pa.ArrowException, TypeError, ValueError):  # mixed types: as strings
                table = pa.Table.from_pydict({key: pa.array([None if x is None else str(x) for x in v])
                                              for key, v in cols.items()})
            if stats:
                table = table.append_column("stats/cam/mean", pa.array([[0.5]] * table.num_rows))
            pq.write_table(table, ep_dir / f"file-{k:03d}.parquet")
        _compare(root, legacy_v30)
