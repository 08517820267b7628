"""Completion records (`pipeline.jobs.parts`): the local work folder and the store's one share their plan and record
handling, so both behave alike: the plan's fingerprint keeps or clears the records, records read back in position
order as written, an entry that is not a record is ignored, a second run is refused while the lock is held, and
release is once. The store's folder runs here over a local `Location` (its `LocalStore`): the same code an object
store's takes, without a server (tests/test_storage_reports.py runs it against S3)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.jobs import parts
from pipeline.lock import LockedError
from pipeline.storage import StorePath, as_root

Opener = Callable[..., "parts.WorkFolder | parts.StoreWorkFolder"]


def local(tmp_path: Path) -> Opener:
    return lambda **kw: parts.WorkFolder(parts.work_folder_for(tmp_path / "m.json"), **kw)


def stored(tmp_path: Path) -> Opener:
    report = StorePath(as_root(tmp_path).location, "out/m.json")
    return lambda **kw: parts.StoreWorkFolder(report, **kw)


KINDS = {"local": local, "store": stored}


def records_dir(tmp_path: Path) -> Path:
    return tmp_path / "m.json.parts" if (tmp_path / "m.json.parts").exists() else tmp_path / "out/m.json.parts"


def read_all(work: parts.WorkFolder | parts.StoreWorkFolder) -> list[tuple[int, int, list[Any]]]:
    return [(first, end, list(work.read_record(where))) for first, end, where in work.records()]


@pytest.mark.parametrize("kind", KINDS)
def test_records_round_trip_in_position_order(kind: str, tmp_path: Path) -> None:
    opener = KINDS[kind](tmp_path)
    with opener(fingerprint="a") as work:
        assert work.records() == []
        work.write_record(3, [{"e": 3, "ü": "ß"}, {"e": 4}])
        work.write_record(0, [{"e": 0}, None, [1, 2]])
        folder = records_dir(tmp_path)
        assert json.loads((folder / parts.PLAN_FILE).read_bytes()) == {"fingerprint": "a"}
        assert sorted(p.name for p in folder.iterdir() if p.name.startswith("part-")) == [
            "part-000000000000-000000000003.jsonl.gz", "part-000000000003-000000000005.jsonl.gz"]
        (folder / "part-x.jsonl.gz").write_bytes(b"")  # not a record's name
        (folder / "part-000000000009-000000000010.jsonl").write_bytes(b"")
        assert read_all(work) == [(0, 3, [{"e": 0}, None, [1, 2]]), (3, 5, [{"e": 3, "ü": "ß"}, {"e": 4}])]
        with gzip.open(folder / "part-000000000003-000000000005.jsonl.gz", "rb") as gz:
            assert gz.read() == '{"e":3,"ü":"ß"}\n{"e":4}\n'.encode()


@pytest.mark.parametrize("kind", KINDS)
def test_the_plan_keeps_or_clears_the_records(kind: str, tmp_path: Path) -> None:
    opener = KINDS[kind](tmp_path)
    with opener(fingerprint="a") as work:
        work.write_record(0, [1, 2])
    with opener(fingerprint="a") as work:  # the same plan: resumed
        assert [r[:2] for r in work.records()] == [(0, 2)]
    with opener(fingerprint="a", resume=False) as work:  # resume=False: cleared
        assert work.records() == []
        work.write_record(0, [1])
    with opener(fingerprint="b") as work:  # another plan: cleared, its fingerprint written
        assert work.records() == []
        work.write_record(0, [1])
        assert json.loads((records_dir(tmp_path) / parts.PLAN_FILE).read_bytes()) == {"fingerprint": "b"}
    for garbage in (b"not json", b"[1]", b'{"fingerprint": 7}', b"\xff\xfe"):  # not a plan prep wrote: cleared
        (records_dir(tmp_path) / parts.PLAN_FILE).write_bytes(garbage)
        with opener(fingerprint="b") as work:
            assert work.records() == []
            work.write_record(0, [1])


@pytest.mark.parametrize("kind", KINDS)
def test_lock_is_held_until_released_once(kind: str, tmp_path: Path) -> None:
    opener = KINDS[kind](tmp_path)
    work = opener(fingerprint="a")
    with pytest.raises(LockedError):
        opener(fingerprint="a")
    temp = work.path
    assert temp.is_dir()
    work.release()
    work.release()  # a second release does nothing
    if kind == "store":
        assert not temp.exists()  # the job's local temp folder goes with it
    with opener(fingerprint="a") as again:
        again.write_record(0, [1])
        again.remove()
    assert not (tmp_path / "m.json.parts").exists()
    assert not any(p.name.startswith("part-") for p in tmp_path.rglob("*"))
