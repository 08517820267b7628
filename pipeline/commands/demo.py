"""`prep demo`: build a small synthetic corpus in a temp folder and run the main job on it end to end."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.commands.common import add_run_options, run_config
from pipeline.commands.scan import scan_dataset, summary
from pipeline.synth import SynthSpec, write_synthetic


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="build a synthetic corpus and run the pipeline on it end to end",
                       description="Builds a small synthetic LeRobot corpus (3 cameras, 480x640 h264, 90-frame "
                       "episodes) in a temp folder and runs scan on it, printing the manifest.")
    p.add_argument("--episodes", type=int, default=6, help="episodes in the demo corpus (default: 6)")
    p.add_argument("--format", dest="version", choices=["v2.1", "v3.0"], default="v2.1")
    p.add_argument("--work", type=Path, help="folder for the corpus and outputs (default: a temp folder, removed)")
    p.add_argument("--out", type=Path, default=Path("manifests/demo"),
                   help="where the demo's manifests and reports are copied (default: manifests/demo)")
    add_run_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.episodes <= 0:
        raise SystemExit(f"prep demo: --episodes must be positive, got {args.episodes}")
    config = run_config(args)
    keep = args.work is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="prep-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    try:
        src = work / "merged"
        t0 = time.perf_counter()
        if not (src / "meta/info.json").exists():
            print(f"[demo] building a synthetic {args.version} corpus: {args.episodes} episodes x 3 cameras x 90 "
                  f"frames, 480x640 h264 -> {src}")
            write_synthetic(src, SynthSpec(version=args.version, episodes=args.episodes))
        print(f"[demo] corpus ready in {time.perf_counter() - t0:.1f} s")

        print("[demo] step 1: prep scan")
        native_path = out / "native.manifest.json"
        native, _ = scan_dataset(src, native_path, config)
        print(summary(native, native_path))
        print(json.dumps(native["totals"], indent=2))
        return 1 if native["failures"] else 0
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
