"""`prep bench dataloader` end to end in a short mode (CI smoke: no timed assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.commands.bench import parse_sweep
from pipeline.errors import PrepError
from pipeline.schemas import validate
from pipeline.synth import SynthSpec, write_synthetic

SHORT = ["--batch", "4", "--workers", "1", "--steps", "2", "--ceiling-steps", "2", "--warmup", "1",
         "--step-time", "0.01", "--horizon", "5"]


@pytest.fixture(scope="module")
def tiny224(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v3.0", episodes=2, frames=12, height=224, width=224, gop=1)
    return write_synthetic(tmp_path_factory.mktemp("bench") / "tiny224", spec)


@pytest.fixture(scope="module")
def tiny_native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v2.1", episodes=1, frames=12, height=120, width=160, gop=6, cameras=("cam",))
    return write_synthetic(tmp_path_factory.mktemp("bench") / "tiny_native", spec)


def test_importing_the_command_does_not_import_torch() -> None:
    code = "import sys, pipeline.cli, pipeline.commands.bench; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_smoke(tiny224: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    out = tmp_path / "out"
    assert main(["bench", "dataloader", str(tiny224), *SHORT, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "data_time p95 = " in printed and "per-GPU batch 4 with 1 worker:" in printed
    for head in ("  need      ", "  ceiling   ", "  headroom  ", "  p95       ", "  limit     "):
        assert head in printed, head
    doc = json.loads((out / "dataloader.json").read_text())
    validate(doc, "bench")
    (run,) = doc["runs"]
    assert run["errors"] == 0 and run["samples"] == 4 * (1 + 2 + 1 + 2)
    assert run["ceiling"]["samples_per_s"] > 0 and run["decode_ms_per_frame"] > 0
    assert len(run["train"]["data_time_per_step"]) == 2
    assert (out / "dataloader.png").stat().st_size > 0
    assert len(doc["host"]["loadavg_start"]) == 3


def test_sweep_and_compare(tiny224: Path, tiny_native: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    out = tmp_path / "out"
    args = ["bench", "dataloader", str(tiny224), *SHORT, "--sweep", "workers=0,1", "batch=2,4",
            "--compare", str(tiny_native), "--compare-label", "native", "--out", str(out), "--no-plot"]
    assert main(args) == 0
    doc = json.loads((out / "dataloader.json").read_text())
    validate(doc, "bench")
    combos = {(r["label"], r["workers"], r["batch"]) for r in doc["runs"]}
    assert combos == {(label, w, b) for label in ("tiny224", "native") for w in (0, 1) for b in (2, 4)}
    assert len(doc["min_workers"]) == 4 and doc["plots"] == []


def test_auto_step_time_follows_the_budget_model(tiny224: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    from pipeline.loader.bench import auto_step_s

    assert auto_step_s(256) == pytest.approx(0.00359 * 2048 + 0.25)
    args = ["bench", "dataloader", str(tiny224), "--batch", "2", "--gpus", "1", "--workers", "0", "--steps", "1",
            "--ceiling-steps", "1", "--warmup", "0", "--out", str(tmp_path), "--no-plot"]
    assert main(args) == 0
    (run,) = json.loads((tmp_path / "dataloader.json").read_text())["runs"]
    assert run["step_source"] == "auto" and run["step_s"] == pytest.approx(0.00359 * 2 + 0.25)


def test_stress_short(tiny224: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    args = ["bench", "dataloader", str(tiny224), "--batch", "4", "--workers", "1", "--warmup", "1",
            "--stress", "0.05", "--stress-window", "0.5", "--out", str(tmp_path)]
    code = main(args)
    doc = json.loads((tmp_path / "dataloader-stress.json").read_text())
    validate(doc, "bench")
    stress = doc["stress"]
    assert code == (0 if stress["passed"] else 1)  # pass/fail depends on timing noise; the wiring does not
    assert stress["errors"] == 0 and len(stress["windows"]) >= 3
    assert "stress 0.05 min, 1 workers" in capsys.readouterr().out


def test_stress_assessment() -> None:
    from pipeline.loader.stress import assess

    def windows(sps: list[float], rss: list[float]) -> list[dict[str, float]]:
        return [{"t_s": 60.0 * i, "samples_per_s": s, "rss_mb_sum": r, "rss_mb_max": r}
                for i, (s, r) in enumerate(zip(sps, rss, strict=True))]

    flat = assess(windows([100, 101, 99, 100, 100], [500] * 5), 0, [], 60)
    assert flat["passed"] and flat["reasons"] == []
    drop = assess(windows([100, 95, 90, 85, 80], [500] * 5), 0, [], 60)
    assert not drop["passed"] and "drifts down" in drop["reasons"][0]
    assert drop["samples_per_s_slope_per_min"] == pytest.approx(-5.0)
    leak = assess(windows([100] * 5, [500, 540, 580, 620, 660]), 0, [], 60)
    assert not leak["passed"] and "RSS grows" in leak["reasons"][0]
    assert leak["rss_slope_mb_per_min"] == pytest.approx(40.0)
    errs = assess(windows([100] * 5, [500] * 5), 2, ["item 3: boom"], 60)
    assert errs["reasons"] == ["2 sample(s) failed, first: item 3: boom"]
    short = assess(windows([100], [500]), 0, [], 60)
    assert not short["passed"] and "only 1 window" in short["reasons"][0]


def test_failed_samples_fail_the_command(tiny224: Path, tmp_path: Path, copy_dataset: Callable[[Path, str], Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    broken = copy_dataset(tiny224, "broken")
    video = next(broken.glob("videos/*/chunk-000/file-000.mp4"))
    video.write_bytes(b"not a video")
    args = ["bench", "dataloader", str(broken), *SHORT, "--out", str(tmp_path), "--no-plot"]
    assert main(args) == 1
    doc = json.loads((tmp_path / "dataloader.json").read_text())
    validate(doc, "bench")
    assert doc["ok"] is False and doc["runs"][0]["errors"] > 0
    assert "cannot open" in doc["runs"][0]["error_examples"][0]
    assert "ERROR" in capsys.readouterr().out


def test_errors_are_one_line(tiny224: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "dataloader", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "not a LeRobot dataset" in capsys.readouterr().err
    if "lerobot" not in sys.modules:
        try:
            import lerobot  # noqa: F401
        except ImportError:
            assert main(["bench", "dataloader", str(tiny224), *SHORT, "--loader", "lerobot",
                         "--out", str(tmp_path)]) == 2
            assert "needs the `lerobot` package" in capsys.readouterr().err
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["bench", "dataloader", str(tiny224), "--out", str(tmp_path)]) == 2
    assert "needs PyTorch" in capsys.readouterr().err


def test_parse_sweep() -> None:
    assert parse_sweep(["workers=1,2,4", "batch=64,256"]) == {"workers": [1, 2, 4], "batch": [64, 256]}
    assert parse_sweep(None) == {}
    for bad in (["workers"], ["gpus=1"], ["batch=a"], ["batch=0"], ["workers=-1"]):
        with pytest.raises(PrepError):
            parse_sweep(bad)


def _record(*, batch: int = 256, step_s: float = 7.6, ceiling: float | None = 580.0, p50: float = 0.004,
            p95: float = 0.009, errors: int = 0, per_cpu: float | None = 290.0) -> dict[str, object]:
    return {"batch": batch, "step_s": step_s, "cameras": 3, "device": "cpu", "workers": 2, "errors": errors,
            "threshold_s": 0.013, "label": "x", "verdict": "data_time p95 = ...",
            "ceiling": {"samples_per_s": ceiling, "samples_per_cpu_s": per_cpu},
            "train": {"steps": 10, "data_time_s": {"p50": p50, "p95": p95, "max": p95 * 1.2}}}


@pytest.mark.parametrize(("kw", "starts"), [
    ({}, "nothing: the loader has 17.2x the samples/s"),
    ({"ceiling": 9.9, "p50": 36.5, "p95": 44.6, "per_cpu": 10.0}, "decode throughput: the workers deliver 9.9 "
     "samples/s, the loop needs 33.7; at 10.0 samples per worker CPU-second that takes about 4 busy cores"),
    ({"ceiling": 20.0, "p50": 3.0, "p95": 4.0, "per_cpu": 90.0}, "decode throughput: the workers deliver 20.0 "
     "samples/s, the loop needs 33.7; at 90.0 samples per worker CPU-second that is 1 busy core, no more than "
     "the 2 workers it has, so the workers wait for I/O or for a CPU (load average 3.5 on 2 cores)"),
    ({"p50": 0.02, "p95": 0.027}, "a cost paid on every batch, not decoding (the workers are 17.2x faster than "
     "needed): even the median wait (0.0200 s) is over the threshold"),
    ({"ceiling": 44.0, "p50": 0.009, "p95": 0.33}, "thin headroom: the workers are only 1.31x faster"),
    ({"p50": 0.004, "p95": 0.021}, "occasional slow waits, not throughput: the median wait (0.0040 s)"),
    ({"errors": 3}, "failed samples: 3 raised"),
], ids=["keeps-up", "decode-bound", "decode-not-cpu-bound", "per-batch", "thin", "stalls", "errors"])
def test_verdict_names_need_ceiling_headroom_and_the_limit(kw: dict[str, float], starts: str) -> None:
    from pipeline.loader.verdict import explain, explain_lines

    run = _record(**kw)
    e = explain(run, load=3.5, cores=2)
    assert e["need_samples_per_s"] == pytest.approx(256 / 7.6)
    if run["ceiling"]["samples_per_s"]:
        assert e["headroom"] == pytest.approx(run["ceiling"]["samples_per_s"] / (256 / 7.6))
    assert e["limit"].startswith(starts), e["limit"]
    if kw.get("p95", 0) > 0.013 and kw.get("ceiling", 580) > 34:
        assert "load average 3.5 on 2 cores" in e["limit"]
    run["explain"] = e
    lines = explain_lines(run)
    assert lines[1].startswith("  need      33.7 samples/s (batch 256 per 7.60 s step)")
    assert lines[4].startswith(f"  p95       {run['train']['data_time_s']['p95']:.4f} s vs threshold 0.013 s")


def test_plot_axes_are_labelled_with_values(tmp_path: Path) -> None:
    """The data_time panel is a log axis whose tick labels are numbers (not blank), every point carries its
    value, and the ceiling panel shows the need line."""
    import matplotlib  # a dependency of prep: never skipped

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.loader import plot

    captured: list[object] = []
    real_close = plt.close
    runs = []
    for w, p95, sps in ((1, 0.021, 300.0), (2, 0.009, 580.0)):
        r = _record(p95=p95, ceiling=sps)
        r.update({"workers": w, "loader": "prep", "label": "tiny"})
        runs.append(r)
    try:
        plt.close = lambda fig=None: captured.append(fig)  # type: ignore[assignment]
        plot.plot_runs(runs, tmp_path / "p.png", 0.013)
    finally:
        plt.close = real_close
    fig = captured[0]
    ax_dt, ax_sps = fig.axes  # type: ignore[attr-defined]
    fig.canvas.draw()  # type: ignore[attr-defined]
    for ax in (ax_dt, ax_sps):
        assert ax.get_xlabel() and ax.get_ylabel()
        labels = [t.get_text() for t in ax.get_yticklabels(minor=False) + ax.get_yticklabels(minor=True)]
        visible = [t for t in labels if t]
        assert visible and all(float(t) > 0 for t in visible), labels
    notes = {t.get_text() for t in ax_dt.texts}
    assert {"0.021 s", "0.009 s"} <= notes
    legend = fig.legends[0]  # type: ignore[attr-defined]
    assert any("need 33.68 samples/s (batch 256 / 7.6 s step)" in t.get_text() for t in legend.get_texts())
    # the legend covers no panel, so neither the need line nor the threshold (issue 27: it covered the need)
    box = legend.get_window_extent()
    for ax in (ax_dt, ax_sps):
        assert not box.overlaps(ax.get_window_extent()), (box, ax.get_window_extent())
    real_close(fig)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
