"""The `prep` command line: parsing and exit codes only; the work lives in pipeline.commands.*.

Start-up is kept short: `pipeline.commands.COMMANDS` lists every subcommand with its one-line help, so `prep --help`
and `prep --version` import no command module at all, and `prep CMD ...` imports only CMD's module
(whose heavy dependencies are imported inside its `run()`).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline.commands import COMMANDS
from pipeline.commands.argtypes import PrepParser, check_option_names, innermost_parser, subparsers
from pipeline.errors import ClusterError, PrepError
from pipeline.text import one_line, printable


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
    parser = PrepParser(prog="prep", description="Prepare, verify and size LeRobot datasets.")
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
    """SIGTERM (a scheduler's preemption, `kill`, `timeout`), raised in the main thread like Ctrl-C so
    that the same clean-up runs (the cluster is closed, finished work stays on disk)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def resume_hint(command: str, argv: list[str], args: argparse.Namespace) -> tuple[str | None, str]:
    """What a rerun keeps (the command's `resume_note`, None when nothing is kept) and the lines that say how to
    rerun: the exact command line, from the folder it ran in."""
    from pipeline.commands.common import rerun_command

    module: Any = importlib.import_module(COMMANDS[command].module)
    note_of = getattr(module, "resume_note", None)
    note: str | None = note_of(args) if note_of is not None else None
    verb = "resume: rerun the same command" if note else "run it again"
    return note, f"prep {command}: to {verb} (from {Path.cwd()}):\n    {rerun_command(argv)}"


def interrupted(command: str, argv: list[str], args: argparse.Namespace, exc: KeyboardInterrupt) -> int:
    """Say what happened, what was kept, and the exact command that resumes (or reruns) the job."""
    note, hint = resume_hint(command, argv, args)
    what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    print(f"\nprep {command}: {what}" + (f"; {note}" if note else ""), file=sys.stderr)
    print(hint, file=sys.stderr)
    return 143 if isinstance(exc, Terminated) else 130


def cluster_failed(command: str, argv: list[str], args: argparse.Namespace, exc: ClusterError) -> int:
    """A cluster fault (the scheduler lost, no workers, a frozen worker, ...): one line saying what failed and
    what was kept, then the command that resumes the run once the cluster is fixed."""
    note, hint = resume_hint(command, argv, args)
    if not exc.kept:
        note, hint = None, hint.replace("to resume: rerun the same command", "to run it again")
    message = " ".join(str(exc).split())  # one line, whatever the message holds
    print(f"prep {command}: error: {message}" + (f"; {note}" if note else ""), file=sys.stderr)
    print(hint, file=sys.stderr)
    return int(exc.exit_code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    parser = build_parser(command)
    if command is not None:  # an unknown --option: one line with the command's closest own option
        check_option_names(subparsers(parser)[command], argv[argv.index(command) + 1:])
    args, extra = parser.parse_known_args(argv)
    if extra:  # words no option takes: said by the command's own parser (its help), in one line
        innermost_parser(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        code: int = args.func(args)
    except ClusterError as exc:
        return cluster_failed(args.command, argv, args, exc)
    except PrepError as exc:
        for line in exc.lines() or [type(exc).__name__]:  # one line per problem, data escaped
            print(f"prep {args.command}: error: {one_line(line)}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except OSError as exc:  # a write no job turned into a WriteError: still one line, never a traceback
        from pipeline.atomic import WRITE_ERRNOS, WRITE_EXIT, describe

        if exc.errno not in WRITE_ERRNOS:
            raise
        where = exc.filename2 if exc.filename2 is not None else exc.filename
        print(f"prep {args.command}: error: {printable(describe(where or '(output)', exc))}", file=sys.stderr)
        return WRITE_EXIT
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM raised as Terminated
        return interrupted(args.command, argv, args, exc)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    return code


if __name__ == "__main__":
    sys.exit(main())
