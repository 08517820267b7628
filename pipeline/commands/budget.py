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
from pipeline.errors import PrepError
from pipeline.text import printable

PREPARED_MANIFEST = Path("prep") / "manifest.json"  # what `prep reencode` writes into its output


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "budget", help=help_of("budget"),
        description="Size a pi0-equivalent pre-training run (timesteps, episodes, hours, storage, days on N "
        "nodes) and, given a manifest, how much of it your corpus covers; write report.md, report.json and "
        "PNG plots. Parameters: CLI flag > --config file > measured manifest > estimated from the other "
        "measured rate > the built-in defaults, each shown below with its option: pi0's published steps, an "
        "8x H200 node's step-time and memory model, and a 480x640 3-camera h264 corpus (report.md's inputs "
        "table gives every value with its source; 'document default' marks these).")
    p.add_argument("dataset", type=Path, nargs="?", metavar="DATASET",
                   help=f"a dataset written by `prep reencode`: its manifest ({PREPARED_MANIFEST}) is the prepared "
                   "one (same as --prepared DATASET/prep/manifest.json); optional")
    p.add_argument("--native", type=Path, action="append", metavar="MANIFEST", help="`prep scan` manifest of the "
                   "native corpus (measures native GB/hr, frames per episode, fps; the corpus the report sizes); "
                   "repeat it for a corpus of several datasets: their episodes, hours and bytes add up")
    p.add_argument("--prepared", type=Path, action="append", metavar="MANIFEST", help="`prep scan` manifest of "
                   "the prepared (re-encoded) corpus (measures prepared GB/hr); repeatable, added up as --native")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML file of model parameters")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help=f"report folder (default: {DEFAULT_OUT} in the current folder)")
    p.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE, metavar="FILE",
                   help="published-runs data file (default: the vla_landscape.toml shipped with prep)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_arguments(p)
    p.set_defaults(func=run)


def prepared_manifests(args: argparse.Namespace) -> list[Path]:
    """--prepared (each), or DATASET's own manifest (refused when DATASET is not a prep reencode output)."""
    given: list[Path] = args.prepared or []
    if args.dataset is None:
        return given
    found = args.dataset / PREPARED_MANIFEST
    other = next((p for p in given if p.absolute() != found.absolute()), None)
    if other is not None:
        raise PrepError(f"two prepared manifests: {found} (from DATASET) and --prepared {other}; give one")
    if not found.is_file():
        raise PrepError(f"{args.dataset}: no {PREPARED_MANIFEST} (not written by prep reencode); scan it with "
                        f"`prep scan {args.dataset}` and pass the manifest as --native or --prepared")
    return [found]


def check_each_once(native: list[Path], prepared: list[Path]) -> None:
    """Several manifests add up, so one given twice (in a role, or as --native and --prepared) would count twice or
    be both the corpus and its re-encode: refused in one line."""
    import os

    seen: dict[str, str] = {}
    for flag, paths in (("--native", native), ("--prepared", prepared)):
        for path in paths:
            real = os.path.realpath(path)
            if real in seen:
                raise PrepError(f"{flag} {path}: already given as {seen[real]}; each manifest counts once "
                                "(several add up): give it once")
            seen[real] = f"{flag} {path}"


WRITTEN = ("report.json", "report.md")  # and the plots, *.png


def _dataset_root(manifest: Path | None) -> Path | None:
    """The dataset a manifest was made from (as it records it), when it is readable; else None."""
    import json

    if manifest is None or not manifest.is_file():
        return None
    try:
        root = json.loads(manifest.read_text(encoding="utf-8"))["dataset"]["root"]
    except (OSError, ValueError, RecursionError, TypeError, KeyError):
        return None
    return Path(root) if isinstance(root, str) and root else None


def check_read_only(args: argparse.Namespace, native: list[Path], prepared: list[Path], out: Path) -> None:
    """The report folder is not inside a dataset the report is about (DATASET, or the datasets the
    manifests were made from), and no report file would overwrite an input (a manifest or config)."""
    import os

    from pipeline.jobs.output import check_outside

    check_outside([args.dataset, *(_dataset_root(m) for m in native), *(_dataset_root(m) for m in prepared)], out,
                  default=args.out is None)
    o = os.path.realpath(out)
    inputs = [*(("--native", m) for m in native), *(("--prepared", m) for m in prepared), ("--config", args.config)]
    for flag, path in inputs:
        if path is None:
            continue
        real = Path(os.path.realpath(path))
        if str(real.parent) == o and (real.name in WRITTEN or real.suffix == ".png"):
            raise PrepError(f"--out {out} would overwrite the input {flag} {path}; choose another --out")


def run(args: argparse.Namespace) -> int:
    from pipeline.budget import headline_text, write_report

    cfg = load_config(args.config, cli_values(args))
    native: list[Path] = args.native or []
    prepared = prepared_manifests(args)
    check_each_once(native, prepared)
    out: Path = (args.out or default_in_cwd(DEFAULT_OUT)).absolute()
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
                              plots=not args.no_plots)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else out
        raise PrepError(f"--out {out}: cannot write {where}: {exc.strerror or exc}") from None
    for warning in report.get("warnings", []):
        print(f"prep budget: warning: {printable(warning)}", file=sys.stderr)
    print(headline_text(report))
    print(f"report      {out / 'report.md'}, {out / 'report.json'}"
          + (f", {len(report['plots'])} plots" if report["plots"] else ""))
    return 0
