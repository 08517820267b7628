"""`prep budget` parameters: TOML config, CLI precedence, and one-line refusals of bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.budget.config import BudgetConfig, coerce, load_config, parse_anchor, read_config_file, validate_config
from pipeline.budget.model import Anchor
from pipeline.errors import PrepError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "budget.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults_are_the_documents() -> None:
    cfg = BudgetConfig()
    assert (cfg.pi0_steps, cfg.pi0_batch, cfg.frames_per_episode, cfg.fps) == (700_000, (1024, 2048), 90, 30)
    assert (cfg.gb_per_hour_native, cfg.gb_per_hour_prepared) == (6.15, 2.13)
    assert (cfg.step_a_s, cfg.step_c_s, cfg.mem_fixed_gb, cfg.mem_per_sample_gb, cfg.mem_usable_gb) == (
        0.00359, 0.25, 39.0, 0.10, 112.0)
    assert cfg.source("fps") == "document default"


def test_config_file_sections_and_top_level(tmp_path: Path) -> None:
    path = write(tmp_path, """
fps = 50
[target]
pi0_batch = [512, 1024, 4096]
[throughput]
train_batch = 1024
anchors = ["B=64,wall=0.48", {B = 2048, wall = 7.6}]
[scaling]
efficiency = 0.8
""")
    cfg = load_config(path)
    assert cfg.fps == 50.0 and isinstance(cfg.fps, float)
    assert cfg.pi0_batch == (512, 1024, 4096)
    assert cfg.train_batch == 1024
    assert cfg.anchors == (Anchor(64, 0.48), Anchor(2048, 7.6))
    assert cfg.efficiency == 0.8
    assert cfg.source("fps") == f"config {path}"
    assert cfg.source("gpus_per_node") == "document default"


def test_cli_wins_over_file_and_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "[throughput]\ntrain_batch = 1024\nstep_c_s = 0.3\n")
    cfg = load_config(path, {"train_batch": coerce("train_batch", "512", "--train-batch")})
    assert cfg.train_batch == 512 and cfg.source("train_batch") == "cli --train-batch"
    assert cfg.step_c_s == 0.3 and cfg.source("step_c_s") == f"config {path}"
    assert cfg.step_a_s == 0.00359 and cfg.source("step_a_s") == "document default"


def test_key_in_the_wrong_section(tmp_path: Path) -> None:
    with pytest.raises(PrepError, match=r"'fps' belongs in \[corpus\], not \[memory\]"):
        read_config_file(write(tmp_path, "[memory]\nfps = 30\n"))


def test_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(PrepError, match="unknown parameter 'batch_size'"):
        read_config_file(write(tmp_path, "batch_size = 30\n"))


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PrepError, match="cannot read config"):
        read_config_file(write(tmp_path, "fps = = 3\n"))
    with pytest.raises(PrepError, match="config file not found"):
        read_config_file(tmp_path / "nope.toml")


@pytest.mark.parametrize(("name", "raw", "message"), [
    ("train_batch", "64.5", "expected an integer"),
    ("train_batch", True, "expected a number"),
    ("fps", "fast", "expected a number"),
    ("fps", "nan", "finite"),
    ("nodes", "1,two", "expected an integer"),
    ("pi0_batch", "", "at least one value"),
])
def test_values_that_do_not_parse(name: str, raw: object, message: str) -> None:
    with pytest.raises(PrepError, match=message):
        coerce(name, raw, "--x")


def test_lists_from_the_command_line() -> None:
    assert coerce("nodes", "1, 2,4", "--nodes") == (1, 2, 4)
    assert coerce("pi0_batch", "1024", "--pi0-batch") == (1024,)


@pytest.mark.parametrize(("raw", "message"), [
    ("B=64", "needs both"),
    ("B=64,wall=0.48,x=1", "unknown key 'x'"),
    ("64,0.48", "expected B="),
    ("B=0,wall=0.48", "positive integer"),
    ("B=64,wall=-1", "wall time must be positive"),
])
def test_bad_anchor_syntax(raw: str, message: str) -> None:
    with pytest.raises(PrepError, match=message):
        parse_anchor(raw, "--anchor")


def test_anchor_spellings() -> None:
    assert parse_anchor("B=64,wall=0.48", "x") == Anchor(64, 0.48)
    assert parse_anchor(" batch = 64 , wall_s = 0.48 ", "x") == Anchor(64, 0.48)
    assert parse_anchor({"B": 64, "wall": 0.48}, "x") == Anchor(64, 0.48)


@pytest.mark.parametrize(("values", "message"), [
    ({"train_batch": 0}, r"train_batch = 0 \(from cli\): must be a positive integer"),
    ({"train_batch": -2048}, "must be a positive integer"),
    ({"pi0_batch": (1024, 0)}, "pi0_batch = 1024,0 .*every value must be a positive integer"),
    ({"pi0_batch": (-1,)}, "every value must be a positive integer"),
    ({"nodes": (0, 4)}, "nodes"),
    ({"pi0_steps": 0}, "pi0_steps"),
    ({"efficiency": 0.0}, r"efficiency = 0 \(from cli\): must be in \(0, 1\]"),
    ({"efficiency": 1.2}, r"must be in \(0, 1\]"),
    ({"efficiency_low": -0.1}, r"efficiency_low .*must be in \(0, 1\]"),
    ({"efficiency_low": 0.97}, "must not exceed efficiency_high"),
    ({"fps": 0.0}, "fps = 0 .*must be positive"),
    ({"gb_per_hour_native": -6.15}, "must be positive"),
    ({"frames_per_episode": 0.0}, "must be positive"),
    ({"train_batch": 1001}, "divisible by gpus_per_node = 8"),
    ({"mem_usable_gb": 30.0}, "leaves no room"),
    ({"step_a_s": -0.001}, "non-positive step-time slope"),
    ({"step_c_s": -0.1}, "negative fixed step overhead"),
])
def test_bad_parameters_are_refused(values: dict[str, object], message: str) -> None:
    cfg = BudgetConfig().with_values(values, "cli")
    with pytest.raises(PrepError, match=message) as info:
        validate_config(cfg)
    assert "\n" not in str(info.value)


def test_anchor_making_a_negative_slope_is_refused() -> None:
    # one anchor below the fixed overhead: a = (0.2 - 0.25) / 64 < 0
    cfg = BudgetConfig().with_values({"anchors": (Anchor(64, 0.2),)}, "cli")
    with pytest.raises(PrepError, match=r"anchors B=64,wall=0.2 \(from cli\): give a non-positive step-time slope"):
        validate_config(cfg)
    # two anchors where the bigger batch is faster
    cfg = BudgetConfig().with_values({"anchors": (Anchor(64, 0.5), Anchor(2048, 0.4))}, "cli")
    with pytest.raises(PrepError, match="least squares"):
        validate_config(cfg)


def test_anchors_with_negative_intercept_are_refused() -> None:
    cfg = BudgetConfig().with_values({"anchors": (Anchor(64, 0.1), Anchor(2048, 7.6))}, "cli")
    with pytest.raises(PrepError, match="negative fixed step overhead"):
        validate_config(cfg)


def test_good_anchors_refit() -> None:
    cfg = BudgetConfig().with_values({"anchors": (Anchor(64, 0.48), Anchor(2048, 7.6))}, "cli")
    fit = validate_config(cfg)
    assert fit.method == "least squares"
    assert fit.model.a == pytest.approx((7.6 - 0.48) / (2048 - 64))
