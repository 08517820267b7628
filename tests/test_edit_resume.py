"""`prep edit` resumes like reencode (issue 36, edit's resume): a rerun keeps an output file only when it is the
very file a new run would write (its record: the unit, the source files' fingerprints, the file's size and block
hash) and it passes the same checks as a new one; a source changed since, even with its size and mtime put back,
is edited again; the temp file of a report write cut by a kill is removed by the next run."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pipeline import atomic
from pipeline.jobs.edit import EditOptions, EditReport, edit_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")


def edit_inline(src: Path, out: Path, **kw: tuple[int, ...]) -> EditReport:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return edit_dataset(src, out, EditOptions(**kw), engine)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def synth(root: Path, version: str) -> Path:
    spec = SynthSpec(version=version, episodes=5, frames=24, height=48, width=64, gop=12, cameras=CAMS,
                     episodes_per_file=2 if version == "v3.0" else 1)
    return write_synthetic(root, spec)


def test_v30_output_cut_short_is_written_again(tmp_path: Path) -> None:
    """A v3.0 output video with its last 100 bytes cut off (a demux still counts every frame) is not kept: the
    rerun writes it again, byte for byte the file of the first run, and the output verifies with a decode."""
    src = synth(tmp_path / "src", "v3.0")
    out = tmp_path / "out"
    first = edit_inline(src, out, drop=(1,))
    assert first.ok, first.failures
    victim = out / f"videos/{CAMS[0]}/chunk-000/file-000.mp4"
    whole = victim.read_bytes()
    victim.write_bytes(whole[:-100])
    (out / "meta/info.json").unlink()  # as a run killed before its publish left it
    again = edit_inline(src, out, drop=(1,))
    assert again.ok and again.written == 1 and again.kept == first.files - 1, (again.written, again.kept)
    assert victim.read_bytes() == whole
    report = verify_in_process(out, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures[:5]]


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_source_changed_with_size_and_mtime_kept_is_edited_again(version: str, tmp_path: Path) -> None:
    """A source video changed in place between two runs, its size and mtime put back: the rerun edits the output
    file made from it again (as reencode does: the source's fingerprint), keeps the others, and the output is
    what an edit of the changed source writes."""
    src = synth(tmp_path / "src", version)
    out = tmp_path / "out"
    first = edit_inline(src, out, drop=(1,))
    assert first.ok, first.failures
    video = sorted((src / "videos").rglob("*.mp4"))[-1]  # the last episode's (v2.1) or file's (v3.0): kept
    st = video.stat()
    data = bytearray(video.read_bytes())
    middle = len(data) // 2  # inside the packets (the index is at the front: moov first)
    data[middle:middle + 4] = bytes(b ^ 0xFF for b in data[middle:middle + 4])
    with open(video, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (video.stat().st_size, video.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again = edit_inline(src, out, drop=(1,))
    assert again.ok and again.written == 1 and again.kept == first.files - 1, (again.written, again.kept)
    fresh = edit_inline(src, tmp_path / "fresh", drop=(1,))
    assert fresh.ok
    for p in sorted((out / "videos").rglob("*.mp4")):
        assert digest(p) == digest(tmp_path / "fresh" / p.relative_to(out)), p


def test_a_report_write_cut_by_a_kill_leaves_no_temp_file(tmp_path: Path) -> None:
    """The temp file of `prep/edit_report.json` left by a kill during its write is removed by the next run."""
    src = synth(tmp_path / "src", "v2.1")
    out = tmp_path / "out"
    assert edit_inline(src, out, drop=(1,)).ok
    left = atomic.temp_path_for(out / "prep/edit_report.json")
    left.write_text('{"schema": "prep.edit_rep')
    assert edit_inline(src, out, drop=(1,)).ok
    assert not left.exists()
    assert not [p for p in out.rglob("*") if atomic.is_temp_name(p.name)]
