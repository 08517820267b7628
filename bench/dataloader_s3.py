"""`prep bench dataloader` on local disk against S3 (moto on loopback, its own process), in one run: the same
small synthetic datasets read from a local folder and from an `s3://` prefix (`--compare`), prep's loader
(PyAV decoders kept open per DataLoader worker; an object read in `RANDOM_BLOCK` ranges through each worker's own
store), a fixed step time. Writes bench/results/dataloader-s3.json: the bench's own JSON (schemas/bench) with the
requests and bytes the server counted per corpus under `storage`.

    python bench/dataloader_s3.py [--episodes 4] [--workers 1] [--batch 16] [--steps 30] [--step-time 0.2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from masking import masked  # noqa: E402
from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402
from pipeline.schemas import validate  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

CORPORA = {
    "intra224": {"height": 224, "width": 224, "gop": 1, "what": "224x224 h264 crf 23 all-intra (gop 1)"},
    "native": {"height": 480, "width": 640, "gop": 30, "what": "480x640 h264 crf 23 GOP 30 (synth defaults)"},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dataloader-s3.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prep-bench-dataloader-s3-"))
    runs: list[dict[str, Any]] = []
    storage: dict[str, Any] = {"server": "moto on 127.0.0.1 (its own process)", "corpora": {}}
    doc: dict[str, Any] = {}
    try:
        with S3Server(process=True) as s3:
            s3.make_bucket("bench")
            for name in a.corpora:
                c = CORPORA[name]
                root = write_synthetic(work / name, SynthSpec(version="v3.0", episodes=a.episodes,
                                                              height=c["height"], width=c["width"], gop=c["gop"]))
                url = f"s3://bench/{name}"
                s3.upload_tree(root, url)
                s3.reset_stats()
                out = work / f"out-{name}"
                cmd = [sys.executable, "-m", "pipeline.cli", "bench", "dataloader", str(root), "--label",
                       f"{name} local", "--compare", url, "--compare-label", f"{name} s3", "--workers",
                       str(a.workers), "--batch", str(a.batch), "--steps", str(a.steps), "--step-time",
                       str(a.step_time), "--out", str(out), "--name", "dataloader-s3", "--no-plot"]
                env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **s3.env(client="prep"),
                       "PYTHONPATH": str(REPO)}
                res = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, check=False)
                print(res.stdout, end="")
                if res.returncode not in (0, 1):
                    print(res.stderr, file=sys.stderr)
                    return res.returncode
                doc = json.loads((out / "dataloader-s3.json").read_text(encoding="utf-8"))
                runs += doc["runs"]
                st = s3.stats_for("prep")
                size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
                storage["corpora"][name] = {
                    "what": c["what"], "episodes": a.episodes, "cameras": 3, "bytes": size,
                    "requests": st.requests, "gets": st.gets, "heads": st.heads, "lists": st.lists,
                    "bytes_read": st.bytes_out, "samples_s3": next(r["samples"] for r in doc["runs"]
                                                                    if r["label"].endswith(" s3"))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc["runs"] = runs
    doc["command"] = ["python", "bench/dataloader_s3.py", *sys.argv[1:]]
    doc["ok"] = all(r["errors"] == 0 for r in runs)
    doc["verdicts"] = [r["verdict"] for r in runs]
    from pipeline.loader.report import min_workers_lines

    doc["min_workers"] = min_workers_lines(runs)
    doc["storage"] = storage
    doc = masked(doc)
    validate(doc, "bench", source=str(a.out))
    atomic.write_text(a.out, json.dumps(doc, indent=2) + "\n", a.out.parent)
    for r in runs:
        dt = r["train"]["data_time_s"]
        print(f"{r['label']:16s} data_time p50 {dt['p50']:.4f} s p95 {dt['p95']:.4f} s  ceiling "
              f"{r['ceiling']['samples_per_s']:.1f} samples/s  decode {r['decode_ms_per_frame']:.2f} ms/frame  "
              f"errors {r['errors']}")
    for name, s in storage["corpora"].items():
        print(f"{name}: {s['requests']} requests ({s['gets']} GET), {s['bytes_read'] / 1e6:.1f} MB read of a "
              f"{s['bytes'] / 1e6:.1f} MB corpus for {s['samples_s3']} samples")
    print(f"results   {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
