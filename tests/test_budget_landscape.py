"""The VLA landscape data file: every value sourced, unreported values marked, timesteps only when derivable."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.budget.landscape import DEFAULT_LANDSCAPE, NOT_REPORTED, RUN_FIELDS, load_landscape
from pipeline.errors import PrepError


def test_shipped_landscape() -> None:
    land = load_landscape(DEFAULT_LANDSCAPE)
    runs = {r.name: r for r in land.runs}
    assert set(runs) == {"π0", "π0.5", "OpenVLA", "Octo", "RT-2", "RDT-1B"}
    for run in land.runs:
        for f in RUN_FIELDS:
            v = run.values[f]
            assert v.source, (run.name, f)
            assert v.reported == (v.text != NOT_REPORTED)
    # OpenVLA: epochs and batch, no step count -> steps not reported, no timesteps (not the ≈12.8k misquote)
    assert not runs["OpenVLA"].values["steps"].reported
    assert runs["OpenVLA"].values["batch"].value == 2048
    assert runs["OpenVLA"].timesteps is None
    assert runs["OpenVLA"].timesteps_note == "not derivable: steps not reported"
    # π0: 700k steps, batch unpublished
    assert runs["π0"].values["steps"].value == 700_000
    assert not runs["π0"].values["batch"].reported and runs["π0"].timesteps is None
    # Octo: both published -> 300k x 2048
    assert runs["Octo"].timesteps == 300_000 * 2048
    # RT-2: ranges per variant are reported but not one number: nothing derived
    assert runs["RT-2"].values["steps"].reported and runs["RT-2"].values["steps"].value is None
    assert runs["RT-2"].timesteps is None
    assert {"1", "3", "4", "5", "7"} <= set(land.references)


def write(tmp_path: Path, run: str) -> Path:
    p = tmp_path / "land.toml"
    p.write_text('schema = "prep.vla_landscape/1"\n[[run]]\nname = "X"\n' + run, encoding="utf-8")
    return p


FULL = """params = { value = 1e9, source = "[1]" }
steps = { value = 1000, source = "[1]" }
batch = { value = 8, source = "[1]" }
data = { text = "some", source = "[1]" }
compute = { reported = false, source = "[1]" }
"""


def test_minimal_file(tmp_path: Path) -> None:
    run = load_landscape(write(tmp_path, FULL)).runs[0]
    assert run.timesteps == 8000
    assert run.values["params"].text == "1e+09"
    assert run.values["compute"].text == NOT_REPORTED


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s.replace('batch = { value = 8, source = "[1]" }\n', ""), "missing batch"),
    (lambda s: s.replace('steps = { value = 1000, source = "[1]" }', 'steps = { value = 1000 }'), "needs a source"),
    (lambda s: s.replace('{ reported = false, source = "[1]" }', '{ reported = false, value = 3, source = "[1]" }'),
     "must not carry a value"),
    (lambda s: s.replace('{ text = "some", source = "[1]" }', '{ source = "[1]" }'), "needs a value or a text"),
    (lambda s: s.replace('value = 8,', 'value = "8",'), "value must be a number"),
    (lambda s: s + "epochs = 3\n", "unknown fields"),
])
def test_bad_landscape_files(tmp_path: Path, edit: object, message: str) -> None:
    assert callable(edit)
    with pytest.raises(PrepError, match=message):
        load_landscape(write(tmp_path, edit(FULL)))


def test_wrong_schema_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "l.toml"
    p.write_text('schema = "other"\n', encoding="utf-8")
    with pytest.raises(PrepError, match="expected schema"):
        load_landscape(p)
    with pytest.raises(PrepError, match="landscape file not found"):
        load_landscape(tmp_path / "none.toml")
