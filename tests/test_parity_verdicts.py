"""Verify's and reencode's verdicts on the LeRobot parity cases (issue 12), without LeRobot: each case is
built by its parity builder (tests/compat/parity_cases: pipeline.synth plus one edit, PyAV only), and
the findings must be the ones whose severity mirrors what the real reader does with the case
(`bench/parity.py` runs the real readers on the same cases).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.checks import READER_LINES
from pipeline.errors import PrepError
from pipeline.jobs.preverify import SourceRefused
from pipeline.jobs.reencode import ReencodeReport, reencode_dataset
from pipeline.jobs.verify import VerifyReport, verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.video.checks import decode_scan

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases import build_case

CAM = "observation.images.top"


def built(tmp_path: Path, name: str, fmt: str) -> Path:
    return build_case(name, fmt, tmp_path / f"{name}-{fmt}").root


def findings(report: VerifyReport) -> set[tuple[str, int | None, str]]:
    return {(f.check, f.episode, f.severity) for f in report.failures}


def reencode(src: Path, out: Path, **kw: object) -> ReencodeReport:
    accept = bool(kw.pop("accept_invalid_source", False))
    options = ReencodeOptions(size=(64, 64), **kw)  # type: ignore[arg-type]
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return reencode_dataset(src, out, options, engine, accept_invalid_source=accept)


# ---- verify: severity mirrors the reader ----------------------------------------------------------

CASES = [
    # (case, format, decode, errors {(check, episode)}, warnings {(check, episode)})
    ("clean-synth", "v2.1", True, set(), set()),
    ("clean-synth", "v3.0", True, set(), set()),
    # LeRobot 0.4.4 reads `length` frames from from_timestamp and never to_timestamp: loads -> warnings
    ("to-timestamp-short", "v3.0", True, set(), {("to_timestamp", 0), ("to_timestamp", 1)}),
    # opened unconditionally by the reader -> errors
    ("missing-tasks", "v2.1", False, {("metadata_files", None)}, set()),
    ("missing-tasks", "v3.0", False, {("metadata_files", None)}, set()),
    ("missing-episode-stats", "v2.1", False, {("metadata_files", None)}, set()),
    ("missing-episode-stats", "v3.0", False, set(), set()),  # 0.4.4 drops the stats columns
    ("missing-stats-json", "v3.0", False, set(), set()),
    # 0.3.3 takes its length from the rows (loads); 0.4.4 from total_frames (raises past the rows)
    ("wrong-total-frames", "v2.1", False, set(), {("total_frames", None)}),
    ("wrong-total-frames", "v3.0", False, {("total_frames", None)}, set()),
    ("frames-outside-episodes", "v3.0", False, set(), {("frames_outside_spans", 0)}),
    # hidden pre-roll: the decoders present the frames after the edit list
    ("preroll-cut", "v2.1", True, set(), set()),
    ("preroll-cut", "v3.0", True, set(), set()),
    # decoded frames: a concealed corrupt frame, a size change mid-stream
    ("concealed-bytes", "v2.1", True, {("decode_concealed", 0)}, set()),
    ("concealed-bytes", "v3.0", True, {("decode_concealed", 1)}, set()),  # the file's middle is episode 1
    ("resolution-change", "v2.1", True, {("decoded_size", 0)}, set()),
    ("resolution-change", "v3.0", True, {("decoded_size", 0)}, set()),
    ("vfr-mean-30", "v2.1", False, {("pts_grid", 0), ("pts_grid", 1), ("fps", 0), ("fps", 1)}, set()),
    ("vfr-mean-30", "v3.0", False, {("pts_grid", 0), ("pts_grid", 1)}, set()),
]


@pytest.mark.parametrize(("name", "fmt", "decode", "errors", "warnings"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_verify_severity_mirrors_the_reader(tmp_path: Path, name: str, fmt: str, decode: bool,
                                             errors: set[tuple[str, int | None]],
                                             warnings: set[tuple[str, int | None]]) -> None:
    root = built(tmp_path, name, fmt)
    if (name, fmt) == ("concealed-bytes", "v2.1"):
        require_flagged_damage(root)
    report = verify_in_process(root, VerifyOptions(decode=decode))
    got = findings(report)
    assert {(c, e) for c, e, s in got if s == "error"} == errors, got
    assert {(c, e) for c, e, s in got if s == "warning"} == warnings, got
    assert report.passed == (not errors)
    head = report.head_json()
    for line in READER_LINES[fmt]:  # every reader of the format line agrees on these cases
        assert head["lerobot_loads"][line]["loads"] == (False if errors else (True if decode else None))
    assert head["totals"]["errors"] == report.errors_total and head["totals"]["warnings"] == len(warnings)


def _dropped_frames_kept_rows(root: Path, drop: tuple[int, ...] = (12, 13)) -> None:
    """What LeRobot 0.4.4's streaming recorder does when its encoder queue drops frames: the video holds
    fewer frames for episode 0, restamped consecutively; the episode spans follow the video; the rows stay."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from parity_cases.meta import episodes_files, rewrite_parquet, set_column
    from support.inject import _decode, write_video

    video = next((root / "videos").rglob("*.mp4"))
    frames, gop, _ = _decode(video)
    kept = [f for i, (_t, f) in enumerate(frames) if i not in drop]
    write_video(video, [(i / 30, f) for i, f in enumerate(kept)], 30, gop=gop)
    n0 = 20 - len(drop)
    for p in episodes_files(root):
        def spans(t: Any) -> Any:
            t = set_column(t, f"videos/{CAM}/from_timestamp", [0.0, n0 / 30])
            return set_column(t, f"videos/{CAM}/to_timestamp", [n0 / 30, (n0 + 20) / 30])
        rewrite_parquet(p, spans)


def test_dropped_frames_with_rows_kept_is_an_error(tmp_path: Path) -> None:
    """Episode 0's 20 rows read its 18 frames and then episode 1's first two (LeRobot hands wrong frames):
    an error on episode 0 (not just the to_timestamp warning), and reencode refuses the file."""
    root = built(tmp_path, "clean-synth", "v3.0")
    _dropped_frames_kept_rows(root)
    report = verify_in_process(root, VerifyOptions())
    assert ("frames_overlap", 0, "error") in findings(report) and not report.passed
    result = reencode(root, tmp_path / "out", accept_invalid_source=True)
    assert not result.complete and "run into episode 1" in result.failures[0]["reason"]


def test_preroll_is_an_info_finding_and_counts_the_presented_frames(tmp_path: Path) -> None:
    report = verify_in_process(built(tmp_path, "preroll-cut", "v2.1"), VerifyOptions(decode=True))
    assert {(f.check, f.severity) for f in report.failures} == {("edit_list", "info")}
    for e in report.episodes:
        assert (e.cameras[CAM].frames_from_packets, e.cameras[CAM].frames_decoded) == (20, 20)


@pytest.mark.slow
def test_lerobot_written_av1_has_no_finding_with_decode(real_v21: Path) -> None:
    """The real LeRobot-written AV1 fixture: the corrupt-frame and frame-size checks raise no false alarm."""
    report = verify_in_process(real_v21, VerifyOptions(decode=True))
    assert report.failures == [] and report.passed


def test_verify_cli_exits_0_with_warnings_and_writes_severities(tmp_path: Path) -> None:
    root = built(tmp_path, "to-timestamp-short", "v3.0")
    out = tmp_path / "v.json"
    r = run_prep("verify", root, "--json", out, backend="inline", progress=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED    (2 warnings)" in r.stdout
    doc = json.loads(out.read_text())
    assert [(f["check"], f["severity"]) for f in doc["failures"]] == [("to_timestamp", "warning")] * 2
    expect = {"codebase_version": "v3.0", "loads": None, "pixels_checked": False, "errors": 0, "trains_wrong": 0,
              "targeted": True}
    assert doc["lerobot_loads"] == {"0.4": {"reader": "lerobot 0.4.x", **expect},
                                    "0.6": {"reader": "lerobot 0.6.x", **expect}}
    assert "lerobot   lerobot 0.4.x (v3.0): no error" in r.stdout and "lerobot   lerobot 0.6.x (v3.0): no" in r.stdout


# ---- reencode: the source's verdict first, then outputs LeRobot loads ---------------------------------


def test_to_timestamp_short_is_reencoded_with_exact_spans(tmp_path: Path) -> None:
    src = built(tmp_path, "to-timestamp-short", "v3.0")
    out = tmp_path / "out"
    report = reencode(src, out)
    assert report.ok and report.drop_in and report.source_warnings == 2
    t = pq.read_table(next((out / "meta/episodes").rglob("*.parquet")))
    frm, to = t[f"videos/{CAM}/from_timestamp"].to_pylist(), t[f"videos/{CAM}/to_timestamp"].to_pylist()
    assert [round(x * 30) for x in frm] == [0, 20] and [round(x * 30) for x in to] == [20, 40]
    assert verify_in_process(out, VerifyOptions(decode=True, all_intra=True)).failures == []


@pytest.mark.parametrize(("name", "fmt", "check"), [("missing-tasks", "v2.1", "metadata_files"),
                                                     ("missing-tasks", "v3.0", "metadata_files"),
                                                     ("wrong-total-frames", "v3.0", "total_frames"),
                                                     ("episode-index-gap", "v2.1", "episode_indices")])
def test_invalid_source_is_refused_before_encoding(tmp_path: Path, name: str, fmt: str, check: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(SourceRefused) as exc:
        reencode(built(tmp_path, name, fmt), out)
    assert check in {f.check for f in exc.value.check.blocking}
    assert "--accept-invalid-source" in str(exc.value)
    assert not out.exists()


def test_accept_invalid_source_is_marked_never_drop_in(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = reencode(built(tmp_path, "wrong-total-episodes", "v2.1"), out, accept_invalid_source=True)
    assert report.complete and report.accepted_invalid_source and not report.drop_in
    doc = json.loads((out / "prep/source_check.json").read_text())
    assert doc["accepted_invalid_source"] and not doc["drop_in"]
    assert [f["check"] for f in doc["blocking"]] == ["total_episodes"]


def test_variable_frame_rate_is_not_restamped_even_with_repair(tmp_path: Path) -> None:
    report = reencode(built(tmp_path, "vfr-mean-30", "v2.1"), tmp_path / "out", repairs=("timestamps",))
    assert not report.complete and report.failed == 2
    assert all("variable frame rate" in f["reason"] for f in report.failures)


def test_ms_rounded_pts_are_restamped_with_repair_timestamps(tmp_path: Path) -> None:
    src = built(tmp_path, "ms-timebase", "v3.0")
    with pytest.raises(SourceRefused):
        reencode(src, tmp_path / "refused")
    out = tmp_path / "out"
    report = reencode(src, out, repairs=("timestamps",))
    assert report.ok and report.drop_in and set(report.repaired_checks) == {"fps", "pts_grid"}
    assert verify_in_process(out, VerifyOptions(decode=True)).failures == []


def require_flagged_damage(src: Path) -> Path:
    """The concealed-bytes v2.1 source's damaged file, after checking the decoder flags its frame 9 in this
    process. In 2 of 4 full-suite runs on one machine (never in isolation: 300 decodes, 25 re-encodes) it
    flagged nothing; the case is then not what it is built to be, and the test is skipped, naming the
    file's hash and damage window, instead of judging prep on it."""
    import hashlib

    damaged = sorted((src / "videos").rglob("episode_000000.mp4"))[0]
    flagged = decode_scan(damaged).corrupt
    if flagged != [9]:
        notes = json.loads((src.parent / "built.json").read_text())["notes"]
        pytest.skip(f"the decoder flags frames {flagged} of the damaged file, not [9]: sha256 "
                    f"{hashlib.sha256(damaged.read_bytes()).hexdigest()[:12]} (a5af9d68c3be when it does), {notes}")
    return damaged


def test_corrupt_source_frame_fails_its_file(tmp_path: Path) -> None:
    src = built(tmp_path, "concealed-bytes", "v2.1")
    damaged = require_flagged_damage(src)
    report = reencode(src, tmp_path / "out")  # the source passes verify without decode
    assert not report.complete and report.failed == 1, (report.failures, decode_scan(damaged).corrupt)
    assert "corrupt" in report.failures[0]["reason"] and report.failures[0]["episodes"] == [0]


def test_resolution_change_fails_its_file(tmp_path: Path) -> None:
    report = reencode(built(tmp_path, "resolution-change", "v2.1"), tmp_path / "out")
    assert not report.complete and report.failed == 1
    assert "picture size changes" in report.failures[0]["reason"]


def test_depth_camera_is_copied_unchanged(tmp_path: Path) -> None:
    src = built(tmp_path, "depth-12bit", "v2.1")
    out = tmp_path / "out"
    report = reencode(src, out)
    assert report.ok and report.depth_copied == ["observation.images.depth"]
    for mp4 in (src / "videos").rglob("*.mp4"):
        rel = mp4.relative_to(src)
        same = (out / rel).read_bytes() == mp4.read_bytes()
        assert same == ("depth" in str(rel)), rel
    info_src, info_out = (json.loads((d / "meta/info.json").read_text()) for d in (src, out))
    key = "observation.images.depth"
    assert info_out["features"][key] == info_src["features"][key]


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


def test_repair_timestamps_wallclock_output_frames_equal_source(tmp_path: Path) -> None:
    """Parquet timestamps drifting up to 0.25 s (video on the grid): refused by default; with --repair
    timestamps the output's timestamp is frame_index/fps and, at crf 0, output frame k is the source's frame
    k resized (PSNR >= 40 dB). (That lerobot 0.3.3 refuses the source and loads the output is the parity
    table's wallclock-timestamps row, variant --repair timestamps --crf 0.)"""
    from pipeline.video.encode import filter_frames
    from pipeline.video.resize import RESIZE_MODES

    src = built(tmp_path, "wallclock-timestamps", "v2.1")
    with pytest.raises(SourceRefused) as exc:
        reencode(src, tmp_path / "refused")
    assert {f.check for f in exc.value.check.blocking} == {"timestamp_step"}
    out = tmp_path / "out"
    report = reencode(src, out, repairs=("timestamps",), crf=0, profile="h264-intra-444")
    assert report.ok and report.drop_in and report.repaired == {"timestamps": 2}
    assert json.loads((out / "prep/source_check.json").read_text())["repaired_episodes"]["timestamps"] == [0, 1]
    for p in sorted((out / "data").rglob("*.parquet")):
        t = pq.read_table(p)
        before = pq.read_table(src / p.relative_to(out))["timestamp"].to_numpy()
        drift = np.abs(before - t["frame_index"].to_numpy() / 30)
        assert 0.2 < drift.max() <= 0.26
        assert np.allclose(t["timestamp"].to_numpy(), t["frame_index"].to_numpy() / 30, atol=1e-6)
    assert verify_in_process(out, VerifyOptions(decode=True)).failures == []
    for mp4 in sorted((src / "videos").rglob("*.mp4")):
        want: list[np.ndarray] = []
        geometry = RESIZE_MODES["pad"](96, 72, 64, 64)
        filter_frames(mp4, geometry, "yuv444p", lambda _i, f, w=want: w.append(f.to_ndarray(format="rgb24")))
        got = _frames(out / mp4.relative_to(src))
        assert len(got) == len(want) == 20
        for g, w in zip(got, want, strict=True):
            mse = float(np.mean((g.astype(np.float64) - w) ** 2))
            assert 10 * np.log10(255.0**2 / max(mse, 1e-9)) >= 40.0


def test_repair_stats_is_refused_for_v30_which_loads_without_them(tmp_path: Path) -> None:
    """v3.0 without stats/* columns loads in LeRobot 0.4.4 (the case's verdict): --repair stats has nothing to
    make right there and is refused in one line before anything is written; without it the re-encode is a
    drop-in output whose episodes parquet, like the source's, has no stats columns."""
    src = built(tmp_path, "missing-episode-stats", "v3.0")
    with pytest.raises(PrepError, match=r"^--repair stats applies to v2.1 datasets, not this v3.0 one: it writes "
                                        r"meta/episodes_stats.jsonl, .* drop --repair stats$"):
        reencode(src, tmp_path / "refused", repairs=("stats",))
    assert not (tmp_path / "refused").exists()
    report = reencode(src, tmp_path / "out")
    assert report.ok and report.drop_in and report.repaired == {}
    [episodes] = (tmp_path / "out/meta/episodes").rglob("*.parquet")
    assert not [c for c in pq.read_schema(episodes).names if c.startswith("stats/")]


def test_repair_stats_writes_episodes_stats_anew(tmp_path: Path) -> None:
    """v2.1 without meta/episodes_stats.jsonl (LeRobot 0.3.3 cannot open it offline): refused by default;
    --repair stats writes it anew, each numeric column's stats equal to those LeRobot's writer computed
    for the same rows (the clean control), each camera's from the new frames."""
    src = built(tmp_path, "missing-episode-stats", "v2.1")
    with pytest.raises(SourceRefused):
        reencode(src, tmp_path / "refused")
    out = tmp_path / "out"
    report = reencode(src, out, repairs=("stats",))
    assert report.ok and report.drop_in and report.repaired == {"stats": 2}
    clean = built(tmp_path, "clean-synth", "v2.1")
    want = [json.loads(ln) for ln in (clean / "meta/episodes_stats.jsonl").read_text().splitlines()]
    got = [json.loads(ln) for ln in (out / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [g["episode_index"] for g in got] == [0, 1]
    for g, w in zip(got, want, strict=True):
        assert set(g["stats"]) == set(w["stats"])
        for feat, st in w["stats"].items():
            if feat == CAM:
                assert g["stats"][feat]["count"] == [20]  # the new frames' stats, not the source's
                continue
            for k in ("min", "max", "mean", "std", "count"):
                assert np.allclose(g["stats"][feat][k], st[k], atol=1e-6), (feat, k)
    assert verify_in_process(out, VerifyOptions()).failures == []
