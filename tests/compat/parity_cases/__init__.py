"""The LeRobot parity cases (issue 12): tiny datasets built in code, each a named case with its clean
control, in v2.1 and v3.0 where it applies. `bench/parity.py` builds them inside each LeRobot venv, runs
the real reader, `prep verify` and `prep reencode` on them, and prints the parity table.

    from parity_cases import CASES, build_case
"""

from __future__ import annotations

import shutil
from pathlib import Path

from . import image_cases, lerobot_cases, synth_cases  # noqa: F401  (register the cases)
from .model import CASES, FORMATS, Built, Case, Expect, Truth

# Table order: the pipeline.synth cases (controls first), then the LeRobot-written ones.
_ordered = {n: CASES[n] for n in sorted(CASES, key=lambda n: CASES[n].needs_lerobot)}
CASES.clear()
CASES.update(_ordered)

__all__ = ["CASES", "FORMATS", "Built", "Case", "Expect", "Truth", "build_case"]


def build_case(name: str, fmt: str, folder: Path) -> Built:
    """Build case `name` in format `fmt` under `folder` (emptied first); saves `folder/built.json`."""
    c = CASES[name]
    if fmt not in c.formats:
        raise ValueError(f"case {name} has no {fmt} variant")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    built = c.build(folder, fmt)
    built.save(folder / "built.json")
    return built
