"""What `meta/info.json` says about a feature, read the way each LeRobot reader generation reads it.

- Depth maps: lerobot 0.6.x `datasets/dataset_metadata.py` `depth_keys` takes a feature as a depth map when its
  `info` holds `is_depth_map` (0.6's spelling) or `video.is_depth_map` (0.4's, also under `video_info`), by
  truth value. 0.3.x and 0.4.x never read the flag. prep also takes a camera stored in more than 8 bits of
  gray (gray10le, gray12le, gray16be, ...) for a depth map, flag or not.
- The depth codec: at open, lerobot 0.6.x builds `DepthEncoderConfig.from_video_info(features[key]["info"])`
  for every depth key (`datasets/dataset_reader.py`), whose `resolve_vcodec` (`configs/video.py`) raises
  `ValueError: Invalid vcodec ...` unless `video.codec` (after its alias `av1` -> `libsvtav1`) is one of its
  encoder names: the dataset does not open. 0.3.x and 0.4.x never read it.
"""

from __future__ import annotations

from typing import Any

from pipeline.text import shown

# lerobot 0.6.1 configs/video.py: HW_VIDEO_CODECS, VALID_VIDEO_CODECS, VIDEO_CODECS_ALIASES
LEROBOT06_HW_CODECS = ("h264_videotoolbox", "hevc_videotoolbox", "h264_nvenc", "hevc_nvenc", "h264_vaapi", "h264_qsv")
LEROBOT06_VALID_CODECS = frozenset({"h264", "hevc", "libsvtav1", "libaom-av1", "auto", *LEROBOT06_HW_CODECS})
LEROBOT06_CODEC_ALIASES = {"av1": "libsvtav1"}

# Where the flag is looked up (the sub-dict of the feature, the key), as lerobot 0.6.x `depth_keys` does.
DEPTH_FLAGS = (("info", "is_depth_map"), ("info", "video.is_depth_map"), ("video_info", "video.is_depth_map"))


def is_high_bit_gray(pix_fmt: str | None) -> bool:
    """gray10le, gray12le, gray16be, ...: more than 8 bits of one channel (a depth camera's levels)."""
    return bool(pix_fmt) and str(pix_fmt).startswith("gray") and pix_fmt not in ("gray", "gray8")


def is_depth_flagged(feature: Any) -> bool:
    """Whether a feature of info.json is flagged as a depth map, in either spelling (see the module notes)."""
    if not isinstance(feature, dict):
        return False
    for sub, key in DEPTH_FLAGS:
        block = feature.get(sub)
        if isinstance(block, dict) and block.get(key):
            return True
    return False


def declared_pix_fmt(feature: Any) -> str | None:
    """`video.pix_fmt` of a feature's `info` (or `video_info`), when it is a string."""
    if not isinstance(feature, dict):
        return None
    block = feature.get("info") or feature.get("video_info") or {}
    value = block.get("video.pix_fmt") if isinstance(block, dict) else None
    return value if isinstance(value, str) else None


def is_depth_feature(info: dict[str, Any], key: str) -> bool:
    """A depth map by its flag (either spelling) or by the pixel format info.json declares for it."""
    feature = (info.get("features") or {}).get(key)
    return is_depth_flagged(feature) or is_high_bit_gray(declared_pix_fmt(feature))


def depth_keys(info: dict[str, Any]) -> list[str]:
    """The features lerobot 0.6.x takes for depth maps (flagged in either spelling), in info.json's order."""
    features = info.get("features") or {}
    return [k for k, ft in features.items() if is_depth_flagged(ft)] if isinstance(features, dict) else []


def lerobot06_depth_codec_problem(feature: Any) -> str | None:
    """Why lerobot 0.6.x refuses to open a dataset with this depth feature (its `video.codec` is not one of
    0.6's encoder names), or None. A missing codec falls back to 0.6's default (hevc): no problem."""
    block = feature.get("info") if isinstance(feature, dict) else None
    codec = block.get("video.codec") if isinstance(block, dict) else None
    if codec is None:
        return None
    name = LEROBOT06_CODEC_ALIASES.get(codec, codec) if isinstance(codec, str) else codec
    if isinstance(name, str) and name in LEROBOT06_VALID_CODECS:
        return None
    return (f"video.codec {shown(codec)}, not one of lerobot 0.6's encoder names "
            f"({', '.join(sorted(LEROBOT06_VALID_CODECS))})")
