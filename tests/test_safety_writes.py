"""Writes that cannot escape: a symlink, FIFO, socket or device planted where prep writes (a lock, `OUT/prep`,
`videos/<camera>` or `meta/` of a resumed output, a stats sidecar, a report, its table, its work folder) is
refused with one line naming it, in bounded time, before anything is written: the link's target is
unchanged, nothing at all is written anywhere, the source is unchanged, no traceback. Every command that
writes (scan, verify, reencode, convert), v2.1 and v3.0."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.faults import check_source, corpus, scenario, snapshot
from support.safety import (
    KIND_WORDS,
    VERSIONS,
    Watch,
    args_of,
    copy,
    finished,
    make_special,
    record_outcome,
    refused,
    report_lock,
    run,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]

WRITERS = ("scan", "verify", "reencode", "convert")


def _output(command: str, tmp_path: Path) -> tuple[Path, Path]:
    """(what --out names, the lock the command takes): an output folder's lock, or a report's work lock."""
    if command in ("reencode", "convert"):
        out = tmp_path / "out"
        return out, out / "prep/output.lock"
    out = tmp_path / "reports" / f"{command}.json"
    return out, report_lock(out)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
@pytest.mark.parametrize("command", WRITERS)
@pytest.mark.parametrize("version", VERSIONS)
def test_planted_lock_is_refused(version: str, command: str, kind: str, tmp_path: Path) -> None:
    src = corpus(version)
    before = snapshot(src)
    out, lock = _output(command, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    with scenario(f"{command} {version}: lock planted as a {kind}",
                  "exit 2, one line naming the lock; link target unchanged; nothing written; no hang",
                  bad_input=True) as row:
        handle = make_special(lock, kind, victim)
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, version, src, out))
        refused(r, command, str(lock), KIND_WORDS[kind])
        assert victim.read_text() == "precious\n"
        assert lock.is_symlink() if kind == "symlink" else lock.exists()
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)
        del handle


@pytest.mark.parametrize("kind", ["socket", "device"])
@pytest.mark.parametrize("command", ["scan", "reencode"])
def test_lock_as_socket_or_device_is_refused(command: str, kind: str, tmp_path: Path) -> None:
    src = corpus("v21")
    before = snapshot(src)
    out, lock = _output(command, tmp_path)
    with scenario(f"{command} v21: lock planted as a {kind}", "exit 2, one line naming it; nothing written",
                  bad_input=True) as row:
        handle = make_special(lock, kind)
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, "v21", src, out))
        refused(r, command, str(lock), KIND_WORDS[kind])
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)
        del handle


@pytest.mark.parametrize("command", ["reencode", "convert"])
@pytest.mark.parametrize("version", VERSIONS)
def test_output_prep_folder_as_symlink_is_refused(version: str, command: str, tmp_path: Path) -> None:
    """`OUT/prep -> elsewhere/`: no report, lock or option file of the run may land in `elsewhere/`."""
    src = corpus(version)
    before = snapshot(src)
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    out.mkdir()
    (out / "prep").symlink_to(elsewhere)
    with scenario(f"{command} {version}: OUT/prep is a symlink to another folder",
                  "exit 2, one line naming OUT/prep; the other folder unchanged", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, version, src, out))
        refused(r, command, str(out / "prep"), "symbolic link")
        assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


def _camera_dir(out: Path) -> Path:
    """The folder of one camera's videos (v2.1: videos/chunk-000/<camera>, v3.0: videos/<camera>)."""
    first = sorted((out / "videos").rglob("*.mp4"))[0].relative_to(out)
    return out / (first.parts[0] + "/" + first.parts[1] + ("/" + first.parts[2] if first.parts[1].startswith(
        "chunk-") else ""))


@pytest.mark.parametrize("planted", ["camera", "meta"])
@pytest.mark.parametrize("version", VERSIONS)
def test_resume_with_symlinked_folder_is_refused(version: str, planted: str, tmp_path: Path) -> None:
    """A finished output whose `videos/<camera>` or `meta/` was moved away and replaced by a link to it: the
    rerun (a resume) must not write the re-encoded files or the metadata into the link's target."""
    src = corpus(version)
    before = snapshot(src)
    out = copy(finished(version), tmp_path / "out")
    (out / "meta/info.json").unlink()  # an unfinished output: the rerun would write the metadata again
    folder = _camera_dir(out) if planted == "camera" else out / "meta"
    target = tmp_path / "elsewhere" / folder.name
    target.parent.mkdir()
    folder.rename(target)
    folder.symlink_to(target)
    with scenario(f"reencode {version}: resume with {folder.relative_to(out)} a symlink to another folder",
                  "exit 2, one line naming the link; the link's target unchanged", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of("reencode", version, src, out))
        refused(r, "reencode", str(folder), "symbolic link")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_resume_with_fifo_stats_sidecar_is_refused(version: str, tmp_path: Path) -> None:
    """A FIFO in place of a video's stats sidecar (`prep/stats/<file>.json`): a resume reads sidecars; it must
    refuse in bounded time instead of blocking on the FIFO."""
    src = corpus(version)
    before = snapshot(src)
    out = copy(finished(version), tmp_path / "out")
    sidecar = sorted((out / "prep/stats").rglob("*.json"))[0]
    sidecar.unlink()
    make_special(sidecar, "fifo")
    with scenario(f"reencode {version}: resume with a FIFO as a stats sidecar",
                  "exit 2 in bounded time, one line naming the FIFO; nothing written", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of("reencode", version, src, out), timeout=120)
        refused(r, "reencode", str(sidecar), "FIFO")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_convert_resume_with_symlinked_meta_is_refused(version: str, tmp_path: Path) -> None:
    src = corpus(version)
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario(f"convert {version}: resume with meta/ a symlink to another folder",
                  "exit 2, one line naming meta/; the target unchanged", bad_input=True) as row:
        first = run(row, *args_of("convert", version, src, out))
        assert first.returncode == 0, first.stdout + first.stderr
        (out / "meta/info.json").unlink()
        target = tmp_path / "elsewhere"
        (out / "meta").rename(target)
        (out / "meta").symlink_to(target)
        watch = Watch(tmp_path)
        r = run(row, *args_of("convert", version, src, out))
        refused(r, "convert", str(out / "meta"), "symbolic link")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("command", ["scan", "verify"])
@pytest.mark.parametrize("version", VERSIONS)
def test_report_work_folder_as_symlink_is_refused(version: str, command: str, tmp_path: Path) -> None:
    """`<report>.parts -> elsewhere/` (a folder prep clears on a fresh run): one line, no rmtree traceback,
    the folder it points to untouched."""
    src = corpus(version)
    before = snapshot(src)
    report = tmp_path / "reports" / f"{command}.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    report.parent.mkdir()
    parts = report.with_name(report.name + ".parts")
    parts.symlink_to(elsewhere)
    with scenario(f"{command} {version}: <report>.parts is a symlink to a folder",
                  "exit 2, one line naming it, no traceback; the folder unchanged", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, version, src, report), "--fresh")
        refused(r, command, str(parts), "symbolic link")
        assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("which", ["report", "table"])
@pytest.mark.parametrize("command", ["scan", "verify"])
def test_report_or_table_as_symlink_is_refused(command: str, which: str, tmp_path: Path) -> None:
    """`--out link.json` (or its `link.episodes.parquet`) a symlink to another file: refused, the file it
    points to unchanged (a report replaces files, it never writes through a link)."""
    src = corpus("v30")
    before = snapshot(src)
    report = tmp_path / "reports" / f"{command}.json"
    victim = tmp_path / "victim.json"
    victim.write_text('{"mine": true}\n')
    planted = report if which == "report" else report.with_name(report.stem + ".episodes.parquet")
    make_special(planted, "symlink", victim)
    with scenario(f"{command} v30: the {which} path is a symlink to another file",
                  "exit 2, one line naming it; the other file unchanged", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, "v30", src, report))
        refused(r, command, str(planted), "symbolic link")
        assert victim.read_text() == '{"mine": true}\n'
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("command", ["reencode", "convert"])
def test_socket_deep_in_output_is_refused(command: str, tmp_path: Path) -> None:
    """A socket anywhere in the output tree (here under data/) is named, on a fresh start of a claimed output."""
    src = corpus("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario(f"{command} v21: a socket deep in the output tree", "exit 2, one line naming it",
                  bad_input=True) as row:
        first = run(row, *args_of(command, "v21", src, out))
        assert first.returncode == 0, first.stdout + first.stderr
        handle = make_special(out / "data/s.sock", "socket")
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, "v21", src, out))
        refused(r, command, str(out / "data/s.sock"), "socket")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)
        del handle
