"""How the report rounds each kind of number (stated in the report so a reader can check by hand)."""

from __future__ import annotations

import math

ROUNDING = (
    "timesteps in billions (B = 1e9) to 3 decimals; episodes in millions (M = 1e6) to 3 significant "
    "figures; hours to the unit; storage in TB (1 TB = 1000 GB = 1e12 bytes) to 1 decimal; days (86,400 s) "
    "to 1 decimal; frames/s to 1 decimal; step times to 3 decimals; memory in GB (1e9 bytes) to 1 decimal. "
    "Inputs are shown to 6 significant figures; every computation uses the unrounded values of report.json."
)


def billions(x: float) -> str:
    return f"{x / 1e9:.3f} B"


def millions(x: float) -> str:
    m = x / 1e6
    if m == 0:
        return "0 M"
    decimals = max(0, 2 - math.floor(math.log10(abs(m))))
    return f"{m:.{decimals}f} M"


def count(x: float) -> str:
    return f"{x:,.0f}"


def tb(x: float) -> str:
    return f"{x:.1f} TB"


def days(x: float) -> str:
    return f"{x:.1f}"


def rate(x: float) -> str:
    return f"{x:.1f}"


def seconds(x: float) -> str:
    return f"{x:.3f}"


def gb(x: float) -> str:
    return f"{x:.1f}"


def value(x: float) -> str:
    """An input as given: 6 significant figures, no exponent for ordinary magnitudes."""
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{x:,.0f}"
    return f"{x:.6g}"


def percent(x: float) -> str:
    return f"{x * 100:.0f}%"
