"""v3.0 -> v2.1 of corpora written by lerobot 0.4.4's own `LeRobotDataset` writer (h264 and the default AV1,
several episodes per file, and an AV1 corpus after LeRobot's own `delete_episodes` and `merge_datasets`), read
by lerobot 0.3.3 (openpi's line), two ways:

- `prep convert SRC --to v2.1` (stream copy): each episode's mp4 holds exactly the source packets of its span,
  decoding to the same frames;
- `prep reencode --dst 224 --format v2.1 --crf 0` (every episode its own 224x224 all-intra file): each frame
  LeRobot returns matches the v3.0 source frame at the same index put through prep's resize (PSNR >= 40 dB),
  and openpi's `resize_with_pad` of it as today's letterbox test asks (channel mean >= 35 dB).

Every sample of every output is read with both backends (50-step action chunks). Runs inside the lerobot-v21
venv (`.ci/compat.sh`); the corpora are written by the lerobot-v30 venv's python in a subprocess (skipped when
that venv is missing). prep runs as the command, with this interpreter, on a 2-worker LocalCluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from compat_support import (
    iterate_all,
    lerobot_frames,
    lerobot_version,
    letterbox,
    mse,
    open_dataset,
    psnr,
    report,
    require_lerobot,
    video_keys,
)
from support.cli import run_prep

LEROBOT = require_lerobot("0.3.", "v2.1")

pytestmark = pytest.mark.readers
WAYS = ("convert", "reencode")
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


def prep_ok(*args: str) -> subprocess.CompletedProcess[str]:
    """`prep ARGS --workers 2` (a child process of this interpreter: the reader's venv), which must succeed."""
    r = run_prep(*args, "--workers", "2", "--no-progress", timeout=900)
    assert r.returncode == 0, f"{' '.join(r.args)} failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


class Converted:
    def __init__(self, base: Path) -> None:
        self.base, self.sources, self.built = base, {}, {}

    def source(self, kind: str) -> Path:
        """The corpus written by lerobot 0.4.4 (v3.0)."""
        if kind not in self.sources:
            if not WRITER_PY.is_file():
                pytest.skip(f"needs the lerobot-v30 venv at {WRITER_PY.parent.parent} to write the v3.0 corpora")
            src = self.base / kind
            script = self.base / "writer.py"
            script.write_text(WRITER)
            env = {**os.environ, "PYTHONPATH": ""}
            r = subprocess.run([str(WRITER_PY), str(script), str(src), kind], capture_output=True, text=True,
                               timeout=900, env=env)
            assert r.returncode == 0, f"lerobot 0.4.4 writer failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
            self.sources[kind] = src
        return self.sources[kind]

    def get(self, kind: str, way: str = "convert") -> tuple[Path, Path]:
        """(the LeRobot-written v3.0 corpus, prep's v2.1 output of it: `prep convert` or `prep reencode`)."""
        if (kind, way) not in self.built:
            src = self.source(kind)
            out = self.base / f"{kind}-{way}-v21"
            if way == "convert":
                r = prep_ok("convert", str(src), "--to", "v2.1", "--out", str(out))
            else:
                r = prep_ok("reencode", "--src", str(src), "--dst", "224", "--format", "v2.1", "--crf", "0",
                         "--out", str(out))
            assert "verify    PASSED" in r.stdout, r.stdout
            doc = json.loads((out / "prep/convert_report.json").read_text())
            report(f"compat v2.1 {way} {kind}: {doc['episodes']} episodes, {doc['frames']} frames from "
                   f"{len(list(src.glob('videos/*/*/*.mp4')))} v3.0 video files -> {doc['files']} files; "
                   f"prep verify passed ({(way == 'reencode' and 'all-intra') or 'demux checks'})")
            self.built[(kind, way)] = (src, out)
        return self.built[(kind, way)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    return Converted(tmp_path_factory.mktemp("convert21"))


@pytest.mark.parametrize("backend", ("default", "pyav"))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("way", WAYS)
def test_lerobot_03_reads_every_sample(converted: Converted, way: str, kind: str, backend: str) -> None:
    _src, out = converted.get(kind, way)
    ds = open_dataset(out, None if backend == "default" else backend)
    n = iterate_all(ds, out)
    report(f"compat v2.1 {way} {kind}: lerobot {lerobot_version()} backend={ds.video_backend} read {n} samples "
           "(50-step action chunks)")


def prep_resized(path: Path) -> list[np.ndarray]:
    """Every frame of a v3.0 source file as prep's re-encode feeds it to the encoder (its own resize and
    pixel format, `filter_frames`), in RGB: what a lossless encode at crf 0 gives back."""
    from pipeline.video.encode import PROFILES, filter_frames
    from pipeline.video.probe import probe_video
    from pipeline.video.resize import RESIZE_MODES

    probe = probe_video(path)
    geometry = RESIZE_MODES["pad"](probe.width, probe.height, 224, 224)
    out: list[np.ndarray] = []
    filter_frames(path, geometry, PROFILES["h264-intra"].pix_fmt,
                  lambda _i, f: out.append(f.to_ndarray(format="rgb24")))
    return out


def source_rgb(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


@pytest.mark.parametrize("backend", ("default", "pyav"))
@pytest.mark.parametrize("kind", KINDS)
def test_reencoded_frames_match_the_source_at_each_index(converted: Converted, kind: str, backend: str) -> None:
    """Every frame lerobot 0.3.3 returns from `prep reencode --dst 224 --format v2.1 --crf 0` against the v3.0
    source frame at the same index (episode start in its file + frame_index): PSNR >= 40 dB against prep's
    resize of it (a frame off by one on this moving pattern scores ~20 dB), and openpi's resize_with_pad
    of it as today (channel mean >= 35 dB; the RGB figure is reported)."""
    src, out = converted.get(kind, "reencode")
    info = json.loads((src / "meta/info.json").read_text())
    fps = float(info["fps"])
    rows = {r["episode_index"]: r for p in sorted((src / "meta/episodes").glob("*/*.parquet"))
            for r in pq.read_table(p).to_pylist()}
    ds = open_dataset(out, None if backend == "default" else backend, horizon=None)
    got = lerobot_frames(ds, out, list(range(len(ds))))
    resized: dict[Path, list[np.ndarray]] = {}
    decoded: dict[Path, list[np.ndarray]] = {}
    errs, errs_pad, errs_mean, errs_next = [], [], [], []
    worst = float("inf")
    for (cam, ep, fi), frame in got.items():
        row = rows[ep]
        path = src / info["video_path"].format(video_key=cam, chunk_index=row[f"videos/{cam}/chunk_index"],
                                               file_index=row[f"videos/{cam}/file_index"])
        if path not in resized:
            resized[path], decoded[path] = prep_resized(path), source_rgb(path)
        k = round(row[f"videos/{cam}/from_timestamp"] * fps) + fi
        ref = resized[path][k]
        m = mse(frame, ref)
        errs.append(m)
        worst = min(worst, psnr(m))
        pad = letterbox(decoded[path][k])
        errs_pad.append(mse(frame, pad))
        errs_mean.append(mse(frame.mean(axis=-1), pad.mean(axis=-1)))
        if k + 1 < len(resized[path]):  # control: the next source frame must not pass for this one
            errs_next.append(mse(frame, resized[path][k + 1]))
    value, pad_rgb = psnr(float(np.mean(errs))), psnr(float(np.mean(errs_pad)))
    pad_mean, off_by_one = psnr(float(np.mean(errs_mean))), psnr(float(np.mean(errs_next)))
    report(f"compat v2.1 reencode {kind} backend={ds.video_backend}: {len(got)} frames vs the v3.0 source frame at "
           f"the same index: PSNR {value:.2f} dB (worst frame {worst:.2f}) vs prep's resize (the next frame: "
           f"{off_by_one:.2f} dB); vs openpi resize_with_pad {pad_rgb:.2f} dB RGB, {pad_mean:.2f} dB channel mean")
    assert off_by_one < 30.0, f"{kind}: the comparison cannot tell neighbouring frames apart ({off_by_one:.2f} dB)"
    assert value >= 40.0 and worst >= 35.0, f"{kind}: PSNR {value:.2f} dB (worst {worst:.2f})"
    assert pad_mean >= 35.0, f"{kind}: resize_with_pad parity {pad_mean:.2f} dB channel mean"


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

