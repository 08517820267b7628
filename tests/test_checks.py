"""The check registry (issue 33, `pipeline.checks`): every check declared once; docs/verify.md's tables are
rendered from it; every check the code emits is declared, with the severity it is emitted with; the tables the
registry replaced (FILE_CHECKS, REPAIRS, USER_RULES, CHECK_SEVERITY, READER_SEVERITY) read as they did."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import checks
from pipeline.checks import (
    CHECKS,
    DOC_TABLES,
    READER_CHOICES,
    READER_LINES,
    REPAIR_NAMES,
    Reader,
    Scope,
    Severity,
    Status,
    decide,
    doc_table,
    found_severity,
    is_file_check,
    metadata_rules,
    render_docs,
    render_table,
    repaired_by,
    severity_by_reader,
    user_option,
)

REPO = Path(__file__).resolve().parents[1]
E, T, W, INFO = Severity.ERROR, Severity.TRAINS_WRONG, Severity.WARNING, Severity.INFO


# ---- the docs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", DOC_TABLES)
def test_docs_tables_are_the_registry(which: str) -> None:
    """docs/verify.md holds each table as the registry renders it: a check added without its row, a severity
    changed in one place only, a doc line edited by hand, all fail here (`python -m pipeline.checks
    docs/verify.md` writes them)."""
    text = (REPO / "docs/verify.md").read_text(encoding="utf-8")
    assert doc_table(text, which) == render_table(which)


def test_a_check_without_its_doc_row_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "docs/verify.md").read_text(encoding="utf-8")
    new = checks.Check("new_check", Scope.EPISODE, checks.every(E), "a new behaviour")
    monkeypatch.setattr(checks, "DECLARED", (*checks.DECLARED, new))
    assert doc_table(text, "verdicts") != render_table("verdicts")
    assert "| `new_check` | error | error | error | a new behaviour |" in doc_table(render_docs(text), "verdicts")


def test_every_declared_check_has_one_doc_row() -> None:
    rendered = "\n".join(render_table(w) for w in DOC_TABLES)
    for name in CHECKS:
        assert rendered.count(f"`{name}`") >= 1, name
    assert set(metadata_rules()) == {n for n, c in CHECKS.items() if c.scope is Scope.METADATA}


# ---- the code emits only declared checks, with their declared severity -------------------------------------


def _emitted() -> list[tuple[str, str | None, str]]:
    """(check, severity written at the call, where) for every finding made from a literal name in pipeline/:
    `CheckFailure("name", ...)`, the stages' `fail("name", ...)`, and the named constants NON_FINITE/WORKER_LOST.
    The severity is the `Severity.X` argument (None: the default, error); a computed one is '?'."""
    constants = {"NON_FINITE": "non_finite", "WORKER_LOST": "worker_lost"}
    out = []
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if fn not in ("CheckFailure", "fail"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                name = first.value
            elif isinstance(first, ast.Name) and first.id in constants:
                name = constants[first.id]
            else:
                continue
            sev = node.args[6] if fn == "CheckFailure" and len(node.args) > 6 else \
                next((k.value for k in node.keywords if k.arg == "severity"), None)
            if sev is None:
                written = None
            elif isinstance(sev, ast.Attribute) and isinstance(sev.value, ast.Name) and sev.value.id == "Severity":
                written = Severity[sev.attr].value
            else:
                written = "?"
            out.append((name, written, f"{path.relative_to(REPO)}:{node.lineno}"))
    return out


def test_every_emitted_check_is_declared_with_the_severity_it_is_made_with() -> None:
    found = _emitted()
    assert len({name for name, _s, _w in found}) >= 35  # the scan sees the stages, video checks and outputs
    for name, written, where in found:
        assert name in CHECKS, f"{where}: check {name!r} is not declared in pipeline/checks.py"
        c = CHECKS[name]
        assert c.scope is not Scope.METADATA, where
        if written == "?":
            continue  # computed from the registry (found_severity)
        strictest = E if c.user_option else c.found
        assert (written or "error") == strictest, f"{where}: {name} made with {written or 'error'}, " \
                                                  f"declared {strictest}"


def test_every_metadata_rule_the_validator_sets_is_declared() -> None:
    names: set[str] = set()
    files = sorted((REPO / "pipeline/formats").glob("*.py"))  # the format layer validates the metadata
    assert files
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Attribute) and t.attr == "rule" for t in n.targets)
                  and isinstance(n.value, ast.Constant)}
    assert "info_json_unread" in names  # the scan finds the assignments
    names |= {"info_json", "episodes_jsonl", "tasks_jsonl", "episodes_stats_jsonl"}  # the default, and by file name
    assert names <= set(metadata_rules()), names - set(metadata_rules())


# ---- the tables the registry replaced read as they did ----------------------------------------------------


def test_file_scope_is_the_old_file_checks() -> None:
    assert {n for n in CHECKS if is_file_check(n)} == {
        "readable", "frames_from_header", "fps", "size", "declared_size", "declared_codec", "parquet_columns",
        "parquet_readable", "depth_copy", "display_rotation", "image_column"}


def test_repairs_are_the_old_table() -> None:
    assert REPAIR_NAMES == ("timestamps", "stats")
    assert repaired_by("timestamps") == {"timestamp_start", "timestamp_step", "parquet_columns", "pts_grid", "fps"}
    assert repaired_by("stats") == {"metadata_files"}
    assert checks.repair("stats").formats == ("v2.1",)  # type: ignore[union-attr]
    assert checks.repair("timestamps").formats == ("v2.1", "v3.0")  # type: ignore[union-attr]


def test_user_rules_and_per_reader_entries_are_the_old_tables() -> None:
    assert {n: user_option(n) for n in CHECKS if user_option(n)} == {
        "frames_expected": "--expect-frames", "size": "--size", "keyframes": "--all-intra"}
    old = {  # CHECK_SEVERITY (pipeline/dataset/rules.py) and READER_SEVERITY (pipeline/stages/format_checks.py)
        "metadata_rule": {"0.3": W, "0.4": W, "0.6": W},
        "stale_file_index": {"0.4": W, "0.6": W},
        "depth_codec": {"0.3": None, "0.4": None, "0.6": E},
        "depth_copy": {"0.3": INFO, "0.4": INFO, "0.6": INFO},
        "display_rotation": {"0.3": W, "0.4": W, "0.6": W},
    }
    for name, per in old.items():
        for version, lines in READER_LINES.items():
            assert severity_by_reader(name, "error", version) == {r: per.get(r) for r in lines}, (name, version)
    # total_frames: the severity it was made with per format (0.3.3 loads, 0.4.4 raises past the rows)
    assert (found_severity("total_frames", "v2.1"), found_severity("total_frames", "v3.0")) == (W, E)


def test_undeclared_check_keeps_the_severity_it_was_found_with() -> None:
    assert severity_by_reader("not_a_check", "warning", "v3.0") == {"0.4": "warning", "0.6": "warning"}
    assert decide("not_a_rule", "v3.0", "scan") == "refuse"


# ---- the types ---------------------------------------------------------------------------------------


def test_enums_are_the_report_strings() -> None:
    schema = json.loads((REPO / "schemas/verify.schema.json").read_text())
    failure = schema["properties"]["failures"]["items"]["properties"]
    assert [s.value for s in Severity] == failure["severity"]["enum"] == ["error", "trains_wrong", "warning", "info"]
    assert [r.value for r in Reader] == schema["properties"]["options"]["properties"]["reader"]["enum"][1:]
    assert READER_CHOICES == ("all", "0.3", "0.4", "0.6") and all(type(c) is str for c in READER_CHOICES)
    episode_status = schema["properties"]["episodes"]["items"]["properties"]["status"]["enum"]
    assert set(episode_status) <= {s.value for s in Status}
    assert {s.value for s in Status} == {"ok", "failed", "passed", "encoded", "copied", "kept", "written"}
    assert json.dumps({Reader.V04: [Severity.ERROR, Status.KEPT]}) == '{"0.4": ["error", "kept"]}'
    assert f"{Severity.TRAINS_WRONG}" == "trains_wrong" and Severity.TRAINS_WRONG.fails and not W.fails


def test_the_registry_imports_nothing_but_the_standard_library() -> None:
    """Layer 1 (bench/architecture.py): no prep module, nothing heavy; the CLI imports it at start."""
    code = ("import sys; before = set(sys.modules); import pipeline.checks; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith(('enum', 'dataclasses'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    new = json.loads(res.stdout.replace("'", '"'))
    assert [m for m in new if m.startswith("pipeline")] == ["pipeline", "pipeline.checks"], new
