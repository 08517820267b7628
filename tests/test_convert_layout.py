"""The conversion plan (pipeline/formats/plan.py, v30.py, v21.py): LeRobot's packing rule, exact offsets, determinism,
streaming, and the v3.0 -> v2.1 per-episode layout."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from pipeline.formats.plan import (
    DataConcatUnit,
    Placement,
    V21Episode,
    V30Episode,
    V30Video,
    VideoConcatUnit,
    placements_of,
    units_of,
)
from pipeline.formats.v21 import plan_v30_to_v21
from pipeline.formats.v30 import Limits, next_chunk_file, plan_keyframe_checks, plan_v21_to_v30
from pipeline.rates import frames_to_seconds

CAMS = ("cam_a", "cam_b")


def episodes(n: int, data_mb: float = 1.0, video_mb: tuple[float, ...] = (1.0, 1.0), length: int = 10,
             lengths: list[int] | None = None) -> Iterator[V21Episode]:
    for i in range(n):
        yield V21Episode(i, lengths[i] if lengths else length, ("t",), f"data/ep{i}.parquet", data_mb,
                         tuple(f"videos/{c}/ep{i}.mp4" for c in CAMS), video_mb)


def plan(eps: Iterator[V21Episode], limits: Limits) -> list:
    return list(plan_v21_to_v30(eps, CAMS, 30.0, "/src", "/out", limits))


def test_lerobot_packing_rule_and_indices() -> None:
    """A new file starts when the file is not empty and size + next episode's size >= the limit; each
    episode's data/file_index is the file that holds its rows (LeRobot's converter records the previous one)."""
    items = plan(episodes(7, data_mb=30.0, video_mb=(45.0, 100.0)), Limits(chunks_size=2, data_files_size_in_mb=100,
                                                                         video_files_size_in_mb=100))
    data_units = [u for u in items if isinstance(u, DataConcatUnit)]
    # 30+30+30 = 90 < 100; the 4th would make 120 >= 100 -> new file: files of 3, 3, 1 episodes
    assert [[i.episode for i in u.inputs] for u in data_units] == [[0, 1, 2], [3, 4, 5], [6]]
    # chunks_size 2: (0,0), (0,1), (1,0)
    assert [u.out_rel for u in data_units] == ["data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet",
                                               "data/chunk-001/file-000.parquet"]
    assert [u.first_index for u in data_units] == [0, 30, 60]
    places = [p for p in items if isinstance(p, Placement)]
    assert [(p.data_chunk_index, p.data_file_index) for p in places] == [(0, 0)] * 3 + [(0, 1)] * 3 + [(1, 0)]
    a = [u for u in items if isinstance(u, VideoConcatUnit) and u.camera == "cam_a"]
    b = [u for u in items if isinstance(u, VideoConcatUnit) and u.camera == "cam_b"]
    assert [len(u.inputs) for u in a] == [2, 2, 2, 1]  # 45 + 45 = 90; + 45 >= 100
    assert [len(u.inputs) for u in b] == [1] * 7  # a 100 MB episode fills a file on its own
    for p in places:
        va, vb = p.videos
        assert (va.chunk_index, va.file_index, va.frames_before) == (*divmod(p.episode // 2, 2), (p.episode % 2) * 10)
        assert (vb.file_index, vb.frames_before) == (p.episode % 2, 0)


def test_first_episode_over_the_limit_stays_in_file_zero() -> None:
    """LeRobot's converter moves an oversized first episode to file-001 while recording file 0; here it is
    file 0 and the metadata says so."""
    items = plan(episodes(2, data_mb=150.0, video_mb=(300.0, 1.0)), Limits())
    data_units = [u for u in items if isinstance(u, DataConcatUnit)]
    assert [(u.out_rel, [i.episode for i in u.inputs]) for u in data_units] == [
        ("data/chunk-000/file-000.parquet", [0]), ("data/chunk-000/file-001.parquet", [1])]
    assert [p.data_file_index for p in placements_of(items)] == [0, 1]


def test_every_episode_placed_once_and_units_cover_them_in_order() -> None:
    lengths = [7, 90, 1, 33, 200, 5, 64, 12, 3, 41]
    items = plan(episodes(10, data_mb=0.4, video_mb=(0.7, 0.3), lengths=lengths),
                 Limits(data_files_size_in_mb=1, video_files_size_in_mb=1))
    places = list(placements_of(items))
    assert [p.episode for p in places] == list(range(10))
    assert [p.dataset_from_index for p in places] == [sum(lengths[:i]) for i in range(10)]
    units = list(units_of(items))
    for cam in (None, *CAMS):
        group = [u for u in units if (isinstance(u, DataConcatUnit) if cam is None
                                      else isinstance(u, VideoConcatUnit) and u.camera == cam)]
        assert [i.episode for u in group for i in u.inputs] == list(range(10))
        assert sum(u.frames for u in group) == sum(lengths)
    # each unit is emitted before the placement of the episode that opened the next file
    seen: set[int] = set()
    for item in items:
        if isinstance(item, Placement):
            seen.add(item.episode)
        else:
            assert all(i.episode in seen for i in item.inputs)


def test_offsets_are_exact_frame_counts_not_sums() -> None:
    """from_timestamp = frames_before / fps rounded once; a float sum of durations drifts."""
    n = 300
    items = plan(episodes(n, data_mb=0.0, video_mb=(0.0, 0.0), length=7), Limits())
    drift_sum = 0.0
    worst_exact = worst_sum = 0.0
    for p in placements_of(items):
        exact = p.videos[0].frames_before / 30
        worst_exact = max(worst_exact, abs(frames_to_seconds(p.videos[0].frames_before, 30.0) - exact))
        worst_sum = max(worst_sum, abs(drift_sum - exact))
        drift_sum += 7 / 30
    assert worst_exact == 0.0
    assert worst_sum > 0.0  # what accumulating per-episode durations does (lerobot #3177)
    assert frames_to_seconds(1001, 29.97) == pytest.approx(1001 / 29.97, abs=1e-12)


def test_plan_is_deterministic_and_streams() -> None:
    """The same input gives the same plan; the planner consumes its input lazily (an endless source)."""
    limits = Limits(data_files_size_in_mb=3, video_files_size_in_mb=2)
    assert plan(episodes(50, 0.9, (0.6, 1.1)), limits) == plan(episodes(50, 0.9, (0.6, 1.1)), limits)

    def endless() -> Iterator[V21Episode]:
        for i in itertools.count():
            yield V21Episode(i, 10, (), f"d{i}", 0.5, ("a", "b"), (0.5, 0.5))

    first = list(itertools.islice(plan_v21_to_v30(endless(), CAMS, 30.0, "/s", "/o", limits), 100))
    assert any(isinstance(i, DataConcatUnit) for i in first) and any(isinstance(i, Placement) for i in first)


def test_next_chunk_file() -> None:
    assert next_chunk_file(0, 998, 1000) == (0, 999)
    assert next_chunk_file(0, 999, 1000) == (1, 0)


def v30_episodes(n: int, per_file: int) -> Iterator[V30Episode]:
    for i in range(n):
        f, k = divmod(i, per_file)
        yield V30Episode(i, 10, ("t",), f"data/chunk-000/file-{f:03d}.parquet", 10 * i,
                         tuple(V30Video(c, f"videos/{c}/chunk-000/file-{f:03d}.mp4", k / 3, (k + 1) / 3)
                               for c in CAMS))


def test_v30_to_v21_one_file_per_episode_and_camera() -> None:
    units = list(plan_v30_to_v21(v30_episodes(1203, 500), 30.0, "/s", "/o", chunks_size=1000))
    assert len(units) == 1203 * 3
    last = units[-3:]
    assert last[0].out_rel == "data/chunk-001/episode_001202.parquet"
    assert last[1].out_rel == "videos/chunk-001/cam_a/episode_001202.mp4"
    assert last[2].src_rel == "videos/cam_b/chunk-000/file-002.mp4"
    assert (last[1].from_timestamp, last[1].frames) == (202 / 3, 10)
    assert last[0].dataset_from_index == 12020


def test_keyframe_checks_one_unit_per_file_and_camera() -> None:
    checks = list(plan_keyframe_checks(v30_episodes(7, 3), "/s"))
    assert sorted((c.camera, c.rel, [s[0] for s in c.spans]) for c in checks) == sorted(
        (c, f"videos/{c}/chunk-000/file-{f:03d}.mp4", eps)
        for c in CAMS for f, eps in ((0, [0, 1, 2]), (1, [3, 4, 5]), (2, [6])))
