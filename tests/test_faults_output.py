"""Outputs that cannot be written, and engine sessions that cannot start, through the real CLI: a read-only
filesystem (a tmpfs mounted `ro`), a filesystem already full, a folder or a file in the way, an unreachable
or malformed scheduler. Each must be one line naming the path (or address) and the cause, exit 3 for an
output that cannot be written (2 for a refusal), no traceback, and nothing left behind: no lock, no
prep/options.json, no empty folder, so that the corrected command runs. And a disk that fills in the final
phase: meta/info.json is the last file written, so it is absent while anything else is missing, and the
message says what is and is not there and that rerunning the same command finishes it.

The tmpfs scenarios need root (mount); they are skipped with the reason elsewhere."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faults import (
    baseline,
    baseline_digest,
    check_source,
    corpus,
    digest_diff,
    output_digest,
    prep,
    reencode_args,
    scenario,
    short_paths,
    snapshot,
    temp_files,
)
from support.tmpfs import can_mount_fixture, remount, tmpfs, tmpfs_bytes

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

PAGE = 4096


can_mount = can_mount_fixture("read-only and full-disk scenarios")


@pytest.fixture
def readonly(can_mount: None, tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "ro", 1 << 20, readonly=True) as path:
        yield path


@pytest.fixture
def full(can_mount: None, tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "full", 16 * PAGE) as disk:
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill it to the last page
            while os.write(fd, b"\0" * PAGE):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield disk


def one_line(r: object, command: str, code: int) -> str:
    """The run's error line (asserting: that exit code, no traceback, exactly one `prep CMD: error:` line)."""
    text = r.stdout + r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in text, text
    assert r.returncode == code, f"exit {r.returncode}\n{text}"  # type: ignore[attr-defined]
    errors = [line for line in r.stderr.splitlines() if line.startswith(f"prep {command}: error: ")]  # type: ignore[attr-defined]
    assert len(errors) == 1, r.stderr  # type: ignore[attr-defined]
    return errors[0]


def commands(src: Path, base: Path) -> dict[str, tuple[list[str], Path]]:
    return {
        "reencode": (reencode_args(src, base / "out"), base / "out"),
        "scan": (["scan", str(src), "--out", str(base / "m/manifest.json"), "--workers", "1", "--no-progress"],
                 base / "m"),
        "verify": (["verify", str(src), "--json", str(base / "v/report.json"), "--workers", "1", "--no-progress"],
                   base / "v"),
        "budget": (["budget", "--out", str(base / "b"), "--no-plots"], base / "b"),
    }


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_output_that_cannot_be_written(kind: str, request: pytest.FixtureRequest) -> None:
    disk: Path = request.getfixturevalue("readonly" if kind == "read-only" else "full")
    src = corpus("v21")
    before = snapshot(src)
    cause = "Read-only file system" if kind == "read-only" else "No space left on device (the output disk"
    with scenario(f"output on a {kind} filesystem: reencode --out, scan --out, verify --json, budget --out",
                  "each: exit 3, one line 'cannot write PATH: cause', before any work; no lock, options.json or "
                  "empty folder left", bad_input=True) as row:
        seen = {}
        for name, (args, made) in commands(src, disk).items():
            r = prep(*args)
            line = one_line(r, name, 3)
            assert f"cannot write {disk}" in line and cause in line, line
            assert not made.exists(), f"{name} left {made} behind"
            seen[name] = line.split("error: ", 1)[1]
        row.details["lines"] = seen
        assert sorted(p.name for p in disk.iterdir()) == ([] if kind == "read-only" else ["filler"])
        check_source(row, before, src)
        row.observed = "exit 3: " + short_paths(seen["reencode"].replace(str(disk), f"<{kind}>"))[:170]


def test_folder_or_file_in_the_way(tmp_path: Path) -> None:
    src = corpus("v21")
    before = snapshot(src)
    (tmp_path / "a-file").write_text("x")
    with scenario("verify --json <a folder>; scan --out <a folder>; budget --out <a file>; reencode --out under a "
                  "file", "one line naming the path and the cause, exit 3 (2 for budget's refusal); nothing written",
                  bad_input=True) as row:
        r = prep("verify", str(src), "--json", str(tmp_path), "--workers", "1", "--no-progress")
        v = one_line(r, "verify", 3)
        assert v.endswith(f"cannot write {tmp_path}: a folder is in the way (it is a folder; name a file)"), v
        r = prep("scan", str(src), "--out", str(tmp_path), "--workers", "1", "--no-progress")
        assert "a folder is in the way" in one_line(r, "scan", 3)
        r = prep("budget", "--out", str(tmp_path / "a-file"), "--no-plots")
        b = one_line(r, "budget", 2)
        assert b.endswith(f"--out {tmp_path / 'a-file'}: exists and is not a folder"), b
        r = prep(*reencode_args(src, tmp_path / "a-file" / "out"))
        line = one_line(r, "reencode", 3)
        assert f"cannot write {tmp_path / 'a-file'}" in line and "Not a directory" in line, line
        row.details["lines"] = {"verify": v, "budget": b, "reencode": line}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
        check_source(row, before, src)
        row.observed = "verify: " + short_paths(v.split("error: ", 1)[1])[:150]


SCHEDULERS = [
    ("nonsense", 2, "argument --scheduler: expected a scheduler address like tcp://host:8786"),
    ("tls://127.0.0.1:1", 2, "cannot use Dask scheduler 'tls://127.0.0.1:1': TLS expects a `ssl_context`"),
    ("tcp://127.0.0.1:1", 2, "cannot reach Dask scheduler tcp://127.0.0.1:1: Timed out trying to connect"),
]


@pytest.mark.parametrize(("address", "code", "message"), SCHEDULERS, ids=["nonsense", "tls", "unreachable"])
def test_scheduler_that_cannot_be_used(address: str, code: int, message: str, tmp_path: Path) -> None:
    src = corpus("v21")
    out = tmp_path / "out"
    with scenario(f"reencode --scheduler {address}", f"exit {code}, one line '{message[:40]}...'; no "
                  "options.json: the corrected command (another --dst, no --scheduler) runs", bad_input=True) as row:
        r = prep("reencode", "--src", str(src), "--dst", "224", "--out", str(out), "--scheduler", address,
                 "--no-progress")
        line = one_line(r, "reencode", code)
        row.details["line"] = line
        assert message in line, line
        assert not out.exists(), f"left {sorted(p.name for p in out.rglob('*'))}"
        r2 = prep(*reencode_args(src, out, "--dst", "160"))
        assert r2.returncode == 0, r2.stdout + r2.stderr
        assert json.loads((out / "prep/options.json").read_text())["size"] == [160, 160]
        row.observed = f"exit {r.returncode}: {line.split('error: ', 1)[1][:120]}; corrected command: exit 0"


def _final_phase_size(name: str) -> int:
    """Room for every file of the clean output except the reports and meta/info.json."""
    out = baseline(name)
    late = {"prep/manifest.json", "prep/manifest.episodes.parquet", "prep/comparison.json",
            "prep/reencode_report.json", "meta/info.json", "meta/stats.json"}
    sizes = [p.stat().st_size for p in out.rglob("*") if p.is_file() and p.relative_to(out).as_posix() not in late]
    return tmpfs_bytes(sizes) + 2 * PAGE  # the lock, and the probe


def test_disk_full_in_the_final_phase(can_mount: None, tmp_path: Path) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    with scenario("disk full in the final phase (room for videos, parquet, copies; not for metadata and reports)",
                  "exit 3, one line naming the output disk and what is and is not there, 'rerun the same command "
                  "to finish'; no meta/info.json; after remount the rerun completes = clean run") as row, \
            tmpfs(tmp_path / "disk", _final_phase_size("v21")) as disk:
        out = disk / "out"
        r = prep(*reencode_args(src, out))
        line = one_line(r, "reencode", 3)
        row.details["line"] = line
        assert "No space left on device (the output disk" in line and str(disk) in line, line
        assert "meta/info.json" in line and "rerun the same command to finish" in line, line
        assert str(src) not in line, f"the message names the source, not the full output: {line}"
        assert not (out / "meta/info.json").exists(), "info.json written although the run did not complete"
        assert not temp_files(out) and not (out / "prep/output.lock").exists()
        row.observed = "exit 3: " + short_paths(line.split("error: ", 1)[1].replace(str(disk), "<disk>"))[:200]
        remount(disk, 64 << 20)
        r2 = prep(*reencode_args(src, out))
        assert r2.returncode == 0, r2.stdout + r2.stderr
        diff = digest_diff(reference, output_digest(out))
        row.files_lost = len(diff["missing"]) + len(diff["different"])
        assert not any(diff.values()), diff
        for rel in ("prep/reencode_report.json", "prep/manifest.json", "prep/comparison.json", "meta/info.json"):
            assert (out / rel).is_file(), rel
        check_source(row, before, src)
        row.observed += "; after remount: exit 0 = clean run, reports and info.json present"


def test_info_json_is_the_last_file_written(tmp_path: Path) -> None:
    """The order of the final phase, from the files' modification times: every report before info.json."""
    out = baseline("v21")
    info = (out / "meta/info.json").stat().st_mtime_ns
    with scenario("reencode final phase order", "meta/info.json written after every other file and report"):
        later = [p.relative_to(out).as_posix() for p in out.rglob("*")
                 if p.is_file() and p.stat().st_mtime_ns > info]
        assert not later, f"written after meta/info.json: {later}"
