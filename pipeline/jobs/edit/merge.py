"""`prep edit --merge A B ...`: one dataset holding every episode of the sources in order, renumbered, tasks merged
by text, stats carried and aggregated; refused (naming the first difference) for datasets LeRobot would not
merge."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.errors import PrepError
from pipeline.jobs.edit.features import FeatureOptions, resolve
from pipeline.jobs.edit.job import claim_edit_output, open_source, output_of, source_root, write_edit
from pipeline.jobs.edit.publish import EditReport
from pipeline.jobs.edit.selection import Selection, Source, TaskPlan, episode_tasks, plan_tasks
from pipeline.runner import Engine
from pipeline.storage import Location, StorePath
from pipeline.text import printable

# LeRobot's `features_equal_for_merge`: a video feature's encoder settings under `info` may differ
VIDEO_ENCODER_INFO_KEYS = frozenset(f"video.{k}" for k in ("g", "crf", "preset", "fast_decode", "extra_options",
                                                            "video_backend"))


def _without_encoder_keys(feature: Any) -> Any:
    if not isinstance(feature, dict) or feature.get("dtype") != "video" or not isinstance(feature.get("info"), dict):
        return feature
    return {**feature, "info": {k: v for k, v in feature["info"].items() if k not in VIDEO_ENCODER_INFO_KEYS}}


def merge_difference(first: dict[str, Any], other: dict[str, Any]) -> str | None:
    """What makes `other` not mergeable with `first` (LeRobot's rule: the same fps, robot_type and features,
    a video's encoder settings aside), or None."""
    for key in ("codebase_version", "fps", "robot_type"):
        if first.get(key) != other.get(key):
            return f"{key} {other.get(key)!r} (the first dataset's: {first.get(key)!r})"
    fa, fb = first.get("features") or {}, other.get("features") or {}
    for name in list(fa) + [n for n in fb if n not in fa]:
        if name not in fb:
            return f"feature {name!r} is missing (the first dataset has it)"
        if name not in fa:
            return f"feature {name!r} is not in the first dataset"
        a, b = _without_encoder_keys(fa[name]), _without_encoder_keys(fb[name])
        if a != b:
            keys = sorted({k for k in set(a) | set(b) if a.get(k) != b.get(k)}) if isinstance(a, dict) and \
                isinstance(b, dict) else []
            what = ", ".join(f"{k} {b.get(k)!r} vs {a.get(k)!r}" for k in keys[:3]) if keys else "differs"
            return f"feature {name!r}: {what}"[:400]
    return None


def merged_info(infos: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first source's info.json with each video's encoder settings kept where every source agrees, else
    null ({} for extra_options), as LeRobot's `merge_video_feature_info_for_aggregate`."""
    out = json.loads(json.dumps(infos[0]))
    for name, ft in out.get("features", {}).items():
        if not isinstance(ft, dict) or ft.get("dtype") != "video" or not isinstance(ft.get("info"), dict):
            continue
        for key in VIDEO_ENCODER_INFO_KEYS:
            values = [((i.get("features") or {}).get(name, {}).get("info") or {}).get(key) for i in infos]
            if any(v != values[0] for v in values[1:]):
                ft["info"][key] = {} if key == "video.extra_options" else None
    return out


LEROBOT_RULE = "LeRobot's merge_datasets expects the same fps, robot_type and features too"


def merge_datasets(srcs: Sequence[Path | Location | StorePath], out: Path | Location, engine: Engine, *,
                   verify: bool = True, features: FeatureOptions | None = None) -> EditReport:
    """One dataset holding every episode of `srcs`, in order (A's, then B's, ...), renumbered, tasks merged
    by text (first appearance), stats carried and aggregated; every file copied or spliced by stream copy and
    kept a file of its own (files with different codec parameters are never concatenated). `features` (the
    cameras kept, the keys renamed) applies to each source first, so datasets whose cameras have other names
    merge once mapped to the same ones. Refuses datasets of different formats, fps, robot_type or features
    (after that mapping; naming the first difference) before writing, as LeRobot's own merge does. Each source
    and the output may be where it lives (a local folder, an object-store prefix)."""
    roots = [source_root(s) for s in srcs]
    out = output_of(out)
    features = features or FeatureOptions()
    if len(srcs) < 2:
        raise PrepError("--merge: give at least two datasets")
    if len({os.path.realpath(s) if isinstance(s, Path) else s.url for s in roots}) != len(roots):
        raise PrepError("--merge: a dataset is given twice")
    src_infos = [open_source(s, out) for s in roots]
    maps = resolve(features, roots, src_infos)
    infos = [m.info(i) for m, i in zip(maps, src_infos, strict=True)]
    for s, info in zip(roots[1:], infos[1:], strict=True):
        diff = merge_difference(infos[0], info)
        if diff is not None:
            mapped = " (after --keep-cameras/--drop-cameras/--rename)" if features.given() else ""
            raise PrepError(f"--merge: {printable(s)} cannot be merged with {printable(roots[0])}{mapped}: {diff}; "
                            f"{LEROBOT_RULE}")
    claim = claim_edit_output(out, roots)
    layout = merged_info(infos)
    merged: list[str] = []
    at: dict[str, int] = {}
    sources: list[Source] = []
    offset = index_offset = total = 0
    for src, info, fmap in zip(roots, src_infos, maps, strict=True):
        n_eps = n_frames = 0
        for _e, _t, n in episode_tasks(src, info):
            n_eps += 1
            n_frames += n
        sel = Selection.all(n_eps, offset)
        own = plan_tasks(src, info, sel)
        for t in own.tasks:
            if t not in at:
                at[t] = len(merged)
                merged.append(t)
        tasks = TaskPlan(merged, {own.index_of[t]: at[t] for t in own.tasks}, own.index_of)
        sources.append(Source(src, info, sel, tasks, index_offset, layout, features=fmap))
        offset += n_eps
        index_offset += n_frames
        total += n_eps
    return write_edit(sources, claim, total, engine, verify=verify, info_out=layout,
                      settings_extra=features.settings())
