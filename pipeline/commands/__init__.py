"""One module per `prep` subcommand; each exposes `add_parser(subparsers)` and `run(args) -> int`.

`COMMANDS` is the one place a command's name, module and one-line help are written: `pipeline.cli`
lists it for `prep --help` (importing no command module), and each module registers its sub-parser
with `help=COMMANDS[name].help`. This package imports nothing heavy.
"""

from __future__ import annotations

from typing import NamedTuple


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
    "edit": Command("pipeline.commands.edit",
                    "drop, keep, split or merge episodes, drop or rename cameras and features, by stream copy "
                    "(no re-encode), renumbered and verified"),
    "verify": Command("pipeline.commands.verify", "prove a dataset is sound: frame counts, timestamps, keyframes"),
    "budget": Command("pipeline.commands.budget", "storage budget and pi-equivalent sizing report"),
    "bench": Command("pipeline.commands.bench", "benchmarks (dataloader)"),
    "demo": Command("pipeline.commands.demo", "build a synthetic corpus and run the pipeline on it end to end"),
}


def help_of(name: str) -> str:
    return COMMANDS[name].help
