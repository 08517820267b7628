"""Local disk against S3 (moto on loopback), side by side in one run, on one corpus: `prep scan`, `prep verify`
and `prep reencode --dst 224` (issue 34's "must show").

    python bench/object_store.py [--episodes 50] [--workers 2] [--out bench/results/object_store.json]

The corpus: `--episodes` three-camera 480x640 h264 episodes of 90 frames at 30 fps (pipeline/synth.py, v2.1),
written once to local disk and uploaded to a moto server (tests/support/s3.py, in its own process so that it does
not compete with prep for one GIL). Each command then runs as a child process (`python -m pipeline.cli`) with
`--workers N` (a LocalCluster), local -> local against s3 -> s3, the pair interleaved. Per run: wall seconds,
bytes and requests the server counted for the run's own client (s3 runs), and the peak RSS of the client
process and of its worker processes (sampled every 0.1 s through /proc; the workers' peak is the largest single
worker's). The goals: reencode s3 -> s3 within 1.25x of local -> local; scan within 2x; scan reading at most 2% of
the corpus' bytes.

Nothing reaches a real endpoint: every child gets the loopback endpoint and dummy keys (AWS_CONFIG_FILE=/dev/null,
AWS_EC2_METADATA_DISABLED=true). Loopback answers in 1-3 ms where a real first byte takes 10-100 ms: wall ratios
here are a floor, the request counts carry over. `--latency-ms N` makes the server wait N ms before it serves each
request (a region's round trip; requests in flight wait side by side): what waiting costs each command.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from masking import masked

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

GOALS = {"reencode": 1.25, "scan": 2.0}
COMMANDS = ("scan", "verify", "reencode")
SCAN_BYTES_GOAL = 0.02


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (its LocalCluster's nannies and workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Peak(threading.Thread):
    """The peak RSS of a process and of its largest descendant, sampled until `stop()`."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.client_kib, self.worker_kib = pid, 0, 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.client_kib = max(self.client_kib, rss_kib(self.pid))
            for child in descendants(self.pid):
                self.worker_kib = max(self.worker_kib, rss_kib(child))
            self._halt.wait(0.1)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def run_prep(args: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args, "--no-progress"], cwd=REPO, env=env,
                                stdout=fh, stderr=subprocess.STDOUT)
        peak = Peak(proc.pid)
        peak.start()
        rc = proc.wait()
        peak.stop()
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"prep {' '.join(args)} exited {rc}:\n{log.read_text()[-3000:]}")
    return {"wall_s": round(wall, 2), "client_peak_rss_mb": round(peak.client_kib / 1024, 1),
            "worker_peak_rss_mb": round(peak.worker_kib / 1024, 1),
            # the machine's 1-minute load before and after (other processes share its cores: a ratio measured
            # under a load well above the workers' own is noise)
            "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def corpus(base: Path, episodes: int, version: str) -> Path:
    root = base / f"corpus-{version}-{episodes}"
    if not (root / "meta" / "info.json").is_file():
        shutil.rmtree(root, ignore_errors=True)
        print(f"writing {episodes} episodes x 3 cameras, 480x640, 90 frames ({version}) ...", flush=True)
        write_synthetic(root, SynthSpec(version=version, episodes=episodes))
    return root


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def read_doc(path: Path) -> dict[str, Any]:
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def earlier_rows(path: Path, corpus_doc: dict[str, Any], workers: int, ran: set[str],
                 latency_ms: float = 0.0) -> list[dict[str, Any]]:
    """The rows of `path` (an earlier run on the same corpus, workers and added latency) for the commands not run
    now: a run of some commands (`--commands`) updates their rows and keeps the others'."""
    doc = read_doc(path)
    if doc.get("corpus") != corpus_doc or doc.get("workers") != workers or \
            float(doc.get("added_latency_ms", 0.0)) != latency_ms:
        return []
    return [r for r in doc.get("rows", []) if isinstance(r, dict) and r.get("command") in COMMANDS
            and r["command"] not in ran]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--format", choices=("v2.1", "v3.0"), default="v2.1",
                    help="the corpus' layout: v2.1 = one small file per episode and camera; v3.0 = episodes "
                    "concatenated into files of up to 200 MB (LeRobot's default limits)")
    ap.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS),
                    help="the commands to run (default: all); the rows of the others are kept from --out")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="milliseconds the server waits before serving each request (a region's round trip)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "prep-bench-object-store")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "object_store.json")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    src = corpus(a.work, a.episodes, a.format)
    size = tree_bytes(src)
    runs = a.work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    rows: list[dict[str, Any]] = []
    with S3Server(process=True, latency_s=a.latency_ms / 1000) as s3:
        s3.make_bucket("bench")
        t0 = time.perf_counter()
        s3.upload_tree(src, "s3://bench/src")
        print(f"uploaded {size / 1e6:,.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
        workers = ["--workers", str(a.workers)]
        cases = [
            ("scan", ["scan", str(src), "--out", str(runs / "scan-local.json"), *workers],
             ["scan", "s3://bench/src", "--out", str(runs / "scan-s3.json"), *workers]),
            ("verify", ["verify", str(src), "--out", str(runs / "verify-local.json"), *workers],
             ["verify", "s3://bench/src", "--out", str(runs / "verify-s3.json"), *workers]),
            ("reencode", ["reencode", str(src), "--dst", "224", "--out", str(runs / "out-local"), *workers],
             ["reencode", "s3://bench/src", "--dst", "224", "--out", "s3://bench/out", *workers]),
        ]
        for command, local_args, s3_args in [c for c in cases if c[0] in a.commands]:
            row: dict[str, Any] = {"command": command}
            for where, args in (("local", local_args), ("s3", s3_args)):
                client = f"{command}-{where}"
                env = {**base_env, **s3.env(client=client)}
                print(f"{command:8} {where:5} ...", end=" ", flush=True)
                result = run_prep(args, env, runs / f"{client}.log")
                stats = s3.stats_for(client)
                if where == "s3":
                    result |= {"bytes_read": stats.bytes_out, "bytes_written": stats.bytes_in,
                               "requests": stats.requests, "ops": stats.ops,
                               "share_of_corpus_read": round(stats.bytes_out / size, 4)}
                print(f"{result['wall_s']:.1f} s", flush=True)
                row[where] = result
            row["wall_ratio"] = round(row["s3"]["wall_s"] / row["local"]["wall_s"], 3)
            goal = GOALS.get(command)
            row["goal_ratio"] = goal
            row["meets_goal"] = None if goal is None else row["wall_ratio"] <= goal
            rows.append(row)
        out_bytes = sum(size for size, _ in s3.snapshot("s3://bench/out").values())
    command_line = "python bench/object_store.py " + " ".join(sys.argv[1:])
    for r in rows:
        r["measured_by"] = command_line
    corpus_doc = {"episodes": a.episodes, "cameras": 3, "size": "480x640", "frames_per_episode": 90, "bytes": size,
                  "format": a.format}
    doc = {
        "bench": "object_store", "command": command_line,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "corpus": corpus_doc, "workers": a.workers, "server": "moto on 127.0.0.1 (its own process)",
        "added_latency_ms": a.latency_ms,
    }
    kept = earlier_rows(a.out, corpus_doc, a.workers, set(a.commands), a.latency_ms)  # the commands not run this time
    rows = sorted([*kept, *rows], key=lambda r: COMMANDS.index(r["command"]))
    doc["rows"] = rows
    scan = next((r for r in rows if r["command"] == "scan"), None)
    if scan is not None:
        doc["scan_bytes_goal"] = SCAN_BYTES_GOAL
        doc["scan_meets_bytes_goal"] = scan["s3"]["share_of_corpus_read"] <= SCAN_BYTES_GOAL
    if "reencode" in a.commands:
        doc["reencode_output_bytes"] = {"local": tree_bytes(runs / "out-local"), "s3": out_bytes}
    else:
        previous = read_doc(a.out)
        if "reencode_output_bytes" in previous:
            doc["reencode_output_bytes"] = previous["reencode_output_bytes"]
    print()
    print("| command | local s | s3 s | ratio (goal) | s3 MB read (share) | s3 requests | client peak MB local / s3 "
          "| worker peak MB local / s3 |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        lo, s = r["local"], r["s3"]
        goal = f" (<= {r['goal_ratio']})" if r["goal_ratio"] else ""
        print(f"| {r['command']} | {lo['wall_s']:.1f} | {s['wall_s']:.1f} | {r['wall_ratio']:.2f}{goal} | "
              f"{s['bytes_read'] / 1e6:,.1f} ({100 * s['share_of_corpus_read']:.1f}%) | {s['requests']:,} | "
              f"{lo['client_peak_rss_mb']:.0f} / {s['client_peak_rss_mb']:.0f} | "
              f"{lo['worker_peak_rss_mb']:.0f} / {s['worker_peak_rss_mb']:.0f} |")
    if "reencode_output_bytes" in doc:
        local_out, out_bytes = doc["reencode_output_bytes"]["local"], doc["reencode_output_bytes"]["s3"]
        print(f"\ncorpus {size / 1e6:,.1f} MB; reencode output {local_out / 1e6:,.1f} MB local, "
              f"{out_bytes / 1e6:,.1f} MB in the bucket (prep/ included)")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(a.out, masked(doc), indent=2)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
