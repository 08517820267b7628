"""The dataloader comparison on this machine: native 480x640 GOP-30 h264 vs 224x224 all-intra,
this package's loader vs LeRobot's (`LeRobotDataset`, as openpi uses it), at per-GPU batch 256.

Corpora (synthetic, 3 cameras, 90-frame episodes at 30 fps, built once under --work):
- native: 480x640 h264 crf 23, GOP 30 (pipeline.synth defaults), like the recorded footage;
- intra224: 224x224 h264 crf 23, every frame a keyframe (SynthSpec(height=224, width=224, gop=1)).
Each (corpus, loader) runs in its own process through `prep bench dataloader` with the same
settings: ceiling (no step), then training steps at the auto step time wall_s(256 x 8) = 7.6 s
(a sleep on cpu: the cores are left to the DataLoader workers). LeRobot's loader runs in its
venv (`<venv>/bin/python -m pipeline.commands.bench ... --loader lerobot`); without the venv
its rows are reported as not measured. Writes bench/results/dataloader.json (schemas/bench) and
dataloader.png, prints the table, the verdicts and the ratios.

    python bench/dataloader.py [--episodes 20] [--workers 2] [--steps 6] [--work /tmp/prep-bench-dataloader]
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

from masking import masked  # noqa: E402

from pipeline import atomic  # noqa: E402
from pipeline.schemas import validate  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

VENVS = {"v3.0": Path("/opt/prep-venvs/lerobot-v30"), "v2.1": Path("/opt/prep-venvs/lerobot-v21")}
CORPORA = {
    "native": {"height": 480, "width": 640, "gop": 30, "what": "480x640 h264 crf 23 GOP 30 (synth defaults)"},
    "intra224": {"height": 224, "width": 224, "gop": 1, "what": "224x224 h264 crf 23 all-intra (gop 1)"},
}


def build_corpus(work: Path, name: str, version: str, episodes: int) -> Path:
    root = work / f"{name}-{version}-{episodes}ep"
    if (root / "meta/info.json").is_file():
        return root
    if root.exists():
        shutil.rmtree(root)
    c = CORPORA[name]
    print(f"building {root} ({c['what']}, {episodes} episodes)", file=sys.stderr, flush=True)
    tmp = Path(tempfile.mkdtemp(dir=work, prefix=f".{name}-"))
    write_synthetic(tmp / "ds", SynthSpec(version=version, episodes=episodes, height=c["height"],
                                          width=c["width"], gop=c["gop"]))
    os.replace(tmp / "ds", root)
    tmp.rmdir()
    return root


def corpus_info(name: str, root: Path, episodes: int) -> dict[str, Any]:
    videos = list(root.rglob("*.mp4"))
    video_bytes = sum(p.stat().st_size for p in videos)
    frames = episodes * 90 * 3
    return {"label": name, "root": str(root), "what": CORPORA[name]["what"], "episodes": episodes,
            "cameras": 3, "frames_per_episode": 90, "camera_frames": frames, "video_files": len(videos),
            "video_bytes": video_bytes, "kb_per_camera_frame": video_bytes / frames / 1000}


def run_one(python: str, root: Path, label: str, loader: str, args: argparse.Namespace, out: Path,
            env: dict[str, str]) -> dict[str, Any]:
    native = label == "native"
    steps = args.native_steps if native else args.steps
    ceiling = args.ceiling_steps or max(1, args.workers * (1 if native else 2))
    cmd = [python, "-m", "pipeline.commands.bench", "dataloader", str(root), "--label", label,
           "--loader", loader, "--batch", str(args.batch), "--workers", str(args.workers),
           "--steps", str(steps), "--warmup", str(args.warmup), "--ceiling-steps", str(ceiling),
           "--step-time", args.step_time, "--out", str(out), "--no-plot"]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, capture_output=True, check=False)
    sys.stderr.write(proc.stdout)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{label}/{loader} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = json.loads((out / "dataloader.json").read_text())
    (run,) = doc["runs"]
    run["loadavg"] = {"start": doc["host"]["loadavg_start"], "end": doc["host"]["loadavg_end"]}
    run["python"] = python
    return run


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def comparison(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(r["label"], r["loader"]): r for r in runs}
    out: dict[str, Any] = {}

    def metric(label: str, loader: str, path: tuple[str, ...]) -> float | None:
        r: Any = by.get((label, loader))
        for key in path:
            r = None if r is None else r.get(key)
        return r

    for loader in ("prep", "lerobot"):
        out[f"{loader}: intra224 / native samples/s ceiling"] = ratio(
            metric("intra224", loader, ("ceiling", "samples_per_s")),
            metric("native", loader, ("ceiling", "samples_per_s")))
        out[f"{loader}: intra224 / native samples per worker CPU-s"] = ratio(
            metric("intra224", loader, ("ceiling", "samples_per_cpu_s")),
            metric("native", loader, ("ceiling", "samples_per_cpu_s")))
    for label in ("native", "intra224"):
        out[f"{label}: prep / lerobot samples/s ceiling"] = ratio(
            metric(label, "prep", ("ceiling", "samples_per_s")),
            metric(label, "lerobot", ("ceiling", "samples_per_s")))
        out[f"{label}: prep / lerobot samples per worker CPU-s (per core)"] = ratio(
            metric(label, "prep", ("ceiling", "samples_per_cpu_s")),
            metric(label, "lerobot", ("ceiling", "samples_per_cpu_s")))
    return out


def plot(runs: list[dict[str, Any]], path: Path, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['label']}\n{r['loader']}" for r in runs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.bar(names, [r["ceiling"]["samples_per_s"] or 0 for r in runs], color="tab:blue")
    ax1.set(ylabel="samples/s", title=f"loader ceiling, {runs[0]['workers']} workers, batch {runs[0]['batch']}")
    ax2.bar(names, [r["train"]["data_time_s"]["p95"] or 0 for r in runs], color="tab:orange")
    ax2.axhline(threshold, color="grey", linestyle="--", label=f"target {threshold} s")
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax2.set(ylabel="data_time p95 (s)", title=f"data_time at step {runs[0]['step_s']:.2f} s")
    ax2.legend()
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--version", choices=("v2.1", "v3.0"), default="v3.0")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--steps", type=int, default=6, help="timed training steps, intra224 (default: 6)")
    ap.add_argument("--native-steps", type=int, default=3,
                    help="timed training steps, native: each batch takes tens of seconds there (default: 3)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ceiling-steps", type=int, default=None, help="default: 2 x workers (intra224), workers (native)")
    ap.add_argument("--step-time", default="auto")
    ap.add_argument("--loaders", default="prep,lerobot")
    ap.add_argument("--venv", type=Path, default=None, help="lerobot venv (default: by --version)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "prep-bench-dataloader")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/dataloader.json")
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    roots = {name: build_corpus(args.work, name, args.version, args.episodes) for name in CORPORA}
    venv = args.venv or VENVS[args.version]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(args.work / "hf")}
    runs: list[dict[str, Any]] = []
    not_measured: list[str] = []
    first_doc: dict[str, Any] | None = None
    for loader in args.loaders.split(","):
        python = sys.executable if loader == "prep" else str(venv / "bin/python")
        if loader == "lerobot" and not Path(python).is_file():
            not_measured += [f"{name} / lerobot: not measured: lerobot venv missing ({venv})" for name in roots]
            continue
        for name, root in roots.items():
            with tempfile.TemporaryDirectory(dir=args.work) as tmp:
                runs.append(run_one(python, root, name, loader, args, Path(tmp), env))
                if first_doc is None:
                    first_doc = json.loads((Path(tmp) / "dataloader.json").read_text())
    assert first_doc is not None, "no run"
    threshold = first_doc["threshold_s"]
    doc = {**first_doc, "command": sys.argv, "runs": runs, "verdicts": [r["verdict"] for r in runs],
           "min_workers": [], "stress": None, "plots": [args.out.with_suffix(".png").name],
           "ok": all(r["errors"] == 0 for r in runs), "not_measured": not_measured,
           "corpora": [corpus_info(n, r, args.episodes) for n, r in roots.items()],
           "comparison": comparison(runs)}
    doc["host"] = {**first_doc["host"], "loadavg_end": list(os.getloadavg())}
    for r in runs:
        r.pop("python", None)
    validate(doc, "bench", source=str(args.out))
    atomic.write_json(args.out, masked(doc))
    plot(runs, args.out.with_suffix(".png"), threshold)

    from pipeline.loader.report import table

    for c in doc["corpora"]:
        print(f"corpus {c['label']:9} {c['what']}: {c['episodes']} episodes x 3 cameras x 90 frames, "
              f"{c['video_bytes'] / 1e6:.1f} MB video, {c['kb_per_camera_frame']:.1f} kB/camera frame")
    print(table(runs))
    for r in runs:
        print(f"{r['label']:9} {r['loader']:8} {r['verdict']}   (loadavg {r['loadavg']['start'][0]:.2f}"
              f" -> {r['loadavg']['end'][0]:.2f}; {r['loader_detail']})")
    for line in not_measured:
        print(line)
    for key, value in doc["comparison"].items():
        print(f"{key}: {'not measured' if value is None else f'{value:.2f}x'}")
    print(f"results {args.out}, {args.out.with_suffix('.png')}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
