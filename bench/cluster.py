"""`prep reencode --cluster slurm` on a single-node SLURM (tests/support/slurm.py starts it: Debian's slurm-wlm and
munge, as root), side by side with the same run on the LocalCluster, and the fault table.

Runs (a synthetic corpus, pipeline.synth, 240x320 -> 224, every job 1 core and 1 GB):

- speed: LocalCluster `--workers 1` and `--workers 2`, SLURM `--slurm-jobs 1` and `--slurm-jobs 2`: wall time of the
  whole command, the encode time and rate it prints, and each SLURM job's start latency (sbatch to its Dask worker
  registered with the scheduler: the submission time from jobs.json, the registration from the worker's log);
- faults (each on a 2-job run unless said): one job scancelled mid-run; every job scancelled (then the same
  command again); walltime reached (`--slurm-time 00:01:00`, one job, a corpus that needs several minutes of it:
  SLURM's own TIMEOUT, as many times as it takes); prep interrupted (SIGINT); jobs pending (a partition that is
  DOWN for 45 s with `--stall-timeout 10`, then up). Each row: exit code, the engine's notes and error line,
  whether the output equals the local run byte for byte (prep/'s reports aside), jobs left in squeue.

Prints two tables; writes bench/results/cluster.json (paths masked, bench/masking.py).

    sudo python bench/cluster.py [--episodes 40] [--walltime-episodes 240] [--skip-walltime] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from masking import masked  # noqa: E402
from support.slurm import HOLD_PARTITION, SingleNodeSlurm, single_node_slurm, skip_reason  # noqa: E402

from pipeline import __version__, atomic  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

CAMERAS = ("observation.images.cam_high", "observation.images.cam_wrist")
JOB = ("--cluster", "slurm", "--slurm-memory", "1G", "--no-progress")
BOUND_S = 1800


def corpus(root: Path, episodes: int) -> Path:
    spec = SynthSpec(version="v2.1", episodes=episodes, frames=90, height=240, width=320, cameras=CAMERAS,
                     reuse_video=True, seed=11)
    return write_synthetic(root / f"src-{episodes}", spec)


def digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.relative_to(out).parts[0] != "prep"}


def prep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", *args]


class Run:
    """One prep run in its own session; its output kept."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(prep_cmd(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True, cwd=REPO)
        self.out = self.err = ""
        self.seconds = 0.0

    def wait(self) -> int:
        try:
            self.out, self.err = self.proc.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.out, self.err = self.proc.communicate()
        self.seconds = time.monotonic() - self.t0
        return self.proc.returncode


def encode_line(stdout: str) -> tuple[float | None, float | None]:
    """(encode seconds, frames/s) from `frames ... (N encoded in S s, R frames/s)`."""
    m = re.search(r"encoded in ([\d.]+) s, ([\d,]+) frames/s", stdout)
    return (float(m.group(1)), float(m.group(2).replace(",", ""))) if m else (None, None)


def jobs_of(out: Path) -> tuple[dict[str, Any], Path]:
    found = sorted((out / "prep" / "slurm").glob("*/jobs.json"))
    return (json.loads(found[-1].read_text()), found[-1].parent) if found else ({}, out)


def start_latencies(out: Path) -> list[float]:
    """Per job: sbatch (jobs.json, ms) to its worker's 'Registered to' line (its log, local time, ms)."""
    doc, folder = jobs_of(out)
    found = []
    for job in doc.get("jobs", []):
        registered = registered_at(folder / f"{job['id']}.out")
        if registered is None:
            continue
        submitted = dt.datetime.fromisoformat(job["submitted_utc"].replace("Z", "+00:00"))
        found.append(round((registered - submitted).total_seconds(), 2))
    return found


def replacement_gaps(out: Path) -> list[float]:
    """Per replaced job: SLURM's end of the job (scontrol EndTime, local time) to its replacement's worker registered
    (its log): the time the run had one worker fewer."""
    doc, folder = jobs_of(out)
    by_id = {j["id"]: j for j in doc.get("jobs", [])}
    gaps = []
    for job in by_id.values():
        new = by_id.get(job.get("replaced_by") or "")
        if not new or not job.get("end_time"):
            continue
        registered = registered_at(folder / f"{new['id']}.out")
        if registered is None:
            continue
        ended = dt.datetime.strptime(job["end_time"], "%Y-%m-%dT%H:%M:%S").astimezone(dt.UTC)
        gaps.append(round((registered - ended).total_seconds(), 1))
    return gaps


def registered_at(log: Path) -> dt.datetime | None:
    text = log.read_text(errors="replace") if log.exists() else ""
    m = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - distributed.worker - INFO -\s+Registered to:",
                  text, re.M)
    return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone(dt.UTC) if m else None


def left_in_queue(slurm: SingleNodeSlurm, out: Path) -> int:
    doc, _ = jobs_of(out)
    return sum(1 for _, _, name in slurm.squeue() if name == doc.get("name"))


def engine_lines(run: Run) -> list[str]:
    return [line for line in run.err.splitlines() if line.startswith(("[engine] SLURM", "[engine] every SLURM",
                                                                      f"prep {run.args[0]}: error:"))
            or "no Dask worker yet, waiting for SLURM" in line]


def wait_for(cond: Any, timeout: float = 600) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def videos(out: Path) -> int:
    return sum(1 for p in out.rglob("*.mp4") if ".part-" not in p.name) if out.exists() else 0


def running(slurm: SingleNodeSlurm, out: Path) -> list[str]:
    doc, _ = jobs_of(out) if (out / "prep" / "slurm").exists() else ({}, out)
    return [j for j, state, name in slurm.squeue() if name == doc.get("name") and state == "RUNNING"]


# ---- speed ---------------------------------------------------------------------------------------------------


def speed_rows(slurm: SingleNodeSlurm, src: Path, work: Path, reference: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for label, extra in (("LocalCluster --workers 1", ("--workers", "1", "--no-progress")),
                         ("LocalCluster --workers 2", ("--workers", "2", "--no-progress")),
                         ("SLURM --slurm-jobs 1", (*JOB, "--slurm-jobs", "1")),
                         ("SLURM --slurm-jobs 2", (*JOB, "--slurm-jobs", "2"))):
        out = work / re.sub(r"\W+", "-", label)
        run = Run(slurm.env, "reencode", "--src", str(src), "--dst", "224", "--out", str(out), *extra)
        rc = run.wait()
        seconds, rate = encode_line(run.out)
        rows.append({"run": label, "exit": rc, "wall_s": round(run.seconds, 1), "encode_s": seconds,
                     "frames_per_s": rate, "job_start_latency_s": start_latencies(out) if "SLURM" in label else [],
                     "equal_to_local": digest(out) == reference, "jobs_left_in_squeue": left_in_queue(slurm, out)})
        print(f"  {label:<26} exit {rc}  wall {run.seconds:6.1f} s  encode {seconds} s  {rate} frames/s  "
              f"start latency {rows[-1]['job_start_latency_s']}", flush=True)
    return rows


# ---- faults --------------------------------------------------------------------------------------------------


def fault(slurm: SingleNodeSlurm, name: str, src: Path, out: Path, reference: dict[str, str], *extra: str,
          act: Any = None, rerun: bool = False) -> dict[str, Any]:
    args = ("reencode", "--src", str(src), "--dst", "224", "--out", str(out), *JOB, *extra)
    run = Run(slurm.env, *args)
    did = act(run) if act is not None else ""
    rc = run.wait()
    row: dict[str, Any] = {"case": name, "action": did, "exit": rc, "seconds": round(run.seconds, 1),
                           "lines": engine_lines(run), "jobs_left_in_squeue": left_in_queue(slurm, out)}
    doc, _ = jobs_of(out)
    row["jobs"] = [f"{j['id']} {j['state']}" + (f" -> {j['replaced_by']}" if j.get("replaced_by") else "")
                   for j in doc.get("jobs", [])]
    if rerun:
        again = Run(slurm.env, *args)
        row["rerun_exit"] = again.wait()
        row["rerun_seconds"] = round(again.seconds, 1)
        row["rerun_jobs_left_in_squeue"] = left_in_queue(slurm, out)
    row["replacement_gap_s"] = replacement_gaps(out)
    row["equal_to_local"] = (out / "meta" / "info.json").exists() and digest(out) == reference
    print(f"  {name:<24} exit {rc}{' (rerun ' + str(row['rerun_exit']) + ')' if rerun else ''}  "
          f"{run.seconds:6.1f} s  equal {row['equal_to_local']}  left {row['jobs_left_in_squeue']}  jobs "
          f"{', '.join(row['jobs'])}", flush=True)
    return row


def fault_rows(slurm: SingleNodeSlurm, src: Path, big: Path | None, work: Path, reference: dict[str, str],
               big_reference: dict[str, str] | None) -> list[dict[str, Any]]:
    rows = []

    def once_running(n: int, out: Path, files: int = 5) -> None:
        wait_for(lambda: videos(out) >= files and len(running(slurm, out)) >= n)

    def cancel_one(run: Run) -> str:
        out = Path(run.args[run.args.index("--out") + 1])
        once_running(2, out)
        victim = running(slurm, out)[0]
        slurm.run("scancel", victim)
        return f"scancel {victim} with {videos(out)} of the videos written"

    def cancel_all(run: Run) -> str:
        out = Path(run.args[run.args.index("--out") + 1])
        once_running(2, out)
        ids = running(slurm, out)
        slurm.run("scancel", *ids)
        return f"scancel {' '.join(ids)} with {videos(out)} of the videos written"

    def interrupt(run: Run) -> str:
        out = Path(run.args[run.args.index("--out") + 1])
        once_running(1, out, files=2)
        os.kill(run.proc.pid, signal.SIGINT)
        return f"SIGINT to prep with {videos(out)} of the videos written"

    def pending(run: Run) -> str:
        time.sleep(45)
        slurm.run("scontrol", "update", f"PartitionName={HOLD_PARTITION}", "State=UP")
        return f"partition {HOLD_PARTITION} DOWN for 45 s (--stall-timeout 10), then UP"

    rows.append(fault(slurm, "one job cancelled", src, work / "f-one", reference, "--slurm-jobs", "2", act=cancel_one))
    rows.append(fault(slurm, "all jobs cancelled", src, work / "f-all", reference, "--slurm-jobs", "2",
                      "--stall-timeout", "20", act=cancel_all, rerun=True))
    if big is not None and big_reference is not None:
        rows.append(fault(slurm, "walltime reached", big, work / "f-walltime", big_reference, "--slurm-jobs", "1",
                          "--slurm-time", "00:01:00", act=lambda run: "--slurm-time 00:01:00, one job"))
    rows.append(fault(slurm, "prep interrupted", src, work / "f-sigint", reference, "--slurm-jobs", "2",
                      act=interrupt, rerun=True))
    try:
        rows.append(fault(slurm, "jobs pending", src, work / "f-pending", reference, "--slurm-jobs", "2",
                          "--slurm-partition", HOLD_PARTITION, "--stall-timeout", "10", act=pending))
    finally:
        slurm.run("scontrol", "update", f"PartitionName={HOLD_PARTITION}", "State=DOWN", check=False)
    return rows


def local_reference(src: Path, out: Path) -> dict[str, str]:
    r = subprocess.run(prep_cmd("reencode", "--src", str(src), "--dst", "224", "--out", str(out), "--workers", "2",
                                "--no-progress"), capture_output=True, text=True, cwd=REPO, timeout=BOUND_S)
    if r.returncode != 0:
        raise SystemExit(f"the local reference run failed:\n{r.stderr[-2000:]}")
    return digest(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=40, help="episodes of the corpus (2 cameras x 90 frames each)")
    ap.add_argument("--walltime-episodes", type=int, default=240,
                    help="episodes of the walltime row's corpus (it must outlast --slurm-time 00:01:00 on one core)")
    ap.add_argument("--skip-walltime", action="store_true", help="leave out the walltime row (several minutes)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/cluster.json")
    args = ap.parse_args(argv)
    # a `cmd &` of a script starts this with SIGINT ignored, and prep would inherit that: the interrupt row
    # needs prep's own Ctrl-C handling (tests/conftest.py does the same for the tests)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    reason = skip_reason()
    if reason:
        print(f"bench/cluster.py: cannot start a single-node SLURM here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="prep-bench-cluster-") as tmp, single_node_slurm() as slurm:
        work = Path(tmp)
        src = corpus(work, args.episodes)
        reference = local_reference(src, work / "reference")
        big = None if args.skip_walltime else corpus(work, args.walltime_episodes)
        big_reference = None if big is None else local_reference(big, work / "reference-big")
        frames = args.episodes * 90 * len(CAMERAS)
        print(f"corpus: {args.episodes} episodes x {len(CAMERAS)} cameras x 90 frames = {frames:,} camera frames, "
              f"240x320 -> 224; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("speed (same machine: the SLURM jobs and the LocalCluster run on its 2 cores)")
        speed = speed_rows(slurm, src, work, reference)
        print("faults")
        faults = fault_rows(slurm, src, big, work, reference, big_reference)
        result = {
            "schema": "prep.bench.cluster/1", "prep_version": __version__,
            "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cores": os.cpu_count(), "load_average_end": list(os.getloadavg()),
                        "slurm": slurm.run("sinfo", "--version", check=False).stdout.strip()},
            "corpus": {"episodes": args.episodes, "cameras": len(CAMERAS), "frames_per_episode": 90,
                       "size": "240x320", "walltime_episodes": None if big is None else args.walltime_episodes},
            "speed": speed, "faults": faults,
        }
    print()
    print(f"{'run':<26} {'exit':>4} {'wall s':>7} {'encode s':>8} {'frames/s':>8}  job start latency (s)  equal")
    for r in speed:
        print(f"{r['run']:<26} {r['exit']:>4} {r['wall_s']:>7} {r['encode_s'] or '-':>8} {r['frames_per_s'] or '-':>8}"
              f"  {', '.join(map(str, r['job_start_latency_s'])) or '-':<21}  {r['equal_to_local']}")
    print()
    print(f"{'fault':<20} {'exit':>4} {'rerun':>5} {'s':>6}  equal  left  gap s  jobs")
    for r in faults:
        print(f"{r['case']:<20} {r['exit']:>4} {r.get('rerun_exit', '-')!s:>5} {r['seconds']:>6}  "
              f"{r['equal_to_local']!s:<5}  {r['jobs_left_in_squeue']:>4}  "
              f"{','.join(map(str, r['replacement_gap_s'])) or '-':<5}  {', '.join(r['jobs'])}")
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
