"""Bad command-line values and odd files, through the real CLI: each bad value is refused with one line naming
it (exit 2, before anything is read or written); `--workers` above the cores is capped with a note; FIFOs in a
dataset never block a worker and never give a traceback; a video without frames gets no made-up frame rate."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from support.faults import (
    check_source,
    copy_tree,
    corpus,
    prep,
    reencode_args,
    scenario,
    short_paths,
    snapshot,
)

from pipeline.runner import machine_cores

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

CAM = "observation.images.cam_high"
BAD_VALUES = [
    ("retries-negative", ["scan", "{src}", "--retries", "-1"], "scan",
     "argument --retries: expected an integer >= 0, got '-1'"),
    ("dst-full-width", ["reencode", "--src", "{src}", "--dst", "\uff18", "--out", "{tmp}/o"], "reencode",
     "--dst '\uff18': expected a size like 224 or 320x240"),
    ("workers-full-width", ["scan", "{src}", "--workers", "\uff12"], "scan",
     "argument --workers: expected a positive integer, got '\uff12'"),
    ("size-full-width", ["verify", "{src}", "--size", "\uff12\uff12\uff14x224"], "verify",
     "argument --size: expected WIDTHxHEIGHT or one size, e.g. 224x224 or 224, got '\uff12\uff12\uff14x224'"),
    ("src-empty", ["reencode", "--src", "", "--dst", "224", "--out", "{tmp}/o"], "reencode",
     "argument --src: expected a dataset folder, got '' (use . for the current folder)"),
    ("scan-src-empty", ["scan", ""], "scan", "argument DATASET: expected a dataset folder, hub repo id or URL, got ''"),
    ("memory-limit-bad", ["scan", "{src}", "--memory-limit", "lots"], "scan",
     "argument --memory-limit: expected auto, 0 or a size such as 4GiB, got 'lots'"),
    ("workers-zero", ["verify", "{src}", "--workers", "0"], "verify",
     "argument --workers: expected a positive integer, got '0'"),
]


@pytest.mark.parametrize(("case", "args", "command", "message"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_bad_value_refused(case: str, args: list[str], command: str, message: str, tmp_path: Path) -> None:
    src = corpus("v21")
    argv = [a.format(src=src, tmp=tmp_path) for a in args]
    shown = " ".join(a if a else "''" for a in args[2 if args[0] == "reencode" else 1:]).replace("{src}", "SRC")
    with scenario(f"CLI value: {args[0]} {shown}", f"exit 2, one line '{message[:60]}'", bad_input=True) as row:
        r = prep(*argv, cwd=tmp_path)
        text = r.stdout + r.stderr
        assert "Traceback" not in text, text
        assert r.returncode == 2, text
        last = r.stderr.strip().splitlines()[-1]
        assert last == f"prep {command}: error: {message}" or (
            message in last and last.startswith(f"prep {command}")), last
        assert list(tmp_path.iterdir()) == [], "something was written for a refused command line"
        row.observed = f"exit 2: {short_paths(last)[:150]}"


def test_workers_above_the_cores_are_capped(tmp_path: Path) -> None:
    src = corpus("v21")
    cores = machine_cores()
    with scenario("reencode --workers 1000", f"a note, then {cores} workers (the cores); exit 0") as row:
        r = prep(*reencode_args(src, tmp_path / "out", workers=1000))
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
        note = (f"prep reencode: note: --workers 1000 is more than this machine's {cores} cores: using {cores} "
                "workers (one single-threaded worker per core)")
        assert note in r.stderr.splitlines(), r.stderr
        engine = [line for line in r.stderr.splitlines() if line.startswith("[engine]")]
        assert engine and f", {cores} workers," in engine[0] and "memory limit" in engine[0], engine
        row.observed = f"'{note.split('note: ', 1)[1]}'; {engine[0].split(', dashboard')[0]}; exit 0"


def test_fifos_in_a_dataset(tmp_path: Path) -> None:
    """A FIFO in the root (beside meta/) and one where episode 1's parquet belongs: nothing opens either (a
    read would block the worker forever); the parquet one fails its episode as 'not a regular file'."""
    src = copy_tree(corpus("v21"), tmp_path / "src")
    os.mkfifo(src / "pipe")
    parquet = src / "data/chunk-000/episode_000001.parquet"
    parquet.unlink()
    os.mkfifo(parquet)
    before = snapshot(src)
    with scenario("FIFOs in the dataset: one in the root, one as episode 1's parquet",
                  "scan, verify, reencode: no hang, no traceback; episode 1 'parquet file is not a regular file "
                  "(a FIFO (named pipe))', exit 1 (reencode refuses the source up front; with "
                  "--accept-invalid-source that episode fails alone); the root FIFO is ignored", bad_input=True) as row:
        why = "parquet file is not a regular file (a FIFO (named pipe))"
        v = prep("verify", str(src), "--workers", "1", "--no-progress", timeout=240)
        assert "Traceback" not in v.stdout + v.stderr and v.returncode == 1, v.stdout + v.stderr
        assert why in v.stdout and "missing" not in v.stdout, v.stdout
        s = prep("scan", str(src), "--out", str(tmp_path / "m.json"), "--workers", "1", "--no-progress", timeout=240)
        assert "Traceback" not in s.stdout + s.stderr and s.returncode == 1 and why in s.stdout, s.stdout + s.stderr
        refused = prep(*reencode_args(src, tmp_path / "out"), timeout=240)  # verify's checks first: refused
        text = refused.stdout + refused.stderr
        assert "Traceback" not in text and refused.returncode == 1 and "REFUSED" in text, text
        assert why in refused.stdout and "parquet_readable" in refused.stdout, refused.stdout
        assert not (tmp_path / "out/meta").exists()
        r = prep(*reencode_args(src, tmp_path / "out"), "--accept-invalid-source", timeout=240)
        assert "Traceback" not in r.stdout + r.stderr and r.returncode == 1, r.stdout + r.stderr
        failed = [line for line in r.stdout.splitlines() if line.startswith("FAILED")]
        assert len(failed) == 1 and why in failed[0] and "episode 1" in failed[0], r.stdout
        assert not (tmp_path / "out/pipe").exists()
        check_source(row, before, src)
        row.observed = f"verify/scan/reencode exit 1: {short_paths(failed[0])[:140]}"


def test_a_video_without_frames_has_no_fps_check(tmp_path: Path) -> None:
    """A container whose stream has no packet: its header rate is 1/time_base (15360 for mp4 at 30 fps); the
    check reports the frame counts, not 'fps 15360'."""
    from pipeline.video.checks import Span, VideoExpect, inspect_probe
    from pipeline.video.probe import probe_video

    real = probe_video(corpus("v21") / f"videos/chunk-000/{CAM}/episode_000001.mp4")
    empty = dataclasses.replace(real, pts_s=(), keyframe_pts_s=(), packet_bytes=(), frames_from_packets=0,
                                fps=15360.0)
    with scenario("verify: a video without frames", "no fps failure with the header's 15360; the frame counts "
                  "fail", bad_input=True) as row:
        check = inspect_probe(empty, VideoExpect(fps=30.0), [Span(1, 0.0, None, 30)], camera=CAM)
        checks = sorted({f.check for f in check.failures})
        assert "fps" not in checks, [f for f in check.failures if f.check == "fps"]
        assert checks, "a file without frames passed"
        row.observed = f"failures: {', '.join(checks)}; no fps check"
