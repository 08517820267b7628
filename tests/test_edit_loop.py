"""The repair loop a user runs (issue 26), as commands on real h264 video, v2.1 and v3.0:

    prep verify BROKEN --out r.json            # exit 1: 3 broken episodes (truncated video, a missing frame,
                                               #   an off-grid parquet timestamp)
    prep edit BROKEN --out FIXED --drop-failed r.json    # exit 0: exactly those 3 dropped, the rest copied
    prep verify FIXED --decode                 # exit 0, PASSED
    prep reencode FIXED --dst 224              # exit 0, a drop-in output (its own verify passes)

Also: the kept episodes' packets are the source's byte for byte, renumbered 0..n-1; a report of another
dataset is refused before anything is written. The real readers load the loop's outputs in
tests/compat/test_edit_v21.py and test_edit_v30.py (`repair_loop` below builds it for them).
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import inject
from support.cli import run_prep, said
from support.media import episode_payloads

from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
EPISODES = 7
BROKEN = {3: "missing frame", 4: "off-grid timestamp", 6: "truncated video"}
PREP_TIMEOUT_S = 600


prep = functools.partial(run_prep, timeout=PREP_TIMEOUT_S)


def loop_spec(version: str) -> SynthSpec:
    return SynthSpec(version=version, episodes=EPISODES, frames=30, height=96, width=128, gop=10, cameras=CAMS,
                     episodes_per_file=2)


def broken_corpus(root: Path, version: str) -> Path:
    """7 episodes x 2 cameras x 30 frames of 96x128 h264 (GOP 10; v3.0: two episodes per file, files (0, 1),
    (2, 3), (4, 5), (6), each episode starting on a keyframe, as LeRobot writes them) with three broken
    episodes, each broken in one place:
    3: one frame missing from its second camera (v3.0: the file is rewritten around it, GOP 30: both of its
       episodes still start on a keyframe); the edit keeps episode 2, the head of that file;
    4: one parquet `timestamp` half a frame off the 1/fps grid; the edit keeps 5, the tail of its file;
    6: its first camera's mp4 cut in half (the index lost: unreadable; in v3.0 the file holds only 6, since
       a truncated file's header miscounts every episode in it)."""
    write_synthetic(root, loop_spec(version))
    inject.drop_frame(root, 3, CAMS[1], which=10)
    inject.shift_timestamp(root, 4, frame_index=12)
    inject.truncate_video(root, 6, CAMS[0])
    return root


def failed_episodes(report: Path) -> set[int]:
    doc = json.loads(report.read_text())
    return {int(f["episode"]) for f in doc["failures"] if f.get("severity") == "error" and f.get("episode") is not None}


@dataclass(frozen=True)
class Loop:
    broken: Path
    report: Path
    fixed: Path
    fixed_224: Path


def repair_loop(base: Path, version: str, inprocess: bool | None = None) -> Loop:
    """Run the loop in `base` (asserting every step); the compat tests read its outputs (there each command is a
    child process of the reader's interpreter: `inprocess=False`)."""
    prep = functools.partial(run_prep, timeout=PREP_TIMEOUT_S, inprocess=inprocess)
    broken = broken_corpus(base / "broken", version)
    report = base / "r.json"
    r = prep("verify", broken, "--out", report, "--no-progress")
    assert r.returncode == 1, said(r)
    assert "FAILED" in r.stdout, said(r)
    assert failed_episodes(report) == set(BROKEN), (failed_episodes(report), said(r))

    fixed = base / "fixed"
    r = prep("edit", broken, "--out", fixed, "--drop-failed", report, "--no-progress")
    assert r.returncode == 0, said(r)
    assert (fixed / "meta/info.json").is_file()
    edit_report = json.loads((fixed / "prep/edit_report.json").read_text())
    dropped = {int(d["episode"]) if isinstance(d, dict) else int(d) for d in edit_report["dropped"]}
    assert dropped == set(BROKEN), edit_report["dropped"]

    r = prep("verify", fixed, "--decode", "--no-progress")
    assert r.returncode == 0, said(r)
    assert "PASSED" in r.stdout, said(r)

    fixed_224 = base / "fixed_224"
    # the default engine, as a user runs it: 8 video files start a LocalCluster, so a child process
    r = prep("reencode", fixed, "--dst", "224", "--out", fixed_224, "--no-progress", inprocess=False)
    assert r.returncode == 0, said(r)
    assert "NOT drop-in" not in r.stdout + r.stderr, said(r)
    r = prep("verify", fixed_224, "--decode", "--all-intra", "--size", "224x224", "--no-progress")
    assert r.returncode == 0, said(r)
    return Loop(broken, report, fixed, fixed_224)


@pytest.fixture(scope="module", params=["v2.1", "v3.0"])
def loop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Loop:
    return repair_loop(tmp_path_factory.mktemp(f"loop-{request.param}"), request.param)


@pytest.mark.slow
@pytest.mark.cluster
def test_loop_drops_exactly_the_failed_episodes_and_passes_verify(loop: Loop) -> None:
    """repair_loop asserts each step; here the output's content: the kept source episodes 0, 1, 2, 5, in
    order, renumbered 0..3, every packet the source's bytes, rows renumbered, totals in info.json."""
    kept = [e for e in range(EPISODES) if e not in BROKEN]
    src = episode_payloads(loop.broken, kept, allow_rejected=True)
    out = episode_payloads(loop.fixed, allow_rejected=True)
    assert sorted({e for e, _ in out}) == list(range(len(kept)))
    for new, old in enumerate(kept):
        for cam in CAMS:
            assert out[(new, cam)], f"episode {new} {cam}: no packets"
            assert out[(new, cam)] == src[(old, cam)], f"episode {new} (source {old}) {cam}: packets differ"
    info = json.loads((loop.fixed / "meta/info.json").read_text())
    assert info["total_episodes"] == len(kept) and info["total_frames"] == 30 * len(kept)
    rows = [pq.read_table(p, columns=["episode_index", "index", "frame_index"])
            for p in sorted((loop.fixed / "data").rglob("*.parquet"))]
    eps = [e for t in rows for e in t["episode_index"].to_pylist()]
    idx = [i for t in rows for i in t["index"].to_pylist()]
    assert sorted(set(eps)) == list(range(len(kept)))
    assert sorted(idx) == list(range(30 * len(kept)))


@pytest.mark.slow
@pytest.mark.cluster
def test_loop_224_output_is_all_intra_and_keeps_the_episodes(loop: Loop) -> None:
    info = json.loads((loop.fixed_224 / "meta/info.json").read_text())
    assert info["total_episodes"] == EPISODES - len(BROKEN)
    for cam in CAMS:
        assert list(info["features"][cam]["shape"]).count(224) == 2, info["features"][cam]["shape"]


@pytest.mark.slow
@pytest.mark.cluster
def test_drop_failed_refuses_a_report_of_another_dataset(loop: Loop, tmp_path: Path) -> None:
    """A verify report names the dataset it checked; used on another dataset (here the repaired one, whose
    episode 3 is another episode and 4 and 6 do not exist) it is refused with one line and nothing is written."""
    out = tmp_path / "out"
    r = prep("edit", loop.fixed, "--out", out, "--drop-failed", loop.report, "--no-progress")
    assert r.returncode == 2, said(r)
    assert "Traceback" not in r.stderr, said(r)
    assert len((r.stderr or r.stdout).strip().splitlines()) == 1, said(r)
    assert not (out / "meta/info.json").exists()


def test_broken_corpus_is_broken_where_it_says(tmp_path: Path) -> None:
    """The fixture itself: without the three faults the same corpus verifies (so each failure is the fault)."""
    clean = write_synthetic(tmp_path / "clean", loop_spec("v3.0"))
    r = prep("verify", clean, "--decode", "--no-progress")
    assert r.returncode == 0, said(r)
    shutil.rmtree(clean)
