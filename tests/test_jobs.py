"""The jobs layer: one engine session (one cluster) per command, one prepared GB/hr everywhere, the
streamed verify report, inline = LocalCluster, and scan/verify resumed after a real SIGKILL of the whole
process group from their completion records (and only from records of the same plan)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep as prep
from support.faults import group_members, wait_group_gone
from support.inject import drop_frame

from pipeline.formats import open_dataset
from pipeline.jobs import parts
from pipeline.jobs.scan import scan_dataset
from pipeline.jobs.verify import verify_in_process, write_report_file
from pipeline.manifest import load_manifest
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

pytestmark = pytest.mark.slow

CLUSTER_LINE = "[engine] local: LocalCluster, "
CAMS = ("observation.images.cam_high", "observation.images.cam_wrist")


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 small episodes (2 cameras x 10 frames, one clip reused), v2.1: enough batches to kill mid-run."""
    spec = SynthSpec(version="v2.1", episodes=60, frames=10, height=64, width=64, cameras=CAMS, reuse_video=True)
    return write_synthetic(tmp_path_factory.mktemp("many") / "v21", spec)


def test_streamed_report_is_json_dumps_of_the_report(synth_v21: Path, copy_dataset, tmp_path: Path) -> None:
    root = copy_dataset(synth_v21, "bad")
    drop_frame(root, 1, "observation.images.cam_high")
    report = verify_in_process(root, VerifyOptions(expect_frames=90, all_intra=True))
    assert not report.passed and report.failed_episodes == [0, 1, 2]
    path = tmp_path / "v.json"
    write_report_file(report, path)
    whole = report.to_json()
    whole["created_utc"] = json.loads(path.read_text())["created_utc"]
    assert path.read_text() == json.dumps(whole, indent=2, ensure_ascii=False) + "\n"
    assert [e.episode for e in report.episodes] == [0, 1, 2] and len(report.episodes) == 3
    assert report.episodes[1].failures and report.episodes[-1].episode == 2


@pytest.mark.cluster
def test_inline_and_local_cluster_write_the_same_manifest(synth_v30: Path, tmp_path: Path) -> None:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        a, ta = scan_dataset(synth_v30, tmp_path / "a.json", engine)
    with open_engine(RunConfig(workers=2, progress=False, batch=1)) as engine:
        b, tb = scan_dataset(synth_v30, tmp_path / "b.json", engine)
        assert engine.stats.clusters_started == 1 and engine.stats.tasks_submitted == 2
    assert a["totals"] == b["totals"] and a["dataset"] == b["dataset"] and a["failures"] == b["failures"]
    assert pq.read_table(ta).equals(pq.read_table(tb))
    assert not parts.work_folder_for(tmp_path / "a.json").exists()


@pytest.mark.cluster
def test_reencode_starts_one_cluster_and_has_one_gb_per_hour(synth_v30: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = prep("reencode", "--src", str(synth_v30), "--dst", "224", "--out", str(out), "--workers", "2",
             "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count(CLUSTER_LINE) == 1, r.stderr
    manifest = load_manifest(out / "prep/manifest.json")
    comparison = json.loads((out / "prep/comparison.json").read_text())
    gb = manifest["totals"]["gb_per_hour"]
    assert comparison["prepared"]["gb_per_hour"] == gb
    assert comparison["prepared"]["bytes"] == manifest["totals"]["bytes"]["total"]
    assert f"prepared {gb:.3f} GB/hr" in r.stdout
    # the manifest reencode reduced from its own results equals a scan of the output (prep/ left out)
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        scanned, table = scan_dataset(out, tmp_path / "scan.json", engine)
    prep_bytes = sum(p.stat().st_size for p in (out / "prep").rglob("*") if p.is_file())
    assert scanned["totals"]["bytes"]["total"] - prep_bytes == manifest["totals"]["bytes"]["total"]
    for key in ("episodes", "frames", "frames_per_episode", "hours"):
        assert scanned["totals"][key] == manifest["totals"][key], key
    for key in ("video", "data", "meta", "per_camera"):
        assert scanned["totals"]["bytes"][key] == manifest["totals"]["bytes"][key], key
    assert [{k: v for k, v in c.items() if k != "pix_fmt"} for c in scanned["dataset"]["cameras"]] == \
        [{k: v for k, v in c.items() if k != "pix_fmt"} for c in manifest["dataset"]["cameras"]]
    # the same rows, each count named by its origin: reencode demuxed every file it wrote (frames_from_packets),
    # the scan read the output's container index (frames_from_index); the counts are equal
    ours = pq.read_table(out / "prep/manifest.episodes.parquet").to_pylist()
    theirs = pq.read_table(table).to_pylist()
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs, strict=True):
        for cam in [k.rsplit("/", 1)[0] for k in a if k.endswith("/frames_from_packets")]:
            assert a.pop(f"{cam}/frames_from_packets") == b.pop(f"{cam}/frames_from_index") == 90
            assert a.pop(f"{cam}/frames_from_index") is None and b.pop(f"{cam}/frames_from_packets") is None
        assert a == b


@pytest.mark.cluster
def test_demo_starts_one_cluster(tmp_path: Path) -> None:
    r = prep("demo", "--episodes", "2", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "reports"),
             "--workers", "2", "--no-progress")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.count(CLUSTER_LINE) == 1, r.stderr
    prepared = load_manifest(tmp_path / "reports/prepared.manifest.json")
    comparison = json.loads((tmp_path / "reports/comparison.json").read_text())
    assert prepared["totals"]["gb_per_hour"] == comparison["prepared"]["gb_per_hour"]


# ---- resume after a real kill -------------------------------------------------------------------

# `prep` with WorkFolder.write_record wrapped so that the whole process group SIGKILLs itself once the
# N-th completion record is in place: a kill mid-run at a known point, however fast the machine.
KILL_AFTER_RECORDS = """
import os, signal, sys
from pipeline.jobs import parts
limit, original, count = int(sys.argv[1]), parts.WorkFolder.write_record, [0]

def write_record(self, first, lines):
    original(self, first, lines)
    count[0] += 1
    if count[0] >= limit:
        os.killpg(0, signal.SIGKILL)

parts.WorkFolder.write_record = write_record
from pipeline.cli import main
sys.exit(main(sys.argv[2:]))
"""


def killed_run(records: int, *args: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILL_AFTER_RECORDS, str(records), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, out.decode()[-2000:]
    assert not wait_group_gone(proc.pid), f"processes of the killed run survived: {group_members(proc.pid)}"


def without_stamp(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text())
    doc.pop("created_utc")
    if "totals" in doc and "seconds" in doc["totals"] and "episodes_per_s" in doc["totals"]:
        doc["totals"].pop("seconds")
        doc["totals"].pop("episodes_per_s")
    return doc


@pytest.mark.cluster
def test_scan_killed_then_rerun_redoes_only_the_rest(many: Path, tmp_path: Path) -> None:
    run = ["--workers", "1", "--batch", "3", "--no-progress"]
    ref = tmp_path / "ref.json"
    assert prep("scan", str(many), "--out", str(ref), *run).returncode == 0
    out = tmp_path / "m.json"
    killed_run(8, "scan", str(many), "--out", str(out), *run)
    work = parts.work_folder_for(out)
    records = list(work.glob("part-*.jsonl.gz"))
    assert len(records) == 8 and not out.exists(), "killed before publishing, with its records"
    r = prep("scan", str(many), "--out", str(out), *run)
    assert r.returncode == 0, r.stderr
    assert "[resume] scan: 24 file-sets from 8 completion records" in r.stderr, r.stderr
    assert without_stamp(out) == {**without_stamp(ref), "episodes_table": "m.episodes.parquet"}
    assert out.with_name("m.episodes.parquet").read_bytes() == ref.with_name("ref.episodes.parquet").read_bytes()
    assert not work.exists() and not Path(str(work) + ".lock").exists()


@pytest.mark.cluster
def test_verify_killed_then_rerun_redoes_only_the_rest(many: Path, tmp_path: Path) -> None:
    run = ["--workers", "1", "--batch", "4", "--no-progress", "--expect-frames", "10"]
    ref = tmp_path / "ref.json"
    assert prep("verify", str(many), "--json", str(ref), *run).returncode == 0
    out = tmp_path / "v.json"
    killed_run(5, "verify", str(many), "--json", str(out), *run)
    r = prep("verify", str(many), "--json", str(out), *run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[resume] verify: 20 file-sets from 5 completion records" in r.stderr, r.stderr
    assert without_stamp(out) == without_stamp(ref)
    assert pq.read_table(out.with_name("v.episodes.parquet")).equals(pq.read_table(ref.with_name(
        "ref.episodes.parquet")))
    assert not parts.work_folder_for(out).exists()


def test_records_of_another_plan_are_not_used(many: Path, tmp_path: Path) -> None:
    """Changed metadata (or options) gives another fingerprint: the old records are cleared, not read."""
    ds, _ = open_dataset(many)
    path = tmp_path / "m.json.parts"
    with parts.WorkFolder(path, fingerprint=parts.fingerprint("scan", 1, ds)) as work:
        work.write_record(0, [[]])
    with parts.WorkFolder(path, fingerprint=parts.fingerprint("scan", 1, ds)) as work:
        assert len(work.records()) == 1  # same plan: kept
    info = json.loads((many / "meta/info.json").read_text())
    other = parts.fingerprint("scan", 1, ds, options={"expect_frames": 90})
    assert other != parts.fingerprint("scan", 1, ds)
    ds.info = {**info, "robot_type": "another"}
    with parts.WorkFolder(path, fingerprint=parts.fingerprint("scan", 1, ds)) as work:
        assert work.records() == []
    with parts.WorkFolder(path, fingerprint=other, resume=False) as work:
        assert work.records() == []
    assert os.listdir(path) == ["plan.json"]
