"""The `prep` command line: parsing and exit codes only; the work lives in pipeline.commands.*."""

from __future__ import annotations

import argparse
import importlib
import sys

from pipeline import __version__
from pipeline.errors import PrepError

COMMANDS = ("scan", "reencode", "verify", "budget", "bench", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prep", description="Prepare, verify and size LeRobot datasets.")
    parser.add_argument("--version", action="version", version=f"prep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"pipeline.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"pipeline.commands.{name}":
                continue  # not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PrepError as exc:
        print(f"prep {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"prep {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
