"""`meta/info.json`: the JSON file and what the model reads of it (cameras, path templates), whatever the format.

`pipeline.formats.read_info` reads it and checks it is a dataset of a format prep reads."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pipeline.bounded import MAX_JSON_CHARS, JsonBoundError, loads_json
from pipeline.dataset.features import declared_pix_fmt, is_depth_flagged, is_high_bit_gray
from pipeline.dataset.model import CameraInfo, ImageCamera
from pipeline.dataset.template import cached_template, inside_root
from pipeline.errors import DatasetError
from pipeline.storage import FileProblem, StorePath, as_file

INFO_REL = "meta/info.json"


def read_json_file(path: Path | StorePath) -> Any:
    """A whole JSON file of the dataset, read through its store (size checked before it is read, depth before it
    is parsed, as `pipeline.bounded.read_json` does)."""
    src = as_file(path)
    try:
        if not src.is_file():
            raise DatasetError(src, "missing file")
        size = src.stat().size
        if size > 4 * MAX_JSON_CHARS:  # UTF-8: at most 4 bytes a character
            raise JsonBoundError(f"{size:,} bytes, above the {4 * MAX_JSON_CHARS:,} prep reads", "", 0)
        return loads_json(src.read_text(encoding="utf-8"))
    except FileProblem as exc:
        raise DatasetError(exc.path, exc.message) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        what = "JSON refused" if isinstance(exc, JsonBoundError) else "invalid JSON"
        raise DatasetError(path, f"{what} at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def cameras_from_info(info: dict[str, Any], path: Path | StorePath) -> tuple[CameraInfo, ...]:
    cams: list[CameraInfo] = []
    for key, feat in info["features"].items():
        if not isinstance(feat, dict):
            raise DatasetError(path, f"feature {key!r} must be an object")
        if feat.get("dtype") != "video":
            continue
        shape = feat.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
            raise DatasetError(path, f"feature {key!r}: invalid shape {shape!r}")
        names = feat.get("names")
        vinfo = feat.get("info") or feat.get("video_info") or {}
        if not isinstance(vinfo, dict):
            raise DatasetError(path, f"feature {key!r}: 'info' must be an object")
        cams.append(
            CameraInfo(
                key=key,
                shape=tuple(shape),
                names=tuple(str(n) for n in names) if isinstance(names, list) else None,
                height=_int_or_none(vinfo.get("video.height")),
                width=_int_or_none(vinfo.get("video.width")),
                codec=vinfo.get("video.codec") if isinstance(vinfo.get("video.codec"), str) else None,
                pix_fmt=vinfo.get("video.pix_fmt") if isinstance(vinfo.get("video.pix_fmt"), str) else None,
                fps=_float_or_none(vinfo.get("video.fps")),
                depth=is_depth_flagged(feat) or is_high_bit_gray(declared_pix_fmt(feat)),
            )
        )
    if cams and not isinstance(info.get("video_path"), str):
        raise DatasetError(path, "video features declared but 'video_path' is missing")
    return tuple(cams)


def image_cameras_from_info(info: dict[str, Any], path: Path | StorePath) -> tuple[ImageCamera, ...]:
    """The cameras info.json declares as images (`dtype: "image"`), in its order. The size comes from the shape
    by its names (height, width, channel[s]); LeRobot's own writer names them so, and a shape of three without
    names is read as (height, width, channels), as LeRobot's image transforms take it."""
    cams: list[ImageCamera] = []
    for key, feat in info["features"].items():
        if not isinstance(feat, dict) or feat.get("dtype") != "image":
            continue
        shape = feat.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                                                  for s in shape):
            raise DatasetError(path, f"feature {key!r}: invalid shape {shape!r}")
        raw = feat.get("names")
        names = tuple(str(n) for n in raw) if isinstance(raw, list) else None
        dims: dict[str, int] = {}
        if names is not None and len(names) == len(shape):
            dims = {n: s for n, s in zip(names, shape, strict=True)}
        elif len(shape) == 3:
            dims = {"height": shape[0], "width": shape[1], "channels": shape[2]}
        cams.append(ImageCamera(key=key, shape=tuple(shape), names=names, height=dims.get("height"),
                                width=dims.get("width"), channels=dims.get("channels", dims.get("channel"))))
    return tuple(cams)


def video_keys(info: dict[str, Any], path: Path | str = INFO_REL) -> tuple[str, ...]:
    """The camera (video feature) keys of a checked info.json, in its order (`cameras_from_info`'s checks)."""
    return tuple(c.key for c in cameras_from_info(info, Path(path)))


def format_template(template: str, path: Path | str | StorePath, allowed: Collection[str], *, key: str | None = None,
                    **values: Any) -> str:
    """Fill a path template from info.json (checked by `pipeline.dataset.template.check_template` first),
    refusing paths that leave the root."""
    key = key or ("video_path" if "video_key" in allowed else "data_path")
    tpl = cached_template(template, str(path), key, frozenset(allowed))
    return inside_root(tpl.fill(**values), template, path, key)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
