"""`prep edit` where the datasets live (issue 34): an s3:// DATASET (and --merge members), an s3:// --out for every
edit (--drop, --merge, --split, --to, --drop-cameras), against a real S3 server (moto) on loopback.

- s3 -> s3, s3 -> local and local -> s3 give the files of local -> local (compared by hash; prep/ aside: its
  records name where the source lives); the source prefix's object list and ETags unchanged; no lock object and
  no incomplete multipart upload left; a rerun keeps every file; no secret in stdout, stderr nor any object;
- a video the edit keeps whole (v2.1: an episode's mp4) is copied server-side when source and output are one
  store: the server counts a CopyObject per kept video and no GET of any source video;
- a run killed mid-way leaves no meta/info.json, and the rerun keeps the finished files and ends byte-identical;
- an --out in, equal to or holding the source prefix, a missing bucket, no credentials, --storage-option with
  a local DATASET: one line, exit 2, nothing written.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support.s3 import S3Server
from support.storage import (
    CAMS,
    hashes_local,
    hashes_s3,
    one_line,
    prep,
    run_child,
    run_local,
    set_env,
    small_pair,
    start_child,
    wait_for,
)

from pipeline.synth import SynthSpec, write_synthetic

SECRET = "prep-edit-secret-5b1f0e9a3c7d4e26"  # the secret key of s3_prep (tests/conftest.py) and the child runs
S3_BUCKETS = ("esrc", "eout")  # made in this module's moto server (the `s3` fixture, tests/conftest.py)


def clean_output(s3: S3Server, url: str, capsys: pytest.CaptureFixture[str], stdout: str, err: str) -> None:
    """What every run into s3 leaves: complete, the lock released, no multipart upload, no secret anywhere."""
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    keys = s3.list_keys(url)
    assert any(k.endswith("/meta/info.json") for k in keys), keys
    assert not any(k.endswith("/prep/output.lock") for k in keys), keys
    assert s3.multipart_uploads(bucket) == []
    for key in keys:
        assert SECRET.encode() not in s3.get_bytes(f"s3://{bucket}/{key}"), key
    assert SECRET not in stdout + err


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # v3.0: a keyframe where each episode starts (gop = episode length): a drop cuts exactly, --to v2.1 too
    return small_pair(tmp_path_factory.mktemp("small-e"), cameras=CAMS, frames=30, episodes=4, v30_gop=30)


@pytest.fixture(scope="module")
def s3(s3: S3Server, small: dict[str, Path]) -> S3Server:
    """tests/conftest.py's server, both datasets uploaded to s3://esrc/ds/<version>."""
    for version, root in small.items():
        s3.upload_tree(root, f"s3://esrc/ds/{version}")
    return s3


def local_edit(out: Path, *args: str) -> dict[str, str]:
    """`prep edit ARGS --out OUT` locally: OUT's files but prep/, hashed."""
    return hashes_local(run_local("edit", *args, out=out))


# ---- every direction gives the local bytes ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v21", "v30"])
@pytest.mark.parametrize("direction", ["s3-s3", "s3-local", "local-s3"])
def test_edit_drop_equals_local(version: str, direction: str, small: dict[str, Path], s3: S3Server, s3_prep: S3Server,
                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    want = local_edit(tmp_path / "ref", str(small[version]), "--drop", "1")
    src_url = f"s3://esrc/ds/{version}"
    before = s3.snapshot(src_url)
    src = src_url if direction.startswith("s3") else str(small[version])
    out_url = f"s3://eout/drop/{version}-{direction}"
    out = out_url if direction.endswith("s3") else str(tmp_path / "out")
    code, stdout, err = prep(capsys, "edit", src, "--drop", "1", "--out", out, "--backend", "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    assert f"source    {src}" in stdout and f"output    {out}" in stdout, stdout
    got = hashes_s3(s3, out_url) if direction.endswith("s3") else hashes_local(Path(out))
    assert got == want
    assert s3.snapshot(src_url) == before  # the source prefix: same objects, same ETags
    if direction.endswith("s3"):
        clean_output(s3, out_url, capsys, stdout, err)
    assert SECRET not in stdout + err
    again = prep(capsys, "edit", src, "--drop", "1", "--out", out, "--backend", "inline")
    assert again[0] == 0 and " 0 written" in again[1], again  # resumed: every file kept
    assert s3.snapshot(src_url) == before


def test_kept_videos_are_copied_server_side(small: dict[str, Path], s3: S3Server, s3_prep: S3Server, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--drop-cameras on a v2.1 dataset keeps each other camera's episode mp4 whole: within one store (one endpoint
    and bucket, as `Location.same_store` says) it is a CopyObject, and no byte of a source video is read (the
    copy's checks read the copy)."""
    want = local_edit(tmp_path / "ref", str(small["v21"]), "--drop-cameras", CAMS[1], "--drop", "2")
    src_url, out_url = "s3://esrc/ds/v21", "s3://esrc/cameras/v21"
    before = s3.snapshot(src_url)
    s3.reset_stats()
    code, stdout, err = prep(capsys, "edit", src_url, "--drop-cameras", CAMS[1], "--drop", "2", "--out", out_url,
                             "--backend", "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    requests = s3.requests()
    assert hashes_s3(s3, out_url) == want
    assert s3.snapshot(src_url) == before
    clean_output(s3, out_url, capsys, stdout, err)
    copies = [r for r in requests if r.op == "CopyObject" and r.path.endswith(".mp4")]
    kept = [rel for rel in want if rel.endswith(".mp4")]
    assert len(kept) == 3 and len(copies) == len(kept), [r.path for r in copies]
    assert all(r.path.startswith("/esrc/cameras/v21/videos/") for r in copies)
    source_video_gets = [r for r in requests if r.op == "GetObject" and r.path.startswith("/esrc/ds/v21/videos/")]
    assert source_video_gets == []  # not downloaded, not uploaded: copied by the server
    assert not any(r.op in ("PutObject", "UploadPart") and r.path.endswith(".mp4") for r in requests)


# ---- merge, split, --to with objects on both sides ----------------------------------------------------------------


def test_merge_two_s3_datasets_into_s3(small: dict[str, Path], s3: S3Server, s3_prep: S3Server, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    second = write_synthetic(tmp_path / "second", SynthSpec(version="v2.1", episodes=2, height=96, width=128,
                                                            cameras=CAMS, frames=30, seed=7))
    s3.upload_tree(second, "s3://esrc/merge/second")
    want = local_edit(tmp_path / "ref", "--merge", str(small["v21"]), str(second))
    before = {**s3.snapshot("s3://esrc/ds/v21"), **s3.snapshot("s3://esrc/merge/second")}
    out_url = "s3://eout/merged"
    code, stdout, err = prep(capsys, "edit", "--merge", "s3://esrc/ds/v21", "s3://esrc/merge/second", "--out",
                             out_url, "--backend", "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    assert "merged    s3://esrc/ds/v21, s3://esrc/merge/second" in stdout, stdout
    assert hashes_s3(s3, out_url) == want
    assert {**s3.snapshot("s3://esrc/ds/v21"), **s3.snapshot("s3://esrc/merge/second")} == before
    clean_output(s3, out_url, capsys, stdout, err)


def test_split_into_s3_prefixes(small: dict[str, Path], s3: S3Server, s3_prep: S3Server, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--split", "train=0.5", "val=0.5", "--seed", "3")
    local_edit(tmp_path / "ref", str(small["v30"]), *args)
    before = s3.snapshot("s3://esrc/ds/v30")
    out_url = "s3://eout/split/v30"
    code, stdout, err = prep(capsys, "edit", "s3://esrc/ds/v30", *args, "--out", out_url, "--backend", "inline")
    assert code == 0 and stdout.count("verify    PASSED") == 2, stdout + err
    for part in ("train", "val"):
        assert hashes_s3(s3, f"{out_url}/{part}") == hashes_local(tmp_path / "ref" / part), part
        clean_output(s3, f"{out_url}/{part}", capsys, stdout, err)
    assert {k.split("/")[2] for k in s3.list_keys(out_url)} == {"train", "val"}
    assert s3.snapshot("s3://esrc/ds/v30") == before
    again = prep(capsys, "edit", "s3://esrc/ds/v30", *args, "--out", out_url, "--backend", "inline")
    assert again[0] == 0 and again[1].count(" 0 written") == 2, again


def test_to_v30_from_s3_into_s3(small: dict[str, Path], s3: S3Server, s3_prep: S3Server, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--drop", "0", "--to", "v3.0")
    want = local_edit(tmp_path / "ref", str(small["v21"]), *args)
    before = s3.snapshot("s3://esrc/ds/v21")
    out_url = "s3://eout/to/v30"
    code, stdout, err = prep(capsys, "edit", "s3://esrc/ds/v21", *args, "--out", out_url, "--backend", "inline")
    assert code == 0 and "converted to v3.0" in stdout and "verify    PASSED" in stdout, stdout + err
    assert hashes_s3(s3, out_url) == want
    keys = s3.list_keys(out_url)
    assert not any("/prep/edited/" in k for k in keys), keys  # the staged edit removed
    assert any(k.endswith("/prep/edit_report.json") for k in keys), keys
    assert s3.snapshot("s3://esrc/ds/v21") == before
    clean_output(s3, out_url, capsys, stdout, err)


def test_drop_failed_takes_a_report_of_the_s3_dataset(s3: S3Server, s3_prep: S3Server, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A `prep verify --out REPORT` of the s3 dataset is its report (the fingerprint is taken through the store);
    one of another dataset is refused."""
    report = tmp_path / "r.json"
    code, stdout, err = prep(capsys, "verify", "s3://esrc/ds/v21", "--out", str(report), "--backend", "inline")
    assert code == 0, stdout + err
    out_url = "s3://eout/dropfailed/v21"
    code, stdout, err = prep(capsys, "edit", "s3://esrc/ds/v21", "--drop-failed", str(report), "--drop", "0",
                             "--out", out_url, "--backend", "inline")
    assert code == 0 and "verify    PASSED" in stdout, stdout + err
    line = one_line(*prep(capsys, "edit", "s3://esrc/ds/v30", "--drop-failed", str(report), "--out",
                          str(tmp_path / "o"), "--backend", "inline"))
    assert "--drop-failed" in line and "another dataset" in line, line


# ---- refusals: one line, exit 2, nothing written --------------------------------------------------------------


@pytest.mark.parametrize("where", ["inside", "same", "holding"])
def test_an_output_in_the_source_prefix_is_refused(where: str, s3: S3Server, s3_prep: S3Server,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://esrc/ds/v21"
    out = {"inside": f"{src_url}/out", "same": src_url, "holding": "s3://esrc/ds"}[where]
    before = s3.snapshot("s3://esrc/")
    line = one_line(*prep(capsys, "edit", src_url, "--drop", "1", "--out", out, "--backend", "inline"))
    expect = "contains the source" if where == "holding" else "is the source or inside it"
    assert expect in line, line
    assert s3.snapshot("s3://esrc/") == before
    merged = one_line(*prep(capsys, "edit", "--merge", src_url, "s3://esrc/ds/v30", "--out", f"{src_url}/m",
                            "--backend", "inline"))
    assert "is the source or inside it" in merged, merged
    assert s3.snapshot("s3://esrc/") == before


def test_bad_s3_input_is_one_line(small: dict[str, Path], s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    set_env(monkeypatch, s3.env(client="prep"))
    url = "s3://no-such-bucket/ds"
    for args in (("edit", url, "--drop", "1", "--out", str(tmp_path / "o")),
                 ("edit", "--merge", str(small["v21"]), url, "--out", str(tmp_path / "o")),
                 ("edit", str(small["v21"]), "--drop", "1", "--split", "a=0.5", "b=0.5", "--out", url)):
        line = one_line(*prep(capsys, *args, "--backend", "inline"))
        assert url in line and "bucket 'no-such-bucket' not found" in line, line
    line = one_line(*prep(capsys, "edit", str(small["v21"]), "--drop", "1", "--out", str(tmp_path / "o"),
                          "--storage-option", "anon=true", "--backend", "inline"))
    assert "--storage-option applies to object-store URLs" in line, line
    line = one_line(*prep(capsys, "edit", "s3://esrc/ds/v21", "--drop", "1", "--out", str(tmp_path / "o"),
                          "--storage-option", "secret_access_key=x", "--backend", "inline"))
    assert "credentials are never options" in line, line
    env = s3.env(client="prep")
    set_env(monkeypatch, {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    line = one_line(*prep(capsys, "edit", "s3://esrc/ds/v21", "--drop", "1", "--to", "v3.0", "--out",
                          str(tmp_path / "o"), "--backend", "inline"))
    assert "s3://esrc/ds/v21" in line and "no credentials found" in line, line
    assert not (tmp_path / "o").exists()
    assert not s3.list_keys("s3://eout/never")


def test_a_storage_option_names_the_source_endpoint(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The environment names a dead endpoint; --storage-option endpoint_url= the live one, for the source."""
    from support.s3 import refusing_endpoint

    want = local_edit(tmp_path / "ref", str(small["v30"]), "--drop", "3")
    with refusing_endpoint() as dead:
        set_env(monkeypatch, {**s3.env(client="prep"), "AWS_ENDPOINT_URL": dead})
        line = one_line(*prep(capsys, "edit", "s3://esrc/ds/v30", "--drop", "3", "--out", str(tmp_path / "dead"),
                              "--backend", "inline"))
        assert f"cannot reach the object store at {dead}" in line, line
        code, stdout, err = prep(capsys, "edit", "s3://esrc/ds/v30", "--drop", "3", "--out", str(tmp_path / "out"),
                                 "--backend", "inline", "--storage-option", f"endpoint_url={s3.endpoint}")
    assert code == 0, stdout + err
    assert hashes_local(tmp_path / "out") == want


# ---- killed, then resumed ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def longer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 episodes x 2 cameras: enough files to be killed half-way."""
    return write_synthetic(tmp_path_factory.mktemp("longer-e") / "v21",
                           SynthSpec(version="v2.1", episodes=40, height=96, width=128, frames=30, cameras=CAMS))


@pytest.mark.slow
def test_killed_edit_into_s3_resumes_byte_identical(longer: Path, s3: S3Server, tmp_path: Path) -> None:
    want = local_edit(tmp_path / "ref", str(longer), "--drop", "5")
    src_url, out_url = "s3://esrc/longer/v21", "s3://eout/killed/v21"
    s3.upload_tree(longer, src_url)
    before = s3.snapshot(src_url)
    args = ("edit", src_url, "--drop", "5", "--out", out_url, "--backend", "inline")
    log = tmp_path / "first.log"
    proc = start_child(s3, *args, log=log, secret=SECRET)
    videos = lambda: [k for k in s3.list_keys(out_url) if k.endswith(".mp4")]  # noqa: E731
    try:
        wait_for(lambda: len(videos()) >= 8 or proc.poll() is not None, interval=0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = len(videos())
    assert 8 <= done < 78, f"{done} videos were finished when the run was killed: the test proves nothing\n" \
                           + log.read_text()[-2000:]
    assert not any(k.endswith("meta/info.json") for k in s3.list_keys(out_url))  # never complete before the end
    again = run_child(s3, *args, secret=SECRET)
    assert again.returncode == 0 and "verify    PASSED" in again.stdout, again.stdout + again.stderr
    kept = int(again.stdout.split(" kept")[0].rsplit(", ", 1)[1])
    assert kept >= done - 2, again.stdout  # the file(s) being copied when killed may be written again
    assert hashes_s3(s3, out_url) == want
    assert s3.snapshot(src_url) == before
    assert s3.multipart_uploads("eout") == [] and SECRET not in again.stdout + again.stderr
