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
from pathlib import Path

from pipeline.commands.argtypes import memory_size, non_negative_int, positive_int, scheduler_address
from pipeline.errors import PrepError
from pipeline.runner import BACKENDS, RunConfig, machine_cores  # light: Dask is imported only when a cluster starts
from pipeline.text import printable

MEMORY_HELP = ("memory limit of each LocalCluster worker, Dask's own (distributed's memory_limit: at 80%% a "
               "worker pauses, at 95%% the nanny restarts it and its task is retried): a size such as 4GiB, "
               "or auto = this machine's memory divided among the workers, or 0 = none (default: auto)")


def add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("execution")
    g.add_argument("--scheduler", type=scheduler_address, metavar="ADDRESS",
                   help="existing Dask scheduler, e.g. tcp://host:8786 "
                   "(default: an embedded LocalCluster sized to this machine)")
    g.add_argument("--workers", type=positive_int, metavar="N", help="LocalCluster worker processes (default "
                   "and at most: this machine's cores; a larger N is capped at the cores, with a note)")
    g.add_argument("--memory-limit", type=memory_size, default="auto", metavar="SIZE", help=MEMORY_HELP)
    g.add_argument("--backend", choices=list(BACKENDS), help="inline = in this process (debugging, tiny inputs); "
                   "local = an embedded LocalCluster (the default); remote = --scheduler")
    g.add_argument("--retries", type=non_negative_int, default=2, metavar="N",
                   help="retries of a task whose worker died (default: 2)")
    g.add_argument("--batch", type=positive_int, metavar="N", help="units per Dask task (default: sized so that "
                   "a task runs about a second)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


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
    return RunConfig(scheduler=args.scheduler, workers=workers, retries=args.retries,
                     progress=not args.no_progress, backend=args.backend, batch=args.batch,
                     memory_limit=args.memory_limit)


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
