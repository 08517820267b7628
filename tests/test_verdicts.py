"""Per-reader verdicts (issue 25): `lerobot_loads` per reader line (v2.1: 0.3 = lerobot 0.3.x / openpi; v3.0: 0.4
and 0.6), every finding with a severity per reader, `--reader` choosing what the severity and the exit code follow;
the user's own rules (`--expect-frames`, `--size`, `--all-intra`) fail the run but never the reader prediction
(issue 27). Real synthetic datasets (PyAV-encoded), the real verify job and CLI."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from support.cli import run_prep

from pipeline.checks import severity_by_reader, target_severity
from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import write_synthetic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases.synth_cases import spec
from test_formats_depth import DEPTH, depth_dataset

prep = functools.partial(run_prep, backend="inline", progress=False)


def test_severity_per_reader_table() -> None:
    assert severity_by_reader("depth_codec", "error", "v3.0") == {"0.4": None, "0.6": "error"}
    assert severity_by_reader("pts_grid", "error", "v3.0") == {"0.4": "error", "0.6": "error"}
    assert severity_by_reader("pts_grid", "error", "v2.1") == {"0.3": "error"}
    assert severity_by_reader("frames_expected", "error", "v2.1") == {"0.3": None}  # the user's rule
    assert target_severity("depth_codec", "error", "v3.0", "0.4") == "info"
    assert target_severity("depth_codec", "error", "v3.0", "0.6") == "error"
    assert target_severity("depth_codec", "error", "v3.0", "all") == "error"
    assert target_severity("frames_expected", "error", "v2.1", "all") == "error"
    assert target_severity("pts_grid", "error", "v2.1", "0.6") == "error"  # 0.6 does not read v2.1: its own line


def test_depth_codec_only_0_6_refuses(tmp_path: Path) -> None:
    """A depth camera stored as png: 0.6.x refuses at open (resolve_vcodec), 0.4.x loads. The JSON report
    predicts each reader; --reader picks which one sets the severity and the exit code."""
    src = depth_dataset(tmp_path, "v3.0", codec="png")
    report = verify_in_process(src, VerifyOptions(decode=True))
    head = report.head_json()
    assert not report.passed
    assert head["lerobot_loads"]["0.4"]["loads"] is True and head["lerobot_loads"]["0.6"]["loads"] is False
    assert head["lerobot_loads"]["0.6"]["errors"] == 1
    only04 = verify_in_process(src, VerifyOptions(decode=True, reader="0.4"))
    assert only04.passed
    (f,) = [f for f in only04.failures if f.check == "depth_codec"]
    assert f.severity == "info" and f.camera == DEPTH
    assert only04.head_json()["lerobot_loads"]["0.6"] == {**head["lerobot_loads"]["0.6"], "targeted": False}

    out = tmp_path / "v.json"
    r = prep("verify", str(src), "--out", str(out), "--decode")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "lerobot   lerobot 0.4.x (v3.0) predicted: loads" in r.stdout
    assert "lerobot   lerobot 0.6.x (v3.0) predicted: refuses, raises or hands a wrong frame (1 error)" in r.stdout
    doc = json.loads(out.read_text())
    (jf,) = [f for f in doc["failures"] if f["check"] == "depth_codec"]
    assert jf["severity"] == "error" and jf["severity_by_reader"] == {"0.4": None, "0.6": "error"}
    r = prep("verify", str(src), "--reader", "0.4", "--decode")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lerobot 0.6.x (v3.0) predicted: refuses, raises or hands a wrong frame (1 error)  [not targeted: " \
           "--reader 0.4]" in r.stdout and "PASSED" in r.stdout


def test_v21_names_openpi_line(tmp_path: Path) -> None:
    src = write_synthetic(tmp_path / "ds", spec("v2.1"))
    head = verify_in_process(src, VerifyOptions()).head_json()
    assert list(head["lerobot_loads"]) == ["0.3"]
    assert head["lerobot_loads"]["0.3"]["reader"] == "lerobot 0.3.x / openpi"


@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_user_rules_fail_the_run_not_the_reader(fmt: str, tmp_path: Path) -> None:
    """--expect-frames 90 on 20-frame episodes that every reader loads: exit 1, the reader lines say loads,
    a `rules` line says it is the user's rule (issue 27)."""
    src = write_synthetic(tmp_path / "ds", spec(fmt))
    report = verify_in_process(src, VerifyOptions(expect_frames=90, all_intra=True, decode=True))
    head = report.head_json()
    assert not report.passed
    assert all(p["loads"] is True and p["errors"] == 0 for p in head["lerobot_loads"].values())
    assert head["user_rules_failed"]["--expect-frames"] == 2
    out = tmp_path / "v.json"
    r = prep("verify", str(src), "--expect-frames", "90", "--decode", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "refuses" not in r.stdout and "predicted: loads" in r.stdout
    assert "rules     your rules failed: --expect-frames (2 failures)" in r.stdout
    doc = json.loads(out.read_text())
    assert {f["check"]: f["severity_by_reader"] for f in doc["failures"]} == {
        "frames_expected": {r: None for r in doc["lerobot_loads"]}}


def test_docs_verdict_table_columns_match_the_code() -> None:
    """docs/verify.md: one column per reader generation; the checks whose readers differ, and the user's rules,
    read as the code has them."""
    import re

    from pipeline.checks import CHECKS

    doc = (Path(__file__).resolve().parents[1] / "docs/verify.md").read_text()
    start = doc.index("| check | 0.3 (v2.1")
    rows = doc[start:doc.index("\n\n", start)].splitlines()[2:]
    cells = {}
    for row in rows:
        parts = [c.strip() for c in row.strip("|").split(" | ")]
        for check in re.findall(r"`([a-z_]+)`", parts[0].split(" (")[0] + " " + parts[0]):
            cells.setdefault(check, parts[1:4])
    table = {name: c.severity for name, c in CHECKS.items()}
    for check in ("depth_codec", "stale_file_index", "display_rotation", "depth_copy"):
        assert cells[check] == [table[check].get(r) or "-" for r in ("0.3", "0.4", "0.6")], check
    for check in [name for name, c in CHECKS.items() if c.user_option]:
        assert cells[check] == ["- (your rule)"] * 3, check
