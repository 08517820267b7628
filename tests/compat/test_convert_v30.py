"""prep's v2.1 -> v3.0 conversion against lerobot 0.4.4's own converter (`convert_dataset_v21_to_v30`), on the
real fixture and on a synthetic h264 corpus: the same episodes, lengths, data rows, tasks and stats, the same
decoded frames (ours stream-copied packet for packet from the source), exact offsets where LeRobot's drift;
and our output read by lerobot 0.4.4: the synthetic corpus every sample with both backends; the real
fixture's (3,608 samples, whose packets the frame test proves identical to the source and whose official
conversion test_lerobot_v30.py already reads in full with both backends) every 8th sample and each episode's
last, with the default backend, to keep the CI stage short.

Runs inside the lerobot-v30 venv (`.ci/compat.sh`); skipped elsewhere. prep runs as the command
(`prep convert SRC --to v3.0`), with this interpreter, on a 2-worker LocalCluster.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from compat_support import (
    iterate_all,
    lerobot_version,
    open_dataset,
    report,
    require_lerobot,
    video_keys,
    writable_copy,
)
from support.cli import run_prep

LEROBOT = require_lerobot("0.4.", "v3.0")

from pipeline.formats.v30 import exact_offsets_error  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402

pytestmark = pytest.mark.readers
KINDS = ("real", "synthetic")
# Short h264 episodes with B-frames (dts < pts, an edit list in each mp4); the report shows how far each
# converter's from_timestamp is from frames_before / fps.
SYNTH = SynthSpec(version="v2.1", episodes=6, frames=20, height=96, width=128, gop=10,
                  cameras=("observation.images.top", "observation.images.wrist"))


def lerobot_convert(src: Path, workdir: Path) -> Path:
    """lerobot 0.4.4's converter on a copy, offline (it works in place on ROOT/repo_id)."""
    from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset

    writable_copy(src, workdir / "ds")
    convert_dataset(repo_id="ds", root=workdir, push_to_hub=False)
    return workdir / "ds"


class Pairs:
    def __init__(self, corpora: Any, base: Path) -> None:
        self.corpora, self.base, self.built = corpora, base, {}

    def get(self, kind: str) -> tuple[Path, Path, Path]:
        """(v2.1 source, ours in v3.0, LeRobot's in v3.0)."""
        if kind not in self.built:
            if kind == "real":
                src, theirs = self.corpora.get("real-v21"), self.corpora.get("real-v30")
            else:
                src = write_synthetic(self.base / "synthetic", SYNTH)
                theirs = lerobot_convert(src, self.base / "lerobot-synthetic")
            ours = self.base / f"ours-{kind}"
            r = run_prep("convert", src, "--to", "v3.0", "--out", ours, "--workers", "2", "--no-progress",
                         timeout=900)  # a LocalCluster: a child of this interpreter (the reader's venv)
            assert r.returncode == 0, f"prep convert: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            assert "verify    PASSED" in r.stdout, r.stdout
            doc = json.loads((ours / "prep/convert_report.json").read_text())
            report(f"compat v3.0 convert {kind}: prep convert {doc['episodes']} episodes, {doc['frames']} frames, "
                   f"{doc['files']} output files in {doc['seconds']:.2f} s (+{doc['publish_seconds']:.2f} s "
                   "metadata), prep verify passed")
            self.built[kind] = (src, ours, theirs)
        return self.built[kind]


@pytest.fixture(scope="module")
def pairs(corpora: Any, tmp_path_factory: pytest.TempPathFactory) -> Pairs:
    return Pairs(corpora, tmp_path_factory.mktemp("convert30"))


def episode_rows(root: Path) -> list[dict[str, Any]]:
    tables = [pq.read_table(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))]
    rows = pa.concat_tables(t.select([c for c in t.column_names if not c.startswith("stats/")])
                            for t in tables).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def data_rows(root: Path) -> pa.Table:
    table = pa.concat_tables(pq.read_table(p).replace_schema_metadata(None)
                             for p in sorted((root / "data").glob("*/*.parquet")))
    return table.sort_by("index")


def as_native_writer(info: dict) -> dict:
    """LeRobot's converter's info.json with its features as LeRobot's writers write them (what prep's convert
    writes on purpose): no per-feature fps on non-video features, the depth flag spelled `is_depth_map`."""
    info = json.loads(json.dumps(info))
    for ft in info["features"].values():
        if ft.get("dtype") != "video":
            ft.pop("fps", None)
        elif isinstance(ft.get("info"), dict) and "video.is_depth_map" in ft["info"]:
            ft["info"]["is_depth_map"] = ft["info"].pop("video.is_depth_map")
    return info


@pytest.mark.parametrize("kind", KINDS)
def test_same_episodes_rows_and_metadata_as_lerobot(pairs: Pairs, kind: str) -> None:
    src, ours, theirs = pairs.get(kind)
    a, b = episode_rows(ours), episode_rows(theirs)
    keys = ("episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index", "data/chunk_index",
            "data/file_index")
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    cams = video_keys(json.loads((src / "meta/info.json").read_text()))
    for cam in cams:
        for k in ("chunk_index", "file_index"):
            assert [r[f"videos/{cam}/{k}"] for r in a] == [r[f"videos/{cam}/{k}"] for r in b]
    ra, rb = data_rows(ours), data_rows(theirs)
    assert ra.num_rows == rb.num_rows and ra.column_names == rb.column_names
    assert ra.equals(rb.cast(ra.schema)), "data rows differ"  # LeRobot's pandas write makes lists variable-size
    info_a, info_b = (json.loads((r / "meta/info.json").read_text()) for r in (ours, theirs))
    info_b = as_native_writer(info_b)  # prep writes features as the v3.0 writers do (docs/convert.md)
    assert info_a == info_b, {k: (info_a.get(k), info_b.get(k)) for k in set(info_a) | set(info_b)
                              if info_a.get(k) != info_b.get(k)}
    ta, tb = pq.read_table(ours / "meta/tasks.parquet"), pq.read_table(theirs / "meta/tasks.parquet")
    assert ta.equals(tb)
    sa, sb = (json.loads((r / "meta/stats.json").read_text()) for r in (ours, theirs))
    assert set(sa) == set(sb)
    for feat in sb:
        assert set(sa[feat]) == set(sb[feat])
        for stat, value in sb[feat].items():
            np.testing.assert_allclose(sa[feat][stat], value, rtol=1e-12, err_msg=f"{feat}/{stat}")
    ea, eb = (pa.concat_tables(pq.read_table(p) for p in sorted((r / "meta/episodes").glob("*/*.parquet")))
              for r in (ours, theirs))
    for col in (c for c in eb.column_names if c.startswith("stats/")):
        assert ea[col].to_pylist() == eb[col].to_pylist(), col
    report(f"compat v3.0 convert {kind}: episodes, data rows ({ra.num_rows}), info.json, tasks, per-episode stats "
           f"equal to lerobot {lerobot_version()}'s converter; stats.json within 1e-12")


def frame_digests(path: Path) -> list[str]:
    with av.open(str(path)) as c:
        return [hashlib.sha1(f.to_ndarray().tobytes()).hexdigest() for f in c.decode(video=0)]


def payloads(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        return [bytes(p) for p in c.demux(c.streams.video[0]) if p.size]


@pytest.mark.parametrize("kind", KINDS)
def test_same_stream_copied_frames_as_lerobot(pairs: Pairs, kind: str) -> None:
    src, ours, theirs = pairs.get(kind)
    cams = video_keys(json.loads((src / "meta/info.json").read_text()))
    files = 0
    for cam in cams:
        mine = sorted((ours / "videos" / cam).glob("*/*.mp4"))
        assert [p.relative_to(ours) for p in mine] == [p.relative_to(theirs)
                                                       for p in sorted((theirs / "videos" / cam).glob("*/*.mp4"))]
        source = [pk for p in sorted((src / "videos").glob(f"*/{cam}/*.mp4")) for pk in payloads(p)]
        assert [pk for p in mine for pk in payloads(p)] == source  # packet for packet, byte for byte
        for path in mine:
            assert frame_digests(path) == frame_digests(theirs / path.relative_to(ours))
            files += 1
    fps = float(json.loads((src / "meta/info.json").read_text())["fps"])
    worst_ours = exact_offsets_error(episode_rows(ours), fps, tuple(cams))
    worst_theirs = exact_offsets_error(episode_rows(theirs), fps, tuple(cams))
    assert worst_ours <= 1e-9
    report(f"compat v3.0 convert {kind}: {files} video files decode to the same frames as LeRobot's; packets "
           f"identical to the v2.1 source; from_timestamp vs frames_before/fps: prep {worst_ours:.1e} s, "
           f"LeRobot {worst_theirs:.1e} s")


READS = [("synthetic", "default"), ("synthetic", "pyav"), ("real", "default")]


def strided(ds: Any, step: int = 8) -> list[int]:
    """Every `step`-th sample and each episode's last one."""
    lasts = [int(ds.meta.episodes[e]["dataset_to_index"]) - 1 for e in range(ds.meta.total_episodes)]
    return sorted({*range(0, len(ds), step), *lasts})


@pytest.mark.parametrize(("kind", "backend"), READS, ids=[f"{k}-{b}" for k, b in READS])
def test_lerobot_reads_our_conversion(pairs: Pairs, kind: str, backend: str) -> None:
    _src, ours, _theirs = pairs.get(kind)
    ds = open_dataset(ours, None if backend == "default" else backend)
    n = iterate_all(ds, ours, indices=strided(ds) if kind == "real" else None)
    what = "every sample" if kind == "synthetic" else f"{n} of {len(ds)} samples (every 8th and episode ends)"
    report(f"compat v3.0 convert {kind}: lerobot {lerobot_version()} backend={ds.video_backend} read {what} "
           "of prep's conversion (50-step action chunks)")
