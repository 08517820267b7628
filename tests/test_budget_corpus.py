"""`prep budget` about the user's corpus: coverage of the target, measured vs estimated rates, bad inputs.

Run through the real command line (`python3 -m pipeline.cli budget ...`) on the committed real-fixture and
demo manifests and on manifests scanned from real encoded (synthetic) corpora; numbers are recomputed here
from the manifests by the formulas of pipeline/budget/coverage.py, not copied from a run.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_prep

from pipeline.budget import BudgetConfig, write_report
from pipeline.budget.estimate import estimate
from pipeline.errors import PrepError
from pipeline.schemas import validate
from pipeline.synth import SynthSpec, write_synthetic
from tests.test_budget_cli import scan_to

REPO = Path(__file__).resolve().parent.parent
# relative to the repository, where the command runs: the report names them as given
G1 = Path("manifests/reference/g1_inspire_v21.manifest.json")
DEMO_NATIVE = Path("manifests/demo/native.manifest.json")
DEMO_PREPARED = Path("manifests/demo/prepared.manifest.json")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T = (700_000 * 1024, 700_000 * 2048)
DOC_RATIO = 6.15 / 2.13
RATE_2048 = 2048 / (0.00359 * 2048 + 0.25)  # node frames/s at the training batch (document model)


budget = functools.partial(run_prep, "budget", cwd=REPO)  # `prep budget ARGS` from the repository root


def strict_json(path: Path) -> dict[str, Any]:
    """report.json parsed as strict JSON: a bare NaN or Infinity fails here."""
    def refuse(token: str) -> None:
        raise AssertionError(f"{path}: non-strict JSON token {token}")

    obj: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)
    return obj


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("prep budget: error: ") and res.stderr.count("\n") == 1, res.stderr
    return res.stderr


@pytest.fixture(scope="module")
def low_bitrate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real scanned manifest of a tiny low-bitrate corpus: 1 camera 64x48, long GOP, crf 40."""
    d = tmp_path_factory.mktemp("low-bitrate")
    root = write_synthetic(d / "low", SynthSpec(version="v2.1", episodes=2, frames=30, height=48, width=64,
                                                cameras=("observation.images.cam",), gop=30, crf=40))
    return scan_to(root, d / "low.manifest.json")


@pytest.fixture(scope="module")
def intra224(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real scanned manifest of a 224x224 all-intra corpus (3 cameras, GOP 1)."""
    d = tmp_path_factory.mktemp("intra224")
    root = write_synthetic(d / "p", SynthSpec(version="v2.1", episodes=2, frames=30, height=224, width=224, gop=1))
    return scan_to(root, d / "p.manifest.json")


def test_coverage_of_the_real_fixture_manifest(tmp_path: Path) -> None:
    m = json.loads((REPO / G1).read_text())["totals"]
    res = budget("--native", G1, "--out", tmp_path)
    assert res.returncode == 0, res.stderr
    report = strict_json(tmp_path / "report.json")
    validate(report, "budget", source="report.json")
    c = report["corpus"]
    assert (c["manifest"], c["role"]) == (str(G1), "native")
    assert (c["episodes"], c["timesteps"], c["hours"]) == (m["episodes"], m["frames"], m["hours"]) == (10, 3608,
                                                                                                        m["hours"])
    assert c["frames_per_episode"] == 360.8 and c["fps"] == 30.0
    assert c["bytes"]["native"] == {"value": 33_503_853, "source": f"measured {c['manifest']} (totals.bytes.total)"}
    prepared_rate = m["gb_per_hour"] / DOC_RATIO
    assert c["bytes"]["prepared"]["value"] == pytest.approx(m["hours"] * prepared_rate * 1e9)
    assert c["bytes"]["prepared"]["source"].startswith("estimated from")
    for t, target in zip(c["targets"], T, strict=True):
        missing = target - 3608
        assert t["share"] == pytest.approx(3608 / target)
        assert t["epochs"] == pytest.approx(target / 3608)
        assert t["missing"]["timesteps"] == missing
        assert t["missing"]["hours"] == pytest.approx(missing / 30 / 3600)
        assert t["missing"]["episodes"] == pytest.approx(missing / 360.8)  # the manifest's, not the document's 90
        assert t["missing"]["storage_tb"]["native"] == pytest.approx(missing / 30 / 3600 * m["gb_per_hour"] / 1000)
        assert t["missing"]["storage_tb"]["prepared"] == pytest.approx(missing / 30 / 3600 * prepared_rate / 1000)
    days = {d["nodes"]: d for d in c["one_epoch"]["days"]}
    assert days[1]["days"] == pytest.approx(3608 / RATE_2048 / 86400)
    assert days[4]["days"] == pytest.approx(3608 / (4 * 0.9 * RATE_2048) / 86400)
    # the target's episodes follow the manifest's 360.8 frames per episode
    rows = {r["label"]: r["values"] for r in report["headline"]["rows"]}
    assert rows["episodes (T / 360.8 frames)"] == ["1.99 M", "3.97 M"]
    assert rows["days on 1 node"] == ["30.8", "61.6"]  # throughput does not depend on the corpus
    for text in ("share of the target", "0.000503 %", "0.000252 %", "198,670", "397,339", "13.4 s on 1 node"):
        assert text in res.stdout, text
    md = (tmp_path / "report.md").read_text()
    assert "## Your corpus" in md and "| missing hours | 6,637 h | 13,274 h |" in md
    assert "![Your corpus vs the target (hours, log scale)](coverage.png)" in md
    assert (tmp_path / "coverage.png").read_bytes()[:8] == PNG_MAGIC
    assert report["plots"] == ["throughput.png", "memory.png", "days.png", "storage.png", "coverage.png"]


def test_coverage_of_the_demo_manifests(tmp_path: Path) -> None:
    n = json.loads((REPO / DEMO_NATIVE).read_text())["totals"]
    p = json.loads((REPO / DEMO_PREPARED).read_text())["totals"]
    res = budget("--native", DEMO_NATIVE, "--prepared", DEMO_PREPARED, "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    report = strict_json(tmp_path / "report.json")
    c = report["corpus"]
    assert c["bytes"]["native"]["value"] == n["bytes"]["total"]
    assert c["bytes"]["prepared"] == {"value": p["bytes"]["total"], "source": "measured "
                                      "manifests/demo/prepared.manifest.json (totals.bytes.total)"}
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["prepared_ratio"]["value"] == pytest.approx(n["gb_per_hour"] / p["gb_per_hour"])
    assert inputs["prepared_ratio"]["origin"] == "measured"
    assert inputs["gb_per_hour_prepared"]["origin"] == "measured"
    for t, target in zip(c["targets"], T, strict=True):
        hours = (target - 540) / 30 / 3600
        assert t["missing"]["episodes"] == pytest.approx((target - 540) / 90)
        assert t["missing"]["storage_tb"]["prepared"] == pytest.approx(hours * p["gb_per_hour"] / 1000)
    assert report["warnings"] == [] and "warning" not in res.stderr


def test_native_alone_estimates_prepared_from_the_measured_rate(low_bitrate: Path, tmp_path: Path) -> None:
    native_rate = json.loads(low_bitrate.read_text())["totals"]["gb_per_hour"]
    assert native_rate < 2.13  # the document's prepared rate would be larger than this corpus
    res = budget("--native", low_bitrate, "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    inputs = {i["name"]: i for i in strict_json(tmp_path / "report.json")["inputs"]}
    prepared = inputs["gb_per_hour_prepared"]
    assert prepared["value"] == pytest.approx(native_rate / DOC_RATIO)
    assert prepared["value"] <= inputs["gb_per_hour_native"]["value"]
    assert prepared["origin"] == "estimated"
    assert prepared["source"] == (f"estimated from gb_per_hour_native {native_rate:.6g} (measured {low_bitrate} "
                                  "(totals.gb_per_hour)) / prepared_ratio 2.88732 (document 6.15 / 2.13)")
    assert "GB/hr, estimated: native / 2.89" in res.stdout
    md = (tmp_path / "report.md").read_text()
    assert "| `gb_per_hour_prepared` |" in md and "| estimated from gb_per_hour_native" in md
    assert "warning" not in res.stderr


def test_a_given_ratio_is_used_and_labelled(low_bitrate: Path, tmp_path: Path) -> None:
    native_rate = json.loads(low_bitrate.read_text())["totals"]["gb_per_hour"]
    res = budget("--native", low_bitrate, "--prepared-ratio", "4", "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    inputs = {i["name"]: i for i in strict_json(tmp_path / "report.json")["inputs"]}
    assert inputs["gb_per_hour_prepared"]["value"] == pytest.approx(native_rate / 4)
    assert inputs["gb_per_hour_prepared"]["source"].endswith("/ prepared_ratio 4 (cli --prepared-ratio)")


def test_prepared_manifest_alone_estimates_native(intra224: Path, tmp_path: Path) -> None:
    rate = json.loads(intra224.read_text())["totals"]["gb_per_hour"]
    report = write_report(tmp_path, None, intra224, plots=False)
    inputs = {i["name"]: i for i in report["inputs"]}
    assert inputs["gb_per_hour_native"]["value"] == pytest.approx(rate * DOC_RATIO)
    assert inputs["gb_per_hour_native"]["origin"] == "estimated"
    assert report["corpus"]["role"] == "prepared"
    assert report["corpus"]["bytes"]["native"]["source"].startswith("estimated from")
    assert report["corpus"]["bytes"]["prepared"]["source"].startswith("measured")


def test_prepared_larger_than_native_is_kept_and_warned(low_bitrate: Path, intra224: Path, tmp_path: Path) -> None:
    """All-intra 224x224 can weigh more per hour than a low-bitrate inter-coded source: said, not refused."""
    n = json.loads(low_bitrate.read_text())["totals"]["gb_per_hour"]
    p = json.loads(intra224.read_text())["totals"]["gb_per_hour"]
    assert p > n
    res = budget("--native", low_bitrate, "--prepared", intra224, "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("prep budget: warning: ")]
    assert len(warnings) == 1, res.stderr
    assert f"prepared {p:.6g} GB/hr (measured {intra224}" in warnings[0]
    assert f"larger than native {n:.6g} GB/hr (measured {low_bitrate}" in warnings[0]
    report = strict_json(tmp_path / "report.json")
    assert report["warnings"] == [warnings[0].removeprefix("prep budget: warning: ")]
    assert "## Warnings" in (tmp_path / "report.md").read_text()


def test_prepared_larger_than_native_by_hand_is_warned(tmp_path: Path) -> None:
    res = budget("--gb-per-hour-native", "1", "--gb-per-hour-prepared", "2", "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    assert ("prep budget: warning: prepared 2 GB/hr (cli --gb-per-hour-prepared) is larger than native 1 GB/hr "
            "(cli --gb-per-hour-native), 2x") in res.stderr
    assert "prepared_ratio 2.88732 (document 6.15 / 2.13) is not used" not in res.stdout  # default: not a note
    inputs = {i["name"]: i for i in strict_json(tmp_path / "report.json")["inputs"]}
    assert inputs["prepared_ratio"]["value"] == 0.5 and inputs["prepared_ratio"]["origin"] == "estimated"


def test_cli_native_rate_alone_estimates_prepared(tmp_path: Path) -> None:
    """Consistent without a manifest too: a native rate given by hand carries the prepared one with it."""
    res = budget("--gb-per-hour-native", "0.1", "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    inputs = {i["name"]: i for i in strict_json(tmp_path / "report.json")["inputs"]}
    assert inputs["gb_per_hour_prepared"]["value"] == pytest.approx(0.1 / DOC_RATIO)
    assert strict_json(tmp_path / "report.json")["corpus"] is None
    assert "No manifest given, so nothing here is about your data" in (tmp_path / "report.md").read_text()


def test_no_manifest_keeps_the_documents_figures_and_no_corpus(tmp_path: Path) -> None:
    res = budget("--out", tmp_path)
    assert res.returncode == 0, res.stderr
    report = strict_json(tmp_path / "report.json")
    assert report["corpus"] is None and report["warnings"] == []
    assert "coverage.png" not in report["plots"] and not (tmp_path / "coverage.png").exists()
    assert "your corpus" not in res.stdout
    rows = {r["label"]: r for r in report["headline"]["rows"]}
    assert rows["storage, prepared"]["values"] == ["14.1 TB", "28.3 TB"]
    assert rows["storage, prepared"]["note"] == "2.13 GB/hr, document default"


def test_corpus_bigger_than_one_target(tmp_path: Path) -> None:
    """T = 1 x 1024 and 1 x 8192 timesteps against 3,608: the first is covered (nothing missing), not the second."""
    res = budget("--native", G1, "--pi0-steps", "1", "--pi0-batch", "1024,8192", "--train-batch", "1024",
                 "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    small, big = strict_json(tmp_path / "report.json")["corpus"]["targets"]
    assert small["share"] == pytest.approx(3608 / 1024) and small["missing"]["hours"] == 0
    assert small["epochs"] == pytest.approx(1024 / 3608)
    assert big["missing"]["timesteps"] == 8192 - 3608
    assert "enough for the smaller target, not for the larger one" in (tmp_path / "report.md").read_text()


def test_fps_set_by_hand_is_noted(tmp_path: Path) -> None:
    res = budget("--native", G1, "--fps", "50", "--out", tmp_path, "--no-plots")
    assert res.returncode == 0, res.stderr
    report = strict_json(tmp_path / "report.json")
    assert any(n.startswith("fps 50 (cli --fps) differs from the corpus's 30") for n in report["notes"])
    t = report["corpus"]["targets"][0]
    assert t["missing"]["hours"] == pytest.approx((T[0] - 3608) / 50 / 3600)


def _edit(path: Path, dest: Path, where: str, value: Any) -> Path:
    obj = json.loads(path.read_text())
    keys = where.split(".")
    node = obj
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    dest.write_text(json.dumps(obj), encoding="utf-8")  # json.dumps writes NaN / Infinity as bare tokens
    return dest


@pytest.mark.parametrize(("where", "value", "message"), [
    ("totals.gb_per_hour", math.nan, "at totals/gb_per_hour: nan "),
    ("totals.gb_per_hour", math.inf, "at totals/gb_per_hour: inf "),
    ("totals.gb_per_hour", -1.0, "at totals/gb_per_hour: -1.0 "),
    ("totals.gb_per_hour", 0.0, "totals.gb_per_hour = 0.0: a native manifest must measure a positive"),
    ("totals.hours", math.nan, "at totals/hours: nan "),
    ("dataset.fps", 0, "at dataset/fps: 0 "),
    ("dataset.fps", math.nan, "at dataset/fps: nan "),
    ("totals.frames_per_episode.mean", -math.inf, "at totals/frames_per_episode/mean: -inf "),
    ("totals.episodes", 0, "totals.episodes = 0: a native manifest"),
])
def test_bad_manifest_numbers_exit_2_with_one_line(where: str, value: Any, message: str, tmp_path: Path) -> None:
    bad = _edit(REPO / G1, tmp_path / "bad.manifest.json", where, value)
    err = one_error_line(budget("--native", bad, "--out", tmp_path / "r"))
    assert f"error: {bad}: " in err and message in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--fps", "nan"], "fps (--fps): expected a finite number, got 'nan'"),
    (["--gb-per-hour-native", "inf"], "gb_per_hour_native (--gb-per-hour-native): expected a finite number"),
    (["--gb-per-hour-prepared", "-1"], "gb_per_hour_prepared = -1 (from cli --gb-per-hour-prepared): must be positive"),
    (["--prepared-ratio", "0"], "prepared_ratio = 0 (from cli --prepared-ratio): must be positive"),
    (["--anchor", "B=64,wall=nan"], "anchor wall (--anchor): expected a finite number"),
    (["--pi0-steps", "1" + "0" * 30], "pi0_steps (--pi0-steps): '1000000000000000000000000000000' is too large"),
    (["--fps", "1e-310"], "the model gives targets/0/hours = inf"),
    (["--mem-per-sample-gb", "1e-320"], "mem_per_sample_gb = 9.99989e-321 (from cli --mem-per-sample-gb): is too "
                                        "small"),
])
def test_bad_cli_numbers_exit_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    err = one_error_line(budget(*args, "--native", G1, "--out", tmp_path / "r"))
    assert message in err, err
    assert not (tmp_path / "r").exists()


def test_bad_config_file_number_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "b.toml"
    cfg.write_text("[corpus]\ngb_per_hour_prepared = nan\n", encoding="utf-8")
    err = one_error_line(budget("--config", cfg, "--out", tmp_path / "r"))
    assert f"gb_per_hour_prepared (config {cfg}): expected a finite number, got nan" in err


@pytest.mark.parametrize(("name", "value"), [("fps", math.nan), ("gb_per_hour_prepared", math.inf),
                                             ("prepared_ratio", -math.inf), ("efficiency", math.nan),
                                             ("pi0_steps", 10**400), ("pi0_batch", (1024, math.nan))])
def test_the_model_refuses_non_finite_values(name: str, value: Any) -> None:
    """Python callers bypass the parser: validation refuses the same values, in one line."""
    cfg = BudgetConfig().with_values({name: value}, "cli")
    with pytest.raises(PrepError, match=rf"^{name} = .* \(from cli\): expected a finite number") as info:
        estimate(cfg)
    assert "\n" not in str(info.value)


def test_report_schema_rejects_non_finite_numbers(tmp_path: Path) -> None:
    report = write_report(tmp_path, REPO / G1, None, plots=False)
    validate(report, "budget", source="ok")
    for where, edit in [
        ("targets/0/hours", lambda r: r["targets"][0].__setitem__("hours", math.nan)),
        ("corpus/targets/0/share", lambda r: r["corpus"]["targets"][0].__setitem__("share", math.nan)),
        ("corpus/bytes/native/value", lambda r: r["corpus"]["bytes"]["native"].__setitem__("value", math.inf)),
        ("inputs/3/value", lambda r: r["inputs"][3].__setitem__("value", math.nan)),
        ("inputs/5/source", lambda r: r["inputs"][5].__setitem__("source", "guessed")),
    ]:
        r = copy.deepcopy(report)
        edit(r)
        with pytest.raises(PrepError, match=f"budget.schema.json at {where}"):
            validate(r, "budget", source="x")


def test_manifest_schema_still_takes_an_empty_scan(tmp_path: Path) -> None:
    """Finite, not positive: a scan whose every episode failed writes 0 hours and 0 GB/hr, and that stays valid."""
    obj = json.loads((REPO / G1).read_text())
    obj["totals"].update(episodes=0, frames=0, seconds=0.0, hours=0.0, gb_per_hour=0.0, kb_per_frame=0.0)
    obj["totals"]["frames_per_episode"] = {"mean": 0.0, "min": 0, "max": 0}
    validate(obj, "manifest", source="empty")
    obj["totals"]["video_share"] = math.nan
    with pytest.raises(PrepError, match="at totals/video_share: nan"):
        validate(obj, "manifest", source="x")


def test_every_plot_has_labelled_axes_and_values() -> None:
    from pipeline.budget.coverage import coverage, holdings
    from pipeline.budget.measured import read_figures
    from pipeline.budget.plots import PLOTS
    from pipeline.budget.plots import coverage as coverage_plot

    cfg = BudgetConfig()
    est = estimate(cfg)
    nat = read_figures(REPO / G1, "native")
    held = holdings(nat, None, cfg)
    assert held is not None
    figures = {name: draw(cfg, est) for name, draw in PLOTS.items()}
    figures["coverage.png"] = coverage_plot(cfg, est, coverage(held, est, cfg))
    for name, fig in figures.items():
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), name
        assert ax.texts, f"{name}: no value is written on the plot"
    cov_ax = figures["coverage.png"].axes[0]
    assert cov_ax.get_xscale() == "log"
    texts = " ".join(t.get_text() for t in cov_ax.texts)
    assert "0.0334 h" in texts and "6,637 h" in texts and "13,274 h" in texts and "0.000503 %" in texts


def test_plot_legends_cover_no_line_and_the_coverage_axis_fits_its_bars() -> None:
    """throughput.png's legend is outside the axes (inside, it covered the memory-limit line); coverage.png's
    log axis ends just after the longest bar's label (it ran to 1e8 h with its right half empty), every label
    inside the axes."""
    from pipeline.budget.coverage import coverage, holdings
    from pipeline.budget.measured import read_figures
    from pipeline.budget.plots import coverage as coverage_plot
    from pipeline.budget.plots import throughput

    cfg = BudgetConfig()
    est = estimate(cfg)
    fig = throughput(cfg, est)
    fig.draw_without_rendering()
    ax = fig.axes[0]
    assert any(line.get_label().startswith("memory limit") for line in ax.lines)
    legends = [*fig.legends, *filter(None, [ax.get_legend()])]
    assert legends and all(not lg.get_window_extent().overlaps(ax.get_window_extent()) for lg in legends)

    for manifest in (REPO / G1, DEMO_NATIVE):
        held = holdings(read_figures(manifest if manifest.is_absolute() else REPO / manifest, "native"), None, cfg)
        assert held is not None
        fig = coverage_plot(cfg, est, coverage(held, est, cfg))
        fig.draw_without_rendering()
        ax = fig.axes[0]
        box = ax.get_window_extent()
        right = max(t.get_window_extent().x1 for t in ax.texts)
        assert right <= box.x1, f"{manifest}: a label runs past the axes ({right} > {box.x1})"
        assert box.x1 - right < 0.15 * box.width, f"{manifest}: {box.x1 - right:.0f} px empty on the right"


def test_the_command_starts_without_heavy_imports() -> None:
    code = ("import sys, pipeline.commands.budget; heavy = {'numpy', 'matplotlib', 'pyarrow', 'jsonschema'} "
            "& set(sys.modules); assert not heavy, heavy")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("x")
    err = one_error_line(budget("--out", target, "--no-plots"))
    assert f"--out {target}: exists and is not a folder" in err
