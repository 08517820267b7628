"""Dataset-level findings about format features that differ between reader generations: depth maps
(`pipeline.dataset.features`); the per-file display matrix is `pipeline.stages.verify.rotation_finding`.

What each reader line does with them (`depth_codec`, `depth_copy`, `display_rotation`) is declared in
`pipeline.checks`, with every other check.
"""

from __future__ import annotations

from pipeline.checks import Severity, found_severity
from pipeline.dataset import Dataset
from pipeline.dataset.features import depth_keys, lerobot06_depth_codec_problem
from pipeline.video.checks import CheckFailure


def depth_codec_findings(ds: Dataset) -> list[CheckFailure]:
    """A depth feature whose `video.codec` lerobot 0.6.x cannot resolve: 0.6 refuses the dataset at open."""
    severity = found_severity("depth_codec", ds.codebase_version)
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
                         "these rules", None, cam.key, str(ds.root / "meta/info.json"), Severity.INFO)
            for cam in ds.cameras if cam.depth]
