"""`--cluster slurm` against a real single-node SLURM (tests/support/slurm.py starts munged, slurmctld and slurmd
for this module and stops them, every job cancelled first, whatever happens). Each case runs the real CLI in
its own session, with the workers as SLURM jobs of 1 core:

- a reencode through 2 jobs equals the local run byte for byte; the job script and the job ids are in
  <out>/prep/slurm/, without the environment;
- a scan: the manifest's totals equal the local scan's; its records in <manifest>.slurm/;
- scancel of one job mid-run: replaced, the run completes, equal;
- scancel of every job: one line naming the jobs and their states (exit 4) after --stall-timeout, and the same
  command run again completes, equal;
- SIGINT, SIGTERM to prep: exit 130/143 and squeue lists none of its jobs;
- jobs pending (a partition that is down) longer than --stall-timeout: the queue note, no failure; the run
  completes once the partition is up;
- a partition that does not exist: one line of sbatch's own error, exit 2, nothing written;
- walltime reached mid-run (the running job's limit cut to 0 with scontrol: SLURM's own TIMEOUT, within
  seconds instead of the minute --slurm-time allows at least): replaced, the run completes, equal;
- a source the workers cannot see (on a tmpfs of prep's own mount namespace): one line naming it, exit 4.

Where SLURM cannot start here (not installed, not root, no cgroup filesystem) the module skips with the reason;
with the packages installed and root, a daemon that does not start is an error, never a skip.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import prep_cmd, run_prep
from support.faults import CAMERAS, final_videos, wait_until
from support.slurm import HOLD_PARTITION, SingleNodeSlurm, single_node_slurm, skip_reason
from test_faults_cluster import one_error_line

from pipeline.synth import SynthSpec, write_synthetic

pytestmark = [pytest.mark.slurm, pytest.mark.cluster, pytest.mark.slow]

BOUND_S = 300  # one prep run at most (a hang fails the test)
SECRET = "prep-test-secret-6f1d2c"  # in prep's environment: must appear in no record
JOB = ("--cluster", "slurm", "--slurm-memory", "1G", "--slurm-time", "00:10:00", "--no-progress")


@pytest.fixture(scope="module")
def slurm() -> Iterator[SingleNodeSlurm]:
    reason = skip_reason()
    if reason:
        pytest.skip(f"no single-node SLURM here: {reason}")
    with single_node_slurm() as cluster:
        cluster.env["PREP_TEST_SECRET"] = SECRET
        yield cluster


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 episodes x 2 cameras x 90 frames (80 files): long enough on 2 cores for a fault to land mid-run."""
    spec = SynthSpec(version="v2.1", episodes=40, frames=90, height=240, width=320, cameras=CAMERAS,
                     reuse_video=True, seed=11)
    return write_synthetic(tmp_path_factory.mktemp("slurm-src") / "v21", spec)


@pytest.fixture(scope="module")
def local(src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The local run's bytes (every file but prep/'s reports), by path."""
    out = tmp_path_factory.mktemp("slurm-local") / "out"
    r = run_prep("reencode", "--src", src, "--dst", "224", "--out", out, "--workers", "2", progress=False,
                 timeout=BOUND_S)
    assert r.returncode == 0, r.stderr[-3000:]
    return digest(out)


def digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.relative_to(out).parts[0] != "prep"}


def run(slurm: SingleNodeSlurm, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(prep_cmd(*args), env=slurm.env, capture_output=True, text=True, timeout=BOUND_S,
                          start_new_session=True)


@contextlib.contextmanager
def started(slurm: SingleNodeSlurm, log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(prep_cmd(*args), env=slurm.env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def finish(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"prep ran past {BOUND_S} s:\n{log.read_text()[-3000:]}") from None
    return rc, log.read_text(errors="replace")


def records(folder: Path) -> dict[str, object]:
    """The one run's jobs.json under `folder` (<out>/prep/slurm, <report>.slurm), with its folder."""
    runs = sorted(folder.glob("*/jobs.json"))
    assert runs, f"no SLURM records in {folder}"
    doc: dict[str, object] = json.loads(runs[-1].read_text())
    doc["folder"] = runs[-1].parent
    return doc


def run_jobs(slurm: SingleNodeSlurm, name: object) -> list[tuple[str, str, str]]:
    return [row for row in slurm.squeue() if row[2] == name]


def freeze(slurm: SingleNodeSlurm, job: str, sig: str = "STOP") -> None:
    """Send SIGSTOP (or SIGCONT) to every process of a job, through SLURM: a frozen worker cannot finish the run
    before the fault a test makes has landed and prep has reported it (on a loaded machine the survivor could
    otherwise finish every file first)."""
    slurm.run("scancel", f"--signal={sig}", "--full", job)


def running_jobs(slurm: SingleNodeSlurm, out: Path) -> list[str]:
    doc = records(out / "prep" / "slurm") if (out / "prep" / "slurm").exists() else {"name": None}
    return [j for j, state, _ in run_jobs(slurm, doc["name"]) if state == "RUNNING"]


def reencode(src: Path, out: Path, *extra: str) -> list[str]:
    return ["reencode", "--src", str(src), "--dst", "224", "--out", str(out), *JOB, *extra]


def check_records(slurm: SingleNodeSlurm, folder: Path) -> dict[str, object]:
    """The job script and jobs.json are there, name no secret; squeue lists none of the run's jobs."""
    doc = records(folder)
    run_folder = doc["folder"]
    assert isinstance(run_folder, Path)
    script = (run_folder / "job.sh").read_text()
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=prep-") and "distributed.cli.dask_worker" in script
    for path in (run_folder / "job.sh", run_folder / "jobs.json"):
        assert SECRET not in path.read_text(), f"{path} holds prep's environment"
    assert not run_jobs(slurm, doc["name"]), f"jobs left in the queue: {slurm.squeue()}"
    return doc


# ---- the cases -----------------------------------------------------------------------------------------------


def test_reencode_through_slurm_jobs_equals_the_local_run(slurm: SingleNodeSlurm, src: Path,
                                                          local: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run(slurm, *reencode(src, out, "--slurm-jobs", "2"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "[engine] slurm: scheduler tcp://" in r.stderr and "in this process, SLURM jobs " in r.stderr, r.stderr
    assert digest(out) == local
    doc = check_records(slurm, out / "prep" / "slurm")
    jobs = doc["jobs"]
    assert isinstance(jobs, list) and len(jobs) == 2 and all(j["worker_connected"] for j in jobs), jobs
    run_folder = doc["folder"]
    assert isinstance(run_folder, Path)
    assert "#SBATCH --time=00:10:00" in (run_folder / "job.sh").read_text()
    assert all((run_folder / f"{j['id']}.out").is_file() for j in jobs)  # each worker's log


def test_scan_through_slurm_keeps_its_records_beside_the_manifest(slurm: SingleNodeSlurm, src: Path,
                                                                  tmp_path: Path) -> None:
    local = tmp_path / "local.json"
    r = subprocess.run(prep_cmd("scan", str(src), "--out", str(local), "--workers", "1", "--no-progress"),
                       capture_output=True, text=True, timeout=BOUND_S)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "m.json"
    r = run(slurm, "scan", str(src), "--out", str(out), "--cluster", "slurm", "--slurm-memory", "1G", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(out.read_text())["totals"] == json.loads(local.read_text())["totals"]
    check_records(slurm, tmp_path / "m.json.slurm")
    assert not (tmp_path / "m.json.parts").exists()


def test_one_worker_job_cancelled_mid_run_is_replaced_and_the_run_completes(
        slurm: SingleNodeSlurm, src: Path, local: dict[str, str], tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "prep.log"
    with started(slurm, log, *reencode(src, out, "--slurm-jobs", "2")) as proc:
        assert wait_until(lambda: len(final_videos(out)) >= 5 and len(running_jobs(slurm, out)) == 2, timeout=BOUND_S,
                          interval=0.2), log.read_text()[-3000:]
        victim, survivor = running_jobs(slurm, out)
        freeze(slurm, survivor)  # the run cannot end before prep has seen the cancel and replaced the job
        slurm.run("scancel", victim)
        seen = wait_until(lambda: f"SLURM job {victim} ended (CANCELLED" in log.read_text(), timeout=BOUND_S,
                          interval=0.2)
        freeze(slurm, survivor, "CONT")
        assert seen, log.read_text()[-3000:]
        rc, text = finish(proc, log)
    assert rc == 0, text[-3000:]
    assert f"[engine] SLURM job {victim} ended (CANCELLED" in text and "submitted job " in text, text[-3000:]
    assert digest(out) == local
    jobs = check_records(slurm, out / "prep" / "slurm")["jobs"]
    assert isinstance(jobs, list) and len(jobs) == 3
    assert [j["replaced_by"] is not None for j in jobs if j["id"] == victim] == [True]


def test_every_worker_job_cancelled_is_one_line_and_the_rerun_completes(
        slurm: SingleNodeSlurm, src: Path, local: dict[str, str], tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "prep.log"
    args = reencode(src, out, "--slurm-jobs", "2", "--stall-timeout", "15")
    with started(slurm, log, *args) as proc:
        assert wait_until(lambda: len(final_videos(out)) >= 5 and len(running_jobs(slurm, out)) == 2, timeout=BOUND_S,
                          interval=0.2), log.read_text()[-3000:]
        victims = running_jobs(slurm, out)
        slurm.run("scancel", *victims)
        rc, text = finish(proc, log)
    line = one_error_line(text, "reencode")
    assert rc == 4, text[-3000:]
    assert "no SLURM job of this run is left (every job of this run was cancelled: not replaced): " in line, line
    assert all(f"{v} CANCELLED" in line for v in victims) and "(--stall-timeout 15)" in line, line
    assert "finished files are kept in" in line
    check_records(slurm, out / "prep" / "slurm")
    r = run(slurm, *args)  # the exact command again
    assert r.returncode == 0, r.stderr[-3000:]
    assert " kept (already complete)" in r.stdout and digest(out) == local


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_prep_interrupted_leaves_no_job_in_the_queue(slurm: SingleNodeSlurm, src: Path, tmp_path: Path,
                                                     sig: signal.Signals, code: int) -> None:
    out, log = tmp_path / "out", tmp_path / "prep.log"
    with started(slurm, log, *reencode(src, out, "--slurm-jobs", "2")) as proc:
        assert wait_until(lambda: len(final_videos(out)) >= 2, timeout=BOUND_S, interval=0.1), log.read_text()[-3000:]
        os.kill(proc.pid, sig)
        rc, text = finish(proc, log)
    assert rc == code, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    doc = check_records(slurm, out / "prep" / "slurm")  # squeue lists none of its jobs at once
    jobs = doc["jobs"]
    assert isinstance(jobs, list) and jobs and all(j["state"] == "CANCELLED" for j in jobs), jobs


def test_jobs_pending_longer_than_the_stall_timeout_are_a_note_not_a_failure(
        slurm: SingleNodeSlurm, src: Path, local: dict[str, str], tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "prep.log"
    note = "no Dask worker yet, waiting for SLURM for "
    try:
        with started(slurm, log, *reencode(src, out, "--slurm-jobs", "2", "--slurm-partition", HOLD_PARTITION,
                                           "--stall-timeout", "5")) as proc:
            assert wait_until(lambda: note in log.read_text(), timeout=BOUND_S, interval=0.2), log.read_text()[-3000:]
            assert proc.poll() is None, log.read_text()[-3000:]  # the first note comes after 10 s: > --stall-timeout 5
            slurm.run("scontrol", "update", f"PartitionName={HOLD_PARTITION}", "State=UP")
            rc, text = finish(proc, log)
    finally:
        slurm.run("scontrol", "update", f"PartitionName={HOLD_PARTITION}", "State=DOWN", check=False)
    assert rc == 0, text[-3000:]
    notes = [n for n in text.splitlines() if note in n]
    assert notes[0].endswith("PENDING (PartitionDown) (jobs in the queue are not a stall)"), notes
    assert digest(out) == local
    check_records(slurm, out / "prep" / "slurm")


def test_partition_that_does_not_exist_is_sbatch_own_line_exit_2(slurm: SingleNodeSlurm, src: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run(slurm, *reencode(src, out, "--slurm-partition", "nope"))
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.splitlines() == ["prep reencode: error: sbatch refused the worker job: invalid partition "
                                     "specified: nope; Batch job submission failed: Invalid partition name "
                                     "specified"], r.stderr
    assert not out.exists() and not slurm.squeue()


def test_walltime_reached_mid_run_is_replaced_and_the_run_completes(
        slurm: SingleNodeSlurm, src: Path, local: dict[str, str], tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "prep.log"
    with started(slurm, log, *reencode(src, out, "--slurm-jobs", "1")) as proc:
        assert wait_until(lambda: len(final_videos(out)) >= 3 and len(running_jobs(slurm, out)) == 1,
                          timeout=BOUND_S, interval=0.2), log.read_text()[-3000:]
        first = running_jobs(slurm, out)[0]
        # frozen, its worker cannot finish the run before slurmctld's next time-limit check (every ~30 s) ends it
        freeze(slurm, first)
        slurm.run("scontrol", "update", f"JobId={first}", "TimeLimit=0")  # its walltime is reached now
        rc, text = finish(proc, log)
    assert rc == 0, text[-3000:]
    assert f"[engine] SLURM job {first} ended (TIMEOUT on " in text, text[-3000:]
    assert digest(out) == local
    jobs = check_records(slurm, out / "prep" / "slurm")["jobs"]
    assert isinstance(jobs, list)
    assert [(j["state"], j["replaced_by"] is not None) for j in jobs if j["id"] == first] == [("TIMEOUT", True)]


def test_source_the_workers_cannot_see_is_one_line(slurm: SingleNodeSlurm, src: Path, tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare (util-linux): cannot give prep a folder the jobs do not see")
    private = tmp_path / "private"
    private.mkdir()
    out = tmp_path / "out"
    # prep runs in a mount namespace of its own with a tmpfs on `private`: a local disk of the login node
    script = (f"mount -t tmpfs none {private} && cp -r {src} {private}/src && exec "
              + " ".join(map(repr, prep_cmd(*reencode(private / "src", out)))))
    r = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", script], env=slurm.env,
                       capture_output=True, text=True, timeout=BOUND_S, start_new_session=True)
    line = one_error_line(r.stderr, "reencode")
    assert r.returncode == 4, r.stderr[-3000:]
    assert f"cannot see {private / 'src'}, a path of this machine: the workers need the same paths" in line, line
    assert "(slurm-" in line, line
    check_records(slurm, out / "prep" / "slurm")
