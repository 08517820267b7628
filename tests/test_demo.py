"""`prep demo` end to end: scan, reencode, verify and budget on a corpus it builds itself."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import run_prep as prep

from pipeline.manifest import load_manifest
from pipeline.schemas import validate


@pytest.mark.slow
@pytest.mark.cluster
def test_demo_end_to_end(tmp_path: Path) -> None:
    """Run from an empty folder with no --out: everything lands in the work folder (reports in <work>/reports),
    nothing in the current folder, nothing in the repository's manifests/demo/."""
    cwd, work = tmp_path / "cwd", tmp_path / "work"
    cwd.mkdir()
    committed = {p: p.stat().st_mtime_ns for p in Path("manifests/demo").rglob("*")}
    res = prep("demo", "--episodes", "2", "--work", str(work), "--workers", "2", "--no-progress", cwd=cwd)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = work / "reports"
    assert list(cwd.iterdir()) == []
    assert {p: p.stat().st_mtime_ns for p in Path("manifests/demo").rglob("*")} == committed
    assert f"[demo] reports: {out}; corpus and output: {work}" in res.stdout
    assert "2 episodes x 3 cameras x 90 timesteps" in res.stdout
    native = load_manifest(out / "native.manifest.json")
    prepared = load_manifest(out / "prepared.manifest.json")
    assert native["totals"]["episodes"] == prepared["totals"]["episodes"] == 2
    assert native["totals"]["frames"] == prepared["totals"]["frames"] == 180
    assert {c["width"] for c in prepared["dataset"]["cameras"]} == {224}
    assert prepared["totals"]["gb_per_hour"] < native["totals"]["gb_per_hour"] / 2
    verify = json.loads((out / "verify.json").read_text())
    validate(verify, "verify")
    budget = json.loads((out / "budget/report.json").read_text())
    validate(budget, "budget")
    for png in ("throughput.png", "memory.png", "days.png", "storage.png"):
        assert (out / "budget" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "work/merged_224/meta/info.json").is_file()
    prep_dir = tmp_path / "work/merged_224/prep"
    for name, schema in (("reencode_report.json", "reencode_report"), ("comparison.json", "comparison"),
                         ("options.json", "reencode_options")):
        validate(json.loads((prep_dir / name).read_text()), schema, source=name)
    assert json.loads((prep_dir / "comparison.json").read_text())["ratio"] > 2
    assert "verify passed" in res.stdout and "v3.0 conversion verified" in res.stdout
    converted = tmp_path / "work/merged_224_v30"
    assert json.loads((converted / "meta/info.json").read_text())["codebase_version"] == "v3.0"
    report = json.loads((converted / "prep/convert_report.json").read_text())
    validate(report, "convert_report")
    assert report["episodes"] == 2 and report["verify"]["passed"]


def test_refresh_manifests_only_from_the_repository_root(tmp_path: Path) -> None:
    res = prep("demo", "--episodes", "1", "--refresh-manifests", "--backend", "inline", cwd=tmp_path)
    assert res.returncode == 2 and "--refresh-manifests: run it from the repository root" in res.stderr
    assert list(tmp_path.iterdir()) == []
    res = prep("demo", "--refresh-manifests", "--out", str(tmp_path / "r"), "--backend", "inline")
    assert res.returncode == 2 and "give it or --out, not both" in res.stderr


def test_refreshed_reports_name_no_path_of_this_machine(tmp_path: Path) -> None:
    """--refresh-manifests (in a folder that looks like the repository root) writes reports that name the work
    folder `<work>` and the shipped landscape by its repository path: no temp path, no install path."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "manifests").mkdir()
    work = tmp_path / "work"
    res = prep("demo", "--episodes", "1", "--work", str(work), "--refresh-manifests", "--backend", "inline",
               "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    reports = sorted(p for p in (tmp_path / "manifests/demo").rglob("*") if p.suffix in (".json", ".md"))
    assert len(reports) >= 6, reports
    for path in reports:
        text = path.read_text()
        assert str(tmp_path) not in text and "/tmp/" not in text and "site-packages" not in text, path
    native = json.loads((tmp_path / "manifests/demo/native.manifest.json").read_text())
    assert native["dataset"]["root"] == "<work>/merged"
    budget = json.loads((tmp_path / "manifests/demo/budget/report.json").read_text())
    assert budget["landscape"]["path"] == "manifests/vla_landscape.toml"


@pytest.mark.slow
def test_demo_sh_keeps_the_reports_under_the_checkout(tmp_path: Path) -> None:
    """scripts/demo.sh (its set-up step stubbed: .venv/bin/prep runs this checkout's prep) keeps the reports
    and plots in out/demo/ of the checkout it runs in, says where, and leaves them when rerun."""
    repo = Path(__file__).resolve().parents[1]
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(repo / "scripts/demo.sh", clone / "scripts/demo.sh")
    (clone / "scripts/setup.sh").write_text("echo '[setup] stub'\n")
    (clone / ".venv/bin").mkdir(parents=True)
    prep_exe = clone / ".venv/bin/prep"
    prep_exe.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(repo))} exec {shlex.quote(sys.executable)} '
                        '-m pipeline.cli "$@"\n')
    prep_exe.chmod(0o755)
    for _ in range(2):
        res = subprocess.run(
            ["bash", str(clone / "scripts/demo.sh"), "--episodes", "1", "--backend", "inline", "--no-progress"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert f"[demo] reports: {clone / 'out/demo'}" in res.stdout
        assert "[demo] kept in out/demo/ (git ignores it)" in res.stdout
        report = clone / "out/demo/budget/report.md"
        assert report.is_file() and (clone / "out/demo/budget/throughput.png").is_file()
        assert (clone / "out/demo/native.manifest.json").is_file()
    assert list(tmp_path.iterdir()) == [clone]  # nothing in the folder it was started from
    assert "/out/" in (repo / ".gitignore").read_text().split()
