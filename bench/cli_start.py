"""Benchmark the CLI's start-up: median wall time of `prep --version`, `prep --help`, `prep scan --help`, and a
scan and a verify of a 10-episode dataset (3 cameras, 30 frames of 128x96 each).

Each command is a fresh process (as a user types it), run N times; the table gives median, min and max.
Targets on a quiet 2-core machine: 0.3 s, 0.3 s, 0.5 s, 2 s and 2 s.  By default the checkout holding this
script is measured (`python -m pipeline.cli` with PYTHONPATH=REPO); `--repo PATH` measures another checkout
(e.g. before/after a change), `--prep .venv/bin/prep` an installed entry point.

    python bench/cli_start.py [--runs 5] [--label after] [--repo PATH | --prep COMMAND]
                              [--out bench/results/cli_start.json]

The JSON keeps one entry per `--label` (a rerun replaces its own label's entry), each with the load average
before and after and the Python version. It records no path of the machine: a checkout is named relative to
this one, the interpreter as `python`, the temporary dataset as `<tmp>`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
TARGETS = {"prep --version": 0.3, "prep --help": 0.3, "prep scan --help": 0.5, "prep scan (10 episodes)": 2.0,
           "prep verify (10 episodes)": 2.0}


def _make_corpus(root: Path) -> None:
    """Ten synthetic episodes (3 cameras, 30 small frames), written by this checkout's pipeline.synth."""
    sys.path.insert(0, str(HERE))
    from pipeline.synth import SynthSpec, write_synthetic

    write_synthetic(root, SynthSpec(episodes=10, frames=30, height=96, width=128))


def _relative(path: Path) -> str:
    """A path as this checkout names it (`.`, `../main`), never absolute."""
    return os.path.relpath(path.resolve(), HERE)


def _portable(argv: list[str], prefix: list[str], shown: list[str], tmp: Path) -> list[str]:
    """argv as recorded: the command's own prefix (interpreter, entry point) as `shown`, the temp folder as <tmp>."""
    return [*shown, *(a.replace(str(tmp), "<tmp>") for a in argv[len(prefix):])]


def _time(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs per command (default: 5)")
    ap.add_argument("--label", default="current", help="name of this measurement in the JSON (e.g. before, after)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--repo", type=Path, default=HERE, help="checkout to measure via python -m pipeline.cli")
    src.add_argument("--prep", help="an installed prep command to measure instead, e.g. .venv/bin/prep")
    ap.add_argument("--out", type=Path, default=HERE / "bench/results/cli_start.json")
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if args.prep:
        prep = shlex.split(args.prep)
        shown = [Path(prep[0]).name, *prep[1:]] if os.path.isabs(prep[0]) else prep
        source = shlex.join(shown)
    else:
        prep = [sys.executable, "-m", "pipeline.cli"]
        shown = ["python", "-m", "pipeline.cli"]
        env["PYTHONPATH"] = str(args.repo.resolve())
        source = f"python -m pipeline.cli, PYTHONPATH={_relative(args.repo)} (relative to this checkout)"
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prep-cli-start-") as tmp:
        work = Path(tmp)
        _make_corpus(work / "ten")
        commands = {
            "prep --version": ["--version"],
            "prep --help": ["--help"],
            "prep scan --help": ["scan", "--help"],
            "prep scan (10 episodes)": ["scan", str(work / "ten"), "--out", str(work / "ten.manifest.json")],
            "prep verify (10 episodes)": ["verify", str(work / "ten")],
        }
        for name, extra in commands.items():
            times = [_time([*prep, *extra], env, work) for _ in range(args.runs)]
            med = statistics.median(times)
            rows.append({"command": name, "argv": _portable([*prep, *extra], prep, shown, work),
                         "runs_s": [round(t, 4) for t in times],
                         "median_s": round(med, 4), "min_s": round(min(times), 4), "max_s": round(max(times), 4),
                         "target_s": TARGETS[name], "met": med <= TARGETS[name]})
    load_after = os.getloadavg()

    print(f"{args.label}: {source}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{args.runs} runs each")
    print(f"{'command':<24}{'median s':>10}{'min s':>9}{'max s':>9}{'target s':>10}  met")
    for r in rows:
        print(f"{r['command']:<24}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['max_s']:>9.3f}{r['target_s']:>10.1f}"
              f"  {'yes' if r['met'] else 'NO'}")

    doc: dict[str, Any] = {"benchmark": "cli_start", "measurements": {}}
    if args.out.is_file():
        doc = json.loads(args.out.read_text(encoding="utf-8"))
    doc["measurements"][args.label] = {
        "source": source, "runs": args.runs, "rows": rows,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": list(load_before), "loadavg_after": list(load_after)},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp_out.replace(args.out)
    print(f"results   {_relative(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
