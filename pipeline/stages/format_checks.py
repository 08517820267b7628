"""Dataset-level findings about format features that differ between reader generations: depth maps
(`pipeline.dataset.features`) and, per file, a display matrix (`pipeline.video.rotation`).

`READER_SEVERITY` says, per check and per reader line (v2.1: "0.3" = lerobot 0.3.x / openpi; v3.0: "0.4" and
"0.6"), what the reader does: "error" (refuses, raises or hands a wrong frame), "warning", "info", or None
(the reader never looks); `pipeline.verdicts` reads it for the per-reader verdicts.
"""

from __future__ import annotations

from pipeline.dataset import Dataset
from pipeline.dataset.features import depth_keys, lerobot06_depth_codec_problem
from pipeline.verdicts import ERROR, INFO, WARNING, reader_lines, strictest
from pipeline.video.checks import CheckFailure

READER_SEVERITY: dict[str, dict[str, str | None]] = {
    # lerobot 0.6.x datasets/dataset_reader.py builds DepthEncoderConfig.from_video_info for every depth key:
    # configs/video.py resolve_vcodec raises at open; 0.3.x / 0.4.x never read the flag nor the codec.
    "depth_codec": {"0.3": None, "0.4": None, "0.6": ERROR},
    # A depth map prep copies unchanged is not held to --size / --all-intra (user rules, not a reader's).
    "depth_copy": {"0.3": INFO, "0.4": INFO, "0.6": INFO},
    # torchcodec 0.11 (lerobot 0.6.x's default backend) applies a display matrix, pyav and the torchcodec
    # of 0.3.x / 0.4.x do not: every reader loads, but not all hand back the same orientation.
    "display_rotation": {"0.3": WARNING, "0.4": WARNING, "0.6": WARNING},
}


def severity_for(check: str, codebase_version: str, readers: tuple[str, ...] | None = None) -> str | None:
    """The strictest severity among `readers` (default: every reader of the format line) for `check`;
    None when none of them looks at what the check is about. (`pipeline.verdicts` then sets each finding's
    severity for the readers the user targets, `--reader`.)"""
    per = READER_SEVERITY[check]
    return strictest(per.get(r) for r in (readers or reader_lines(codebase_version)))


def depth_codec_findings(ds: Dataset) -> list[CheckFailure]:
    """A depth feature whose `video.codec` lerobot 0.6.x cannot resolve: 0.6 refuses the dataset at open."""
    severity = severity_for("depth_codec", ds.codebase_version)
    if severity is None:
        return []
    out = []
    features = ds.info.get("features") or {}
    for key in depth_keys(ds.info):
        problem = lerobot06_depth_codec_problem(features.get(key))
        if problem is not None:
            out.append(CheckFailure("depth_codec", "a codec lerobot 0.6.x resolves for a depth map (it refuses "
                                    "the dataset at open: configs/video.py resolve_vcodec)", problem, None, key,
                                    str(ds.root / "meta/info.json"), severity))
    return out


def depth_copy_findings(ds: Dataset, size: tuple[int, int] | None, all_intra: bool) -> list[CheckFailure]:
    """One info finding per depth camera known from info.json when --size or --all-intra was asked: such a
    camera is checked as the copy prep makes of it (frame counts, pts, the size info.json declares), not
    against those rules. (A camera found to be a depth map only by its file's pixel format is named by the
    file's check.)"""
    if size is None and not all_intra:
        return []
    asked = " and ".join(x for x in (f"--size {size[0]}x{size[1]}" if size else "",
                                      "--all-intra" if all_intra else "") if x)
    return [CheckFailure("depth_copy", asked, "a depth map prep copies unchanged: checked as a copy, not against "
                         "these rules", None, cam.key, str(ds.root / "meta/info.json"), INFO)
            for cam in ds.cameras if cam.depth]
