"""`prep reencode` under faults: SIGKILL and resume, a concurrent run, bad input files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import av
import pytest
from support.cli import prep_cmd, run_prep

from pipeline.atomic import TEMP_MARK
from pipeline.lock import LockedError, exclusive_lock

pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.cluster]

def run(src: Path, out: Path, workers: int = 2, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_prep("reencode", "--dst", "224", "--src", src, "--out", out, "--workers", workers, *extra,
                    progress=False, timeout=600)


def videos(out: Path) -> dict[str, tuple[int, int]]:
    """Final-named videos with (inode, mtime_ns); temp files (TEMP_MARK) excluded."""
    return {p.relative_to(out).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in out.rglob("*.mp4") if TEMP_MARK not in p.name}


def frames(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24").tobytes() for f in c.decode(video=0)]


def test_sigkill_then_rerun_matches_uninterrupted(synth_v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen(prep_cmd("reencode", "--dst", "224", "--no-progress", "--src", synth_v21, "--out", out,
                                     "--workers", "1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not videos(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its Dask workers, mid-run
    proc.wait()
    time.sleep(0.5)
    done = videos(out)
    assert 0 < len(done) < 9, f"expected a mid-run kill, found {len(done)} finished files"
    assert not (out / "meta/info.json").exists()  # metadata only once everything is done
    assert (out / "prep/output.lock").exists()  # left behind by the dead run: stale

    r = run(synth_v21, out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{9 - len(done)} encoded, {len(done)} kept" in r.stdout
    after = videos(out)
    assert {k: after[k] for k in done} == done  # finished files were not redone
    assert not list(out.rglob(f"*{TEMP_MARK}*"))

    ref = tmp_path / "reference"
    assert run(synth_v21, ref).returncode == 0
    assert set(videos(ref)) == set(after)
    for rel in after:
        assert frames(out / rel) == frames(ref / rel), rel
    for meta in sorted((ref / "meta").rglob("*")):
        if meta.is_file():
            rel = meta.relative_to(ref)
            assert (out / rel).read_bytes() == meta.read_bytes(), rel


def test_second_concurrent_run_refused(synth_v21: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    with exclusive_lock(out / "prep/output.lock", f"output {out}"):
        r = run(synth_v21, out)
        assert r.returncode == 2
        assert "in use by another prep run" in r.stderr and f"pid {os.getpid()}" in r.stderr
        with pytest.raises(LockedError), exclusive_lock(out / "prep/output.lock", "again"):
            pass
    assert not (out / "prep/output.lock").exists()


def test_stale_lock_is_taken_over(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started_utc": "then"}))
    with exclusive_lock(lock, "x"):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_bad_inputs_fail_alone(synth_v21: Path, copy_dataset: Callable[[Path, str], Path], tmp_path: Path) -> None:
    src = copy_dataset(synth_v21, "bad")
    vids = "videos/chunk-000/{cam}/episode_{ep:06d}.mp4"
    zero = vids.format(cam="observation.images.cam_high", ep=0)
    trunc = vids.format(cam="observation.images.cam_left_wrist", ep=1)
    (src / zero).write_bytes(b"")
    data = (src / trunc).read_bytes()
    (src / trunc).write_bytes(data[: len(data) // 2])
    lines = (src / "meta/episodes.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    row["length"] = 85
    lines[2] = json.dumps(row)
    (src / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")

    out = tmp_path / "out"
    # By default the source is refused before anything is encoded: verify's table names each file and episode.
    r = run(src, out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REFUSED" in r.stdout and "--accept-invalid-source" in r.stdout
    assert not out.exists()
    table = [ln.split() for ln in r.stdout.splitlines()]
    assert ["error", "0", "cam_high", "readable"] in [row[:4] for row in table]
    assert ["error", "2", "cam_high", "frames_from_packets", "85", "(frames_expected)", "90"] in table
    # Accepted as invalid: each bad input fails alone, the others are done.
    r = run(src, out, 2, "--accept-invalid-source")
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((out / "prep/reencode_report.json").read_text())
    assert report["accepted_invalid_source"] and not report["drop_in"]
    reasons = {f["path"]: f["reason"] for f in report["failures"]}
    assert "zero-byte" in reasons[zero]
    assert trunc in reasons
    for cam in ("cam_high", "cam_left_wrist", "cam_right_wrist"):
        assert "metadata says 85" in reasons[vids.format(cam=f"observation.images.{cam}", ep=2)]
    assert len(reasons) == 5
    assert r.stdout.count("FAILED") == 5
    done = set(videos(out))
    assert len(done) == 4 and zero not in done and trunc not in done
    assert not (out / "meta/info.json").exists()
