"""`prep reencode DATASET --dst DST` (or `--src DATASET`, the runbook's form): a LeRobot dataset re-encoded
to DST all-intra, as a new dataset.

SRC (DATASET or --src) is a dataset path, or a name under `--root` (default: the current folder). DST is `224`
(224x224) or `WxH`. The output goes to `--out`, by default the sibling folder `<SRC>_<DST>`
(`merged` + `224` -> `merged_224`, `merged` + `320x240` -> `merged_320x240`). prep's own files go
to `<out>/prep/` (LeRobot ignores the folder). The job (plan, stages, reduce, publish) is
`pipeline.jobs.reencode`; with `--format` the other layout than the source's, `pipeline.jobs.reencode_as`
(re-encode, then stream-copy into that layout). This module parses, prints and sets the exit code.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.checks import READER_CHOICES, REPAIR_NAMES
from pipeline.commands import help_of
from pipeline.commands.argtypes import LazyChoices, LazyHelp, dataset_path, parse_size
from pipeline.commands.common import SmallInput, add_run_options, output_records, plural, run_config, warn
from pipeline.commands.convert import add_limit_options, limits_of
from pipeline.commands.corpus import CORPUS_HELP, add_corpus_option, corpus_of
from pipeline.commands.corpus import resume_note as corpus_resume_note
from pipeline.commands.corpus import run_reencode as run_corpus_reencode
from pipeline.commands.where import add_storage_option
from pipeline.errors import PrepError
from pipeline.text import printable, printable_lines

if TYPE_CHECKING:
    from pipeline.jobs.reencode import ReencodeReport
    from pipeline.jobs.reencode_as import ReencodeAsReport

ENCODE = "pipeline.video.encode"  # PROFILES and ENGINES live there (it imports PyAV: read only when needed)


def _encode_help(text: str) -> LazyHelp:
    def render() -> str:
        from pipeline.video import encode

        return text.format(encode=encode, p=encode.PROFILES)

    return LazyHelp(render)


def add_parser(sub: Any) -> None:
    from pipeline.video.resize import DEFAULT_RESIZE, RESIZE_MODES  # no PyAV

    p = sub.add_parser(
        "reencode", help=help_of("reencode"),
        usage="prep reencode DATASET --dst SIZE [--out DIR] [options]\n"
              "       prep reencode --src DATASET --dst SIZE [--out DIR] [options]",
        description="Re-encode every video of a LeRobot dataset (v2.1 or v3.0) to a target size, every frame "
        "a keyframe, into a new dataset of the same version (parquet copied byte for byte, metadata updated). "
        "Resumable: a rerun keeps outputs that are complete and correct.")
    p.add_argument("dataset", nargs="?", metavar="DATASET", type=source_path,
                   help="source dataset: a path, or a name under --root (or give it as --src DATASET). Several "
                   "DATASETs are a corpus (docs/corpus.md), as --corpus FILE listing them with equal weights")
    p.add_argument("more", nargs="*", metavar="DATASET", type=source_path, help=argparse.SUPPRESS)
    add_corpus_option(p, CORPUS_HELP + "; each dataset's output goes to DIR/<name>/ under --out DIR (required; "
                      "DIR may be s3://BUCKET/PREFIX)")
    p.add_argument("--src", metavar="DATASET", type=source_path,
                   help="the source dataset, as an option (same as DATASET)")
    # not required=True: argparse would name --dst alone when DATASET is missing too (run() names every one)
    p.add_argument("--dst", metavar="SIZE", help="target size: 224 (224x224) or WxH, e.g. 320x240 (required)")
    p.add_argument("--root", type=Path, help="folder holding DATASET when it is a name (default: current folder)")
    p.add_argument("--out", metavar="DIR",
                   help="output dataset folder, or s3://BUCKET/PREFIX (configured by the environment, as the AWS CLI "
                   "is; docs/storage.md) (default: <DATASET>_<SIZE> beside DATASET: merged -> merged_224)")
    p.add_argument("--resize", choices=sorted(RESIZE_MODES), default=DEFAULT_RESIZE,
                   help="pad = openpi resize_with_pad (keep aspect, black bars); stretch; crop "
                   f"(default: {DEFAULT_RESIZE})")
    p.add_argument("--profile", choices=LazyChoices(ENCODE, "PROFILES"), metavar="PROFILE",
                   help=_encode_help("encoder profile: %(choices)s (default: {encode.DEFAULT_PROFILE})"))
    p.add_argument("--crf", type=int, help=_encode_help(
        "quality: x264 CRF for h264 profiles (default {p[h264-intra].default_crf}), JPEG q for mjpeg "
        "(default {p[mjpeg].default_crf})"))
    p.add_argument("--engine", choices=LazyChoices(ENCODE, "ENGINES"), metavar="ENGINE",
                   help=_encode_help("%(choices)s: pyav = in-process; ffmpeg = one ffmpeg process per file "
                                     "(default: {encode.DEFAULT_ENGINE})"))
    p.add_argument("--format", choices=("v2.1", "v3.0"), help="output format (default: the source's): v3.0 -> "
                   "v2.1 gives every episode its own all-intra file, v2.1 -> v3.0 writes episodes consecutively into "
                   "files up to the size limits (source and --out may be s3://: the staged re-encode lives below "
                   "the output)")
    p.add_argument("--keep-staged", action="store_true", help="with --format: keep the re-encode in the source's "
                   "layout (<out>/prep/reencoded) after the conversion")
    add_limit_options(p)
    p.add_argument("--repair", action="append", default=[], choices=REPAIR_NAMES,
                   metavar="WHAT", help="fix the source's errors in the output: timestamps = the parquet "
                   "`timestamp` column rewritten as frame_index/fps (v3.0 spans exact) where the video frames are on "
                   "the 1/fps grid but the parquet is not; the parquet files are then no longer byte-identical "
                   "(every repaired episode is listed in <out>/prep/source_check.json); stats (v2.1) = "
                   "meta/episodes_stats.jsonl written anew. Choices: %(choices)s")
    p.add_argument("--fingerprint", choices=("ctime", "content"), default="ctime",
                   help="how a rerun tells that a kept output's source file is unchanged: ctime (default) = size, "
                   "mtime, the inode change time and three 64 KiB blocks, no full read: any write to the file is "
                   "caught even with size and mtime put back (cp -p, rsync -a, touch -r), but a chmod, chown or "
                   "restore of the same bytes redoes it; content = a BLAKE2b of every byte (recorded at the first "
                   "encode), re-read for every kept file at resume: any change of bytes is caught, metadata-only "
                   "changes are not redone")
    p.add_argument("--keep-images", action="store_true",
                   help="cameras stored as images (dtype image: pictures in the data parquet) stay images, resized "
                   "to --dst as a video camera's frames are (same --resize) and stored as PNG; by default they "
                   "become all-intra video features like every other camera")
    p.add_argument("--accept-invalid-source", action="store_true",
                   help="re-encode a source that verify finds errors in (LeRobot's reader would refuse it or trip "
                   "over it); the output is marked so in <out>/prep/source_check.json and never called drop-in")
    p.add_argument("--reader", choices=READER_CHOICES, default="all",
                   help="the reader generation whose errors refuse the source, as in prep verify --reader: 0.4 or 0.6 "
                   "(v3.0), 0.3 (v2.1), or all (default: the strictest of the dataset's format line). A source only "
                   "0.6 refuses (e.g. a depth codec it cannot resolve) is re-encoded with --reader 0.4, and the "
                   "output is refused by 0.6 as the source is. A reader that cannot open the source's format (0.3 "
                   "on v3.0, 0.4 or 0.6 on v2.1) fails the check (exit 1, nothing encoded)")
    add_storage_option(p, " as DATASET (an s3:// --out is configured by the environment alone)")
    add_run_options(p, SmallInput(4, "camera video files to encode (v2.1: episodes x cameras)"))
    p.set_defaults(func=run)


def source_path(text: str) -> str:
    """DATASET / --src as typed, checked like every command's dataset argument (an empty one is refused); an
    object-store URL keeps its `//`."""
    return text if is_url(text) else str(dataset_path(text))


def is_url(text: str) -> bool:
    """`s3://...` (or another object-store scheme): not a local path."""
    from pipeline.storage import LOCAL, URL_RE

    m = URL_RE.match(text)
    return m is not None and m.group("scheme") != LOCAL


def _under(out: str, rel: str) -> str:
    """A file of the output, as the user sees it: a path, or an object's URL."""
    return f"{out.rstrip('/')}/{rel}"


def source_of(args: argparse.Namespace) -> str:
    """DATASET or --src (the user's runbook writes `prep reencode --src merged --dst 224`)."""
    if args.dataset is not None and args.src is not None and args.dataset != args.src:
        raise PrepError(f"two source datasets: {args.dataset!r} and --src {args.src!r}; give one")
    src = args.dataset if args.dataset is not None else args.src
    if src is None:
        raise PrepError("no source dataset: prep reencode DATASET --dst 224 (or --src DATASET)")
    return str(src)


def dst_size(text: str) -> tuple[int, int]:
    """`--dst`: `224` -> (224, 224); `320x240` -> (320, 240) as (width, height)."""
    size = parse_size(text)
    if size is None:
        raise PrepError(f"--dst {text!r}: expected a size like 224 or 320x240")
    w, h = size
    if not (2 <= w <= 8192 and 2 <= h <= 8192):
        raise PrepError(f"--dst {text!r}: width and height must be between 2 and 8192")
    return w, h


# Training sizes a --dst near them most likely meant (pi0/openpi and most VLAs read 224x224).
INTENDED_SIZES = (224,)


def _one_edit_apart(a: str, b: str) -> bool:
    """One digit substituted, inserted, deleted, or two neighbours swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def size_warnings(size: tuple[int, int]) -> list[str]:
    """A likely typo of a training size (244 for 224): built as asked, but said."""
    out = []
    for n in INTENDED_SIZES:
        if size != (n, n) and any(_one_edit_apart(str(v), str(n)) for v in set(size)):
            out.append(f"--dst {size_label(size)} builds {size[0]}x{size[1]} frames; did you mean --dst {n} "
                       f"({n}x{n}, what pi0/openpi train on)? Continuing with {size[0]}x{size[1]}")
    return out


def prep_provenance(src: Path) -> dict[str, Any] | None:
    """What prep reencode recorded in SRC if SRC is one of its outputs: `prep/options.json`, or (a copy
    without prep/ of an output of an earlier prep, which kept provenance there) the `prep.*` entries of its
    info.json video features. None for any other dataset."""
    from pipeline.bounded import read_json

    try:
        options = read_json(src / "prep" / "options.json")
        if isinstance(options, dict):
            return options
    except (OSError, ValueError):
        pass
    try:
        info = read_json(src / "meta" / "info.json")
        for feat in info.get("features", {}).values():
            extra = (feat.get("info") or {}) if isinstance(feat, dict) else {}
            marks = {k.removeprefix("prep."): v for k, v in extra.items() if k.startswith("prep.")}
            if marks:
                shape = feat.get("shape") or []
                return {"size": [extra.get("video.width", shape[1] if len(shape) > 1 else "?"),
                                 extra.get("video.height", shape[0] if shape else "?")], **marks}
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return None


def provenance_warning(src: Path, size: tuple[int, int]) -> str | None:
    prior = prep_provenance(src)
    if prior is None:
        return None
    w, h = (prior.get("size") or ["?", "?"])[:2]
    origin = f" from {prior['source']}" if prior.get("source") else ""
    same = [w, h] == list(size)
    again = "the same size again" if same else f"{size[0]}x{size[1]}"
    cost = "quality lost, nothing gained" if same else "quality lost twice"
    original = f"the original ({prior['source']})" if prior.get("source") else "the original"
    return (f"{src} was written by prep reencode ({w}x{h} {prior.get('profile', '?')} crf {prior.get('crf', '?')}"
            f"{origin}): re-encoding it to {again} compresses already-compressed frames a second time ({cost}); "
            f"re-encode {original} instead")


def size_label(size: tuple[int, int]) -> str:
    return str(size[0]) if size[0] == size[1] else f"{size[0]}x{size[1]}"


def default_out(src: Path, size: tuple[int, int]) -> Path:
    """The sibling folder `<src>_<size>`: merged -> merged_224."""
    src = src.absolute()
    return src.parent / f"{src.name}_{size_label(size)}"


def resolve_src(src: str, root: Path | None) -> Path:
    return ((root or Path.cwd()) / src).absolute()


def summary(r: ReencodeReport) -> str:
    from pipeline.jobs.reencode import COMPARISON_REL, MANIFEST_REL, REPORT_REL

    fps = r.frames_encoded / r.seconds if r.seconds else 0.0
    o = r.options
    lines = [
        f"source    {r.src}",
        f"output    {r.out}",
        f"settings  {o['size'][0]}x{o['size'][1]} resize={o['resize']} profile={o['profile']} crf={o['crf']} "
        f"engine={r.engine}",
        f"files     {plural(r.files, 'video file')}: {r.encoded:,} encoded, {r.kept:,} kept (already complete), "
        + (f"{r.copied:,} copied, " if r.copied else "") + f"{r.failed:,} failed",
        f"frames    {plural(r.frames, 'camera frame')} ({r.frames_encoded:,} encoded in {r.seconds:.1f} s, "
        f"{fps:,.0f} frames/s)",
    ]
    if r.depth_copied:
        lines.append(f"depth     {', '.join(r.depth_copied)}: copied unchanged (a depth map is never re-encoded "
                     "lossy; its files, spans and stats are the source's)")
    if r.comparison:
        c = r.comparison
        rates = f"native {c['native']['gb_per_hour']:.3f} GB/hr -> prepared {c['prepared']['gb_per_hour']:.3f} GB/hr"
        if c.get("ratio") is not None and c["prepared"]["video_bytes"] and not c["native"]["video_bytes"]:
            lines.append(f"size      {rates} ({c['ratio']:.2f}x smaller; the cameras stored as images are videos now)")
        elif c.get("video_ratio") is None or c.get("ratio") is None:  # a corpus without a camera
            lines.append(f"size      {rates} (no video: nothing to re-encode; every file copied as it is)")
        else:
            lines.append(f"size      {rates} ({c['ratio']:.2f}x smaller; video {c['video_ratio']:.2f}x)")
        for cam, q in (c.get("quality") or {}).get("cameras", {}).items():
            if q["frames_sampled"]:
                ssim = f", SSIM {q['ssim_mean']:.4f} (min {q['ssim_min']:.4f})" if q["ssim_mean"] is not None else ""
                lines.append(f"quality   {cam}: PSNR {q['psnr_db_mean']:.1f} dB mean (min {q['psnr_db_min']:.1f})"
                             f"{ssim} over {plural(q['frames_sampled'], 'sampled frame')} against the source, "
                             "resized the same way")
        lines.append(f"reports   {_under(r.out, COMPARISON_REL)}, {_under(r.out, MANIFEST_REL)}")
    for f in r.failures[:20]:
        eps = f.get("episodes") or ([f["episode"]] if f.get("episode") is not None else [])
        where = f" (episode{'s' if len(eps) > 1 else ''} {', '.join(map(str, eps))})" if eps else ""
        lines.append(f"FAILED    {f['path']}{where}: {f['reason']}")
    if len(r.failures) > 20:
        lines.append(f"FAILED    ... and {len(r.failures) - 20} more (see {_under(r.out, REPORT_REL)})")
    what = {"timestamps": "parquet timestamp column rewritten", "stats": "meta/episodes_stats.jsonl written anew"}
    for k, n in r.repaired.items():
        lines.append(f"repaired  {k}: {n:,} episodes ({what.get(k, k)}; listed in "
                     f"{_under(r.out, 'prep/source_check.json')})")
    if r.accepted_invalid_source:
        lines.append(f"source    INVALID ({r.source_errors:,} errors, accepted with --accept-invalid-source): the "
                     "output is NOT a drop-in dataset (see prep/source_check.json)")
    elif r.ok:
        lines.append("verdict   drop-in: the source passed verify's checks"
                     + (f" after the repairs ({', '.join(r.repaired_checks)})" if r.repaired_checks else "")
                     + (f" ({r.source_warnings} warnings)" if r.source_warnings else ""))
    if r.failures:
        lines.append("metadata  not written (meta/info.json): the output is incomplete; fix or remove the failed "
                     "input and rerun the same command to finish (done files are kept)")
    return printable_lines(lines)


def format_summary(r: ReencodeAsReport) -> str:
    from pipeline.commands.convert import summary as convert_summary

    if not r.converted and r.reencode is not None:
        return summary(r.reencode)
    lines = []
    if r.reencode is None:
        lines.append("reencode  finished by an earlier run (staged copy removed); the output is verified again")
    else:
        lines += [line for line in summary(r.reencode).splitlines() if not line.startswith(("output", "reports"))]
        lines.insert(1, f"staged    {r.reencode.out} (the re-encode in the source's layout)")
    if r.convert is not None:
        lines += [f"--- into {r.to} (stream copy of the all-intra files) ---", *convert_summary(r.convert).splitlines()]
    if r.staged_removed:
        lines.append(f"staged    removed; kept: {', '.join(r.carried) or 'nothing'}")
    return printable_lines(lines)


def output_of(args: argparse.Namespace) -> Path | str:
    """The output as the user sees it: a folder, or an object-store URL (a URL source's default: its sibling)."""
    given, size = source_of(args), dst_size(args.dst)
    if args.out is not None:
        return args.out if is_url(args.out) else Path(args.out).absolute()
    if is_url(given):
        return f"{given.rstrip('/')}_{size_label(size)}"
    return default_out(resolve_src(given, args.root), size)


def resume_note(args: argparse.Namespace) -> str | None:
    if getattr(args, "_corpus", None) is not None:
        return corpus_resume_note(args, "reencode")
    return f"finished files are kept in {output_of(args)}"


def missing_arguments(args: argparse.Namespace) -> None:
    """A missing --dst is named with every other missing argument in one line (argparse would name the first
    one it meets); a missing DATASET alone is source_of's refusal."""
    if args.dst is None:
        given = args.dataset is not None or args.src is not None or getattr(args, "corpus", None) is not None
        missing = ["--dst SIZE"] if given else [
            "DATASET (or --src DATASET)", "--dst SIZE"]
        raise PrepError(f"the following arguments are required: {', '.join(missing)} "
                        "(e.g. prep reencode DATASET --dst 224)")


def reencode_options(args: argparse.Namespace, size: tuple[int, int]) -> Any:
    from pipeline.stages.reencode import ReencodeOptions
    from pipeline.video.encode import DEFAULT_ENGINE, DEFAULT_PROFILE

    return ReencodeOptions(size=size, resize=args.resize, profile=args.profile or DEFAULT_PROFILE, crf=args.crf,
                           engine=args.engine or DEFAULT_ENGINE, repairs=tuple(sorted(set(args.repair))),
                           fingerprint=args.fingerprint, keep_images=args.keep_images)


def corpus_of_reencode(args: argparse.Namespace) -> Any:
    """A corpus (`--corpus FILE`, or several DATASETs); None for one source (DATASET or --src, as always)."""
    if args.corpus is None and not args.more:
        return None
    if args.src is not None or args.root is not None:
        raise PrepError("--src and --root name one source; a corpus is several DATASETs or --corpus FILE")
    return corpus_of(args, "reencode")


def run(args: argparse.Namespace) -> int:
    missing_arguments(args)
    size = dst_size(args.dst)  # a bad size is refused before anything heavy is imported
    corpus = corpus_of_reencode(args)
    if corpus is not None:
        return run_corpus_reencode(args, corpus, reencode_options(args, size))
    given = source_of(args)
    if is_url(given) or (args.out is not None and is_url(args.out)):
        return run_object_store(args, given, size)
    if args.storage_options:
        raise PrepError("--storage-option applies to an object-store DATASET (s3://...), not to a local folder")
    src = resolve_src(given, args.root)
    out = Path(args.out).absolute() if args.out else default_out(src, size)
    warnings = [*size_warnings(size), *filter(None, [provenance_warning(src, size)])]
    for w in warnings:
        warn("reencode", w)

    from pipeline.jobs.preverify import SourceRefused
    from pipeline.jobs.reencode import reencode_dataset
    from pipeline.runner import open_engine

    options = reencode_options(args, size)
    try:
        if args.format is not None:
            from pipeline.jobs.reencode_as import reencode_as

            if args.accept_invalid_source:
                raise PrepError("--accept-invalid-source with --format is not supported: re-encode in the source's "
                                "format first, then `prep convert` the output")
            try:
                limits = limits_of(args)
            except ValueError as exc:
                raise PrepError(str(exc)) from None
            with open_engine(run_config(args, records=output_records(out), shared=[src])) as engine:
                result = reencode_as(src, out, options, args.format, engine, limits=limits,
                                     keep_staged=args.keep_staged, reader=args.reader)
            print(format_summary(result))
            for w in warnings:
                print(f"warning   {printable(w)}")
            return 0 if result.ok else 1
        with open_engine(run_config(args, records=output_records(out), shared=[src])) as engine:
            report = reencode_dataset(src, out, options, engine, accept_invalid_source=args.accept_invalid_source,
                                      reader=args.reader)
    except SourceRefused as exc:
        return refused(exc, src)
    print(summary(report))
    for w in warnings:  # said again: the first time scrolled away behind the progress bar
        print(f"warning   {printable(w)}")
    return 0 if report.ok else 1


def run_object_store(args: argparse.Namespace, given: str, size: tuple[int, int]) -> int:
    """`prep reencode` with an object-store source or output (`s3://...`): the same job through the storage seam.
    A URL source's default output is its sibling prefix (`s3://b/merged` -> `s3://b/merged_224`)."""
    from pipeline.jobs.preverify import SourceRefused
    from pipeline.jobs.reencode import reencode_dataset
    from pipeline.runner import open_engine
    from pipeline.storage import output_location, parse_location

    if args.root is not None:
        raise PrepError("--root is for local datasets: give an object-store source as its URL (s3://BUCKET/PREFIX)")
    if args.format is not None and args.accept_invalid_source:
        raise PrepError("--accept-invalid-source with --format is not supported: re-encode in the source's format "
                        "first, then `prep convert` the output")
    src = parse_location(given if is_url(given) else resolve_src(given, None), what="source",
                         options=args.storage_options)
    if args.out is not None:
        out = output_location(args.out if is_url(args.out) else Path(args.out).absolute())
    elif not src.is_local:
        out = output_location(f"{src.url.rstrip('/')}_{size_label(size)}")
    else:
        out = output_location(default_out(src.path, size))
    if not src.is_local:
        src.store().check_reachable()  # credentials, endpoint, bucket: one line now (exit 2)
    for w in size_warnings(size):
        warn("reencode", w)
    options = reencode_options(args, size)
    records = output_records(out.path) if out.is_local else None
    shared = [src.path] if src.is_local else []
    config = run_config(args, records=records, shared=shared,
                        records_flag="a local --out (its job records need a folder the nodes share)")
    try:
        if args.format is not None:
            from pipeline.jobs.reencode_as import reencode_as

            try:
                limits = limits_of(args)
            except ValueError as exc:
                raise PrepError(str(exc)) from None
            with open_engine(config) as engine:
                result = reencode_as(src, out, options, args.format, engine, limits=limits,
                                     keep_staged=args.keep_staged, reader=args.reader)
            print(format_summary(result))
            return 0 if result.ok else 1
        with open_engine(config) as engine:
            report = reencode_dataset(src, out, options, engine, accept_invalid_source=args.accept_invalid_source,
                                      reader=args.reader)
    except SourceRefused as exc:
        return refused(exc, src.url)
    print(summary(report))
    return 0 if report.ok else 1


def refused(exc: Any, src: object) -> int:
    """A source verify refused: its blocking findings, then the one REFUSED line (exit 1)."""
    from pipeline.commands.verify import failures_table

    print(failures_table(exc.check.blocking, total=exc.check.errors_total))
    print(printable(f"REFUSED   {src}: {exc}"))
    return 1
