"""Options and output conventions every command shares.

Outputs: `--out` always names a command's main output (scan: the manifest file; verify: the report
file; reencode: the output dataset folder; budget, bench, demo: the report folder). A default is stated
in the option's help and printed, as an absolute path, at the end of the run. A default that follows the
current folder is refused when that folder is the filesystem root (`prep budget` run from `/` must not
create `/manifests/`): pass --out there.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.commands.argtypes import (
    dashboard_address,
    memory_size,
    non_negative_int,
    positive_int,
    scheduler_address,
    seconds,
)
from pipeline.errors import PrepError
from pipeline.runner import BACKENDS, RunConfig, machine_cores  # light: Dask is imported only when a cluster starts
from pipeline.text import printable

MEMORY_HELP = ("memory limit of each LocalCluster worker, Dask's own (distributed's memory_limit: at 80%% a "
               "worker pauses, at 95%% the nanny restarts it and its task is retried): a size such as 4GiB, "
               "or auto = this machine's memory divided among the workers, or 0 = none (default: auto)")


STALL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SmallInput:
    """A command's threshold for running in its own process: a job of at most `units` `what` (the units of its
    main map) starts no cluster unless --workers, --backend or --scheduler asks for one."""

    units: int
    what: str


def add_run_options(p: argparse.ArgumentParser, small: SmallInput | None = None) -> None:
    inline = (f"Small inputs run in this process, without starting a cluster (1.5-8 s saved): at most {small.units:,} "
              f"{small.what}, unless --workers, --backend or --scheduler is given. " if small else "")
    g = p.add_argument_group("execution", description=inline + "Cluster faults (the scheduler lost, no worker, a "
                             "worker that cannot import prep or stops answering, a worker killed at its memory limit) "
                             "stop the run with one line and the command that resumes it (exit 4).")
    g.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                   help="existing Dask scheduler, e.g. tcp://host:8786 "
                   "(default: an embedded LocalCluster sized to this machine)")
    g.add_argument("--workers", type=positive_int, metavar="N", help="LocalCluster worker processes (default "
                   "and at most: this machine's cores; a larger N is capped at the cores, with a note)")
    g.add_argument("--memory-limit", type=memory_size, default="auto", metavar="SIZE", help=MEMORY_HELP)
    g.add_argument("--backend", choices=list(BACKENDS), help="inline = in this process (debugging, tiny inputs); "
                   "local = an embedded LocalCluster (the default" + (", for inputs above the size above" if small
                                                                      else "") + "); remote = --scheduler")
    g.add_argument("--retries", type=non_negative_int, default=2, metavar="N",
                   help="retries of a task whose worker died (default: 2)")
    g.add_argument("--batch", type=positive_int, metavar="N", help="units per Dask task (default: sized so that "
                   "a task runs about a second)")
    g.add_argument("--stall-timeout", type=seconds, default=STALL_TIMEOUT_S, metavar="SECONDS",
                   help="stop (exit 4, finished work kept) after this long with no worker connected, a worker "
                   "holding a task that stopped answering, or an unresponsive scheduler; a note is printed every "
                   f"30 s meanwhile (default: {STALL_TIMEOUT_S:g}; 0 = wait forever)")
    g.add_argument("--dashboard", type=dashboard_address, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where the embedded LocalCluster's dashboard listens (default: 127.0.0.1:0, this machine "
                   "only, a free port: reach it from elsewhere with ssh -L; 0.0.0.0:8787 opens it to the network; "
                   "off = none). A --scheduler cluster's dashboard is its scheduler's own")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(inline_max=small.units if small else 1)


def capped_workers(requested: int | None, command: str) -> int | None:
    """LocalCluster workers: at most one per core (each is a single-threaded process; more only add memory
    and start-up time), with a note on stderr when the request is capped."""
    cores = machine_cores()
    if requested is not None and requested > cores:
        print(f"prep {command}: note: --workers {requested} is more than this machine's {cores} cores: "
              f"using {cores} workers (one single-threaded worker per core)", file=sys.stderr)
        return cores
    return requested


def run_config(args: argparse.Namespace) -> RunConfig:
    remote = bool(args.scheduler) and args.backend in (None, "remote")
    workers = args.workers if remote else capped_workers(args.workers, getattr(args, "command", "") or "run")
    auto = args.backend is None and not args.scheduler and args.workers is None  # nothing asked for a cluster
    return RunConfig(scheduler=args.scheduler, workers=workers, retries=args.retries,
                     progress=not args.no_progress, backend=args.backend, batch=args.batch,
                     memory_limit=args.memory_limit, stall_timeout=args.stall_timeout, dashboard=args.dashboard,
                     inline_max=args.inline_max if auto else 1)


def default_in_cwd(rel: Path, flag: str = "--out") -> Path:
    """`rel` under the current folder, as an absolute path; refused when the current folder is the
    filesystem root (a default there would create a folder in `/`)."""
    cwd = Path.cwd()
    if cwd == Path(cwd.anchor):
        raise PrepError(f"the current folder is {cwd}: the default {flag} would be {cwd / rel}; "
                        f"pass {flag} PATH (or run from a working folder)")
    return cwd / rel


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 episode`, `3 episodes`, `1,024 camera frames`."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def warn(command: str, message: str) -> None:
    print(f"prep {command}: warning: {printable(message)}", file=sys.stderr, flush=True)


def rerun_command(argv: list[str]) -> str:
    """The command line that reruns this invocation, as the user would type it."""
    exe = Path(sys.argv[0])
    if exe.name == "prep":
        found = shutil.which("prep")
        head = "prep" if found and Path(found).resolve() == exe.resolve() else str(exe)
    else:
        head = f"{Path(sys.executable).name} -m pipeline.cli"
    return f"{head} {shlex.join(argv)}".rstrip()


def outcome_lines(failures: list[dict[str, Any]], verify: dict[str, Any] | None, report: Path,
                  advice: str) -> list[str]:
    """The end of a stream-copy summary (convert, edit): the failed files (first 20), the metadata line when
    any failed (`advice`: how to finish), the output's verify verdict and the report's path."""
    lines = [f"FAILED    {f['path']}: {f['reason']}" for f in failures[:20]]
    if len(failures) > 20:
        lines.append(f"FAILED    ... and {len(failures) - 20} more (see {report})")
    if failures:
        lines.append(f"metadata  not written (meta/info.json): the output is incomplete; {advice} "
                     "(done files are kept)")
    if verify is not None:
        verdict = "PASSED" if verify["passed"] else "FAILED"
        lines.append(f"verify    {verdict}: {verify['episodes_passed']:,} of {verify['episodes_checked']:,} episodes "
                     f"pass ({verify['failures_total']:,} failures)")
        lines += [f"          {line}" for line in verify["failures"][:10]]
    lines.append(f"report    {report}")
    return lines
