"""An output prep wrote into an S3 bucket (moto on loopback) loads in the real reader: `prep reencode` from a local
dataset of the reader's format into `s3://...`, the prefix downloaded as any user would (every object below it), and
`LeRobotDataset(repo_id, root=<download>)` reads every sample, each camera a frame of the new size (issue 34);
`prep scan` of it, run in the reader's own environment (its PyAV), passes.

Runs inside each reader venv (lerobot 0.3.x: v2.1; 0.4.x and 0.6.x: v3.0); skipped elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from compat_support import reader_of_venv
from parity_cases.model import FORMAT_OF_READER, VENV_OF_READER
from support.s3 import S3Server

from pipeline.synth import SynthSpec, write_synthetic

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.lerobot


VENVS = sorted(VENV_OF_READER.values())  # a parameter per reader venv: .ci/compat.sh selects each with -k NAME


def download(s3: S3Server, url: str, dst: Path) -> int:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    n = 0
    for key in s3.list_keys(url):
        rel = key[len(prefix) + 1:]
        path = dst / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_bytes(f"s3://{bucket}/{key}"))
        n += 1
    return n


@pytest.mark.parametrize("venv", VENVS)
def test_an_output_written_to_s3_loads_in_the_reader(venv: str, tmp_path: Path) -> None:
    reader = reader_of_venv(venv)
    fmt = FORMAT_OF_READER[reader]
    src = write_synthetic(tmp_path / "src", SynthSpec(version=fmt, episodes=3, frames=30, height=96, width=128))
    with S3Server() as s3:
        s3.make_bucket("compat")
        url = "s3://compat/out/ds_64"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(s3.env(client="prep"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        r = subprocess.run([sys.executable, "-m", "pipeline.cli", "reencode", str(src), "--dst", "64", "--out", url,
                            "--backend", "inline", "--no-progress"], capture_output=True, text=True, env=env,
                           timeout=600, cwd=str(tmp_path))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        local = tmp_path / "downloaded"
        assert download(s3, url, local) > 0
    assert (local / "meta/info.json").is_file()
    # prep itself in the reader's environment (its PyAV: 15 in lerobot 0.4.x has no sample index; scan then
    # demuxes, where it once failed every episode)
    scan = subprocess.run([sys.executable, "-m", "pipeline.cli", "scan", str(local), "--out",
                           str(tmp_path / "m.json"), "--backend", "inline", "--no-progress"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert scan.returncode == 0 and "FAILED" not in scan.stdout, scan.stdout[-2000:] + scan.stderr[-2000:]
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("prep-compat/s3_output", root=local)
    assert len(ds) == 3 * 30
    cameras = ds.meta.video_keys
    assert cameras
    for i in range(len(ds)):
        item = ds[i]
        for cam in cameras:
            assert tuple(item[cam].shape) == (3, 64, 64), (reader, cam, tuple(item[cam].shape))
