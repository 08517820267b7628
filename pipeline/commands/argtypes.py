"""argparse value types shared by the commands (no heavy imports: bench runs in venvs without Dask)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator


def positive_int(text: str) -> int:
    """An integer > 0, refused with one line naming the bad value."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
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
