"""`prep budget` end to end: files written, headline printed, measured manifests, refusals, schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_prep

from pipeline.budget import BudgetConfig, write_report
from pipeline.cli import main
from pipeline.errors import PrepError
from pipeline.jobs.scan import scan_dataset
from pipeline.runner import RunConfig, open_engine
from pipeline.schemas import validate
from pipeline.synth import SynthSpec, write_synthetic

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def scan_to(root: Path, out: Path) -> Path:
    """A real `prep scan` manifest of `root`, scanned in-process (no cluster)."""
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        scan_dataset(root, out, engine)
    return out


@pytest.fixture(scope="module")
def manifests(synth_v21: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Native: the 480x640 synthetic corpus; prepared: a 224x224 all-intra synthetic corpus of 2 episodes."""
    d = tmp_path_factory.mktemp("budget-manifests")
    prepared_root = write_synthetic(d / "prepared", SynthSpec(version="v2.1", episodes=2, height=224, width=224,
                                                              gop=1))
    return scan_to(synth_v21, d / "native.manifest.json"), scan_to(prepared_root, d / "prepared.manifest.json")


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["budget", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_defaults_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--out", str(tmp_path))
    assert code == 0, err
    for figure in ("0.717 B", "1.434 B", "7.96 M", "15.9 M", "6,637 h", "13,274 h", "40.8 TB", "81.6 TB",
                   "14.1 TB", "28.3 TB", "30.8", "61.6", "8.6", "17.1", "269.4", "133.4", "64.6 GB", "730"):
        assert figure in out, figure
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"report.md", "report.json", "throughput.png", "memory.png", "days.png", "storage.png"}
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert png.stat().st_size > 10_000
    report = json.loads((tmp_path / "report.json").read_text())
    validate(report, "budget", source="report.json")
    assert all(i["source"] == "document default" and i["origin"] == "document default" for i in report["inputs"])
    assert report["manifests"] == {"native": None, "prepared": None}
    md = (tmp_path / "report.md").read_text()
    assert "## Inputs" in md and "## Landscape" in md and "![Days to the target vs nodes](days.png)" in md
    assert "No manifest given" in md


def test_installed_entry_point(tmp_path: Path) -> None:
    res = run_prep("budget", "--out", tmp_path, "--no-plots", "--nodes", "1,4", "--anchor", "B=64,wall=0.48",
                   inprocess=False)  # the module's entry point, as a process
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    a = (0.48 - 0.25) / 64  # the document's anchor with c = 0.25 s kept
    assert report["training"]["frames_per_s"] == pytest.approx(2048 / (a * 2048 + 0.25))
    assert f"{2048 / (a * 2048 + 0.25):.1f} at global batch 2048" in res.stdout
    assert report["plots"] == []
    assert report["step_model"]["method"] == "one anchor, c kept"
    assert [d["nodes"] for d in report["targets"][0]["days"]] == [1, 4]


def test_cli_overrides_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "b.toml"
    cfg.write_text("[target]\npi0_batch = [512]\n[throughput]\ntrain_batch = 1024\n", encoding="utf-8")
    code, _out, err = run_cli(capsys, "--out", str(tmp_path / "r"), "--config", str(cfg), "--train-batch", "512",
                             "--no-plots")
    assert code == 0, err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["train_batch"]["value"] == 512 and inputs["train_batch"]["source"] == "cli --train-batch"
    assert inputs["pi0_batch"]["value"] == [512] and inputs["pi0_batch"]["source"] == f"config {cfg}"
    assert report["headline"]["columns"] == ["pi0 batch 512"]
    assert report["targets"][0]["timesteps"] == 700_000 * 512
    assert report["training"]["global_batch"] == 512


def test_anchors_refit_the_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--out", str(tmp_path), "--no-plots",
                             "--anchor", "B=64,wall=0.5", "--anchor", "B=2048,wall=8.0")
    assert code == 0, err
    s = json.loads((tmp_path / "report.json").read_text())["step_model"]
    a = (8.0 - 0.5) / (2048 - 64)
    assert s["method"] == "least squares"
    assert s["a_s_per_sample"] == pytest.approx(a)
    assert s["c_s"] == pytest.approx(0.5 - a * 64)
    assert [x["residual_s"] for x in s["anchors"]] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert f"{2048 / 8.0:.1f} at global batch 2048" in out


@pytest.mark.slow
def test_measured_manifests_calibrate_storage(manifests: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    native, prepared = manifests
    n = json.loads(native.read_text())["totals"]
    p = json.loads(prepared.read_text())["totals"]
    assert p["gb_per_hour"] < n["gb_per_hour"]  # 224x224 is smaller than 480x640
    code, out, err = run_cli(capsys, "--native", str(native), "--prepared", str(prepared), "--out", str(tmp_path))
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    validate(report, "budget", source="report.json")
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["gb_per_hour_native"]["value"] == n["gb_per_hour"]
    assert inputs["gb_per_hour_native"]["source"] == f"measured {native} (totals.gb_per_hour)"
    assert inputs["gb_per_hour_prepared"]["value"] == p["gb_per_hour"]
    assert inputs["gb_per_hour_prepared"]["source"] == f"measured {prepared} (totals.gb_per_hour)"
    assert inputs["frames_per_episode"]["value"] == n["frames_per_episode"]["mean"]
    assert inputs["frames_per_episode"]["source"].startswith(f"measured {native}")
    assert inputs["fps"]["source"] == f"measured {native} (dataset.fps)"
    for t in report["targets"]:
        assert t["storage_tb"]["native"] == pytest.approx(t["hours"] * n["gb_per_hour"] / 1000)
        assert t["storage_tb"]["prepared"] == pytest.approx(t["hours"] * p["gb_per_hour"] / 1000)
        assert t["episodes"] == pytest.approx(t["timesteps"] / n["frames_per_episode"]["mean"])
    assert report["manifests"]["native"]["path"] == str(native)
    assert report["manifests"]["prepared"]["gb_per_hour"] == p["gb_per_hour"]
    assert f"{n['gb_per_hour']:.6g} GB/hr, measured" in out
    md = (tmp_path / "report.md").read_text()
    assert f"measured {native} (totals.gb_per_hour)" in md
    assert f"measured {prepared} (totals.gb_per_hour)" in md
    assert "Measured manifests" in md and "No manifest given" not in md
    # the two synthetic corpora hold different frame counts: the report says so
    assert any("different frame counts" in note for note in report["notes"])


@pytest.mark.slow
def test_explicit_value_beats_the_manifest(manifests: tuple[Path, Path], tmp_path: Path) -> None:
    native, _ = manifests
    cfg = BudgetConfig().with_values({"gb_per_hour_native": 6.15}, "cli")
    report = write_report(tmp_path, native, None, cfg, plots=False)
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["gb_per_hour_native"] == {**inputs["gb_per_hour_native"], "value": 6.15, "source": "cli"}
    assert inputs["gb_per_hour_prepared"]["value"] == pytest.approx(6.15 / (6.15 / 2.13))
    assert inputs["gb_per_hour_prepared"]["source"].startswith("estimated from gb_per_hour_native 6.15 (cli)")
    assert inputs["frames_per_episode"]["source"].startswith("measured")
    assert any("overridden by cli" in note for note in report["notes"])


def bad_manifest(tmp_path: Path, native: Path, edit: Any) -> Path:
    obj = json.loads(native.read_text())
    edit(obj)
    out = tmp_path / "bad.manifest.json"
    out.write_text(json.dumps(obj), encoding="utf-8")
    return out


@pytest.mark.slow
def test_manifest_failing_its_schema_is_refused(manifests: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = bad_manifest(tmp_path, manifests[0], lambda m: m["totals"].__setitem__("gb_per_hour", "fast"))
    code, _out, err = run_cli(capsys, "--native", str(bad), "--out", str(tmp_path / "r"))
    assert code == 2
    assert err.count("\n") == 1
    assert "does not match schemas/manifest.schema.json at totals/gb_per_hour" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_empty_manifest_is_refused(manifests: tuple[Path, Path], tmp_path: Path) -> None:
    def empty(m: dict[str, Any]) -> None:
        m["totals"].update(episodes=0, frames=0, hours=0.0, gb_per_hour=0.0)

    with pytest.raises(PrepError, match=r"totals\.episodes = 0: a prepared manifest must measure a positive"):
        write_report(tmp_path, None, bad_manifest(tmp_path, manifests[0], empty))


def test_missing_manifest_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--native", str(tmp_path / "none.json"), "--out", str(tmp_path))
    assert code == 2 and "manifest not found" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--train-batch", "0"], "train_batch = 0 (from cli --train-batch): must be a positive integer"),
    (["--train-batch", "-64"], "must be a positive integer"),
    (["--pi0-batch", "1024,-2048"], "every value must be a positive integer"),
    (["--efficiency", "0"], "must be in (0, 1]"),
    (["--efficiency", "1.5"], "must be in (0, 1]"),
    (["--anchor", "B=64,wall=0.2"], "non-positive step-time slope"),
    (["--anchor", "B=64,wall=0.5", "--anchor", "B=2048,wall=0.4"], "non-positive step-time slope"),
    (["--anchor", "wall=0.48"], "needs both"),
    (["--fps", "thirty"], "expected a number"),
])
def test_bad_parameters_one_line(args: list[str], message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--out", str(tmp_path / "r"), *args)
    assert code == 2
    assert err.startswith("prep budget: error: ")
    assert err.count("\n") == 1, err
    assert message in err
    assert out == ""
    assert not (tmp_path / "r").exists()


def test_rerun_overwrites_in_place(tmp_path: Path) -> None:
    first = write_report(tmp_path, plots=False)
    second = write_report(tmp_path, plots=False)
    assert {k: v for k, v in first.items() if k != "created_utc"} == {
        k: v for k, v in second.items() if k != "created_utc"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]


def test_report_schema_rejects_broken_reports(tmp_path: Path) -> None:
    report = write_report(tmp_path, plots=False)
    validate(report, "budget", source="ok")
    broken: list[tuple[str, Any]] = [
        ("targets", lambda r: r["targets"][0].__setitem__("timesteps", -1)),
        ("inputs", lambda r: r["inputs"][0].__setitem__("source", "guessed")),
        ("landscape", lambda r: r["landscape"]["runs"][0]["batch"].__setitem__("value", 1024)),
        ("step_model", lambda r: r["step_model"].__setitem__("a_s_per_sample", 0)),
        ("(root)", lambda r: r.pop("headline")),
    ]
    for where, edit in broken:
        r = copy.deepcopy(report)
        edit(r)
        with pytest.raises(PrepError, match="does not match schemas/budget.schema.json at " + where.replace(
                "(", r"\(").replace(")", r"\)")):
            validate(r, "budget", source="x")
