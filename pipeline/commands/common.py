"""Options every Dask-backed command shares."""

from __future__ import annotations

import argparse

from pipeline.commands.argtypes import positive_int
from pipeline.runner import BACKENDS, RunConfig  # light: the runner imports Dask only when a cluster starts


def add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("execution")
    g.add_argument("--scheduler", metavar="ADDRESS", help="existing Dask scheduler, e.g. tcp://host:8786 "
                   "(default: an embedded LocalCluster sized to this machine)")
    g.add_argument("--workers", type=positive_int, metavar="N", help="LocalCluster worker processes (default: cores)")
    g.add_argument("--backend", choices=list(BACKENDS), help="inline = in this process (debugging, tiny inputs); "
                   "local = an embedded LocalCluster (the default); remote = --scheduler")
    g.add_argument("--retries", type=int, default=2, help="retries of a task whose worker died (default: 2)")
    g.add_argument("--batch", type=positive_int, metavar="N", help="units per Dask task (default: sized so that "
                   "a task runs about a second)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_config(args: argparse.Namespace) -> RunConfig:
    return RunConfig(scheduler=args.scheduler, workers=args.workers, retries=args.retries,
                     progress=not args.no_progress, backend=args.backend, batch=args.batch)
