"""`prep verify` stage-level: clean corpora pass, each injected fault is reported with the right
check, episode and camera while the other episodes pass. No scheduler: `verify_in_process`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.inject import (
    add_frame,
    delete_parquet_row,
    drop_frame,
    reencode_video,
    shift_timestamp,
    shift_video_frame,
    truncate_video,
)

from pipeline.jobs.verify import VerifyReport, verify_in_process
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

HIGH, LEFT = "observation.images.cam_high", "observation.images.cam_left_wrist"
STRICT = VerifyOptions(expect_frames=90, size=(224, 224), all_intra=True)

pytestmark = pytest.mark.faults


def _intra(root: Path, version: str) -> Path:
    """3 episodes x 2 cameras x 90 frames, 224x224 all-intra (v3.0: files of 2 + 1 episodes)."""
    spec = SynthSpec(version=version, episodes=3, height=224, width=224, gop=1, cameras=(HIGH, LEFT),
                     episodes_per_file=2)
    return write_synthetic(root, spec)


@pytest.fixture(scope="module")
def intra_v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _intra(tmp_path_factory.mktemp("intra") / "v21", "v2.1")


@pytest.fixture(scope="module")
def intra_v30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _intra(tmp_path_factory.mktemp("intra") / "v30", "v3.0")


def failing(report: VerifyReport) -> set[tuple[int | None, str | None, str]]:
    return {(f.episode, f.camera, f.check) for f in report.failures}


def passed(report: VerifyReport) -> list[int | None]:
    return [e.episode for e in report.episodes if e.passed]


def assert_fault(report: VerifyReport, episodes: set[int], camera: str | None, checks: set[str]) -> None:
    """`checks` fail for `camera` of `episodes` (and only these episodes fail); the rest pass."""
    assert not report.passed
    found = failing(report)
    for ep in episodes:
        for check in checks:
            assert (ep, camera, check) in found, f"missing {(ep, camera, check)} in {sorted(found, key=str)}"
    assert {f.episode for f in report.failures} <= episodes, report.failures
    assert report.failed_episodes == sorted(episodes)
    assert passed(report) == [e for e in (0, 1, 2) if e not in episodes]


# --- clean corpora -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["intra_v21", "intra_v30"])
def test_clean_intra_corpus_passes_every_check(name: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(name)
    report = verify_in_process(root, VerifyOptions(expect_frames=90, size=(224, 224), all_intra=True, decode=True))
    assert report.passed, report.failures
    assert passed(report) == [0, 1, 2]
    for ep in report.episodes:
        assert ep.frames_expected == ep.frames_in_parquet == 90
        assert set(ep.cameras) == {HIGH, LEFT}
        for cam in ep.cameras.values():
            assert cam.frames_from_packets == cam.frames_decoded == cam.keyframes == 90
            assert cam.frames_from_header == (90 if report.dataset.codebase_version == "v2.1" else
                                              cam.frames_from_header)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["synth_v21", "synth_v30"])
def test_native_gop30_corpus_passes_but_is_not_all_intra(name: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(name)
    assert verify_in_process(root, VerifyOptions(expect_frames=90, size=(640, 480))).passed
    report = verify_in_process(root, VerifyOptions(all_intra=True, size=(224, 224)))
    assert {f.check for f in report.failures} == {"keyframes", "size"}
    assert report.failed_episodes == [0, 1, 2]
    keyframes = [f for f in report.failures if f.check == "keyframes"]
    assert len(keyframes) == 9 and all(f.found == "3" and f.expected.startswith("90") for f in keyframes)


def test_real_fixture_passes_and_fails_expect_frames_90(real_v21: Path) -> None:
    report = verify_in_process(real_v21, VerifyOptions())
    assert report.passed, report.failures
    assert len(report.episodes) == 10 and sum(e.frames_expected for e in report.episodes) == 3608
    cam = report.episodes[0].cameras["observation.images.cam_high"]
    assert cam.frames_from_header == cam.frames_from_packets == report.episodes[0].frames_in_parquet == 290

    strict = verify_in_process(real_v21, VerifyOptions(expect_frames=90))
    assert strict.failed_episodes == list(range(10))
    assert {(f.check, f.expected) for f in strict.failures} == {("frames_expected", "90 (--expect-frames)")}
    assert sorted(int(f.found) for f in strict.failures)[:2] == [290, 342]


# --- injected faults, v2.1 -----------------------------------------------------------------------

Fault = Callable[[Path], object]

V21_FAULTS: list[tuple[str, Fault, VerifyOptions, set[int], str | None, set[str]]] = [
    ("89 frames", lambda r: drop_frame(r, 1, LEFT), STRICT, {1}, LEFT, {"frames_from_packets"}),
    ("91 frames", lambda r: add_frame(r, 2, HIGH), STRICT, {2}, HIGH, {"frames_from_packets"}),
    ("middle frame dropped", lambda r: drop_frame(r, 0, HIGH, which=40), VerifyOptions(), {0}, HIGH,
     {"frames_from_packets", "pts_grid"}),
    ("parquet row missing", lambda r: delete_parquet_row(r, 2, 45), VerifyOptions(), {2}, None,
     {"frames_in_parquet", "frame_index", "index"}),
    ("timestamp off by half a frame", lambda r: shift_timestamp(r, 0, 45, 0.5), VerifyOptions(), {0}, None,
     {"timestamp_step"}),
    ("first timestamp off", lambda r: shift_timestamp(r, 1, 0, 0.5), VerifyOptions(), {1}, None,
     {"timestamp_start", "timestamp_step"}),
    ("pts off by half a frame", lambda r: shift_video_frame(r, 1, HIGH, 10), VerifyOptions(), {1}, HIGH,
     {"pts_grid"}),
    ("GOP 30 with --all-intra", lambda r: reencode_video(r, 1, HIGH, gop=30), STRICT, {1}, HIGH, {"keyframes"}),
    ("truncated mp4", lambda r: truncate_video(r, 2, LEFT), VerifyOptions(), {2}, LEFT, {"readable"}),
    ("truncated faststart mp4", lambda r: truncate_video(r, 0, LEFT, faststart=True), VerifyOptions(), {0},
     LEFT, {"frames_from_header", "frames_from_packets"}),
    ("wrong resolution with --size", lambda r: reencode_video(r, 0, LEFT, size=(320, 240)), STRICT, {0}, LEFT,
     {"size", "declared_size"}),
]


def test_counts_by_origin_name_the_short_camera(intra_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(intra_v21, "broken")
    drop_frame(root, 1, LEFT)
    report = verify_in_process(root, VerifyOptions(decode=True))
    ep = report.episodes[1]
    assert (ep.frames_expected, ep.frames_in_parquet) == (90, 90)
    assert ep.cameras[HIGH].frames_from_packets == 90
    left = ep.cameras[LEFT]
    assert (left.frames_from_header, left.frames_from_packets, left.frames_decoded) == (89, 89, 89)
    [f] = report.failures
    assert (f.expected, f.found) == ("90 (frames_expected)", "89")


def test_faults_are_silent_without_the_option(intra_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(intra_v21, "broken")
    reencode_video(root, 1, HIGH, gop=30)
    assert verify_in_process(root, VerifyOptions()).passed
    assert not verify_in_process(root, VerifyOptions(all_intra=True)).passed


def test_decode_catches_what_the_header_promised(intra_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(intra_v21, "broken")
    truncate_video(root, 2, HIGH, keep=0.6, faststart=True)
    report = verify_in_process(root, VerifyOptions(decode=True))
    assert (2, HIGH, "frames_decoded") in failing(report)
    assert report.failed_episodes == [2]


# --- injected faults, v3.0 (episodes 0 and 1 share a file per camera; episode 2 has its own) ------

V30_FAULTS: list[tuple[str, Fault, VerifyOptions, set[int], str | None, set[str]]] = [
    ("89 frames in a shared file", lambda r: drop_frame(r, 0, LEFT), STRICT, {0}, LEFT, {"frames_from_packets"}),
    ("parquet row missing", lambda r: delete_parquet_row(r, 1, 10), VerifyOptions(), {1}, None,
     {"frames_in_parquet", "frame_index", "index"}),
    ("timestamp off by half a frame", lambda r: shift_timestamp(r, 1, 45), VerifyOptions(), {1}, None,
     {"timestamp_step"}),
    ("GOP 30 with --all-intra", lambda r: reencode_video(r, 2, LEFT, gop=30), STRICT, {2}, LEFT, {"keyframes"}),
    ("GOP 30 in a shared file", lambda r: reencode_video(r, 0, LEFT, gop=30), STRICT, {0, 1}, LEFT,
     {"keyframes"}),
    ("truncated mp4", lambda r: truncate_video(r, 2, HIGH), VerifyOptions(), {2}, HIGH, {"readable"}),
    ("wrong resolution with --size", lambda r: reencode_video(r, 2, HIGH, size=(320, 240)), STRICT, {2}, HIGH,
     {"size"}),
]


FAULTS = [("v21", *f) for f in V21_FAULTS] + [("v30", *f) for f in V30_FAULTS]


@pytest.mark.parametrize(("layout", "fault", "options", "episodes", "camera", "checks"),
                         [(f[0], *f[2:]) for f in FAULTS], ids=[f"{f[0]}-{f[1]}" for f in FAULTS])
def test_fault_is_reported_where_it_is(
    layout: str, fault: Fault, options: VerifyOptions, episodes: set[int], camera: str | None, checks: set[str],
    request: pytest.FixtureRequest, copy_dataset: Callable[[Path, str], Path],
) -> None:
    """Each format's faults (v2.1: one file per episode; v3.0: episodes 0 and 1 share a file per camera)."""
    root = copy_dataset(request.getfixturevalue(f"intra_{layout}"), "broken")
    assert verify_in_process(root, options).passed  # the copy is clean before the fault
    fault(root)
    assert_fault(verify_in_process(root, options), episodes, camera, checks)


@pytest.mark.parametrize("episode", [0, 1], ids=["between two spans", "after the last span"])
def test_v30_frame_outside_every_span_is_a_warning(episode: int, intra_v30: Path,
                                                   copy_dataset: Callable[[Path, str], Path]) -> None:
    """An extra frame half an interval after episode 0's last (inside its [from, to)) or after the file's
    last span: LeRobot reads each episode's `length` frames from its from_timestamp and never this one,
    so loading is unaffected and it is a warning, blamed on the episode before it."""
    root = copy_dataset(intra_v30, "broken")
    add_frame(root, episode, HIGH)
    report = verify_in_process(root, STRICT)
    assert report.passed and report.warnings_total == 1 and report.errors_total == 0
    assert [(f.episode, f.camera, f.check, f.severity) for f in report.failures] == [
        (episode, HIGH, "frames_outside_spans", "warning")]


def test_v30_file_failure_fails_every_episode_in_the_file_but_is_listed_once(
    intra_v30: Path, copy_dataset: Callable[[Path, str], Path],
) -> None:
    root = copy_dataset(intra_v30, "broken")
    truncate_video(root, 0, LEFT)
    report = verify_in_process(root, VerifyOptions())
    assert report.failed_episodes == [0, 1]
    assert [(f.episode, f.camera, f.check) for f in report.failures] == [(0, LEFT, "readable")]
    assert passed(report) == [2]


# --- what the metadata declares ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["intra_v21", "intra_v30"])
def test_a_mislabelled_codec_is_a_warning_on_every_episode_of_the_camera(
    name: str, request: pytest.FixtureRequest, copy_dataset: Callable[[Path, str], Path],
) -> None:
    """info.json's video.codec is never read to decode (the `mpeg4-as-h264` parity case loads): each file
    of the camera gets one warning naming both codecs (v3.0: named by the file's first episode; episodes
    0 and 1 share a file), and every episode still passes."""
    import json

    root = copy_dataset(request.getfixturevalue(name), "mislabelled")
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["features"][LEFT]["info"]["video.codec"] = "av1"
    info_path.write_text(json.dumps(info, indent=4))
    report = verify_in_process(root, VerifyOptions())
    assert report.passed and passed(report) == [0, 1, 2]
    assert {(f.episode, f.camera, f.check, f.severity, f.expected, f.found) for f in report.failures} == {
        (ep, LEFT, "declared_codec", "warning", "av1 (info.json)", "h264")
        for ep in ((0, 1, 2) if name == "intra_v21" else (0, 2))}
