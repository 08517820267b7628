"""The resume fingerprint catches an in-place change: a source video changed after a finished run with its size
and mtime kept (as `cp -p`, `rsync -a` and `touch -r` leave them) and the changed bytes outside the three
hashed 64 KiB blocks is redone by the rerun, with `--fingerprint ctime` (the default: the inode change time
moved) and with `--fingerprint content` (the hash of every byte differs). `content` keeps a file whose bytes
are the same after a metadata-only change (chmod); `ctime` redoes it (documented). v2.1 and v3.0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.faults import check_source, corpus, count_line, scenario, snapshot
from support.safety import VERSIONS, Watch, args_of, copy, first_video, record_outcome, run

from pipeline.stages.reencode import FINGERPRINT_BLOCK, source_fingerprint

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PAD = 600 * 1024  # a trailing `free` box (demuxers skip it) so that bytes can change outside the hashed blocks


def padded_source(version: str, dst: Path) -> tuple[Path, Path, int]:
    """A copy of the corpus whose first video ends with a 600 KiB `free` box; returns (root, video, offset)
    where offset lies inside the box and outside the start, middle and end blocks the cheap hash reads."""
    src = copy(corpus(version), dst)
    video = first_video(src)
    data = video.read_bytes()
    video.write_bytes(data + PAD.to_bytes(4, "big") + b"free" + bytes(PAD - 8))
    size = video.stat().st_size
    lo, hi = max(FINGERPRINT_BLOCK, len(data) + 8), size // 2 - FINGERPRINT_BLOCK // 2
    assert hi - lo > 64, (lo, hi)
    return src, video, (lo + hi) // 2


def change_in_place(video: Path, offset: int, text: bytes) -> None:
    """Write `text` at `offset`, then put the mtime back (what cp -p, rsync -a, touch -r do)."""
    st = video.stat()
    with open(video, "r+b") as fh:
        fh.seek(offset)
        fh.write(text)
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = video.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def recorded(out: Path, src: Path, video: Path) -> dict:
    rel = video.relative_to(src).as_posix()
    return json.loads((out / "prep/stats" / f"{rel}.json").read_text())["source_fingerprint"]


@pytest.mark.parametrize("mode", ["ctime", "content"])
@pytest.mark.parametrize("version", VERSIONS)
def test_in_place_change_with_size_and_mtime_kept_is_redone(version: str, mode: str, tmp_path: Path) -> None:
    src, video, offset = padded_source(version, tmp_path / "src")
    out = tmp_path / "out"
    extra = ["--fingerprint", mode]
    with scenario(f"reencode {version} --fingerprint {mode}: source changed in place, size and mtime kept, bytes "
                  "outside the hashed blocks", "the rerun re-encodes that file (1 encoded), keeps the rest") as row:
        first = run(row, *args_of("reencode", version, src, out), *extra)
        assert first.returncode == 0, first.stdout + first.stderr
        files = count_line(first.stdout)["files"]
        old = recorded(out, src, video)
        change_in_place(video, offset, b"changed in place")
        cheap = source_fingerprint(video, content=False)
        assert {k: cheap[k] for k in ("bytes", "mtime_ns", "blake2b")} == \
            {k: old[k] for k in ("bytes", "mtime_ns", "blake2b")}, "the change must escape the size/mtime/block hash"
        before = snapshot(src)
        watch = Watch(tmp_path, allowed=[out])
        again = run(row, *args_of("reencode", version, src, out), *extra)
        assert again.returncode == 0, again.stdout + again.stderr
        counts = count_line(again.stdout)
        row.observed = f"rerun: {counts}"
        assert counts.get("encoded") == 1 and counts.get("kept") == files - 1, again.stdout
        assert recorded(out, src, video) != old
        outside = record_outcome(row, watch, tmp_path)
        assert not outside and not row.temps_left, outside
        check_source(row, before, src)


@pytest.mark.parametrize("mode", ["ctime", "content"])
def test_metadata_only_change(mode: str, tmp_path: Path) -> None:
    """chmod moves the ctime but not a byte: `content` keeps the file, `ctime` (no full read) redoes it."""
    src, video, _offset = padded_source("v21", tmp_path / "src")
    out = tmp_path / "out"
    extra = ["--fingerprint", mode]
    expected = "kept" if mode == "content" else "encoded"
    with scenario(f"reencode v21 --fingerprint {mode}: source chmod-ed (same bytes) after a finished run",
                  f"the rerun: that file {expected}") as row:
        first = run(row, *args_of("reencode", "v21", src, out), *extra)
        assert first.returncode == 0, first.stdout + first.stderr
        files = count_line(first.stdout)["files"]
        os.chmod(video, 0o600)
        again = run(row, *args_of("reencode", "v21", src, out), *extra)
        assert again.returncode == 0, again.stdout + again.stderr
        counts = count_line(again.stdout)
        row.observed = f"rerun: {counts}"
        assert counts.get("kept") == (files if mode == "content" else files - 1), again.stdout
        assert counts.get("encoded", 0) == (0 if mode == "content" else 1), again.stdout
        record_outcome(row, None, out)


def test_unchanged_source_is_kept_by_both_modes(tmp_path: Path) -> None:
    """The control: a rerun on an unchanged source keeps every file, whichever fingerprint (a run started with
    one mode resumes with the other: the content hash is always recorded)."""
    src = copy(corpus("v30"), tmp_path / "src")
    out = tmp_path / "out"
    with scenario("reencode v30: unchanged source, rerun with each fingerprint", "every file kept") as row:
        first = run(row, *args_of("reencode", "v30", src, out))
        assert first.returncode == 0, first.stdout + first.stderr
        files = count_line(first.stdout)["files"]
        for mode in ("content", "ctime"):
            again = run(row, *args_of("reencode", "v30", src, out), "--fingerprint", mode)
            assert again.returncode == 0 and count_line(again.stdout).get("kept") == files, again.stdout
        record_outcome(row, None, out)
