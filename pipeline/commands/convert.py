"""`prep convert SRC --to v2.1|v3.0 [--out PATH]`: a LeRobot dataset in the other layout, by stream copy.

v2.1 -> v3.0 concatenates the episode videos and parquets into files up to the size limits (LeRobot's
defaults; `--chunks-size`, `--data-file-size-mb`, `--video-file-size-mb`), with exact offsets; v3.0 ->
v2.1 cuts each episode out of its file, which is exact only where every episode starts on a keyframe
(checked first: otherwise refused with the episodes, and `prep reencode --format v2.1` is the way).
The output defaults to `<SRC>_<v21|v30>` beside SRC. The job is `pipeline.jobs.convert`; this module
parses, prints and sets the exit code (0 complete and verified, 1 files failed or verify failed,
2 refused or bad input).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.commands import help_of
from pipeline.commands.argtypes import positive_int
from pipeline.commands.common import (
    SmallInput,
    add_run_options,
    outcome_lines,
    output_records,
    plural,
    run_config,
)
from pipeline.commands.where import add_storage_option
from pipeline.errors import PrepError
from pipeline.formats import VERSIONS
from pipeline.text import printable_lines

if TYPE_CHECKING:
    from pipeline.jobs.convert import ConvertReport

FORMATS = VERSIONS  # pipeline.formats is light: a format's module (pyarrow) loads on first use


def positive_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MB, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_limit_options(p: argparse.ArgumentParser) -> None:
    """The v3.0 layout limits (LeRobot's defaults), shared with `prep reencode --format`."""
    g = p.add_argument_group("v3.0 layout (LeRobot's defaults)")
    g.add_argument("--chunks-size", type=positive_int, default=1000, metavar="N",
                   help="files per chunk folder (v2.1: episodes per chunk) (default: 1000)")
    g.add_argument("--data-file-size-mb", type=positive_mb, default=100.0, metavar="MB",
                   help="a new data file starts before this size (default: 100)")
    g.add_argument("--video-file-size-mb", type=positive_mb, default=200.0, metavar="MB",
                   help="a new video file starts before this size (default: 200)")


def limits_of(args: argparse.Namespace) -> Any:
    from pipeline.formats.v30 import Limits

    return Limits(chunks_size=args.chunks_size, data_files_size_in_mb=args.data_file_size_mb,
                  video_files_size_in_mb=args.video_file_size_mb)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "convert", help=help_of("convert"),
        description="Rewrite a LeRobot dataset in the other layout without re-encoding: v2.1 -> v3.0 "
        "(episodes concatenated into files up to the size limits, exact offsets) or v3.0 -> v2.1 (each episode "
        "cut out of its file; refused, with the episodes, where one does not start on a keyframe). Resumable: "
        "a rerun keeps output files that are complete and correct. `prep verify` runs on the result.")
    p.add_argument("src", metavar="DATASET", help="source dataset folder, or s3://BUCKET/PREFIX (configured by the "
                   "environment, as the AWS CLI is; docs/storage.md)")
    p.add_argument("--to", required=True, choices=FORMATS, help="target format")
    p.add_argument("--out", metavar="DIR",
                   help="output dataset folder, or s3://BUCKET/PREFIX (default: <DATASET>_v21 or <DATASET>_v30 "
                   "beside DATASET)")
    p.add_argument("--no-verify", action="store_true", help="skip `prep verify` of the output")
    add_storage_option(p, " as DATASET (an s3:// --out is configured by the environment alone)")
    add_limit_options(p)
    add_run_options(p, SmallInput(64, "episodes"))
    p.set_defaults(func=run)


def default_out(src: Path, to: str) -> Path:
    src = src.absolute()
    return src.parent / f"{src.name}_{to.replace('.', '')}"


def summary(r: ConvertReport) -> str:
    from pipeline.jobs.convert import REPORT_REL

    o = r.options
    rate = r.frames / r.seconds if r.seconds else 0.0
    lines = [
        f"source    {r.src}",
        f"output    {r.out} ({r.to})",
        f"layout    chunks_size={o['chunks_size']} data_files_size_in_mb={o['data_files_size_in_mb']:g} "
        f"video_files_size_in_mb={o['video_files_size_in_mb']:g}",
        f"files     {r.files:,}: {r.written:,} written, {r.kept:,} kept (already complete), {r.failed:,} failed "
        f"({r.out_bytes / 1e6:,.1f} MB) in {r.seconds:.1f} s, engine {r.engine}",
    ]
    if r.complete:
        lines.append(f"episodes  {r.episodes:,}, {plural(r.frames, 'timestep')}, "
                     f"{plural(r.tasks, 'task')} ({rate:,.0f} timesteps/s); meta/info.json written")
    lines += outcome_lines(r.failures, r.verify, f"{r.out.rstrip('/')}/{REPORT_REL}",
                           "fix or remove the failed input and rerun the same command to finish")
    return printable_lines(lines)


def locations(args: argparse.Namespace) -> tuple[Any, Any]:
    """DATASET and --out as `Location`s (a URL's default output: its sibling prefix, `s3://b/ds` -> `s3://b/ds_v30`)."""
    from pipeline.storage import output_location, parse_location

    src = parse_location(args.src if "://" in args.src else Path(args.src).absolute(), what="source",
                         resolve_repo_id=False, options=args.storage_options)
    suffix = args.to.replace(".", "")
    if args.out is not None:
        out = output_location(args.out if "://" in args.out else Path(args.out).absolute())
    elif src.is_local:
        out = output_location(default_out(src.path, args.to))
    else:
        out = output_location(f"{src.url.rstrip('/')}_{suffix}")
    return src, out


def resume_note(args: argparse.Namespace) -> str | None:
    return f"finished files are kept in {locations(args)[1].shown}"


def run(args: argparse.Namespace) -> int:
    src_loc, out_loc = locations(args)
    if not src_loc.is_local:
        src_loc.store().check_reachable()  # credentials, endpoint, bucket: one line now (exit 2)
    src = src_loc.path if src_loc.is_local else src_loc
    out = out_loc.path if out_loc.is_local else out_loc

    from pipeline.jobs.convert import ConvertOptions, convert_dataset
    from pipeline.runner import open_engine

    try:
        options = ConvertOptions(args.to, limits_of(args))
    except ValueError as exc:
        raise PrepError(str(exc)) from None
    records = output_records(out_loc.path) if out_loc.is_local else None
    shared = [src_loc.path] if src_loc.is_local else []
    flag = "a local --out (its job records need a folder the nodes share)"
    with open_engine(run_config(args, records=records, shared=shared, records_flag=flag)) as engine:
        report = convert_dataset(src, out, options, engine, verify=not args.no_verify)
    print(summary(report))
    return 0 if report.ok else 1
