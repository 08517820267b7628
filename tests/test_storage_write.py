"""Writing datasets where they live (issue 34, the write side): `prep reencode` and `prep convert` with s3://
sources and outputs against a real S3 server (moto) on loopback, with every promise prep makes on a local disk.

- s3 -> s3, local -> s3 and s3 -> local give the bytes of local -> local, for reencode, convert and edit (v2.1 and
  v3.0; keys with a space and non-ASCII), meta/info.json present; the source prefix's objects and ETags
  unchanged; no lock object and no incomplete multipart upload left; `prep verify` passes the output where it
  lies;
- an --out inside (or holding) the source prefix, or a prefix another command started, is refused: exit 2, one
  line, nothing written;
- a run killed mid-way leaves no meta/info.json, and the rerun keeps the finished files and ends byte-identical;
- two writers on one output prefix: the second is refused naming the first (a conditional-create lock);
- a killed run's incomplete multipart upload below the output is aborted by the rerun;
- no secret in stdout, stderr, nor any object prep wrote.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support.s3 import S3Server
from support.storage import (
    CAMS_U,
    LONGER,
    local_files,
    prep,
    run_child,
    run_local,
    s3_files,
    set_env,
    small_pair,
    start_child,
    wait_for,
)

from pipeline.synth import write_synthetic

pytestmark = [pytest.mark.slow]

SECRET = "prep-write-secret-0c7d51a2e9b64f18"
PREFIX = "ds one/ünï"
S3_BUCKETS = ("wsrc", "wout")  # made in this module's moto server (the `s3` fixture, tests/conftest.py)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # v3.0: a keyframe where each episode starts (gop = episode length): convert can cut it to v2.1
    return small_pair(tmp_path_factory.mktemp("small-w"), cameras=CAMS_U, frames=45, v30_gop=45)


@pytest.fixture(scope="module")
def reference(small: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """local -> local, the bytes every other direction must give."""
    base = tmp_path_factory.mktemp("ref")
    return {version: local_files(run_local("reencode", "--src", str(src), "--dst", "64", out=base / version))
            for version, src in small.items()}


# ---- every direction gives the local bytes ---------------------------------------------------------------


@pytest.mark.parametrize("version", ["v21", "v30"])
@pytest.mark.parametrize("direction", ["s3-s3", "local-s3", "s3-local"])
def test_reencode_into_and_out_of_s3_equals_local(version: str, direction: str, small: dict[str, Path],
                                                  s3: S3Server, reference: dict[str, dict[str, bytes]],
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src_url = f"s3://wsrc/{PREFIX}/{version}-{direction}"
    s3.upload_tree(small[version], src_url)
    before = s3.snapshot(src_url)
    set_env(monkeypatch, {**s3.env(client="prep"), "AWS_SECRET_ACCESS_KEY": SECRET})
    src = src_url if direction.startswith("s3") else str(small[version])
    out_url = f"s3://wout/{PREFIX}/{version}-{direction}"
    out = out_url if direction.endswith("s3") else str(tmp_path / "out")
    code, stdout, err = prep(capsys, "reencode", src, "--dst", "64", "--out", out, "--backend", "inline")
    assert code == 0, stdout + err
    assert f"output    {out}" in stdout and "9 encoded" not in stdout  # 6 files: 3 episodes x 2 cameras
    got = s3_files(s3, out_url) if direction.endswith("s3") else local_files(Path(out))
    assert sorted(got) == sorted(reference[version])
    for rel, data in reference[version].items():
        assert got[rel] == data, rel
    assert s3.snapshot(src_url) == before  # the source prefix: same objects, same ETags
    if direction.endswith("s3"):
        keys = s3.list_keys(out_url)
        assert any(k.endswith("/meta/info.json") for k in keys)
        assert not any(k.endswith("/prep/output.lock") for k in keys), keys  # released
        assert s3.multipart_uploads("wout") == []
        for key in keys:
            assert SECRET.encode() not in s3.get_bytes(f"s3://wout/{key}"), key
        v_code, v_out, v_err = prep(capsys, "verify", out_url, "--out", str(tmp_path / "v.json"), "--backend",
                                    "inline")
        assert v_code == 0 and "PASSED" in v_out, v_out + v_err
    assert SECRET not in stdout + err


@pytest.mark.parametrize("version", ["v21", "v30"])
@pytest.mark.parametrize("direction", ["s3-s3", "local-s3", "s3-local"])
def test_convert_into_and_out_of_s3_equals_local(version: str, direction: str, small: dict[str, Path],
                                                 s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    to = "v3.0" if version == "v21" else "v2.1"
    ref = tmp_path / "ref"
    code, stdout, err = prep(capsys, "convert", str(small[version]), "--to", to, "--out", str(ref), "--backend",
                             "inline")
    assert code == 0, stdout + err
    src_url = f"s3://wsrc/{PREFIX}/convert-{version}-{direction}"
    s3.upload_tree(small[version], src_url)
    before = s3.snapshot(src_url)
    set_env(monkeypatch, {**s3.env(client="prep"), "AWS_SECRET_ACCESS_KEY": SECRET})
    src = src_url if direction.startswith("s3") else str(small[version])
    out_url = f"s3://wout/{PREFIX}/convert-{version}-{direction}"
    out = out_url if direction.endswith("s3") else str(tmp_path / "out")
    code, stdout, err = prep(capsys, "convert", src, "--to", to, "--out", out, "--backend", "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    got = s3_files(s3, out_url) if direction.endswith("s3") else local_files(Path(out))
    want = local_files(ref)
    assert sorted(got) == sorted(want)
    for rel, data in want.items():
        assert got[rel] == data, rel
    assert s3.snapshot(src_url) == before
    if direction.endswith("s3"):
        keys = s3.list_keys(out_url)
        assert not any(k.endswith("/prep/output.lock") for k in keys) and s3.multipart_uploads("wout") == []
        for key in keys:
            assert SECRET.encode() not in s3.get_bytes(f"s3://wout/{key}"), key
    assert SECRET not in stdout + err
    again = prep(capsys, "convert", src, "--to", to, "--out", out, "--backend", "inline")
    assert again[0] == 0 and " 0 written" in again[1], again  # resumed: every file kept


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_edit_into_s3_equals_local(version: str, small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ref = tmp_path / "ref"
    code, stdout, err = prep(capsys, "edit", str(small[version]), "--drop", "1", "--out", str(ref), "--backend",
                             "inline")
    assert code == 0, stdout + err
    set_env(monkeypatch, {**s3.env(client="prep"), "AWS_SECRET_ACCESS_KEY": SECRET})
    out_url = f"s3://wout/{PREFIX}/edit-{version}"
    code, stdout, err = prep(capsys, "edit", str(small[version]), "--drop", "1", "--out", out_url, "--backend",
                             "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    got, want = s3_files(s3, out_url), local_files(ref)
    assert sorted(got) == sorted(want)
    for rel, data in want.items():
        assert got[rel] == data, rel
    keys = s3.list_keys(out_url)
    assert not any(k.endswith("/prep/output.lock") for k in keys) and s3.multipart_uploads("wout") == []
    assert SECRET not in stdout + err
    again = prep(capsys, "edit", str(small[version]), "--drop", "1", "--out", out_url, "--backend", "inline")
    assert again[0] == 0 and " 0 written" in again[1], again  # resumed: every file kept


@pytest.mark.parametrize("args", [["reencode", "s3://wsrc/any", "--dst", "64", "--root", "ROOT", "--out", "OUT"]])
def test_what_object_storage_does_not_take_is_one_line(args: list[str], small: dict[str, Path], s3: S3Server,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    set_env(monkeypatch, s3.env(client="prep"))
    args = [str(tmp_path / "out") if a == "OUT" else str(small["v21"]) if a == "LOCAL" else
            str(tmp_path) if a == "ROOT" else a for a in args]
    from pipeline.cli import main

    capsys.readouterr()
    try:
        code = main([*args, "--backend", "inline", "--no-progress"])
    except SystemExit as exc:  # argparse's refusal of an argument
        code = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")
             and not line.startswith(" ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert any(w in lines[0] for w in ("reads local datasets", "object-store output", "for local datasets")), err
    assert not (tmp_path / "out").exists() and not s3.list_keys("s3://wout/to")


def test_a_rerun_into_s3_keeps_every_file(small: dict[str, Path], s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out_url = f"s3://wout/{PREFIX}/rerun"
    set_env(monkeypatch, s3.env(client="prep"))
    first = prep(capsys, "reencode", str(small["v30"]), "--dst", "64", "--out", out_url, "--backend", "inline")
    assert first[0] == 0, first
    before = s3.snapshot(out_url)
    again = prep(capsys, "reencode", str(small["v30"]), "--dst", "64", "--out", out_url, "--backend", "inline")
    assert again[0] == 0 and ": 0 encoded, 4 kept" in again[1], again
    after = s3.snapshot(out_url)
    videos = [k for k in before if "/videos/" in k]
    assert videos and all(after[k] == before[k] for k in videos)  # kept: not put again


# ---- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["inside", "same", "holding", "foreign"])
def test_an_output_in_the_source_or_foreign_is_refused(where: str, small: dict[str, Path], s3: S3Server,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    src_url = f"s3://wsrc/refuse-{where}/ds"
    s3.upload_tree(small["v21"], src_url)
    if where == "foreign":
        s3.put_bytes("s3://wout/foreign/notes.txt", b"someone else's")
    out = {"inside": f"{src_url}/out", "same": src_url, "holding": "s3://wsrc/refuse-holding",
           "foreign": "s3://wout/foreign"}[where]
    before = {**s3.snapshot("s3://wsrc/refuse-"), **s3.snapshot("s3://wout/foreign")}
    set_env(monkeypatch, s3.env(client="prep"))
    code, stdout, err = prep(capsys, "reencode", src_url, "--dst", "64", "--out", out, "--backend", "inline")
    assert code == 2, stdout + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    expect = {"inside": "is the source or inside it", "same": "is the source or inside it",
              "holding": "contains the source", "foreign": "is not a prep reencode output"}[where]
    assert expect in err, err
    assert {**s3.snapshot("s3://wsrc/refuse-"), **s3.snapshot("s3://wout/foreign")} == before


# ---- faults: killed, racing, a dangling multipart upload ---------------------------------------------------


@pytest.fixture(scope="module")
def longer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 episodes x 2 cameras at 240x320: long enough to be killed half-way."""
    return write_synthetic(tmp_path_factory.mktemp("longer") / "v21", LONGER)


def test_killed_run_into_s3_resumes_byte_identical(longer: Path, s3: S3Server, tmp_path: Path) -> None:
    ref = run_local("reencode", str(longer), "--dst", "64", out=tmp_path / "ref")
    out_url = "s3://wout/killed/ds"
    proc = start_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend", "inline",
                       log=tmp_path / "first.log", secret=SECRET)
    videos = lambda: [k for k in s3.list_keys(out_url) if k.endswith(".mp4")]  # noqa: E731
    try:
        assert wait_for(lambda: len(videos()) >= 4 or proc.poll() is not None), (tmp_path / "first.log").read_text()
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = len(videos())
    assert 4 <= done < 24, f"{done} files were finished when the run was killed: the test proves nothing"
    assert not any(k.endswith("meta/info.json") for k in s3.list_keys(out_url))  # never complete before the end
    again = run_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend", "inline",
                      secret=SECRET)
    assert again.returncode == 0, again.stdout + again.stderr
    kept = int(again.stdout.split(" kept")[0].rsplit(", ", 1)[1])
    assert kept >= done - 2, again.stdout  # the file(s) being put when killed may be written again
    assert s3_files(s3, out_url) == local_files(ref)
    assert s3.multipart_uploads("wout") == [] and SECRET not in again.stdout + again.stderr


def test_two_writers_on_one_prefix_the_second_is_refused(longer: Path, s3: S3Server, tmp_path: Path) -> None:
    out_url = "s3://wout/racing/ds"
    first = start_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend", "inline",
                        log=tmp_path / "first.log", secret=SECRET)
    try:
        assert wait_for(lambda: any(k.endswith("prep/output.lock") for k in s3.list_keys(out_url))
                        or first.poll() is not None), (tmp_path / "first.log").read_text()
        os.killpg(first.pid, signal.SIGSTOP)  # held while the second tries: it cannot end first
        try:
            second = run_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend",
                               "inline", secret=SECRET, timeout=300)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "in use by another prep run" in second.stderr and f"pid {first.pid}" in second.stderr, second.stderr
        assert f"delete the lock file {out_url}/" in second.stderr, second.stderr  # the URL as given, not s3:/
        assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    keys = s3.list_keys(out_url)
    assert any(k.endswith("meta/info.json") for k in keys) and not any(k.endswith("output.lock") for k in keys)


def test_a_killed_runs_multipart_upload_is_aborted(small: dict[str, Path], s3: S3Server,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out_url = f"s3://wout/{PREFIX}/multipart"
    set_env(monkeypatch, s3.env(client="prep"))
    first = prep(capsys, "reencode", str(small["v21"]), "--dst", "64", "--out", out_url, "--backend", "inline")
    assert first[0] == 0, first
    key = f"{PREFIX}/multipart/videos/chunk-000/observation.images.top/episode_000009.mp4"
    s3.client.create_multipart_upload(Bucket="wout", Key=key)  # what a run killed mid-upload leaves
    sibling = f"{PREFIX}/multipart_b/videos/episode_000000.mp4"  # another output's upload, in flight: not ours
    s3.client.create_multipart_upload(Bucket="wout", Key=sibling)
    assert sorted(k for k, _ in s3.multipart_uploads("wout")) == sorted([key, sibling])
    again = prep(capsys, "reencode", str(small["v21"]), "--dst", "64", "--out", out_url, "--backend", "inline")
    assert again[0] == 0, again
    assert [k for k, _ in s3.multipart_uploads("wout")] == [sibling]


def test_a_corpus_reencode_reads_an_s3_dataset_beside_a_local_one(small: dict[str, Path], s3: S3Server,
                                                                  reference: dict[str, dict[str, bytes]],
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://wsrc/corpus/remote_v30"
    s3.upload_tree(small["v30"], src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    out = tmp_path / "out"
    code, stdout, err = prep(capsys, "reencode", src_url, str(small["v21"]), "--dst", "64", "--out", str(out),
                             "--backend", "inline")
    assert code == 0, stdout + err
    assert local_files(out / "remote_v30") == reference["v30"]
    assert local_files(out / "v21") == reference["v21"]


def test_ctrl_c_into_s3_names_the_url_and_the_rerun_finishes(longer: Path, s3: S3Server, tmp_path: Path) -> None:
    out_url = "s3://wout/interrupted/ds"
    log = tmp_path / "first.log"
    proc = start_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend", "inline", log=log,
                       secret=SECRET)
    try:
        assert wait_for(lambda: len([k for k in s3.list_keys(out_url) if k.endswith(".mp4")]) >= 2
                        or proc.poll() is not None), log.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert rc == 130 and "Traceback" not in text, text[-3000:]
    assert f"finished files are kept in {out_url}" in text, text[-3000:]
    assert not any(k.endswith("/prep/output.lock") for k in s3.list_keys(out_url))  # released on the way out
    again = run_child(s3, "reencode", str(longer), "--dst", "64", "--out", out_url, "--backend", "inline",
                      secret=SECRET)
    assert again.returncode == 0 and " kept" in again.stdout, again.stdout + again.stderr


def test_a_storage_option_names_the_source_endpoint(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                     reference: dict[str, dict[str, bytes]],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The environment names a dead endpoint; `--storage-option endpoint_url=` the live one, for the source (and
    its workers: the option travels in the source's location, never a credential)."""
    from support.s3 import refusing_endpoint

    src_url = "s3://wsrc/option/v21"
    s3.upload_tree(small["v21"], src_url)
    with refusing_endpoint() as dead_url:
        set_env(monkeypatch, {**s3.env(client="prep"), "AWS_ENDPOINT_URL": dead_url})
        dead = prep(capsys, "reencode", src_url, "--dst", "64", "--out", str(tmp_path / "dead"), "--backend",
                    "inline")
        assert dead[0] == 2 and f"cannot reach the object store at {dead_url}" in dead[2], dead
        out = tmp_path / "out"
        code, stdout, err = prep(capsys, "reencode", src_url, "--dst", "64", "--out", str(out), "--backend",
                                 "inline", "--storage-option", f"endpoint_url={s3.endpoint}")
    assert code == 0, stdout + err
    assert local_files(out) == reference["v21"]
