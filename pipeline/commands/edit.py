"""`prep edit DATASET --out OUT --drop EPISODES | --keep EPISODES | --drop-failed REPORT | --drop-tasks TASK ... |
--keep-tasks TASK ...`: a LeRobot dataset with some episodes left out, by stream copy (no re-encode), in the
source's format, renumbered and verified.

EPISODES is a list of indices and ranges, `0-9,12`. A v3.0 source whose kept episode would need a cut off a
keyframe is refused (exit 2) naming the file and episode and the ways forward: `--reencode-partial` (those
episodes re-encoded with the source's codec settings, each into a file of its own; every other file stream
copy) or `prep reencode` (all-intra) first (docs/edit.md). The job is `pipeline.jobs.edit`; this module
parses, prints and sets the exit code (0 complete and verified, 1 files failed or verify failed, 2 refused
or bad input).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.commands import help_of
from pipeline.commands.common import (
    SmallInput,
    add_run_options,
    outcome_lines,
    output_records,
    plural,
    run_config,
)
from pipeline.errors import PrepError
from pipeline.text import printable_lines, shown

if TYPE_CHECKING:
    from pipeline.jobs.edit import EditReport

SELECTIONS = ("drop", "keep", "drop_failed", "drop_tasks", "keep_tasks")
MAX_LISTED = 10_000_000  # indices one list may name (a range like 0-99999999 is refused, not expanded)
MAX_INDEX = 2**31 - 1  # the largest episode index an edit holds (its selection keeps int32 runs)


def episode_list(text: str) -> tuple[int, ...]:
    """`0-9,12` -> (0, 1, ..., 9, 12): indices and inclusive ranges, comma-separated, sorted and unique."""
    out: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        lo_text, sep, hi_text = item.partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if sep else lo
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected episode indices and ranges such as 0-9,12, got "
                                             f"{shown(item, 60)}") from None
        if lo < 0 or hi < lo:
            raise argparse.ArgumentTypeError(f"{shown(item, 60)} is not a range of episode indices (low-high, "
                                             "low <= high)")
        if hi > MAX_INDEX:
            raise argparse.ArgumentTypeError(f"{shown(item, 60)}: episode index {shown(hi, 40)} is beyond any "
                                             f"dataset (at most {MAX_INDEX:,})")
        if hi - lo + 1 + len(out) > MAX_LISTED:
            raise argparse.ArgumentTypeError(f"{shown(item, 60)}: more than {MAX_LISTED:,} episodes in one list")
        out.update(range(lo, hi + 1))
    if not out:
        raise argparse.ArgumentTypeError("no episode given (expected indices and ranges such as 0-9,12)")
    return tuple(sorted(out))


def split_part(text: str) -> tuple[str, float | None, tuple[int, ...] | None]:
    """`train=0.8` (a fraction, with a decimal point) or `val=0-9,12` (episodes): (name, fraction, episodes)."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=FRACTION or NAME=EPISODES, got {text!r}")
    if "." in value:
        try:
            fraction = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a fraction") from None
        if not 0.0 < fraction <= 1.0:
            raise argparse.ArgumentTypeError(f"{text!r}: a fraction is in (0, 1]")
        return name, fraction, None
    return name, None, episode_list(value)


RESERVED_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def rename_pair(text: str) -> tuple[str, str]:
    """`OLD=NEW` -> (OLD, NEW): both non-empty, NEW a key LeRobot can hold (no '/': a key is a folder of the video
    paths and a part of the v3.0 metadata's column names; no spaces around it, no control characters)."""
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(f"expected OLD=NEW (a feature key and its new key), got {shown(text, 200)}")
    if "/" in new or new.strip() != new or not new.isprintable() or new in (".", ".."):
        raise argparse.ArgumentTypeError(f"{shown(text, 200)}: {shown(new, 200)} is not a feature key (no '/', no "
                                         "spaces around it, no control characters)")
    return old, new


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "edit", help=help_of("edit"),
        description="Write a LeRobot dataset (v2.1 or v3.0) without some episodes, by stream copy: no frame is "
        "re-encoded and every kept packet is the source's byte for byte. Episodes, rows and tasks are renumbered, "
        "per-episode stats carried and the global stats aggregated from them; a v3.0 file keeps only its kept "
        "episodes, with exact offsets. A cut that does not fall on a keyframe is refused, or with "
        "--reencode-partial that episode alone is re-encoded with the source's codec settings. "
        "Resumable: a rerun keeps output files that are complete and correct. `prep verify` runs on the result.")
    p.add_argument("src", type=dataset_arg, nargs="?", metavar="DATASET",
                   help="source dataset folder (a hub snapshot too), or s3://BUCKET/PREFIX (configured by the "
                   "environment, as the AWS CLI is, and --storage-option; docs/storage.md); not with --merge")
    p.add_argument("--out", required=True, metavar="DIR", help="output dataset folder, or s3://BUCKET/PREFIX "
                   "(configured by the environment alone; with --split each part a prefix below it). Never in, "
                   "equal to or holding a source")
    g = p.add_argument_group("which episodes (combined: an episode is kept when every keep option keeps it and "
                             "no drop option drops it)")
    g.add_argument("--drop", type=episode_list, metavar="EPISODES",
                   help="episodes to leave out: indices and ranges, e.g. 3,17-19")
    g.add_argument("--keep", type=episode_list, metavar="EPISODES",
                   help="episodes to keep (all others are left out): indices and ranges, e.g. 0-9,12")
    g.add_argument("--drop-failed", type=Path, metavar="REPORT",
                   help="leave out the episodes a `prep verify --out REPORT` of this dataset failed (the report's "
                   "dataset fingerprint must be this dataset's)")
    g.add_argument("--drop-tasks", nargs="+", metavar="TASK",
                   help="leave out every episode that uses one of these tasks (task text or task_index)")
    g.add_argument("--keep-tasks", nargs="+", metavar="TASK",
                   help="keep only episodes whose tasks are all among these (task text or task_index)")
    f = p.add_argument_group("which cameras, under which keys (video files kept or left out whole, by stream copy; "
                             "with --merge, applied to each dataset before they are compared)")
    f.add_argument("--keep-cameras", nargs="+", metavar="KEY",
                   help="keep only these cameras (video or image features); the others' files are not written")
    f.add_argument("--drop-cameras", nargs="+", metavar="KEY",
                   help="leave out these cameras: their features, files, stats and metadata columns")
    f.add_argument("--rename", nargs="+", action="extend", type=rename_pair, metavar="OLD=NEW",
                   help="rename features, e.g. observation.images.cam_high=observation.images.base_0_rgb: a "
                   "camera's videos move to the new key's path byte for byte; a data column is renamed (not "
                   f"{', '.join(RESERVED_KEYS)})")
    sp = p.add_argument_group("split: one dataset per part, in --out/NAME, a folder or an s3:// prefix (the options "
                              "above apply first)")
    sp.add_argument("--split", nargs="+", type=split_part, metavar="NAME=FRACTION|EPISODES",
                    help="parts, e.g. train=0.9 val=0.1, or val=0-9 train=0.8 (listed episodes first; a fraction "
                    "has a decimal point; the fractions share the rest and sum to at most 1)")
    sp.add_argument("--seed", type=int, default=0, help="the shuffle's seed (numpy default_rng; default: 0)")
    sp.add_argument("--no-shuffle", action="store_true",
                    help="fractions take consecutive episodes in index order (LeRobot's split_dataset) instead")
    sp.add_argument("--group-by-task", action="store_true",
                    help="allocate the fractions within each set of episodes with the same tasks, so every part "
                    "gets its share of every task")
    p.add_argument("--merge", type=dataset_arg, nargs="+", metavar="DATASET",
                   help="merge these datasets (folders or s3:// prefixes; same format, fps, robot_type and features, "
                   "after the camera options and --rename) into --out, in order")
    p.add_argument("--to", choices=("v2.1", "v3.0"), help="write the other format: the edit is staged in "
                   "<out>/prep/edited (a folder, or a prefix below an s3:// --out) and converted by stream copy "
                   "(`prep convert`'s rules; not with --split)")
    p.add_argument("--reencode-partial", action="store_true",
                   help="v3.0: re-encode the kept episodes whose cut is off a keyframe (decoded, encoded with the "
                   "source's codec, pix_fmt and info.json's video.g/crf/preset, each into an output file of its "
                   "own) instead of refusing; every other file stays a stream copy")
    p.add_argument("--no-verify", action="store_true", help="skip `prep verify` of the output")
    add_storage_option(p)
    # stream copy is cheap per episode: inline beat 2 LocalCluster workers at 50, 200 and 400 source
    # episodes on 2 cores (bench/edit.py: 1.6 vs 5.1 s, 3.2 vs 11.1 s; 400 v2.1: 4.1 vs 5.5 s, v3.0 3.4 vs 5.3 s)
    add_run_options(p, SmallInput(512, "kept episodes"))
    p.set_defaults(func=run)


def add_storage_option(p: argparse.ArgumentParser) -> None:
    """`--storage-option` as `pipeline.commands.where` adds it (not imported: `prep edit --help` imports no other
    command module)."""
    from pipeline.storage import OPTION_KEYS

    p.add_argument("--storage-option", dest="storage_options", action="append", default=[], metavar="KEY=VALUE",
                   help="with an object-store DATASET or --merge dataset, what the environment cannot say "
                   "(repeatable; an s3:// --out is configured by the environment alone): "
                   + "; ".join(f"{k}: {v}" for k, v in OPTION_KEYS.items())
                   + ". Credentials are never options (set them in the environment or ~/.aws/credentials)")


def summary(r: EditReport) -> str:
    from pipeline.jobs.edit import ranges

    by_reason: dict[str, list[int]] = {}
    for d in r.dropped:
        by_reason.setdefault(d["reason"], []).append(d["episode"])
    lines = [
        f"source    {r.src} ({r.format}, {plural(r.source_episodes, 'episode')})",
        f"output    {r.out}",
        f"dropped   {plural(r.dropped_total, 'episode')}",
    ]
    for reason, eps in by_reason.items():
        lines.append(f"          {ranges(eps)}: {reason}")
    if r.dropped_total > len(r.dropped):
        lines.append(f"          ... {r.dropped_total - len(r.dropped):,} more (see {report_of(r)})")
    lines += feature_lines(r.options.get("features") or {})
    lines.append(f"files     {r.files:,}: {r.written:,} written, {r.kept:,} kept (already complete), {r.failed:,} "
                 f"failed ({r.out_bytes / 1e6:,.1f} MB) in {r.seconds:.1f} s, "
                 + (f"stream copy but {r.reencoded_total:,} re-encoded" if r.reencoded_total else "stream copy")
                 + f", engine {r.engine}")
    for item in r.reencoded[:20]:
        lines.append(f"reencoded {item['path']}: {item['note']}")
    if r.reencoded_total > 20:
        lines.append(f"reencoded ... and {r.reencoded_total - 20:,} more files (see {report_of(r)})")
    if r.complete:
        lines.append(f"episodes  {r.episodes:,}, {plural(r.frames, 'timestep')}, {plural(r.tasks, 'task')}; "
                     "meta/info.json written")
    lines += outcome_lines(r.failures, r.verify, report_of(r),
                           "fix the failed input, or drop its episode too, and rerun")
    return printable_lines(lines)


def feature_lines(given: dict[str, Any]) -> list[str]:
    """What the camera options and --rename asked for (as edit_options.json records them)."""
    lines = []
    if "keep_cameras" in given:
        lines.append(f"cameras   kept: {', '.join(given['keep_cameras'])} (--keep-cameras)")
    if "drop_cameras" in given:
        lines.append(f"cameras   left out: {', '.join(given['drop_cameras'])} (--drop-cameras)")
    for old, new in (given.get("rename") or {}).items():
        lines.append(f"renamed   {old} -> {new}")
    return lines


def report_of(r: EditReport) -> str:
    """The report's path (or an object's URL) as shown."""
    from pipeline.jobs.edit import REPORT_REL

    return f"{r.out.rstrip('/')}/{REPORT_REL}"


def resume_note(args: argparse.Namespace) -> str | None:
    return f"finished files are kept in {args.out if is_url(args.out) else Path(args.out).absolute()}"


def engine_config(args: argparse.Namespace) -> Any:
    """The engine settings: --cluster slurm keeps its records in <out>/prep/slurm/; the workers must see the
    sources."""
    sources = [p for p in (args.merge or [args.src]) if isinstance(p, Path)]  # local folders: the workers see them
    if is_url(args.out):
        return run_config(args, records=None, shared=sources,
                          records_flag="a local --out (its job records need a folder the nodes share)")
    return run_config(args, records=output_records(Path(args.out).absolute()), shared=sources)


def dataset_arg(text: str) -> Path | str:
    """A source of `prep edit`: a local folder (a hub snapshot too) as a `Path`, an object-store URL as its text
    (parsed, with --storage-option, and checked reachable by `sources`)."""
    return text if is_url(text) else Path(text)


def sources(args: argparse.Namespace) -> list[Any]:
    """DATASET (or --merge's) where each lives: a local folder's absolute `Path`, an object-store URL's `Location`
    (`--storage-option` applies to these; its store asked one short question now, so that missing credentials, a
    dead endpoint or a missing bucket are one line naming the URL, exit 2)."""
    from pipeline.storage import parse_location

    given = [p for p in (args.merge or [args.src]) if p is not None]
    if args.storage_options and not any(is_url(p) for p in given):
        parse_location(given[0] if given else ".", options=args.storage_options, what="source")  # refused: local
    out: list[Any] = []
    for p in given:
        if isinstance(p, Path):
            out.append(p.absolute())
            continue
        loc = parse_location(p, options=args.storage_options, what="source", resolve_repo_id=False)
        if loc.is_local:  # file://PATH
            out.append(loc.path)
            continue
        loc.store().check_reachable()
        out.append(loc)
    return out


def shown_source(src: Any) -> str:
    return str(src) if isinstance(src, Path) else src.url


def out_of(args: argparse.Namespace) -> Any:
    """--out: a local folder's absolute `Path`, an object-store prefix's `Location` (configured by the environment)."""
    from pipeline.storage import output_location

    return output_location(args.out) if is_url(args.out) else Path(args.out).absolute()


def is_url(text: str) -> bool:
    return "://" in str(text)


def feature_options(args: argparse.Namespace) -> Any:
    from pipeline.jobs.edit import FeatureOptions

    return FeatureOptions(keep_cameras=tuple(args.keep_cameras) if args.keep_cameras is not None else None,
                          drop_cameras=tuple(args.drop_cameras) if args.drop_cameras is not None else None,
                          rename=tuple(args.rename or ()))


def run(args: argparse.Namespace) -> int:
    from pipeline.jobs.edit import EditOptions, SplitPart, edit_dataset, merge_datasets, split_dataset
    from pipeline.runner import open_engine

    features = feature_options(args)
    if args.to is not None:
        if args.split:
            raise PrepError("--to is not available with --split: split, then `prep convert` each part")
        return run_to(args)

    if args.merge:
        if args.src is not None or args.split or any(getattr(args, k) is not None for k in SELECTIONS):
            raise PrepError("--merge takes its datasets after it (prep edit --merge A B --out OUT) and no episode "
                            "selection or --split (the camera options and --rename apply to each dataset); edit the "
                            "merged dataset afterwards")
        merged = sources(args)
        out = out_of(args)
        with open_engine(engine_config(args)) as engine:
            report = merge_datasets(merged, out, engine, verify=not args.no_verify, features=features)
        print(f"merged    {', '.join(shown_source(p) for p in merged)}")
        print(summary(report))
        return 0 if report.ok else 1
    if args.src is None:
        raise PrepError("give the DATASET to edit (or --merge A B ...)")

    options = EditOptions(drop=args.drop, keep=args.keep,
                          drop_failed=args.drop_failed.absolute() if args.drop_failed else None,
                          drop_tasks=tuple(args.drop_tasks) if args.drop_tasks else None,
                          keep_tasks=tuple(args.keep_tasks) if args.keep_tasks else None)
    src = sources(args)[0]
    if args.split:
        out = out_of(args)
        with open_engine(engine_config(args)) as engine:
            parts = [SplitPart(name, fraction, episodes) for name, fraction, episodes in args.split]
            split = split_dataset(src, out, parts, options, engine,
                                  seed=args.seed, shuffle=not args.no_shuffle, group_by_task=args.group_by_task,
                                  verify=not args.no_verify, reencode_partial=args.reencode_partial,
                                  features=features)
        for name, part in split.parts.items():
            print(f"part      {name}: {plural(part.episodes, 'episode')}")
            print(summary(part))
        return 0 if split.ok else 1
    out = out_of(args)
    with open_engine(engine_config(args)) as engine:
        report = edit_dataset(src, out, options, engine,
                              verify=not args.no_verify, reencode_partial=args.reencode_partial, features=features)
    print(summary(report))
    return 0 if report.ok else 1


def run_to(args: argparse.Namespace) -> int:
    """`--to FORMAT`: the edit or merge staged in the source's format, then converted (a no-op when FORMAT is
    the source's)."""
    from pipeline.commands.convert import summary as convert_summary
    from pipeline.formats import read_info
    from pipeline.jobs.edit import EditOptions, edit_as, edit_dataset, merge_datasets
    from pipeline.runner import open_engine

    if (args.merge or [args.src])[0] is None:
        raise PrepError("give the DATASET to edit (or --merge A B ...)")
    given = sources(args)
    out = out_of(args)
    same = read_info(given[0])["codebase_version"] == args.to
    args_to, args.to = args.to, None
    if same:
        return run(args)
    options = EditOptions(drop=args.drop, keep=args.keep,
                          drop_failed=args.drop_failed.absolute() if args.drop_failed else None,
                          drop_tasks=tuple(args.drop_tasks) if args.drop_tasks else None,
                          keep_tasks=tuple(args.keep_tasks) if args.keep_tasks else None)

    features = feature_options(args)

    def edit(staged: Any, verify: bool) -> Any:
        if args.merge:
            return merge_datasets(given, staged, engine, verify=verify, features=features)
        return edit_dataset(given[0], staged, options, engine, verify=verify,
                            reencode_partial=args.reencode_partial, features=features)

    with open_engine(engine_config(args)) as engine:
        result = edit_as(args_to, out, engine, edit, verify=not args.no_verify)
    print(summary(result.edit))
    if result.convert is not None:
        print(f"converted to {args_to}:")
        print(convert_summary(result.convert))
    return 0 if result.ok else 1
