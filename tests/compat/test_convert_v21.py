"""prep's v3.0 -> v2.1 conversion (stream copy) of corpora written by lerobot 0.4.4's own `LeRobotDataset`
writer, read by lerobot 0.3.3 (openpi's line): h264 and the default AV1, several episodes per file, and an
AV1 corpus after LeRobot's own `delete_episodes` and `merge_datasets`. Every sample is read with both
backends (50-step action chunks), and each episode's mp4 holds exactly the source packets of its span,
decoding to the same frames.

Runs inside the lerobot-v21 venv (`.ci/compat.sh`); the corpora are written by the lerobot-v30 venv's
python in a subprocess (skipped when that venv is missing). Until part 2 of issue 15, the conversion runs
through the temporary in-process glue `pipeline.convert_local.convert_inline`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import pyarrow.parquet as pq
import pytest
from compat_support import iterate_all, lerobot_version, open_dataset, report, require_lerobot, video_keys

LEROBOT = require_lerobot("0.3.", "v2.1")

from pipeline.convert_local import convert_inline  # noqa: E402

pytestmark = pytest.mark.lerobot
VENVS = Path(os.environ.get("PREP_VENVS", "/opt/prep-venvs"))
WRITER_PY = VENVS / "lerobot-v30" / "bin" / "python"
KINDS = ("h264", "av1", "av1-deleted-merged")

# Runs in the lerobot-v30 venv: argv = out_dir kind. Writes with LeRobot's own recorder API.
WRITER = r'''
import sys
from pathlib import Path
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

def write(root, vcodec, lengths, seed):
    shape = (64, 96, 3)
    feats = {
        "observation.state": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "action": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "observation.images.top": {"dtype": "video", "shape": shape, "names": ["height", "width", "channels"]},
        "observation.images.wrist": {"dtype": "video", "shape": shape, "names": ["height", "width", "channels"]},
    }
    ds = LeRobotDataset.create(f"prep/{root.name}", fps=30, features=feats, root=root, vcodec=vcodec)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]]
    for e, n in enumerate(lengths):
        for i in range(n):
            img = (xx * 3 + yy * 2 + 7 * i + 40 * e + seed) % 256
            top = np.stack([img, (img + 85) % 256, 255 - img], axis=-1).astype(np.uint8)
            ds.add_frame({"observation.state": rng.random(6, dtype=np.float32),
                          "action": rng.random(6, dtype=np.float32),
                          "observation.images.top": top, "observation.images.wrist": top[::-1, ::-1].copy(),
                          "task": f"task {e % 3}"})
        ds.save_episode()
    ds.finalize()
    return ds

out, kind = Path(sys.argv[1]), sys.argv[2]
if kind == "h264":
    write(out, "h264", [17, 23, 12, 30], 0)
elif kind == "av1":
    write(out, "libsvtav1", [17, 23, 12, 30], 1)
else:
    from lerobot.datasets.dataset_tools import delete_episodes, merge_datasets
    base = write(out.parent / (out.name + "-base"), "libsvtav1", [17, 23, 12, 30], 2)
    deleted = delete_episodes(base, [1], output_dir=out.parent / (out.name + "-deleted"), repo_id="prep/deleted")
    merge_datasets([base, deleted], output_repo_id="prep/merged", output_dir=out)
'''


class Converted:
    def __init__(self, base: Path) -> None:
        self.base, self.built = base, {}

    def get(self, kind: str) -> tuple[Path, Path]:
        """(the LeRobot-written v3.0 corpus, prep's v2.1 conversion of it)."""
        if kind not in self.built:
            if not WRITER_PY.is_file():
                pytest.skip(f"needs the lerobot-v30 venv at {WRITER_PY.parent.parent} to write the v3.0 corpora")
            src = self.base / kind
            script = self.base / "writer.py"
            script.write_text(WRITER)
            env = {**os.environ, "PYTHONPATH": ""}
            r = subprocess.run([str(WRITER_PY), str(script), str(src), kind], capture_output=True, text=True,
                               timeout=900, env=env)
            assert r.returncode == 0, f"lerobot 0.4.4 writer failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
            out = self.base / f"{kind}-v21"
            result = convert_inline(src, out, "v2.1")
            assert result.complete and not result.failed, [x.reason for x in result.failed]
            report(f"compat v2.1 convert {kind}: {result.episodes} episodes, {result.frames} frames from "
                   f"{len(list(src.glob('videos/*/*/*.mp4')))} v3.0 video files -> {len(result.results)} files "
                   f"in {result.seconds:.2f} s")
            self.built[kind] = (src, out)
        return self.built[kind]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    return Converted(tmp_path_factory.mktemp("convert21"))


@pytest.mark.parametrize("backend", ("default", "pyav"))
@pytest.mark.parametrize("kind", KINDS)
def test_lerobot_03_reads_every_sample(converted: Converted, kind: str, backend: str) -> None:
    _src, out = converted.get(kind)
    ds = open_dataset(out, None if backend == "default" else backend)
    n = iterate_all(ds, out)
    report(f"compat v2.1 convert {kind}: lerobot {lerobot_version()} backend={ds.video_backend} read {n} samples "
           "(50-step action chunks)")


def _demux(path: Path) -> tuple[Fraction, list[tuple[bytes, int]]]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return Fraction(s.time_base), [(bytes(p), int(p.pts)) for p in c.demux(s) if p.size]


def _frames(path: Path) -> list[tuple[float, str]]:
    with av.open(str(path)) as c:
        return [(float(f.pts * f.time_base), hashlib.sha1(f.to_ndarray().tobytes()).hexdigest())
                for f in c.decode(video=0)]


@pytest.mark.parametrize("kind", KINDS)
def test_each_episode_holds_its_span_of_the_source(converted: Converted, kind: str) -> None:
    src, out = converted.get(kind)
    info = json.loads((src / "meta/info.json").read_text())
    rows = pq.read_table(sorted((src / "meta/episodes").glob("*/*.parquet"))[0]).to_pylist()
    checked = 0
    decoded: dict[Path, list[tuple[float, str]]] = {}
    for row in rows:
        ep = row["episode_index"]
        for cam in video_keys(info):
            path = src / info["video_path"].format(video_key=cam, chunk_index=row[f"videos/{cam}/chunk_index"],
                                                   file_index=row[f"videos/{cam}/file_index"])
            t0, t1 = row[f"videos/{cam}/from_timestamp"], row[f"videos/{cam}/to_timestamp"]
            tb, packets = _demux(path)
            span = [p for p in packets if t0 - 1e-4 <= p[1] * tb < t1 - 1e-4]
            mine = out / f"videos/chunk-{ep // 1000:03d}/{cam}/episode_{ep:06d}.mp4"
            _tb2, got = _demux(mine)
            assert [g[0] for g in got] == [p[0] for p in span], (kind, ep, cam)
            if path not in decoded:
                decoded[path] = _frames(path)
            want = [h for t, h in decoded[path] if t0 - 1e-4 <= t < t1 - 1e-4]
            assert [h for _t, h in _frames(mine)] == want, (kind, ep, cam)
            assert len(want) == row["length"]
            checked += 1
    report(f"compat v2.1 convert {kind}: {checked} episode videos = their source spans packet for packet and "
           "frame for frame")

