"""`prep reencode --workers N` with N far above the cores: the note, the workers started, and the peak memory of
the whole run (prep and every LocalCluster process), sampled from /proc.

Runs the real CLI in its own session on a synthetic corpus, samples the resident memory (RSS) of every live
process of that session every 20 ms, and reports the peak of their sum, the most processes alive at once,
the wall time and the exit code. Prints a table; writes bench/results/workers.json.

    python bench/workers.py [--workers 1000] [--episodes 8] [--out bench/results/workers.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from masking import masked  # noqa: E402

from pipeline import __version__, atomic  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def session_rss(sid: int) -> tuple[int, int]:
    """(sum of RSS bytes, number of processes) over the live processes of session `sid`."""
    total = count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            fields = text[text.rindex(")") + 2:].split()
            if fields[0] == "Z" or int(fields[3]) != sid:
                continue
            total += int((entry / "statm").read_text().split()[1]) * PAGE
            count += 1
        except (OSError, ValueError, IndexError):
            continue
    return total, count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/workers.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prep-bench-workers-") as tmp:
        src = write_synthetic(Path(tmp) / "src", SynthSpec(version="v2.1", episodes=args.episodes, frames=30,
                                                           height=240, width=320))
        cmd = [sys.executable, "-m", "pipeline.cli", "reencode", "--src", str(src), "--dst", "224", "--out",
               str(Path(tmp) / "out"), "--workers", str(args.workers), "--no-progress"]
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        peak = procs = 0
        while proc.poll() is None:
            rss, n = session_rss(proc.pid)
            peak, procs = max(peak, rss), max(procs, n)
            time.sleep(0.02)
        out, err = proc.communicate()
        seconds = time.monotonic() - t0
    note = next((line for line in err.splitlines() if "note:" in line), "")
    engine = next((line for line in err.splitlines() if line.startswith("[engine]")), "")
    result = {
        "schema": "prep.bench.workers/1", "prep_version": __version__,
        "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count(),
                    "memory_bytes": os.sysconf("SC_PHYS_PAGES") * PAGE, "load_average": list(os.getloadavg())},
        "command": " ".join(cmd[1:]), "workers_requested": args.workers, "episodes": args.episodes,
        "exit": proc.returncode, "seconds": round(seconds, 1), "note": note, "engine": engine,
        "peak_rss_bytes": peak, "peak_rss_gib": round(peak / 2**30, 3), "max_processes": procs,
        "stdout_tail": out[-600:], "stderr_tail": err[-600:],
    }
    print(f"command        prep reencode ... --workers {args.workers} ({args.episodes} episodes x 3 cameras)")
    print(f"note           {note}")
    print(f"engine         {engine}")
    print(f"exit           {proc.returncode} in {seconds:.1f} s")
    print(f"peak RSS       {peak / 2**30:.3f} GiB (sum over prep and every LocalCluster process, sampled every 20 ms)")
    print(f"max processes  {procs}")
    print(f"load average   {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote          {args.out}")
    return 0 if proc.returncode == 0 and peak < 2**30 else 1


if __name__ == "__main__":
    sys.exit(main())
