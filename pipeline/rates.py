"""Frame rates as exact fractions, and frame counts as seconds computed from them (never sums of durations)."""

from __future__ import annotations

from fractions import Fraction


def fps_fraction(fps: float) -> Fraction:
    """30 -> 30, 29.97 -> 2997/100: exact for the rates LeRobot datasets use."""
    return Fraction(str(fps)).limit_denominator(100_000)


def frames_to_seconds(frames: int, fps: float) -> float:
    """`frames / fps` rounded once to the nearest double."""
    return float(Fraction(frames) / fps_fraction(fps))
