"""Every path prep writes, as the kernel saw it: a few commands run under `strace -f -e trace=%file` (every
process: the CLI and its Dask LocalCluster workers), each write-like call sorted into allowed (the case's
--out or report folder), temp (the run's private $TMPDIR), source, outside (the case's folder, not allowed)
and system (/dev/shm semaphores, /dev/null). Prints a table and writes bench/results/strace_writes.json;
exits 1 when any case wrote in its source or outside its allowed paths.

    python bench/strace_writes.py [--out bench/results/strace_writes.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.strace import available, trace  # noqa: E402

from pipeline import __version__, atomic  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

CAMS = ("observation.images.cam_high", "observation.images.cam_wrist")
SPECS = {"v21": SynthSpec(version="v2.1", episodes=4, frames=30, height=240, width=320, cameras=CAMS, seed=6),
         "v30": SynthSpec(version="v3.0", episodes=4, frames=30, height=240, width=320, cameras=CAMS,
                          episodes_per_file=2, seed=7)}
QUIET = ("--no-progress",)


def _collapse(paths: list[str]) -> list[str]:
    """System paths with their random parts folded (`/dev/shm/sem.*`), for a short summary."""
    return sorted({re.sub(r"(/dev/shm/(?:sem\.)?)[^/]+$", r"\1*", p) for p in paths})


def cases(work: Path) -> list[dict[str, Any]]:
    v21, v30 = (write_synthetic(work / name, SPECS[name]) for name in ("v21", "v30"))
    out21, out30 = work / "out21", work / "out30"
    reports = work / "reports"
    lock_out = work / "locked"
    (lock_out / "prep").mkdir(parents=True)
    victim = work / "victim.txt"
    victim.write_text("precious\n")
    (lock_out / "prep/output.lock").symlink_to(victim)
    return [
        {"case": "reencode v2.1 (LocalCluster, 1 worker)", "src": v21, "allowed": [out21], "exit": 0,
         "args": ["reencode", "--src", str(v21), "--dst", "224", "--out", str(out21), "--workers", "1", *QUIET]},
        {"case": "reencode v3.0, then resume (info.json, 2 videos gone)", "src": v30, "allowed": [out30], "exit": 0,
         "prepare": ["reencode", "--src", str(v30), "--dst", "224", "--out", str(out30), "--backend", "inline", *QUIET],
         "args": ["reencode", "--src", str(v30), "--dst", "224", "--out", str(out30), "--backend", "inline", *QUIET]},
        {"case": "scan v2.1 --out reports/m.json", "src": v21, "allowed": [reports], "exit": 0,
         "args": ["scan", str(v21), "--out", str(reports / "m.json"), "--backend", "inline", *QUIET]},
        {"case": "verify v3.0 --out reports/v.json", "src": v30, "allowed": [reports], "exit": 0,
         "args": ["verify", str(v30), "--out", str(reports / "v.json"), "--backend", "inline", *QUIET]},
        {"case": "convert v2.1 -> v3.0", "src": v21, "allowed": [work / "conv"], "exit": 0,
         "args": ["convert", str(v21), "--to", "v3.0", "--out", str(work / "conv"), "--backend", "inline", *QUIET]},
        {"case": "edit v3.0 --drop 1", "src": v30, "allowed": [work / "edited"], "exit": 0,
         "args": ["edit", str(v30), "--drop", "1", "--out", str(work / "edited"), "--backend", "inline", *QUIET]},
        {"case": "edit v2.1 --split train=0.5 val=0.5", "src": v21, "allowed": [work / "split"], "exit": 0,
         "args": ["edit", str(v21), "--split", "train=0.5", "val=0.5", "--out", str(work / "split"), "--backend",
                  "inline", *QUIET]},
        {"case": "budget --native reports/m.json --out budget", "src": v21, "allowed": [work / "budget"], "exit": 0,
         "args": ["budget", "--native", str(reports / "m.json"), "--out", str(work / "budget"), "--no-plots"]},
        {"case": "reencode with OUT/prep/output.lock -> a file (refused)", "src": v21, "allowed": [], "exit": 2,
         "args": ["reencode", "--src", str(v21), "--dst", "224", "--out", str(lock_out), "--backend", "inline",
                  *QUIET], "victim": victim},
        {"case": "verify --out SRC/meta/info.json (refused)", "src": v30, "allowed": [], "exit": 2,
         "args": ["verify", str(v30), "--out", str(v30 / "meta/info.json"), "--backend", "inline", *QUIET]},
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/strace_writes.json")
    args = ap.parse_args(argv)
    if not available():
        print("strace is not installed (apt-get install strace)", file=sys.stderr)
        return 2
    os.chdir(REPO)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prep-strace-bench-") as tmp:
        work = Path(tmp)
        for c in cases(work):
            if "prepare" in c:
                from support.faults import prep

                r = prep(*c["prepare"])
                assert r.returncode == 0, r.stderr
                out = Path(c["allowed"][0])
                (out / "meta/info.json").unlink()
                for p in sorted((out / "videos").rglob("*.mp4"))[:2]:
                    p.unlink()
            t = trace(c["case"], c["args"], allowed=c["allowed"], source=c["src"], work=work)
            row = {**t.summary(), "expected_exit": c["exit"], "system_writes": _collapse(t.system),
                   "temp_writes": len(t.temp)}
            row["command"] = " ".join(atomic.shown(a).replace(str(work), "<work>") for a in row["command"])
            if "victim" in c:
                row["victim_unchanged"] = c["victim"].read_text() == "precious\n"
            row["ok"] = (t.exit == c["exit"] and not t.source and not t.outside
                         and row.get("victim_unchanged", True))
            rows.append(row)
        shutil.rmtree(work / "tmp", ignore_errors=True)
    print(f"{'case':58} {'exit':>4} {'calls':>5} {'allowed':>7} {'temp':>4} {'source':>6} {'outside':>7}  system")
    for r in rows:
        print(f"{r['case']:58} {r['exit']:>4} {r['write_calls']:>5} {r['allowed_paths']:>7} {r['temp_writes']:>4} "
              f"{len(r['source_writes']):>6} {len(r['outside_writes']):>7}  {', '.join(r['system_writes']) or '-'}")
    ok = all(r["ok"] for r in rows)
    doc = {"schema": "prep.bench.strace_writes/1", "prep_version": __version__,
           "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count()},
           "strace": "strace -f -ff -y -e trace=%file", "ok": ok,
           "totals": {"cases": len(rows), "source_writes": sum(len(r["source_writes"]) for r in rows),
                      "outside_writes": sum(len(r["outside_writes"]) for r in rows)},
           "rows": rows}
    atomic.write_json(args.out, doc, indent=2)
    print(f"source writes {doc['totals']['source_writes']}, outside writes {doc['totals']['outside_writes']} "
          f"(both must be 0); wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
