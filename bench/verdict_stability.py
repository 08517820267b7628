"""Ten identical `prep bench dataloader` runs on one dataset: one verdict or "inconclusive", never both.

Builds a small synthetic dataset (v3.0, 2 episodes of 12 frames, one 64x64 all-intra camera), then runs the
command in this process (`--workers 0`: the batches are loaded inline, so a run is cheap) ten times with the same
arguments, for each `--steps` and `--threshold` given, and prints the ten verdicts of each setting.

    PYTHONPATH=$PWD python bench/verdict_stability.py                 # steps 10 and 90, threshold 0.013
    PYTHONPATH=$PWD python bench/verdict_stability.py --steps 90 --threshold 0.013 0.02 --runs 10

Exit 1 if any setting gave both "keeps up" and "does not keep up".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from pipeline.cli import main as prep
from pipeline.synth import SynthSpec, write_synthetic


def verdicts(dataset: Path, out: Path, steps: int, threshold: float, runs: int) -> list[dict[str, object]]:
    rows = []
    for k in range(runs):
        args = ["bench", "dataloader", str(dataset), "--workers", "0", "--batch", "4", "--steps", str(steps),
                "--ceiling-steps", "2", "--warmup", "2", "--step-time", "0.02", "--horizon", "5",
                "--threshold", str(threshold), "--no-plot", "--out", str(out / f"s{steps}-t{threshold}-{k}")]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = prep(args)
        (run,) = json.loads((out / f"s{steps}-t{threshold}-{k}/dataloader.json").read_text())["runs"]
        lo, hi = run["p95_interval_s"]
        rows.append({"exit": code, "keeps_up": run["keeps_up"], "p95": run["train"]["data_time_s"]["p95"],
                     "interval": [lo, hi], "wall_s": time.perf_counter() - t0,
                     "verdict": run["verdict"].split(": ", 1)[1]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 90])
    ap.add_argument("--threshold", type=float, nargs="+", default=[0.013])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "verdict_stability.json",
                    help="the JSON written (default bench/results/verdict_stability.json)")
    args = ap.parse_args()
    bad = False
    settings: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        dataset = write_synthetic(Path(tmp) / "tiny", SynthSpec(version="v3.0", episodes=2, frames=12, height=64,
                                                                width=64, gop=1, cameras=("cam",)))
        for steps in args.steps:
            for threshold in args.threshold:
                rows = verdicts(dataset, Path(tmp), steps, threshold, args.runs)
                said = {r["keeps_up"] for r in rows}
                mixed = {True, False} <= said
                bad |= mixed
                settings.append({"steps": steps, "threshold_s": threshold, "runs": rows, "both_verdicts": mixed,
                                 "load_average_1m": os.getloadavg()[0], "cpus": os.cpu_count()})
                print(f"--steps {steps} --threshold {threshold:g}: {args.runs} runs, "
                      f"{'BOTH yes and no' if mixed else 'one verdict or inconclusive'}")
                for k, r in enumerate(rows, 1):
                    lo, hi = r["interval"]
                    print(f"  {k:2d}  p95 {r['p95']:.4f} s  interval {lo if lo is None else f'{lo:.4f}'}-"
                          f"{hi if hi is None else f'{hi:.4f}'}  {r['wall_s']:.1f} s  {r['verdict']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"bench": "verdict_stability", "command": "python bench/verdict_stability.py "
                                    + " ".join(sys.argv[1:]), "settings": settings}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
