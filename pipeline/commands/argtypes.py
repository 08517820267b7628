"""argparse value types shared by the commands (no heavy imports: bench runs in venvs without Dask)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer > 0, refused with one line naming the bad value."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n
