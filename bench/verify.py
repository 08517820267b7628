"""Benchmark `prep verify`: episodes/s without and with --decode, on two synthetic corpora.

- `224-intra`: 224x224 all-intra h264 (what `prep reencode` produces), checked with
  --expect-frames 90 --size 224x224 --all-intra;
- `480x640-gop30`: native 480x640 h264 GOP 30 (like recorded data), checked with --expect-frames 90.

Each case runs twice: through the runner on a fresh LocalCluster (the user's wall time,
cluster start included) and in-process on one core (the stage's own rate, no Dask).
Prints a table and writes bench/results/verify.json.

    python bench/verify.py [--episodes 48] [--workers 2] [--out bench/results/verify.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.jobs.verify import VerifyReport, verify_dataset, verify_in_process
from pipeline.runner import RunConfig, machine_cores, open_engine
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

CORPORA: dict[str, tuple[dict[str, Any], VerifyOptions]] = {
    "224-intra": ({"height": 224, "width": 224, "gop": 1},
                  VerifyOptions(expect_frames=90, size=(224, 224), all_intra=True)),
    "480x640-gop30": ({"height": 480, "width": 640, "gop": 30}, VerifyOptions(expect_frames=90)),
}


def build(workdir: Path, name: str, episodes: int) -> Path:
    root = workdir / f"{name}-{episodes}"
    if (root / "meta/info.json").is_file():
        return root
    overrides, _ = CORPORA[name]
    # reuse_video: each camera's first episode is encoded once and copied; verify reads every file.
    spec = SynthSpec(version="v2.1", episodes=episodes, reuse_video=True, **overrides)
    return write_synthetic(root, spec)


def timed(fn: Callable[[], VerifyReport]) -> tuple[VerifyReport, float]:
    t0 = time.perf_counter()
    report = fn()
    return report, time.perf_counter() - t0


def run_case(root: Path, name: str, decode: bool, workers: int) -> dict[str, Any]:
    _, base = CORPORA[name]
    opts = VerifyOptions(base.expect_frames, base.size, base.all_intra, decode)
    def on_cluster() -> VerifyReport:
        with open_engine(RunConfig(workers=workers, progress=False)) as engine:
            return verify_dataset(root, opts, engine)

    cluster, t_cluster = timed(on_cluster)
    serial, t_serial = timed(lambda: verify_in_process(root, opts))
    for report in (cluster, serial):
        if not report.passed:
            raise SystemExit(f"bench corpus {root} failed verify: {report.failures[:3]}")
    n = len(serial.episodes)
    frames = sum(e.frames_expected for e in serial.episodes) * len(serial.dataset.cameras)
    return {
        "corpus": name,
        "decode": decode,
        "episodes": n,
        "camera_frames": frames,
        "cluster_workers": workers,
        "cluster_seconds": t_cluster,
        "cluster_episodes_per_s": n / t_cluster,
        "in_process_seconds": t_serial,
        "in_process_episodes_per_s": n / t_serial,
        "in_process_camera_frames_per_s": frames / t_serial,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'corpus':<15}{'decode':<8}{'episodes':>9}{'cluster s':>11}{'cluster ep/s':>14}"
            f"{'1-core s':>10}{'1-core ep/s':>13}{'1-core frames/s':>17}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['corpus']:<15}{'yes' if r['decode'] else 'no':<8}{r['episodes']:>9}"
                     f"{r['cluster_seconds']:>11.2f}{r['cluster_episodes_per_s']:>14.1f}"
                     f"{r['in_process_seconds']:>10.2f}{r['in_process_episodes_per_s']:>13.1f}"
                     f"{r['in_process_camera_frames_per_s']:>17,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=48, help="episodes per corpus (3 cameras x 90 frames each)")
    p.add_argument("--workers", type=int, default=machine_cores(), help="LocalCluster workers (default: cores)")
    p.add_argument("--workdir", type=Path, help="where to build (and reuse) the corpora (default: a temp dir)")
    p.add_argument("--out", type=Path, default=Path("bench/results/verify.json"))
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        workdir = args.workdir or Path(tmp)
        rows = []
        for name in CORPORA:
            t0 = time.perf_counter()
            root = build(workdir, name, args.episodes)
            print(f"built {name}: {args.episodes} episodes in {time.perf_counter() - t0:.1f} s", flush=True)
            for decode in (False, True):
                rows.append(run_case(root, name, decode, args.workers))
    print(table(rows))
    print(f"load average (1 min): {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {machine_cores()} cores")
    result = {
        "bench": "verify",
        "machine": {"cores": machine_cores(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_avg_1m_before": load_before, "load_avg_1m_after": os.getloadavg()[0]},
        "note": "cluster_* includes starting a LocalCluster (a few seconds); in_process_* is one core, no Dask",
        "results": rows,
    }
    atomic.write_json(args.out, result, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
