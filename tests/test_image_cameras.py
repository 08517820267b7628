"""Cameras stored as images (`dtype: "image"`: one PNG per row of the data parquet, as LeRobot writes a dataset
with `use_videos=False` and as openpi's LIBERO conversion does) are cameras too (issue 35): scan counts their
pictures and bytes from the parquet footers, in both formats, beside the video cameras of the same dataset."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep as prep

from pipeline.formats import open_dataset
from pipeline.jobs.manifest import load_manifest
from pipeline.synth import write_synthetic

IMAGES = ("observation.images.cam_high", "observation.images.cam_left_wrist")
VIDEO = "observation.images.cam_right_wrist"
EPISODES, FRAMES, H, W = 3, 12, 48, 64


@pytest.fixture(params=["v2.1", "v3.0"])
def mixed(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Two cameras stored as images and one as video."""
    return write_synthetic(tmp_path / f"mixed-{request.param}", version=request.param, episodes=EPISODES,
                           frames=FRAMES, height=H, width=W, image_cameras=IMAGES, episodes_per_file=2)


def image_column_bytes(root: Path, camera: str) -> tuple[int, int]:
    """(pictures, stored bytes) of a camera's image column over every data file, from the footers."""
    pictures = stored = 0
    for f in sorted((root / "data").rglob("*.parquet")):
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for i in range(rg.num_columns):
                col = rg.column(i)
                if col.path_in_schema in (f"{camera}.bytes", f"{camera}.path"):
                    stored += col.total_compressed_size
            # every row holds a picture here: the writer wrote no null
            pictures += rg.num_rows
    return pictures, stored


def test_model_reads_image_cameras(mixed: Path) -> None:
    ds, _ = open_dataset(mixed)
    assert ds.camera_keys == (VIDEO,)
    assert ds.image_camera_keys == IMAGES
    cam = ds.image_cameras[0]
    assert (cam.height, cam.width, cam.channels) == (H, W, 3)


def test_scan_counts_image_cameras(mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    res = prep("scan", mixed, "--out", out, progress=False)
    assert res.returncode == 0, res.stderr
    assert "3 cameras, 2 stored as images" in res.stdout
    m = load_manifest(out)
    cams = {c["key"]: c for c in m["dataset"]["cameras"]}
    assert set(cams) == {VIDEO, *IMAGES}
    assert cams[VIDEO]["stored"] == "video"
    b = m["totals"]["bytes"]
    images = 0
    for key in IMAGES:
        c = cams[key]
        assert (c["stored"], c["codec"], c["width"], c["height"], c["pix_fmt"]) == ("image", "png", W, H, "rgb24")
        pictures, stored = image_column_bytes(mixed, key)
        assert c["pictures"] == pictures == EPISODES * FRAMES
        # per episode shares of each file's column bytes, summed: the file's bytes up to rounding
        assert abs(b["per_camera"][key] - stored) <= EPISODES
        images += b["per_camera"][key]
    assert b["images"] == images
    assert 0 < b["images"] < b["data"]
    # the per-episode table names the count by its origin
    rows = pq.read_table(out.with_name("m.episodes.parquet")).to_pylist()
    assert [r[f"{IMAGES[0]}/frames_from_footer"] for r in rows] == [FRAMES] * EPISODES
    assert sum(r[f"{IMAGES[0]}/bytes"] for r in rows) == b["per_camera"][IMAGES[0]]


def test_scan_refuses_a_missing_image_column(tmp_path: Path) -> None:
    """info.json declares an image camera the data files do not hold: each episode fails, naming the file."""
    import json

    root = write_synthetic(tmp_path / "ds", version="v2.1", episodes=2, frames=6, height=H, width=W,
                           image_cameras=IMAGES)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.images.ghost"] = {"dtype": "image", "shape": [H, W, 3],
                                                    "names": ["height", "width", "channels"]}
    (root / "meta/info.json").write_text(json.dumps(info))
    out = tmp_path / "m.json"
    res = prep("scan", root, "--out", out, progress=False)
    assert res.returncode != 0
    m = load_manifest(out)
    assert m["totals"]["episodes_failed"] == 2
    assert "no image column 'observation.images.ghost'" in m["failures"][0]["reason"]
    assert m["failures"][0]["path"].endswith("episode_000000.parquet")
