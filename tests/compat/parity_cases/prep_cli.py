"""`prep verify` and `prep reencode` as a user runs them: the CLI (`python -m pipeline.cli ...`) in a
subprocess, with the interpreter prep is installed for, this checkout first on PYTHONPATH. Reads the
exit code, the JSON report and what was written; knows nothing of torch or lerobot.

Verdicts read a per-finding `severity` and a per-dataset `lerobot_loads` when verify's JSON has them;
until then every failure counts as an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DST = "64"  # `prep reencode --dst 64`: small and fast; the parity does not depend on the size
TIMEOUT_S = 600


def execution(scheduler: str | None) -> list[str]:
    """`--scheduler ADDRESS` (a Dask cluster the harness keeps up, saving a cluster start per command)
    or an embedded LocalCluster of one worker."""
    return ["--scheduler", scheduler] if scheduler else ["--workers", "1"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_prep(python: str, args: list[str], timeout: int = TIMEOUT_S) -> dict[str, Any]:
    cmd = [python, "-m", "pipeline.cli", *args]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=_env())
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, str(exc.stdout or ""), f"timed out after {timeout} s"
    return {"cmd": " ".join(["prep", *args]), "rc": rc, "seconds": round(time.monotonic() - t0, 2),
            "stdout_tail": out[-1500:], "stderr_tail": err[-1500:]}


@lru_cache(maxsize=4)
def verify_help(python: str) -> str:
    """The whole of `prep verify --help` (the options are near its top, beyond run_prep's tails)."""
    r = subprocess.run([python, "-m", "pipeline.cli", "verify", "--help"], capture_output=True, text=True, timeout=120,
                       cwd=REPO, env=_env())
    return r.stdout


def reencode_has_reader_option(python: str) -> bool:
    """Whether `prep reencode` takes `--reader` (the reader line whose errors refuse the source)."""
    r = subprocess.run([python, "-m", "pipeline.cli", "reencode", "--help"], capture_output=True, text=True,
                       timeout=120, cwd=REPO, env=_env())
    return "--reader" in r.stdout


def verify_report_flag(python: str) -> str:
    """`--out` since the CLI renamed it (`--json` before)."""
    return "--out" if "--out PATH" in verify_help(python) else "--json"


def is_error(finding: dict[str, Any]) -> bool:
    return finding.get("severity", "error") == "error"


# The reader line each format's parity row is judged by when the harness names none (v2.1: lerobot 0.3.x;
# v3.0: 0.4.x, the first of its line); verify's report keys its predictions by reader line.
DEFAULT_READER = {"v2.1": "0.3", "v3.0": "0.4"}


def verify_has_reader_option(python: str) -> bool:
    """Whether `prep verify` takes `--reader 0.4|0.6|all` (the reader line whose verdict sets the severity)."""
    return "--reader" in verify_help(python)


def _loads_value(pred: Any) -> bool | None:
    """A prediction entry as True (loads) / False (refuses, raises, wrong frame) / None (no prediction)."""
    if isinstance(pred, dict):
        pred = pred.get("loads", pred.get("prediction", pred.get("outcome")))
    if isinstance(pred, bool) or pred is None:
        return pred
    if isinstance(pred, str):
        text = pred.strip().lower()
        if text in ("loads", "load", "yes", "true", "ok"):
            return True
        if text in ("", "unknown", "null", "none", "not predicted", "unchecked"):
            return None
        return False
    return None


def lerobot_prediction(report: dict[str, Any], fmt: str, reader: str | None = None) -> bool | None:
    """verify's `lerobot_loads` prediction for this reader line (or format line), when the report has one.

    Reads both shapes: one entry per format (`{"v3.0": {"reader": "lerobot 0.4.x", "loads": true}}`, also a
    bare bool or string), and one per reader line (`{"0.4": {...}, "0.6": {...}}`, keys also "lerobot 0.6",
    "0.6.x"). A per-format entry stands for every reader of that format."""
    pred = report.get("lerobot_loads")
    if pred is None:
        pred = (report.get("dataset") or {}).get("lerobot_loads")
    if not isinstance(pred, dict):
        return _loads_value(pred)
    reader = reader or DEFAULT_READER.get(fmt)
    keys: list[str] = []
    if reader:
        keys += [reader, f"lerobot {reader}", f"{reader}.x", f"lerobot {reader}.x"]
    keys += [fmt, fmt.replace(".", ""), "v" + fmt.lstrip("v").replace(".", "")]
    for key in keys:
        if key in pred:
            return _loads_value(pred[key])
    if reader:  # entries that name their reader inside ({"v3.0": {"reader": "lerobot 0.6.x", ...}})
        for entry in pred.values():
            if isinstance(entry, dict) and str(entry.get("reader", "")).startswith(f"lerobot {reader}"):
                return _loads_value(entry)
    return None


def verify(python: str, src: Path, report: Path, fmt: str, decode: bool,
           scheduler: str | None = None, reader: str | None = None) -> dict[str, Any]:
    args = ["verify", str(src), verify_report_flag(python), str(report), *execution(scheduler), "--no-progress"]
    if decode:
        args.append("--decode")
    if reader and verify_has_reader_option(python):
        args += ["--reader", reader]  # the severity of this reader line's verdict
    res = run_prep(python, args)
    findings: list[dict[str, Any]] = []
    obj: dict[str, Any] = {}
    if report.is_file():
        obj = json.loads(report.read_text())
        findings = list(obj.get("failures", []))
        findings += [dict(f, severity=f.get("severity", "warning")) for f in obj.get("warnings", [])]
    with_severity = any("severity" in f for f in findings)
    errors = [f for f in findings if is_error(f)]
    res.update(
        json=report.is_file(),
        errors=[_finding(f) for f in errors],
        warnings=[_finding(f) for f in findings if not is_error(f)],
        severities=with_severity,
        lerobot_loads=lerobot_prediction(obj, fmt, reader) if obj else None,
    )
    # Without severities, any non-zero exit is an error (today's verify: exit 1 = a check failed,
    # 2 = metadata unreadable). With them, an exit 0 with warnings is no error.
    res["has_error"] = (bool(errors) or res["rc"] == 2) if with_severity else (res["rc"] != 0 or bool(errors))
    if res["rc"] == 2:
        res["errors"].append({"check": "exit 2", "found": _last_line(res["stderr_tail"] or res["stdout_tail"])})
    return res


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    return {k: f.get(k) for k in ("check", "episode", "camera", "severity", "expected", "found") if k in f}


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def reencode(python: str, src: Path, out: Path, extra: tuple[str, ...] = (),
             scheduler: str | None = None, reader: str | None = None) -> dict[str, Any]:
    args = ["reencode", "--src", str(src), "--dst", DST, "--out", str(out), *execution(scheduler), "--no-progress",
            *extra]
    if reader and reencode_has_reader_option(python):
        args += ["--reader", reader]  # refused only for what this reader line refuses
    res = run_prep(python, args)
    res["variant"] = " ".join(extra) or "default"
    res["wrote_info"] = (out / "meta/info.json").is_file()
    report = out / "prep/reencode_report.json"
    failures: list[Any] = []
    if report.is_file():
        try:
            failures = json.loads(report.read_text()).get("failures", [])
        except (OSError, ValueError):
            failures = []
    res["failures"] = [{k: f.get(k) for k in ("path", "episode", "episodes", "camera", "reason") if k in f}
                       if isinstance(f, dict) else f for f in failures][:10]
    res["summary"] = _last_line(res["stderr_tail"]) if res["rc"] == 2 else _failure_line(res["stdout_tail"])
    return res


def _failure_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "fail" in ln.lower() and not ln.startswith("files"):
            return ln[:300]
    return lines[-1][:300] if lines else ""
