"""Benchmark the memory a corpus's plan takes: 100 datasets of 10,000 episodes (1 M in all; half v2.1, half v3.0)
against one dataset of 1 M episodes (v2.1, and v3.0), planned as `prep verify` and `prep reencode` plan them.

The datasets hold only metadata (what opening and planning read; no unit is run, so no video or data file is
needed), built as bench/edit_scale.py builds them: v2.1 `meta/episodes.jsonl`, `episodes_stats.jsonl`, `tasks.jsonl`;
v3.0 one `meta/episodes/chunk-000/file-000.parquet` (3 cameras, 100 episodes per video file, 1,000 per data file)
and `meta/tasks.parquet`. The corpus is one 10 k dataset of each version, its metadata hard-linked into 50 folders
each (`d000` ... `d099`: identical metadata, 100 datasets to the corpus job).

Each measurement runs in a fresh process; after the imports its peak RSS (Linux VmHWM) is reset
(/proc/self/clear_refs) and measured over the plan of the whole input:
- corpus: `pipeline.jobs.corpus.each_dataset` over the 100 datasets (as `prep verify --corpus` / `prep reencode
  --corpus` walk them: each located, its identity listed, its camera mapping checked), the job of each being what
  the verify and reencode jobs do before their map: `open_validated` (the metadata checked and read into the
  columnar model) and every unit of `jobs.verify.plan` and of `jobs.reencode.plan_videos` + `plan_data`, counted;
  each dataset's summary kept, its model dropped;
- single: the same job on the one dataset.

    python bench/corpus_scale.py                                  # 100 x 10k vs 1 x 1M (v2.1 and v3.0)
    python bench/corpus_scale.py --episodes 100000 --datasets 10  # smaller
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import edit_scale
from masking import masked

from pipeline import atomic

MEASURE = r"""
import json, sys, time
from pathlib import Path
from pipeline.runner import peak_rss_bytes
from pipeline.corpus.spec import corpus_of_arguments
from pipeline.formats.validate import open_validated
from pipeline.jobs import corpus as C, reencode as R, verify as V
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions

def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0

out = Path(sys.argv[1])
paths = sys.argv[2:]
verify_opts, reencode_opts = VerifyOptions(), ReencodeOptions(size=(224, 224))

def job(entry, location):
    ds, rejected = open_validated(location, "verify")
    verify_units = sum(1 for _ in V.plan(ds, verify_opts, rejected))
    target = out / entry.name
    reencode_units = sum(1 for _ in R.plan_videos(ds, target, reencode_opts)) + sum(1 for _ in R.plan_data(ds, target))
    return C.DatasetRun(entry, C.OK, output=str(target), summary={
        "episodes": len(ds.episodes), "verify_units": verify_units, "reencode_units": reencode_units})

corpus = corpus_of_arguments(paths)
base = rss()
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
t0, c0 = time.perf_counter(), time.process_time()
runs = list(C.each_dataset(corpus, C.Ledger(None), job, quiet=True))
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = peak_rss_bytes()
assert all(r.ok for r in runs), [r.reason for r in runs if not r.ok][:3]
print(json.dumps({"datasets": len(runs), "episodes": sum(r.summary["episodes"] for r in runs),
                  "verify_units": sum(r.summary["verify_units"] for r in runs),
                  "reencode_units": sum(r.summary["reencode_units"] for r in runs),
                  "seconds": seconds, "cpu_seconds": cpu, "rss_before": base, "peak_rss": peak,
                  "peak_rss_above_start": peak - base}))
"""


def measure(label: str, paths: list[Path], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(out), *map(str, paths)], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    row: dict[str, Any] = {"input": label, **json.loads(proc.stdout.strip().splitlines()[-1]),
                           "load_avg": os.getloadavg()}
    return row


def link_copies(template: Path, dests: list[Path]) -> None:
    """The template's files hard-linked into each destination folder (the metadata of one dataset, many times)."""
    for dst in dests:
        if (dst / "meta/info.json").is_file():
            continue
        for src in template.rglob("*"):
            if src.is_file():
                target = dst / src.relative_to(template)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(src, target)


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'input':<28}{'datasets':>9}{'episodes':>11}{'verify units':>14}{'reencode units':>16}{'seconds':>9}"
            f"{'peak RSS MB':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['input']:<28}{r['datasets']:>9,}{r['episodes']:>11,}{r['verify_units']:>14,}"
                     f"{r['reencode_units']:>16,}{r['seconds']:>9.1f}{r['peak_rss_above_start'] / 1e6:>13.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1_000_000, help="episodes in all (default 1,000,000)")
    ap.add_argument("--datasets", type=int, default=100, help="datasets of the corpus (default 100; even)")
    ap.add_argument("--singles", default="v2.1,v3.0", help="single-dataset baselines to measure")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/prep-corpus-scale"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/corpus_scale.json"))
    args = ap.parse_args(argv)
    from pipeline.runner import machine_cores

    per = args.episodes // args.datasets
    result: dict[str, Any] = {
        "bench": "corpus_scale", "command": ["bench/corpus_scale.py", *(argv if argv is not None else sys.argv[1:])],
        "machine": {"cores": machine_cores(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg_start": os.getloadavg()},
        "corpus": {"datasets": args.datasets, "episodes_per_dataset": per, "episodes": per * args.datasets,
                   "versions": "half v2.1, half v3.0", "metadata_only": True, "cameras": 3,
                   "episodes_per_video_file": edit_scale.PER_VIDEO_FILE,
                   "episodes_per_data_file": edit_scale.PER_DATA_FILE},
        "measured": "peak RSS (VmHWM) above the process's RSS after its imports, over opening and planning every "
                    "dataset (verify's plan and reencode's, units counted, not run)",
        "runs": [], "builds": [],
    }
    work = args.workdir
    try:
        t0 = time.perf_counter()
        templates = {"v2.1": edit_scale.build_v21(work / "template-v21", per),
                     "v3.0": edit_scale.build_v30(work / "template-v30", per)}
        half = args.datasets // 2
        dests = [work / "corpus" / f"d{i:03d}" for i in range(args.datasets)]
        link_copies(templates["v2.1"], dests[:half])
        link_copies(templates["v3.0"], dests[half:])
        result["builds"].append({"input": "corpus", "seconds": time.perf_counter() - t0})
        row = measure(f"corpus {args.datasets} x {per // 1000}k", dests, work / "out")
        result["runs"].append(row)
        print(table([row]).splitlines()[-1], flush=True)
        for version in (v for v in args.singles.split(",") if v):
            t0 = time.perf_counter()
            build = edit_scale.build_v21 if version == "v2.1" else edit_scale.build_v30
            root = build(work / f"single-{version}", per * args.datasets)
            result["builds"].append({"input": f"single {version}", "seconds": time.perf_counter() - t0})
            row = measure(f"single {version} {per * args.datasets // 1000}k", [root], work / "out")
            result["runs"].append(row)
            print(table([row]).splitlines()[-1], flush=True)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    corpus_peak = result["runs"][0]["peak_rss_above_start"]
    singles = [r["peak_rss_above_start"] for r in result["runs"][1:]]
    result["summary"] = {"corpus_peak_rss_above_start": corpus_peak, "single_peak_rss_above_start": singles,
                         "corpus_over_smallest_single": corpus_peak / min(singles) if singles else None}
    result["machine"]["load_avg_end"] = os.getloadavg()
    print()
    print(table(result["runs"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
