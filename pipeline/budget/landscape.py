"""The VLA pre-training landscape: published runs read from manifests/vla_landscape.toml.

Each value keeps its source; values a paper does not report stay marked "not reported".
Timesteps seen = steps x batch is derived only where both are reported as single numbers.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.bounded import load_toml
from pipeline.errors import PrepError
from pipeline.resources import data_path

DEFAULT_LANDSCAPE = data_path("vla_landscape.toml")  # manifests/vla_landscape.toml, shipped in the package
# how a report names the shipped file: by its place in prep's repository, not where this machine installed it
# (a report is shared, and the demo's is committed)
SHIPPED_NAME = "manifests/vla_landscape.toml"
LANDSCAPE_SCHEMA = "prep.vla_landscape/1"
RUN_FIELDS = ("params", "steps", "batch", "data", "compute")
NOT_REPORTED = "not reported"


@dataclass(slots=True, frozen=True)
class Reported:
    """One published value: a number and/or its text, or explicitly not reported."""

    reported: bool
    value: float | None
    text: str
    source: str
    note: str | None

    def as_json(self) -> dict[str, Any]:
        return {"reported": self.reported, "value": self.value, "text": self.text, "source": self.source,
                "note": self.note}


@dataclass(slots=True, frozen=True)
class Run:
    name: str
    values: dict[str, Reported]
    timesteps: float | None
    timesteps_note: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v.as_json() for k, v in self.values.items()},
                "timesteps": self.timesteps, "timesteps_note": self.timesteps_note}


@dataclass(slots=True, frozen=True)
class Landscape:
    path: str
    runs: tuple[Run, ...]
    references: dict[str, str]


def _reported(where: str, raw: Any) -> Reported:
    if not isinstance(raw, dict):
        raise PrepError(f"{where}: expected a table with source and value/text or reported = false")
    unknown = set(raw) - {"reported", "value", "text", "source", "note"}
    if unknown:
        raise PrepError(f"{where}: unknown keys {sorted(unknown)}")
    source = raw.get("source")
    if not isinstance(source, str) or not source:
        raise PrepError(f"{where}: every value needs a source")
    reported = raw.get("reported", True)
    if not isinstance(reported, bool):
        raise PrepError(f"{where}: reported must be true or false")
    value, text = raw.get("value"), raw.get("text")
    if not reported:
        if value is not None or text is not None:
            raise PrepError(f"{where}: a value marked reported = false must not carry a value or text")
        return Reported(False, None, NOT_REPORTED, source, raw.get("note"))
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise PrepError(f"{where}: value must be a number, got {value!r}")
    if value is None and not isinstance(text, str):
        raise PrepError(f"{where}: a reported value needs a value or a text")
    shown = text if isinstance(text, str) else f"{value:,g}"
    return Reported(True, None if value is None else float(value), shown, source, raw.get("note"))


def derive_timesteps(values: dict[str, Reported]) -> tuple[float | None, str]:
    steps, batch = values["steps"], values["batch"]
    missing = [k for k, v in (("steps", steps), ("batch", batch)) if not v.reported]
    if missing:
        return None, f"not derivable: {' and '.join(missing)} not reported"
    ranged = [k for k, v in (("steps", steps), ("batch", batch)) if v.value is None]
    if ranged:
        return None, f"not derivable: {' and '.join(ranged)} not a single number ({steps.text}; {batch.text})"
    assert steps.value is not None and batch.value is not None
    return steps.value * batch.value, "steps x batch"


def load_landscape(path: Path = DEFAULT_LANDSCAPE) -> Landscape:
    try:
        doc = load_toml(path)  # size and depth bounded before parsing
    except FileNotFoundError:
        raise PrepError(f"{path}: landscape file not found") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PrepError(f"{path}: cannot read landscape file: {exc}") from None
    if doc.get("schema") != LANDSCAPE_SCHEMA:
        raise PrepError(f"{path}: expected schema = {LANDSCAPE_SCHEMA!r}, got {doc.get('schema')!r}")
    refs = doc.get("references", {})
    if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
        raise PrepError(f"{path}: [references] must map reference ids to strings")
    raw_runs = doc.get("run")
    if not isinstance(raw_runs, list) or not raw_runs:
        raise PrepError(f"{path}: no [[run]] tables")
    runs = []
    for i, raw in enumerate(raw_runs):
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise PrepError(f"{path}: run {i + 1} has no name")
        unknown = set(raw) - {"name", *RUN_FIELDS}
        if unknown:
            raise PrepError(f"{path}: run {name}: unknown fields {sorted(unknown)}")
        missing = [k for k in RUN_FIELDS if k not in raw]
        if missing:
            raise PrepError(f"{path}: run {name}: missing {', '.join(missing)} (mark unknowns reported = false)")
        values = {k: _reported(f"{path}: run {name}: {k}", raw[k]) for k in RUN_FIELDS}
        ts, note = derive_timesteps(values)
        runs.append(Run(name, values, ts, note))
    shown = SHIPPED_NAME if Path(path) == DEFAULT_LANDSCAPE else str(path)
    return Landscape(shown, tuple(runs), dict(refs))
