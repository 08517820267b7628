"""Options and output conventions every command shares.

Outputs: `--out` always names a command's main output (scan: the manifest file; verify: the report
file; reencode: the output dataset folder; budget, bench, demo: the report folder). A default is stated
in the option's help and printed, as an absolute path, at the end of the run. A default that follows the
current folder is refused when that folder is the filesystem root (`prep budget` run from `/` must not
create `/manifests/`): pass --out there.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
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
from pipeline.runner import RunConfig, machine_cores  # light: Dask is imported only when a cluster starts
from pipeline.slurm import SlurmSpec, check_extra, check_name, check_time, memory_bytes
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
    g.add_argument("--backend", choices=LOCAL_BACKENDS, help="inline = in this process (debugging, tiny inputs); "
                   "local = an embedded LocalCluster (the default" + (", for inputs above the size above" if small
                                                                      else "") + "); remote = --scheduler")
    g.add_argument("--retries", type=non_negative_int, default=2, metavar="N",
                   help="retries of a task whose worker died (default: 2)")
    g.add_argument("--batch", type=positive_int, metavar="N", help="units per Dask task (default: sized so that "
                   "a task runs about a second)")
    g.add_argument("--stall-timeout", type=seconds, default=STALL_TIMEOUT_S, metavar="SECONDS",
                   help="stop (exit 4, finished work kept) after this long with no worker connected, a worker "
                   "holding a task that stopped answering, or an unresponsive scheduler; a note is printed every "
                   f"30 s meanwhile (default: {STALL_TIMEOUT_S:g}; 0 = wait forever). With --cluster slurm, jobs "
                   "waiting in the queue are not a stall")
    g.add_argument("--dashboard", type=dashboard_address, default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where the embedded LocalCluster's dashboard listens (default: 127.0.0.1:0, this machine "
                   "only, a free port: reach it from elsewhere with ssh -L; 0.0.0.0:8787 opens it to the network; "
                   "off = none). A --scheduler cluster's dashboard is its scheduler's own")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_slurm_options(p)
    p.set_defaults(inline_max=small.units if small else 1)


LOCAL_BACKENDS = ["inline", "local", "remote"]  # --backend's choices; the slurm backend is --cluster slurm
CLUSTERS = ["slurm"]
CONFIG_ENV = "PREP_CLUSTER_CONFIG"
SLURM_KEYS = ("jobs", "partition", "account", "qos", "time", "cores", "memory", "extra", "scheduler_host")


def cluster_config_path() -> Path:
    """Where `--cluster slurm` reads its profiles: $PREP_CLUSTER_CONFIG, else
    $XDG_CONFIG_HOME/prep/cluster.toml (~/.config/prep/cluster.toml)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "prep" / "cluster.toml"


def _checked(check: Callable[[str], Any]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            check(text)
        except PrepError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
        return text.strip()

    return parse


def add_slurm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "SLURM (--cluster slurm)",
        description="The Dask workers run as SLURM jobs (sbatch), the scheduler in this process; every job is "
        "cancelled when prep exits, however it exits. A lost job (walltime, preemption, a node failure) is replaced; "
        "jobs waiting in the queue are not a stall. The job script, the job ids and the workers' logs are kept with "
        "the run's records (reencode, convert, edit: <out>/prep/slurm/; scan, verify: <report>.slurm/). The "
        "defaults come from [slurm] of the cluster configuration file ($PREP_CLUSTER_CONFIG, else "
        "~/.config/prep/cluster.toml), --slurm-profile NAME adds [slurm.profiles.NAME]; options given here win. "
        "Every path must be on a filesystem the nodes share, at the same place (docs/cluster.md).")
    g.add_argument("--cluster", choices=CLUSTERS, help="start the Dask workers as SLURM jobs (default: a "
                   "LocalCluster on this machine, or --scheduler's)")
    g.add_argument("--slurm-profile", type=_checked(lambda t: check_name(t, "--slurm-profile")), metavar="NAME",
                   help="a profile of the cluster configuration file ([slurm.profiles.NAME])")
    g.add_argument("--slurm-jobs", type=positive_int, metavar="N", help="worker jobs (default: 1)")
    g.add_argument("--slurm-partition", type=_checked(lambda t: check_name(t, "--slurm-partition")), metavar="NAME",
                   help="sbatch --partition (default: the cluster's)")
    g.add_argument("--slurm-account", type=_checked(lambda t: check_name(t, "--slurm-account")), metavar="NAME",
                   help="sbatch --account")
    g.add_argument("--slurm-qos", type=_checked(lambda t: check_name(t, "--slurm-qos")), metavar="NAME",
                   help="sbatch --qos")
    g.add_argument("--slurm-time", type=_checked(check_time), metavar="HH:MM:SS",
                   help="each job's walltime, sbatch --time (a run that lasts longer goes on in new jobs)")
    g.add_argument("--slurm-cores", type=positive_int, metavar="N", help="cores per job: one single-threaded "
                   "Dask worker process each (default: 1)")
    g.add_argument("--slurm-memory", type=_checked(memory_bytes), metavar="SIZE", help="memory per job, sbatch "
                   "--mem (4G, 4000M): split among its worker processes as Dask's memory limit (default: the "
                   "cluster's, and no Dask limit)")
    g.add_argument("--slurm-extra", type=_checked(check_extra), action="append", metavar="LINE",
                   help="one more #SBATCH option, written with '=' since it starts with --: "
                   "--slurm-extra=--constraint=avx2 (repeatable)")
    g.add_argument("--slurm-scheduler-host", type=_checked(lambda t: check_name(t, "--slurm-scheduler-host")),
                   metavar="HOST", help="the address of this machine that the nodes reach (default: the one its "
                   "default route leaves from)")


def slurm_spec(args: argparse.Namespace) -> SlurmSpec:
    """The worker jobs: the configuration file's [slurm], then its profile, then the command line's options."""
    values: dict[str, Any] = {}
    path = cluster_config_path()
    profile = getattr(args, "slurm_profile", None)
    table = _read_cluster_config(path, required=profile is not None or bool(os.environ.get(CONFIG_ENV)))
    slurm = table.get("slurm", {})
    if not isinstance(slurm, dict):
        raise PrepError(f"{path}: [slurm] must be a table")
    profiles = slurm.get("profiles", {})
    layers = [("[slurm]", {k: v for k, v in slurm.items() if k != "profiles"})]
    if profile is not None:
        if not isinstance(profiles, dict) or profile not in profiles or not isinstance(profiles[profile], dict):
            known = ", ".join(sorted(profiles)) if isinstance(profiles, dict) else ""
            raise PrepError(f"--slurm-profile {profile}: {path} has no [slurm.profiles.{profile}]"
                            + (f" (it has: {known})" if known else ""))
        layers.append((f"[slurm.profiles.{profile}]", profiles[profile]))
    for where, layer in layers:
        for key, value in layer.items():
            if key not in SLURM_KEYS:
                raise PrepError(f"{path}: {where}: unknown key {key!r} (known: {', '.join(SLURM_KEYS)})")
            values[key] = _config_value(path, where, key, value)
    for key in SLURM_KEYS:
        given = getattr(args, f"slurm_{key}", None)
        if given is not None:
            values[key] = tuple(given) if key == "extra" else given
    spec = SlurmSpec(**values)
    spec.check()
    return spec


def _read_cluster_config(path: Path, *, required: bool) -> dict[str, Any]:
    import tomllib

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        if required:
            raise PrepError(f"no cluster configuration file {path} (${CONFIG_ENV}, else "
                            "~/.config/prep/cluster.toml)") from None
        return {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PrepError(f"{path}: {exc}") from None


def _config_value(path: Path, where: str, key: str, value: Any) -> Any:
    """A value of the configuration file, checked as its option would check it."""
    def bad(expected: str) -> PrepError:
        return PrepError(f"{path}: {where}: {key} = {value!r}: expected {expected}")

    if key in ("jobs", "cores"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad("a positive integer")
        return value
    if key == "extra":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad('a list of sbatch options, e.g. ["--constraint=avx2"]')
        return tuple(value)
    if not isinstance(value, str):
        raise bad("a string")
    return value


def capped_workers(requested: int | None, command: str) -> int | None:
    """LocalCluster workers: at most one per core (each is a single-threaded process; more only add memory
    and start-up time), with a note on stderr when the request is capped."""
    cores = machine_cores()
    if requested is not None and requested > cores:
        print(f"prep {command}: note: --workers {requested} is more than this machine's {cores} cores: "
              f"using {cores} workers (one single-threaded worker per core)", file=sys.stderr)
        return cores
    return requested


SLURM_OPTIONS = ("slurm_profile", *(f"slurm_{k}" for k in SLURM_KEYS))


def run_config(args: argparse.Namespace, *, records: Path | None = None, shared: Sequence[Path] = (),
               records_flag: str = "--out") -> RunConfig:
    """The engine settings of a command's options. `records`: where `--cluster slurm` keeps the run's job
    records (None: the command has no such place until `records_flag` is given, and refuses --cluster slurm);
    `shared`: paths every worker of a cluster must see (the source)."""
    given = [f"--{name.replace('_', '-')}" for name in SLURM_OPTIONS if getattr(args, name, None) is not None]
    if getattr(args, "cluster", None) == "slurm":
        clash = [flag for flag, on in (("--scheduler", args.scheduler), ("--workers", args.workers),
                                       ("--backend", args.backend)) if on]
        if clash:
            raise PrepError(f"--cluster slurm starts its own scheduler and workers: drop {', '.join(clash)} "
                            "(--slurm-jobs and --slurm-cores size it)")
        if records is None:
            raise PrepError(f"--cluster slurm keeps its job records (the job script, the job ids, the workers' "
                            f"logs) on the filesystem the nodes share: pass {records_flag}")
        return RunConfig(slurm=slurm_spec(args), records=str(records.absolute()),
                         shared=tuple(str(Path(p).absolute()) for p in shared), retries=args.retries,
                         progress=not args.no_progress, batch=args.batch, stall_timeout=args.stall_timeout,
                         dashboard=args.dashboard)
    if given:
        raise PrepError(f"{given[0]} needs --cluster slurm")
    remote = bool(args.scheduler) and args.backend in (None, "remote")
    workers = args.workers if remote else capped_workers(args.workers, getattr(args, "command", "") or "run")
    auto = args.backend is None and not args.scheduler and args.workers is None  # nothing asked for a cluster
    return RunConfig(scheduler=args.scheduler, workers=workers, retries=args.retries,
                     progress=not args.no_progress, backend=args.backend, batch=args.batch,
                     memory_limit=args.memory_limit, stall_timeout=args.stall_timeout, dashboard=args.dashboard,
                     inline_max=args.inline_max if auto else 1,
                     shared=tuple(str(Path(p).absolute()) for p in shared) if remote else ())


def output_records(out: Path) -> Path:
    """Where an output folder's run keeps the engine's records (`--cluster slurm`): `<out>/prep/slurm/`."""
    return out / "prep" / "slurm"


def report_records(report: Path) -> Path:
    """Where a report's run keeps the engine's records: `<report>.slurm/`, beside it (its `<report>.parts/` work
    folder is removed, or cleared, by the job while SLURM still writes the workers' logs)."""
    return report.with_name(report.name + ".slurm")


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


def outcome_lines(failures: list[dict[str, Any]], verify: dict[str, Any] | None, report: Path | str,
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
