"""What re-encode's quality sample (PSNR/SSIM in comparison.json) costs, as a share of the re-encode.

`prep reencode --dst 224 --backend inline` (one process, so the stage's seconds are the map's wall) on:
the clone's example (2 real episodes, AV1 640x480, ~316 frames a file), the real fixture (10 episodes,
../shared/fixtures/real/g1_inspire_v21, when present), and a synthetic v2.1 corpus of 3 cameras x 90-frame
480x640 h264 episodes (one sampled frame per file: the cheapest encode per sample). The stage times its own
sample (copying the reference frames, decoding the sampled output frames, PSNR and SSIM) in
reencode_report.json's quality_seconds; the share is quality_seconds / seconds (the encode map's wall).

    PYTHONPATH=$PWD python bench/quality_cost.py [--repeat 3]
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

from pipeline.synth import SynthSpec, write_synthetic

REPO = Path(__file__).resolve().parents[1]


def one(src: Path, out: Path) -> tuple[float, float, dict[str, object]]:
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", "reencode", str(src), "--dst", "224", "--out",
                          str(out), "--backend", "inline", "--no-progress"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    if res.returncode != 0:
        raise SystemExit(res.stderr)
    report = json.loads((out / "prep/reencode_report.json").read_text())
    quality = report["comparison"]["quality"]["cameras"]
    return report["quality_seconds"], report["seconds"], quality


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=8, help="synthetic corpus episodes (3 cameras each)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpora = {"example (2 real episodes)": REPO / "examples/g1_inspire_v21"}
        real = REPO.parent / "shared/fixtures/real/g1_inspire_v21"
        if (real / "meta/info.json").is_file():
            corpora["real fixture (10 episodes)"] = real
        corpora[f"synthetic ({args.episodes} x 3 cameras x 90 frames, 480x640 h264)"] = write_synthetic(
            Path(tmp) / "synth", SynthSpec(episodes=args.episodes, frames=90))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for name, src in corpora.items():
            shares = []
            for k in range(args.repeat):
                q_s, enc_s, quality = one(src, Path(tmp) / f"out-{len(shares)}-{k}-{abs(hash(name))}")
                shares.append(q_s / enc_s)
                print(f"  {name}: run {k + 1}: quality sample {q_s * 1000:.1f} ms of {enc_s:.2f} s = "
                      f"{q_s / enc_s:.2%}")
            frames = sum(int(q["frames_sampled"]) for q in quality.values())  # type: ignore[call-overload]
            psnr = ", ".join(f"{cam.split('.')[-1]} {q['psnr_db_mean']:.1f} dB"  # type: ignore[index]
                             for cam, q in quality.items())
            print(f"{name}: median {statistics.median(shares):.2%}, max {max(shares):.2%} of the re-encode "
                  f"({frames} frames sampled; PSNR {psnr})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
