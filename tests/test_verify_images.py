"""`prep verify` checks the cameras stored as images (`dtype: "image"`: one picture per row of the data parquet,
a `{bytes, path}` struct column, as LeRobot writes with `use_videos=False`), in both formats, and states a verdict
per reader. What each fault does to the real readers (lerobot 0.3.3, 0.4.4, 0.6.1) is the parity cases'
(tests/compat/parity_cases/image_cases.py; tests/compat/test_parity.py runs them in each reader's venv): an
undecodable picture, a row without one and a missing column make every reader raise or refuse (errors); a picture
of another size loads at its own size (a warning that says so)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.checks import READER_LINES
from pipeline.jobs.verify import VerifyReport, verify_in_process, write_report
from pipeline.stages import verify as verify_stage
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import write_synthetic

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases import build_case
from parity_cases.image_cases import FAULTS, IMG, ROW, png, set_picture

IMAGES = ("observation.images.cam_high", "observation.images.cam_left_wrist")
VIDEO = "observation.images.cam_right_wrist"
EPISODES, FRAMES, H, W = 3, 8, 48, 64
FORMATS = ("v2.1", "v3.0")


@pytest.fixture(params=FORMATS)
def mixed(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Two cameras stored as images and one as video (v3.0: two episodes share a data file)."""
    return write_synthetic(tmp_path / f"mixed-{request.param}", version=request.param, episodes=EPISODES,
                           frames=FRAMES, height=H, width=W, image_cameras=IMAGES, episodes_per_file=2)


def findings(report: VerifyReport) -> set[tuple[str, int | None, str]]:
    return {(f.check, f.episode, f.severity) for f in report.failures}


def test_image_cameras_are_counted_and_pass(mixed: Path, tmp_path: Path) -> None:
    """A clean dataset passes; the summary counts the image cameras as cameras and their pictures as camera
    frames; the report names each camera's storage and counts its pictures by origin."""
    out = tmp_path / "v.json"
    res = run_prep("verify", mixed, "--decode", "--out", out, backend="inline", progress=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 cameras, 2 stored as images" in res.stdout
    n = EPISODES * FRAMES
    assert f"{3 * n} camera frames, {2 * n} of them pictures" in res.stdout
    rep = json.loads(out.read_text())
    assert rep["dataset"]["cameras"] == [VIDEO, *IMAGES] and rep["dataset"]["image_cameras"] == list(IMAGES)
    for ep in rep["episodes"]:
        video = ep["cameras"][VIDEO]
        assert video["stored"] == "video" and video["frames_decoded"] == FRAMES
        for key in IMAGES:
            cam = ep["cameras"][key]
            assert (cam["stored"], cam["codec"], cam["width"], cam["height"]) == ("image", "png", W, H)
            assert cam["pictures_from_footer"] == cam["pictures_in_parquet"] == cam["pictures_decoded"] == FRAMES
            assert cam["frames_from_packets"] is None and cam["frames_decoded"] is None
    fmt = rep["dataset"]["codebase_version"]
    assert {r: p["loads"] for r, p in rep["lerobot_loads"].items()} == {r: True for r in READER_LINES[fmt]}


def test_without_decode_pictures_come_from_the_footer(mixed: Path) -> None:
    report = verify_in_process(mixed, VerifyOptions())
    assert report.passed and not report.failures
    for e in report.episodes:
        cam = e.cameras[IMAGES[0]]
        assert (cam.pictures_from_footer, cam.pictures_in_parquet, cam.pictures_decoded) == (FRAMES, None, None)
        assert (cam.width, cam.height) == (W, H)  # the first picture's header


# (case, decode) -> the findings {(check, episode, severity)}; v3.0's missing column fails the file's episodes
EXPECTED = {
    ("images-clean", False): set(), ("images-clean", True): set(),
    # the bad picture is row 3: only a full decode opens it
    ("images-undecodable", False): set(),
    ("images-undecodable", True): {("picture_readable", 0, "error")},
    ("images-wrong-size", False): set(),
    ("images-wrong-size", True): {("picture_shape", 0, "warning")},
    # rows without a picture: the footer's null count, with or without --decode
    ("images-null", False): {("pictures_from_footer", 0, "error")},
    ("images-null", True): {("pictures_from_footer", 0, "error")},
    ("images-path-only", False): {("pictures_from_footer", 0, "error")},
    ("images-path-only", True): {("pictures_from_footer", 0, "error")},
    ("images-missing-column", False): {("image_column", 0, "error")},
    ("images-missing-column", True): {("image_column", 0, "error")},
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(FAULTS))
def test_parity_cases_get_the_readers_verdict(tmp_path: Path, name: str, fmt: str) -> None:
    """Each image parity case, as built for the real readers: verify's findings, their severity for every reader
    of the format line, and the per-reader prediction (loads <=> no error, with --decode)."""
    root = build_case(name, fmt, tmp_path / name).root
    for decode in (False, True):
        report = verify_in_process(root, VerifyOptions(decode=decode))
        got = findings(report)
        want = EXPECTED[(name, decode)]
        assert got == want, (decode, got)
        errors = any(s == "error" for _c, _e, s in want)
        assert report.passed is not errors
        if name == "images-missing-column":  # a file's finding, listed once: v3.0's one file fails both episodes
            assert report.failed_episodes == ([0, 1] if fmt == "v3.0" else [0])
        head = report.head_json()
        for line in READER_LINES[fmt]:
            assert head["lerobot_loads"][line]["loads"] == (False if errors else (True if decode else None))
        for f in report.failures:
            assert f.camera == IMG and f.path and f.path.endswith(".parquet")


def test_a_row_without_a_picture_is_named(tmp_path: Path) -> None:
    """The finding names the episode, the row (frame_index) and what the row holds instead; a path from the data
    is escaped (control characters and NUL shown as escapes) in the report and on the terminal."""
    root = build_case("images-clean", "v2.1", tmp_path / "c").root
    set_picture(root, {"bytes": None, "path": "evil\x1b[31m\x00.png"})
    out = tmp_path / "v.json"
    res = run_prep("verify", root, "--out", out, backend="inline", progress=False)
    assert res.returncode == 1
    assert "\x1b" not in res.stdout and "\x00" not in res.stdout
    f = next(f for f in json.loads(out.read_text())["failures"] if f["check"] == "pictures_from_footer")
    assert f["episode"] == 0 and f["camera"] == IMG and f["path"].endswith("episode_000000.parquet")
    assert f["expected"] == f"{_rows(root)} (one picture per row)"
    assert f"first at frame_index {ROW}" in f["found"] and "1 rows without one" in f["found"]
    assert "\\x1b" in f["found"] and "\\x00" in f["found"] and "\x1b" not in f["found"]
    assert "lerobot 0.3.x / openpi (v2.1) predicted: refuses, raises or hands a wrong frame" in res.stdout


def _rows(root: Path) -> int:
    return pq.read_metadata(sorted((root / "data").rglob("*.parquet"))[0]).num_rows


def test_a_null_in_a_shared_file_is_blamed_on_its_episode(tmp_path: Path) -> None:
    """v3.0, two episodes in one data file, a null picture in episode 1's rows, a file written without column
    statistics (the footer cannot count): the column is read, episode 1 fails, episode 0 passes."""
    root = build_case("images-clean", "v3.0", tmp_path / "c").root
    f = sorted((root / "data").rglob("*.parquet"))[0]
    t = pq.read_table(f)
    values = t[IMG].to_pylist()
    first_of_1 = t["episode_index"].to_pylist().index(1)
    values[first_of_1 + 2] = None
    i = t.schema.get_field_index(IMG)
    t = t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))
    pq.write_table(t, f, write_statistics=False)
    report = verify_in_process(root, VerifyOptions())
    assert findings(report) == {("pictures_from_footer", 1, "error")}
    assert "first at frame_index 2" in report.failures[0].found
    assert report.failed_episodes == [1]
    by = {e.episode: e.cameras[IMG] for e in report.episodes}
    assert by[0].pictures_from_footer is None and by[0].pictures_in_parquet == 8  # read from the column
    assert by[1].pictures_in_parquet == 7


def test_the_first_pictures_header_is_checked_without_decode(tmp_path: Path) -> None:
    """A wrong-size first picture is seen from its header alone; the warning names the shapes and says every
    reader of the format loads it at that shape."""
    root = build_case("images-clean", "v3.0", tmp_path / "c").root
    set_picture(root, {"bytes": png(np.zeros((24, 32), np.uint8)), "path": None}, row=0)
    report = verify_in_process(root, VerifyOptions())
    assert findings(report) == {("picture_shape", 0, "warning")}
    f = report.failures[0]
    assert f.expected.startswith("48x64x3") and f.found.startswith("24x32x1 at frame_index 0 (the first picture)")
    assert "lerobot 0.4.x and lerobot 0.6.x load it at that shape" in f.found
    assert report.passed


def test_decode_streams_a_few_pictures_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--decode reads the image column in batches of at most PICTURE_BATCH rows, never the file's pictures at
    once, and decodes every one of them."""
    root = write_synthetic(tmp_path / "ds", version="v3.0", episodes=2, frames=40, height=24, width=32,
                           cameras=(IMG,), image_cameras=(IMG,))
    seen: list[tuple[tuple[str, ...], int]] = []
    real = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: object, **kw: object):  # type: ignore[no-untyped-def]
        for batch in real(self, *args, **kw):  # type: ignore[arg-type]
            seen.append((tuple(batch.schema.names), batch.num_rows))
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    report = verify_in_process(root, VerifyOptions(decode=True))
    assert report.passed
    pictures = [n for names, n in seen if IMG in names]
    assert sum(pictures) == 80 and max(pictures) <= verify_stage.PICTURE_BATCH
    assert [e.cameras[IMG].pictures_decoded for e in report.episodes] == [40, 40]


def test_report_validates_with_image_findings(tmp_path: Path) -> None:
    root = build_case("images-undecodable", "v3.0", tmp_path / "c").root
    report = verify_in_process(root, VerifyOptions(decode=True))
    rep = write_report(report, tmp_path / "v.json")
    f = rep["failures"][0]
    assert f["check"] == "picture_readable" and f["severity_by_reader"] == {"0.4": "error", "0.6": "error"}
    assert f["found"].startswith(f"frame_index {ROW}: not a picture PIL identifies")
