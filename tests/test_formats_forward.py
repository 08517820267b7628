"""Format moves LeRobot is making (issue 25): a `storage_format` other than parquet is refused with one line by
every command; v3.1's per-frame language columns, a top-level `tools` list and unknown info.json keys pass through
every command untouched; v3.0 data files prep writes keep one parquet row group per episode; mp4s prep writes put
the index (moov) before the media data (faststart), for both engines. Real files: pipeline.synth (PyAV h264),
pyarrow, the prep CLI."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.synth import SynthSpec, write_synthetic

RUN = ["--backend", "inline", "--no-progress"]
CAM = "observation.images.top"
TOOLS = [{"name": "gripper", "description": "open or close", "parameters": {"width": "float"}}]


def dataset(tmp_path: Path, fmt: str, name: str = "src") -> Path:
    """3 episodes x 12 frames, with v3.1's language columns, `tools` and a key no reader knows yet."""
    root = write_synthetic(tmp_path / name, SynthSpec(version=fmt, episodes=3, frames=12, height=48, width=64,
                                                      cameras=(CAM,), gop=4, state_dim=4, seed=3))
    info = json.loads((root / "meta/info.json").read_text())
    info["tools"] = TOOLS
    info["x_future_key"] = {"nested": [1, 2, 3]}
    info["features"]["language_persistent"] = {"dtype": "string", "shape": [1], "names": None}
    info["features"]["language_events"] = {"dtype": "string", "shape": [1], "names": None}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    for p in sorted((root / "data").rglob("*.parquet")):
        t = pq.read_table(p)
        n = t.num_rows
        t = t.append_column("language_persistent", pa.array([f"put the cube in the box ({i % 3})" for i in range(n)]))
        t = t.append_column("language_events", pa.array(
            [[{"time": 0.1 * i, "text": "grasp"}] if i % 5 == 0 else [] for i in range(n)]))
        pq.write_table(t, p)
    return root


def language(root: Path) -> dict[tuple[int, int], tuple[Any, Any]]:
    """(episode, frame_index) -> the two language values, over every data file of either layout."""
    out = {}
    for p in sorted((root / "data").rglob("*.parquet")):
        for r in pq.read_table(p).to_pylist():
            out[(r["episode_index"], r["frame_index"])] = (r["language_persistent"], r["language_events"])
    return out


def info_of(root: Path) -> dict[str, Any]:
    return json.loads((root / "meta/info.json").read_text())


def top_level_boxes(path: Path) -> list[str]:
    b = path.read_bytes()
    out, i = [], 0
    while i + 8 <= len(b):
        size, typ = struct.unpack(">I4s", b[i:i + 8])
        if size == 1:
            size = struct.unpack(">Q", b[i + 8:i + 16])[0]
        out.append(typ.decode("latin1"))
        if size < 8:
            break
        i += size
    return out


def faststart(path: Path) -> bool:
    boxes = top_level_boxes(path)
    return "moov" in boxes and "mdat" in boxes and boxes.index("moov") < boxes.index("mdat")


def row_groups(path: Path) -> list[tuple[int, ...]]:
    """Per row group, the episode indices it holds."""
    f = pq.ParquetFile(path)
    return [tuple(sorted(set(f.read_row_group(g, columns=["episode_index"])["episode_index"].to_pylist())))
            for g in range(f.num_row_groups)]


# ---- storage_format ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["scan"], ["verify"], ["reencode", "--dst", "32x32"], ["convert", "--to", "v2.1"],
                                     ["edit", "--drop", "0"]])
def test_storage_format_lance_is_refused_in_one_line(command: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic(tmp_path / "lance", SynthSpec(version="v3.0", episodes=1, frames=4, height=32, width=32,
                                                         cameras=(CAM,), seed=1))
    info = info_of(root)
    info["storage_format"] = "lance"
    (root / "meta/info.json").write_text(json.dumps(info))
    out = ["--out", str(tmp_path / "out")] if command[0] in ("reencode", "convert", "edit") else []
    code = main([command[0], str(root), *command[1:], *out, *RUN])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "storage_format 'lance'" in err[0] and "parquet" in err[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.mp4"))


def test_storage_format_parquet_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_synthetic(tmp_path / "pq", SynthSpec(version="v3.0", episodes=1, frames=4, height=32, width=32,
                                                      cameras=(CAM,), seed=1))
    info = info_of(root)
    info["storage_format"] = "parquet"
    (root / "meta/info.json").write_text(json.dumps(info))
    assert main(["verify", str(root), *RUN]) == 0


# ---- v3.1 columns, tools, unknown keys --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_language_columns_tools_and_unknown_keys_pass_through(fmt: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    src = dataset(tmp_path, fmt)
    want = language(src)
    assert main(["scan", str(src), "--out", str(tmp_path / "scan.json"), *RUN]) == 0
    scan = json.loads((tmp_path / "scan.json").read_text())
    data_bytes = sum(p.stat().st_size for p in (src / "data").rglob("*.parquet"))
    assert json.dumps(scan).count(str(data_bytes)) >= 1  # the data files are counted whole, new columns included
    assert main(["verify", str(src), *RUN]) == 0
    assert main(["reencode", str(src), "--dst", "32x32", "--out", str(tmp_path / "r"), *RUN]) == 0
    other = "v3.0" if fmt == "v2.1" else "v2.1"
    assert main(["convert", str(src), "--to", other, "--out", str(tmp_path / "c"), *RUN]) == 0
    for out in (tmp_path / "r", tmp_path / "c"):
        info = info_of(out)
        assert info["tools"] == TOOLS and info["x_future_key"] == {"nested": [1, 2, 3]}
        for key in ("language_persistent", "language_events"):
            assert info["features"][key] == info_of(src)["features"][key]
        assert language(out) == want
        assert main(["verify", str(out), *RUN]) == 0
    for p in (src / "data").rglob("*.parquet"):  # reencode copies the data byte for byte
        assert (tmp_path / "r" / p.relative_to(src)).read_bytes() == p.read_bytes()


# ---- one row group per episode ----------------------------------------------------------------------------


def test_convert_to_v30_writes_one_row_group_per_episode(tmp_path: Path) -> None:
    src = dataset(tmp_path, "v2.1")
    assert main(["convert", str(src), "--to", "v3.0", "--out", str(tmp_path / "c"), *RUN]) == 0
    files = sorted((tmp_path / "c" / "data").rglob("*.parquet"))
    assert files and [row_groups(p) for p in files] == [[(0,), (1,), (2,)]]


def test_reencode_repair_writes_one_row_group_per_episode(tmp_path: Path) -> None:
    """A v3.0 source whose timestamps are off the grid (video on it): --repair timestamps rewrites the data
    file, one row group per episode (the source has one for all)."""
    src = dataset(tmp_path, "v3.0")
    (data,) = sorted((src / "data").rglob("*.parquet"))
    t = pq.read_table(data)
    ts = t["timestamp"].to_numpy().copy()
    ts[1::2] += 0.003
    t = t.set_column(t.column_names.index("timestamp"), t.schema.field("timestamp"), pa.array(ts, t["timestamp"].type))
    pq.write_table(t, data)
    assert row_groups(data) == [(0, 1, 2)]
    out = tmp_path / "r"
    assert main(["reencode", str(src), "--dst", "32x32", "--out", str(out), "--repair", "timestamps", *RUN]) == 0
    assert row_groups(out / data.relative_to(src)) == [(0,), (1,), (2,)]
    assert language(out) == language(src)


# ---- faststart ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["pyav", pytest.param("ffmpeg", marks=pytest.mark.skipif(
    shutil.which("ffmpeg") is None, reason="needs the ffmpeg program"))])
def test_reencoded_mp4s_are_faststart(engine: str, tmp_path: Path) -> None:
    src = write_synthetic(tmp_path / "src", SynthSpec(version="v2.1", episodes=2, frames=6, height=32, width=48,
                                                      cameras=(CAM,), seed=2))
    assert not any(faststart(p) for p in (src / "videos").rglob("*.mp4"))  # the source is not
    out = tmp_path / "out"
    assert main(["reencode", str(src), "--dst", "32x32", "--out", str(out), "--engine", engine, *RUN]) == 0
    mp4s = sorted((out / "videos").rglob("*.mp4"))
    assert len(mp4s) == 2 and all(faststart(p) for p in mp4s), [top_level_boxes(p) for p in mp4s]


def test_converted_mp4s_are_faststart(tmp_path: Path) -> None:
    src = write_synthetic(tmp_path / "src", SynthSpec(version="v2.1", episodes=2, frames=6, height=32, width=48,
                                                      cameras=(CAM,), seed=2, gop=1))
    assert main(["convert", str(src), "--to", "v3.0", "--out", str(tmp_path / "c30"), *RUN]) == 0
    assert main(["convert", str(tmp_path / "c30"), "--to", "v2.1", "--out", str(tmp_path / "c21"), *RUN]) == 0
    for out in (tmp_path / "c30", tmp_path / "c21"):
        mp4s = sorted((out / "videos").rglob("*.mp4"))
        assert mp4s and all(faststart(p) for p in mp4s), [top_level_boxes(p) for p in mp4s]
