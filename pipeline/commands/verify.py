"""`prep verify DATASET [--expect-frames N] [--size WxH] [--all-intra] [--decode] [--out PATH]`.

Proves a corpus is sound before training: every frame count by origin agrees (metadata, parquet,
container header, packets, and with --decode the decoder), timestamps sit on the 1/fps grid, and
the optional corpus rules hold (episode length, frame size, all-intra). Exit 0 when no finding is an
error (warnings are printed), 1 on errors.
The job (plan, stage, reduce, publish) is `pipeline.jobs.verify`; this module parses and prints.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.checks import READER_CHOICES, Reader, refusal_line
from pipeline.commands import help_of
from pipeline.commands.argtypes import parse_size, positive_int
from pipeline.commands.common import SmallInput, add_run_options, plural, report_records, run_config
from pipeline.commands.corpus import OUT_RECORDS, add_corpus_option, corpus_of, object_report, report_path
from pipeline.commands.corpus import resume_note as corpus_resume_note
from pipeline.commands.corpus import run_verify as run_corpus_verify
from pipeline.commands.where import add_location_options, dataset_location, shared_paths
from pipeline.text import printable, printable_lines

if TYPE_CHECKING:
    from pipeline.jobs.verify import VerifyReport
    from pipeline.video.checks import CheckFailure

TABLE_ROWS = 40


def failures_table(failures: list[CheckFailure], limit: int = TABLE_ROWS, total: int | None = None) -> str:
    rows = [("severity", "episode", "camera", "check", "expected", "found")]
    for f in failures[:limit]:  # every cell escaped before the widths are taken: a camera key is user data
        rows.append((f.severity, str(f.episode) if f.episode is not None else "-",
                     printable(_short_camera(f.camera)), printable(f.check), _clip(printable(f.expected)),
                     _clip(printable(f.found))))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5] for r in rows]
    if total is not None and total > min(limit, len(failures)):
        lines.append(f"... and {total - min(limit, len(failures))} more failures (write them all with --out PATH)")
    elif len(failures) > limit:
        lines.append(f"... and {len(failures) - limit} more failures (write them all with --out PATH)")
    return "\n".join(lines)


def _short_camera(camera: str | None) -> str:
    if not camera:
        return "-"
    return camera.removeprefix("observation.images.")


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def summary(report: VerifyReport) -> str:
    t = report.head_json()["totals"]
    ds = report.dataset
    lines = []
    if report.failures:
        lines += [*failures_table(report.failures, total=report.failures_total).splitlines(), ""]  # cells escaped
    n_cams = len(ds.cameras) + len(ds.image_cameras)
    stored = f", {len(ds.image_cameras)} stored as images" if ds.image_cameras else ""
    lines += [
        f"dataset   {ds.root}  (LeRobot {ds.codebase_version}, {ds.fps:g} fps, {plural(n_cams, 'camera')}{stored})",
        f"episodes  {t['episodes']:,}: {t['episodes_passed']:,} passed, {t['episodes_failed']:,} failed"
        + (f" ({t['episodes_rejected_by_metadata']} rejected by metadata)" if report.rejected else ""),
        f"timesteps {t['frames_expected']:,} expected (metadata lengths; "
        f"{plural(t['frames_expected'] * n_cams, 'camera frame')}"
        + (f", {t['frames_expected'] * len(ds.image_cameras):,} of them pictures)" if ds.image_cameras else ")"),
        f"checks    {', '.join(f'{k}: {v}' for k, v in sorted(t['failures_by_check'].items())) or 'all passed'}",
        *_depth_line(report),
        *_predictions(report),
        f"time      {t['seconds']:.1f} s ({t['episodes_per_s']:.1f} episodes/s)",
        (f"PASSED    ({plural(t['warnings'], 'warning')})" if t["warnings"] else "PASSED") if report.passed else
        _failed_line(report, t),
    ]
    return printable_lines(lines)


def _failed_line(report: VerifyReport, t: dict[str, Any]) -> str:
    warnings = f" ({plural(t['warnings'], 'warning')})" if t["warnings"] else ""
    errors = f"{plural(t['errors'], 'error')} in " + _episode_list(report.failed_episodes)
    cannot = report.unreadable_by
    if cannot is None:
        return f"FAILED    {errors}{warnings}"
    return (f"FAILED    --reader {cannot.value}: {refusal_line(cannot, report.dataset.codebase_version)}"
            + (f"; and {errors}" if t["errors"] else "") + warnings)


def _depth_line(report: VerifyReport) -> list[str]:
    """The depth maps checked as copies (not against --size / --all-intra), when there are any."""
    cams = sorted({f.camera for f in report.failures if f.check == "depth_copy" and f.camera})
    if not cams:
        return []
    return [f"depth     {', '.join(cams)}: depth maps prep copies unchanged, checked as copies (frame counts, "
            "timestamps, declared size), not against --size / --all-intra"]


def _predictions(report: VerifyReport) -> list[str]:
    """One line per reader of the dataset's format line (v2.1: lerobot 0.3.x / openpi; v3.0: 0.4.x and 0.6.x),
    then the user's own rules that failed (errors for the exit code, never a reader's)."""
    head = report.head_json()
    lines = []
    version = report.dataset.codebase_version
    refused = head.get("format_refused_by") or {}
    for r in Reader:  # one line per reader generation, 0.3, 0.4, 0.6, whatever the format
        if r.value in refused:
            text = refusal_line(r, version)
            if refused[r.value]["targeted"]:
                text += f"  [--reader {r.value}: FAILED]"
            lines.append(f"lerobot   {text}")
            continue
        p = head["lerobot_loads"].get(r.value)
        if p is None:
            continue
        name = f"{p['reader']} ({p['codebase_version']})"
        if p["loads"] is None:
            text = f"{name}: no error it trips over; the pixels were not decoded (add --decode to predict)"
        elif p["loads"]:
            text = f"{name} predicted: loads"
        else:
            text = f"{name} predicted: refuses, raises or hands a wrong frame ({plural(p['errors'], 'error')})"
        if p["trains_wrong"]:
            text += f"; {plural(p['trains_wrong'], 'finding')} that poison training (trains_wrong)"
        if not p["targeted"]:
            text += f"  [not targeted: --reader {report.options.reader}]"
        lines.append(f"lerobot   {text}")
    rules = head.get("user_rules_failed") or {}
    if rules:
        lines.append("rules     your rules failed: " + ", ".join(f"{opt} ({plural(n, 'failure')})"
                                                             for opt, n in rules.items())
                     + " (errors for the exit code; no reader checks them)")
    return lines


def _episode_list(episodes: list[int], limit: int = 20) -> str:
    if not episodes:
        return "the dataset's metadata"
    shown = ", ".join(str(e) for e in episodes[:limit])
    return ("episode " if len(episodes) == 1 else "episodes ") + shown + (
        f", ... ({len(episodes)} in all)" if len(episodes) > limit else "")


def size_arg(text: str) -> tuple[int, int]:
    """`--size`: `224x224` -> (224, 224) as (width, height); `224` alone means 224x224, as `prep reencode --dst 224`."""
    size = parse_size(text)
    if size is None:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT or one size, e.g. 224x224 or 224, got {text!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return size


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify", help=help_of("verify"),
                       description="Verify a LeRobot dataset (v2.1 or v3.0): per episode and camera, the "
                       "frame counts by origin (metadata, parquet, header, packets, decoded) must agree, "
                       "timestamps and pts must sit on the 1/fps grid. Each finding is an error (LeRobot's reader "
                       "refuses the dataset, raises, or hands a wrong frame), a warning (metadata inconsistent, "
                       "loading unaffected) or info. Exit 0 when there is no error (warnings printed), 1 on errors.")
    add_location_options(p, several=True)
    add_corpus_option(p)
    p.add_argument("--expect-frames", type=positive_int, metavar="N",
                   help="every episode must have exactly N frames (e.g. 90 = 3 s at 30 fps)")
    p.add_argument("--size", type=size_arg, metavar="WxH",
                   help="every video must be WxH, e.g. 224x224 (224 alone: 224x224, as reencode --dst)")
    p.add_argument("--all-intra", action="store_true", help="every frame must be a keyframe")
    p.add_argument("--decode", action="store_true", help="also decode every frame (slower; catches corrupt "
                   "packets a demux cannot see)")
    p.add_argument("--out", "--json", dest="out", type=report_path, metavar="PATH",
                   help="report file to write, a local path or an object, s3://BUCKET/KEY.json (JSON, "
                   "schemas/verify.schema.json; put last, configured by the environment: docs/storage.md) with a "
                   "per-episode Parquet table beside it (<name>.episodes.parquet); a killed run rerun with the same "
                   "arguments resumes from its finished batches (<report>.parts/). Default: no file, the verdict is "
                   "printed and the exit code says it (--json is the former name). A corpus: a folder or "
                   "s3://BUCKET/PREFIX, each dataset's report in DIR/<name>/verify.json, the corpus's verdicts in "
                   "DIR/corpus_verify.json")
    p.add_argument("--reader", choices=READER_CHOICES, default="all",
                   help="the reader generation the severities and the exit code follow: 0.4 or 0.6 (lerobot 0.4.x / "
                   "0.6.x, v3.0 datasets), 0.3 (lerobot 0.3.x / openpi, v2.1), or all (default: the strictest of the "
                   "dataset's format line). A reader that cannot open the dataset's format (0.3 on v3.0, 0.4 or 0.6 "
                   "on v2.1) fails it (exit 1), naming the `prep convert --to` that writes a copy it reads. Every "
                   "reader generation's line is printed either way")
    p.add_argument("--fingerprint", choices=("mtime", "content"), default="mtime",
                   help="how the report identifies the files of each failed episode, so that `prep edit "
                   "--drop-failed REPORT` acts only on these files: mtime (default) = size and mtime (a stat); "
                   "content = a BLAKE2b of every byte of them (a copy of the same bytes matches). meta/ is always "
                   "hashed whole")
    p.add_argument("--fresh", action="store_true", help="ignore the finished batches of an interrupted run")
    add_run_options(p, SmallInput(128, "file sets (a v2.1 episode; in v3.0, the episodes that share their files)"))
    p.set_defaults(func=run)


def resume_note(args: argparse.Namespace) -> str | None:
    if getattr(args, "_corpus", None) is not None:
        return corpus_resume_note(args, "verify")
    if args.out is None:
        return None  # without a report file nothing is kept
    return f"finished batches are kept in {object_report(args) or args.out.absolute()}.parts/"


def run(args: argparse.Namespace) -> int:
    from pipeline.jobs.verify import verify_dataset
    from pipeline.runner import open_engine
    from pipeline.stages.verify import VerifyOptions

    corpus = corpus_of(args, "verify")
    if corpus is not None:
        return run_corpus_verify(args, corpus)
    src = dataset_location(args)  # an object store: reachable with these credentials, or one line now
    out = (object_report(args) or args.out.absolute()) if args.out else None
    options = VerifyOptions(expect_frames=args.expect_frames, size=args.size, all_intra=args.all_intra,
                            decode=args.decode, reader=args.reader)
    if isinstance(out, Path) or out is None:
        config = run_config(args, records=report_records(out) if out else None, shared=shared_paths(src))
    else:
        config = run_config(args, shared=shared_paths(src), records_flag=OUT_RECORDS)
    with open_engine(config) as engine:
        report = verify_dataset(src, options, engine, json_path=out, resume=not args.fresh,
                                fingerprint=args.fingerprint)
    print(summary(report))
    if out:
        print(f"report    {printable(out)}")
    return 0 if report.passed else 1
