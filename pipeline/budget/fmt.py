"""How the report rounds each kind of number (stated in the report so a reader can check by hand)."""

from __future__ import annotations

import math

ROUNDING = (
    "timesteps in billions (B = 1e9) to 3 decimals; episodes in millions (M = 1e6) to 3 significant "
    "figures; hours to the unit; storage in TB (1 TB = 1000 GB = 1e12 bytes) to 1 decimal; days (86,400 s) "
    "to 1 decimal; frames/s to 1 decimal; step times to 3 decimals; memory in GB (1e9 bytes) to 1 decimal. "
    "Inputs are shown to 6 significant figures; the corpus section's shares, epochs, sizes and small hours "
    "to 3 significant figures; every computation uses the unrounded values of report.json."
)


def billions(x: float) -> str:
    return f"{x / 1e9:,.3f} B"


def millions(x: float) -> str:
    m = x / 1e6
    if m == 0:
        return "0 M"
    if abs(m) < 1e-3:  # fewer than 1,000 episodes: 3 significant figures, not a run of zeros
        return f"{m:.3g} M"
    decimals = max(0, 2 - math.floor(math.log10(abs(m))))
    return f"{m:,.{decimals}f} M"


def count(x: float) -> str:
    return f"{x:,.0f}"


def tb(x: float) -> str:
    return f"{x:,.1f} TB"


def days(x: float) -> str:
    return f"{x:,.1f}"


def rate(x: float) -> str:
    """Frames/s to 1 decimal; below 0.05, 3 significant figures (a slow model is not 0.0 frames/s)."""
    return f"{x:,.1f}" if x == 0 or abs(x) >= 0.05 else sig(x)


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


def sig(x: float, n: int = 3) -> str:
    """`n` significant figures, thousands separated, never an exponent (0.000503, 45.2, 198,670)."""
    if x == 0:
        return "0"
    decimals = max(0, n - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def share(x: float) -> str:
    """A fraction as a percentage to 3 significant figures: 0.000503 %, 45.2 %, 251 %."""
    return f"{sig(x * 100)} %"


def hours(x: float) -> str:
    """Hours to the unit when large (6,637 h), else to 3 significant figures (0.0334 h)."""
    return f"{count(x)} h" if x >= 100 else f"{sig(x)} h"


def duration(d: float) -> str:
    """A span given in days, in the unit that reads best: 30.8 days, 5.2 h, 13.4 s."""
    s = d * 86_400
    if d >= 1:
        return f"{d:,.1f} days"
    if s >= 3600:
        return f"{sig(s / 3600)} h"
    if s >= 60:
        return f"{sig(s / 60)} min"
    return f"{sig(s)} s"


def size(n: float) -> str:
    """Bytes in SI units (1 MB = 1e6 bytes) to 3 significant figures: 33.5 MB, 6.66 TB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{sig(n / scale)} {unit}"
    return f"{n:,.0f} bytes"
