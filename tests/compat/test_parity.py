"""The parity harness itself (bench/parity.py, tests/compat/parity_cases): its builders are deterministic,
its frame judge tells a wrong frame from the right one, and its verdicts follow the rule. Runs inside each
LeRobot venv (.ci/compat.sh selects these by the `v21` / `v30` in their ids); skipped elsewhere."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from compat_support import lerobot_version
from parity_cases import CASES, build_case
from parity_cases.model import LOADS, RAISES, REFUSES, SILENTLY_WRONG, Truth
from parity_cases.table import verdict

FORMAT = {"0.3.": "v2.1", "0.4.": "v3.0"}
VENV = {"v2.1": "v21", "v3.0": "v30"}


def this_format() -> str:
    version = lerobot_version()
    for prefix, fmt in FORMAT.items():
        if version and version.startswith(prefix):
            return fmt
    pytest.skip("needs the real lerobot 0.3.x or 0.4.x (run in a venv made by .ci/lerobot_envs.sh)")


def params() -> list[object]:
    return [pytest.param(v, id=VENV[v]) for v in ("v2.1", "v3.0")]


def digest(root: Path, suffixes: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in suffixes:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.lerobot
@pytest.mark.parametrize("fmt", params())
@pytest.mark.parametrize("name", ["clean-synth", "vfr-mean-30", "preroll-cut", "ms-timebase", "depth-12bit"])
def test_builders_are_deterministic(fmt: str, name: str, tmp_path: Path) -> None:
    if fmt != this_format():
        pytest.skip(f"{fmt} runs in its own venv")
    """Metadata and parquet are byte-identical between two builds; every video has the same frames at the
    same times. (libx264's bits are not reproducible run to run at these sizes -- its mbtree rate control,
    through pipeline.synth's veryfast preset -- so the pictures are compared, not the bytes.)"""
    from parity_cases.mp4 import decode_all

    a = build_case(name, fmt, tmp_path / "a").root
    b = build_case(name, fmt, tmp_path / "b").root
    assert digest(a, (".json", ".jsonl", ".parquet")) == digest(b, (".json", ".jsonl", ".parquet")), name
    videos = sorted(p.relative_to(a) for p in a.rglob("*.mp4"))
    assert videos == sorted(p.relative_to(b) for p in b.rglob("*.mp4"))
    for rel in videos:
        (ta, fa), (tb, fb) = decode_all(a / rel), decode_all(b / rel)
        assert ta == tb, f"{name} {rel}: frame times differ"
        worst = min(10 * math.log10(255.0**2 / max(1e-9, float(np.mean((x.astype(float) - y) ** 2))))
                    for x, y in zip(fa, fb, strict=True))
        assert worst >= 30.0, f"{name} {rel}: builds differ by {worst:.1f} dB"


@pytest.mark.lerobot
@pytest.mark.parametrize("fmt", params())
def test_reader_judge_catches_a_shifted_frame(fmt: str, tmp_path: Path) -> None:
    """The clean control loads; the same dataset judged against truth shifted by one frame is
    `silently_wrong` for both backends: the harness can tell a wrong frame for a row."""
    if fmt != this_format():
        pytest.skip(f"{fmt} runs in its own venv")
    from parity_cases.reader import read_dataset

    built = build_case("clean-synth", fmt, tmp_path / "c")
    assert read_dataset(built.root, built)["outcome"] == LOADS
    shifted = replace(built, truth={k: Truth(t.ref, (*t.picks[1:], t.picks[-1]), t.exact)
                                    for k, t in built.truth.items()})
    res = read_dataset(built.root, shifted)
    assert res["outcome"] == SILENTLY_WRONG, res
    for backend in res["backends"].values():
        assert backend["first_wrong"]["sample"] == 0, backend


def _row(reader: str, verify_err: bool, decode_err: bool, wrote: bool, out: str | None) -> dict:
    rr = {"outcome": reader, "backends": {"torchcodec": {"outcome": reader}, "pyav": {"outcome": reader}}}
    v = {"has_error": verify_err, "rc": int(verify_err), "errors": [{"check": "x"}] if verify_err else [],
         "warnings": []}
    vd = dict(v, has_error=decode_err, rc=int(decode_err), errors=[{"check": "y"}] if decode_err else [])
    re = {"variant": "default", "rc": 0 if wrote else 1, "wrote_info": wrote,
          "output_reader": {"outcome": out, "backends": {}} if out else None}
    return {"case": "c", "format": "v3.0", "reader": rr, "verify": v, "verify_decode": vd, "reencode": [re]}


@pytest.mark.lerobot
@pytest.mark.parametrize("fmt", params())
def test_verdict_rule(fmt: str) -> None:
    if fmt != this_format():
        pytest.skip(f"{fmt} runs in its own venv")
    assert verdict(_row(LOADS, False, False, True, LOADS))["agree"]
    assert verdict(_row(REFUSES, True, True, False, None))["agree"]
    assert verdict(_row(LOADS, True, True, True, LOADS))["kinds"] == ["verify_false_error"]
    assert verdict(_row(SILENTLY_WRONG, False, False, True, SILENTLY_WRONG))["kinds"] == ["verify_missed",
                                                                                           "output_wrong"]
    assert verdict(_row(RAISES, True, True, True, RAISES))["kinds"] == ["output_not_loadable"]
    assert verdict(_row(LOADS, False, False, False, None))["kinds"] == ["reencode_refused_loadable"]
    assert "lerobot-streaming-dropped" in CASES and len(CASES) >= 25
