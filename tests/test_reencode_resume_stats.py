"""A resumed (kept) output file takes its image stats from the sidecar saved when it was encoded,
instead of decoding the source again; a sidecar that does not match is ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipeline.stages.reencode as stage
from pipeline.formats import open_dataset
from pipeline.stages.reencode import ReencodeOptions, reencode_unit, reencode_units, stats_sidecar
from pipeline.synth import SynthSpec, write_synthetic


@pytest.fixture
def unit(tmp_path: Path) -> stage.ReencodeUnit:
    src = write_synthetic(tmp_path / "src", SynthSpec(episodes=1, height=240, width=320,
                                                      cameras=("observation.images.cam",)))
    ds, _ = open_dataset(src)
    return next(iter(reencode_units(ds, tmp_path / "out", ReencodeOptions())))


def test_kept_file_reuses_saved_stats(unit: stage.ReencodeUnit, monkeypatch: pytest.MonkeyPatch) -> None:
    first = reencode_unit(unit)
    assert first.status == "encoded", first.reason
    assert stats_sidecar(unit).is_file()

    def no_decode(*_args: object, **_kwargs: object) -> int:
        raise AssertionError("a kept file with saved stats was decoded again")

    monkeypatch.setattr(stage, "filter_frames", no_decode)
    second = reencode_unit(unit)
    assert second.status == "kept", second.reason
    assert [e.stats for e in second.episodes] == [e.stats for e in first.episodes]


def test_mismatched_sidecar_is_redone(unit: stage.ReencodeUnit) -> None:
    """The sidecar says what the output was made from: one that does not match (other settings) means
    the output file is not known to be this source's, so both are redone."""
    first = reencode_unit(unit)
    path = stats_sidecar(unit)
    doc = json.loads(path.read_text())
    doc["key"]["settings"]["crf"] = 99  # stats of other settings must not be reused
    doc["stats"][0]["mean"] = [[[0.0]], [[0.0]], [[0.0]]]
    path.write_text(json.dumps(doc))
    second = reencode_unit(unit)
    assert second.status == "encoded"
    assert [e.stats for e in second.episodes] == [e.stats for e in first.episodes]
    assert json.loads(path.read_text())["key"]["settings"]["crf"] == ReencodeOptions().quality  # rewritten


def test_empty_sidecar_is_recomputed(unit: stage.ReencodeUnit) -> None:
    """The sidecar is renamed into place without fsync: after a power loss it may be empty or cut; the
    output is then not trusted (a kept output needs its sidecar) and is made again, with the same stats."""
    first = reencode_unit(unit)
    path = stats_sidecar(unit)
    for damaged in ("", path.read_text()[:40]):
        path.write_text(damaged)
        again = reencode_unit(unit)
        assert again.status == "encoded", again.reason
        assert [e.stats for e in again.episodes] == [e.stats for e in first.episodes]
        assert json.loads(path.read_text())["stats"] == [e.stats for e in first.episodes]


def _padded(data: bytes, size: int) -> bytes:
    """An mp4 padded to `size` bytes with a trailing `free` box (which demuxers skip)."""
    pad = size - len(data)
    assert pad == 0 or pad >= 8
    return data if pad == 0 else data + pad.to_bytes(4, "big") + b"free" + bytes(pad - 8)


def test_replaced_source_of_the_same_size_and_frames_is_redone(unit: stage.ReencodeUnit, tmp_path: Path) -> None:
    """A source video replaced by other content with the same size in bytes and the same frame count: the
    fingerprint (size, mtime, a hash of three blocks) differs, so the output and its stats are redone."""
    import os

    src = unit.src_root.path / unit.rel  # the unit carries its dataset's Location
    other = write_synthetic(tmp_path / "other", SynthSpec(episodes=1, height=240, width=320, seed=99,
                                                          cameras=("observation.images.cam",)))
    a, b = src.read_bytes(), (other / unit.rel).read_bytes()
    size = max(len(a), len(b)) + 8
    src.write_bytes(_padded(a, size))
    first = reencode_unit(unit)
    assert first.status == "encoded", first.reason
    st = src.stat()
    src.write_bytes(_padded(b, size))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # even the same mtime: the content hash differs
    assert src.stat().st_size == st.st_size
    second = reencode_unit(unit)
    assert second.status == "encoded", second.reason
    assert [e.stats for e in second.episodes] != [e.stats for e in first.episodes]
