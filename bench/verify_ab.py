"""A/B: `prep verify` without --decode, one core, in-process, an older revision against this checkout on the
same corpora, interleaved (before, after, before, after, ...) so that machine load hits both alike. Prints
each run with the 1-minute load average and the median episodes/s per side; writes JSON.

    python bench/verify_ab.py --before 1a2af1e --corpora /tmp/corpora [--reps 3] [--out bench/results/verify_ab.json]

`--corpora` holds datasets (e.g. the `224-intra-48` and `480x640-gop30-48` that `bench/verify.py --workdir`
builds); a name containing `224` is checked with --expect-frames 90 --size 224x224 --all-intra, others with
--expect-frames 90 (as bench/verify.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE_RUN = r'''
import json, sys, time
from pathlib import Path
from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions
root = Path(sys.argv[1])
opts = (VerifyOptions(expect_frames=90, size=(224, 224), all_intra=True) if "224" in root.name
        else VerifyOptions(expect_frames=90))
t0 = time.perf_counter()
r = verify_in_process(root, opts)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "episodes": r.episodes_checked, "episodes_per_s": r.episodes_checked / dt}))
'''


def export(rev: str, into: Path) -> Path:
    """`git archive REV` of this repository, unpacked under `into`."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_once(tree: Path, dataset: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    out = subprocess.run(["nice", "-n", "5", sys.executable, "-c", ONE_RUN, str(dataset)], capture_output=True,
                         text=True, env=env, cwd=tree, check=True)
    res: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="git revision to compare against")
    p.add_argument("--corpora", type=Path, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=REPO / "bench/results/verify_ab.json")
    args = p.parse_args()
    datasets = sorted(d for d in args.corpora.iterdir() if (d / "meta/info.json").is_file())
    with tempfile.TemporaryDirectory(prefix="verify-ab-") as tmp:
        trees = {"before": export(args.before, Path(tmp) / "before"), "after": REPO}
        rows = []
        for rep in range(args.reps):
            for ds in datasets:
                for side, tree in trees.items():
                    load = os.getloadavg()[0]
                    rows.append({"rep": rep, "corpus": ds.name, "side": side, "load_1min": round(load, 2),
                                 **run_once(tree, ds)})
                    r = rows[-1]
                    print(f"{ds.name:20} {side:6} {r['episodes_per_s']:7.1f} ep/s  load {load:.1f}", flush=True)
    summary = {}
    for ds in datasets:
        med = {side: statistics.median(r["episodes_per_s"] for r in rows if r["corpus"] == ds.name and
                                       r["side"] == side) for side in ("before", "after")}
        summary[ds.name] = {**med, "slowdown": med["before"] / med["after"] if med["after"] else None}
        print(f"{ds.name:20} median before {med['before']:.1f} ep/s, after {med['after']:.1f} ep/s "
              f"(after is {summary[ds.name]['slowdown']:.2f}x the time)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"schema": "prep.bench.verify_ab/1", "before": args.before,
                                    "after": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                                            capture_output=True, text=True).stdout.strip(),
                                    "cpus": os.cpu_count(), "summary": summary, "runs": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
