"""What one request and one process cost the client's CPU: s3fs (the seam's library) against obstore.

    python bench/storage_request_cost.py [--requests 500] [--out bench/results/storage_request_cost.json]

An object-store scan is CPU-bound on a small machine once its round trips overlap (docs/storage.md, "Scan: what
is left"): each process pays its library's import, session and client once, and every ranged GET pays the
library's own work (signing, event hooks, response parsing). This measures both in fresh child processes against
moto's S3 in its own process on loopback (tests/support/s3.py), so the server's CPU is not counted:

- `first`: import, client and one 100-byte ranged GET (wall and CPU of the child process);
- `per GET`: the mean of `--requests` 100-byte ranged GETs at distinct offsets of a 1 MiB object.

Each library runs twice, interleaved. obstore is not a dependency of prep: its rows are measured when it is
importable (`pip install obstore`), else marked absent. The result is JSON at `--out` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402

CHILD = r'''
import json, os, sys, time
lib, n = sys.argv[1], int(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
if lib == "obstore":
    import obstore
    from obstore.store import S3Store
    store = S3Store("cost", endpoint=os.environ["AWS_ENDPOINT_URL"], region=os.environ["AWS_REGION"],
                    client_options={"allow_http": True})
    get = lambda off: bytes(obstore.get_range(store, "x.bin", start=off, length=100))
else:
    import s3fs
    fs = s3fs.S3FileSystem()
    get = lambda off: fs.cat_file("cost/x.bin", start=off, end=off + 100)
assert len(get(0)) == 100
first = (time.perf_counter() - t0, time.process_time() - c0)
t1, c1 = time.perf_counter(), time.process_time()
for i in range(n):
    get(1000 * (i + 1))
print(json.dumps({"first_wall_ms": first[0] * 1e3, "first_cpu_ms": first[1] * 1e3,
                  "get_wall_ms": (time.perf_counter() - t1) / n * 1e3,
                  "get_cpu_ms": (time.process_time() - c1) / n * 1e3}))
'''
LIBS = ("s3fs", "obstore")


def importable(lib: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {lib}"], capture_output=True).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "storage_request_cost.json")
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    present = {lib: importable(lib) for lib in LIBS}
    runs: dict[str, list[dict[str, float]]] = {lib: [] for lib in LIBS if present[lib]}
    with S3Server(process=True) as s3:
        s3.make_bucket("cost")
        s3.put_bytes("s3://cost/x.bin", os.urandom(1 << 20))
        env = {**base, **s3.env(client="cost")}
        for _ in range(2):
            for lib in runs:
                out = subprocess.run([sys.executable, "-c", CHILD, lib, str(a.requests)], env=env, cwd=REPO,
                                     capture_output=True, text=True, check=True).stdout
                runs[lib].append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for lib in LIBS:
        if not present[lib]:
            rows.append({"library": lib, "absent": True})
            continue
        rs = runs[lib]
        rows.append({"library": lib, "runs": [{k: round(v, 3) for k, v in r.items()} for r in rs],
                     **{k: round(min(r[k] for r in rs), 3) for k in rs[0]}})
    print("| library | import + client + first GET: wall / CPU ms | per ranged GET: wall / CPU ms |")
    print("|---|--:|--:|")
    for r in rows:
        if r.get("absent"):
            print(f"| {r['library']} | not installed | |")
        else:
            print(f"| {r['library']} | {r['first_wall_ms']:.0f} / {r['first_cpu_ms']:.0f} | "
                  f"{r['get_wall_ms']:.2f} / {r['get_cpu_ms']:.2f} |")
    doc = {"bench": "storage_request_cost", "command": "python bench/storage_request_cost.py " + " ".join(sys.argv[1:]),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "server": "moto on 127.0.0.1 (its own process; its CPU not counted)", "requests": a.requests,
           "rows": rows, "note": "best of 2 runs per library, each a fresh process"}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(a.out, doc, indent=2)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
