"""verify speaks for the readers that exist (issue 36): every dataset's summary has one line per reader
generation, 0.3 (openpi), 0.4 and 0.6, and the report's `format_refused_by` names the generations that cannot
open its format at all (v2.1: 0.4.4 and 0.6.1 raise BackwardCompatibilityError at open; v3.0: 0.3.3 finds no
meta/tasks.jsonl and falls back to the Hub), each with the way forward (`prep convert --to`). A `--reader`
naming such a generation is a FAIL for it (exit 1), never PASSED, never silently ignored; reencode's source
check likewise (exit 1, nothing encoded). What the real readers do: tests/compat (BackwardCompatibilityError)
and pipeline/checks.py FORMAT_REFUSALS."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.cli import run_prep

from pipeline.synth import SynthSpec, write_synthetic

CAM = ("observation.images.cam_high",)
OTHER = {"v2.1": "v3.0", "v3.0": "v2.1"}


def prep(*args: object) -> subprocess.CompletedProcess[str]:
    return run_prep(*args, backend="inline", progress=False, timeout=300)


@pytest.fixture(scope="module", params=["v2.1", "v3.0"])
def dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version=request.param, episodes=2, frames=10, height=32, width=48, gop=10, cameras=CAM)
    return write_synthetic(tmp_path_factory.mktemp("readers") / request.param.replace(".", ""), spec)


def _version(root: Path) -> str:
    return str(json.loads((root / "meta/info.json").read_text())["codebase_version"])


def test_the_registry_says_which_generation_opens_which_format() -> None:
    from pipeline.checks import Reader, format_refusal, format_refused_by, reader_cannot_open

    assert format_refusal(Reader.V03, "v2.1") is None and format_refusal(Reader.V04, "v3.0") is None
    assert format_refusal(Reader.V06, "v3.0") is None
    for r in (Reader.V04, Reader.V06):
        refused = format_refusal(r, "v2.1")
        assert refused is not None and "BackwardCompatibilityError" in refused.does
        assert "check_version_compatibility" in refused.where
    refused = format_refusal(Reader.V03, "v3.0")
    assert refused is not None and "tasks.jsonl" in refused.does
    assert reader_cannot_open("v3.0", "0.3") is Reader.V03 and reader_cannot_open("v2.1", "0.6") is Reader.V06
    assert reader_cannot_open("v2.1", "0.3") is None and reader_cannot_open("v3.0", "all") is None
    assert set(format_refused_by("v2.1")) == {Reader.V04, Reader.V06}
    assert set(format_refused_by("v3.0")) == {Reader.V03}
    assert format_refused_by("v3.0")[Reader.V03]["way_forward"] == "prep convert --to v2.1"


def test_every_generation_has_a_line(dataset: Path, tmp_path: Path) -> None:
    version = _version(dataset)
    out = tmp_path / "r.json"
    r = prep("verify", dataset, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("lerobot   ")]
    assert [line.split()[2] for line in lines] == ["0.3.x", "0.4.x", "0.6.x"], lines
    refused = [line for line in lines if "cannot open" in line]
    assert len(refused) == (2 if version == "v2.1" else 1), lines
    assert all(f"cannot open this {version} dataset" in line and f"prep convert --to {OTHER[version]}" in line
               and "FAILED" not in line for line in refused), refused
    assert r.stdout.splitlines()[-2] == "PASSED", r.stdout
    doc = json.loads(out.read_text())
    assert doc["passed"] is True
    assert set(doc["format_refused_by"]) == ({"0.4", "0.6"} if version == "v2.1" else {"0.3"})
    assert all(not p["targeted"] and p["loads"] is False for p in doc["format_refused_by"].values())
    assert set(doc["lerobot_loads"]) == ({"0.3"} if version == "v2.1" else {"0.4", "0.6"})  # unchanged


def test_a_reader_that_cannot_open_the_format_fails(dataset: Path, tmp_path: Path) -> None:
    version = _version(dataset)
    for reader in (["0.4", "0.6"] if version == "v2.1" else ["0.3"]):
        out = tmp_path / f"r{reader}.json"
        r = prep("verify", dataset, "--reader", reader, "--out", out)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "PASSED" not in r.stdout, r.stdout
        last = r.stdout.splitlines()[-2]
        assert last.startswith(f"FAILED    --reader {reader}: ") and f"prep convert --to {OTHER[version]}" in last, last
        assert f"[--reader {reader}: FAILED]" in r.stdout
        doc = json.loads(out.read_text())
        assert doc["passed"] is False and doc["format_refused_by"][reader]["targeted"] is True
    for reader in (["0.3"] if version == "v2.1" else ["0.4", "0.6"]):  # its own readers still pass it
        assert prep("verify", dataset, "--reader", reader).returncode == 0


def test_reencode_source_check_fails_for_a_reader_that_cannot_open_it(dataset: Path, tmp_path: Path) -> None:
    version = _version(dataset)
    reader = "0.4" if version == "v2.1" else "0.3"
    out = tmp_path / "out"
    r = prep("reencode", dataset, "--dst", "32", "--out", out, "--reader", reader)
    assert r.returncode == 1, r.stdout + r.stderr
    text = (r.stdout + r.stderr).strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert f"--reader {reader}" in text and f"prep convert --to {OTHER[version]}" in text, text
    assert not out.exists()
