"""Dataset-level findings of `prep verify` (and of reencode's check of its source): the metadata files
each reader version opens unconditionally, info.json totals and episode numbering, each with the
severity of what LeRobot's reader does with it (every check's severity per reader: `pipeline.checks`).

Plain functions over the opened dataset (array operations on the episode columns; no video, no Dask).
The reader behaviour each check mirrors is named beside it (README, "Verdicts").
"""

from __future__ import annotations

import numpy as np

from pipeline.checks import Severity, found_severity, rule_what
from pipeline.dataset import Dataset
from pipeline.errors import EpisodeError
from pipeline.video.checks import CheckFailure

# Files each reader opens whatever the dataset holds; a missing one makes it fall back to the hub
# (`get_safe_version` -> `get_repo_versions`), which fails offline. meta/stats.json is optional in both
# (`load_stats` returns None), and so are v3.0's stats/* columns (`load_episodes` drops them).
REQUIRED_FILES: dict[str, tuple[str, ...]] = {
    # lerobot 0.3.x datasets/utils.py: load_metadata -> load_info, load_tasks, load_episodes,
    # load_episodes_stats (each read_jsonlines / load_json)
    "v2.1": ("meta/info.json", "meta/episodes.jsonl", "meta/tasks.jsonl", "meta/episodes_stats.jsonl"),
    # lerobot 0.4.x datasets/utils.py: load_info, load_tasks (pd.read_parquet), load_episodes
    "v3.0": ("meta/info.json", "meta/tasks.parquet", "meta/episodes"),
}
READERS = {"v2.1": "lerobot 0.3.x", "v3.0": "lerobot 0.4.x and 0.6.x"}


def missing_files(ds: Dataset) -> list[CheckFailure]:
    out = []
    for rel in REQUIRED_FILES.get(ds.codebase_version, ()):
        path = ds.root / rel
        present = path.is_dir() and any(path.glob("**/*.parquet")) if rel == "meta/episodes" else path.is_file()
        if not present:
            out.append(CheckFailure("metadata_files", f"{rel} (opened by {READERS[ds.codebase_version]})",
                                    "missing", None, None, str(path)))
    return out


def dataset_findings(ds: Dataset, rejected: list[EpisodeError], rejected_total: int) -> list[CheckFailure]:
    """Required files, info.json totals and episode numbering vs what was found."""
    out = missing_files(ds)
    info_path = str(ds.root / "meta/info.json")
    for r in rejected:
        out.append(CheckFailure("metadata", "a valid episode record", r.message, r.episode, None, r.path))
    found = len(ds.episodes) + rejected_total
    declared = ds.info.get("total_episodes")
    if declared is not None and declared != found:
        out.append(CheckFailure("total_episodes", f"{declared} (info.json)", f"{found} episode records",
                                None, None, info_path))
    declared_frames = ds.info.get("total_frames")
    if declared_frames is not None and not rejected_total and declared_frames != ds.total_frames_expected:
        out.append(CheckFailure("total_frames", f"{declared_frames} (info.json)",
                                f"{ds.total_frames_expected} (sum of episode lengths)", None, None, info_path,
                                found_severity("total_frames", ds.codebase_version) or Severity.ERROR))
    for rule, line in ds.rule_warnings:  # metadata rules no reader of the format line refuses
        out.append(CheckFailure("metadata_rule", rule_what(rule), line, None, None, str(ds.root / "meta"),
                                Severity.WARNING))
    if ds.rule_warnings_total > len(ds.rule_warnings):
        more = ds.rule_warnings_total - len(ds.rule_warnings)
        out.append(CheckFailure("metadata_rule", "the metadata rules", f"{more} more problems no reader refuses",
                                None, None, str(ds.root / "meta"), Severity.WARNING))
    for st in ds.stale_data_files:  # rows found where LeRobot finds them (pipeline.dataset.datafiles)
        out.append(CheckFailure("stale_file_index", f"{st.real} (the file holding index {st.from_index}..."
                                f"{st.to_index - 1}, where LeRobot reads the rows)", f"{st.named} (data/file_index)",
                                st.episode, None, str(ds.root / st.real), Severity.WARNING))
    if ds.stale_data_files_total > len(ds.stale_data_files):
        out.append(CheckFailure("stale_file_index", "each episode's data/file_index naming its rows' file",
                                f"{ds.stale_data_files_total - len(ds.stale_data_files)} more episodes name "
                                "another file", None, None, str(ds.root / "meta/episodes"), Severity.WARNING))
    indices = ds.episodes.episode_index
    off = np.flatnonzero(indices != np.arange(len(indices)))
    if not rejected_total and len(off):
        gap = int(off[0])
        out.append(CheckFailure("episode_indices", f"0..{len(indices) - 1}", f"episode {int(indices[gap])} at "
                                f"position {gap}", None, None, info_path))
    return out
