"""Corpora for the real-LeRobot compatibility tests, built lazily once per session.

Names: `synthetic-v21`, `synthetic-v30` (3 cameras, 480x640 h264, 2 episodes; `synthetic-v06` is the
v3.0 one, for lerobot 0.6), `real-v21` (a writable copy of the real fixture), `real-v30` / `real-v06` (that
copy converted by the installed lerobot's own converter: 0.4.4's, 0.6.1's), and `prep reencode --dst 224`
of a corpus: `<name>-224` (defaults), `<name>-224-crf0` (h264-intra 4:2:0 at crf 0) and
`<name>-224-444-crf0` (h264-intra-444 at crf 0).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from compat_support import (
    REPORT_LINES,
    lerobot_convert_v21_to_v30,
    real_fixture,
    run_reencode,
    writable_copy,
)

from pipeline.synth import SynthSpec, write_synthetic


class Corpora:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.built: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str) -> Path:
        out = self.base / name
        if "-224" in name:  # prep reencode is prep's own: a failure here fails the test, never skips it
            src_name, _, variant = name.partition("-224")
            options = {"": [], "-crf0": ["--crf", "0"], "-444-crf0": ["--profile", "h264-intra-444", "--crf", "0"]}
            return run_reencode(self.get(src_name), out, options[variant])
        if name == "synthetic-v21":
            return write_synthetic(out, SynthSpec(version="v2.1", episodes=2))
        if name in ("synthetic-v30", "synthetic-v06"):
            return write_synthetic(out, SynthSpec(version="v3.0", episodes=2))
        if name == "real-v21":
            src = real_fixture()
            if src is None:
                pytest.skip("real fixture shared/fixtures/real/g1_inspire_v21 not found")
            return writable_copy(src, out)
        if name in ("real-v30", "real-v06"):
            return convert_v21_to_v30(self.get("real-v21"), self.base / "convert")
        raise KeyError(name)


def convert_v21_to_v30(src: Path, workdir: Path) -> Path:
    """Convert a local v2.1 dataset with the installed lerobot's own converter (0.4.x:
    `lerobot.datasets.v30`, 0.6.x: `lerobot.scripts`), offline; with a local root it never contacts the hub."""
    repo_id = "g1_inspire"
    writable_copy(src, workdir / repo_id)
    return lerobot_convert_v21_to_v30(workdir, repo_id)


@pytest.fixture(scope="session")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Corpora:
    return Corpora(tmp_path_factory.mktemp("compat"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT_LINES and not os.environ.get("PREP_COMPAT_REPORT"):  # .ci/compat.sh prints the file
        terminalreporter.section("lerobot compatibility report")
        for line in REPORT_LINES:
            terminalreporter.write_line(line)
