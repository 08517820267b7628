"""Re-encode into another format and corpora where they live (issue 34): `prep reencode --format` and the corpus
commands with s3:// sources and outputs, against a real S3 server (moto) on loopback.

- `reencode --format` s3 -> s3, local -> s3 and s3 -> local give the bytes of local -> local (every file hashed),
  meta/info.json present, no staged copy, lock or multipart upload left, the source's objects and ETags unchanged;
- a corpus of two datasets (one in s3, one local) is scanned, verified and re-encoded into s3: each dataset's output
  complete, the corpus files beside them, the source bucket unchanged; the corpus manifest validates;
- a corpus re-encode into s3 killed mid-way resumes and ends byte-identical to the local corpus re-encode;
- what a corpus cannot do with object storage yet is one line, exit 2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.s3 import S3Server
from support.storage import prep, set_env

from pipeline.synth import SynthSpec, write_synthetic

REPO = Path(__file__).resolve().parents[1]
CAMS = ("observation.images.top", "observation.images.wrist")


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.blake2b(data, digest_size=16).hexdigest() for rel, data in files.items()}


def s3_files(s3: S3Server, url: str, *, skip_prep: bool = True) -> dict[str, str]:
    """Every object below `url` (but prep's own folders): {relative key: hash}."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    out = {}
    for key in s3.list_keys(url):
        rel = key[len(prefix) + 1:] if prefix else key
        if skip_prep and (rel.startswith("prep/") or "/prep/" in rel):
            continue
        out[rel] = s3.get_bytes(f"s3://{bucket}/{key}")
    return digests(out)


def local_files(root: Path, *, skip_prep: bool = True) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not (skip_prep and "prep" in p.relative_to(root).parts):
            out[rel] = p.read_bytes()
    return digests(out)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("small-c")
    return {"v21": write_synthetic(base / "v21", SynthSpec(version="v2.1", episodes=3, height=96, width=128,
                                                           cameras=CAMS, frames=30)),
            "v30": write_synthetic(base / "v30", SynthSpec(version="v3.0", episodes=3, episodes_per_file=2,
                                                           height=96, width=128, cameras=CAMS, frames=30))}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        server.make_bucket("csrc")
        server.make_bucket("cout")
        yield server


def run_local(*args: str) -> None:
    from pipeline.cli import main

    assert main([*args, "--backend", "inline", "--no-progress"]) == 0


# ---- reencode --format where the data lives ------------------------------------------------------------------

TO = {"v21": "v3.0", "v30": "v2.1"}


@pytest.fixture(scope="module")
def format_reference(small: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    base = tmp_path_factory.mktemp("ref-format")
    out = {}
    for version, src in small.items():
        run_local("reencode", str(src), "--dst", "64", "--format", TO[version], "--out", str(base / version))
        out[version] = local_files(base / version)
    return out


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
    got = s3_files(s3, out_url) if direction.endswith("s3") else local_files(Path(out))
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
