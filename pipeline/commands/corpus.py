"""A corpus on the command line: `--corpus FILE`, or several datasets as arguments (`prep scan A B C`), for scan,
verify and reencode (docs/corpus.md). Each command's `run()` asks `corpus_of(args)` first: None (one dataset, or
none) leaves the command exactly as it was; a corpus runs here, every dataset through ONE engine session.

Outputs:
- scan: each dataset's manifest `<folder>/<name>.manifest.json` beside the corpus manifest (`--out`, default
  `manifests/<corpus name>.json`), its Parquet table `<stem>.parquet`, the report `<stem>.md` and its plots;
- verify: with `--out DIR`, each dataset's report `DIR/<name>/verify.json` and `DIR/corpus_verify.json`;
- reencode: each dataset's output `OUT/<name>/`, the prepared corpus `OUT/corpus.json` (+ .parquet, .md, plots),
  `OUT/corpus.toml` and `OUT/corpus_reencode.json` (`--out OUT` is required; a local folder or s3://BUCKET/PREFIX).
Any dataset may be an object-store URL, and every --out too (scan: s3://BUCKET/KEY.json, the corpus files made
locally and put, the corpus manifest last; verify and reencode: s3://BUCKET/PREFIX).
Exit codes: 0 when every dataset completed (verify: passed; scan: no episode failed), 1 when some did not (each
with its reason), 2 for a usage error or a corpus file that breaks its schema (one line naming the entry and field).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.commands.common import default_in_cwd, plural, report_records, run_config
from pipeline.errors import PrepError
from pipeline.text import printable, printable_lines

if TYPE_CHECKING:
    from pipeline.corpus.spec import Corpus
    from pipeline.jobs.corpus import CorpusRun
    from pipeline.storage import Location, StorePath

CORPUS_HELP = ("a corpus file (TOML, docs/corpus.md): the datasets of a training mixture, each with its weight, "
               "label and camera mapping; every dataset runs through one engine session")
SCAN_DEFAULT_DIR = Path("manifests")
OUT_RECORDS = "a local --out (its job records need a folder the nodes share)"  # --cluster slurm, an s3:// --out


def add_corpus_option(p: Any, help_text: str = CORPUS_HELP) -> None:
    p.add_argument("--corpus", type=report_path, metavar="FILE",
                   help=help_text + "; a local file or an object, s3://BUCKET/KEY.toml (its relative sources beside "
                   "it in the bucket)")


def report_path(text: str) -> Path | str:
    """`--out` of scan and verify, and `--corpus`, as typed: a local path, or an object-store URL kept as text (made a
    `StorePath` once the command runs, `object_report`, `corpus_of`: never a local folder named `s3:`)."""
    return text if is_url(text) else Path(text)


def object_report(args: argparse.Namespace) -> StorePath | None:
    """scan's and verify's `--out` when it is an object (`s3://BUCKET/KEY`): the report's `StorePath` in its bucket
    (configured by the environment, as every object-store output is); None for a local path. A URL naming a bucket
    alone, or with credentials in it, is one line."""
    if not isinstance(args.out, str):
        return None
    from pipeline.storage import StorePath, parse_file

    out = parse_file(args.out, what="--out")
    return out if isinstance(out, StorePath) else None


def datasets_of(args: argparse.Namespace) -> list[str]:
    """The datasets named as arguments (DATASET, then any more)."""
    first = getattr(args, "dataset", None)
    more = list(getattr(args, "more", None) or [])
    return ([str(first)] if first is not None else []) + [str(m) for m in more]


def corpus_of(args: argparse.Namespace, command: str) -> Corpus | None:
    """The corpus the arguments name: `--corpus FILE`, or two datasets or more; None for one dataset (the command
    as it always was). Neither: the usage error naming both ways."""
    from pipeline.corpus.spec import corpus_of_arguments, load_corpus

    cached: Corpus | None = getattr(args, "_corpus", None)
    if cached is not None:
        return cached
    datasets = datasets_of(args)
    corpus: Corpus | None = None
    if args.corpus is not None:
        if datasets:
            raise PrepError(f"give the datasets as arguments or as --corpus {printable(args.corpus)}, not both")
        if isinstance(args.corpus, str):  # an object: read through the storage seam, bounded as a local file is
            from pipeline.storage import parse_file

            corpus = load_corpus(parse_file(args.corpus, what="--corpus"))
        else:
            corpus = load_corpus(args.corpus)
        if getattr(args, "revision", None) or getattr(args, "storage_options", None):
            raise PrepError("--revision and --storage-option apply to datasets given as arguments; in a corpus file "
                            "each dataset carries its own (revision, storage_options)")
    elif len(datasets) > 1:
        corpus = corpus_of_arguments(datasets, revision=getattr(args, "revision", None),
                                     storage_options=getattr(args, "storage_options", None) or ())
    elif not datasets and command != "reencode":
        raise PrepError("the following arguments are required: DATASET (or several, or --corpus FILE)")
    args._corpus = corpus
    return corpus


def _shared(corpus: Corpus) -> list[Path]:
    from pipeline.jobs.corpus import local_sources

    return local_sources(corpus)


def _report_files(manifest: Path) -> list[str]:
    """Write the corpus report (Markdown and plots) beside a corpus manifest; returns the files written."""
    from pipeline.corpus.manifest import load_corpus_manifest
    from pipeline.corpus.report import write_corpus_report

    return write_corpus_report(load_corpus_manifest(manifest), manifest)


# ---- scan ---------------------------------------------------------------------------------------------------


def scan_out(args: argparse.Namespace, corpus: Corpus) -> Path | StorePath:
    if args.out is not None:
        return object_report(args) or Path(args.out).absolute()
    return default_in_cwd(SCAN_DEFAULT_DIR / f"{corpus.name}.json").absolute()


def check_scan_defaults(args: argparse.Namespace, corpus: Corpus, out: Path) -> None:
    """A corpus scan's files never replace a file git tracks or prep did not write: the per-dataset manifests (named
    after the datasets, beside the corpus manifest) always, the corpus manifest and its files when --out is the
    default."""
    from pipeline.commands.defaults import check_default_output, prep_json
    from pipeline.jobs.corpus import manifest_path
    from pipeline.jobs.manifest import table_path_for

    for entry in corpus.entries:  # as `prep scan`'s default manifest (commands/scan.check_default_manifest)
        path = manifest_path(out.parent, entry)
        mine = prep_json(path, "manifest")
        check_default_output([(path, mine), (table_path_for(path), mine or not path.exists())])
    if args.out is None:
        mine = prep_json(out, "corpus_manifest")
        check_default_output([(out, mine), *((out.with_name(n), mine) for n in report_names(out))])


def report_names(out: Path) -> list[str]:
    from pipeline.corpus.plots import PLOTS

    return [out.with_suffix(".parquet").name, out.with_suffix(".md").name,
            *(f"{out.stem}-{p}" for p in PLOTS)]


def run_scan(args: argparse.Namespace, corpus: Corpus) -> int:
    from pipeline.jobs.corpus import scan_corpus
    from pipeline.runner import open_engine

    out = scan_out(args, corpus)
    written: list[str] = []
    if isinstance(out, Path):
        check_scan_defaults(args, corpus, out)
        config = run_config(args, records=report_records(out), shared=_shared(corpus))
    else:  # an object: the corpus files are made in a local temp folder (the report too) and put
        config = run_config(args, shared=_shared(corpus), records_flag=OUT_RECORDS)
    def report(manifest: Path) -> list[str]:  # an object's corpus report, made beside the manifest made locally
        written.extend(_report_files(manifest))
        return written

    with open_engine(config) as engine:
        run = scan_corpus(corpus, out, engine, resume=not args.fresh, quiet=args.no_progress, report=report)
    files = _report_files(out) if isinstance(out, Path) else written
    print(scan_summary(run, out, files))
    failed_episodes = sum(d.summary.get("episodes_failed", 0) for d in run.datasets if d.ok)
    return 0 if run.ok and not failed_episodes else 1


def _beside(out: Path | StorePath, suffix: str) -> str:
    """A corpus file beside the corpus manifest: m.json -> m.parquet, m.md (a local path or a URL)."""
    return str(out.parent / f"{out.stem}{suffix}")


def scan_summary(run: CorpusRun, out: Path | StorePath, files: list[str]) -> str:
    from pipeline.budget import fmt
    from pipeline.corpus.manifest import load_corpus_manifest

    doc = load_corpus_manifest(out)
    t = doc["totals"]
    lines = [f"corpus    {run.corpus.name}: {plural(len(run.datasets), 'dataset')} ({run.corpus.shown}), weights "
             f"{doc['corpus']['weights']}"]
    width = max(len(r["name"]) for r in doc["datasets"])
    for r in doc["datasets"]:
        if r["status"] != "ok":
            lines.append(f"FAILED    {r['name']}: {r['reason']}")
            continue
        failed = f" ({r['episodes_failed']:,} failed)" if r["episodes_failed"] else ""
        lines.append(f"dataset   {r['name']:<{width}}  {r['codebase_version']}  {r['fps']:g} fps  "
                     f"{plural(r['episodes'], 'episode')}{failed}, {r['frames']:,} timesteps, {fmt.hours(r['hours'])}, "
                     f"{fmt.size(r['bytes']['total'])}; share {fmt.share(r['share'])}; {r['label']}"
                     + ("  (kept)" if r.get("kept") else ""))
    lines.append(f"totals    {t['datasets_ok']} of {plural(t['datasets'], 'dataset')}: "
                 f"{plural(t['episodes'], 'episode')}, {t['frames']:,} timesteps, {fmt.hours(t['hours'])}, "
                 f"{fmt.size(t['bytes']['total'])} ({t['gb_per_hour']:.3f} GB/hr)")
    lines.append("labels    " + ", ".join(f"{k}: {fmt.hours(v['hours'])}, share {fmt.share(v['share'])}"
                                          for k, v in t["by_label"].items()))
    lines.append("cameras   " + ", ".join(f"{k} {fmt.size(v)}" for k, v in t["bytes_per_slot"].items() if v))
    lines.append(f"manifest  {out} (+ {out.stem}.parquet; each dataset's beside it)")
    lines.append(f"report    {_beside(out, '.md')}" + (f", {plural(len(files) - 1, 'plot')}" if files else ""))
    return printable_lines(lines)


# ---- verify -------------------------------------------------------------------------------------------------


def run_verify(args: argparse.Namespace, corpus: Corpus) -> int:
    from pipeline.jobs.corpus import verify_corpus
    from pipeline.runner import open_engine
    from pipeline.stages.verify import VerifyOptions

    options = VerifyOptions(expect_frames=args.expect_frames, size=args.size, all_intra=args.all_intra,
                            decode=args.decode, reader=args.reader)
    out: Path | Location | None = None
    if isinstance(args.out, str):  # an object-store prefix: each dataset's report below it, corpus_verify.json last
        from pipeline.storage import output_location

        out = output_location(args.out)
        config = run_config(args, shared=_shared(corpus), records_flag=OUT_RECORDS)
    else:
        folder = args.out.absolute() if args.out else None
        out = folder
        config = run_config(args, records=(folder / "prep" / "slurm") if folder else None, shared=_shared(corpus))
    with open_engine(config) as engine:
        run = verify_corpus(corpus, options, engine, out=out, resume=not args.fresh, fingerprint=args.fingerprint,
                            quiet=args.no_progress)
    print(verify_summary(run))
    from pipeline.jobs.corpus import corpus_verdict

    return 0 if corpus_verdict(run)["passed"] else 1


def _loads(loads: dict[str, Any]) -> str:
    words = {True: "loads", False: "refuses", None: "no error (not decoded)"}
    return ", ".join(f"{r}: {words.get(v, v)}" for r, v in loads.items()) or "no reader of its format"


def verify_summary(run: CorpusRun) -> str:
    from pipeline.jobs.corpus import corpus_verdict, dataset_verdict

    width = max(len(d.entry.name) for d in run.datasets)
    lines = []
    for d in run.datasets:
        verdict = dataset_verdict(d).upper()
        if not d.ok:
            lines.append(f"{verdict:<12}  {d.entry.name:<{width}}  {d.reason}")
            continue
        s = d.summary
        checks = ", ".join(f"{k}: {v}" for k, v in list(s["failures_by_check"].items())[:4])
        lines.append(f"{verdict:<12}  {d.entry.name:<{width}}  {s['codebase_version']}  "
                     f"{plural(s['episodes'], 'episode')}: {s['episodes_passed']:,} passed, "
                     f"{s['episodes_failed']:,} failed" + (f" ({checks})" if checks else "")
                     + f"; lerobot {_loads(s['lerobot_loads'])}" + ("  (kept)" if d.kept else ""))
        if s.get("report"):
            lines.append(f"{'':<12}  {'':<{width}}  report {s['report']}")
    v = corpus_verdict(run)
    lines.append(f"corpus    {'PASSED' if v['passed'] else 'FAILED'}: {v['datasets_passed']} of "
                 f"{plural(v['datasets'], 'dataset')} pass"
                 + (f" ({v['datasets_failed']} failed, {v['datasets_not_verified']} not verified)"
                    if not v["passed"] else ""))
    if run.report is not None:
        lines.append(f"report    {run.report}")
    return printable_lines(lines)


# ---- reencode -----------------------------------------------------------------------------------------------


def run_reencode(args: argparse.Namespace, corpus: Corpus, options: Any) -> int:
    from pipeline.commands.common import output_records
    from pipeline.jobs.corpus import reencode_corpus
    from pipeline.runner import open_engine

    if args.out is None:
        raise PrepError("a corpus re-encode needs --out DIR: each dataset's output goes to DIR/<name>/")
    if args.format is not None or args.keep_staged:
        raise PrepError("--format with a corpus is not supported: re-encode the corpus, then `prep convert` each "
                        "output")
    if is_url(str(args.out)):  # an object-store prefix: each dataset's output below it, the corpus files beside
        from pipeline.storage import output_location

        where = output_location(str(args.out))
        config = run_config(args, shared=_shared(corpus),
                            records_flag="a local --out (its job records need a folder the nodes share)")
        with open_engine(config) as engine:
            run = reencode_corpus(corpus, where, options, engine, accept_invalid_source=args.accept_invalid_source,
                                  reader=args.reader, quiet=args.no_progress, report=_report_files)
        print(reencode_summary(run, []))
        return 0 if run.ok else 1
    out = Path(args.out).absolute()
    with open_engine(run_config(args, records=output_records(out), shared=_shared(corpus))) as engine:
        run = reencode_corpus(corpus, out, options, engine, accept_invalid_source=args.accept_invalid_source,
                              reader=args.reader, quiet=args.no_progress)
    files = _report_files(out / "corpus.json") if run.manifest is not None else []
    print(reencode_summary(run, files))
    return 0 if run.ok else 1


def is_url(text: str) -> bool:
    """`s3://...` (or another object-store scheme): not a local path."""
    from pipeline.storage import LOCAL, URL_RE

    m = URL_RE.match(text)
    return m is not None and m.group("scheme") != LOCAL


def reencode_summary(run: CorpusRun, files: list[str]) -> str:
    width = max(len(d.entry.name) for d in run.datasets)
    lines = []
    for d in run.datasets:
        if not d.ok:
            lines.append(f"FAILED    {d.entry.name:<{width}}  {d.reason}")
            continue
        s = d.summary
        rates = (f"; {s['native_gb_per_hour']:.3f} -> {s['prepared_gb_per_hour']:.3f} GB/hr"
                 + (f" ({s['ratio']:.2f}x smaller)" if s.get("ratio") else "")
                 if s.get("native_gb_per_hour") is not None else "")
        what = ("complete in an earlier run, kept" if d.kept else
                f"{plural(s['files'], 'video file')}: {s['encoded']:,} encoded, {s['kept']:,} kept{rates}")
        lines.append(f"ok        {d.entry.name:<{width}}  {d.output}: {what}")
    out = run.out
    done = len(run.datasets) - len(run.failed)
    lines.append(f"corpus    {done} of {plural(len(run.datasets), 'dataset')} re-encoded"
                 + (f"; {len(run.failed)} failed (rerun the same command to finish them)" if run.failed else ""))
    if isinstance(out, str) and run.manifest is not None:  # an object-store prefix
        lines.append(f"prepared  {run.manifest} (+ corpus.parquet, corpus.md and its plots, corpus.toml: its sources "
                     f"are the outputs' URLs: prep verify --corpus {out}/corpus.toml)")
    elif out is not None and run.manifest is not None:
        lines.append(f"prepared  {run.manifest} (+ corpus.parquet, corpus.toml: prep verify --corpus "
                     f"{Path(out) / 'corpus.toml'})")
        if files:
            lines.append(f"report    {Path(out) / 'corpus.md'}, {plural(len(files) - 1, 'plot')}")
    if run.report is not None:
        lines.append(f"runs      {run.report}")
    return printable_lines(lines)


def resume_note(args: argparse.Namespace, command: str) -> str | None:
    """What a killed corpus run keeps, for the interrupted message."""
    corpus = getattr(args, "_corpus", None)
    if corpus is None:
        return None
    if command == "scan":
        return f"finished datasets are kept; completion records in {scan_out(args, corpus)}.parts/"
    if args.out is None:
        return None
    kept = str(args.out) if is_url(str(args.out)) else Path(args.out).absolute()
    return f"finished datasets and files are kept in {kept}"
