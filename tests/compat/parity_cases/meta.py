"""Metadata edits for the fault cases (pyarrow for parquet, json for info and jsonl), and the ground
truth of a dataset read from its own, still clean, metadata before any fault is applied."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .model import Truth
from .mp4 import copy_file


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=4))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def edit_info(root: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    info = read_json(root / "meta/info.json")
    fn(info)
    write_json(root / "meta/info.json", info)


def rewrite_parquet(path: Path, fn: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite one parquet file, keeping its schema metadata (the `huggingface` features) when the
    columns are unchanged, as a custom writer that edits with pyarrow would."""
    table = pq.read_table(path)
    new = fn(table)
    if new.schema.names == table.schema.names and table.schema.metadata:
        new = new.replace_schema_metadata(table.schema.metadata)
    pq.write_table(new, path)


def set_column(table: pa.Table, name: str, values: Any) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))


def data_files(root: Path) -> list[Path]:
    return sorted((root / "data").glob("*/*.parquet"))


def episodes_files(root: Path) -> list[Path]:
    return sorted((root / "meta/episodes").glob("*/*.parquet"))


def episodes_v30(root: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in episodes_files(root):
        rows += pq.read_table(p).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def video_keys(info: dict[str, Any]) -> list[str]:
    return [k for k, ft in info["features"].items() if ft["dtype"] == "video"]


def image_keys(info: dict[str, Any]) -> list[str]:
    """The cameras stored as images (one picture per row of the data parquet)."""
    return [k for k, ft in info["features"].items() if ft["dtype"] == "image"]


def layout(root: Path) -> list[tuple[str, int, str, float, int]]:
    """(camera, episode_index, video rel path, start time in the file, length) from clean metadata."""
    info = read_json(root / "meta/info.json")
    out = []
    if info["codebase_version"].startswith("v2"):
        for ep in read_jsonl(root / "meta/episodes.jsonl"):
            e = int(ep["episode_index"])
            for cam in video_keys(info):
                rel = info["video_path"].format(episode_chunk=e // info["chunks_size"], video_key=cam,
                                                episode_index=e)
                out.append((cam, e, rel, 0.0, int(ep["length"])))
    else:
        for ep in episodes_v30(root):
            for cam in video_keys(info):
                rel = info["video_path"].format(video_key=cam, chunk_index=ep[f"videos/{cam}/chunk_index"],
                                                file_index=ep[f"videos/{cam}/file_index"])
                out.append((cam, int(ep["episode_index"]), rel, float(ep[f"videos/{cam}/from_timestamp"]),
                            int(ep["length"])))
    return out


def truth_from_clean(root: Path, refdir: Path, fps: float | None = None) -> dict[tuple[str, int], Truth]:
    """Copy every video of a clean dataset to `refdir` and say: row i of an episode shows the frame at
    start + i/fps of its file. Call before a fault touches the dataset."""
    fps = fps or float(read_json(root / "meta/info.json")["fps"])
    copied: dict[str, Path] = {}
    truth = {}
    for cam, ep, rel, start, n in layout(root):
        if rel not in copied:
            copied[rel] = copy_file(root / rel, refdir / rel)
        truth[(cam, ep)] = Truth(str(copied[rel]), tuple(round(start + i / fps, 6) for i in range(n)), True)
    return truth
