"""The `prep` command line: parsing and exit codes only; the work lives in pipeline.commands.*.

Start-up is kept short: `COMMANDS` lists every subcommand with its one-line help, so `prep --help`
and `prep --version` import no command module at all, and `prep CMD ...` imports only CMD's module
(whose heavy dependencies are imported inside its `run()`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NamedTuple

from pipeline import __version__
from pipeline.errors import PrepError


class Command(NamedTuple):
    module: str
    help: str


# name -> (module with add_parser(sub) and run(args), the help line `prep --help` shows).
COMMANDS: dict[str, Command] = {
    "scan": Command("pipeline.commands.scan", "write a storage/hours manifest of a dataset"),
    "reencode": Command("pipeline.commands.reencode",
                        "re-encode a dataset's videos to e.g. 224x224 all-intra, as a new dataset"),
    "convert": Command("pipeline.commands.convert",
                       "convert a dataset between LeRobot v2.1 and v3.0 (stream copy, no re-encode)"),
    "verify": Command("pipeline.commands.verify", "prove a dataset is sound: frame counts, timestamps, keyframes"),
    "budget": Command("pipeline.commands.budget", "storage budget and pi-equivalent sizing report"),
    "bench": Command("pipeline.commands.bench", "benchmarks (dataloader)"),
    "demo": Command("pipeline.commands.demo", "build a synthetic corpus and run the pipeline on it end to end"),
}


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the first argument that is not an option
    (`prep` itself takes no option with a value), or None."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full sub-parser of `command` (imported now) and a one-line entry for every
    other command. `command=None` gives the listing only; `build_parser(name)` for each name, everything."""
    parser = argparse.ArgumentParser(prog="prep", description="Prepare, verify and size LeRobot datasets.")
    parser.add_argument("--version", action="version", version=f"prep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        if name == command:
            module: Any = importlib.import_module(cmd.module)
            module.add_parser(sub)
        else:
            sub.add_parser(name, help=cmd.help, add_help=False)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C, so that every `with` block (the engine session and its
    LocalCluster, locks, temp files) closes cleanly instead of the process dying mid-write."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code: int = args.func(args)
    except PrepError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:  # one line per problem
            print(f"prep {args.command}: error: {line}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except OSError as exc:  # a write no job turned into a WriteError: still one line, never a traceback
        from pipeline.atomic import WRITE_ERRNOS, WRITE_EXIT, describe

        if exc.errno not in WRITE_ERRNOS:
            raise
        where = exc.filename2 if exc.filename2 is not None else exc.filename
        print(f"prep {args.command}: error: {describe(where or '(output)', exc)}", file=sys.stderr)
        return WRITE_EXIT
    except Terminated:
        print(f"prep {args.command}: terminated (SIGTERM); rerun the same command to resume", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"prep {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
