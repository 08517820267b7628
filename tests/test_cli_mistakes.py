"""Typing mistakes get one helpful line (issue 36): no abbreviations (`--decod` was taken as `--decode`), an
unknown option names the closest option of the command itself (`--dts 224` printed the top-level usage), and
a missing required option is one line naming `prep CMD --help` (argparse printed ~13 usage lines)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
from support.cli import run_prep

from pipeline.cli import build_parser
from pipeline.commands import COMMANDS
from pipeline.commands.argtypes import subparsers

REPO = Path(__file__).resolve().parents[1]


def prep(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_prep(*args, cwd=cwd, timeout=120)


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [parser, *(p for sub in subparsers(parser).values() for p in every_parser(sub))]


def test_no_parser_takes_abbreviations() -> None:
    parsers = [p for name in COMMANDS for p in every_parser(build_parser(name))]
    assert len(parsers) > len(COMMANDS)
    assert [p.prog for p in parsers if p.allow_abbrev] == []
    from pipeline.commands.bench import PrepParser  # python -m pipeline.commands.bench builds the same kind

    assert PrepParser(prog="x").allow_abbrev is False


@pytest.mark.parametrize(("argv", "line"), [
    (["verify", "DATA", "--decod"],
     "prep verify: error: unrecognized option --decod; did you mean --decode? (see `prep verify --help`)"),
    (["reencode", "DATA", "--dts", "224"],
     "prep reencode: error: unrecognized option --dts; did you mean --dst? (see `prep reencode --help`)"),
    (["edit", "DATA", "--ot", "x", "--drop", "1"],
     "prep edit: error: unrecognized option --ot; did you mean --out? (see `prep edit --help`)"),
    (["bench", "dataloader", "DATA", "--stpes=3"], "prep bench dataloader: error: unrecognized option --stpes; "
     "did you mean --steps? (see `prep bench dataloader --help`)"),
    (["scan", "DATA", "--zzzzzz"], "prep scan: error: unrecognized option --zzzzzz (see `prep scan --help`)"),
    (["edit", "DATA", "--drop", "1"],
     "prep edit: error: the following arguments are required: --out (see `prep edit --help`)"),
    (["convert", "DATA"],
     "prep convert: error: the following arguments are required: --to (see `prep convert --help`)"),
    # `prep scan a b` is a corpus of two datasets since issue 35 (tests/test_corpus.py); budget takes one DATASET
    (["budget", "a", "b"], "prep budget: error: unrecognized arguments: b (see `prep budget --help`)"),
], ids=["abbrev", "dts", "ot", "bench-equals", "no-match", "edit-no-out", "convert-no-to", "extra-word"])
def test_a_mistake_is_one_line(argv: list[str], line: str, tmp_path: Path) -> None:
    res = prep(*argv, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


def test_an_option_value_that_looks_like_a_word_is_not_an_option(tmp_path: Path) -> None:
    """Only `--name` words are checked: values, `-h` and words after `--` go to argparse as before."""
    res = prep("scan", "--out", "x.json", "--", "--not-an-option", cwd=tmp_path)
    assert res.returncode == 2 and "unrecognized option" not in res.stderr
    assert prep("scan", "--help", cwd=tmp_path).returncode == 0
