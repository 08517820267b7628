"""`prep budget` model: the sizing document's figures (golden), the step-time fit, memory limits."""

from __future__ import annotations

import pytest

from pipeline.budget import BudgetConfig, headline_text
from pipeline.budget.estimate import days_at, estimate
from pipeline.budget.model import Anchor, MemoryModel, StepModel, fit_step_model
from pipeline.budget.render import render_markdown


def test_golden_figures_of_the_sizing_document() -> None:
    cfg = BudgetConfig()
    est = estimate(cfg)
    by_batch = {r.global_batch: r for r in est.throughput}
    assert round(by_batch[2048].frames_per_s) == 269
    assert round(by_batch[64].frames_per_s) == 133
    low, high = est.targets
    assert (low.pi0_batch, high.pi0_batch) == (1024, 2048)
    assert low.timesteps == 716_800_000
    assert high.timesteps == 1_433_600_000
    assert round(low.timesteps / 1e9, 3) == 0.717
    assert round(high.timesteps / 1e9, 3) == 1.434
    assert round(days_at(low, 1, cfg, est.train.frames_per_s).ideal, 1) == 30.8
    assert round(days_at(high, 1, cfg, est.train.frames_per_s).ideal, 1) == 61.6
    assert round(days_at(low, 4, cfg, est.train.frames_per_s).efficiency, 1) == 8.6
    assert round(days_at(high, 4, cfg, est.train.frames_per_s).efficiency, 1) == 17.1
    assert round(low.episodes / 1e6, 2) == 7.96
    assert round(high.episodes / 1e6, 1) == 15.9
    assert round(low.hours) == 6637
    assert round(high.hours) == 13274
    assert round(low.storage_native_tb, 1) == 40.8
    assert round(high.storage_native_tb, 1) == 81.6
    assert round(low.storage_prepared_tb, 1) == 14.1
    assert round(high.storage_prepared_tb, 1) == 28.3
    assert est.train.per_gpu_batch == 256
    assert est.train.memory_gb_per_gpu == pytest.approx(64.6)
    assert est.max_per_gpu_batch == 730
    assert est.max_global_batch == 5840


def test_golden_figures_as_printed() -> None:
    from pipeline.budget.landscape import load_landscape
    from pipeline.budget.report import ReportInputs, build_report

    cfg = BudgetConfig()
    report = build_report(ReportInputs(cfg, estimate(cfg), None, None, load_landscape(), (), ()))
    rows = {r["label"]: r["values"] for r in report["headline"]["rows"]}
    assert rows["timesteps T = steps x batch"] == ["0.717 B", "1.434 B"]
    assert rows["episodes (T / 90 frames)"] == ["7.96 M", "15.9 M"]
    assert rows["hours (T / 30 fps / 3600)"] == ["6,637 h", "13,274 h"]
    assert rows["storage, native"] == ["40.8 TB", "81.6 TB"]
    assert rows["storage, prepared"] == ["14.1 TB", "28.3 TB"]
    assert rows["days on 1 node"] == ["30.8", "61.6"]
    assert rows["days on 4 nodes at 90%"] == ["8.6", "17.1"]
    text = headline_text(report)
    assert "269.4 at global batch 2048" in text and "133.4 at global batch 64" in text
    assert "64.6 GB per GPU at 256 samples/GPU" in text and "largest per-GPU batch 730" in text
    md = render_markdown(report)
    assert "floor((112 - 39) / 0.1) = 730" in md
    assert "2048 / (0.00359 * 2048 + 0.25) = 2048 / 7.602 = 269.4 frames/s" in md


def test_headline_follows_the_inputs() -> None:
    """Not a constant table: doubling pi0's steps doubles T, hours, storage and days."""
    base = estimate(BudgetConfig()).targets[1]
    cfg = BudgetConfig(pi0_steps=1_400_000)
    est = estimate(cfg)
    t = est.targets[1]
    assert t.timesteps == 2 * base.timesteps
    assert t.storage_native_tb == pytest.approx(2 * base.storage_native_tb)
    assert days_at(t, 4, cfg, est.train.frames_per_s).efficiency == pytest.approx(
        2 * days_at(base, 4, cfg, est.train.frames_per_s).efficiency)


def test_efficiency_applies_only_across_nodes() -> None:
    cfg = BudgetConfig(efficiency=0.5)
    est = estimate(cfg)
    d1 = days_at(est.targets[0], 1, cfg, est.train.frames_per_s)
    d2 = days_at(est.targets[0], 2, cfg, est.train.frames_per_s)
    assert d1.efficiency == d1.ideal
    assert d2.efficiency == pytest.approx(d1.ideal)  # 2 nodes at 50% = 1 node
    assert d2.efficiency_high < d2.efficiency_low  # higher efficiency, fewer days


def test_no_anchor_keeps_the_default() -> None:
    fit = fit_step_model([], StepModel(0.00359, 0.25))
    assert fit.method == "default"
    assert fit.model == StepModel(0.00359, 0.25)


def test_one_anchor_keeps_c_and_solves_a() -> None:
    """The document's own anchor (B=64, 0.48 s) with c = 0.25 s gives its slope a = 0.00359 s."""
    fit = fit_step_model([Anchor(64, 0.48)], StepModel(1.0, 0.25))
    assert fit.method == "one anchor, c kept"
    assert fit.model.c == 0.25
    assert fit.model.a == pytest.approx((0.48 - 0.25) / 64)
    assert round(fit.model.a, 5) == 0.00359


def test_repeated_batch_is_one_point() -> None:
    fit = fit_step_model([Anchor(64, 0.46), Anchor(64, 0.50)], StepModel(1.0, 0.25))
    assert fit.method == "one anchor, c kept"
    assert fit.model.a == pytest.approx((0.48 - 0.25) / 64)


def test_two_anchors_fit_exactly() -> None:
    truth = StepModel(0.004, 0.3)
    fit = fit_step_model([Anchor(64, truth.wall_s(64)), Anchor(2048, truth.wall_s(2048))], StepModel(1.0, 0.0))
    assert fit.method == "least squares"
    assert fit.model.a == pytest.approx(0.004)
    assert fit.model.c == pytest.approx(0.3)


def test_least_squares_over_noisy_anchors() -> None:
    pts = [Anchor(64, 0.50), Anchor(512, 2.10), Anchor(1024, 3.90), Anchor(2048, 7.70)]
    fit = fit_step_model(pts, StepModel(1.0, 0.0))
    n = len(pts)
    mb = sum(p.batch for p in pts) / n
    mw = sum(p.wall_s for p in pts) / n
    a = sum((p.batch - mb) * (p.wall_s - mw) for p in pts) / sum((p.batch - mb) ** 2 for p in pts)
    assert fit.model.a == pytest.approx(a)
    assert fit.model.c == pytest.approx(mw - a * mb)
    assert sum(p.wall_s - fit.model.wall_s(p.batch) for p in pts) == pytest.approx(0.0, abs=1e-12)


def test_memory_limit_floor() -> None:
    assert MemoryModel(39.0, 0.10, 112.0).max_per_gpu_batch() == 730
    assert MemoryModel(39.0, 0.10, 112.05).max_per_gpu_batch() == 730
    assert MemoryModel(39.0, 0.10, 111.99).max_per_gpu_batch() == 729
    assert MemoryModel(39.0, 0.10, 112.0).fits(730)
    assert not MemoryModel(39.0, 0.10, 112.0).fits(731)


def test_train_batch_beyond_memory_is_flagged() -> None:
    est = estimate(BudgetConfig(train_batch=8 * 800))
    assert not est.train.fits
    assert est.train.memory_gb_per_gpu == pytest.approx(119.0)
