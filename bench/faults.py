"""Run the fault-injection suite and print its scenario table and counts.

Runs `pytest` on tests/test_faults_*.py and tests/test_safety_*.py (every test marked `faults`) plus the
metadata readers' property tests (tests/test_metadata_fuzz.py, referenced as one row), in this process. Each
scenario records its row (scenario, expected, observed, files lost, sources modified; where measured the
command, exit code, traceback, writes outside the allowed paths, temp files left) through
tests/support/faults.py; the table shows case, command, exit, seconds, traceback, source modified, outside
writes, temps left, expected, observed and pass (`-`: not measured by that scenario); pytest's outcome
decides the pass column: `yes`, `known bug` (a strict
xfail naming a pipeline bug: the scenario found it, the fix is pending), `skipped` (with the
reason) or `NO`. Prints the table and the counts (scenarios run, bad inputs tried, files lost,
sources modified, tracebacks in any prep run's output: the last three must be 0; files lost inside a
known-bug scenario are counted and shown apart), writes bench/results/faults.json, and exits 0 only when
no row says `NO`, no source was modified, no prep run printed a traceback and no file was lost outside a
known bug.

    python bench/faults.py [--out bench/results/faults.json] [-k EXPR] [--no-fuzz]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from masking import masked  # noqa: E402
from support.faults import RECORD_ENV  # noqa: E402

from pipeline import __version__, atomic  # noqa: E402

FUZZ = "tests/test_metadata_fuzz.py"


class Outcomes:
    """A pytest plugin: each test's outcome (passed, failed, skipped, xfailed, xpassed) and reason."""

    def __init__(self) -> None:
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "reason": ""})
        entry["seconds"] += report.duration
        if report.when == "call" or report.outcome != "passed":
            if hasattr(report, "wasxfail"):
                entry["outcome"] = "xfailed" if report.skipped else "xpassed"
                entry["reason"] = report.wasxfail
            elif report.skipped:
                entry["outcome"] = "skipped"
                longrepr = report.longrepr
                entry["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            elif report.failed:
                entry["outcome"] = "failed"
                entry["reason"] = str(report.longreprtext).strip().splitlines()[-1][:300] if report.longreprtext else ""


def pass_label(row: dict[str, Any], outcome: str) -> str:
    if row["status"] == "pass" and outcome in ("passed", ""):
        return "yes"
    if row["status"] == "known bug" and outcome == "xfailed":
        return "known bug"
    return "NO"


def build_rows(records: list[dict[str, Any]], outcomes: Outcomes) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        outcome = outcomes.tests.get(rec["test"], {}).get("outcome", "")
        rows.append({**rec, "outcome": outcome, "pass": pass_label(rec, outcome)})
    recorded = {r["test"] for r in records}
    for nodeid, t in outcomes.tests.items():
        if nodeid.startswith(FUZZ) or nodeid in recorded:
            continue
        label = "skipped" if t["outcome"] == "skipped" else ("yes" if t["outcome"] == "passed" else "NO")
        rows.append({"scenario": nodeid.split("::", 1)[1], "expected": "(see the test)",
                     "observed": f"{t['outcome']}: {t['reason']}".strip(": "), "status": t["outcome"],
                     "outcome": t["outcome"], "pass": label, "bad_input": False, "files_lost": 0,
                     "sources_modified": 0, "seconds": round(t["seconds"], 2), "test": nodeid, "details": {}})
    fuzz = {k: v for k, v in outcomes.tests.items() if k.startswith(FUZZ)}
    if fuzz:
        ok = sum(v["outcome"] == "passed" for v in fuzz.values())
        rows.append({
            "scenario": "metadata readers: any info.json / episodes.jsonl / episodes parquet (hypothesis)",
            "expected": "a dataset (plus rejected episodes) or one DatasetError; never an unhandled exception",
            "observed": f"{ok}/{len(fuzz)} property tests passed ({FUZZ}; written by the verify engineer)",
            "status": "pass" if ok == len(fuzz) else "FAIL", "outcome": "passed" if ok == len(fuzz) else "failed",
            "pass": "yes" if ok == len(fuzz) else "NO", "bad_input": True, "files_lost": 0, "sources_modified": 0,
            "seconds": round(sum(v["seconds"] for v in fuzz.values()), 2), "test": FUZZ, "details": {},
        })
    return rows


COLUMNS = ("case", "command", "exit", "seconds", "traceback", "source modified", "outside writes", "temps left",
           "expected", "observed", "pass")
WIDTHS = (34, 9, 4, 7, 9, 8, 7, 5, 30, 44, 9)


def _cell(value: Any) -> str:
    """A table cell: `-` for a field the scenario did not measure, yes/no for a flag."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def columns(r: dict[str, Any]) -> tuple[str, ...]:
    """One row's cells: case, command, exit, seconds, traceback, source modified, outside writes, temps left
    (the last five from the scenario's record where it measured them), expected, observed, pass."""
    return tuple(_cell(v) for v in (r["scenario"], r.get("command"), r.get("exit"), r.get("seconds"),
                                    r.get("traceback"), r.get("sources_modified"), r.get("outside_writes"),
                                    r.get("temps_left"), r["expected"], r["observed"], r["pass"]))


def table(rows: list[dict[str, Any]], widths: tuple[int, ...] = WIDTHS) -> str:
    rule = "+".join("-" * (w + 2) for w in widths)
    lines = [rule, _cells(COLUMNS, widths), rule]
    for r in rows:
        lines.append(_cells(columns(r), widths))
        lines.append(rule)
    return "\n".join(lines)


def _cells(values: tuple[str, ...], widths: tuple[int, ...]) -> str:
    wrapped = [textwrap.wrap(str(v), w) or [""] for v, w in zip(values, widths, strict=True)]
    height = max(len(w) for w in wrapped)
    out = []
    for i in range(height):
        out.append(" | ".join((w[i] if i < len(w) else "").ljust(width) for w, width in zip(wrapped, widths,
                                                                                                strict=True)))
    return "\n".join(" " + line for line in out)


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "scenarios_run": sum(r["pass"] != "skipped" for r in rows),
        "bad_inputs_tried": sum(bool(r["bad_input"]) and r["test"] != FUZZ for r in rows),
        "files_lost": sum(int(r["files_lost"]) for r in rows),
        "files_lost_in_known_bugs": sum(int(r["files_lost"]) for r in rows if r["pass"] == "known bug"),
        "sources_modified": sum(int(r["sources_modified"]) for r in rows),
        "outside_writes": sum(int(r.get("outside_writes") or 0) for r in rows),
        "temps_left": sum(int(r.get("temps_left") or 0) for r in rows),
        "tracebacks_in_rows": sum(bool(r.get("traceback")) for r in rows),
        "passed": sum(r["pass"] == "yes" for r in rows),
        "known_bugs": sum(r["pass"] == "known bug" for r in rows),
        "skipped": sum(r["pass"] == "skipped" for r in rows),
        "failed": sum(r["pass"] == "NO" for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/faults.json")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (a subset of the scenarios)")
    ap.add_argument("--no-fuzz", action="store_true", help=f"leave out {FUZZ}")
    args = ap.parse_args(argv)

    os.chdir(REPO)
    targets = sorted(str(p.relative_to(REPO)) for pattern in ("test_faults_*.py", "test_safety_*.py")
                     for p in (REPO / "tests").glob(pattern))
    if not args.no_fuzz:
        targets.append(FUZZ)
    with tempfile.TemporaryDirectory(prefix="prep-faults-bench-") as tmp:
        record = Path(tmp) / "rows.jsonl"
        record.touch()
        os.environ[RECORD_ENV] = str(record)
        plugin = Outcomes()
        pytest_args = [*targets, "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO), "-rfEX"]
        if args.keyword:
            pytest_args += ["-k", args.keyword]
        t0 = time.monotonic()
        code = pytest.main(pytest_args, plugins=[plugin])
        seconds = time.monotonic() - t0
        records = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
        tb_file = Path(str(record) + ".tracebacks")
        tracebacks = [json.loads(line) for line in tb_file.read_text().splitlines()] if tb_file.exists() else []
    rows = build_rows(records, plugin)
    c = counts(rows)
    c["tracebacks"] = len(tracebacks)
    print()
    print(table(rows))
    print()
    print(f"scenarios run     {c['scenarios_run']} ({c['passed']} pass, {c['known_bugs']} known bugs (xfail), "
          f"{c['failed']} failed, {c['skipped']} skipped)")
    print(f"bad inputs tried  {c['bad_inputs_tried']} (+ the metadata readers' property tests)")
    lost_bugs = c["files_lost_in_known_bugs"]
    print(f"files lost        {c['files_lost']} (must be 0"
          + (f"; {lost_bugs} of them in known-bug scenarios, pending the fix listed below)" if lost_bugs else ")"))
    print(f"sources modified  {c['sources_modified']} (must be 0)")
    print(f"outside writes    {c['outside_writes']} (paths written outside the allowed ones: must be 0)")
    print(f"temps left        {c['temps_left']} (temp files left by a finished or refused run, where measured)")
    print(f"tracebacks        {c['tracebacks']} in the output of every prep run of the suite (must be 0)")
    for tb in tracebacks[:5]:
        print(f"traceback         {tb['test']}: prep {' '.join(tb['args'][:3])} ...")
    print(f"runtime           {seconds:.0f} s (pytest exit {int(code)})")
    for r in rows:
        if r["pass"] == "known bug":
            print(f"known bug         {r['test']}: {plugin.tests.get(r['test'], {}).get('reason', '')}")
    ok = (c["failed"] == 0 and c["files_lost"] == lost_bugs and c["sources_modified"] == 0
          and c["outside_writes"] == 0 and c["tracebacks"] == 0 and int(code) == 0)
    result = {
        "schema": "prep.bench.faults/1", "prep_version": __version__,
        "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count(),
                    "load_average": list(os.getloadavg())},
        "pytest_exit": int(code), "seconds": round(seconds, 1), "ok": ok, "counts": c,
        "rows": [{k: v for k, v in r.items() if k != "details"} | {"details": r.get("details", {})} for r in rows],
        "tests": plugin.tests,
    }
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote             {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
