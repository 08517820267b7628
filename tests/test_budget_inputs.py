"""`prep budget`'s inputs (issues 35 and 36): --native and --prepared repeat and add up (`--native a --native b`
silently used b alone), a manifest given twice is refused in one line, and every parameter is bounded (hours of
1e-300 and 300-digit figures in 692-column lines were accepted), the refusal naming the option and its value."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_prep

REPO = Path(__file__).resolve().parent.parent
# two different real datasets' manifests, committed: the real fixture (10 episodes) and the demo's native corpus
A = Path("manifests/reference/g1_inspire_v21.manifest.json")
B = Path("manifests/demo/native.manifest.json")


def budget(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return run_prep("budget", *args, cwd=cwd, timeout=300)


def totals(path: Path) -> dict[str, Any]:
    t: dict[str, Any] = json.loads((REPO / path).read_text(encoding="utf-8"))["totals"]
    return t


def one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("prep budget: error: ") and res.stderr.count("\n") == 1, res.stderr
    return res.stderr


def test_repeated_native_manifests_add_up_never_the_last(tmp_path: Path) -> None:
    res = budget("--native", A, "--native", B, "--out", tmp_path / "ab", "--no-plots")
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "ab/report.json").read_text(encoding="utf-8"))
    a, b = totals(A), totals(B)
    native = report["manifests"]["native"]
    assert native["path"] == f"{A} + {B}"
    assert native["episodes"] == a["episodes"] + b["episodes"]
    assert native["frames"] == a["frames"] + b["frames"]
    assert native["hours"] == pytest.approx(a["hours"] + b["hours"])
    assert native["total_bytes"] == a["bytes"]["total"] + b["bytes"]["total"]
    gb_per_hour = (a["bytes"]["total"] + b["bytes"]["total"]) / 1e9 / (a["hours"] + b["hours"])
    assert native["gb_per_hour"] == pytest.approx(gb_per_hour)
    assert [p["path"] for p in native["parts"]] == [str(A), str(B)]
    rate = next(i for i in report["inputs"] if i["name"] == "gb_per_hour_native")
    assert rate["value"] == pytest.approx(gb_per_hour) and rate["source"].startswith(f"measured {A} + {B}")
    assert report["corpus"]["episodes"] == a["episodes"] + b["episodes"]
    alone = budget("--native", B, "--out", tmp_path / "b", "--no-plots")
    assert alone.returncode == 0, alone.stderr
    last = json.loads((tmp_path / "b/report.json").read_text(encoding="utf-8"))["manifests"]["native"]
    assert last["episodes"] == b["episodes"] != native["episodes"]  # the sum, not the last one given


@pytest.mark.parametrize("args", [["--native", A, "--native", A], ["--native", A, "--prepared", A],
                                  ["--native", A, "--native", "{copy}"]], ids=["twice", "both-roles", "a-copy"])
def test_a_manifest_counted_twice_is_refused(args: list[Any], tmp_path: Path) -> None:
    copy = tmp_path / "copy.manifest.json"
    shutil.copy(REPO / A, copy)
    shutil.copy((REPO / A).with_name("g1_inspire_v21.manifest.episodes.parquet"),
                tmp_path / "copy.manifest.episodes.parquet")
    err = one_line(budget(*[str(x).replace("{copy}", str(copy)) for x in args], "--out", tmp_path / "r"))
    assert "counts once" in err or "count twice" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("args", "named"), [
    (["--fps", "1e300"], "fps = 1e+300 (from cli --fps): outside the range a run can have, 0.1 to 10,000"),
    (["--fps", "1e-300"], "fps = 1e-300 (from cli --fps): outside the range"),
    (["--frames-per-episode", "1e-300"], "frames_per_episode = 1e-300 (from cli --frames-per-episode): outside"),
    (["--step-c-s", "1e300"], "step_c_s = 1e+300 (from cli --step-c-s): outside"),
    (["--mem-per-sample-gb", "1e-300"], "mem_per_sample_gb = 1e-300 (from cli --mem-per-sample-gb): outside"),
    (["--gb-per-hour-native", "1e-300"], "gb_per_hour_native = 1e-300 (from cli --gb-per-hour-native): outside"),
    (["--pi0-steps", "9007199254740992"], "pi0_steps = 9.0072e+15 (from cli --pi0-steps): outside"),
], ids=["fps-huge", "fps-tiny", "fpe-tiny", "step-c", "mem", "rate", "steps"])
def test_absurd_inputs_are_refused_naming_option_and_value(args: list[str], named: str, tmp_path: Path) -> None:
    err = one_line(budget(*args, "--out", tmp_path / "r", "--no-plots"))
    assert named in err, err
    assert len(err) < 250
    assert not (tmp_path / "r").exists()


def test_figures_stay_readable_at_the_bounds(tmp_path: Path) -> None:
    """The most extreme inputs accepted: every terminal line stays short, report.md no wider than the default's."""
    normal = budget("--out", tmp_path / "n", "--no-plots")
    assert normal.returncode == 0, normal.stderr
    width = max(len(line) for line in (tmp_path / "n/report.md").read_text(encoding="utf-8").splitlines())
    for extreme in (["--fps", "0.1", "--pi0-steps", "10000000000", "--pi0-batch", "10000000", "--frames-per-episode",
                     "1", "--gb-per-hour-native", "1e6", "--gb-per-hour-prepared", "1e4", "--step-c-s", "100000",
                     "--step-a-s", "1000", "--mem-per-sample-gb", "1e-9", "--train-batch", "8", "--nodes", "1,1000000",
                     "--headline-nodes", "1000000"],
                    ["--fps", "10000", "--pi0-steps", "1", "--pi0-batch", "1", "--frames-per-episode", "1e9",
                     "--gb-per-hour-native", "1e-6", "--gb-per-hour-prepared", "1e-6", "--step-a-s", "1e-6",
                     "--step-c-s", "0", "--train-batch", "8"]):
        res = budget(*extreme, "--out", tmp_path / "x", "--no-plots")
        assert res.returncode == 0, res.stderr
        figures = [line for line in res.stdout.splitlines() if not line.startswith("report ")]  # (paths)
        assert max(len(line) for line in figures) <= 160, res.stdout
        md = (tmp_path / "x/report.md").read_text(encoding="utf-8").splitlines()
        assert max(len(line) for line in md) <= width
        assert not any(len(word) > 40 for line in figures for word in line.split()), res.stdout
