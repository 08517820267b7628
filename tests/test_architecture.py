"""The code's layers hold: no import circle and no upward arrow (bench/architecture.py measures both from the
AST, every import counted, the ones inside functions too), and every module has a declared layer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _architecture():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("prep_architecture", REPO / "bench" / "architecture.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_circle_and_no_upward_arrow() -> None:
    m = _architecture().measure(REPO)
    assert m["circles"] == [], m["circles"]
    assert m["upward"] == [], m["upward"]


def test_no_format_version_branch_outside_the_format_layer() -> None:
    m = _architecture().measure(REPO)
    assert m["version_branches_by_file"] == {}


def test_the_measure_finds_a_planted_circle_and_an_upward_arrow(tmp_path: Path) -> None:
    arch = _architecture()
    pkg = tmp_path / "pipeline"
    (pkg / "stages").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stages" / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from pipeline.text import x\n")  # base -> base: a circle
    (pkg / "text.py").write_text("from pipeline.errors import y\n")
    (pkg / "stages" / "scan.py").write_text("from pipeline.jobs import z\n")
    (pkg / "jobs.py").write_text("if codebase_version == 'v2.1':\n    pass\n")
    m = arch.measure(tmp_path)
    assert m["circles"] == [["pipeline.errors", "pipeline.text"]]
    assert [(u["from"], u["to"]) for u in m["upward"]] == [("pipeline.stages.scan", "pipeline.jobs")]
    assert m["version_branches_by_file"] == {"pipeline/jobs.py": 1}
