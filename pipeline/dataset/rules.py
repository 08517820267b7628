"""Every metadata rule prep checks, classified against what each reader generation does with it.

A rule is one family of checks of `pipeline.dataset.validate` (a JSON Schema in `schemas/lerobot_*.schema.json`,
or a pyarrow column check) or of `pipeline.stages.dataset_checks`. Per reader line ("0.3" = lerobot 0.3.x /
openpi for v2.1; "0.4" and "0.6" = lerobot 0.4.x and 0.6.x for v3.0) the reader's behaviour is a severity
(`pipeline.verdicts`): "error" (refuses at open, or raises at a sample), "warning" (read but a problem changes
nothing that loads), None (never read). Where each reader reads the file is named beside it (module: function,
in `lerobot/datasets/`, as installed by .ci/lerobot_envs.sh: 0.3.3, 0.4.4, 0.6.1).

What a command does with a rule that fails (`decide`), for the reader lines the user targets (`--reader` of
verify and reencode; default and every other command: all readers of the dataset's format line):
- a rule some targeted reader treats as an error: every command refuses the dataset (exit 2),
  except `scan` for a file it does not need to count storage and hours (`scan_needs` False): it warns;
- a rule no targeted reader treats as an error: every command warns (`verify` lists it as a warning finding,
  `metadata_rule`) and goes on;
- `camera_key` is prep's own safety rule (a key names a folder: of the output, and of the source paths prep
  resolves): every command refuses.

The docs table (docs/verify.md, "Metadata rules") is this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.verdicts import ERROR, WARNING, targeted


@dataclass(frozen=True)
class Rule:
    name: str
    what: str
    readers: dict[str, str | None]  # reader line -> severity
    where: dict[str, str] = field(default_factory=dict)  # reader line -> module: function
    scan_needs: bool = True  # scan cannot count storage and hours without it
    prep_safety: bool = False  # prep's own rule: every command refuses


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("info_json", "meta/info.json against lerobot_info.schema.json (fps, features, paths, totals, file sizes; "
         "the keys of info_json_unread apart)",
         {"0.3": ERROR, "0.4": ERROR, "0.6": ERROR},
         {"0.3": "utils.py: load_info (LeRobotDatasetMetadata.load_metadata)",
          "0.4": "utils.py: load_info (LeRobotDatasetMetadata.load_metadata)",
          "0.6": "io_utils.py: load_info -> utils.py: DatasetInfo.from_dict (__post_init__ refuses fps, "
                 "chunks_size, data/video_files_size_in_mb <= 0)"}),
    Rule("info_json_unread", "meta/info.json keys no reader reads when loading: robot_type (string or null), splits "
         "(object), total_videos, total_chunks (integers >= 0); a wrong type is a warning",
         {"0.3": WARNING, "0.4": WARNING, "0.6": WARNING},
         {"0.3": "lerobot_dataset.py: LeRobotDatasetMetadata.robot_type / total_chunks (properties, used by the "
                 "writer and the hub card only)",
          "0.4": "lerobot_dataset.py: LeRobotDatasetMetadata.robot_type (property; the writer sets splits)",
          "0.6": "utils.py: DatasetInfo (typed fields, not checked: __post_init__ checks fps, chunks_size, file "
                 "sizes only; total_videos/total_chunks are unknown keys, logged and ignored)"}, scan_needs=False),
    Rule("camera_key", "a video feature key is a plain name (no '/', '\\\\', '.', '..'): prep's own safety rule, every "
         "command refuses (a key names a folder prep resolves and writes)",
         {"0.3": None, "0.4": None, "0.6": None},
         {"0.3": "not checked", "0.4": "not checked", "0.6": "not checked"}, prep_safety=True),
    Rule("episodes_jsonl", "v2.1 meta/episodes.jsonl lines (episode_index, length, tasks)",
         {"0.3": ERROR},
         {"0.3": "utils.py: load_episodes; lerobot_dataset.py: get_episode_data_index reads length"}),
    Rule("tasks_jsonl", "v2.1 meta/tasks.jsonl lines (task_index, task)",
         {"0.3": ERROR},
         {"0.3": "utils.py: load_tasks; __getitem__ looks up meta.tasks[task_index]"}, scan_needs=False),
    Rule("episodes_stats_jsonl", "v2.1 meta/episodes_stats.jsonl lines (min, max, mean, std, count per feature)",
         {"0.3": ERROR},
         {"0.3": "utils.py: load_episodes_stats; compute_stats.py: aggregate_stats reads every key at open"},
         scan_needs=False),
    Rule("stats_json_read", "meta/stats.json is a regular file holding a JSON object",
         {"0.3": None, "0.4": ERROR, "0.6": ERROR},
         {"0.3": "never read for v2.1 (load_metadata aggregates episodes_stats.jsonl instead)",
          "0.4": "utils.py: load_stats -> load_json (json.load raises), cast_stats_to_numpy -> flatten_dict",
          "0.6": "io_utils.py: load_stats -> load_json, cast_stats_to_numpy -> flatten_dict"}, scan_needs=False),
    Rule("stats_json", "meta/stats.json against lerobot_stats.schema.json (min, max, mean, std, count)",
         {"0.3": None, "0.4": WARNING, "0.6": WARNING},
         {"0.3": "never read for v2.1 (load_metadata aggregates episodes_stats.jsonl instead)",
          "0.4": "utils.py: load_stats (cast_stats_to_numpy, no key required)",
          "0.6": "io_utils.py: load_stats (cast_stats_to_numpy, no key required)"}, scan_needs=False),
    Rule("tasks_parquet", "v3.0 meta/tasks.parquet (task_index integer, task string)",
         {"0.4": ERROR, "0.6": ERROR},
         {"0.4": "utils.py: load_tasks; __getitem__ meta.tasks.iloc[task_index]",
          "0.6": "io_utils.py: load_tasks; dataset_reader.py looks the task up per sample"}, scan_needs=False),
    Rule("episodes_parquet", "v3.0 meta/episodes/*.parquet columns (episode_index, length, dataset_from/to_index, "
         "data and video file indices, from/to_timestamp)",
         {"0.4": ERROR, "0.6": ERROR},
         {"0.4": "utils.py: load_episodes; lerobot_dataset.py: _get_query_indices, _query_videos",
          "0.6": "io_utils.py: load_episodes; dataset_reader.py: query indices and video spans"}),
)}

# Severity per reader of checks whose readers differ (used by `pipeline.verdicts.severity_by_reader`).
CHECK_SEVERITY: dict[str, dict[str, str | None]] = {
    "metadata_rule": {"0.3": WARNING, "0.4": WARNING, "0.6": WARNING},  # only the rules no reader refuses
    "stale_file_index": {"0.4": WARNING, "0.6": WARNING},
}

def decide(rule: str, codebase_version: str, command: str, reader: str = "all") -> str:
    """"refuse" or "warn": what `command` does with a failed `rule` on a dataset of this format, for the reader
    lines the user targets (`--reader`; default all: the strictest reader of the format's line)."""
    r = RULES.get(rule)
    if r is None:
        return "refuse"
    if r.prep_safety:
        return "refuse"
    errs = any(r.readers.get(line) == ERROR for line in targeted(codebase_version, reader))
    if command == "scan" and not r.scan_needs:
        return "warn"
    return "refuse" if errs else "warn"
