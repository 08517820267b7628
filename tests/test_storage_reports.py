"""scan's and verify's reports where the data lives (issue 34): `--out s3://BUCKET/KEY.json` for one dataset,
`--out s3://BUCKET/PREFIX/mix.json` (scan) and `--out s3://BUCKET/PREFIX` (verify) for a corpus, against a real S3
server (moto) on loopback, with the promises a local report keeps.

- scan s3 -> s3 and local -> s3: the manifest and its per-episode table equal the local scan's (but paths and
  times); the manifest is the last object prep writes (the server's request log: only deletes of its records and
  lock follow it); no record or lock left; the source's objects and ETags unchanged; no secret in any object;
- verify's report into s3 equals the local report, its table put before it;
- a corpus scanned into s3 is read by `prep budget --corpus s3://.../mix.json`; a corpus verified into s3 puts each
  dataset's report and corpus_verify.json last;
- a run stopped before it publishes, or killed mid-way (slow), resumes from its records in the store, and equals an
  uninterrupted run;
- two writers on one --out: the second is refused in one line naming the first;
- a corpus file in s3 (`--corpus s3://BUCKET/KEY.toml`) names its datasets beside it in the bucket;
- what is refused is one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.s3 import S3Server
from support.storage import (
    CAMS_U,
    one_line,
    prep,
    run_child,
    same_numbers,
    set_env,
    small_pair,
    start_child,
    wait_for,
)

from pipeline.synth import SynthSpec, write_synthetic

SECRET = "prep-reports-secret-7a1c33e0b5f24d96"
S3_BUCKETS = ("rsrc", "rout")  # made in this module's moto server (the `s3` fixture, tests/conftest.py)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return small_pair(tmp_path_factory.mktemp("small-r"), cameras=CAMS_U, frames=20)


def s3_json(s3: S3Server, url: str) -> Any:
    return json.loads(s3.get_bytes(url))


def s3_table(s3: S3Server, url: str) -> pa.Table:
    return pq.read_table(pa.BufferReader(s3.get_bytes(url)))


def writes_after(s3: S3Server, key: str) -> list[tuple[str, str]]:
    """prep's write requests after its PutObject of `key` (op, path); the key must have been put once."""
    writes = [(r.op, r.path) for r in s3.requests() if r.client == "prep"
              and r.op in ("PutObject", "CopyObject", "CompleteMultipartUpload", "DeleteObject", "UploadPart")]
    puts = [i for i, (op, path) in enumerate(writes) if op == "PutObject" and path == key]
    assert len(puts) == 1, writes
    return writes[puts[0] + 1:]


def budget(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`prep budget ARGS --no-plots` in this process (budget has no --no-progress)."""
    from pipeline.cli import main

    capsys.readouterr()
    code = main(["budget", *args, "--no-plots"])
    out, err = capsys.readouterr()
    return code, out, err


# ---- one dataset ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["s3", "local"])
@pytest.mark.parametrize("version", ["v21", "v30"])
def test_scan_into_s3_equals_the_local_scan_manifest_last(version: str, source: str, small: dict[str, Path],
                                                          s3: S3Server, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    src_url = f"s3://rsrc/scan/{version}-{source}"
    s3.upload_tree(small[version], src_url)
    before = s3.snapshot(src_url)
    set_env(monkeypatch, {**s3.env(client="prep"), "AWS_SECRET_ACCESS_KEY": SECRET})
    src = src_url if source == "s3" else str(small[version])
    code, stdout, err = prep(capsys, "scan", src, "--out", str(tmp_path / "m.json"), "--backend", "inline")
    assert code == 0, stdout + err
    out = f"s3://rout/manifests/{version}-{source}.json"
    s3.reset_stats()
    code, stdout, err = prep(capsys, "scan", src, "--out", out, "--backend", "inline")
    assert code == 0, stdout + err
    assert f"manifest  {out}" in stdout, stdout
    got = s3_json(s3, out)
    assert got["episodes_table"] == f"{version}-{source}.episodes.parquet"
    assert same_numbers(got) == same_numbers(json.loads((tmp_path / "m.json").read_text()))
    table_url = f"s3://rout/manifests/{version}-{source}.episodes.parquet"
    assert s3_table(s3, table_url).equals(pq.read_table(tmp_path / "m.episodes.parquet"))
    # the manifest is the last object written: only its records and its lock are deleted after it
    after = writes_after(s3, f"/rout/manifests/{version}-{source}.json")
    assert after and all(op == "DeleteObject" and ".json.parts" in path for op, path in after), after
    keys = s3.list_keys("s3://rout/manifests")
    assert not any(".parts" in k for k in keys), keys  # records and lock gone
    assert s3.snapshot(src_url) == before  # the source: same objects, same ETags
    for key in keys:
        assert SECRET.encode() not in s3.get_bytes(f"s3://rout/{key}")
    assert SECRET not in stdout + err
    # read where it lies: budget takes it
    code, stdout, err = budget(capsys, "--native", out, "--out", str(tmp_path / "budget"))
    assert code == 0, stdout + err


def test_verify_into_s3_equals_the_local_report_report_last(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://rsrc/verify/v30"
    s3.upload_tree(small["v30"], src_url)
    before = s3.snapshot(src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    code, stdout, err = prep(capsys, "verify", src_url, "--out", str(tmp_path / "v.json"), "--backend", "inline")
    assert code == 0, stdout + err
    out = "s3://rout/reports/v30 report.json"
    s3.reset_stats()
    code, stdout, err = prep(capsys, "verify", src_url, "--out", out, "--backend", "inline")
    assert code == 0 and "PASSED" in stdout and f"report    {out}" in stdout, stdout + err
    assert same_numbers(s3_json(s3, out)) == same_numbers(json.loads((tmp_path / "v.json").read_text()))
    assert s3_table(s3, "s3://rout/reports/v30 report.episodes.parquet").equals(
        pq.read_table(tmp_path / "v.episodes.parquet"))
    after = writes_after(s3, "/rout/reports/v30 report.json")
    assert all(op == "DeleteObject" and ".json.parts" in path for op, path in after), after
    assert sorted(s3.list_keys("s3://rout/reports")) == ["reports/v30 report.episodes.parquet",
                                                         "reports/v30 report.json"]
    assert s3.snapshot(src_url) == before


def test_a_scan_stopped_before_it_publishes_resumes_from_its_records_in_the_store(
        small: dict[str, Path], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import pipeline.jobs.scan as scan_job

    set_env(monkeypatch, s3.env(client="prep"))
    src = str(small["v21"])
    code, stdout, err = prep(capsys, "scan", src, "--out", str(tmp_path / "m.json"), "--backend", "inline",
                             "--batch", "1")
    assert code == 0, stdout + err
    out = "s3://rout/resumed/m.json"

    def stopped(*_a: Any, **_k: Any) -> Any:
        raise KeyboardInterrupt  # as Ctrl-C between the last batch and the publish

    with monkeypatch.context() as m:
        m.setattr(scan_job, "publish_in_store", stopped)
        code, stdout, err = prep(capsys, "scan", src, "--out", out, "--backend", "inline", "--batch", "1")
    assert code != 0
    keys = s3.list_keys("s3://rout/resumed")
    assert "resumed/m.json" not in keys and not any(k.endswith(".lock") for k in keys), keys
    records = [k for k in keys if k.startswith("resumed/m.json.parts/part-")]
    assert len(records) == 3, keys  # one per batch of one episode
    code, stdout, err = prep(capsys, "scan", src, "--out", out, "--backend", "inline", "--batch", "1")
    assert code == 0, stdout + err
    assert "3 file-sets from 3 completion records in s3://rout/resumed/m.json.parts/" in err, err
    assert same_numbers(s3_json(s3, out)) == same_numbers(json.loads((tmp_path / "m.json").read_text()))
    assert sorted(s3.list_keys("s3://rout/resumed")) == ["resumed/m.episodes.parquet", "resumed/m.json"]
    # --fresh ignores them: another stopped run, then a fresh one scans every episode again
    with monkeypatch.context() as m:
        m.setattr(scan_job, "publish_in_store", stopped)
        prep(capsys, "scan", src, "--out", out, "--backend", "inline", "--batch", "1")
    code, stdout, err = prep(capsys, "scan", src, "--out", out, "--backend", "inline", "--fresh")
    assert code == 0 and "completion records" not in err, stdout + err


@pytest.mark.slow  # a subprocess scan of 60 episodes killed mid-way (~7 s, but a busy machine can outrun the kill)
def test_a_killed_scan_into_s3_resumes_from_its_records(s3: S3Server, tmp_path: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    import os
    import signal

    src = write_synthetic(tmp_path_factory.mktemp("many-r") / "many", SynthSpec(
        version="v2.1", episodes=60, height=96, width=128, cameras=CAMS_U[:1], frames=10))
    out = "s3://rout/killed/m.json"
    args = ("scan", str(src), "--out", out, "--backend", "inline", "--batch", "1")
    log = tmp_path / "first.log"
    proc = start_child(s3, *args, log=log)
    records = lambda: [k for k in s3.list_keys("s3://rout/killed") if "/part-" in k]  # noqa: E731
    try:
        wait_for(lambda: len(records()) >= 5 or proc.poll() is not None, interval=0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = len(records())
    keys = s3.list_keys("s3://rout/killed")
    assert 5 <= done < 60 and "killed/m.json" not in keys, (done, keys, log.read_text())
    assert "killed/m.json.parts.lock" in keys  # the killed run's lock: its pid is dead on this host, so taken over
    again = run_child(s3, *args, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "completion records in s3://rout/killed/m.json.parts/" in again.stderr, again.stderr
    ref_args = (*args[:3], str(tmp_path / "ref.json"), *args[4:])  # the same scan into a local manifest
    assert ref_args[2] == "--out"
    ref = run_child(s3, *ref_args, timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert same_numbers(s3_json(s3, out)) == same_numbers(json.loads((tmp_path / "ref.json").read_text()))
    assert s3_table(s3, "s3://rout/killed/m.episodes.parquet").equals(pq.read_table(tmp_path / "ref.episodes.parquet"))
    assert sorted(s3.list_keys("s3://rout/killed")) == ["killed/m.episodes.parquet", "killed/m.json"]


def test_two_writers_on_one_report_the_second_is_refused(small: dict[str, Path], s3: S3Server,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The first writer holds the report's lock (as a run in progress does); the second is refused, naming it."""
    from pipeline.storage import parse_file

    set_env(monkeypatch, s3.env(client="prep"))
    out = "s3://rout/racing/m.json"
    report = parse_file(out)
    assert not isinstance(report, Path)
    with report.store.lock(f"{report.rel}.parts.lock", "the first writer", command="prep scan first --out m.json"):
        for command in ("scan", "verify"):
            line = one_line(*prep(capsys, command, str(small["v30"]), "--out", out, "--backend", "inline"))
            assert "in use by another prep run" in line and "prep scan first" in line, line
        assert sorted(s3.list_keys("s3://rout/racing")) == ["racing/m.json.parts.lock"]  # nothing else written
    code, stdout, err = prep(capsys, "scan", str(small["v30"]), "--out", out, "--backend", "inline")
    assert code == 0, stdout + err  # the lock released: the next writer runs


# ---- a corpus ------------------------------------------------------------------------------------------------


def test_a_corpus_scanned_into_s3_is_budgeted_from_there(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://rsrc/corpus/remote_v30"
    s3.upload_tree(small["v30"], src_url)
    before = s3.snapshot("s3://rsrc/corpus")
    set_env(monkeypatch, s3.env(client="prep"))
    datasets = [src_url, str(small["v21"])]
    code, stdout, err = prep(capsys, "scan", *datasets, "--out", str(tmp_path / "mix.json"), "--backend", "inline")
    assert code == 0, stdout + err
    out = "s3://rout/corpus/mix.json"
    s3.reset_stats()
    code, stdout, err = prep(capsys, "scan", *datasets, "--out", out, "--backend", "inline")
    assert code == 0 and "totals    2 of 2 datasets" in stdout, stdout + err
    assert f"manifest  {out}" in stdout and "report    s3://rout/corpus/mix.md, 5 plots" in stdout, stdout
    keys = {k.removeprefix("corpus/") for k in s3.list_keys("s3://rout/corpus")}
    assert keys == {"mix.json", "mix.parquet", "mix.md", "mix-hours.png", "mix-labels.png", "mix-cameras.png",
                    "mix-lengths.png", "mix-shares.png", "remote_v30.manifest.json",
                    "remote_v30.manifest.episodes.parquet", "v21.manifest.json", "v21.manifest.episodes.parquet"}
    after = writes_after(s3, "/rout/corpus/mix.json")
    assert all(op == "DeleteObject" and ".json.parts" in path for op, path in after), after
    doc = s3_json(s3, out)
    assert [r["manifest"] for r in doc["datasets"]] == ["remote_v30.manifest.json", "v21.manifest.json"]
    assert same_numbers(doc) == same_numbers(json.loads((tmp_path / "mix.json").read_text()))
    assert s3.snapshot("s3://rsrc/corpus") == before
    # budget reads the corpus manifest and its datasets' manifests where they lie: the local corpus's report
    reports = {}
    for name, where in (("local", str(tmp_path / "mix.json")), ("s3", out)):
        code, stdout, err = budget(capsys, "--corpus", where, "--out", str(tmp_path / f"budget-{name}"))
        assert code == 0, stdout + err
        text = (tmp_path / f"budget-{name}" / "report.json").read_text()  # the URL as the folder it mirrors
        reports[name] = json.loads(text.replace("s3://rout/corpus", str(tmp_path)))
    assert reports["s3"]["mixture"] == reports["local"]["mixture"]
    assert reports["s3"]["manifests"] == reports["local"]["manifests"]
    # a rerun keeps both datasets
    code, stdout, err = prep(capsys, "scan", *datasets, "--out", out, "--backend", "inline")
    assert code == 0, stdout + err


def test_a_corpus_verified_into_s3_puts_each_report_and_the_verdicts_last(
        small: dict[str, Path], s3: S3Server, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://rsrc/vcorpus/remote_v30"
    s3.upload_tree(small["v30"], src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    out = "s3://rout/vcorpus"
    s3.reset_stats()
    code, stdout, err = prep(capsys, "verify", src_url, str(small["v21"]), "--out", out, "--backend", "inline")
    assert code == 0 and "corpus    PASSED: 2 of 2 datasets pass" in stdout, stdout + err
    assert f"report    {out}/corpus_verify.json" in stdout and f"report {out}/v21/verify.json" in stdout, stdout
    keys = set(s3.list_keys(out))
    assert keys == {f"vcorpus/{n}/verify{s}" for n in ("remote_v30", "v21") for s in (".json", ".episodes.parquet")} \
        | {"vcorpus/corpus_verify.json"}, keys
    after = writes_after(s3, "/rout/vcorpus/corpus_verify.json")
    assert all(op == "DeleteObject" and "/prep/corpus.parts" in path for op, path in after), after
    doc = s3_json(s3, f"{out}/corpus_verify.json")
    assert doc["verdict"]["passed"] and [d["output"] for d in doc["datasets"]] == [
        f"{out}/remote_v30/verify.json", f"{out}/v21/verify.json"]


def test_a_corpus_file_in_s3_names_its_datasets_beside_it(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`--corpus s3://BUCKET/KEY.toml`: read through the seam; a relative source beside it in the bucket, a URL and a
    local path as they are; scanned into s3 and verified, as the same corpus given locally."""
    s3.upload_tree(small["v30"], "s3://rsrc/cfile/data/v30")
    set_env(monkeypatch, s3.env(client="prep"))
    toml = (f'name = "mixed"\n[[datasets]]\nsource = "data/v30"\nweight = 3\n'
            f'[[datasets]]\nsource = {json.dumps(str(small["v21"]))}\nname = "local21"\n')
    s3.put_bytes("s3://rsrc/cfile/mixed.toml", toml.encode())
    (tmp_path / "mixed.toml").write_text(toml.replace('"data/v30"', '"s3://rsrc/cfile/data/v30"'))
    code, stdout, err = prep(capsys, "scan", "--corpus", "s3://rsrc/cfile/mixed.toml", "--out",
                             "s3://rout/cfile/mixed.json", "--backend", "inline")
    assert code == 0 and "corpus    mixed: 2 datasets (s3://rsrc/cfile/mixed.toml), weights given" in stdout, \
        stdout + err
    doc = s3_json(s3, "s3://rout/cfile/mixed.json")
    assert [(r["name"], r["source"], r["share"]) for r in doc["datasets"]] == [
        ("v30", "s3://rsrc/cfile/data/v30", 0.75), ("local21", str(small["v21"]), 0.25)]
    assert doc["corpus"]["file"] == "s3://rsrc/cfile/mixed.toml"
    code, stdout, err = prep(capsys, "scan", "--corpus", str(tmp_path / "mixed.toml"), "--out",
                             str(tmp_path / "mixed.json"), "--backend", "inline")
    assert code == 0, stdout + err
    local = json.loads((tmp_path / "mixed.json").read_text())
    assert same_numbers(doc["datasets"]) == same_numbers(local["datasets"])
    code, stdout, err = prep(capsys, "verify", "--corpus", "s3://rsrc/cfile/mixed.toml", "--backend", "inline")
    assert code == 0 and "corpus    PASSED: 2 of 2 datasets pass" in stdout, stdout + err


@pytest.mark.parametrize("case", ["missing", "leaves the bucket", "not TOML", "a bucket only"])
def test_a_bad_corpus_file_in_s3_is_one_line(case: str, s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    set_env(monkeypatch, s3.env(client="prep"))
    s3.put_bytes("s3://rsrc/bad/leaves.toml", b'[[datasets]]\nsource = "../../../elsewhere"\n')
    s3.put_bytes("s3://rsrc/bad/junk.toml", b"[[datasets\nsource = \n")
    url, expect = {"missing": ("s3://rsrc/bad/none.toml", "corpus file not found"),
                   "leaves the bucket": ("s3://rsrc/bad/leaves.toml", "dataset 1: source: ../../../elsewhere leaves"),
                   "not TOML": ("s3://rsrc/bad/junk.toml", "cannot read the corpus file"),
                   "a bucket only": ("s3://rsrc", "names a bucket, not a file")}[case]
    line = one_line(*prep(capsys, "scan", "--corpus", url, "--out", "s3://rout/bad/m.json", "--backend", "inline"))
    assert expect in line and (url in line or case == "a bucket only"), line
    assert s3.list_keys("s3://rout/bad") == []


# ---- refusals: one line, exit 2, nothing written ---------------------------------------------------------------


@pytest.mark.parametrize("case", ["scan inside the source", "verify inside the source", "corpus scan inside a source",
                                  "corpus verify inside a source", "corpus verify holding a source", "a bucket only",
                                  "a missing bucket", "slurm records", "credentials in the URL"])
def test_refusals_are_one_line(case: str, small: dict[str, Path], s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    src_url = "s3://rsrc/refused/remote"
    s3.upload_tree(small["v21"], src_url)
    set_env(monkeypatch, s3.env(client="prep"))
    before = {**s3.snapshot("s3://rsrc"), **s3.snapshot("s3://rout")}
    both = [src_url, str(small["v30"])]
    args, expect = {
        "scan inside the source": (["scan", src_url, "--out", f"{src_url}/m.json"], "is the source or inside it"),
        "verify inside the source": (["verify", src_url, "--out", f"{src_url}/meta/v.json"],
                                     "is the source or inside it"),
        "corpus scan inside a source": (["scan", *both, "--out", f"{src_url}/mix.json"], "is the source or inside it"),
        "corpus verify inside a source": (["verify", *both, "--out", f"{src_url}/reports"],
                                          "is the source or inside it"),
        "corpus verify holding a source": (["verify", *both, "--out", "s3://rsrc/refused"], "contains the source"),
        "a bucket only": (["scan", src_url, "--out", "s3://rout"], "names a bucket, not a file"),
        "a missing bucket": (["scan", src_url, "--out", "s3://no-such-bucket/m.json"], "not found"),
        "slurm records": (["scan", src_url, "--out", "s3://rout/m.json", "--cluster", "slurm"],
                          "pass a local --out"),
        "credentials in the URL": (["verify", src_url, "--out", "s3://key:secret@rout/v.json"],
                                   "credentials in a URL"),
    }[case]
    extra = [] if "--cluster" in args else ["--backend", "inline"]
    line = one_line(*prep(capsys, *args, *extra))
    assert expect in line, line
    assert {**s3.snapshot("s3://rsrc"), **s3.snapshot("s3://rout")} == before  # nothing written
    assert not any(p.name.startswith("s3:") for p in Path.cwd().iterdir())  # no local folder named after the URL
