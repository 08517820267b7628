"""`prep budget [DATASET]`: the storage budget and pi-equivalent sizing report.

Only the light parts of pipeline.budget (config, landscape path) are imported here; the report
writer (numpy, matplotlib, pyarrow) is imported inside `run`, so `prep --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipeline.budget.config import DEFAULT_OUT, add_arguments, cli_values, load_config
from pipeline.budget.landscape import DEFAULT_LANDSCAPE
from pipeline.commands import help_of
from pipeline.commands.common import default_in_cwd
from pipeline.commands.where import add_storage_option
from pipeline.errors import PrepError
from pipeline.storage import URL_RE, StorePath
from pipeline.text import printable

PREPARED_MANIFEST = Path("prep") / "manifest.json"  # what `prep reencode` writes into its output
Manifest = Path | StorePath  # a manifest where it lives: a local file, or an object (`pipeline.storage.parse_file`)
WHERE = " (a local path, or s3://BUCKET/KEY configured as the AWS CLI is: docs/storage.md)"


def manifest_arg(text: str) -> str:
    """A manifest (or DATASET) as typed: a URL keeps its `//` (no `Path` here); an empty one is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a local path or s3://BUCKET/KEY, got {text!r}")
    return text


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "budget", help=help_of("budget"),
        description="Size a pi0-equivalent pre-training run (timesteps, episodes, hours, storage, days on N "
        "nodes) and, given a manifest, how much of it your corpus covers; write report.md, report.json and "
        "PNG plots. Parameters: CLI flag > --config file > measured manifest > estimated from the other "
        "measured rate > the built-in defaults, each shown below with its option: pi0's published steps, an "
        "8x H200 node's step-time and memory model, and a 480x640 3-camera h264 corpus (report.md's inputs "
        "table gives every value with its source; 'document default' marks these).")
    p.add_argument("dataset", type=manifest_arg, nargs="?", metavar="DATASET",
                   help=f"a dataset written by `prep reencode`: its manifest ({PREPARED_MANIFEST}) is the prepared "
                   "one (same as --prepared DATASET/prep/manifest.json); optional" + WHERE)
    p.add_argument("--native", type=manifest_arg, action="append", metavar="MANIFEST", help="`prep scan` manifest "
                   "of the native corpus (measures native GB/hr, frames per episode, fps; the corpus the report "
                   "sizes); repeat it for a corpus of several datasets: their episodes, hours and bytes add up" + WHERE)
    p.add_argument("--prepared", type=manifest_arg, action="append", metavar="MANIFEST", help="`prep scan` manifest "
                   "of the prepared (re-encoded) corpus (measures prepared GB/hr); repeatable, added up as --native")
    p.add_argument("--corpus", type=manifest_arg, metavar="CORPUS.json", help="a corpus manifest (`prep scan "
                   "--corpus` or `prep scan A B C`: docs/corpus.md): its datasets are the native corpus (as --native "
                   "for each) and the report adds the mixture: per dataset its storage, hours, share of the samples "
                   "at the target, the epochs that share means, oversampled datasets flagged, and the CPU time to "
                   "re-encode it; its datasets' manifests are read beside it, where it lives")
    p.add_argument("--corpus-prepared", type=manifest_arg, metavar="CORPUS.json", help="with --corpus: the prepared "
                   "corpus's manifest (`prep reencode --corpus ... --out OUT` writes OUT/corpus.json): each "
                   "dataset's prepared bytes measured, matched by name")
    p.add_argument("--reencode-cost", type=Path, metavar="FILE", help="with --corpus: a `bench/reencode.py` result "
                   "whose measured CPU ms per camera frame prices the re-encode (default: the one shipped with prep, "
                   "measured on its development machine: report.md names it)")
    p.add_argument("--reencode-cores", type=core_counts, default=REENCODE_CORES, metavar="LIST",
                   help="with --corpus: core counts to give the re-encode's wall time for (default: "
                   f"{','.join(map(str, REENCODE_CORES))})")
    p.add_argument("--oversample", type=ratio_arg, default=OVERSAMPLE, metavar="X",
                   help="with --corpus: flag a dataset drawn more than X times as often as its share of the timesteps "
                   f"says (default: {OVERSAMPLE:g})")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML file of model parameters")
    p.add_argument("--out", type=str, metavar="DIR",
                   help=f"local report folder (default: {DEFAULT_OUT} in the current folder)")
    p.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE, metavar="FILE",
                   help="published-runs data file (default: the vla_landscape.toml shipped with prep)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_storage_option(p, " (a manifest or DATASET given as s3://...)")
    add_arguments(p)
    p.set_defaults(func=run)


REENCODE_CORES = (16, 64, 256)  # pipeline.budget.mixture's (not imported here: --help stays light)
OVERSAMPLE = 2.0


def core_counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core counts like 16,64,256, got {text!r}") from None
    if not values or any(not 1 <= v <= 10_000_000 for v in values):
        raise argparse.ArgumentTypeError(f"expected core counts from 1 to 10,000,000, got {text!r}")
    return values


def ratio_arg(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 1, e.g. 2, got {text!r}") from None
    if not math.isfinite(value) or not 1 <= value <= 1e6:
        raise argparse.ArgumentTypeError(f"expected a number from 1 to 1e6, got {text!r}")
    return value


def is_url(text: str | None) -> bool:
    """An object-store URL (`s3://...`); a `file://` URL is a local path."""
    m = URL_RE.match(text) if text else None
    return m is not None and m.group("scheme") != "file"


def locate_inputs(args: argparse.Namespace) -> None:
    """Each manifest argument (and DATASET) where it lives, in place in `args`: a local `Path` as typed, or an
    object's `StorePath` (`pipeline.storage.parse_file`: below its bucket, so a corpus manifest's relative paths
    resolve beside it). Each object store is asked one short question first (`check_reachable`), so missing
    credentials, a dead endpoint or a missing bucket are one line naming the URL (exit 2). An object-store --out is
    refused: the report folder is local."""
    from pipeline.storage import parse_file

    if is_url(args.out):
        raise PrepError(f"--out {printable(args.out)}: prep budget writes its report (report.md, report.json, plots) "
                        "to a local folder; give a local --out and copy the folder (e.g. aws s3 cp --recursive)")
    texts = [args.dataset, *(args.native or []), *(args.prepared or []), args.corpus, args.corpus_prepared]
    if args.storage_options and not any(is_url(t) for t in texts):
        raise PrepError("--storage-option applies to a manifest or DATASET given as an object-store URL "
                        "(s3://BUCKET/KEY), not to local files")

    def where(text: str | None, what: str) -> Manifest | None:
        if text is None:
            return None
        return parse_file(text, options=args.storage_options if is_url(text) else (), what=what)

    args.dataset = where(args.dataset, "DATASET")
    args.native = [where(t, "--native") for t in args.native or []] or None
    args.prepared = [where(t, "--prepared") for t in args.prepared or []] or None
    args.corpus = where(args.corpus, "--corpus")
    args.corpus_prepared = where(args.corpus_prepared, "--corpus-prepared")
    asked = set()
    for m in (args.dataset, *(args.native or []), *(args.prepared or []), args.corpus, args.corpus_prepared):
        if isinstance(m, StorePath) and m.location not in asked:
            asked.add(m.location)
            m.location.store().check_reachable()  # a missing bucket, dead endpoint or bad credentials: one line


def beside(manifest: Manifest, rel: str) -> Manifest:
    """A path a corpus manifest gives relative to its own folder (a dataset's manifest), where the corpus manifest
    lives: a local path, or an object of the same bucket (one that leaves the bucket is refused)."""
    import posixpath

    if isinstance(manifest, Path):
        return manifest.parent / rel
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(manifest.rel), rel))
    if posixpath.isabs(rel) or joined == ".." or joined.startswith("../"):
        raise PrepError(f"{printable(str(manifest))}: its dataset manifest {printable(rel)} is outside "
                        f"{manifest.location.shown}; a corpus manifest in an object store names its datasets' "
                        "manifests relative to itself, in its bucket")
    return StorePath(manifest.location, joined)


def identity(manifest: Manifest) -> str:
    """What tells two manifests apart: a local file's real path, an object's URL."""
    import os

    return manifest.url if isinstance(manifest, StorePath) else os.path.realpath(manifest)


def corpus_inputs(args: argparse.Namespace) -> tuple[list[Manifest], list[Manifest], Any]:
    """`--corpus` (and `--corpus-prepared`): the per-dataset manifests, native and prepared, and the mixture's
    input (`pipeline.budget.mixture.MixtureInput`). Refused in one line: with --native, --prepared or DATASET, a
    corpus description (.toml) instead of its manifest, a corpus none of whose datasets completed."""
    from pipeline.budget.mixture import MixtureInput
    from pipeline.corpus.manifest import load_corpus_manifest

    if args.native or args.prepared or args.dataset is not None:
        raise PrepError("--corpus gives the native corpus (each of its datasets' manifests): drop --native, "
                        "--prepared and DATASET (the prepared corpus is --corpus-prepared)")
    for flag, path in (("--corpus", args.corpus), ("--corpus-prepared", args.corpus_prepared)):
        if path is not None and path.suffix.lower() == ".toml":
            raise PrepError(f"{flag} {path}: a corpus description; budget reads its manifest: `prep scan --corpus "
                            f"{path} --out corpus.json`, then `prep budget --corpus corpus.json`")
    doc = load_corpus_manifest(args.corpus)
    if doc["role"] != "native":
        raise PrepError(f"--corpus {args.corpus}: the manifest of a prepared corpus (written by prep reencode): pass "
                        "the native corpus's manifest (prep scan) as --corpus and this one as --corpus-prepared")
    ok = [r for r in doc["datasets"] if r["status"] == "ok"]
    if not ok:
        raise PrepError(f"--corpus {args.corpus}: no dataset of the corpus completed its scan; nothing to size")
    native = [beside(args.corpus, r["manifest"]) for r in ok]
    prepared: list[Manifest] = []
    prepared_rows: list[dict[str, Any]] = []
    if args.corpus_prepared is not None:
        pdoc = load_corpus_manifest(args.corpus_prepared)
        frames = {r["name"]: r["frames"] for r in ok}  # the same datasets only: a rate of the corpus, not of others
        prepared_rows = [r for r in pdoc["datasets"] if r["status"] == "ok" and frames.get(r["name"]) == r["frames"]]
        if not prepared_rows:
            raise PrepError(f"--corpus-prepared {args.corpus_prepared}: none of its datasets is one of --corpus "
                            f"{args.corpus} (same name, same timesteps)")
        prepared = [beside(args.corpus_prepared, r["manifest"]) for r in prepared_rows]
    mix = MixtureInput(path=str(args.corpus), weights=doc["corpus"]["weights"], rows=tuple(ok),
                       left_out=tuple(r for r in doc["datasets"] if r["status"] != "ok"),
                       prepared_path=str(args.corpus_prepared) if args.corpus_prepared is not None else None,
                       prepared=tuple(prepared_rows), manifests=tuple(map(str, native)))
    return native, prepared, mix


def prepared_manifests(args: argparse.Namespace) -> list[Manifest]:
    """--prepared (each), or DATASET's own manifest (refused when DATASET is not a prep reencode output)."""
    given: list[Manifest] = args.prepared or []
    if args.dataset is None:
        return given
    found = args.dataset / PREPARED_MANIFEST.as_posix()
    other = next((p for p in given if identity(p) != identity(found)), None)
    if other is not None:
        raise PrepError(f"two prepared manifests: {found} (from DATASET) and --prepared {other}; give one")
    if not found.is_file():
        raise PrepError(f"{args.dataset}: no {PREPARED_MANIFEST} (not written by prep reencode); scan it with "
                        f"`prep scan {args.dataset}` and pass the manifest as --native or --prepared")
    return [found]


def check_each_once(native: list[Manifest], prepared: list[Manifest]) -> None:
    """Several manifests add up, so one given twice (in a role, or as --native and --prepared) would count twice or
    be both the corpus and its re-encode: refused in one line."""
    seen: dict[str, str] = {}
    for flag, paths in (("--native", native), ("--prepared", prepared)):
        for path in paths:
            real = identity(path)
            if real in seen:
                raise PrepError(f"{flag} {path}: already given as {seen[real]}; each manifest counts once "
                                "(several add up): give it once")
            seen[real] = f"{flag} {path}"


WRITTEN = ("report.json", "report.md")  # and the plots, *.png


def _dataset_root(manifest: Manifest | None) -> Path | None:
    """The local dataset a manifest was made from (as it records it), when it is readable; else None (also for a
    dataset in an object store: a local report folder cannot be inside it)."""
    from pipeline.jobs.manifest import read_json_at

    if manifest is None or (isinstance(manifest, Path) and not manifest.is_file()):
        return None
    try:
        root = read_json_at(manifest)["dataset"]["root"]  # bounded, as every JSON prep reads
    except (PrepError, OSError, ValueError, RecursionError, TypeError, KeyError):
        return None
    return Path(root) if isinstance(root, str) and root and not is_url(root) else None


def check_read_only(args: argparse.Namespace, native: list[Manifest], prepared: list[Manifest], out: Path) -> None:
    """The report folder is not inside a dataset the report is about (DATASET, or the datasets the
    manifests were made from), and no report file would overwrite an input (a manifest or config)."""
    import os

    from pipeline.jobs.output import check_outside

    local_dataset = args.dataset if isinstance(args.dataset, Path) else None
    check_outside([local_dataset, *(_dataset_root(m) for m in native), *(_dataset_root(m) for m in prepared)], out,
                  default=args.out is None)
    o = os.path.realpath(out)
    inputs = [*(("--native", m) for m in native), *(("--prepared", m) for m in prepared), ("--config", args.config),
              ("--corpus", getattr(args, "corpus", None)),
              ("--corpus-prepared", getattr(args, "corpus_prepared", None))]
    for flag, path in inputs:
        if path is None or isinstance(path, StorePath):  # an object is never a local report file
            continue
        real = Path(os.path.realpath(path))
        if str(real.parent) == o and (real.name in WRITTEN or real.suffix == ".png"):
            raise PrepError(f"--out {out} would overwrite the input {flag} {path}; choose another --out")


def run(args: argparse.Namespace) -> int:
    from pipeline.budget import headline_text, write_report

    cfg = load_config(args.config, cli_values(args))
    locate_inputs(args)
    mix = None
    if args.corpus is not None:
        native, prepared, mix = corpus_inputs(args)
    else:
        with_corpus = [f for f, v in (("--corpus-prepared", args.corpus_prepared), ("--reencode-cost",
                                                                                    args.reencode_cost)) if v]
        if with_corpus:
            raise PrepError(f"{with_corpus[0]} needs --corpus (a corpus manifest)")
        native = args.native or []
        prepared = prepared_manifests(args)
    check_each_once(native, prepared)
    out: Path = (Path(args.out) if args.out is not None else default_in_cwd(DEFAULT_OUT)).absolute()
    check_read_only(args, native, prepared, out)
    if args.out is None:
        from pipeline.budget.render import PLOT_TITLES
        from pipeline.commands.defaults import check_default_output, prep_json

        mine = prep_json(out / "report.json", "budget")
        check_default_output([(out / name, mine) for name in (*WRITTEN, *PLOT_TITLES)])  # all prep's if report.json is
    if out.exists() and not out.is_dir():
        raise PrepError(f"--out {out}: exists and is not a folder")
    from pipeline.atomic import check_writable

    check_writable(out, create=False)  # read-only or full: one line now, before the inputs are read
    try:
        report = write_report(out, native, prepared, cfg, landscape=args.landscape,
                              plots=not args.no_plots, mixture_input=mix, reencode_cost=args.reencode_cost,
                              reencode_cores=args.reencode_cores, oversample=args.oversample)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else out
        raise PrepError(f"--out {out}: cannot write {where}: {exc.strerror or exc}") from None
    for warning in report.get("warnings", []):
        print(f"prep budget: warning: {printable(warning)}", file=sys.stderr)
    print(headline_text(report))
    print(f"report      {out / 'report.md'}, {out / 'report.json'}"
          + (f", {len(report['plots'])} plots" if report["plots"] else ""))
    return 0
