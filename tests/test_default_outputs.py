"""Defaults never write where the user did not point (issue 36): `prep scan examples/g1_inspire_v21` from the
checkout root wrote the default `./manifests/g1_inspire_v21.manifest.json` over the committed reference manifest.
A default output that would replace a file tracked by git, or a file prep did not write (no `prep.<kind>/N`
schema marker), is refused in one line naming --out; prep's own earlier output is replaced as before."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.cli import run_prep

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples/g1_inspire_v21"
FAST = ["--backend", "inline", "--no-progress"]


def prep(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_prep(*args, cwd=cwd, timeout=600)


def refused(res: subprocess.CompletedProcess[str], command: str, path: Path, why: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [f"prep {command}: error: the default --out would write over {path}, {why}; "
                                       "pass --out PATH to write elsewhere"], res.stderr


def test_the_checkout_commits_nothing_where_scan_writes_by_default() -> None:
    """The reference manifest of the 10-episode fixture lives out of scan's default path (manifests/reference/)."""
    assert not (REPO / "manifests/g1_inspire_v21.manifest.json").exists()
    assert json.loads((REPO / "manifests/reference/g1_inspire_v21.manifest.json").read_text())["totals"][
        "episodes"] == 10
    if shutil.which("git") and (REPO / ".git").exists():
        tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "manifests"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert not [t for t in tracked if t.count("/") == 1 and t.endswith(".manifest.json")], tracked


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_scan_refuses_to_write_its_default_over_a_tracked_manifest(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(EXAMPLE, clone / "g1_inspire_v21")
    committed = clone / "manifests/g1_inspire_v21.manifest.json"
    committed.parent.mkdir()
    for src in (REPO / "manifests/reference").glob("g1_inspire_v21.manifest.*"):
        shutil.copy(src, committed.parent / src.name)
    git = ["git", "-C", str(clone), "-c", "user.email=t@t", "-c", "user.name=t"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "reference"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    before = committed.read_bytes()
    refused(prep("scan", "g1_inspire_v21", *FAST, cwd=clone), "scan", committed, "a file tracked by git")
    assert committed.read_bytes() == before
    out = clone / "elsewhere.manifest.json"  # --out given: written where the user points
    assert prep("scan", "g1_inspire_v21", "--out", out, *FAST, cwd=clone).returncode == 0
    assert json.loads(out.read_text())["totals"]["episodes"] == 2


def test_scan_refuses_a_foreign_file_and_replaces_its_own(tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work / "g1_inspire_v21")
    first = prep("scan", "g1_inspire_v21", *FAST, cwd=work)
    assert first.returncode == 0, first.stderr
    manifest = work / "manifests/g1_inspire_v21.manifest.json"
    again = prep("scan", "g1_inspire_v21", *FAST, cwd=work)  # prep's own manifest: replaced as before
    assert again.returncode == 0, again.stderr
    manifest.write_text('{"notes": "mine, not prep\'s"}\n')
    refused(prep("scan", "g1_inspire_v21", *FAST, cwd=work), "scan", manifest, "a file prep did not write")
    assert manifest.read_text() == '{"notes": "mine, not prep\'s"}\n'
    manifest.unlink()
    table = work / "manifests/g1_inspire_v21.manifest.episodes.parquet"
    table.write_text("a user's file\n")
    refused(prep("scan", "g1_inspire_v21", *FAST, cwd=work), "scan", table, "a file prep did not write")


def test_budget_refuses_to_replace_a_foreign_report(tmp_path: Path) -> None:
    mine = prep("budget", "--no-plots", cwd=tmp_path)
    assert mine.returncode == 0, mine.stderr
    assert prep("budget", "--no-plots", cwd=tmp_path).returncode == 0  # its own: replaced
    (tmp_path / "manifests/budget/report.json").unlink()
    notes = tmp_path / "manifests/budget/report.md"
    refused(prep("budget", "--no-plots", cwd=tmp_path), "budget", notes, "a file prep did not write")


def test_bench_refuses_to_replace_a_foreign_result(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    foreign = tmp_path / "prep-bench/dataloader.json"
    foreign.parent.mkdir()
    foreign.write_text("[]\n")
    refused(prep("bench", "dataloader", EXAMPLE, "--steps", "1", "--no-plot", cwd=tmp_path), "bench", foreign,
            "a file prep did not write")
    assert foreign.read_text() == "[]\n"
