"""pipeline/slurm.py without a SLURM: the job script, sbatch's error as one line, and the job controller's policy
(replace an ended job; every job cancelled is the operator's word; a completing job waits for its final state;
three failed starts in a row stop the replacements; cancel_all by ids and name) against a scripted fake of
sbatch/squeue/scontrol/scancel; and the `--cluster slurm` options with their TOML profile. The same behaviour
on a real single-node SLURM: tests/test_slurm.py."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from pipeline.commands.common import add_run_options, run_config, slurm_spec
from pipeline.errors import PrepError
from pipeline.slurm import (
    MAX_FAILED_STARTS,
    JobController,
    SlurmError,
    SlurmSpec,
    job_of_worker,
    render_script,
    sbatch_error,
)


class FakeSlurm:
    """sbatch/squeue/scontrol/scancel as a table of jobs the test sets states in."""

    def __init__(self) -> None:
        self.next_id = 100
        self.queue: dict[str, str] = {}  # id -> squeue state (PENDING, RUNNING, COMPLETING)
        self.final: dict[str, str] = {}  # id -> scontrol JobState once it left the queue
        self.calls: list[list[str]] = []
        self.scripts: list[str] = []
        self.refuse: str | None = None

    def __call__(self, cmd: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd)
        name = cmd[0]
        if name == "sbatch":
            if self.refuse:
                return subprocess.CompletedProcess(cmd, 1, "", self.refuse)
            self.scripts.append(stdin or "")
            job = str(self.next_id)
            self.next_id += 1
            self.queue[job] = "PENDING"
            return subprocess.CompletedProcess(cmd, 0, f"{job}\n", "")
        if name == "squeue":
            rows = [f"{j}|{s}|{'Resources' if s == 'PENDING' else 'None'}|{'' if s == 'PENDING' else 'n1'}|0:05"
                    for j, s in self.queue.items()]
            return subprocess.CompletedProcess(cmd, 0, "\n".join(rows) + "\n", "")
        if name == "scontrol":
            job = cmd[-1]
            state = self.queue.get(job) if self.queue.get(job) != "COMPLETING" else None
            state = state or self.final.get(job, "COMPLETING")
            return subprocess.CompletedProcess(cmd, 0, f"JobId={job} JobState={state} Reason=None NodeList=n1 "
                                               "RunTime=00:01:00 ExitCode=0:0\n", "")
        if name == "scancel":  # as SLURM does: the filters (--name, every job here has the run's) AND the ids
            ids = [a for a in cmd[1:] if not a.startswith("--")]
            for job in ids or ([*self.queue] if any(a.startswith("--name=") for a in cmd) else []):
                if job in self.queue:
                    del self.queue[job]
                    self.final[job] = "CANCELLED"
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise AssertionError(cmd)

    def end(self, job: str, state: str) -> None:
        self.queue.pop(job, None)
        self.final[job] = state


def controller(tmp_path: Path, fake: FakeSlurm, jobs: int = 2) -> JobController:
    spec = SlurmSpec(jobs=jobs, memory="1G")
    script = render_script(spec, name="prep-test", log_dir=tmp_path, worker=["dask", "worker", "tcp://h:1"], env={})
    return JobController(spec, script, "prep-test", tmp_path / "records", run=fake)


def test_job_script_holds_the_options_quoted_and_nothing_else(tmp_path: Path) -> None:
    spec = SlurmSpec(jobs=3, partition="cpu", account="proj-1", qos="normal", time="01:30:00", cores=4,
                     memory="16G", extra=("--constraint=avx2", "#SBATCH --gres=gpu:0"))
    text = render_script(spec, name="prep-abc", log_dir=tmp_path / "rec", env={"DASK_X": "a b"},
                         worker=["/venv/bin/python", "-m", "distributed.cli.dask_worker", "tcp://10.0.0.5:8786",
                                 "--name", "slurm-${SLURM_JOB_ID}"])
    lines = text.splitlines()
    assert lines[:5] == ["#!/bin/bash", "#SBATCH --job-name=prep-abc", f"#SBATCH --output={tmp_path}/rec/%j.out",
                         "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=4"]
    for line in ("#SBATCH --partition=cpu", "#SBATCH --account=proj-1", "#SBATCH --qos=normal",
                 "#SBATCH --time=01:30:00", "#SBATCH --mem=16G", "#SBATCH --constraint=avx2",
                 "#SBATCH --gres=gpu:0", "export DASK_X='a b'"):
        assert line in lines, (line, text)
    assert lines[-1] == ('exec /venv/bin/python -m distributed.cli.dask_worker tcp://10.0.0.5:8786 --name '
                         '"slurm-${SLURM_JOB_ID}"'), lines[-1]
    assert spec.worker_memory_limit() == 4 * 2**30


@pytest.mark.parametrize(("field", "value"), [("partition", "cpu\n#SBATCH --uid=0"), ("extra", ("--a\nrm -rf /",)),
                                              ("extra", ("not-an-option",)), ("time", "90"), ("memory", "lots"),
                                              ("account", "a b"), ("time", "00:00:00")])
def test_a_value_that_could_start_a_line_of_the_script_is_refused(field: str, value: object) -> None:
    with pytest.raises(PrepError) as err:
        SlurmSpec(**{field: value}).check()  # type: ignore[arg-type]
    assert "\n" not in str(err.value).replace("\\n", "")


def test_sbatch_error_is_one_line_in_sbatch_words() -> None:
    stderr = ("sbatch: error: invalid partition specified: nope\n"
              "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert sbatch_error(stderr) == ("invalid partition specified: nope; Batch job submission failed: Invalid "
                                    "partition name specified")


def test_refused_first_job_is_one_error_and_leaves_no_folder(tmp_path: Path) -> None:
    fake = FakeSlurm()
    fake.refuse = "sbatch: error: invalid account or account/partition combination specified\n"
    jobs = controller(tmp_path, fake)
    jobs.records = tmp_path / "out" / "prep" / "slurm" / "run"
    with pytest.raises(SlurmError) as err:
        jobs.start()
    assert str(err.value) == ("sbatch refused the worker job: invalid account or account/partition combination "
                              "specified")
    assert not (tmp_path / "out").exists()


def test_ended_jobs_are_replaced_and_recorded(tmp_path: Path) -> None:
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake)
    assert [j.id for j in jobs.start()] == ["100", "101"]
    fake.queue = {"100": "RUNNING", "101": "RUNNING"}
    jobs.refresh()
    for job_id in ("100", "101"):
        jobs.worker_connected(job_id)
    fake.end("100", "TIMEOUT")
    events = jobs.refresh()
    assert events == ["SLURM job 100 ended (TIMEOUT on n1 after 00:01:00); submitted job 102 in its place"], events
    fake.queue["101"] = "COMPLETING"  # no final state yet: not acted on
    assert jobs.refresh() == [] and not jobs.jobs["101"].handled
    fake.end("101", "PREEMPTED")
    assert jobs.refresh() == ["SLURM job 101 ended (PREEMPTED on n1 after 00:01:00); submitted job 103 in its place"]
    fake.end("102", "CANCELLED")  # one cancelled while another lives: a lost worker, replaced
    assert jobs.refresh() == ["SLURM job 102 ended (CANCELLED on n1 after 00:01:00); submitted job 104 in its place"]
    record = json.loads((jobs.records / "jobs.json").read_text())
    assert [(j["id"], j["state"], j["replaced_by"]) for j in record["jobs"]] == [
        ("100", "TIMEOUT", "102"), ("101", "PREEMPTED", "103"), ("102", "CANCELLED", "104"),
        ("103", "PENDING", None), ("104", "PENDING", None)]
    assert (jobs.records / "job.sh").read_text() == jobs.script == fake.scripts[0]


def test_every_job_cancelled_is_not_replaced(tmp_path: Path) -> None:
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake)
    jobs.start()
    fake.queue = {"100": "RUNNING", "101": "RUNNING"}
    jobs.refresh()
    fake.end("100", "CANCELLED")
    fake.end("101", "CANCELLED")
    events = jobs.refresh()
    assert len(events) == 1 and events[0].startswith("every SLURM job of this run was cancelled (100 CANCELLED"), events
    assert jobs.gave_up and not jobs.alive() and not jobs.waiting() and len(fake.scripts) == 2


def test_three_failed_starts_in_a_row_stop_the_replacements(tmp_path: Path) -> None:
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake, jobs=1)
    jobs.start()
    for n in range(MAX_FAILED_STARTS):
        fake.end(str(100 + n), "FAILED")  # its worker never connected
        events = jobs.refresh()
    assert jobs.gave_up and "3 jobs in a row ended before their Dask worker connected" in jobs.gave_up, events
    assert str(jobs.log_of(jobs.jobs["102"])) in jobs.gave_up
    assert len(fake.scripts) == MAX_FAILED_STARTS and not jobs.alive()


def test_a_worker_that_connected_resets_the_failed_starts(tmp_path: Path) -> None:
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake, jobs=1)
    jobs.start()
    fake.end("100", "FAILED")
    jobs.refresh()
    fake.end("101", "FAILED")
    jobs.refresh()
    jobs.worker_connected("102")
    fake.end("102", "TIMEOUT")
    jobs.refresh()
    assert jobs.gave_up is None and jobs.failed_starts == 0 and "103" in jobs.jobs


def test_cancel_all_scancels_ids_and_the_run_name_then_waits(tmp_path: Path) -> None:
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake)
    jobs.start()
    fake.queue["999"] = "RUNNING"  # a job of the run whose sbatch answer was lost: prep never knew its id
    assert jobs.cancel_all(wait_s=5) == []
    scancel = [c for c in fake.calls if c[0] == "scancel"]
    assert "--name=prep-test" in scancel[0] and not {"100", "101"} & set(scancel[0]), scancel
    assert {"100", "101"} <= set(scancel[1]) and fake.final["999"] == "CANCELLED", scancel
    assert all(j["state"] == "CANCELLED" for j in json.loads((jobs.records / "jobs.json").read_text())["jobs"])


def test_worker_names_give_their_job() -> None:
    assert job_of_worker("slurm-123") == "123" and job_of_worker("slurm-123-1") == "123"
    assert job_of_worker("w0") is None and job_of_worker(None) is None


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="prep test")
    add_run_options(p)
    return p.parse_args(list(argv))


def test_profile_from_the_configuration_file_then_the_options(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text('[slurm]\npartition = "cpu"\njobs = 4\nmemory = "8G"\nextra = ["--constraint=avx2"]\n\n'
                      '[slurm.profiles.big]\njobs = 64\ntime = "04:00:00"\n')
    monkeypatch.setenv("PREP_CLUSTER_CONFIG", str(config))
    spec = slurm_spec(parse("--cluster", "slurm", "--slurm-profile", "big", "--slurm-memory", "16G"))
    assert spec == SlurmSpec(jobs=64, partition="cpu", time="04:00:00", memory="16G", extra=("--constraint=avx2",))
    assert slurm_spec(parse("--cluster", "slurm")).jobs == 4
    with pytest.raises(PrepError, match=r"has no \[slurm.profiles.small\] \(it has: big\)"):
        slurm_spec(parse("--cluster", "slurm", "--slurm-profile", "small"))
    config.write_text('[slurm]\npartitoin = "cpu"\n')
    with pytest.raises(PrepError, match="unknown key 'partitoin'"):
        slurm_spec(parse("--cluster", "slurm"))
    config.write_text('[slurm]\njobs = "many"\n')
    with pytest.raises(PrepError, match="jobs = 'many': expected a positive integer"):
        slurm_spec(parse("--cluster", "slurm"))


def test_no_configuration_file_is_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREP_CLUSTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert slurm_spec(parse("--cluster", "slurm")) == SlurmSpec()


@pytest.mark.parametrize(("argv", "records", "message"), [
    (("--slurm-jobs", "2"), Path("r"), "--slurm-jobs needs --cluster slurm"),
    (("--cluster", "slurm", "--scheduler", "tcp://h:8786"), Path("r"), "drop --scheduler"),
    (("--cluster", "slurm", "--workers", "2"), Path("r"), "drop --workers"),
    (("--cluster", "slurm"), None, "on the filesystem the nodes share: pass --out"),
])
def test_option_mistakes_are_one_line(argv: tuple[str, ...], records: Path | None, message: str,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PREP_CLUSTER_CONFIG", raising=False)
    with pytest.raises(PrepError) as err:
        run_config(parse(*argv), records=records)
    assert message in str(err.value), str(err.value)


def test_cluster_slurm_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PREP_CLUSTER_CONFIG", raising=False)
    config = run_config(parse("--cluster", "slurm", "--slurm-jobs", "3", "--slurm-cores", "2"),
                        records=tmp_path / "out/prep/slurm", shared=[tmp_path / "src"])
    assert config.backend_name() == "slurm" and config.slurm == SlurmSpec(jobs=3, cores=2)
    assert config.records == str(tmp_path / "out/prep/slurm") and config.shared == (str(tmp_path / "src"),)


@pytest.mark.parametrize("state", ["STOPPED", "SUSPENDED", "REQUEUE_HOLD"])
def test_a_stopped_or_suspended_job_is_alive_not_replaced(tmp_path: Path, state: str) -> None:
    """SIGSTOP through SLURM (`scancel --signal=STOP`) or `scontrol suspend` keeps the job's allocation, and it goes
    on when continued: replacing it would leave two jobs for one worker (the stall watch names a frozen worker)."""
    fake = FakeSlurm()
    jobs = controller(tmp_path, fake)
    jobs.start()
    fake.queue["100"] = state
    assert jobs.refresh() == [] and fake.next_id == 102 and jobs.jobs["100"].alive
    fake.end("100", "CANCELLED")
    assert [e for e in jobs.refresh() if "SLURM job 100 ended (CANCELLED" in e] and fake.next_id == 103
