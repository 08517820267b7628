"""`prep budget`: the storage budget and pi-equivalent sizing report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.budget import DEFAULT_OUT, headline_text, write_report
from pipeline.budget.config import add_arguments, cli_values, load_config
from pipeline.budget.landscape import DEFAULT_LANDSCAPE


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "budget", help="storage budget and pi-equivalent sizing report",
        description="Size a pi0-equivalent pre-training run (timesteps, episodes, hours, storage, days on N "
        "nodes) and write report.md, report.json and PNG plots. Parameters: CLI flag > --config file > "
        "measured manifest > the sizing document's defaults.")
    p.add_argument("--native", type=Path, metavar="MANIFEST", help="`prep scan` manifest of the native corpus "
                   "(measures native GB/hr, frames per episode, fps)")
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
    cfg = load_config(args.config, cli_values(args))
    report = write_report(args.out, args.native, args.prepared, cfg, landscape=args.landscape,
                          plots=not args.no_plots)
    print(headline_text(report))
    print(f"report      {args.out / 'report.md'}, {args.out / 'report.json'}"
          + (f", {len(report['plots'])} plots" if report["plots"] else ""))
    return 0
