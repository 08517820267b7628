"""LeRobot parity table (issue 12): for every parity case (tests/compat/parity_cases), what the real
reader does (lerobot 0.3.3 for v2.1, 0.4.4 for v3.0; every sample, torchcodec and pyav, a 50-step action
chunk, default tolerance) against `prep verify`'s verdict (without and with --decode) and `prep reencode
--dst 64`'s outcome, and whether the real reader loads prep's output.

    python3 bench/parity.py [--cases NAME,GLOB..] [--formats v2.1,v3.0] [--work DIR] [--fresh]
                            [--out bench/results/parity.json] [--strict]

The orchestrator (any Python with prep's dependencies; it runs prep) starts one worker per format inside
that format's LeRobot venv ($PREP_VENVS/lerobot-v21, -v30), both at once. Results are cached per case
under --work, keyed by the sources of prep, the cases and this script: a rerun redoes only what changed
(--fresh redoes all), and a worker that dies is restarted after the case it died on. Prints the table and
the counts, writes JSON. Exit 0; with --strict (or PARITY_STRICT=1) exit 1 when any row disagrees or
could not be run.

    python bench/parity.py --worker --format v3.0 ...   (internal: one venv's cases)
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "compat"), str(REPO)]

from parity_cases.model import CASES, FORMATS, VENV_OF  # noqa: E402
from parity_cases.table import KINDS, counts, render, verdict  # noqa: E402

DEFAULT_WORK = Path("/tmp/prep-parity")
DEFAULT_OUT = REPO / "bench/results/parity.json"
WORKER_TIMEOUT_S = 3600


def fingerprint() -> str:
    """Hash of everything a row depends on: prep's code and schemas, the cases, this script."""
    h = hashlib.sha256()
    files = sorted([*REPO.glob("pipeline/**/*.py"), *REPO.glob("schemas/*.json"),
                    *REPO.glob("tests/compat/parity_cases/*.py"), Path(__file__).resolve()])
    for f in files:
        h.update(f.relative_to(REPO).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def select(cases: str | None, formats: str | None) -> list[tuple[str, str]]:
    fmts = [f if f.startswith("v") and "." in f else {"v21": "v2.1", "v30": "v3.0"}.get(f, f)
            for f in (formats.split(",") if formats else FORMATS)]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise SystemExit(f"parity: unknown format(s) {bad}; choose from {list(FORMATS)}")
    pats = cases.split(",") if cases else ["*"]
    names = [n for n in CASES if any(fnmatch.fnmatch(n, p) for p in pats)]
    unknown = [p for p in pats if not any(fnmatch.fnmatch(n, p) for n in CASES)]
    if unknown:
        raise SystemExit(f"parity: no case matches {unknown}; cases: {', '.join(CASES)}")
    return [(n, f) for n in names for f in fmts if f in CASES[n].formats]


# ---------------------------------------------------------------- worker (inside a LeRobot venv)


def worker(args: argparse.Namespace) -> int:
    import importlib.metadata

    from parity_cases.harness import run_case
    from parity_cases.table import findings_text, reader_text, reencode_text

    fmt = args.format
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("lerobot")
    key = f"{args.key}/lerobot-{version}"
    for name in args.cases.split(","):
        result = work / name / "result.json"
        if result.is_file() and not args.fresh:
            try:
                if json.loads(result.read_text()).get("key") == key:
                    print(f"[parity {fmt}] {name}: cached", flush=True)
                    continue
            except ValueError:
                pass
        (work / f"{name}.started").write_text(str(os.getpid()))
        row = run_case(name, fmt, work, args.prep_python, args.prep_scheduler)
        row["lerobot"] = version
        tmp = result.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "row": row}, indent=1, default=str))
        tmp.replace(result)
        (work / f"{name}.started").unlink(missing_ok=True)
        if row.get("error"):
            print(f"[parity {fmt}] {name}: ERROR {row['error']}", flush=True)
        else:
            print(f"[parity {fmt}] {name}: reader {reader_text(row['reader'])}; verify "
                  f"{findings_text(row['verify'])}; --decode {findings_text(row['verify_decode'])}; reencode "
                  f"{' / '.join(reencode_text(r) for r in row['reencode'])} ({row['seconds']:.0f} s)", flush=True)
    return 0


# ---------------------------------------------------------------- orchestrator


def run_format(fmt: str, names: list[str], work: Path, key: str, fresh: bool, venvs: Path,
               log: list[str], scheduler: str | None) -> dict[str, Any]:
    """Run (and restart after a crash) the worker of one format; returns its timing."""
    py = venvs / f"lerobot-{VENV_OF[fmt]}" / "bin/python"
    fwork = work / VENV_OF[fmt]
    fwork.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    info: dict[str, Any] = {"venv": str(py.parent.parent), "restarts": 0}
    if not py.is_file():
        info["error"] = f"no venv at {py.parent.parent} (run .ci/lerobot_envs.sh)"
        log.append(f"[parity {fmt}] {info['error']}")
        print(log[-1], flush=True)
        return info
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(work / f"hf-{VENV_OF[fmt]}"),
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                           if os.environ.get("PYTHONPATH") else ""))
    todo = list(names)
    while todo:
        cmd = [str(py), str(Path(__file__).resolve()), "--worker", "--format", fmt, "--cases", ",".join(todo),
               "--work", str(fwork), "--prep-python", sys.executable, "--key", key]
        if fresh:
            cmd.append("--fresh")
        if scheduler:
            cmd += ["--prep-scheduler", scheduler]
        with open(fwork / "worker.log", "a") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO, env=env)
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                if line.startswith("[parity"):
                    log.append(line)
                    print(line, flush=True)
            rc = proc.wait(timeout=WORKER_TIMEOUT_S)
        done = [n for n in todo if (fwork / n / "result.json").is_file()
                and not (fwork / f"{n}.started").exists()]
        crashed = [n for n in todo if (fwork / f"{n}.started").exists()]
        for n in crashed:  # the case the worker died on: recorded, not retried
            (fwork / n).mkdir(parents=True, exist_ok=True)
            row = {"case": n, "format": fmt, "what": CASES[n].what, "control": CASES[n].control,
                   "error": f"the worker died on this case (exit {rc}; see {fwork / 'worker.log'})"}
            (fwork / n / "result.json").write_text(json.dumps({"key": "crashed", "row": row}))
            (fwork / f"{n}.started").unlink()
            log.append(f"[parity {fmt}] {n}: worker died (exit {rc})")
            print(log[-1], flush=True)
        todo = [n for n in todo if n not in done and n not in crashed]
        if todo and rc == 0:
            break  # the worker finished without doing them: nothing more to try
        if todo:
            info["restarts"] += 1
        fresh = False
    info["seconds"] = round(time.monotonic() - t0, 1)
    return info


def expect_json(name: str, fmt: str) -> dict[str, str]:
    e = CASES[name].expect[fmt]
    return {"outcome": e.outcome, "where": e.where, "why": e.why}


def collect(selected: list[tuple[str, str]], work: Path) -> list[dict[str, Any]]:
    rows = []
    for name, fmt in selected:
        p = work / VENV_OF[fmt] / name / "result.json"
        if p.is_file():
            row = json.loads(p.read_text())["row"]
        else:
            row = {"case": name, "format": fmt, "what": CASES[name].what, "control": CASES[name].control,
                   "error": "no result (the worker did not reach this case)"}
        row["expect"] = expect_json(name, fmt)
        row["verdict"] = verdict(row)
        rows.append(row)
    return rows


def trim(row: dict[str, Any]) -> dict[str, Any]:
    """The row for the JSON file: command output tails shortened."""
    def cut(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (v[-400:] if k.endswith("_tail") and isinstance(v, str) else v) for k, v in d.items()}

    out = dict(row)
    for k in ("verify", "verify_decode"):
        if isinstance(out.get(k), dict):
            out[k] = cut(out[k])
    if isinstance(out.get("reencode"), list):
        out["reencode"] = [cut(r) for r in out["reencode"]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", help="comma-separated case names or globs (default: all)")
    p.add_argument("--formats", help="v2.1,v3.0 (default: both)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK, help=f"cases, outputs and cache (default {DEFAULT_WORK})")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results (default bench/results/parity.json)")
    p.add_argument("--venvs", type=Path, default=Path(os.environ.get("PREP_VENVS", "/opt/prep-venvs")))
    p.add_argument("--fresh", action="store_true", help="ignore cached rows")
    p.add_argument("--strict", action="store_true", help="exit 1 when any row disagrees (also PARITY_STRICT=1)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--format", help=argparse.SUPPRESS)
    p.add_argument("--prep-python", help=argparse.SUPPRESS)
    p.add_argument("--key", help=argparse.SUPPRESS)
    p.add_argument("--prep-scheduler", help=argparse.SUPPRESS)
    p.add_argument("--embedded", action="store_true", help="every prep command starts its own LocalCluster "
                   "(default: one Dask cluster of this machine's cores kept up for all of them, --scheduler)")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:28s} {','.join(c.formats):9s} control={c.control or '-':20s} {c.what}")
        return 0
    selected = select(args.cases, args.formats)
    key = fingerprint()
    t0 = time.monotonic()
    load0 = os.getloadavg()
    log: list[str] = []
    timing: dict[str, Any] = {}
    with shared_cluster(not args.embedded) as scheduler:
        run_all(selected, args, key, log, timing, scheduler)
    wall = time.monotonic() - t0
    return report(selected, args, key, t0, wall, load0, timing)


@contextlib.contextmanager
def shared_cluster(wanted: bool) -> Iterator[str | None]:
    """One Dask LocalCluster for every prep command of the run (its workers import this checkout)."""
    if not wanted:
        yield None
        return
    from distributed import LocalCluster

    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                            if os.environ.get("PYTHONPATH") else "")
    cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True, memory_limit=0,
                           dashboard_address=":0", silence_logs=logging.ERROR)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def run_all(selected: list[tuple[str, str]], args: argparse.Namespace, key: str, log: list[str],
            timing: dict[str, Any], scheduler: str | None) -> None:
    threads = []
    for fmt in FORMATS:
        names = [n for n, f in selected if f == fmt]
        if not names:
            continue

        def go(fmt: str = fmt, names: list[str] = names) -> None:
            timing[fmt] = run_format(fmt, names, args.work, key, args.fresh, args.venvs, log, scheduler)

        t = threading.Thread(target=go)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def report(selected: list[tuple[str, str]], args: argparse.Namespace, key: str, t0: float, wall: float,
           load0: tuple[float, float, float], timing: dict[str, Any]) -> int:
    rows = collect(selected, args.work)
    summary = counts(rows)
    print()
    print(render(rows))
    print()
    print(f"rows {summary['rows']} ({summary['cases']} cases): {summary['agree']} agree, {summary['disagree']} "
          f"disagree")
    for k, n in summary["disagree_by_kind"].items():
        print(f"  {n:3d}  {k}: {KINDS.get(k, k)}")
    if summary["expectation_mismatches"]:
        print("  reader differs from the case's source-code expectation: "
              + ", ".join(summary["expectation_mismatches"]))
    load1 = os.getloadavg()
    per = ", ".join(f"{f}: {t.get('seconds', '-')} s" for f, t in timing.items())
    print(f"wall {wall:.0f} s ({per}); "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}; {os.cpu_count()} cores")
    obj = {
        "schema": "prep.parity/1",
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fingerprint": key,
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_start": load0, "loadavg_end": load1},
        "wall_s": round(wall, 1),
        "formats": timing,
        "counts": summary,
        "kinds": KINDS,
        "rows": [trim(r) for r in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(args.out)
    print(f"results {args.out}")
    strict = args.strict or os.environ.get("PARITY_STRICT") == "1"
    if strict and (summary["disagree"] or any(t.get("error") for t in timing.values())):
        print("parity: disagreements (PARITY_STRICT=1)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
