"""Parameters of the sizing model: document defaults, a TOML config file, CLI overrides, validation.

Precedence, per parameter: CLI flag > config file > measured manifest > estimated from the other
measured storage rate (`measured.estimate_rates`) > document default. Every value carries its source
("document default", "config <path>", "cli --<flag>", "measured <path> (<field>)", "estimated from ...")
so the report can show where each number came from; `origin_of` names its kind.

Config file (TOML): any subset of the keys of `FIELDS`, at top level or in their section, e.g.

    [throughput]
    train_batch = 2048
    anchors = ["B=64,wall=0.48", {B = 2048, wall = 7.6}]
"""

from __future__ import annotations

import argparse
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipeline.bounded import load_toml
from pipeline.budget.model import Anchor, StepFit, StepModel, fit_step_model
from pipeline.errors import PrepError

DEFAULT_SOURCE = "document default"
CLI_SOURCE = "cli"
ORIGINS = ("measured", "estimated", "config", "cli", "document default")
# Integers above 2**53 are not exact as floats (and 10**400 does not convert at all).
MAX_INT = 2**53
# The document's native and prepared rates: their ratio estimates one rate from the other.
DOC_GB_PER_HOUR_NATIVE = 6.15
DOC_GB_PER_HOUR_PREPARED = 2.13
DEFAULT_OUT = Path("manifests") / "budget"


@dataclass(slots=True, frozen=True)
class FieldSpec:
    section: str
    kind: str  # "int" | "float" | "ints" | "floats" | "anchors"
    unit: str
    help: str


FIELDS: dict[str, FieldSpec] = {
    "pi0_steps": FieldSpec("target", "int", "steps", "pi0 pre-training steps (pi0 paper, Fig. 7)"),
    "pi0_batch": FieldSpec("target", "ints", "samples", "pi0 global batch, unpublished: one target per value"),
    "frames_per_episode": FieldSpec("corpus", "float", "frames", "frames per episode (default: 3 s at 30 fps)"),
    "fps": FieldSpec("corpus", "float", "frames/s", "recording rate of the corpus"),
    "gb_per_hour_native": FieldSpec("corpus", "float", "GB/hr",
                                    "native storage rate (default: 480x640, 3 cameras, h264)"),
    "gb_per_hour_prepared": FieldSpec("corpus", "float", "GB/hr", "prepared storage rate (default: 224x224 all-intra)"),
    "prepared_ratio": FieldSpec("corpus", "float", "x", "native GB/hr / prepared GB/hr: estimates the rate no "
                                "manifest measures from the one that is (default: 6.15 / 2.13)"),
    "step_a_s": FieldSpec("throughput", "float", "s/sample", "step time slope a in wall_s(B) = a*B + c"),
    "step_c_s": FieldSpec("throughput", "float", "s/step", "fixed step overhead c in wall_s(B) = a*B + c"),
    "anchors": FieldSpec("throughput", "anchors", "B, s", "measured (global batch, wall s/step) points refitting a, c"),
    "gpus_per_node": FieldSpec("throughput", "int", "GPUs", "GPUs per node (data parallel inside the node)"),
    "train_batch": FieldSpec("throughput", "int", "samples", "global batch per node used for training"),
    "report_batches": FieldSpec("throughput", "ints", "samples", "global batches to tabulate throughput for"),
    "mem_fixed_gb": FieldSpec("memory", "float", "GB", "per-GPU fixed memory: weights, grads, AdamW, EMA"),
    "mem_per_sample_gb": FieldSpec("memory", "float", "GB/sample", "per-GPU activation memory per sample"),
    "mem_usable_gb": FieldSpec("memory", "float", "GB", "usable memory per GPU (JAX)"),
    "gpu_memory_gb": FieldSpec("memory", "float", "GB", "physical memory per GPU (shown only)"),
    "nodes": FieldSpec("scaling", "ints", "nodes", "node counts to tabulate"),
    "efficiency": FieldSpec("scaling", "float", "fraction", "inter-node data-parallel efficiency, in (0, 1]"),
    "efficiency_low": FieldSpec("scaling", "float", "fraction", "low end of the efficiency band, in (0, 1]"),
    "efficiency_high": FieldSpec("scaling", "float", "fraction", "high end of the efficiency band, in (0, 1]"),
    "headline_nodes": FieldSpec("scaling", "int", "nodes", "multi-node count shown in the headline"),
}
SECTIONS = frozenset(s.section for s in FIELDS.values())

# The range of each parameter that describes a real run (inclusive): far beyond any published one, and narrow
# enough that every figure of the report stays a readable number (an fps of 1e300 made hours of 1e-300 and
# 300-digit cells in 692-column lines). A value outside is refused in one line naming its source and value.
BOUNDS: dict[str, tuple[float, float]] = {
    "pi0_steps": (1, 1e10), "pi0_batch": (1, 1e7), "frames_per_episode": (1, 1e9), "fps": (0.1, 1e4),
    "gb_per_hour_native": (1e-6, 1e6), "gb_per_hour_prepared": (1e-6, 1e6), "prepared_ratio": (1e-3, 1e3),
    "step_a_s": (1e-6, 1e3), "step_c_s": (0, 1e5), "anchors": (1e-6, 1e9), "gpus_per_node": (1, 1e4),
    "train_batch": (1, 1e9), "report_batches": (1, 1e9), "mem_fixed_gb": (0, 1e6), "mem_per_sample_gb": (1e-9, 1e6),
    "mem_usable_gb": (1e-3, 1e6), "gpu_memory_gb": (1e-3, 1e6), "nodes": (1, 1e6), "efficiency": (0.01, 1),
    "efficiency_low": (0.01, 1), "efficiency_high": (0.01, 1), "headline_nodes": (1, 1e6),
}
assert set(BOUNDS) == set(FIELDS), "every parameter has its bounds"


@dataclass(slots=True, frozen=True)
class BudgetConfig:
    """All inputs of the model; defaults are the sizing document's figures."""

    pi0_steps: int = 700_000
    pi0_batch: tuple[int, ...] = (1024, 2048)
    frames_per_episode: float = 90.0
    fps: float = 30.0
    gb_per_hour_native: float = DOC_GB_PER_HOUR_NATIVE
    gb_per_hour_prepared: float = DOC_GB_PER_HOUR_PREPARED
    prepared_ratio: float = DOC_GB_PER_HOUR_NATIVE / DOC_GB_PER_HOUR_PREPARED
    step_a_s: float = 0.00359
    step_c_s: float = 0.25
    anchors: tuple[Anchor, ...] = ()
    gpus_per_node: int = 8
    train_batch: int = 2048
    report_batches: tuple[int, ...] = (64, 2048)
    mem_fixed_gb: float = 39.0
    mem_per_sample_gb: float = 0.10
    mem_usable_gb: float = 112.0
    gpu_memory_gb: float = 141.0
    nodes: tuple[int, ...] = (1, 2, 4, 8)
    efficiency: float = 0.90
    efficiency_low: float = 0.85
    efficiency_high: float = 0.95
    headline_nodes: int = 4
    sources: dict[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        return self.sources.get(name, DEFAULT_SOURCE)

    def origin(self, name: str) -> str:
        return origin_of(self.source(name))

    def with_values(self, values: dict[str, Any], source: str) -> BudgetConfig:
        """A copy with `values` set and their source recorded."""
        return replace(self, **values, sources={**self.sources, **dict.fromkeys(values, source)})

    def step_fit(self) -> StepFit:
        return fit_step_model(self.anchors, StepModel(a=self.step_a_s, c=self.step_c_s))


def origin_of(source: str) -> str:
    """The kind of a source string: one of ORIGINS."""
    for origin in ORIGINS:
        if source == origin or source.startswith(origin + " "):
            return origin
    raise ValueError(f"unknown source {source!r}")


PARAM_NAMES = tuple(f.name for f in fields(BudgetConfig) if f.name != "sources")
assert set(PARAM_NAMES) == set(FIELDS), "FIELDS and BudgetConfig disagree"


# ---------------------------------------------------------------- parsing one value


def _number(name: str, raw: Any, origin: str, *, integer: bool) -> int | float:
    if isinstance(raw, bool):
        raise PrepError(f"{name} ({origin}): expected a number, got {raw!r}")
    value: int | float
    if isinstance(raw, str):
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise PrepError(f"{name} ({origin}): expected {kind}, got {raw!r}") from None
    elif isinstance(raw, int):
        value = raw if integer else float(raw)
    elif isinstance(raw, float) and not integer:
        value = raw
    else:
        kind = "an integer" if integer else "a number"
        raise PrepError(f"{name} ({origin}): expected {kind}, got {raw!r}")
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise PrepError(f"{name} ({origin}): {raw!r} is too large (at most {MAX_INT:,})")
    if not math.isfinite(value):
        raise PrepError(f"{name} ({origin}): expected a finite number, got {raw!r}")
    return value


def _list(name: str, raw: Any, origin: str) -> list[Any]:
    if isinstance(raw, str):
        items: list[Any] = [s.strip() for s in raw.split(",") if s.strip()]
    elif isinstance(raw, list | tuple):
        items = list(raw)
    else:
        raise PrepError(f"{name} ({origin}): expected a list or comma-separated values, got {raw!r}")
    if not items:
        raise PrepError(f"{name} ({origin}): expected at least one value")
    return items


def parse_anchor(raw: Any, origin: str) -> Anchor:
    """`"B=64,wall=0.48"` or a table `{B = 64, wall = 0.48}` (also `batch`, `wall_s`)."""
    if isinstance(raw, str):
        parts: dict[str, str] = {}
        for item in raw.split(","):
            key, sep, val = item.partition("=")
            if not sep:
                raise PrepError(f"anchor {raw!r} ({origin}): expected B=<global batch>,wall=<seconds per step>")
            parts[key.strip()] = val.strip()
        table: dict[str, Any] = parts
    elif isinstance(raw, dict):
        table = raw
    else:
        raise PrepError(f"anchor {raw!r} ({origin}): expected B=<global batch>,wall=<seconds per step>")
    keys = {"B": "B", "batch": "B", "wall": "wall", "wall_s": "wall"}
    norm: dict[str, Any] = {}
    for key, val in table.items():
        if key not in keys:
            raise PrepError(f"anchor {raw!r} ({origin}): unknown key {key!r}; use B and wall")
        norm[keys[key]] = val
    if set(norm) != {"B", "wall"}:
        raise PrepError(f"anchor {raw!r} ({origin}): needs both B=<global batch> and wall=<seconds per step>")
    batch = int(_number("anchor B", norm["B"], origin, integer=True))
    wall = float(_number("anchor wall", norm["wall"], origin, integer=False))
    if batch <= 0:
        raise PrepError(f"anchor {raw!r} ({origin}): batch must be a positive integer, got {batch}")
    if wall <= 0:
        raise PrepError(f"anchor {raw!r} ({origin}): wall time must be positive, got {wall:g} s")
    return Anchor(batch=batch, wall_s=wall)


def coerce(name: str, raw: Any, origin: str) -> Any:
    """Parse one raw value (TOML value or CLI string) into the type of parameter `name`."""
    spec = FIELDS.get(name)
    if spec is None:
        raise PrepError(f"{origin}: unknown parameter {name!r}; known: {', '.join(sorted(FIELDS))}")
    if spec.kind == "int":
        return _number(name, raw, origin, integer=True)
    if spec.kind == "float":
        return float(_number(name, raw, origin, integer=False))
    if spec.kind == "anchors":
        items = [raw] if isinstance(raw, str | dict) else _list(name, raw, origin)
        return tuple(parse_anchor(x, origin) for x in items)
    integer = spec.kind == "ints"
    return tuple(_number(name, x, origin, integer=integer) for x in _list(name, raw, origin))


# ---------------------------------------------------------------- config file and CLI


def read_config_file(path: Path) -> dict[str, Any]:
    """Parameter values from a TOML file; keys at top level or in their section."""
    try:
        doc = load_toml(path)  # size and depth bounded before parsing
    except FileNotFoundError:
        raise PrepError(f"{path}: config file not found") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PrepError(f"{path}: cannot read config: {exc}") from None
    origin = f"config {path}"
    values: dict[str, Any] = {}
    for key, val in doc.items():
        if key in SECTIONS and isinstance(val, dict):
            for sub, raw in val.items():
                spec = FIELDS.get(sub)
                if spec is not None and spec.section != key:
                    raise PrepError(f"{path}: {sub!r} belongs in [{spec.section}], not [{key}]")
                values[sub] = coerce(sub, raw, origin)
        else:
            values[key] = coerce(key, raw=val, origin=origin)
    return values


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One `--flag VALUE` per parameter (strings, parsed by `coerce` for one-line errors)."""
    g = p.add_argument_group("model parameters (override the config file and the defaults)")
    defaults = BudgetConfig()
    for name, spec in FIELDS.items():
        if spec.kind == "anchors":
            g.add_argument("--anchor", dest="anchors", action="append", metavar="B=N,wall=S",
                           help="measured step: global batch N took S s/step on one node; repeatable. "
                           "One batch size refits a with c kept, two or more refit a and c by least squares")
            continue
        default = getattr(defaults, name)
        shown = ",".join(f"{v:g}" for v in default) if isinstance(default, tuple) else f"{default:g}"
        metavar = "LIST" if spec.kind in ("ints", "floats") else "N" if spec.kind == "int" else "X"
        g.add_argument(flag(name), dest=name, metavar=metavar, help=f"{spec.help} [{spec.unit}] (default {shown})")


def cli_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = getattr(args, name, None)
        if raw is None:
            continue
        values[name] = coerce(name, raw, cli_source(name).removeprefix(CLI_SOURCE + " "))
    return values


def load_config(config_file: Path | None = None, cli: dict[str, Any] | None = None) -> BudgetConfig:
    """Defaults, then the config file, then CLI values (already parsed by `coerce`)."""
    cfg = BudgetConfig()
    if config_file is not None:
        cfg = cfg.with_values(read_config_file(config_file), f"config {config_file}")
    for name, value in (cli or {}).items():
        cfg = cfg.with_values({name: value}, cli_source(name))
    return cfg


def cli_source(name: str) -> str:
    """"cli --<flag>": the source of a value given on the command line."""
    return f"{CLI_SOURCE} {'--anchor' if name == 'anchors' else flag(name)}"


# ---------------------------------------------------------------- validation


def _refuse(cfg: BudgetConfig, name: str, value: Any, why: str) -> PrepError:
    shown = ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"
    return PrepError(f"{name} = {shown} (from {cfg.source(name)}): {why}")


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and not (isinstance(value, int) and abs(value) > MAX_INT)
    except OverflowError:  # an int too large for a float
        return False


def check_bounds(cfg: BudgetConfig) -> None:
    """Refuse a parameter outside `BOUNDS` (one line: the parameter, where it came from, its value, the range).
    Runs after `validate_config` and the model's own overflow check, whose messages come first."""
    problem = out_of_bounds(cfg)
    if problem is not None:
        raise PrepError(problem)


def out_of_bounds(cfg: BudgetConfig) -> str | None:
    """The first parameter outside `BOUNDS`, said as `check_bounds` refuses it; None when all are inside."""
    for name, spec in FIELDS.items():
        if cfg.origin(name) == "estimated":  # derived from bounded inputs (a ratio of two given rates)
            continue
        lo, hi = BOUNDS[name]
        value = getattr(cfg, name)
        items = [x for a in value for x in (a.batch, a.wall_s)] if spec.kind == "anchors" else (
            list(value) if isinstance(value, tuple) else [value])
        bad = next((x for x in items if not lo <= x <= hi), None)
        if bad is not None:
            unit = "" if spec.unit in ("x", "fraction") else f" {spec.unit}"
            return (f"{name} = {bad:.6g} (from {cfg.source(name)}): outside the range a run can have, "
                    f"{lo:,.6g} to {hi:,.6g}{unit}")
    return None


def validate_config(cfg: BudgetConfig) -> StepFit:
    """Refuse parameters the model cannot use; returns the step-time fit (anchors applied).

    Everything is checked here, not only when parsing: a BudgetConfig built in Python (or from a
    manifest) gets the same one-line refusal for a NaN, an infinity, zero or a negative number.
    """
    for name, spec in FIELDS.items():
        value = getattr(cfg, name)
        items = [x for a in value for x in (a.batch, a.wall_s)] if spec.kind == "anchors" else (
            list(value) if isinstance(value, tuple) else [value])
        bad = [x for x in items if not _finite(x)]
        if bad:
            raise PrepError(f"{name} = {bad[0]!r} (from {cfg.source(name)}): expected a finite number"
                            + (f" of at most {MAX_INT:,}" if isinstance(bad[0], int) else ""))
    positive_ints = ("pi0_steps", "gpus_per_node", "train_batch", "headline_nodes")
    for name in positive_ints:
        if getattr(cfg, name) <= 0:
            raise _refuse(cfg, name, getattr(cfg, name), "must be a positive integer")
    for name in ("pi0_batch", "report_batches", "nodes"):
        if any(v <= 0 for v in getattr(cfg, name)):
            raise _refuse(cfg, name, getattr(cfg, name), "every value must be a positive integer")
    for name in ("frames_per_episode", "fps", "gb_per_hour_native", "gb_per_hour_prepared", "prepared_ratio",
                 "mem_per_sample_gb", "mem_usable_gb", "gpu_memory_gb"):
        if getattr(cfg, name) <= 0:
            raise _refuse(cfg, name, getattr(cfg, name), "must be positive")
    if cfg.mem_fixed_gb < 0:
        raise _refuse(cfg, "mem_fixed_gb", cfg.mem_fixed_gb, "must not be negative")
    for name in ("efficiency", "efficiency_low", "efficiency_high"):
        v = getattr(cfg, name)
        if not 0 < v <= 1:
            raise _refuse(cfg, name, v, "must be in (0, 1]")
    if cfg.efficiency_low > cfg.efficiency_high:
        raise _refuse(cfg, "efficiency_low", cfg.efficiency_low,
                      f"must not exceed efficiency_high = {cfg.efficiency_high:g}")
    if cfg.train_batch % cfg.gpus_per_node:
        raise _refuse(cfg, "train_batch", cfg.train_batch,
                      f"must be divisible by gpus_per_node = {cfg.gpus_per_node} (the batch is global)")
    if cfg.mem_usable_gb <= cfg.mem_fixed_gb:
        raise _refuse(cfg, "mem_usable_gb", cfg.mem_usable_gb,
                      f"leaves no room for a sample above mem_fixed_gb = {cfg.mem_fixed_gb:g} GB")
    if not math.isfinite((cfg.mem_usable_gb - cfg.mem_fixed_gb) / cfg.mem_per_sample_gb):
        raise _refuse(cfg, "mem_per_sample_gb", cfg.mem_per_sample_gb,
                      "is too small: (usable - fixed) / per_sample overflows a float")
    fit = cfg.step_fit()
    where = ("anchors " + " ".join(f"B={x.batch},wall={x.wall_s:g}" for x in fit.anchors)
             + f" (from {cfg.source('anchors')})") if fit.anchors else f"step_a_s (from {cfg.source('step_a_s')})"
    if fit.model.a <= 0:
        raise PrepError(f"{where}: give a non-positive step-time slope a = {fit.model.a:.6g} s/sample "
                        f"({fit.method}, c = {fit.model.c:.4g} s); wall time must grow with the batch")
    if fit.model.c < 0:
        where_c = where if fit.anchors else f"step_c_s (from {cfg.source('step_c_s')})"
        raise PrepError(f"{where_c}: give a negative fixed step overhead c = {fit.model.c:.4g} s "
                        f"({fit.method}, a = {fit.model.a:.6g} s/sample); c must be >= 0")
    return fit
