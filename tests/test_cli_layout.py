"""The CLI's shape: the dataset first, `--out` the main output, defaults stated and printed, warnings
for likely mistakes, honest wording, and resume hints after Ctrl-C or SIGTERM. Messages are checked on
real `prep` subprocesses (what a user sees), layouts on the real parser."""

from __future__ import annotations

import importlib
import inspect
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import child_env, prep_cmd
from support.cli import run_prep as prep

from pipeline.cli import build_parser
from pipeline.commands import COMMANDS
from pipeline.synth import SynthSpec, write_synthetic

ENV = child_env()  # a child of this checkout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 episode, 1 camera, 12 frames of 96x128: the wording of singular counts, and fast reencodes."""
    return write_synthetic(tmp_path_factory.mktemp("tiny") / "one", SynthSpec(
        episodes=1, frames=12, height=96, width=128, cameras=("observation.images.cam_high",), gop=6))


# ---- layout ---------------------------------------------------------------------------------------

def test_help_lines_are_written_once() -> None:
    """Each command registers the help line of `pipeline.commands.COMMANDS`; no module keeps its own copy."""
    for name, cmd in COMMANDS.items():
        source = inspect.getsource(importlib.import_module(cmd.module))
        assert f'"{cmd.help}"' not in source, f"{cmd.module} repeats the help line of {name}"
        sub = next(a for a in build_parser(name)._actions if a.__class__.__name__ == "_SubParsersAction")
        assert {a.dest: a.help for a in sub._choices_actions}[name] == cmd.help


@pytest.mark.parametrize("name", ["scan", "verify", "reencode", "budget"])
def test_dataset_is_the_first_positional(name: str) -> None:
    args = build_parser(name).parse_args([name, "some/data", *(["--dst", "224"] if name == "reencode" else [])])
    assert str(args.dataset) == "some/data"
    assert build_parser("bench").parse_args(["bench", "dataloader", "some/data"]).dataset == Path("some/data")


def test_reencode_runbook_form_still_parses() -> None:
    """`prep reencode --src merged --dst 224` (the user's runbook) and `prep reencode merged --dst 224`."""
    from pipeline.commands.reencode import source_of

    runbook = build_parser("reencode").parse_args(["reencode", "--src", "merged", "--dst", "224"])
    positional = build_parser("reencode").parse_args(["reencode", "merged", "--dst", "224"])
    assert source_of(runbook) == source_of(positional) == "merged"


def test_reencode_refuses_two_sources_and_none(tmp_path: Path) -> None:
    res = prep("reencode", "a", "--src", "b", "--dst", "224", cwd=tmp_path)
    assert res.returncode == 2 and "two source datasets: 'a' and --src 'b'" in res.stderr
    res = prep("reencode", "--dst", "224", cwd=tmp_path)
    assert res.returncode == 2 and "no source dataset" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("argv", "named"), [
    ([], "DATASET (or --src DATASET), --dst SIZE"), (["merged"], "--dst SIZE"), (["--src", "merged"], "--dst SIZE")],
    ids=["nothing", "no-dst", "src-no-dst"])
def test_reencode_names_every_missing_argument(tmp_path: Path, argv: list[str], named: str) -> None:
    """`prep reencode` alone names DATASET and --dst (argparse named only --dst), in one line, exit 2."""
    res = prep("reencode", *argv, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"prep reencode: error: the following arguments are required: {named} (e.g. prep reencode DATASET --dst 224)"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["budget", "--no-plots"], ["scan", "{tiny}", "--backend", "inline"],
                                  ["bench", "dataloader", "{tiny}", "--no-plot"]], ids=["budget", "scan", "bench"])
def test_no_default_output_in_the_filesystem_root(argv: list[str], tiny: Path) -> None:
    """Run from `/`, a default output would create /manifests/ (or /prep-bench/): refused, --out named instead."""
    if argv[0] == "bench":
        pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    before = Path("/manifests").exists(), Path("/prep-bench").exists()
    res = prep(*[a.format(tiny=tiny) for a in argv], cwd=Path("/"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the current folder is /" in res.stderr and "pass --out" in res.stderr
    assert (Path("/manifests").exists(), Path("/prep-bench").exists()) == before


def test_scan_default_output_is_stated_and_printed(tiny: Path, tmp_path: Path) -> None:
    help_text = " ".join(prep("scan", "--help").stdout.split())
    assert "manifests/<DATASET name>.manifest.json in the current folder" in help_text
    res = prep("scan", str(tiny), "--backend", "inline", "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    manifest = tmp_path / "manifests/one.manifest.json"
    assert res.stdout.splitlines()[-1] == f"manifest  {manifest}"
    assert json.loads(manifest.read_text())["totals"]["episodes"] == 1


def test_singular_and_origin_named_wording(tiny: Path, tmp_path: Path) -> None:
    """1 episode / 1 camera, and timesteps told apart from camera frames."""
    scan = prep("scan", str(tiny), "--out", str(tmp_path / "m.json"), "--backend", "inline", "--no-progress")
    assert "1 camera)" in scan.stdout and "1 cameras" not in scan.stdout
    assert "timesteps 12 (12.0 per episode; 12 camera frames)" in scan.stdout
    verify = prep("verify", str(tiny), "--backend", "inline", "--no-progress")
    assert "1 camera)" in verify.stdout and "timesteps 12 expected" in verify.stdout, verify.stdout
    out = tmp_path / "r"
    reencode = prep("reencode", str(tiny), "--dst", "64", "--out", str(out), "--backend", "inline", "--no-progress")
    assert reencode.returncode == 0, reencode.stderr
    assert "files     1 video file: 1 encoded" in reencode.stdout
    assert "frames    12 camera frames" in reencode.stdout


def test_verify_out_names_the_report_and_json_still_works(tiny: Path, tmp_path: Path) -> None:
    for flag in ("--out", "--json"):
        path = tmp_path / f"v{flag}.json"
        res = prep("verify", str(tiny), flag, str(path), "--backend", "inline", "--no-progress")
        assert res.returncode == 0, res.stderr
        assert json.loads(path.read_text())["passed"] is True
        assert f"report    {path}" in res.stdout


def test_budget_reads_a_prepared_dataset(tiny: Path, tmp_path: Path) -> None:
    """`prep budget DATASET` takes DATASET/prep/manifest.json as the prepared manifest; a dataset without one
    is refused with the command that makes a manifest."""
    out = tmp_path / "p"
    assert prep("reencode", str(tiny), "--dst", "64", "--out", str(out), "--backend", "inline",
                "--no-progress").returncode == 0
    res = prep("budget", str(out), "--out", str(tmp_path / "b"), "--no-plots")
    assert res.returncode == 0, res.stderr
    assert str(out / "prep/manifest.json") in (tmp_path / "b/report.md").read_text()
    res = prep("budget", str(tiny), "--out", str(tmp_path / "b2"), "--no-plots")
    assert res.returncode == 2 and f"`prep scan {tiny}`" in res.stderr


# ---- warnings -------------------------------------------------------------------------------------

def test_dst_typo_warns_and_builds_what_was_asked(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "o244"
    res = prep("reencode", "--src", str(tiny), "--dst", "244", "--out", str(out), "--backend", "inline",
               "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "prep reencode: warning: --dst 244 builds 244x244 frames; did you mean --dst 224" in res.stderr
    assert "warning   --dst 244" in res.stdout  # repeated after the summary
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["observation.images.cam_high"]["shape"][:2] == [244, 244]
    quiet = prep("reencode", str(tiny), "--dst", "256", "--out", str(tmp_path / "o256"), "--backend", "inline",
                 "--no-progress")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr + quiet.stdout


def test_reencoding_a_prep_output_warns(tiny: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert prep("reencode", str(tiny), "--dst", "64", "--out", str(first), "--backend", "inline",
                "--no-progress").returncode == 0
    res = prep("reencode", str(first), "--dst", "64", "--out", str(tmp_path / "again"), "--backend", "inline",
               "--no-progress")
    assert res.returncode == 0, res.stderr
    assert f"warning: {first} was written by prep reencode (64x64 h264-intra crf 23 from {tiny})" in res.stderr
    assert "the same size again" in res.stderr and f"re-encode the original ({tiny}) instead" in res.stderr
    # an output of an earlier prep (provenance as prep.* entries in the features' info, before it moved to
    # prep/provenance.json), copied without prep/, is still recognised by those entries
    bare = tmp_path / "bare"
    shutil.copytree(first, bare, ignore=shutil.ignore_patterns("prep"))
    info_path = bare / "meta/info.json"
    info = json.loads(info_path.read_text())
    for feat in info["features"].values():
        if feat.get("dtype") == "video":
            feat["info"].update({"prep.resize": "pad", "prep.profile": "h264-intra", "prep.crf": 23})
    info_path.write_text(json.dumps(info, indent=4))
    res = prep("reencode", str(bare), "--dst", "32", "--out", str(tmp_path / "bare32"), "--backend", "inline",
               "--no-progress")
    assert res.returncode == 0 and f"warning: {bare} was written by prep reencode (64x64" in res.stderr


# ---- interrupts -----------------------------------------------------------------------------------

def _start_and_signal(args: list[str], out: Path, sig: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Start `prep ARGS`, wait for its first finished output video, then send `sig`."""
    proc = subprocess.Popen(prep_cmd(*args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=ENV)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        done = [p for p in out.rglob("episode_*.mp4") if ".tmp" not in p.name and "prep-tmp" not in p.name]
        if done:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize(("sig", "code", "word", "backend"), [
    (signal.SIGINT, 130, "interrupted", "inline"), (signal.SIGTERM, 143, "terminated (SIGTERM)", "local")],
    ids=["ctrl-c", "sigterm"])
def test_interrupted_reencode_prints_the_command_that_resumes(
        real_v21: Path, tmp_path: Path, sig: int, code: int, word: str, backend: str) -> None:
    shutil.copytree(real_v21, tmp_path / "merged")
    args = ["reencode", "--src", "merged", "--dst", "224", "--backend", backend, "--workers", "1", "--no-progress"]
    res = _start_and_signal(args, tmp_path / "merged_224", sig, tmp_path)
    assert res.returncode == code, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert f"prep reencode: {word}; finished files are kept in {tmp_path / 'merged_224'}" in res.stderr
    hint = res.stderr.strip().splitlines()
    assert hint[-2] == f"prep reencode: to resume: rerun the same command (from {tmp_path}):"
    assert hint[-1].strip() == f"{Path(sys.executable).name} -m pipeline.cli {shlex.join(args)}"
    if sig == signal.SIGINT:  # the printed command, run as printed, finishes the job and keeps what was done
        again = subprocess.run([sys.executable, *shlex.split(hint[-1])[1:]], capture_output=True, text=True,
                               cwd=tmp_path, env=ENV, timeout=300, check=False)
        assert again.returncode == 0, again.stderr[-2000:]
        kept = next(line for line in again.stdout.splitlines() if line.startswith("files "))
        assert "0 kept" not in kept and "0 failed" in kept, kept


def test_rerun_command_names_prep_as_the_user_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.commands.common import rerun_command

    exe = tmp_path / "bin" / "prep"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(exe), "scan", "my data"])
    monkeypatch.setenv("PATH", str(exe.parent))
    assert rerun_command(["scan", "my data"]) == "prep scan 'my data'"  # the prep on PATH
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rerun_command(["scan", "x"]) == f"{exe} scan x"  # not on PATH: by its path
    monkeypatch.setattr(sys, "argv", ["/x/pipeline/cli.py"])
    assert rerun_command(["scan", "x"]) == f"{Path(sys.executable).name} -m pipeline.cli scan x"


@pytest.mark.slow
@pytest.mark.cluster
def test_sigterm_while_the_cluster_starts_is_one_clean_message(real_v21: Path, tmp_path: Path) -> None:
    """A SIGTERM during LocalCluster start-up is held until the cluster is up, then acted on: the resume hint,
    exit 143, no traceback from a half-built cluster, no worker left behind."""
    psutil = pytest.importorskip("psutil", reason="needs psutil (the bench extra)")
    out = tmp_path / "m.json"
    proc = subprocess.Popen(prep_cmd("scan", real_v21, "--out", out, "--workers", "1", "--no-progress"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not me.children() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the scan finished before its cluster started"
    spawned = me.children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
    assert f"prep scan: terminated (SIGTERM); finished batches are kept in {out}.parts/" in stderr
    _gone, alive = psutil.wait_procs(spawned, timeout=30)
    assert not alive, f"left behind: {alive}"
