"""Shared helpers of the fault-injection suite (tests/test_faults_*.py, bench/faults.py).

- `prep(...)` / `start_prep(...)`: the real CLI as a subprocess in its own session, so that
  `kill_group` can SIGKILL it together with its LocalCluster worker processes, and
  `group_members` can prove none of them survived (no orphaned workers);
- `snapshot` / `changed` (support.trees): every file, folder and symlink under a root with its bytes
  (sha256), size, mode and mtime, to prove a source tree was not touched;
- `corpus` / `baseline`: small synthetic datasets built once per process, and the output of one
  uninterrupted `prep reencode` of each, the reference every interrupted run must equal;
- `output_digest` / `digest_diff`: an output compared by decoded frames (videos) and bytes
  (everything else), `prep/` excluded (reports hold timings);
- `tmpfs` (support.tmpfs): a small tmpfs mounted for a disk-full scenario (skips where mounting is not allowed);
- `scenario(...)`: records one row of the scenario table (scenario, expected, observed, pass,
  files lost, sources modified; optionally the command, its exit code, whether it printed a traceback,
  writes outside the allowed paths and temp files left) to the JSON-lines file named by $PREP_FAULTS_RECORD, which
  bench/faults.py reads; `known_bug(...)` raises `KnownBug`, the only failure an
  `xfail(raises=KnownBug, strict=True)` marker accepts, so every other assertion still counts.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av

from pipeline.atomic import TEMP_MARK
from pipeline.synth import SynthSpec, write_synthetic
from support.cli import child_env, prep_cmd
from support.media import frame_hashes
from support.trees import Snapshot, changed, sha256, snapshot

RECORD_ENV = "PREP_FAULTS_RECORD"
CAMERAS = ("observation.images.cam_high", "observation.images.cam_wrist")
# Small corpora: 240x320 sources (so `pad` really resizes: 224x168 + bars), 30-frame episodes.
CORPORA: dict[str, SynthSpec] = {
    "v21": SynthSpec(version="v2.1", episodes=4, frames=30, height=240, width=320, cameras=CAMERAS, seed=6),
    "v30": SynthSpec(version="v3.0", episodes=4, frames=30, height=240, width=320, cameras=CAMERAS,
                     episodes_per_file=2, seed=7),
}
PREP_TIMEOUT_S = 300


class KnownBug(AssertionError):
    """A failure that exposes a known pipeline bug (the tests that raise it are xfail(strict))."""


def known_bug(ok: bool, message: str) -> None:
    if not ok:
        raise KnownBug(message)


# ---- a process-wide scratch folder -----------------------------------------------------------------


@functools.cache
def scratch() -> Path:
    path = Path(tempfile.mkdtemp(prefix="prep-faults-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# ---- running prep --------------------------------------------------------------------------------


def prep(*args: str, cwd: Path | None = None, timeout: float = PREP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run `prep ARGS` to completion in its own session; afterwards no process of it may be left."""
    p = subprocess.Popen(prep_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                         env=child_env(), start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        raise AssertionError(f"prep {' '.join(args)} ran past {timeout} s\n{out}\n{err}") from None
    left = wait_group_gone(p.pid)
    note_tracebacks(args, out + err)
    assert not left, f"prep {args[0]} exited but left processes of its group running: {left}"
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def note_tracebacks(args: tuple[str, ...] | list[str], text: str) -> None:
    """Count a Python traceback in a prep run's output (bench/faults.py prints the total: it must be 0), in
    the file beside $PREP_FAULTS_RECORD."""
    path = os.environ.get(RECORD_ENV)
    if path and "Traceback (most recent call last)" in text:
        with open(path + ".tracebacks", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"args": [str(a) for a in args], "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                                 "text": text[-3000:]}) + "\n")


def reencode_args(src: Path, out: Path, *extra: str, workers: int = 1) -> list[str]:
    return ["reencode", "--src", str(src), "--dst", "224", "--out", str(out), "--workers", str(workers),
            "--no-progress", *extra]


@dataclass
class Running:
    """A `prep` started in the background (its own session: pid == process group id)."""

    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait(self, timeout: float = PREP_TIMEOUT_S) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
            note_tracebacks(list(map(str, self.proc.args))[3:] if isinstance(self.proc.args, list) else [],
                            self.output())
            return code
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            raise AssertionError(f"prep ran past {timeout} s\n{self.output()}") from None


def start_prep(*args: str, log: Path) -> Running:
    proc = subprocess.Popen(prep_cmd(*args), stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env=child_env(), start_new_session=True)
    return Running(proc, log)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process and every process of its group (LocalCluster nannies and workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid`, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def open_files(pgid: int, under: Path, mark: str = TEMP_MARK) -> list[str]:
    """Files under `under` whose name holds `mark` that a process of group `pgid` has open now."""
    found = []
    prefix = str(under)
    for pid in group_members(pgid):
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(prefix) and mark in target:
                found.append(target)
    return found


def wait_group_gone(pgid: int, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_until(cond: Callable[[], bool], timeout: float, proc: Running | None = None, interval: float = 0.002) -> bool:
    """Poll `cond` until true; False on timeout or when `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc is not None and proc.proc.poll() is not None:
            return cond()
        time.sleep(interval)
    return False


def proc_state(pid: int) -> str:
    """The process state letter from /proc (R, S, D, T = stopped, Z, ...); '' when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text[text.rindex(")") + 2 :].split()[0]


def stop_group(pgid: int, timeout: float = 2.0) -> None:
    """SIGSTOP the group and wait until its leader is stopped (its files frozen as they are)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while proc_state(pgid) not in ("T", "t", "Z", "") and time.monotonic() < deadline:
        time.sleep(0.0001)


def step_until(run: Running, cond: Callable[[], bool], *, timeout: float = 120.0, burst_s: float = 0.0005) -> bool:
    """Run the group in short bursts between SIGSTOPs, checking `cond` while it is frozen: catches
    a state that lasts only milliseconds (e.g. the metadata being written). True: `cond` holds and
    the group is left stopped (SIGKILL it next); False: the run ended (or timed out) first."""
    deadline = time.monotonic() + timeout
    stop_group(run.pid)
    while time.monotonic() < deadline:
        if cond():
            return True
        if run.proc.poll() is not None or proc_state(run.pid) in ("Z", ""):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGCONT)
        time.sleep(burst_s)
        stop_group(run.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGCONT)
    return False


# ---- corpora and the uninterrupted reference -------------------------------------------------------


@functools.cache
def corpus(name: str) -> Path:
    """A small synthetic dataset (read-only by convention: `copy_tree` it before changing it)."""
    return write_synthetic(scratch() / "corpora" / name, CORPORA[name])


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


BASELINE_SECONDS: dict[str, float] = {}


@functools.cache
def baseline(name: str, engine: str = "pyav") -> Path:
    """The output of one uninterrupted `prep reencode` of `corpus(name)` with `engine` (the
    reference); its wall time (process start to exit, one worker) goes to BASELINE_SECONDS."""
    src = corpus(name)
    out = scratch() / "baselines" / f"{name}_{engine}_224"
    t0 = time.monotonic()
    r = prep(*reencode_args(src, out, "--engine", engine, workers=1))
    BASELINE_SECONDS[f"{name}/{engine}"] = time.monotonic() - t0
    assert r.returncode == 0, f"baseline reencode of {name} ({engine}) failed:\n{r.stdout}\n{r.stderr}"
    return out


@functools.cache
def baseline_digest(name: str, engine: str = "pyav") -> dict[str, tuple[str, Any]]:
    return output_digest(baseline(name, engine))


def dataset_files(root: Path) -> list[str]:
    """Relative paths of the files of an output, prep's own `prep/` folder and temp files excluded
    (temp files are checked on their own: `temp_files`)."""
    files = []
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if rel.split("/", 1)[0] == "prep" or TEMP_MARK in p.name or not p.is_file():
            continue
        files.append(rel)
    return sorted(files)


def file_digest(path: Path) -> tuple[str, Any]:
    if path.suffix == ".mp4" and TEMP_MARK not in path.name:
        try:
            return ("frames", frame_hashes(path))
        except (av.FFmpegError, OSError, ValueError) as exc:
            return ("undecodable", f"{type(exc).__name__}: {exc}")
    return ("bytes", sha256(path))


def output_digest(root: Path) -> dict[str, tuple[str, Any]]:
    """Videos by their decoded frames, every other file by its bytes; `prep/` excluded."""
    return {rel: file_digest(root / rel) for rel in dataset_files(root)}


def digest_diff(reference: dict[str, tuple[str, Any]], got: dict[str, tuple[str, Any]]) -> dict[str, list[str]]:
    """missing: in the reference, not in the output; extra: the reverse; different: both, unequal."""
    return {
        "missing": sorted(reference.keys() - got.keys()),
        "extra": sorted(got.keys() - reference.keys()),
        "different": sorted(k for k in reference.keys() & got.keys() if reference[k] != got[k]),
    }


def unsound_final_files(reference: dict[str, tuple[str, Any]], out: Path) -> list[str]:
    """Files under their final name in `out` that are not exactly the reference's (frames or bytes):
    what a crash or a full disk must never leave behind. Temp files are not final names."""
    bad = []
    for rel in dataset_files(out):
        if rel not in reference or file_digest(out / rel) != reference[rel]:
            bad.append(rel)
    return bad


def temp_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(f"*{TEMP_MARK}*")) if root.exists() else []


def final_videos(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.mp4") if TEMP_MARK not in p.name)


def count_line(stdout: str) -> dict[str, int]:
    """`files     8: 3 encoded, 5 kept (already complete), 0 failed` -> counts."""
    for line in stdout.splitlines():
        if line.startswith("files "):
            head, _, rest = line.partition(":")
            counts = {"files": int(head.split()[1].replace(",", ""))}
            for part in rest.split(","):
                words = part.split()
                if len(words) >= 2 and words[0].replace(",", "").isdigit():
                    counts[words[1]] = int(words[0].replace(",", ""))
            return counts
    return {}


# ---- the scenario table --------------------------------------------------------------------------


@dataclass
class Row:
    """One row of the scenario table. The fields after `details` are optional (None: not measured) and
    are shown as columns by bench/faults.py: the prep command run, its exit code, whether its output held a
    Python traceback, how many paths outside the allowed ones were written, and how many temp files it left."""

    scenario: str
    expected: str
    observed: str = ""
    bad_input: bool = False
    files_lost: int = 0
    sources_modified: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    exit: int | None = None
    traceback: bool | None = None
    outside_writes: int | None = None
    temps_left: int | None = None


@contextlib.contextmanager
def scenario(name: str, expected: str, *, bad_input: bool = False) -> Iterator[Row]:
    """Record one row of the scenario table whatever happens (pass = the block raised nothing)."""
    row = Row(name, expected, bad_input=bad_input)
    t0 = time.monotonic()
    error: BaseException | None = None
    try:
        yield row
    except BaseException as exc:
        error = exc
        raise
    finally:
        status = "pass" if error is None else ("known bug" if isinstance(error, KnownBug) else "FAIL")
        if error is not None and not isinstance(error, KeyboardInterrupt):
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            label = "BUG" if isinstance(error, KnownBug) else "FAIL"
            row.observed = (row.observed + "; " if row.observed else "") + f"{label}: {first[:300]}"
        _record({
            "scenario": row.scenario, "expected": row.expected, "observed": row.observed, "status": status,
            "pass": error is None, "bad_input": row.bad_input, "files_lost": row.files_lost,
            "sources_modified": row.sources_modified, "seconds": round(time.monotonic() - t0, 2),
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0], "details": row.details,
            "command": row.command, "exit": row.exit, "traceback": row.traceback,
            "outside_writes": row.outside_writes, "temps_left": row.temps_left,
        })


TMP_PATH_RE = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s'\"]+")


def short_paths(text: str) -> str:
    """Scratch paths shortened for the table: <tmp>/... (a test's folder), <corpora>/..."""
    return TMP_PATH_RE.sub("<tmp>", text.replace(str(scratch()), "<scratch>"))


def _record(obj: dict[str, Any]) -> None:
    obj["observed"] = short_paths(obj["observed"])
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(obj, default=str) + "\n")


def check_source(row: Row, before: Snapshot, root: Path) -> None:
    """Record and assert: the source tree is exactly as before (bytes, mtimes, entries)."""
    diff = changed(before, snapshot(root))
    row.sources_modified = len(diff)
    assert not diff, f"source tree changed: {diff[:5]}"
