"""Which features an edit writes, and under which keys: `FeatureOptions` (--keep-cameras, --drop-cameras,
--rename OLD=NEW) -> one `FeatureMap` per source (`resolve`), checked against every source before anything is
written. A camera is a feature of dtype `video` (its mp4s) or `image` (PNG bytes in a data parquet column).

A `FeatureMap` says what becomes of each source key: left out (a dropped camera) or renamed (any feature but
the five LeRobot writes itself). It is applied to info.json (`info`: the features, in their order; `video_path`
null once no video is left, as LeRobot's `create(use_videos=False)` writes it), to stats (`stats`: meta/stats.json,
episodes_stats.jsonl), to a v3.0 episode metadata row (`row`: its `videos/<key>/...` and `stats/<key>/...`
columns) and, through `columns`, to the data parquet's columns and their `huggingface` schema metadata
(`pipeline.stages.edit`). A dropped video camera's files are simply not written; a kept one's are copied, or
spliced, by stream copy under the new key's path, every packet the source's."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.errors import PrepError
from pipeline.text import one_line, printable, shown

RESERVED = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # LeRobot's own columns
CAMERA_DTYPES = ("video", "image")
KEYS_SHOWN = 300  # characters of a key list in a refusal


@dataclass(slots=True, frozen=True)
class FeatureOptions:
    """--keep-cameras KEY ... (only these cameras), --drop-cameras KEY ... (not these; both combine: a camera is
    kept when every keep option keeps it and no drop option drops it), --rename OLD=NEW ... (source key -> output
    key, applied together, so a swap is allowed)."""

    keep_cameras: tuple[str, ...] | None = None
    drop_cameras: tuple[str, ...] | None = None
    rename: tuple[tuple[str, str], ...] = ()

    def given(self) -> bool:
        return self.keep_cameras is not None or self.drop_cameras is not None or bool(self.rename)

    def settings(self) -> dict[str, Any]:
        """What edit_options.json records (a rerun with other features is refused as another edit)."""
        out: dict[str, Any] = {}
        if self.keep_cameras is not None:
            out["keep_cameras"] = sorted(self.keep_cameras)
        if self.drop_cameras is not None:
            out["drop_cameras"] = sorted(self.drop_cameras)
        if self.rename:
            out["rename"] = dict(sorted(self.rename))
        return {"features": out} if out else {}


@dataclass(slots=True, frozen=True)
class FeatureMap:
    """One source's features in the output: `dropped` source keys are left out, `renamed` (source key, output
    key) pairs renamed; every other key is kept as it is."""

    dropped: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.dropped or self.renamed)

    def key(self, name: str) -> str | None:
        """The output key of source key `name`; None when it is left out."""
        if name in self.dropped:
            return None
        return dict(self.renamed).get(name, name)

    def columns(self) -> tuple[tuple[str, str | None], ...]:
        """The data columns that change: (source column, output column or None when dropped)."""
        return tuple(sorted([(k, None) for k in self.dropped] + list(self.renamed),
                            key=lambda kv: kv[0]))

    def cameras(self, info: dict[str, Any]) -> list[tuple[str, str]]:
        """The kept video cameras of a source's info.json: (source key, output key), in feature order."""
        out = []
        for key, ft in (info.get("features") or {}).items():
            new = self.key(key)
            if new is not None and isinstance(ft, dict) and ft.get("dtype") == "video":
                out.append((key, new))
        return out

    def info(self, info: dict[str, Any]) -> dict[str, Any]:
        """The output's info.json from a source's (a deep copy): features left out or renamed in their order."""
        out: dict[str, Any] = json.loads(json.dumps(info))
        if not self.changes:
            return out
        feats = out.get("features") or {}
        out["features"] = {new: ft for key, ft in feats.items() if (new := self.key(key)) is not None}
        had_video = any(isinstance(ft, dict) and ft.get("dtype") == "video" for ft in feats.values())
        if had_video and not any(isinstance(ft, dict) and ft.get("dtype") == "video"
                                 for ft in out["features"].values()):
            out["video_path"] = None  # as LeRobot writes a dataset without videos
        return out

    def stats(self, stats: dict[str, Any]) -> dict[str, Any]:
        """Stats keyed by feature (meta/stats.json, an episode's stats), in the output's keys."""
        if not self.changes:
            return stats
        return {new: v for k, v in stats.items() if (new := self.key(k)) is not None}

    def row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A v3.0 episode metadata row with its `videos/<key>/<field>` and `stats/<key>/<stat>` columns in the
        output's keys (a dropped feature's left out), in their order."""
        if not self.changes:
            return dict(row)
        out: dict[str, Any] = {}
        for col, value in row.items():
            head, sep, rest = col.partition("/")
            if sep and head in ("videos", "stats"):
                feature, _, field = rest.rpartition("/")
                new = self.key(feature)
                if new is None:
                    continue
                col = f"{head}/{new}/{field}"
            out[col] = value
        return out


def camera_keys(info: dict[str, Any]) -> list[str]:
    return [k for k, ft in (info.get("features") or {}).items()
            if isinstance(ft, dict) and ft.get("dtype") in CAMERA_DTYPES]


def _keys(keys: Iterable[str]) -> str:
    return one_line(", ".join(keys) or "none", KEYS_SHOWN)


def _named(srcs: Sequence[Any]) -> str:
    return printable(srcs[0]) if len(srcs) == 1 else "any of the datasets"


def _check_known(flag: str, given: Sequence[str], srcs: Sequence[Any], infos: Sequence[dict[str, Any]]) -> None:
    """Every key `flag` names is a camera of (at least one of) the sources, else one line naming it and the
    cameras there are."""
    cams = list(dict.fromkeys(k for info in infos for k in camera_keys(info)))
    features = {k for info in infos for k in (info.get("features") or {})}
    for key in given:
        if key not in cams:
            what = "a feature but not a camera" if key in features else "not a camera"
            raise PrepError(f"{flag}: {shown(key, 200)} is {what} of {_named(srcs)} (cameras: {_keys(cams)})")


def _check_renames(rename: Sequence[tuple[str, str]], srcs: Sequence[Any], infos: Sequence[dict[str, Any]]) -> None:
    seen: set[str] = set()
    features = list(dict.fromkeys(k for info in infos for k in (info.get("features") or {})))
    for old, new in rename:
        pair = one_line(f"{old}={new}", 400)
        if old in seen:
            raise PrepError(f"--rename {pair}: {shown(old, 200)} is renamed twice")
        seen.add(old)
        for key in (old, new):
            if key in RESERVED:
                raise PrepError(f"--rename {pair}: {key!r} is one of the columns LeRobot writes itself "
                                f"({', '.join(RESERVED)}) and keeps its name")
        if old not in features:
            raise PrepError(f"--rename {pair}: {shown(old, 200)} is not a feature of {_named(srcs)} "
                            f"(features: {_keys(k for k in features if k not in RESERVED)})")


def resolve(options: FeatureOptions, srcs: Sequence[Any], infos: Sequence[dict[str, Any]]) -> list[FeatureMap]:
    """Each source's `FeatureMap`, or one line refusing the options: a camera key or a renamed key that is in
    no source, a reserved key renamed or renamed to, a key renamed twice, a dropped camera renamed, two features
    of a source given one name."""
    if not options.given():
        return [FeatureMap() for _ in srcs]
    for flag, given in (("--keep-cameras", options.keep_cameras), ("--drop-cameras", options.drop_cameras)):
        if given is not None:
            _check_known(flag, given, srcs, infos)
    _check_renames(options.rename, srcs, infos)
    maps = []
    for src, info in zip(srcs, infos, strict=True):
        feats = list(info.get("features") or {})
        cams = camera_keys(info)
        dropped = [k for k in cams if (options.keep_cameras is not None and k not in options.keep_cameras)
                   or (options.drop_cameras is not None and k in options.drop_cameras)]
        renamed = [(old, new) for old, new in options.rename if old in feats]
        for old, new in renamed:
            if old in dropped:
                raise PrepError(f"--rename {one_line(f'{old}={new}', 400)}: {shown(old, 200)} is left out of "
                                f"{printable(src)} by the camera options")
        fmap = FeatureMap(tuple(dropped), tuple(renamed))
        named: dict[str, str] = {}
        for key in feats:
            out_key = fmap.key(key)
            if out_key is None:
                continue
            if out_key in named:
                a, b = named[out_key], key
                raise PrepError(f"--rename: {shown(a, 200)} and {shown(b, 200)} of {printable(src)} would both be "
                                f"named {shown(out_key, 200)}")
            named[out_key] = key
        maps.append(fmap)
    return maps

