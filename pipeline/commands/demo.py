"""`prep demo`: build a small synthetic corpus in a work folder and run the main job on it end to end.

Everything it writes goes into the work folder (default: a temp folder, removed at the end) unless
`--out DIR` names another report folder, or `--refresh-manifests` (from the repository root) refreshes
the committed reports in `manifests/demo/`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.commands import help_of
from pipeline.commands.argtypes import positive_int
from pipeline.commands.common import add_run_options, plural, run_config
from pipeline.errors import PrepError

COMMITTED = Path("manifests") / "demo"  # the reports committed in the repository, refreshed on request


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help=help_of("demo"),
                       description="Builds a small synthetic LeRobot corpus (3 cameras, 480x640 h264, 90-frame "
                       "episodes) in a work folder and runs the main job on it: scan, reencode to 224x224 all-intra, "
                       "verify the output, convert it to the other LeRobot format (v2.1 <-> v3.0, stream copy), and a "
                       "budget report from the two manifests. It writes nothing outside "
                       "the work folder unless --out or --refresh-manifests says so.")
    p.add_argument("--episodes", type=positive_int, default=6, help="episodes in the demo corpus (default: 6)")
    p.add_argument("--format", dest="version", choices=["v2.1", "v3.0"], default="v2.1",
                   help="LeRobot format of the corpus (default: v2.1); the conversion step writes the other one")
    p.add_argument("--work", type=Path, metavar="DIR",
                   help="folder for the corpus, its re-encoded copy and the reports; kept (default: a new temp "
                   "folder, removed at the end with everything in it)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="report folder: manifests, verify.json, comparison.json, budget/ (default: <work>/reports)")
    p.add_argument("--refresh-manifests", action="store_true",
                   help=f"write the reports to {COMMITTED}/ (run from the repository root: refreshes the committed "
                   "copies)")
    add_run_options(p)
    p.set_defaults(func=run)


def reports_folder(args: argparse.Namespace, work: Path) -> Path:
    if args.refresh_manifests:
        if args.out is not None:
            raise PrepError("--refresh-manifests writes to manifests/demo/: give it or --out, not both")
        if not (Path("pyproject.toml").is_file() and Path("manifests").is_dir()):
            raise PrepError(f"--refresh-manifests: run it from the repository root (no ./pyproject.toml and "
                            f"./manifests/ in {Path.cwd()})")
        return COMMITTED  # relative on purpose: the committed reports name their files from the repository root
    return args.out if args.out is not None else work / "reports"


def mask_work_folder(out: Path, work: Path) -> None:
    """The committed reports name the demo's work folder `<work>`, not the temp path of the machine that
    refreshed them (tests/test_repo_paths.py keeps absolute paths of a machine out of the repository)."""
    from pipeline import atomic

    for path in sorted(out.rglob("*")):
        if path.suffix in (".json", ".md") and path.is_file() and not path.is_symlink():
            text = atomic.read_regular_text(path)
            if str(work) in text:
                atomic.write_text(path, text.replace(str(work), "<work>"), root=out)


def run(args: argparse.Namespace) -> int:
    """Every step runs through one engine session: one cluster for the whole demo."""
    from pipeline.runner import open_engine

    # --cluster slurm: the work folder (given, on the shared filesystem) holds the corpus and the jobs' records
    work = args.work.absolute() if args.work is not None else None
    config = run_config(args, records=work / "slurm" if work else None, shared=[work] if work else [],
                        records_flag="--work")
    with open_engine(config) as engine:
        return _demo(args, engine)


def _demo(args: argparse.Namespace, engine: Any) -> int:
    from pipeline import atomic
    from pipeline.budget import headline_text
    from pipeline.budget import write_report as write_budget
    from pipeline.commands import convert as convert_cmd
    from pipeline.commands import reencode as reencode_cmd
    from pipeline.commands import verify as verify_cmd
    from pipeline.commands.scan import summary
    from pipeline.formats import VERSIONS
    from pipeline.jobs.convert import ConvertOptions, convert_dataset
    from pipeline.jobs.reencode import reencode_dataset
    from pipeline.jobs.scan import scan_dataset
    from pipeline.jobs.verify import verify_dataset
    from pipeline.manifest import copy_manifest
    from pipeline.stages.reencode import ReencodeOptions
    from pipeline.stages.verify import VerifyOptions
    from pipeline.synth import SynthSpec, write_synthetic

    keep = args.work is not None
    work = (args.work or Path(tempfile.mkdtemp(prefix="prep-demo-"))).absolute()
    try:
        out = reports_folder(args, work)
        work.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        src = work / "merged"
        t0 = time.perf_counter()
        if not (src / "meta/info.json").exists():
            print(f"[demo] building a synthetic {args.version} corpus: {plural(args.episodes, 'episode')} x 3 "
                  f"cameras x 90 timesteps, 480x640 h264 -> {src}")
            write_synthetic(src, SynthSpec(version=args.version, episodes=args.episodes))
        print(f"[demo] corpus ready in {time.perf_counter() - t0:.1f} s")

        print("\n[demo] step 1/5: prep scan (native corpus)")
        native_path = out / "native.manifest.json"
        native, _ = scan_dataset(src, native_path, engine)
        print(summary(native, native_path))

        print("\n[demo] step 2/5: prep reencode --src merged --dst 224")
        prepared_root = work / "merged_224"
        report = reencode_dataset(src, prepared_root, ReencodeOptions(size=(224, 224)), engine)
        print(reencode_cmd.summary(report))
        if not report.ok or report.manifest is None:
            return 1
        # reencode wrote its output's manifest from its own results: copied, not rescanned
        prepared_path = out / "prepared.manifest.json"
        prepared = copy_manifest(Path(report.manifest), prepared_path, root=out)
        if report.comparison is not None:
            atomic.write_json(out / "comparison.json", report.comparison, indent=2, root=out)

        print("\n[demo] step 3/5: prep verify merged_224 --expect-frames 90 --size 224x224 --all-intra --decode")
        options = VerifyOptions(expect_frames=90, size=(224, 224), all_intra=True, decode=True)
        verified = verify_dataset(prepared_root, options, engine, json_path=out / "verify.json")
        print(verify_cmd.summary(verified))

        other = next(v for v in VERSIONS if v != args.version)  # the other format
        print(f"\n[demo] step 4/5: prep convert merged_224 --to {other} (stream copy of the all-intra files)")
        converted = convert_dataset(prepared_root, work / f"merged_224_{other.replace('.', '')}",
                                    ConvertOptions(other), engine, all_intra=True)
        print(convert_cmd.summary(converted))

        print("\n[demo] step 5/5: prep budget --native native.manifest.json --prepared prepared.manifest.json")
        budget = write_budget(out / "budget", native_path, prepared_path)
        print(headline_text(budget))

        if args.refresh_manifests:
            mask_work_folder(out, work)

        t = native["totals"], prepared["totals"]
        gone = not keep and out.absolute().is_relative_to(work)
        print(f"\n[demo] done in {time.perf_counter() - t0:.1f} s: {plural(t[0]['episodes'], 'episode')}, "
              f"native {t[0]['gb_per_hour']:.2f} GB/hr -> 224 all-intra {t[1]['gb_per_hour']:.2f} GB/hr "
              f"({t[0]['gb_per_hour'] / t[1]['gb_per_hour']:.2f}x smaller); verify "
              f"{'passed' if verified.passed else 'FAILED'}; {other} conversion "
              f"{'verified' if converted.ok else 'FAILED'}")
        print(f"[demo] reports: {out.absolute()}" + (" (removed with the temp work folder; keep them with "
                                                     "--work DIR or --out DIR)" if gone else "")
              + ("" if not keep else f"; corpus and output: {work}"))
        return 0 if verified.passed and converted.ok and not native["failures"] else 1
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
