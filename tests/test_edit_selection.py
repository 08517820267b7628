"""`prep edit`'s selection at scale: the kept and dropped episodes are held as runs (memory grows with the
number of runs, not with the corpus), select streams the episode metadata once, and the split's numpy
allocation is the list one's. The numbers at 100 k and 1 M episodes are in bench/edit_scale.py."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import PrepError
from pipeline.jobs.edit import EditOptions, Selection, SplitPart, episode_tasks, select, split_selections


def test_selection_runs() -> None:
    decisions = [(0, None), (1, None), (2, "--drop"), (3, "--drop"), (4, "verify: frames"), (5, None), (6, "--drop"),
                 (7, None), (8, None)]
    sel = Selection.of(decisions, offset=10)
    assert (sel.kept_count, sel.dropped_count) == (5, 4)
    assert [sel.new_of(e) for e in range(9)] == [10, 11, None, None, None, 12, None, 13, 14]
    assert list(sel.iter_kept()) == [0, 1, 5, 7, 8] and sel.kept_array().tolist() == [0, 1, 5, 7, 8]
    assert list(sel.iter_dropped()) == [(2, "--drop"), (3, "--drop"), (4, "verify: frames"), (6, "--drop")]
    assert [sel.reason_of(e) for e in (1, 3, 4, 6, 9)] == [None, "--drop", "verify: frames", "--drop", None]
    assert sel.kept_ranges() == "0-1,5,7-8"
    assert len(list(sel.kept_runs())) == 3 and sel.reasons == ["--drop", "verify: frames"]  # runs, not episodes
    whole = Selection.all(1_000_000_000, offset=5)
    assert whole.new_of(999_999_999) == 1_000_000_004 and whole.new_of(10**9) is None and whole.dropped_count == 0


def test_long_selection_is_listed_as_a_digest() -> None:
    from pipeline.jobs import edit

    sel = Selection.of((e, None if e % 2 else "--drop") for e in range(2 * edit.KEPT_RANGES_LISTED + 2))
    same = Selection.of((e, None if e % 2 else "--drop") for e in range(2 * edit.KEPT_RANGES_LISTED + 2))
    other = Selection.of((e, None if e % 2 and e != 7 else "--drop") for e in range(2 * edit.KEPT_RANGES_LISTED + 2))
    assert sel.kept_ranges().startswith("sha256:") and sel.kept_ranges() == same.kept_ranges()
    assert other.kept_ranges() != sel.kept_ranges()


def _metadata_v21(root: Path, n: int) -> Path:
    (root / "meta").mkdir(parents=True)
    with open(root / "meta/episodes.jsonl", "w", encoding="utf-8") as fh:
        for e in range(n):
            fh.write(json.dumps({"episode_index": e, "tasks": [f"task {e % 3}"], "length": 10}) + "\n")
    with open(root / "meta/tasks.jsonl", "w", encoding="utf-8") as fh:
        for t in range(3):
            fh.write(json.dumps({"task_index": t, "task": f"task {t}"}) + "\n")
    return root


INFO = {"codebase_version": "v2.1", "fps": 30, "features": {}, "chunks_size": 1000,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"}


def _peak(fn: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        value = fn()
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return value, peak


@pytest.mark.slow
def test_select_streams_the_metadata(tmp_path: Path) -> None:
    """A drop of 3 episodes holds 4 kept runs whatever the corpus, and select allocates nothing that grows with
    it: its peak is within 0.5 MB of the peak of reading the episode metadata alone (the old plan held every
    episode's index and tasks: ~15 MB more per 100,000 episodes)."""
    import numpy as np  # imported before anything is traced

    n = 100_000
    root = _metadata_v21(tmp_path / "ds", n)
    _, reading = _peak(lambda: sum(1 for _ in episode_tasks(root, INFO)))
    (sel, total), peak = _peak(lambda: select(EditOptions(drop=(1, n // 2, n - 2)), root, INFO))
    assert total == n and sel.kept_count == n - 3 and len(list(sel.kept_runs())) == 4
    assert sel.new_of(n - 1) == n - 4 and sel.reason_of(n // 2) == "--drop"
    assert peak < reading + 500_000, (peak, reading)
    (by_task, _), peak = _peak(lambda: select(EditOptions(drop_tasks=("task 1",), keep=np.arange(0, n, 2)), root,
                                              INFO))
    # the most fragmented selection (every other episode, alternating reasons): its runs, ~32 bytes per kept one
    assert peak < reading + 500_000 + 32 * n // 2, (peak, reading)
    assert by_task.reason_of(1) == "not in --keep" and by_task.reason_of(4) == "--drop-tasks: task 1"
    assert by_task.kept_count == len([e for e in range(0, n, 2) if e % 3 != 1]) and len(by_task.reasons) == 2
    with pytest.raises(PrepError, match=rf"--drop: episode {n} is not in .* \(and 1 more\)"):
        select(EditOptions(drop=(5, n, n + 7)), root, INFO)


def _split_lists(parts: list[SplitPart], base: list[int], tasks_of: dict[int, tuple[str, ...]], *, seed: int,
                 shuffle: bool, group_by_task: bool) -> dict[str, list[int]]:
    """The list-and-dict allocation `split_selections` had before it moved to numpy (the reference)."""
    import numpy as np

    from pipeline.jobs.edit import _largest_remainder

    taken = {e for p in parts for e in (p.episodes or ())}
    out = {p.name: sorted(e for e in (p.episodes or ()) if e in set(base)) for p in parts if p.episodes is not None}
    frac = [p for p in parts if p.fraction is not None]
    groups: dict[tuple[str, ...], list[int]] = {}
    for e in (e for e in base if e not in taken):
        groups.setdefault(tasks_of.get(e, ()) if group_by_task else (), []).append(e)
    rng = np.random.default_rng(seed)
    for p in frac:
        out[p.name] = []
    for key in sorted(groups):
        members = groups[key]
        if shuffle:
            members = [members[i] for i in rng.permutation(len(members))]
        start = 0
        for p, k in zip(frac, _largest_remainder(len(members), [float(p.fraction or 0) for p in frac]), strict=True):
            out[p.name] += members[start:start + k]
            start += k
    return {p.name: sorted(out[p.name]) for p in parts}


@pytest.mark.parametrize("group_by_task", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_split_arrays_match_the_list_allocation(group_by_task: bool, shuffle: bool) -> None:
    parts = [SplitPart("val", episodes=(3, 10, 11, 400)), SplitPart("train", 0.7), SplitPart("test", 0.2)]
    base = [e for e in range(1000) if e % 7]
    tasks_of = {e: (f"t{e % 5}",) if e % 11 else (f"t{e % 5}", "x") for e in range(1000)}
    for seed in (0, 3):
        got = split_selections(parts, base, tasks_of, seed=seed, shuffle=shuffle, group_by_task=group_by_task,
                               total=1000)
        assert got == _split_lists(parts, base, tasks_of, seed=seed, shuffle=shuffle, group_by_task=group_by_task)
