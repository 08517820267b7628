"""Output checks fail only on errors (issue 33): reencode, convert and edit check every file they write with the
per-file checks of `prep verify` (`pipeline.video.checks`), and refuse it (and redo it on a rerun) only for a
finding that fails (error, trains_wrong), never for a warning or an info one.

Before this change any finding refused the file. No clean input makes prep write a file with only a warning or
info finding (an edit list's hidden pre-roll is refused at the source, a span's `to_timestamp` is exact), so the
tests add one to the real checks of a real written file: with a warning or info finding the file is written
and kept on a rerun; with an error it is still refused."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.checks import Severity
from pipeline.jobs.convert import ConvertOptions, convert_dataset
from pipeline.jobs.reencode import reencode_dataset
from pipeline.runner import RunConfig, open_engine
from pipeline.stages import convert as convert_stage
from pipeline.stages import reencode as reencode_stage
from pipeline.stages.reencode import ReencodeOptions
from pipeline.synth import write_synthetic
from pipeline.video.checks import CheckFailure, failing

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases.synth_cases import spec

FOUND = {  # a finding of each severity, as the per-file checks make them
    Severity.INFO: ("edit_list", "20 frames presented", "5 more packets hidden by the edit list"),
    Severity.WARNING: ("to_timestamp", "0.666667 s (from_timestamp + length/fps)", "0.633333 s"),
    Severity.ERROR: ("frames_from_packets", "20 (frames_expected)", "19"),
}


def test_failing_keeps_errors_and_trains_wrong_only() -> None:
    found = [CheckFailure(check, expected, got, 0, "cam", "x.mp4", severity)
             for severity, (check, expected, got) in FOUND.items()]
    found.append(CheckFailure("non_finite", "finite values", "1 rows", 0, "action", "x.parquet",
                              Severity.TRAINS_WRONG))
    assert [f.check for f in failing(found)] == ["frames_from_packets", "non_finite"]


def _with(severity: Severity, real: Any) -> Any:
    check, expected, got = FOUND[severity]

    def checked(*args: Any, **kw: Any) -> Any:
        result = real(*args, **kw)
        extra = CheckFailure(check, expected, got, 0, kw.get("camera"), "out.mp4", severity)
        if isinstance(result, tuple):  # check_video: (probe, failures)
            return result[0], [*result[1], extra]
        return [*result, extra]  # check_probe: failures
    return checked


@pytest.mark.parametrize("severity", [Severity.INFO, Severity.WARNING, Severity.ERROR])
def test_reencode_refuses_an_output_only_for_an_error(severity: Severity, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_synthetic(tmp_path / "ds", spec("v2.1"))
    monkeypatch.setattr(reencode_stage, "check_probe", _with(severity, reencode_stage.check_probe))
    out = tmp_path / "out"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = reencode_dataset(src, out, ReencodeOptions(size=(32, 32)), engine)
        if severity is Severity.ERROR:
            assert not report.complete and report.failed == 2
            assert all("output failed its checks: frames_from_packets" in f["reason"] for f in report.failures)
            return
        assert report.ok and report.encoded == 2, report.failures
        again = reencode_dataset(src, out, ReencodeOptions(size=(32, 32)), engine)
    assert again.ok and again.kept == 2 and again.encoded == 0


@pytest.mark.parametrize("severity", [Severity.INFO, Severity.WARNING, Severity.ERROR])
def test_convert_refuses_an_output_only_for_an_error(severity: Severity, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same gate in `convert` (and `edit`, which checks its stream copies with convert's `video_failures`)."""
    src = write_synthetic(tmp_path / "ds", spec("v2.1"))
    monkeypatch.setattr(convert_stage, "check_video", _with(severity, convert_stage.check_video))
    out = tmp_path / "out"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = convert_dataset(src, out, ConvertOptions("v3.0"), engine, verify=False)
        if severity is Severity.ERROR:
            assert not report.complete
            assert any("output failed its checks" in f["reason"] and "frames_from_packets" in f["reason"]
                       for f in report.failures), report.failures
            return
        assert report.complete and not report.failures, report.failures
        again = convert_dataset(src, out, ConvertOptions("v3.0"), engine, verify=False)
    assert again.complete and not again.failures and again.written == 0 and again.kept == again.files


@pytest.mark.parametrize("severity", [Severity.INFO, Severity.WARNING, Severity.ERROR])
def test_edit_refuses_a_spliced_output_only_for_an_error(severity: Severity, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`edit --drop 0` of a v3.0 dataset splices episode 1 out of the shared file (a stream copy) and checks it
    with convert's `video_failures`."""
    from pipeline.jobs.edit import EditOptions, edit_dataset

    src = write_synthetic(tmp_path / "ds", spec("v3.0"))
    monkeypatch.setattr(convert_stage, "check_video", _with(severity, convert_stage.check_video))
    out = tmp_path / "out"
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        report = edit_dataset(src, out, EditOptions(drop=(0,)), engine, verify=False)
        if severity is Severity.ERROR:
            assert not report.complete
            assert any("output failed its checks" in f["reason"] and "frames_from_packets" in f["reason"]
                       for f in report.failures), report.failures
            return
        assert report.complete and not report.failures, report.failures
        again = edit_dataset(src, out, EditOptions(drop=(0,)), engine, verify=False)
    assert again.complete and not again.failures and again.written == 0
