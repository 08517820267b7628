"""Disk full on the output: `prep reencode --out` into a small tmpfs mounted by the test (root
only; skipped with the reason where mounting is not permitted), sized from the clean run's files
so that the disk fills at a known phase. The run must fail with a clear error, leave no file under
its final name that is not complete and correct, and no temp file; after the tmpfs is grown in
place ("space freed"), the same command completes and equals the clean run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.faults import (
    Row,
    baseline,
    baseline_digest,
    check_source,
    corpus,
    count_line,
    digest_diff,
    known_bug,
    output_digest,
    prep,
    reencode_args,
    scenario,
    short_paths,
    snapshot,
    temp_files,
    unsound_final_files,
)
from support.locks import LOCK_REL
from support.tmpfs import can_mount_fixture, remount, tmpfs, tmpfs_bytes

from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

PAGE = 4096


can_mount = can_mount_fixture("disk-full scenarios")


def sizes(prefix: str) -> list[int]:
    out = baseline("v21")
    return [p.stat().st_size for p in sorted((out / prefix).rglob("*")) if p.is_file()]


def fill_and_resume(row: Row, tmp_path: Path, size: int, expect_failed_videos: bool) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    with tmpfs(tmp_path / "disk", size) as disk:
        out = disk / "out"
        args = reencode_args(src, out)
        r = prep(*args)
        text = r.stdout + r.stderr
        row.details["first_run"] = {"exit": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-2000:]}
        assert r.returncode != 0, f"a run on a full disk exited 0:\n{text}"
        assert "No space left on device" in text, text
        unsound = unsound_final_files(reference, out)
        row.files_lost = len(unsound)
        assert not unsound, f"files under their final name that are not complete and correct: {unsound}"
        assert not temp_files(out), f"temp files left on the full disk: {temp_files(out)}"
        assert not (out / "meta/info.json").exists(), "info.json written although the run failed"
        assert not (out / LOCK_REL).exists(), "lock file left by a run that ended"
        counts = count_line(r.stdout)
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        if counts:
            first = f"exit {r.returncode}; {counts.get('failed', 0)} of {counts.get('files')} videos failed with ENOSPC"
        else:
            first = f"exit {r.returncode}; stopped while copying: {short_paths(last)[:200]}"
        row.observed = first + f"; {len(list(out.rglob('*.mp4')))} complete videos kept, 0 temp files, no info.json"
        if expect_failed_videos:
            assert counts.get("failed") == counts.get("files") == 8, counts
            assert r.stdout.count("No space left on device") >= 8, r.stdout

        remount(disk, 64 << 20)
        r2 = prep(*args)
        assert r2.returncode == 0, r2.stdout + r2.stderr
        diff = digest_diff(reference, output_digest(out))
        row.files_lost += len(diff["missing"]) + len(diff["different"])
        assert not any(diff.values()), f"output after the rerun differs from the clean run: {diff}"
        assert not temp_files(out)
        report = verify_in_process(out, VerifyOptions(size=(224, 224), all_intra=True))
        assert report.passed, [f.line() for f in report.failures[:5]]
        row.observed += (f"; after remount: exit 0, {count_line(r2.stdout).get('kept')} kept, output equals the "
                         "clean run, verify passed")
        check_source(row, before, src)
        clear = "Traceback" not in text and (r.returncode == 1 or r.stderr.startswith("prep reencode: error:"))
        known_bug(clear, f"a full disk outside the encode gives a Python traceback, not a one-line error: {last[:200]}")


def test_disk_full_during_encode(can_mount: None, tmp_path: Path) -> None:
    """Smaller than one output video: every encode fails, the copies and the report still fit."""
    with scenario("disk full during encode (tmpfs smaller than one video)",
                  "exit 1, every video FAILED with 'No space left on device'; no incomplete file under a final "
                  "name; no temp files; rerun after remount completes = clean run") as row:
        one_video = min(tmpfs_bytes([s]) for s in sizes("videos"))
        size = one_video - 2 * PAGE
        copied = sizes("data") + [(baseline("v21") / m).stat().st_size for m in ("meta/episodes.jsonl",
                                                                                "meta/tasks.jsonl")]
        need = tmpfs_bytes(copied) + 5 * PAGE  # the copies, options.json, the lock, the report
        assert need < size, f"corpus mis-sized for this scenario: need {need} B beside, < one video {one_video} B"
        fill_and_resume(row, tmp_path, size, expect_failed_videos=True)


def test_disk_full_while_copying(can_mount: None, tmp_path: Path) -> None:
    """Room for every video but not for the parquet copies that follow them."""
    with scenario("disk full while copying parquet/metadata (tmpfs fits the videos only)",
                  "non-zero exit with a one-line error; no incomplete file under a final name; no temp files; "
                  "rerun after remount completes = clean run") as row:
        size = tmpfs_bytes(sizes("videos")) + 4 * PAGE  # options.json, the lock, and one more page
        assert tmpfs_bytes(sizes("data")) > 3 * PAGE
        fill_and_resume(row, tmp_path, size, expect_failed_videos=False)
