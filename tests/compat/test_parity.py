"""The parity harness itself (bench/parity.py, tests/compat/parity_cases): its builders are deterministic,
its frame judge tells a wrong frame from the right one, and its verdicts follow the rule. Runs inside each
LeRobot venv (.ci/compat.sh selects these by the `v21` / `v30` / `v06` in their ids); skipped elsewhere."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from compat_support import lerobot_version
from parity_cases import CASES, build_case
from parity_cases.model import (
    FORMAT_OF_READER,
    LOADS,
    RAISES,
    READERS,
    REFUSES,
    SILENTLY_WRONG,
    VENV_OF_READER,
    Truth,
    reader_line,
)
from parity_cases.prep_cli import lerobot_prediction
from parity_cases.table import counts, verdict


def this_reader() -> str:
    version = lerobot_version()
    line = reader_line(version) if version else None
    if line is None:
        pytest.skip("needs the real lerobot 0.3.x, 0.4.x or 0.6.x (run in a venv made by .ci/lerobot_envs.sh)")
    return line


def params() -> list[object]:
    """One id per reader venv (v21, v30, v06); the value is the reader's format."""
    return [pytest.param(FORMAT_OF_READER[r], id=VENV_OF_READER[r]) for r in READERS]


def digest(root: Path, suffixes: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in suffixes:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.readers
@pytest.mark.parametrize("fmt", params())
@pytest.mark.parametrize("name", ["clean-synth", "vfr-mean-30", "preroll-cut", "ms-timebase", "depth-12bit"])
def test_builders_are_deterministic(request: pytest.FixtureRequest, fmt: str, name: str, tmp_path: Path) -> None:
    skip_other_venvs(request)
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


@pytest.mark.readers
@pytest.mark.parametrize("fmt", params())
def test_reader_judge_catches_a_shifted_frame(request: pytest.FixtureRequest, fmt: str, tmp_path: Path) -> None:
    """The clean control loads; the same dataset judged against truth shifted by one frame is
    `silently_wrong` for both backends: the harness can tell a wrong frame for a row."""
    skip_other_venvs(request)
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


@pytest.mark.readers
@pytest.mark.parametrize("fmt", params())
def test_verdict_rule(request: pytest.FixtureRequest, fmt: str) -> None:
    skip_other_venvs(request)
    assert verdict(_row(LOADS, False, False, True, LOADS))["agree"]
    assert verdict(_row(REFUSES, True, True, False, None))["agree"]
    assert verdict(_row(LOADS, True, True, True, LOADS))["kinds"] == ["verify_false_error"]
    assert verdict(_row(SILENTLY_WRONG, False, False, True, SILENTLY_WRONG))["kinds"] == ["verify_missed",
                                                                                           "output_wrong"]
    assert verdict(_row(RAISES, True, True, True, RAISES))["kinds"] == ["output_not_loadable"]
    assert verdict(_row(LOADS, False, False, False, None))["kinds"] == ["reencode_refused_loadable"]
    assert "lerobot-streaming-dropped" in CASES and len(CASES) >= 30
    rows = [dict(_row(LOADS, False, False, True, LOADS), line=r, expect={"outcome": LOADS}) for r in ("0.4", "0.6")]
    rows[1]["reader"] = {"outcome": REFUSES, "backends": {}}
    for r in rows:
        r["verdict"] = verdict(r)
    assert counts(rows)["per_reader"] == {"0.4": {"rows": 1, "agree": 1}, "0.6": {"rows": 1, "agree": 0}}
    assert counts(rows)["unexplained"] == 1 and counts(rows)["known"] == []
    # A declared reason makes a disagreement known (counted apart, --strict passes); it never makes a row agree,
    # and a row that agrees is never listed as known.
    rows[1]["expect"] = {"outcome": LOADS, "cannot_agree": "why"}
    rows[0]["expect"] = {"outcome": LOADS, "cannot_agree": "why"}
    for r in rows:
        r["verdict"] = verdict(r)
    assert not rows[1]["verdict"]["agree"] and rows[1]["verdict"]["known"] == "why"
    assert rows[0]["verdict"]["agree"] and "known" not in rows[0]["verdict"]
    assert counts(rows)["unexplained"] == 0 and counts(rows)["known"] == ["c 0.6 v3.0: why"]
    flipped = CASES["flipped-bytes"]
    assert flipped.expect_for("0.3").cannot_agree and not flipped.expect_for("0.4").cannot_agree


def skip_other_venvs(request: pytest.FixtureRequest) -> None:
    """Each parametrised id (v21, v30, v06) runs in its own reader's venv."""
    ids = request.node.callspec.id.split("-")
    if VENV_OF_READER[this_reader()] not in ids:
        pytest.skip(f"{'/'.join(i for i in ids if i in VENV_OF_READER.values())} runs in its own venv")


@pytest.mark.readers
@pytest.mark.parametrize("fmt", params())
def test_prediction_reads_both_report_shapes(request: pytest.FixtureRequest, fmt: str) -> None:
    """verify's lerobot_loads: one entry per format (today), or one per reader line (per-reader verdicts)."""
    skip_other_venvs(request)
    old = {"lerobot_loads": {"v3.0": {"reader": "lerobot 0.4.x", "loads": False, "pixels_checked": True}}}
    assert lerobot_prediction(old, "v3.0", "0.6") is False and lerobot_prediction(old, "v3.0", "0.4") is False
    new = {"lerobot_loads": {"0.4": {"loads": True}, "0.6": {"loads": "refuses"}}}
    assert lerobot_prediction(new, "v3.0", "0.4") is True
    assert lerobot_prediction(new, "v3.0", "0.6") is False
    assert lerobot_prediction({"lerobot_loads": {"0.3": {"loads": None}}}, "v2.1", "0.3") is None
    assert lerobot_prediction({"lerobot_loads": True}, "v2.1", "0.3") is True


IMAGE_CASES = ("images-clean", "images-undecodable", "images-wrong-size", "images-null", "images-path-only",
               "images-missing-column", "lerobot-written-images")


@pytest.mark.readers
@pytest.mark.parametrize("fmt", params())
@pytest.mark.parametrize("name", IMAGE_CASES)
def test_image_case_row_agrees(request: pytest.FixtureRequest, fmt: str, name: str, tmp_path: Path) -> None:
    """Cameras stored as images: the real reader of this venv does what the case says (reads every sample,
    raises at the faulty one, or refuses at open), and `prep verify`'s verdict for this reader agrees with it
    (bench/parity.py's row, built and read here: the reader, verify without and with --decode)."""
    import sys

    from parity_cases.harness import run_case

    skip_other_venvs(request)
    reader = this_reader()
    row = run_case(name, reader, tmp_path, sys.executable)
    assert not row.get("error"), row.get("traceback") or row["error"]
    assert row["reader"]["outcome"] == CASES[name].expect_for(reader).outcome, row["reader"]
    v = verdict(row)
    assert v["agree"], (v, row["verify"]["errors"], row["verify_decode"]["errors"])
    # the verdict names its reader: every reader of the format line gets its own prediction
    decoded = row["verify_decode"]["lerobot_loads"]
    assert decoded is (row["reader"]["outcome"] == LOADS), row["verify_decode"]
