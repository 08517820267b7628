"""`prep budget`: the storage budget and pi-equivalent sizing report.

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
from pipeline.errors import PrepError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "budget", help="storage budget and pi-equivalent sizing report",
        description="Size a pi0-equivalent pre-training run (timesteps, episodes, hours, storage, days on N "
        "nodes) and, given a manifest, how much of it your corpus covers; write report.md, report.json and "
        "PNG plots. Parameters: CLI flag > --config file > measured manifest > estimated from the other "
        "measured rate > the sizing document's defaults.")
    p.add_argument("--native", type=Path, metavar="MANIFEST", help="`prep scan` manifest of the native corpus "
                   "(measures native GB/hr, frames per episode, fps; the corpus the report sizes)")
    p.add_argument("--prepared", type=Path, metavar="MANIFEST", help="`prep scan` manifest of the prepared "
                   "(re-encoded) corpus (measures prepared GB/hr)")
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML file of model parameters")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help=f"output folder (default: {DEFAULT_OUT})")
    p.add_argument("--landscape", type=Path, default=DEFAULT_LANDSCAPE, metavar="FILE",
                   help="published-runs data file (default: manifests/vla_landscape.toml)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.budget import headline_text, write_report

    cfg = load_config(args.config, cli_values(args))
    if args.out.exists() and not args.out.is_dir():
        raise PrepError(f"--out {args.out}: exists and is not a folder")
    from pipeline.atomic import check_writable

    check_writable(args.out, create=False)  # read-only or full: one line now, before the inputs are read
    try:
        report = write_report(args.out, args.native, args.prepared, cfg, landscape=args.landscape,
                              plots=not args.no_plots)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else args.out
        raise PrepError(f"--out {args.out}: cannot write {where}: {exc.strerror or exc}") from None
    for warning in report.get("warnings", []):
        print(f"prep budget: warning: {warning}", file=sys.stderr)
    print(headline_text(report))
    print(f"report      {args.out / 'report.md'}, {args.out / 'report.json'}"
          + (f", {len(report['plots'])} plots" if report["plots"] else ""))
    return 0
