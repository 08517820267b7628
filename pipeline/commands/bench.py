"""`prep bench dataloader DATASET`: does the loader keep up with the training step?

torch (and lerobot, for `--loader lerobot`) are imported only when the command runs, so `prep`
works without them. Also runnable as `python -m pipeline.commands.bench dataloader ...`, which
imports nothing but this command (for a lerobot venv that lacks Dask).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import sys
from pathlib import Path
from typing import Any

from pipeline.commands import help_of
from pipeline.commands.argtypes import PrepParser, positive_int
from pipeline.errors import PrepError
from pipeline.text import printable, printable_lines

SWEEP_KEYS = ("workers", "batch", "prefetch")
DEFAULT_OUT = Path("prep-bench")


def _default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _step_time(text: str) -> str | float:
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"step time must be >= 0, got {value}")
    return value


def dataset_arg(text: str) -> Path | str:
    """DATASET as typed: a URL as its text (a `Path` would make `s3://b` `s3:/b`), anything else a `Path` (a folder,
    a snapshot, a hub repo id: `pipeline.storage.parse_location` reads each). An empty one is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a dataset folder, hub repo id or URL, got {text!r}")
    return text if _is_url(text) else Path(text)


def _add_storage_option(p: argparse.ArgumentParser) -> None:
    """`--storage-option` as `pipeline.commands.where` adds it (not imported: this command imports no other)."""
    from pipeline.storage import OPTION_KEYS

    p.add_argument("--storage-option", dest="storage_options", action="append", default=[], metavar="KEY=VALUE",
                   help="with an object-store URL (DATASET or OTHER_DATASET), what the environment cannot say "
                   "(repeatable): " + "; ".join(f"{k}: {v}" for k, v in OPTION_KEYS.items())
                   + ". Credentials are never options (set them in the environment or ~/.aws/credentials)")


def parse_sweep(items: list[str] | None) -> dict[str, list[int]]:
    """`workers=1,2,4 batch=64,256` -> {"workers": [1, 2, 4], "batch": [64, 256]}."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        if not sep or key not in SWEEP_KEYS:
            raise PrepError(f"--sweep {item!r}: expected KEY=V1,V2,... with KEY one of {', '.join(SWEEP_KEYS)}")
        try:
            nums = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise PrepError(f"--sweep {item!r}: values must be integers") from None
        if not nums or any(n < (0 if key == "workers" else 1) for n in nums):
            raise PrepError(f"--sweep {item!r}: values must be {'>= 0' if key == 'workers' else '> 0'}")
        out[key] = nums
    return out


def add_dataloader_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", type=dataset_arg, metavar="DATASET",
                   help="the dataset, v2.1 or v3.0: a folder holding meta/info.json, a Hugging Face hub-cache "
                   "snapshot, a hub repo id OWNER/NAME (found offline in the local caches) or s3://BUCKET/PREFIX "
                   "(--loader prep: read through prep's storage, ranged reads; configured as the AWS CLI is)")
    p.add_argument("--revision", metavar="REV",
                   help="with a hub repo id: the cached revision to read (a branch, tag or commit; default main)")
    _add_storage_option(p)
    p.add_argument("--batch", type=positive_int, default=256, help="per-GPU batch (default: 256)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="DataLoader workers (default: cores - 1; --stress: all cores)")
    p.add_argument("--steps", type=positive_int, default=10, metavar="K", help="timed training steps (default: 10)")
    p.add_argument("--ceiling-steps", type=positive_int, default=None, metavar="K",
                   help="batches timed with no step, for samples/s (default: max(4, 2 x workers))")
    p.add_argument("--warmup", type=int, default=2, metavar="K", help="untimed batches before each phase (default: 2)")
    p.add_argument("--step-time", type=_step_time, default="auto", metavar="auto|SECONDS",
                   help="training step length; auto = 0.00359 x (batch x --gpus) + 0.25 (default: auto)")
    p.add_argument("--gpus", type=positive_int, default=8, help="GPUs sharing the global batch, for auto (default: 8)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: the step sleeps; cuda: GPU matmuls, pinned memory, non-blocking copies")
    p.add_argument("--loader", choices=("prep", "lerobot"), default="prep",
                   help="prep: this package's dataset; lerobot: LeRobotDataset as openpi uses it")
    p.add_argument("--video-backend", default=None, help="lerobot only: pyav or torchcodec (default: lerobot's)")
    p.add_argument("--horizon", type=positive_int, default=50, help="action chunk length (default: 50)")
    p.add_argument("--prefetch", type=positive_int, default=2, help="DataLoader prefetch_factor (default: 2)")
    p.add_argument("--sweep", nargs="+", metavar="KEY=V1,V2", help="e.g. workers=1,2,4 batch=64,256")
    p.add_argument("--compare", type=dataset_arg, metavar="OTHER_DATASET",
                   help="run every configuration on this dataset too (e.g. native vs prepared)")
    p.add_argument("--stress", type=float, metavar="MINUTES",
                   help="stress test instead: all workers flat out for MINUTES; fails on drift, RSS growth, errors")
    p.add_argument("--stress-window", type=float, default=None, metavar="SECONDS",
                   help="stress: seconds per measurement window (default: max(5, duration / 12))")
    p.add_argument("--threshold", type=float, default=0.013,
                   help="data_time p95 that counts as keeping up, seconds (default: 0.013)")
    p.add_argument("--label", help="name of DATASET in the report (default: its folder name)")
    p.add_argument("--compare-label", help="name of OTHER_DATASET in the report")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help=f"report folder for the JSON and PNG (default: {DEFAULT_OUT} in the current folder)")
    p.add_argument("--name", default=None, help="file stem (default: dataloader, or dataloader-stress)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--require-keeps-up", action="store_true", help="exit 1 if any run does not keep up")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help=help_of("bench"), description="Benchmarks on your own data.")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    d = bsub.add_parser(
        "dataloader", help="does the training loader keep up at the target batch?",
        description="Time a torch DataLoader over DATASET in a training loop whose step takes the budget "
        "model's wall time, report data_time percentiles, the loader ceiling, decode cost and worker RSS.")
    add_dataloader_arguments(d)
    d.set_defaults(func=run)


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        from pipeline import DISTRIBUTION

        raise PrepError(f"`prep bench dataloader` needs PyTorch: pip install '{DISTRIBUTION}[bench]' "
                        "(or pip install torch psutil)")


def _is_url(text: str) -> bool:
    from pipeline.storage import URL_RE

    m = URL_RE.match(text)
    return m is not None and m.group("scheme") != "file"


def locate(given: Path | str, args: argparse.Namespace, flag: str) -> tuple[Path | Any, Any]:
    """DATASET (or --compare) where it lives: (what the loader opens, its `Location`). A local folder is the path
    typed (a hub repo id: its snapshot folder); an object-store prefix is its `Location`, asked one short question
    first (credentials, endpoint: one line, exit 2). The prep loader reads it through `pipeline.storage` (ranged
    reads; each DataLoader worker opens its own store from its own environment); `--loader lerobot` reads a
    local folder only (LeRobotDataset opens files by path), so an object store is refused for it in one line."""
    from pipeline.storage import as_root, parse_location

    text = os.fspath(given)
    url = _is_url(text)
    loc = parse_location(text, revision=args.revision, options=args.storage_options if url else ())
    if not loc.is_local:
        if args.loader == "lerobot":
            raise PrepError(f"{flag} {loc.shown}: --loader lerobot reads a local folder (LeRobotDataset opens its "
                            "files by path); use --loader prep, which reads the object store through prep's "
                            f"storage, or copy it first (prep reencode {loc.shown} --out /local/folder)")
        loc.store().check_reachable()  # a missing bucket, dead endpoint or bad credentials: one line
    if not (as_root(loc) / "meta/info.json").is_file():
        raise PrepError(f"{loc.shown if not loc.is_local else text}: not a LeRobot dataset (no meta/info.json)")
    if not loc.is_local:
        return loc, loc
    return (Path(text) if os.path.lexists(text) else loc.path), loc


def _specs(args: argparse.Namespace) -> list[Any]:
    from pipeline.commands.where import default_name
    from pipeline.loader.bench import RunSpec, auto_step_s

    sweep = parse_sweep(args.sweep)
    workers = args.workers if args.workers is not None else _default_workers()
    root, loc = args._located[0]
    datasets = [(root, args.label or default_name(loc))]
    if args.compare is not None:
        root, loc = args._located[1]
        datasets.append((root, args.compare_label or default_name(loc)))
    specs = []
    for (root, label), w, b, pf in itertools.product(
        datasets, sweep.get("workers", [workers]), sweep.get("batch", [args.batch]),
        sweep.get("prefetch", [args.prefetch]),
    ):
        step_s = auto_step_s(b, args.gpus) if args.step_time == "auto" else float(args.step_time)
        specs.append(RunSpec(
            root=root, label=label, loader=args.loader, batch=b, workers=w,
            train_steps=args.steps, ceiling_steps=args.ceiling_steps or max(4, 2 * w),
            warmup_steps=args.warmup, step_s=step_s, step_source="auto" if args.step_time == "auto" else "fixed",
            device=args.device, horizon=args.horizon, prefetch_factor=pf, seed=args.seed,
            threshold_s=args.threshold, video_backend=args.video_backend,
        ))
    return specs


def _check_device(device: str) -> None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise PrepError("--device cuda: this torch sees no CUDA device (torch.cuda.is_available() is False)")


def _can_plot() -> bool:
    """matplotlib is there (a plain lerobot venv may lack it): without it the plot is skipped, said in one note,
    and the result is written all the same."""
    if importlib.util.find_spec("matplotlib") is not None:
        return True
    print("note: matplotlib is not installed here: no plot (pip install matplotlib); the result is written to the "
          "JSON", file=sys.stderr)
    return False


def _write(doc: dict[str, Any], out: Path, name: str) -> Path:
    from pipeline import atomic

    path = out / f"{name}.json"
    # pipeline.schemas imports jsonschema only inside validate(): a lerobot venv without prep's
    # dependencies (docs/bench.md runs the command there) imports the module fine and would fail at
    # the call, after measuring. So ask for jsonschema itself, and write the result unvalidated.
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        print("note: jsonschema is not installed here: the result is written without checking it against "
              "schemas/bench.schema.json", file=sys.stderr)
    else:
        from pipeline.schemas import validate

        validate(doc, "bench", source=str(path))
    atomic.write_json(path, doc, root=out)
    return path


def output_of(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return Path(args.out).absolute()
    cwd = Path.cwd()
    if cwd == Path(cwd.anchor):
        raise PrepError(f"the current folder is {cwd}: the default --out would be {cwd / DEFAULT_OUT}; pass --out DIR")
    return cwd / DEFAULT_OUT


def run(args: argparse.Namespace) -> int:
    _require_torch()
    from pipeline.loader import report
    from pipeline.loader.bench import measure

    if args.workers is not None and args.workers < 0:
        raise PrepError(f"--workers must be >= 0, got {args.workers}")
    if args.storage_options and not any(_is_url(os.fspath(t)) for t in filter(None, (args.dataset, args.compare))):
        raise PrepError("--storage-option applies to a DATASET given as an object-store URL (s3://BUCKET/PREFIX), "
                        "not to a local folder")
    args._located = [locate(text, args, flag) for text, flag in ((args.dataset, "DATASET"),
                                                                  (args.compare, "--compare")) if text is not None]
    _check_device(args.device)
    default = args.out is None
    args.out = output_of(args)
    from pipeline.jobs.output import check_outside

    local = [Path(loc.link_root or loc.root) for _root, loc in args._located if loc.is_local]
    check_outside(local, args.out, default=default)  # the datasets are read-only (a snapshot: its cache folder)
    if default:
        from pipeline.commands.defaults import check_default_output, prep_json

        stem = args.name or ("dataloader-stress" if args.stress is not None else "dataloader")
        mine = prep_json(args.out / f"{stem}.json", "bench")
        check_default_output([(args.out / f"{stem}.json", mine), (args.out / f"{stem}.png", mine)])
    host = report.host_info(args.device)
    argv = list(sys.argv)
    plots: list[str] = []
    if args.stress is not None:
        return _run_stress(args, host, argv)
    runs: list[dict[str, Any]] = []
    for spec in _specs(args):
        print(f"... {spec.label}: loader={spec.loader} batch={spec.batch} workers={spec.workers} "
              f"step={spec.step_s:.2f}s", file=sys.stderr, flush=True)
        runs.append(measure(spec))
    name = args.name or "dataloader"
    if not args.no_plot and _can_plot():
        from pipeline.loader.plot import plot_runs

        plots.append(plot_runs(runs, args.out / f"{name}.png", args.threshold).name)
    doc = report.document(argv=argv, host=host, threshold_s=args.threshold, gpus=args.gpus, runs=runs,
                          stress=None, plots=plots)
    path = _write(doc, args.out, name)
    from pipeline.loader.verdict import explain_lines

    print(printable_lines(report.table(runs).splitlines()))
    for line in doc["min_workers"]:
        print(printable(line))
    for r in runs:
        print(printable_lines(explain_lines(r)))
    for r in runs:
        for msg in r["error_examples"]:  # a decode error names the dataset's files
            print(printable(f"ERROR     {r['label']}: {msg}"))
    print(f"results   {path}" + (f", {args.out / plots[0]}" if plots else ""))
    if not doc["ok"]:
        return 1
    if args.require_keeps_up and not all(r["keeps_up"] for r in runs):
        return 1
    return 0


def _run_stress(args: argparse.Namespace, host: dict[str, Any], argv: list[str]) -> int:
    from dataclasses import replace

    from pipeline.loader import report
    from pipeline.loader.bench import available_cores
    from pipeline.loader.stress import run_stress

    if args.stress <= 0:
        raise PrepError(f"--stress must be a positive number of minutes, got {args.stress}")
    spec = _specs(args)[0]
    workers = args.workers if args.workers is not None else available_cores()
    step_s = 0.0 if args.step_time == "auto" else float(args.step_time)
    spec = replace(spec, workers=workers, step_s=step_s, step_source="fixed")
    print(f"... stress {args.stress:g} min: {spec.label} loader={spec.loader} batch={spec.batch} "
          f"workers={workers}", file=sys.stderr, flush=True)
    stress = run_stress(spec, args.stress, window_s=args.stress_window)
    name = args.name or "dataloader-stress"
    plots: list[str] = []
    if not args.no_plot and _can_plot():
        from pipeline.loader.plot import plot_stress

        plots.append(plot_stress(stress, args.out / f"{name}.png").name)
    doc = report.document(argv=argv, host=host, threshold_s=args.threshold, gpus=args.gpus, runs=[],
                          stress=stress, plots=plots)
    path = _write(doc, args.out, name)
    for line in report.stress_lines(stress):
        print(printable(line))
    print(f"results   {path}")
    return 0 if stress["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = PrepParser(prog="python -m pipeline.commands.bench")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PrepError as exc:
        print(f"prep bench: error: {printable(exc)}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
