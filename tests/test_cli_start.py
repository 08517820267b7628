"""CLI start-up: the parser imports a command's module (and its dependencies) only when that command runs.

Each case runs in a fresh interpreter and reads `sys.modules` after the parse, so what an earlier import
in this test process did cannot hide anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import COMMANDS, build_parser, chosen_command

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("dask", "distributed", "pyarrow", "av", "datasets", "matplotlib", "numpy", "pandas", "torch")

PROBE = """
import json, sys
from pipeline.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
mods = sorted(sys.modules)
print(json.dumps({"code": code, "modules": mods}))
"""


def imported(*argv: str) -> tuple[int, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    return doc["code"], set(doc["modules"])


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def command_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("pipeline.commands.")} - {"pipeline.commands.argtypes"}


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ()], ids=["--version", "--help", "no-args"])
def test_top_level_imports_no_command_module(argv: tuple[str, ...]) -> None:
    code, mods = imported(*argv)
    assert code == (2 if not argv else 0)
    assert heavy_in(mods) == []
    assert command_modules(mods) == set()


@pytest.mark.parametrize("argv", [("bench", "--help"), ("bench", "dataloader", "--help")], ids=" ".join)
def test_bench_help_imports_only_bench(argv: tuple[str, ...]) -> None:
    code, mods = imported(*argv)
    assert code == 0
    assert heavy_in(mods) == []
    assert command_modules(mods) == {"pipeline.commands.bench"}


@pytest.mark.parametrize("name", ["budget", "bench", "scan", "verify", "demo", "convert", "reencode"])
def test_command_help_imports_no_heavy_dependency(name: str) -> None:
    """reencode's --help lists pipeline.video.encode's PROFILES and ENGINES, which import PyAV only to encode."""
    code, mods = imported(name, "--help")
    assert code == 0
    assert heavy_in(mods) == []


def test_reencode_parser_imports_no_heavy_dependency() -> None:
    """Parsing `prep reencode` arguments (no --help) reads the encoder registry only to check a choice."""
    code, mods = imported("reencode", "--src", "nowhere", "--dst", "22x", "--no-progress")
    assert code == 2
    assert heavy_in(mods) == []


def test_bad_command_is_one_usage_error() -> None:
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", "scna"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    assert res.returncode == 2
    assert "invalid choice: 'scna'" in res.stderr and "Traceback" not in res.stderr


def test_chosen_command() -> None:
    assert chosen_command(["scan", "x"]) == "scan"
    assert chosen_command(["--version"]) is None
    assert chosen_command(["-h", "verify"]) == "verify"
    assert chosen_command(["nope", "scan"]) is None


def test_listing_matches_each_commands_own_parser() -> None:
    """`prep --help` lists every command with the same help line its module registers."""
    listing = build_parser().format_help()
    for name, cmd in COMMANDS.items():
        assert f"{name} " in listing and cmd.help.split()[0] in listing
        parser = build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        helps = {a.dest: a.help for a in sub._choices_actions}
        assert helps[name] == cmd.help, f"pipeline/cli.py COMMANDS[{name!r}] differs from {cmd.module}.add_parser"
