"""argparse value types shared by the commands (no heavy imports: bench runs in venvs without Dask)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

SIZE_RE = re.compile(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", flags=re.ASCII)  # ASCII: never full-width digits


def parse_size(text: str) -> tuple[int, int] | None:
    """`224` -> (224, 224), `320x240` -> (320, 240) as (width, height); None when `text` is not a size (each
    option says so in its own words: `prep reencode --dst`, `prep verify --size`)."""
    m = SIZE_RE.fullmatch(text)
    if not m:
        return None
    w = int(m.group(1))
    return w, int(m.group(2)) if m.group(2) else w


def positive_int(text: str) -> int:
    """An integer > 0 (ASCII digits: int() would also read '８' as 8), refused with one line naming the bad value."""
    try:
        if not text.strip().isascii():
            raise ValueError(text)
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")


def scheduler_address(text: str) -> str:
    """A Dask scheduler address `scheme://host:port` (or `host:port`, read as tcp://), checked without Dask."""
    m = re.fullmatch(r"(?:([a-z]+)://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})/?", text.strip())
    if not m or (m.group(1) and m.group(1) not in SCHEDULER_SCHEMES) or not 0 < int(m.group(3)) < 65536:
        raise argparse.ArgumentTypeError(f"expected a scheduler address like tcp://host:8786 "
                                         f"({', '.join(s + '://' for s in SCHEDULER_SCHEMES)}), got {text!r}")
    return text.strip()


def non_negative_int(text: str) -> int:
    """An integer >= 0 (ASCII digits only), refused with one line naming the bad value."""
    if not text.strip().isascii() or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def dataset_path(text: str) -> Path:
    """A dataset folder named on the command line: an empty string is refused (Path('') would be the current
    folder, silently)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a dataset folder, got {text!r} (use . for the current folder)")
    return Path(text)


SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_size(text: str) -> str | int:
    """`auto`, `0` (no limit) or a size such as 4GiB / 1.5GB (at least 256 MiB), as Dask's memory_limit takes it."""
    import re

    t = text.strip().lower()
    if t == "auto":
        return "auto"
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b|b)?", t, flags=re.ASCII)
    if not m:
        raise argparse.ArgumentTypeError(f"expected auto, 0 or a size such as 4GiB, got {text!r}")
    n = int(float(m.group(1)) * SIZE_UNITS[m.group(2) or ""])
    if n and n < 256 * 2**20:
        raise argparse.ArgumentTypeError(f"a worker needs at least 256MiB, got {text!r}")
    return n


class LazyChoices:
    """argparse `choices` read from a heavy module only when used (parsing the option, or its --help):
    the keys of `module.attr`, a dict of named strategies."""

    def __init__(self, module: str, attr: str) -> None:
        self.module, self.attr = module, attr

    def _keys(self) -> list[str]:
        import importlib

        return list(getattr(importlib.import_module(self.module), self.attr))

    def __contains__(self, item: object) -> bool:
        return item in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


class LazyHelp:
    """An argparse help text made by `render()` only when --help is printed (it may need a heavy module)."""

    def __init__(self, render: Callable[[], str]) -> None:
        self.render = render

    def __bool__(self) -> bool:
        return True

    def strip(self) -> str:
        return self.render().strip()

    def __mod__(self, params: object) -> str:
        text: str = self.render() % params
        return text


def seconds(text: str) -> float:
    """A duration in seconds >= 0 (0 = no bound), refused with one line naming the bad value."""
    try:
        if not text.strip().isascii():
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0 = no bound), got {text!r}") from None
    if not 0 <= value < 10**9:
        raise argparse.ArgumentTypeError(f"expected a number of seconds from 0 (no bound) up, got {text!r}")
    return value


def dashboard_address(text: str) -> str | None:
    """Where the embedded cluster's dashboard listens: `HOST:PORT`, `HOST` (a free port), `:PORT` (every
    interface, as Dask reads it) or `off`; checked without Dask."""
    import re

    t = text.strip()
    if t.lower() in ("off", "none", "no"):
        return None
    m = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]*)(?::([0-9]{1,5}))?", t)
    if not t or not m or (m.group(2) is not None and int(m.group(2)) > 65535) or (not m.group(1) and not m.group(2)):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:8787, 0.0.0.0:0 = every interface, a "
                                         f"free port) or off, got {text!r}")
    return f"{m.group(1)}:{m.group(2) or 0}"


class PrepParser(argparse.ArgumentParser):
    """prep's argument parser: no abbreviations (`--decod` is not taken as `--decode`: a typo is refused, never
    guessed), and every mistake is one line naming the command's help instead of argparse's usage block.
    Sub-parsers made from it (`add_subparsers`) are PrepParsers too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def check_option_names(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Refuse the first `--option` in `argv` (the words after a command's name) that `parser` (or the sub-command
    named in argv, e.g. `bench dataloader`) does not have, with the closest of its own options: argparse alone
    reports it only after the sub-parser is done (a missing required option first, or the top-level usage)."""
    import difflib

    for i, arg in enumerate(argv):
        if arg == "--":
            return
        sub = subparsers(parser)
        if arg in sub:
            check_option_names(sub[arg], argv[i + 1:])
            return
        if not arg.startswith("--") or arg == "--":
            continue
        name = arg.split("=", 1)[0]
        known = [s for s in parser._option_string_actions if s.startswith("--")]
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        parser.error(f"unrecognized option {name}" + (f"; did you mean {close[0]}?" if close else ""))


def innermost_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the deepest sub-command named in argv (`prep bench dataloader ...`: dataloader's)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        sub = subparsers(parser)
        if arg in sub:
            return innermost_parser(sub[arg], argv[i + 1:])
    return parser
