"""Cameras stored as images (`dtype: "image"`: one PNG per row of the data parquet, as LeRobot writes a dataset
with `use_videos=False` and as openpi's LIBERO conversion does) are cameras too (issue 35): scan counts their
pictures and bytes from the parquet footers, in both formats, beside the video cameras of the same dataset."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
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


# ---- reencode: pictures into 224 all-intra videos ------------------------------------------------------------


def decoded(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


def test_reencode_turns_image_cameras_into_videos(mixed: Path, tmp_path: Path) -> None:
    """Each image camera becomes a 224x224 all-intra video feature (one file per data file), its column leaves the
    data files, and the output passes the README's check; the video camera is re-encoded as before."""
    out = tmp_path / "out"
    res = prep("reencode", mixed, "--dst", "224", "--out", out, "--backend", "inline", progress=False)
    assert res.returncode == 0, res.stdout + res.stderr
    info = json.loads((out / "meta/info.json").read_text())
    ds, _ = open_dataset(out)
    assert set(ds.camera_keys) == {VIDEO, *IMAGES} and ds.image_cameras == ()
    for key in IMAGES:
        feat = info["features"][key]
        assert feat["dtype"] == "video" and feat["shape"] == [224, 224, 3]
        assert feat["info"]["video.codec"] == "h264" and feat["info"]["video.fps"] == 30
    assert info["video_path"] == json.loads((mixed / "meta/info.json").read_text())["video_path"]
    for f in (out / "data").rglob("*.parquet"):
        t = pq.read_table(f)
        assert not set(IMAGES) & set(t.column_names)
        assert not set(IMAGES) & set(json.loads(t.schema.metadata[b"huggingface"])["info"]["features"])
    if ds.codebase_version == "v2.1":
        assert info["total_videos"] == EPISODES * 3
    check = prep("verify", out, "--size", "224x224", "--all-intra", "--decode", progress=False)
    assert check.returncode == 0, check.stdout + check.stderr
    # every output frame is the source picture, padded to 224 (pad resize: 64x48 -> 224x168 inside 224x224)
    ep = ds.episodes[1]
    ref = ep.video(IMAGES[0])
    frames = decoded(out / ref.rel)
    start = round(ref.from_timestamp * ds.fps)
    first = frames[start][28:196]  # the picture's rows (the pad bars above and below are black)
    src_table = pq.read_table(next(iter(sorted((mixed / "data").rglob("*.parquet")))) if ds.codebase_version == "v3.0"
                              else mixed / ds.episodes[1].data.rel)
    rows = [r for r in src_table.select([IMAGES[0], "episode_index"]).to_pylist() if r["episode_index"] == ep.index]
    from PIL import Image

    picture = np.asarray(Image.open(io.BytesIO(rows[0][IMAGES[0]]["bytes"])).convert("RGB").resize((224, 168)))
    assert np.abs(first.astype(int) - picture.astype(int)).mean() < 12  # the same picture, after h264 at crf 23
    assert len(frames) == (FRAMES if ds.codebase_version == "v2.1" else 2 * FRAMES)


def test_reencode_of_image_cameras_resumes_byte_identical(mixed: Path, tmp_path: Path) -> None:
    """A rerun keeps every finished video (made from the same pictures), and the output is the same bytes."""
    out = tmp_path / "out"
    first = prep("reencode", mixed, "--dst", "224", "--out", out, "--backend", "inline", progress=False)
    assert first.returncode == 0, first.stdout + first.stderr
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and "prep" not in p.parts}
    victim = next(p for p in sorted((out / "videos").rglob("*.mp4")) if IMAGES[1] in str(p))
    victim.unlink()
    (out / "meta/info.json").unlink()
    again = prep("reencode", mixed, "--dst", "224", "--out", out, "--backend", "inline", progress=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 encoded" in again.stdout
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and "prep" not in p.parts}
    assert after == before


def test_reencode_resizes_pictures_of_any_size(tmp_path: Path) -> None:
    """Pictures of another size than info.json declares, or one picture of another size mid-episode: every
    reader loads them (each at its own size, which verify warns of), so reencode takes them too, each picture
    resized by its own geometry: the output is uniform 224 video and passes the README's check."""
    from pipeline.synth import png_bytes

    root = write_synthetic(tmp_path / "ds", version="v2.1", episodes=2, frames=6, height=H, width=W,
                           image_cameras=IMAGES)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][IMAGES[0]]["shape"] = [H * 2, W * 2, 3]
    (root / "meta/info.json").write_text(json.dumps(info))
    data = root / "data/chunk-000/episode_000001.parquet"
    t = pq.read_table(data)
    col = t[IMAGES[1]].to_pylist()
    col[3] = {"bytes": png_bytes(np.full((W, H, 3), 200, dtype=np.uint8)), "path": None}  # 48x64 in a 64x48 camera
    t = t.set_column(t.column_names.index(IMAGES[1]), t.schema.field(IMAGES[1]),
                     pa.array(col, type=t.schema.field(IMAGES[1]).type))
    pq.write_table(t, data)
    out = tmp_path / "out"
    res = prep("reencode", root, "--dst", "224", "--out", out, "--backend", "inline", progress=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "drop-in" in res.stdout  # warnings only: the readers load the source
    check = prep("verify", out, "--size", "224x224", "--all-intra", "--decode", progress=False)
    assert check.returncode == 0, check.stdout + check.stderr
    frames = decoded(out / "videos/chunk-000" / IMAGES[1] / "episode_000001.mp4")
    assert len(frames) == 6 and {f.shape for f in frames} == {(224, 224, 3)}
    # the odd picture (portrait 48x64) is pad-resized by its own geometry: bars left and right, grey inside
    odd = frames[3]
    assert odd[:, :20].max() < 20 and abs(float(odd[100:124, 100:124].mean()) - 200) < 6


def test_keep_images_resizes_pictures_in_place(mixed: Path, tmp_path: Path) -> None:
    """--keep-images: the image cameras stay pictures in the data parquet, resized exactly as the video frames are
    (pad, 224x224, PNG), their shape and image stats updated; a rerun writes the same bytes."""
    out = tmp_path / "out"
    res = prep("reencode", mixed, "--dst", "224", "--keep-images", "--out", out, "--backend", "inline",
               progress=False)
    assert res.returncode == 0, res.stdout + res.stderr
    info = json.loads((out / "meta/info.json").read_text())
    for key in IMAGES:
        assert info["features"][key] == {"dtype": "image", "shape": [224, 224, 3],
                                         "names": ["height", "width", "channels"]}
    assert info["features"][VIDEO]["dtype"] == "video"
    ds, _ = open_dataset(out)
    assert ds.image_camera_keys == IMAGES
    from PIL import Image

    means = []
    for f in sorted((out / "data").rglob("*.parquet")):
        t = pq.read_table(f)
        for value in t[IMAGES[0]].to_pylist():
            with Image.open(io.BytesIO(value["bytes"])) as im:
                assert (im.format, im.size, im.mode) == ("PNG", (224, 224), "RGB")
                a = np.asarray(im)
            assert a[:20].max() < 3 and a[-20:].max() < 3  # the pad bars: 64x48 -> 224x168 inside 224x224
            means.append(a[28:196].reshape(-1, 3).mean(axis=0))
    assert len(means) == EPISODES * FRAMES
    m = load_manifest(out / "prep/manifest.json")
    cams = {c["key"]: c for c in m["dataset"]["cameras"]}
    assert cams[IMAGES[0]]["stored"] == "image" and cams[IMAGES[0]]["pictures"] == EPISODES * FRAMES
    check = prep("verify", out, "--decode", progress=False)
    assert check.returncode == 0, check.stdout + check.stderr
    # the dataset stats are the resized pictures' (pad bars included), not the source's
    stats = json.loads((out / "meta/stats.json").read_text()) if (out / "meta/stats.json").exists() else None
    if stats is not None:
        src_stats = json.loads((mixed / "meta/stats.json").read_text())
        assert stats[IMAGES[0]]["mean"] != src_stats[IMAGES[0]]["mean"]
        assert float(np.asarray(stats[IMAGES[0]]["min"]).min()) == 0.0  # the black bars
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and "prep" not in p.parts}
    (out / "meta/info.json").unlink()
    again = prep("reencode", mixed, "--dst", "224", "--keep-images", "--out", out, "--backend", "inline",
                 progress=False)
    assert again.returncode == 0, again.stdout + again.stderr
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and "prep" not in p.parts}
    assert after == before


# ---- a corpus: a dataset with image cameras beside one with videos --------------------------------------------


def test_a_corpus_with_image_cameras_scans_reencodes_and_budgets(tmp_path: Path) -> None:
    """LIBERO-like (two cameras stored as images) beside a video dataset: the corpus manifest counts the image
    cameras with their bytes, the corpus re-encode makes every camera a 224 video, the budget counts their frames."""
    data = tmp_path / "data"
    write_synthetic(data / "libero", version="v2.1", episodes=2, frames=10, height=H, width=W,
                    cameras=("observation.images.image", "observation.images.wrist_image"),
                    image_cameras=("observation.images.image", "observation.images.wrist_image"))
    write_synthetic(data / "aloha", version="v3.0", episodes=2, frames=10, height=H, width=W)
    (tmp_path / "corpus.toml").write_text(
        '[[datasets]]\nsource = "data/libero"\nweight = 1\n[datasets.cameras]\n'
        'base_0_rgb = "observation.images.image"\nleft_wrist_0_rgb = "observation.images.wrist_image"\n\n'
        '[[datasets]]\nsource = "data/aloha"\nweight = 1\n')
    scan = prep("scan", "--corpus", "corpus.toml", "--out", "out/native.json", "--backend", "inline", cwd=tmp_path,
                progress=False)
    assert scan.returncode == 0, scan.stdout + scan.stderr
    native = json.loads((tmp_path / "out/native.json").read_text())
    rows = {r["name"]: r for r in native["datasets"]}
    libero = {c["key"]: c for c in rows["libero"]["cameras"]}
    assert {c["stored"] for c in libero.values()} == {"image"}
    assert libero["observation.images.image"]["slot"] == "base_0_rgb"
    assert libero["observation.images.image"]["codec"] == "png" and libero["observation.images.image"]["bytes"] > 0
    reencode = prep("reencode", "--corpus", "corpus.toml", "--dst", "224", "--out", "out/prepared", "--backend",
                    "inline", cwd=tmp_path, progress=False)
    assert reencode.returncode == 0, reencode.stdout + reencode.stderr
    prepared = json.loads((tmp_path / "out/prepared/corpus.json").read_text())
    cams = [c for r in prepared["datasets"] for c in r["cameras"]]
    assert len(cams) == 5 and all((c["stored"], c["width"], c["codec"]) == ("video", 224, "h264") for c in cams)
    budget = prep("budget", "--corpus", "out/native.json", "--corpus-prepared", "out/prepared/corpus.json",
                  "--out", "out/budget", cwd=tmp_path)
    assert budget.returncode == 0, budget.stdout + budget.stderr
    mix = json.loads((tmp_path / "out/budget/report.json").read_text())["mixture"]
    assert mix["reencode"]["camera_frames"] == 2 * 10 * 2 + 2 * 10 * 3
