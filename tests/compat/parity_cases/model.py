"""What a parity case is: a tiny dataset built in code, what the real reader is expected to do with it
(read from LeRobot's source), and the ground truth the harness compares the reader's frames against.

Nothing here imports torch or lerobot: the builders run inside each LeRobot venv (some call LeRobot's
own writers), the table code runs anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("v2.1", "v3.0")
VENV_OF = {"v2.1": "v21", "v3.0": "v30"}
FORMAT_OF = {v: k for k, v in VENV_OF.items()}
# The reader lines the table runs (issue 25): lerobot 0.3.3 (openpi's line) reads v2.1; 0.4.4 and 0.6.1 read
# v3.0. Each runs in its own venv (.ci/lerobot_envs.sh); a row is (case, reader line).
READERS = ("0.3", "0.4", "0.6")
FORMAT_OF_READER = {"0.3": "v2.1", "0.4": "v3.0", "0.6": "v3.0"}
VENV_OF_READER = {"0.3": "v21", "0.4": "v30", "0.6": "v06"}
READER_OF_VENV = {v: k for k, v in VENV_OF_READER.items()}
RELEASE_OF_READER = {"0.3": "0.3.3", "0.4": "0.4.4", "0.6": "0.6.1"}


def reader_line(version: str) -> str | None:
    """"0.6.1" -> "0.6" (None for a release the table has no column for)."""
    line = ".".join(version.split(".")[:2])
    return line if line in READERS else None

# Reader outcomes, from best to worst. `loads` = every sample of both backends read, every frame the
# row's frame; the others say where the reader stopped or what it handed training instead.
LOADS = "loads"
SILENTLY_WRONG = "silently_wrong"
RAISES = "raises_at_sample"
REFUSES = "refuses_at_open"
OUTCOMES = (LOADS, SILENTLY_WRONG, RAISES, REFUSES)


@dataclass(slots=True, frozen=True)
class Expect:
    """What LeRobot's source says the reader does, and the function that decides it."""

    outcome: str
    where: str  # module:function (line) in the installed lerobot
    why: str
    # Why prep cannot agree with this reader on this case (a limit of what any check can see, stated once
    # here): the row is then a known disagreement, shown and counted apart; `--strict` fails only on others.
    cannot_agree: str = ""


@dataclass(slots=True, frozen=True)
class Truth:
    """The frames each row of one (camera, episode) should show.

    `ref` is a video (then `picks` are presentation times in seconds, matched to the decoded frame with
    the nearest pts) or a `.npy` stack of raw RGB frames (then `picks` are indices). A pick of None
    means no right frame exists for that row (e.g. the recorder dropped it). `exact` says the reference
    holds the very bits the reader decodes (compare tightly) rather than the pictures before compression.
    """

    ref: str
    picks: tuple[float | int | None, ...]
    exact: bool = True


@dataclass(slots=True)
class Built:
    """A built case: the dataset root and its truth per (camera, episode_index)."""

    root: Path
    truth: dict[tuple[str, int], Truth] = field(default_factory=dict)
    depth_cameras: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    # degrees clockwise of the display matrix on every video (the truth is in coded orientation): a reader
    # that applies the matrix (torchcodec >= 0.11, lerobot 0.6's default) and every prep output (the rotation
    # baked into the pixels) hand back the truth turned by this much
    display_rotation: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "truth": [{"camera": c, "episode": e, **asdict(t)} for (c, e), t in sorted(self.truth.items())],
            "depth_cameras": list(self.depth_cameras),
            "notes": self.notes,
            "display_rotation": self.display_rotation,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Built:
        truth = {(t["camera"], int(t["episode"])): Truth(t["ref"], tuple(t["picks"]), bool(t["exact"]))
                 for t in obj["truth"]}
        return cls(Path(obj["root"]), truth, tuple(obj["depth_cameras"]), list(obj["notes"]),
                   int(obj.get("display_rotation", 0)))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1))


Builder = Callable[[Path, str], Built]  # (case folder, format) -> Built
Variants = tuple[tuple[str, ...], ...] | dict[str, tuple[tuple[str, ...], ...]]


@dataclass(slots=True, frozen=True)
class Case:
    name: str
    formats: tuple[str, ...]
    what: str
    control: str | None  # the clean control this case differs from (None: it is a control)
    expect: dict[str, Expect]  # per format; a reader line's key ("0.6") overrides its format's
    build: Builder
    # extra `prep reencode` options per variant; a dict gives each format its own variants
    reencode_variants: Variants = ((),)
    needs_lerobot: bool = False  # the builder calls LeRobot's own writers or tools

    def variants(self, fmt: str) -> tuple[tuple[str, ...], ...]:
        v = self.reencode_variants
        return v.get(fmt, ((),)) if isinstance(v, dict) else v

    def readers(self) -> tuple[str, ...]:
        """The reader lines this case runs in: those reading one of its formats."""
        return tuple(r for r in READERS if FORMAT_OF_READER[r] in self.formats)

    def expect_for(self, reader: str) -> Expect:
        return self.expect.get(reader) or self.expect[FORMAT_OF_READER[reader]]


CASES: dict[str, Case] = {}


def case(name: str, formats: tuple[str, ...], what: str, control: str | None, expect: dict[str, Expect],
         *, reencode_variants: Variants = ((),),
         needs_lerobot: bool = False) -> Callable[[Builder], Builder]:
    """Register a builder as a named case."""

    def register(fn: Builder) -> Builder:
        if name in CASES:
            raise ValueError(f"duplicate parity case {name!r}")
        missing = [f for f in formats if f not in expect]
        if missing:
            raise ValueError(f"case {name!r}: no expectation for {missing}")
        CASES[name] = Case(name, formats, what, control, expect, fn, reencode_variants, needs_lerobot)
        return fn

    return register
