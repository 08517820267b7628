"""Re-encode into another format and corpora where they live (issue 34): `prep reencode --format` and the corpus
commands with s3:// sources and outputs, against a real S3 server (moto) on loopback.

- `reencode --format` s3 -> s3, local -> s3 and s3 -> local give the bytes of local -> local (every file hashed),
  meta/info.json present, no staged copy, lock or multipart upload left, the source's objects and ETags unchanged;
- a corpus of two datasets (one in s3, one local) is scanned, verified and re-encoded into s3: each dataset's output
  complete, the corpus files beside them, the source bucket unchanged; the corpus manifest validates;
- a corpus re-encode into s3 killed mid-way resumes and ends byte-identical to the local corpus re-encode;
- what a corpus cannot do with object storage yet is one line, exit 2 (scan's and verify's reports into s3:
  tests/test_storage_reports.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support.s3 import S3Server
from support.storage import (
    CAMS,
    LONGER,
    hashes_local,
    hashes_s3,
    prep,
    run_child,
    run_local,
    set_env,
    small_pair,
    start_child,
    wait_for,
)

from pipeline.synth import write_synthetic

S3_BUCKETS = ("csrc", "cout")  # made in this module's moto server (the `s3` fixture, tests/conftest.py)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return small_pair(tmp_path_factory.mktemp("small-c"), cameras=CAMS, frames=30)


# ---- reencode --format where the data lives ------------------------------------------------------------------

TO = {"v21": "v3.0", "v30": "v2.1"}


@pytest.fixture(scope="module")
def format_reference(small: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    base = tmp_path_factory.mktemp("ref-format")
    return {version: hashes_local(run_local("reencode", str(src), "--dst", "64", "--format", TO[version],
                                            out=base / version))
            for version, src in small.items()}


@pytest.mark.parametrize("version", ["v21", "v30"])
@pytest.mark.parametrize("direction", ["s3-s3", "local-s3", "s3-local"])
def test_reencode_format_where_it_lives_equals_local(version: str, direction: str, small: dict[str, Path],
                                                     s3: S3Server, format_reference: dict[str, dict[str, str]],
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    src_url = f"s3://csrc/format/{version}-{direction}"
    s3.upload_tree(small[version], src_url)
    before = s3.snapshot(src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    src = src_url if direction.startswith("s3") else str(small[version])
    out_url = f"s3://cout/format/{version}-{direction}"
    out = out_url if direction.endswith("s3") else str(tmp_path / "out")
    code, stdout, err = prep(capsys, "reencode", src, "--dst", "64", "--format", TO[version], "--out", out,
                             "--backend", "inline")
    assert code == 0, stdout + err
    assert f"--- into {TO[version]}" in stdout and "staged    removed" in stdout, stdout
    got = hashes_s3(s3, out_url) if direction.endswith("s3") else hashes_local(Path(out))
    assert got == format_reference[version]  # every file, hashed
    assert s3.snapshot(src_url) == before  # the source: same objects, same ETags
    if direction.endswith("s3"):
        keys = s3.list_keys(out_url)
        assert any(k.endswith("/meta/info.json") for k in keys)
        assert not any("/prep/reencoded/" in k or k.endswith("output.lock") for k in keys), keys
        assert any(k.endswith("/prep/reencode_report.json") for k in keys)  # carried from the staged copy
        assert s3.multipart_uploads("cout") == []
    again = prep(capsys, "reencode", src, "--dst", "64", "--format", TO[version], "--out", out, "--backend", "inline")
    assert again[0] == 0 and "finished by an earlier run" in again[1], again  # a rerun only verifies it


# ---- a corpus: one dataset in s3, one local -------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_reference(small: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The local corpus re-encode of the same two datasets: each output's files, hashed."""
    base = tmp_path_factory.mktemp("ref-corpus")
    remote = base / "remote_v30"  # named as the s3 dataset is named (its prefix's last part)
    import shutil

    shutil.copytree(small["v30"], remote)
    out = run_local("reencode", str(remote), str(small["v21"]), "--dst", "64", out=base / "out")
    return {name: hashes_local(out / name) for name in ("remote_v30", "v21")}


@pytest.mark.slow  # ~25 s: three commands, two re-encodes and two verifies of the corpus
def test_a_corpus_in_s3_and_local_is_scanned_verified_and_reencoded_into_s3(
        small: dict[str, Path], s3: S3Server, corpus_reference: dict[str, dict[str, str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.corpus.manifest import load_corpus_manifest
    from pipeline.storage import parse_file

    src_url = "s3://csrc/corpus/remote_v30"
    s3.upload_tree(small["v30"], src_url)
    before = s3.snapshot("s3://csrc")
    set_env(monkeypatch, s3.env(client="prep"))
    datasets = [src_url, str(small["v21"])]
    code, stdout, err = prep(capsys, "scan", *datasets, "--out", str(tmp_path / "native.json"), "--backend", "inline")
    assert code == 0 and "totals    2 of 2 datasets" in stdout, stdout + err
    code, stdout, err = prep(capsys, "verify", *datasets, "--out", str(tmp_path / "verify"), "--backend", "inline")
    assert code == 0 and "corpus    PASSED: 2 of 2 datasets pass" in stdout, stdout + err
    out = "s3://cout/prepared"
    code, stdout, err = prep(capsys, "reencode", *datasets, "--dst", "64", "--out", out, "--backend", "inline")
    assert code == 0 and "corpus    2 of 2 datasets re-encoded" in stdout, stdout + err
    assert f"prepared  {out}/corpus.json" in stdout, stdout
    keys = {k.removeprefix("prepared/") for k in s3.list_keys(out)}
    for name, files in corpus_reference.items():
        assert f"{name}/meta/info.json" in keys  # each dataset's output complete
        assert hashes_s3(s3, f"{out}/{name}") == files  # and the local corpus re-encode's bytes
    assert {"corpus.json", "corpus.parquet", "corpus.toml", "corpus_reencode.json", "corpus.md"} <= keys
    assert not any(k.startswith("prep/") or k.endswith(".lock") for k in keys), keys  # records and locks gone
    assert s3.snapshot("s3://csrc") == before  # the source bucket: same objects, same ETags
    doc = load_corpus_manifest(parse_file(f"{out}/corpus.json"))  # schema-checked, read where it lives
    assert [r["status"] for r in doc["datasets"]] == ["ok", "ok"]
    assert [r["manifest"] for r in doc["datasets"]] == ["remote_v30/prep/manifest.json", "v21/prep/manifest.json"]
    toml = s3.get_bytes(f"{out}/corpus.toml").decode()
    assert f'source = "{out}/remote_v30"' in toml and f'source = "{out}/v21"' in toml
    # the prepared corpus, verified where it lies through its corpus file
    (tmp_path / "prepared.toml").write_text(toml)
    code, stdout, err = prep(capsys, "verify", "--corpus", str(tmp_path / "prepared.toml"), "--all-intra",
                             "--backend", "inline")
    assert code == 0 and "corpus    PASSED: 2 of 2 datasets pass" in stdout, stdout + err
    # a rerun keeps both datasets
    code, stdout, err = prep(capsys, "reencode", *datasets, "--dst", "64", "--out", out, "--backend", "inline")
    assert code == 0 and stdout.count("0 encoded") == 2, stdout + err


# ---- a corpus re-encode into s3, killed and resumed -------------------------------------------------------------


@pytest.fixture(scope="module")
def longer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 episodes x 2 cameras at 240x320: long enough to be killed half-way."""
    return write_synthetic(tmp_path_factory.mktemp("longer-c") / "long", LONGER)


@pytest.mark.slow
def test_a_killed_corpus_reencode_into_s3_resumes_byte_identical(small: dict[str, Path], longer: Path, s3: S3Server,
                                                                 tmp_path: Path) -> None:
    ref = run_local("reencode", str(small["v21"]), str(longer), "--dst", "64", out=tmp_path / "ref")
    out = "s3://cout/killed-corpus"
    args = ("reencode", str(small["v21"]), str(longer), "--dst", "64", "--out", out, "--backend", "inline")
    log = tmp_path / "first.log"
    proc = start_child(s3, *args, log=log)
    videos = lambda: [k for k in s3.list_keys(f"{out}/long") if k.endswith(".mp4")]  # noqa: E731
    first_done = lambda: any(k.endswith("v21/meta/info.json") for k in s3.list_keys(out))  # noqa: E731
    try:
        assert wait_for(lambda: (first_done() and len(videos()) >= 4) or proc.poll() is not None), log.read_text()
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = len(videos())
    assert 4 <= done < 24, f"{done} files were finished when the run was killed: the test proves nothing"
    keys = s3.list_keys(out)
    assert not any(k.endswith("long/meta/info.json") or k.endswith("/corpus.json") for k in keys)  # not complete
    assert any(k.endswith("prep/corpus.parts/done/v21.json") for k in keys)  # the first dataset's record
    again = run_child(s3, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "complete in an earlier run, kept" in again.stdout, again.stdout  # resumed across datasets
    long_line = next(line for line in again.stdout.splitlines() if line.startswith("ok        long"))
    kept = int(long_line.split(" kept")[0].rsplit(", ", 1)[1])
    assert kept >= done - 2, again.stdout  # the file(s) being put when killed may be written again
    for name in ("v21", "long"):
        assert hashes_s3(s3, f"{out}/{name}") == hashes_local(ref / name), name
    keys = s3.list_keys(out)
    assert not any("/prep/corpus.parts" in k or k.endswith(".lock") for k in keys), keys
    assert s3.multipart_uploads("cout") == []


# ---- what a corpus cannot do with object storage yet: one line, exit 2 ---------------------------------------


@pytest.mark.parametrize("case", ["reencode --format", "reencode --out holding a source",
                                  "reencode --out inside a source"])
def test_what_a_corpus_cannot_do_in_s3_is_one_line(case: str, small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://csrc/refused/remote"
    s3.upload_tree(small["v21"], src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    before = {**s3.snapshot("s3://csrc"), **s3.snapshot("s3://cout/refused")}
    both = [src_url, str(small["v30"])]
    args, expect = {
        "reencode --format": (["reencode", *both, "--dst", "64", "--format", "v3.0", "--out", "s3://cout/refused/f"],
                              "--format with a corpus is not supported"),
        "reencode --out holding a source": (["reencode", *both, "--dst", "64", "--out", "s3://csrc/refused"],
                                            "contains the source"),
        "reencode --out inside a source": (["reencode", *both, "--dst", "64", "--out", f"{src_url}/out"],
                                           "is the source or inside it"),
    }[case]
    code, stdout, err = prep(capsys, *args, "--backend", "inline")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, stdout, err)
    assert expect in lines[0], err
    assert {**s3.snapshot("s3://csrc"), **s3.snapshot("s3://cout/refused")} == before  # nothing written
    assert not any(p.name.startswith("s3:") for p in Path.cwd().iterdir())  # no local folder named after the URL
