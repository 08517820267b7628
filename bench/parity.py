"""LeRobot parity table (issues 12, 25): for every parity case (tests/compat/parity_cases), what each real
reader does (lerobot 0.3.3 on v2.1; 0.4.4 and 0.6.1 on v3.0; every sample, torchcodec and pyav, a 50-step
action chunk, default tolerance) against `prep verify`'s verdict (without and with --decode) and `prep
reencode --dst 64`'s outcome, and whether that reader loads prep's output. One row per (case, reader line).

    python3 bench/parity.py [--cases NAME,GLOB..] [--readers 0.3,0.4,0.6 | --formats v2.1,v3.0] [--work DIR]
                            [--fresh] [--out bench/results/parity.json] [--strict]

The orchestrator (any Python with prep's dependencies; it runs prep) starts one worker per reader line
inside that reader's LeRobot venv ($PREP_VENVS/lerobot-v21, -v30, -v06; PREP_VENVS may list several
folders, searched in order), all at once. A reader in a Debian root (lerobot-v06, Python 3.13) runs prep
with its own interpreter (prep is installed there) and an embedded cluster; the others share one Dask
cluster. Results are cached per case under --work, keyed by the sources of prep, the cases and this
script: a rerun redoes only what changed (--fresh redoes all), and a worker that dies is restarted after
the case it died on. Prints the table and the counts, writes JSON. Exit 0; with --strict (or
PARITY_STRICT=1) exit 1 when a row disagrees that its case does not declare unavoidable (`cannot_agree`,
printed with its reason) or could not be run.

    python bench/parity.py --worker --reader 0.6 ...   (internal: one venv's cases)
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

from masking import masked  # noqa: E402  (bench/, this script's folder, is on sys.path)
from parity_cases.model import (  # noqa: E402
    CASES,
    FORMAT_OF_READER,
    FORMATS,
    READER_OF_VENV,
    READERS,
    VENV_OF_READER,
    reader_line,
)
from parity_cases.table import KINDS, counts, render, render_by_reader, verdict  # noqa: E402

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


def select(cases: str | None, formats: str | None, readers: str | None = None) -> list[tuple[str, str]]:
    """(case, reader line) pairs. --formats picks every reader of each format (v3.0: 0.4 and 0.6)."""
    if readers:
        lines = [READER_OF_VENV.get(r, r.removeprefix("lerobot-").removeprefix("lerobot ")) for r in readers.split(",")]
        lines = [reader_line(r) or r for r in lines]
        bad = [r for r in lines if r not in READERS]
        if bad:
            raise SystemExit(f"parity: unknown reader(s) {bad}; choose from {list(READERS)}")
    else:
        fmts = [f if f.startswith("v") and "." in f else {"v21": "v2.1", "v30": "v3.0"}.get(f, f)
                for f in (formats.split(",") if formats else FORMATS)]
        bad = [f for f in fmts if f not in FORMATS]
        if bad:
            raise SystemExit(f"parity: unknown format(s) {bad}; choose from {list(FORMATS)}")
        lines = [r for r in READERS if FORMAT_OF_READER[r] in fmts]
    pats = cases.split(",") if cases else ["*"]
    names = [n for n in CASES if any(fnmatch.fnmatch(n, p) for p in pats)]
    unknown = [p for p in pats if not any(fnmatch.fnmatch(n, p) for n in CASES)]
    if unknown:
        raise SystemExit(f"parity: no case matches {unknown}; cases: {', '.join(CASES)}")
    return [(n, r) for n in names for r in READERS if r in lines and r in CASES[n].readers()]


def find_venv(venvs: str, reader: str) -> Path:
    """The first folder of the colon-separated `venvs` holding lerobot-NAME (else where it would be)."""
    name = f"lerobot-{VENV_OF_READER[reader]}"
    dirs = [Path(d) for d in venvs.split(os.pathsep) if d]
    for d in dirs:
        if (d / name / "bin/python").is_file():
            return d / name
    return dirs[0] / name


# ---------------------------------------------------------------- worker (inside a LeRobot venv)


def worker(args: argparse.Namespace) -> int:
    import importlib.metadata

    from parity_cases.harness import run_case
    from parity_cases.table import findings_text, reader_text, reencode_text

    reader = args.reader
    fmt = reader  # the log's tag
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("lerobot")
    if reader_line(version) != reader:
        print(f"[parity {reader}] this venv has lerobot {version}, not {reader}.x", flush=True)
        return 1
    key = f"{args.key}/lerobot-{version}"
    prep_python, scheduler = args.prep_python, args.prep_scheduler
    if prep_python == "self":  # a venv in a Debian root: prep runs with this interpreter, its own cluster
        prep_python, scheduler = sys.executable, None
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
        row = run_case(name, reader, work, prep_python, scheduler)
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


def run_reader(reader: str, names: list[str], work: Path, key: str, fresh: bool, venvs: str,
               log: list[str], scheduler: str | None) -> dict[str, Any]:
    """Run (and restart after a crash) the worker of one reader line; returns its timing."""
    fmt = reader  # the log's tag
    venv = find_venv(venvs, reader)
    py = venv / "bin/python"
    fwork = work / VENV_OF_READER[reader]
    fwork.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    cpu = 0.0  # user + system seconds of the worker and everything it waited for (its own rusage)
    # named as found in $PREP_VENVS: a result names no folder of the machine it ran on
    info: dict[str, Any] = {"venv": f"$PREP_VENVS/{venv.name}", "format": FORMAT_OF_READER[reader], "restarts": 0}
    if not py.is_file():
        info["error"] = f"no venv at {venv} (run .ci/lerobot_envs.sh)"
        log.append(f"[parity {fmt}] {info['error']}")
        print(log[-1], flush=True)
        return info
    # A venv in a Debian root (.ci/lerobot_envs.sh writes .prep-root) cannot run this interpreter, and a
    # Python 3.13 client cannot hand tasks to this Python's Dask workers: it runs prep itself.
    in_root = (venv / ".prep-root").is_file()
    prep_python = "self" if in_root else sys.executable
    if in_root:
        scheduler = None
        info["interpreter"] = "its own (Debian root)"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(work / f"hf-{VENV_OF_READER[reader]}"),
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                           if os.environ.get("PYTHONPATH") else ""))
    if in_root:  # what the root must see besides the current folder (the checkout) and /tmp
        env["PREP_CHROOT_BIND"] = os.pathsep.join(filter(None, [str(work.resolve()), str(REPO),
                                                                os.environ.get("PREP_CHROOT_BIND")]))
    todo = list(names)
    while todo:
        cmd = [str(py), str(Path(__file__).resolve()), "--worker", "--reader", reader, "--cases", ",".join(todo),
               "--work", str(fwork), "--prep-python", prep_python, "--key", key]
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
            rc, used = wait_rusage(proc)
            cpu += used
        done = [n for n in todo if (fwork / n / "result.json").is_file()
                and not (fwork / f"{n}.started").exists()]
        crashed = [n for n in todo if (fwork / f"{n}.started").exists()]
        for n in crashed:  # the case the worker died on: recorded, not retried
            (fwork / n).mkdir(parents=True, exist_ok=True)
            row = {"case": n, "format": FORMAT_OF_READER[reader], "line": reader, "what": CASES[n].what,
                   "control": CASES[n].control,
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
    info["cpu_seconds"] = round(cpu, 1)
    return info


def wait_rusage(proc: subprocess.Popen[str]) -> tuple[int, float]:
    """Wait for `proc` (its stdout read to the end); its exit code and the CPU seconds it and the descendants
    it waited for used (os.wait4: this worker's own, whatever else this process runs at the same time)."""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def expect_json(name: str, reader: str) -> dict[str, str]:
    e = CASES[name].expect_for(reader)
    return {"outcome": e.outcome, "where": e.where, "why": e.why, "cannot_agree": e.cannot_agree}


def collect(selected: list[tuple[str, str]], work: Path) -> list[dict[str, Any]]:
    rows = []
    for name, reader in selected:
        p = work / VENV_OF_READER[reader] / name / "result.json"
        if p.is_file():
            row = json.loads(p.read_text())["row"]
        else:
            row = {"case": name, "format": FORMAT_OF_READER[reader], "line": reader, "what": CASES[name].what,
                   "control": CASES[name].control, "error": "no result (the worker did not reach this case)"}
        row.setdefault("line", reader)
        row["expect"] = expect_json(name, reader)
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
    p.add_argument("--readers", help="reader lines 0.3,0.4,0.6 (or venv names v21,v30,v06; default: all)")
    p.add_argument("--formats", help="v2.1,v3.0: every reader of those formats (default: all)")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK, help=f"cases, outputs and cache (default {DEFAULT_WORK})")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results (default bench/results/parity.json)")
    p.add_argument("--venvs", default=os.environ.get("PREP_VENVS", "/opt/prep-venvs"),
                   help="folder(s) holding lerobot-v21/-v30/-v06, colon-separated (default $PREP_VENVS or "
                        "/opt/prep-venvs)")
    p.add_argument("--fresh", action="store_true", help="ignore cached rows")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a row disagrees that no case declares unavoidable, or cannot be run "
                   "(also PARITY_STRICT=1)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reader", help=argparse.SUPPRESS)
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
            print(f"{c.name:28s} {','.join(c.readers()):11s} control={c.control or '-':20s} {c.what}")
        return 0
    selected = select(args.cases, args.formats, args.readers)
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
    for reader in READERS:
        names = [n for n, r in selected if r == reader]
        if not names:
            continue

        def go(reader: str = reader, names: list[str] = names) -> None:
            timing[reader] = run_reader(reader, names, args.work, key, args.fresh, args.venvs, log, scheduler)

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
    print(render_by_reader(rows))
    print()
    print(f"rows {summary['rows']} ({summary['cases']} cases): {summary['agree']} agree, {summary['disagree']} "
          f"disagree ({len(summary['known'])} known, {summary['unexplained']} unexplained)")
    for line in summary["known"]:
        print(f"  known: {line}")
    for line, n in summary["per_reader"].items():
        print(f"  lerobot {line}: {n['agree']} of {n['rows']} rows agree")
    for k, n in summary["disagree_by_kind"].items():
        print(f"  {n:3d}  {k}: {KINDS.get(k, k)}")
    if summary["expectation_mismatches"]:
        print("  reader differs from the case's source-code expectation: "
              + ", ".join(summary["expectation_mismatches"]))
    load1 = os.getloadavg()
    per = ", ".join(f"lerobot {f}: {t.get('seconds', '-')} s wall, {t.get('cpu_seconds', '-')} s CPU"
                    for f, t in timing.items())
    print(f"wall {wall:.0f} s ({per}); "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}; {os.cpu_count()} cores")
    obj = {
        "schema": "prep.parity/1",
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fingerprint": key,
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_start": load0, "loadavg_end": load1},
        "wall_s": round(wall, 1),
        "readers": timing,
        "counts": summary,
        "kinds": KINDS,
        "rows": [trim(r) for r in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(masked(json.loads(json.dumps(obj, default=str))), indent=1) + "\n")
    tmp.replace(args.out)
    print(f"results {args.out}")
    strict = args.strict or os.environ.get("PARITY_STRICT") == "1"
    if strict and (summary["unexplained"] or any(t.get("error") for t in timing.values())):
        print(f"parity: {summary['unexplained']} disagreement(s) no case explains (--strict)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
