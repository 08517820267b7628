"""Which dataset file a path is: a camera's video, an episode data parquet, or neither.

Decided from the path alone with info.json's templates (each field a number, the camera key filled in)
and the episode columns (is that episode, or that v3.0 file, referenced by the metadata?), so that a
walk over millions of files needs no set of every path in the dataset.
"""

from __future__ import annotations

import os
import re
import string
from typing import Any

import numpy as np

from pipeline.dataset.model import Dataset
from pipeline.dataset.template import Template, cached_template
from pipeline.errors import DatasetError

NUMBER = r"(-?\d+)"


def _pattern(template: str, fixed: dict[str, str]) -> tuple[re.Pattern[str], list[str]]:
    rx, names = "", []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        rx += re.escape(literal)
        if name is None:
            continue
        if name in fixed:
            rx += re.escape(fixed[name])
        else:
            rx += NUMBER
            names.append(name)
    return re.compile(rx), names


class FileIndex:
    """`kind(rel)`: ("video", camera) | ("data", "") for a file the episode metadata references, else None.
    `camera(rel)`: the camera a path under videos/ belongs to, referenced or not (for byte counts)."""

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        self.shares_files = ds.layout.shares_files
        self.chunks_size = ds.info.get("chunks_size", 1000)
        self._kinds: list[tuple[str, str, Template, re.Pattern[str], list[str]]] = []
        video_tpl, data_tpl = ds.info.get("video_path"), ds.info.get("data_path")
        fields = ds.layout.path_fields
        where = str(ds.root / "meta/info.json")
        if isinstance(video_tpl, str):
            tpl = cached_template(video_tpl, where, "video_path", fields["video_path"])
            for cam in ds.camera_keys:
                rx, names = _pattern(video_tpl, {"video_key": cam})
                self._kinds.append(("video", cam, tpl, rx, names))
        if isinstance(data_tpl, str):
            rx, names = _pattern(data_tpl, {})
            self._kinds.append(("data", "", cached_template(data_tpl, where, "data_path", fields["data_path"]), rx,
                                names))
        self._files: dict[str, set[tuple[int, ...]]] = {}

    def _referenced_shared(self, kind: str, chunk: int, file: int) -> bool:
        if kind not in self._files:
            assert self.ds.file_keys is not None
            keys = np.stack(self.ds.file_keys(kind), axis=1) if len(self.ds.episodes) else np.zeros((0, 2), int)
            self._files[kind] = {tuple(int(v) for v in row) for row in np.unique(keys, axis=0)}
        return (chunk, file) in self._files[kind]

    def _referenced(self, kind: str, tpl: Template, values: dict[str, int], fixed: dict[str, Any]) -> bool:
        try:  # zero padding etc.: the template must give this very path back
            if os.path.normpath(tpl.fill(**values, **fixed)).replace(os.sep, "/") != self._last_rel:
                return False
        except (DatasetError, KeyError):
            return False
        if self.shares_files:  # a file is named by its (chunk_index, file_index) columns
            return self._referenced_shared(kind, values.get("chunk_index", 0), values.get("file_index", 0))
        index = values.get("episode_index")
        if index is None:  # a template without the episode: any file it gives is the dataset's
            return True
        if self.ds.episodes.position(index) is None:
            return False
        return "episode_chunk" not in values or values["episode_chunk"] == index // self.chunks_size

    def kind(self, rel: str) -> tuple[str, str] | None:
        self._last_rel = rel
        for kind, cam, tpl, rx, names in self._kinds:
            m = rx.fullmatch(rel)
            if m is None:
                continue
            values = {n: int(v) for n, v in zip(names, m.groups(), strict=True)}
            fixed = {"video_key": cam} if kind == "video" else {}
            if self._referenced(cam if kind == "video" else "data", tpl, values, fixed):
                return kind, cam
        return None

    def camera(self, rel: str) -> str | None:
        for kind, cam, _tpl, rx, _names in self._kinds:
            if kind == "video" and rx.fullmatch(rel):
                return cam
        return next((c for c in self.ds.camera_keys if f"/{c}/" in f"/{rel}"), None)
