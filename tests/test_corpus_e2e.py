"""A corpus with the real fixture (issue 35's closing run), end to end, one command each: a copy of the real LeRobot
v2.1 fixture (Unitree G1, AV1 640x480, one camera) and three synthetic datasets (v3.0 and v2.1, other robots and
camera names) scanned, verified, re-encoded to 224 and budgeted; the re-encode runs every dataset on ONE LocalCluster
(one `[engine] local:` line); and a corpus re-encode SIGKILLed after its first dataset resumes across datasets.
Slow: the real fixture's 3,608 AV1 frames are decoded and encoded."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_prep
from support.datasets import copy_real
from support.faults import start_prep, step_until

from pipeline.synth import SynthSpec, write_synthetic

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"
CORPUS = """\
name = "g1-mix"

[[datasets]]
source = "data/g1_inspire_v21"
name = "g1"
weight = 2
label = "unitree_g1"
[datasets.cameras]
base_0_rgb = "observation.images.cam_high"

[[datasets]]
source = "data/aloha_v30"
weight = 1
[datasets.cameras]
base_0_rgb = "observation.images.cam_high"
left_wrist_0_rgb = "observation.images.cam_left_wrist"
right_wrist_0_rgb = "observation.images.cam_right_wrist"

[[datasets]]
source = "data/koch_v21"
weight = 0.5
[datasets.cameras]
base_0_rgb = "observation.images.front"

[[datasets]]
source = "data/so100_v30"
weight = 1
[datasets.cameras]
base_0_rgb = "observation.images.laptop"
right_wrist_0_rgb = "observation.images.phone"
"""


def robot(root: Path, name: str) -> Path:
    info = json.loads((root / "meta/info.json").read_text())
    info["robot_type"] = name
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("g1mix")
    copy_real(base / "data/g1_inspire_v21")
    robot(write_synthetic(base / "data/aloha_v30", SynthSpec(
        version="v3.0", episodes=4, frames=60, height=96, width=128, gop=15, episodes_per_file=2)), "aloha")
    robot(write_synthetic(base / "data/koch_v21", SynthSpec(
        version="v2.1", episodes=3, frames=45, height=96, width=128, gop=15, cameras=("observation.images.front",))),
        "koch")
    robot(write_synthetic(base / "data/so100_v30", SynthSpec(
        version="v3.0", episodes=5, frames=30, height=96, width=128, gop=10, episodes_per_file=5,
        cameras=("observation.images.laptop", "observation.images.phone"))), "so100")
    (base / "corpus.toml").write_text(CORPUS)
    return base


def prep(*args: object, cwd: Path, **kw: Any) -> Any:
    return run_prep(*map(str, args), cwd=cwd, timeout=1800, **kw)


def test_a_corpus_with_the_real_fixture_in_one_command_each(corpus: Path) -> None:
    scan = prep("scan", "--corpus", "corpus.toml", "--out", "out/native.json", "--backend", "inline", cwd=corpus)
    assert scan.returncode == 0, scan.stderr
    native = json.loads((corpus / "out/native.json").read_text())
    rows = {r["name"]: r for r in native["datasets"]}
    assert [r["codebase_version"] for r in rows.values()] == ["v2.1", "v3.0", "v2.1", "v3.0"]
    assert [r["robot_type"] for r in rows.values()] == ["Unitree_G1_Inspire", "aloha", "koch", "so100"]
    assert rows["g1"]["frames"] == 3608 and rows["g1"]["codecs"] == ["av1"] and rows["g1"]["label"] == "unitree_g1"
    verify = prep("verify", "--corpus", "corpus.toml", "--decode", "--out", "out/verify", "--backend", "inline",
                  cwd=corpus)
    assert verify.returncode == 0, verify.stdout
    assert verify.stdout.splitlines()[-2] == "corpus    PASSED: 4 of 4 datasets pass"
    # one engine session for the whole corpus: one LocalCluster, whatever the number of datasets
    reencode = prep("reencode", "--corpus", "corpus.toml", "--dst", "224", "--out", "out/prepared",
                    "--workers", "2", "--backend", "local", cwd=corpus)
    assert reencode.returncode == 0, (reencode.stdout, reencode.stderr)
    assert reencode.stderr.count("[engine] local:") == 1, reencode.stderr
    prepared = json.loads((corpus / "out/prepared/corpus.json").read_text())
    assert all(c["width"] == 224 and c["height"] == 224 for r in prepared["datasets"] for c in r["cameras"])
    check = prep("verify", "--corpus", "out/prepared/corpus.toml", "--size", "224", "--all-intra", "--backend",
                 "inline", cwd=corpus)
    assert check.returncode == 0, check.stdout
    budget = prep("budget", "--corpus", "out/native.json", "--corpus-prepared", "out/prepared/corpus.json",
                  "--out", "out/budget", cwd=corpus)
    assert budget.returncode == 0, budget.stderr
    report = json.loads((corpus / "out/budget/report.json").read_text())
    mix = report["mixture"]
    assert [d["name"] for d in mix["datasets"]] == ["g1", "aloha_v30", "koch_v21", "so100_v30"]
    assert [d["share"] for d in mix["datasets"]] == pytest.approx([2 / 4.5, 1 / 4.5, 0.5 / 4.5, 1 / 4.5])
    assert all(d["bytes"]["prepared"]["source"].startswith("measured ") for d in mix["datasets"])
    assert mix["reencode"]["camera_frames"] == 3608 + 240 * 3 + 135 + 150 * 2
    for plot in ("hours", "labels", "cameras", "lengths", "shares"):
        assert (corpus / f"out/native-{plot}.png").read_bytes()[:8] == PNG
    assert (corpus / "out/budget/mixture.png").read_bytes()[:8] == PNG


def test_a_corpus_reencode_killed_after_its_first_dataset_resumes(corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("".join(f'[[datasets]]\nsource = "{corpus / "data" / n}"\n'
                                             for n in ("koch_v21", "so100_v30", "aloha_v30")))
    out = tmp_path / "out"
    args = ["reencode", "--corpus", str(tmp_path / "c.toml"), "--dst", "64", "--out", str(out), "--backend", "inline",
            "--no-progress"]
    run = start_prep(*args, log=tmp_path / "log")
    done = out / "prep/corpus.parts/done/koch_v21.json"
    assert step_until(run, done.is_file, timeout=600), run.output()
    os.killpg(run.pid, signal.SIGKILL)
    run.proc.wait()
    assert not (out / "corpus.json").exists()
    again = run_prep(*args, cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[0].startswith("ok        koch_v21   ")
    assert "complete in an earlier run, kept" in again.stdout.splitlines()[0]
    doc = json.loads((out / "corpus_reencode.json").read_text())
    assert [d["kept"] for d in doc["datasets"]] == [True, False, False]
    for name in ("koch_v21", "so100_v30", "aloha_v30"):
        assert (out / name / "meta/info.json").is_file()
    assert not (out / "prep/corpus.parts").exists()
