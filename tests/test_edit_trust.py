"""`prep edit` answers only for what it examined (issue 36, the edit and drop-failed defects):

- a `prep verify --out` report drops episodes only from the dataset it was taken of: its fingerprint covers
  every file under meta/ (info.json, the episode metadata) and the files of each episode it failed (size and
  mtime, or their bytes with `prep verify --fingerprint content`); a look-alike whose metadata is byte for byte
  the same but whose failed episode's video is another file, the 224 re-encode, and a copy with another
  robot_type are each refused with one line, exit 2, nothing written;
- the report's episode list is read strictly (an id of another dataset, a float, a string or a bool is
  refused with one line naming it), and a long check name is clipped in the summary;
- v3.0 metadata that gives two episodes the same frames is refused naming the episode and the overlap, with
  or without --reencode-partial, and through --drop-failed (never an output episode holding another's frames);
- v2.1: a kept episode's broken video fails its file (meta/info.json withheld), as v3.0 does;
- an episode index beyond any integer type is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.cli import main
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
RUN = ("--backend", "inline", "--no-progress")
BROKEN_EPISODE = 1


def prep(*args: object) -> subprocess.CompletedProcess[str]:
    return run_prep(*args, timeout=600)


def _video(root: Path, episode: int, cam: str = CAMS[0]) -> Path:
    return root / f"videos/chunk-000/{cam}/episode_{episode:06d}.mp4"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v2.1", episodes=4, frames=12, height=48, width=64, gop=12, cameras=CAMS)
    return write_synthetic(tmp_path_factory.mktemp("trust") / "clean", spec)


@pytest.fixture(scope="module")
def broken(clean: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of `clean` (mtimes kept) whose episode 1 video is cut in half, and its verify report."""
    root = tmp_path_factory.mktemp("trust") / "broken"
    shutil.copytree(clean, root)
    v = _video(root, BROKEN_EPISODE)
    data = v.read_bytes()
    v.write_bytes(data[: len(data) // 2])
    report = root.parent / "r.json"
    assert main(["verify", str(root), "--out", str(report), *RUN]) == 1
    doc = json.loads(report.read_text())
    assert [e["episode"] for e in doc["episodes"] if e["status"] == "failed"] == [BROKEN_EPISODE]
    return root, report


def _refused(src: Path, report: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    assert main(["edit", str(src), "--out", str(out), "--drop-failed", str(report), *extra, *RUN]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists()  # nothing written
    return err


# ---- the report's fingerprint ----------------------------------------------------------------------


def test_the_report_drops_from_its_own_dataset(broken: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    src, report = broken
    assert main(["edit", str(src), "--out", str(tmp_path / "out"), "--drop-failed", str(report), *RUN]) == 0
    assert "1: verify: " in capsys.readouterr().out
    doc = json.loads(report.read_text())
    fp = doc["dataset"]["fingerprint"]
    assert fp["scheme"] == "prep.dataset_identity/1" and fp["files"] == "mtime"
    assert fp["failed_file_count"] == len(CAMS) + 1  # the episode's parquet and both videos


def test_a_look_alike_with_another_video_is_refused(clean: Path, broken: tuple[Path, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Byte-identical metadata (the broken copy changed only a video): the healthy original no longer matches
    its broken twin's report."""
    src, report = broken
    for rel in ("meta/info.json", "meta/episodes.jsonl", "meta/episodes_stats.jsonl", "meta/tasks.jsonl"):
        assert (clean / rel).read_bytes() == (src / rel).read_bytes()
    err = _refused(clean, report, tmp_path / "out", capsys)
    assert "files" in err and "verify this dataset again" in err, err


def test_the_224_output_is_refused(clean: Path, broken: tuple[Path, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    _src, report = broken
    out224 = tmp_path / "clean_224"
    assert main(["reencode", str(clean), "--dst", "224", "--out", str(out224), *RUN]) == 0
    err = _refused(out224, report, tmp_path / "out", capsys)
    assert "another dataset or of other metadata" in err and "meta/info.json" in err, err


def test_another_robot_type_is_refused(broken: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    src, report = broken
    other = tmp_path / "other"
    shutil.copytree(src, other)
    info = json.loads((other / "meta/info.json").read_text())
    info["robot_type"] = "another_robot"
    (other / "meta/info.json").write_text(json.dumps(info, indent=4))
    err = _refused(other, report, tmp_path / "out", capsys)
    assert "another dataset or of other metadata" in err, err


def test_a_replaced_broken_file_is_refused_and_content_mode_sees_bytes(broken: tuple[Path, Path], tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--fingerprint content: a copy of the same bytes (other mtimes) matches; a file of the same size and
    mtime but other bytes does not. The default (size and mtime) refuses a broken file replaced since."""
    src, _report = broken
    copy = tmp_path / "copy"
    shutil.copytree(src, copy, copy_function=shutil.copyfile)  # the same bytes, new mtimes
    report = tmp_path / "rc.json"
    assert main(["verify", str(src), "--out", str(report), "--fingerprint", "content", *RUN]) == 1
    assert json.loads(report.read_text())["dataset"]["fingerprint"]["files"] == "content"
    assert main(["edit", str(copy), "--out", str(tmp_path / "ok"), "--drop-failed", str(report), *RUN]) == 0
    v = _video(copy, BROKEN_EPISODE)
    st = v.stat()
    data = bytearray(v.read_bytes())
    data[-1] ^= 0xFF  # same size, mtime put back
    v.write_bytes(bytes(data))
    os.utime(v, ns=(st.st_atime_ns, st.st_mtime_ns))
    err = _refused(copy, report, tmp_path / "out", capsys)
    assert "bytes" in err, err
    # the default mode: the same copy (new mtimes) is another set of files
    mtime_report = src.parent / "r.json"
    err = _refused(copy, mtime_report, tmp_path / "out2", capsys)
    assert "size and mtime" in err, err


def test_a_report_without_this_fingerprint_is_refused(broken: tuple[Path, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src, report = broken
    doc = json.loads(report.read_text())
    del doc["dataset"]["fingerprint"]  # what an older prep wrote (metadata_digest only)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    err = _refused(src, old, tmp_path / "out", capsys)
    assert "older prep" in err and "prep verify" in err, err


# ---- the report's episode list, strictly -----------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [(99, "99"), (-3, "-3"), (2.0, "2.0"), ("4", "'4'"), (True, "True")])
def test_report_episode_ids_are_strict(value: object, shown: str, broken: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    src, report = broken
    doc = json.loads(report.read_text())
    doc["episodes"].append({**doc["episodes"][BROKEN_EPISODE], "episode": value})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = _refused(src, bad, tmp_path / "out", capsys)
    assert f"episode is {shown}," in err, err


def test_report_values_are_escaped_and_long_check_names_clipped(broken: tuple[Path, Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    src, report = broken
    doc = json.loads(report.read_text())
    doc["episodes"][BROKEN_EPISODE]["status"] = "\x1b[2Jfailed"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = _refused(src, bad, tmp_path / "out", capsys)
    assert "\x1b" not in err and "\\x1b" in err, err

    doc = json.loads(report.read_text())
    doc["episodes"][BROKEN_EPISODE]["checks_failed"] = ["x" * 100_000]
    long = tmp_path / "long.json"
    long.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["edit", str(src), "--out", str(tmp_path / "out2"), "--drop-failed", str(long), *RUN]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) < 300, max(len(line) for line in text.splitlines())
    assert "1: verify: xxx" in text


# ---- overlapping spans (v3.0) ------------------------------------------------------------------------


def _overlapping(root: Path, gop: int) -> Path:
    """Four episodes, three per file; the metadata points episode 2's span at episode 0's frames."""
    spec = SynthSpec(version="v3.0", episodes=4, frames=24, height=48, width=64, gop=gop, cameras=CAMS[:1],
                     episodes_per_file=3)
    write_synthetic(root, spec)
    path = sorted((root / "meta/episodes").glob("*/*.parquet"))[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    pre = f"videos/{CAMS[0]}/"
    rows[2][pre + "from_timestamp"], rows[2][pre + "to_timestamp"] = 0.0, 24 / 30
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    return root


@pytest.mark.parametrize("gop", [12, 10])
def test_overlapping_spans_are_refused_naming_the_episode(gop: int, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = _overlapping(tmp_path / "src", gop)
    for extra in ((), ("--reencode-partial",)):
        out = tmp_path / ("out" + "".join(extra))
        capsys.readouterr()
        assert main(["edit", str(src), "--out", str(out), "--drop", "1", *extra, *RUN]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "episode 2 " in err and "overlaps episode 0's" in err and "--drop 0,2" in err, err
        assert "rerun with --reencode-partial" not in err, err
        assert not out.exists()
    # verify's report, whatever episode of the pair it fails, cannot lead into the loss either
    report = tmp_path / "r.json"
    assert main(["verify", str(src), "--out", str(report), *RUN]) == 1
    err = _refused(src, report, tmp_path / "out3", capsys)
    assert "overlaps episode 0's" in err, err
    # leaving both out is an edit that verifies (GOP 10: episode 1's cut is then off a keyframe)
    partial = ("--reencode-partial",) if gop == 10 else ()
    assert main(["edit", str(src), "--out", str(tmp_path / "ok"), "--drop", "0,2", *partial, *RUN]) == 0


# ---- v2.1: a broken kept video fails its file ---------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"not a video at all\n" * 64])
def test_v21_broken_kept_video_fails_its_file(content: bytes, clean: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    shutil.copytree(clean, src)
    _video(src, 2, CAMS[1]).write_bytes(content)
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["edit", str(src), "--out", str(out), "--drop", "0", *RUN]) == 1
    text = capsys.readouterr().out
    assert ", 1 failed" in text and "0 failed" not in text, text
    assert "episode_000002.mp4" in text, text
    assert not (out / "meta/info.json").exists()  # withheld, as in v3.0
    report = json.loads((out / "prep/edit_report.json").read_text())
    assert report["complete"] is False and len(report["failures"]) == 1


# ---- an index beyond any integer ------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--drop", "--keep"])
def test_a_huge_episode_index_is_one_line(flag: str, clean: Path, tmp_path: Path) -> None:
    r = prep("edit", clean, "--out", tmp_path / "out", flag, "99999999999999999999999", *RUN)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "99999999999999999999999" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["²", "9" * 5000])
def test_a_task_index_no_int_reads_is_one_line(task: str, clean: Path, tmp_path: Path) -> None:
    """`--drop-tasks ²` (a digit int() does not read) and a 5,000-digit index: one line, exit 2, never a
    ValueError traceback."""
    r = prep("edit", clean, "--out", tmp_path / "out", "--drop-tasks", task, *RUN)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "neither a task" in r.stderr and len(r.stderr) < 600, r.stderr
    assert not (tmp_path / "out").exists()
