"""Reading where the data lives (issue 34), the last two commands: `prep budget`'s manifests and
`prep bench dataloader`, against a real S3 server (moto) on loopback and a Hugging Face hub-cache snapshot.

- budget from s3:// manifests gives the report the same local manifests give (report.json figures equal, the
  manifests' names aside), a corpus manifest in s3 reads its datasets' manifests beside it;
- a missing manifest object, a missing bucket, a dead endpoint, an s3 --out: one line naming the URL, exit 2,
  no secret;
- bench dataloader reads an s3:// prefix through the storage seam (each DataLoader worker its own store, ranged
  reads) and a hub snapshot; `--loader lerobot` on s3:// is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_prep
from support.datasets import small_spec
from support.hub import snapshot_of
from support.s3 import S3Server, refusing_endpoint, s3_env
from support.storage import set_env

from pipeline.jobs.scan import scan_dataset
from pipeline.runner import RunConfig, open_engine
from pipeline.schemas import validate
from pipeline.synth import SynthSpec, write_synthetic

SECRET = "prep-budget-secret-3c81d0f6a2e94b17"  # s3_prep's secret key (tests/conftest.py): must never leave the env
S3_BUCKETS = ("man", "data")  # made in this module's moto server (the `s3` fixture, tests/conftest.py)
VOLATILE = {"created_utc", "prep_version"}


def scan_to(root: Path, out: Path) -> Path:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        scan_dataset(root, out, engine)
    return out


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of real `prep scan` manifests (and their per-episode tables): native (v2.1, 48x64, GOP 12),
    prepared (224x224 all-intra), and a corpus of two datasets (`prep scan A B --out corpus/abc.json`)."""
    base = tmp_path_factory.mktemp("budget-s3")
    native = write_synthetic(base / "native", small_spec("v2.1"))
    prepared = write_synthetic(base / "prepared", SynthSpec(version="v2.1", episodes=2, frames=24, height=224,
                                                            width=224, gop=1))
    folder = base / "m"
    folder.mkdir()
    scan_to(native, folder / "native.manifest.json")
    scan_to(prepared, folder / "prepared.manifest.json")
    other = write_synthetic(base / "other", small_spec("v3.0", episodes=3))
    res = run_prep("scan", str(native), str(other), "--out", str(folder / "corpus" / "abc.json"), backend="inline",
                   progress=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return folder


def report_of(out: Path, replace: tuple[str, str] | None = None) -> dict[str, Any]:
    """report.json without what differs between two runs, an s3 URL written as the local folder it mirrors."""
    text = (out / "report.json").read_text(encoding="utf-8")
    if replace is not None:
        text = text.replace(replace[0], replace[1])
    doc = json.loads(text)
    validate(doc, "budget")
    return {k: v for k, v in doc.items() if k not in VOLATILE}


def one_line(res: Any, *must: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and SECRET not in res.stdout + res.stderr
    assert res.stderr.startswith("prep budget: error: ") and res.stderr.count("\n") == 1, res.stderr
    for text in must:
        assert text in res.stderr, (text, res.stderr)
    line: str = res.stderr
    return line


# ---- prep budget ----------------------------------------------------------------------------------------------


def test_budget_from_s3_manifests_equals_local(manifests: Path, s3_prep: S3Server, tmp_path: Path) -> None:
    s3_prep.upload_tree(manifests, "s3://man/m")
    local = run_prep("budget", "--native", str(manifests / "native.manifest.json"), "--prepared",
                     str(manifests / "prepared.manifest.json"), "--out", str(tmp_path / "local"), "--no-plots")
    assert local.returncode == 0, local.stdout + local.stderr
    s3_prep.reset_stats()
    remote = run_prep("budget", "--native", "s3://man/m/native.manifest.json", "--prepared",
                      "s3://man/m/prepared.manifest.json", "--out", str(tmp_path / "s3"), "--no-plots")
    assert remote.returncode == 0, remote.stdout + remote.stderr
    assert SECRET not in remote.stdout + remote.stderr + (tmp_path / "s3" / "report.md").read_text()
    got = report_of(tmp_path / "s3", ("s3://man/m", str(manifests)))
    assert got == report_of(tmp_path / "local")
    assert got["manifests"]["native"]["episodes"] == 7 and got["corpus"]["role"] == "native"
    assert "s3://man/m/native.manifest.json" in (tmp_path / "s3" / "report.md").read_text()
    assert s3_prep.stats_for("prep").puts == 0  # read only
    # the positional DATASET of a prep reencode output: its prep/manifest.json, where it lives
    s3_prep.put_many("s3://man/out/prep", {"manifest.json": (manifests / "prepared.manifest.json").read_bytes()})
    ds = run_prep("budget", "s3://man/out", "--out", str(tmp_path / "ds"), "--no-plots")
    assert ds.returncode == 0, ds.stdout + ds.stderr
    assert report_of(tmp_path / "ds")["manifests"]["prepared"]["path"] == "s3://man/out/prep/manifest.json"


def test_budget_corpus_manifest_in_s3_reads_its_datasets_beside_it(manifests: Path, s3_prep: S3Server,
                                                                   tmp_path: Path) -> None:
    s3_prep.upload_tree(manifests / "corpus", "s3://man/corpora/abc")
    corpus = json.loads((manifests / "corpus" / "abc.json").read_text())
    assert all("/" not in r["manifest"] for r in corpus["datasets"])  # beside it: relative to its folder
    local = run_prep("budget", "--corpus", str(manifests / "corpus" / "abc.json"), "--out", str(tmp_path / "local"),
                     "--no-plots")
    assert local.returncode == 0, local.stdout + local.stderr
    remote = run_prep("budget", "--corpus", "s3://man/corpora/abc/abc.json", "--out", str(tmp_path / "s3"),
                      "--no-plots")
    assert remote.returncode == 0, remote.stdout + remote.stderr
    got = report_of(tmp_path / "s3", ("s3://man/corpora/abc", str(manifests / "corpus")))
    assert got == report_of(tmp_path / "local")
    assert len(got["mixture"]["datasets"]) == 2 and got["manifests"]["native"]["episodes"] == 7 + 3
    # a dataset manifest named outside the bucket is refused, in one line
    corpus["datasets"][0]["manifest"] = "../../../elsewhere.manifest.json"
    s3_prep.put_many("s3://man/corpora/bad", {"abc.json": json.dumps(corpus).encode()})
    one_line(run_prep("budget", "--corpus", "s3://man/corpora/bad/abc.json", "--out", str(tmp_path / "bad")),
             "s3://man/corpora/bad/abc.json", "outside s3://man")


@pytest.mark.parametrize("case", ["missing object", "missing bucket", "s3 --out", "option for a local file"])
def test_budget_bad_s3_input_is_one_line(case: str, manifests: Path, s3_prep: S3Server, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    args, must = {
        "missing object": (["--native", "s3://man/nowhere/native.manifest.json", "--out", out],
                           ["s3://man/nowhere/native.manifest.json: manifest not found"]),
        "missing bucket": (["--corpus", "s3://no-such-bucket/c.json", "--out", out],
                           ["s3://no-such-bucket", "bucket 'no-such-bucket' not found"]),
        "s3 --out": (["--native", str(manifests / "native.manifest.json"), "--out", "s3://man/reports"],
                     ["--out s3://man/reports", "local folder"]),
        "option for a local file": (["--native", str(manifests / "native.manifest.json"), "--storage-option",
                                     "region=eu-west-1", "--out", out], ["--storage-option", "object-store URL"]),
    }[case]
    one_line(run_prep("budget", *args), *must)
    assert not (tmp_path / "out").exists() and not Path("s3:").exists()


def test_budget_dead_endpoint_is_one_line(manifests: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with refusing_endpoint() as url:
        set_env(monkeypatch, {**s3_env(url), "AWS_SECRET_ACCESS_KEY": SECRET})
        res = run_prep("budget", "--prepared", "s3://man/m/prepared.manifest.json", "--out", str(tmp_path / "o"))
    one_line(res, "s3://man", "cannot reach the object store", url)


# ---- prep bench dataloader ------------------------------------------------------------------------------------

SHORT = ["--batch", "4", "--workers", "1", "--steps", "2", "--ceiling-steps", "2", "--warmup", "1",
         "--step-time", "0.01", "--horizon", "5", "--no-plot"]


@pytest.fixture(scope="module")
def tiny224(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v3.0", episodes=2, frames=12, height=224, width=224, gop=1)
    return write_synthetic(tmp_path_factory.mktemp("bench-s3") / "tiny224", spec)


def bench_run(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "dataloader.json").read_text())
    validate(doc, "bench")
    run: dict[str, Any] = doc["runs"][0]
    return run


def test_bench_dataloader_reads_s3_through_the_seam(tiny224: Path, s3_prep: S3Server, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    s3_prep.upload_tree(tiny224, "s3://data/tiny224")
    s3_prep.reset_stats()
    # a forked DataLoader worker (workers=1) builds its own store: the parent's s3fs client is not fork-safe
    res = run_prep("bench", "dataloader", "s3://data/tiny224", *SHORT, "--out", str(tmp_path / "s3"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert SECRET not in res.stdout + res.stderr + (tmp_path / "s3" / "dataloader.json").read_text()
    run = bench_run(tmp_path / "s3")
    assert run["errors"] == 0, run["error_examples"]
    assert run["samples"] == 4 * (1 + 2 + 1 + 2) and run["root"] == "s3://data/tiny224" and run["label"] == "tiny224"
    stats = s3_prep.stats_for("prep")
    assert stats.gets > 0 and stats.puts == 0
    local = run_prep("bench", "dataloader", str(tiny224), *SHORT, "--workers", "0", "--out", str(tmp_path / "local"))
    assert local.returncode == 0 and bench_run(tmp_path / "local")["errors"] == 0
    # the same, --compare on s3 with workers in this process
    res = run_prep("bench", "dataloader", str(tiny224), *SHORT, "--workers", "0", "--compare", "s3://data/tiny224",
                   "--compare-label", "s3", "--out", str(tmp_path / "both"))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((tmp_path / "both" / "dataloader.json").read_text())
    assert [(r["label"], r["errors"]) for r in doc["runs"]] == [("tiny224", 0), ("s3", 0)]


def test_bench_dataloader_reads_a_hub_snapshot(tiny224: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs torch (the bench extra: pip install prep[bench])")
    snap = snapshot_of(tiny224, tmp_path / "hub", "lerobot/tiny224")
    res = run_prep("bench", "dataloader", str(snap), *SHORT, "--workers", "0", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stdout + res.stderr
    run = bench_run(tmp_path / "out")
    assert run["errors"] == 0 and run["label"] == "tiny224"


@pytest.mark.parametrize("case", ["lerobot loader", "missing prefix"])
def test_bench_dataloader_s3_refusals_are_one_line(case: str, tiny224: Path, s3_prep: S3Server,
                                                   tmp_path: Path) -> None:
    s3_prep.upload_tree(tiny224, "s3://data/tiny224")
    args, must = {
        "lerobot loader": (["s3://data/tiny224", "--loader", "lerobot"], ["--loader lerobot reads a local folder",
                                                                          "prep reencode s3://data/tiny224"]),
        "missing prefix": (["s3://data/nothing-here"], ["s3://data/nothing-here: not a LeRobot dataset"]),
    }[case]
    res = run_prep("bench", "dataloader", *args, *SHORT, "--out", str(tmp_path / "out"))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and SECRET not in res.stdout + res.stderr
    assert res.stderr.startswith("prep bench: error: ") and res.stderr.count("\n") == 1, res.stderr
    for text in must:
        assert text in res.stderr, (text, res.stderr)
