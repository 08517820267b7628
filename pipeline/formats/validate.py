"""A dataset's metadata read and validated once, before any unit of a job runs.

Every job (scan, verify, reencode) opens its source with `open_validated`: it streams each metadata
file once and checks it against declared rules, and refuses the dataset (`MetadataError`, exit 2) when
any fails, so nothing expensive starts on bad metadata. The rules:

- JSON files, with JSON Schema (schemas/lerobot_*.schema.json): meta/info.json and meta/stats.json;
- each format's own files, by the format (`Format.check_files`): v2.1 every line of meta/episodes.jsonl,
  meta/tasks.jsonl and meta/episodes_stats.jsonl (JSON Schema); v3.0 meta/tasks.parquet (task_index an integer
  column without nulls, task a string column) and every meta/episodes/chunk-*/file-*.parquet (each column the
  readers use present, of an integer/number/list-of-string type, without nulls; episode_index >= 0, length >= 1);
- camera keys that are path components (no '/', '\\', '.' or '..': a key is a folder name of the output).

One line per problem names the file, the line (JSON Lines) or row (parquet), the field and the value;
the first `MAX_LISTED` problems are listed and all are counted (`pipeline.formats.problems`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.formats import INFO_REL, format_of, open_dataset, read_info
from pipeline.formats.problems import MAX_LISTED, Problems, schema_errors, schema_problems
from pipeline.storage import Root, StorePath, as_root
from pipeline.text import shown

if TYPE_CHECKING:
    from pipeline.dataset.model import Dataset, Rejected

STATS_REL = "meta/stats.json"
# info.json keys no reader generation reads when loading (only their writers and the hub card do): a value of
# the wrong type there is rule `info_json_unread` (a warning), not `info_json`.
INFO_UNREAD = frozenset({"robot_type", "splits", "total_videos", "total_chunks"})


def camera_key_problems(info: dict[str, Any]) -> Iterator[str]:
    """Video feature keys name folders of the output: refuse separators and dot components."""
    for key, feat in info["features"].items():
        plain = key and key not in (".", "..") and not any(c in key for c in "/\\\0")
        if isinstance(feat, dict) and feat.get("dtype") == "video" and not plain:
            yield (f"features/{key}: camera key {key!r} is not a plain name (it names a folder of the output; "
                   "'/', '\\', '.' and '..' are not allowed)")


def validate_metadata(where: Root, limit: int = MAX_LISTED) -> Problems:
    """Every metadata file of the dataset at `where` (a local folder or a location: read through its store),
    checked; the problems found (none: valid). Raises `DatasetError` when it is not a dataset of a supported
    version at all."""
    root = as_root(where)
    info = read_info(root)  # not a dataset / unsupported version / no fps: one line, as before
    problems = Problems(root, limit, codebase_version=info["codebase_version"])
    unread = []
    # every violation classified by its top-level key (Problems keeps the first `limit` lines, counts the rest)
    for key, p in schema_errors(info, "lerobot_info", limit=None):
        if key in INFO_UNREAD:
            unread.append(p)
        else:
            problems.add(f"{root / INFO_REL}: {p}")
    if problems.total:  # the other files are read by what info.json says
        return problems
    problems.rule = "info_json_unread"  # keys no reader reads when loading (pipeline.checks)
    for p in unread:
        problems.add(f"{root / INFO_REL}: {p}")
    problems.rule = "camera_key"
    for p in camera_key_problems(info):
        problems.add(f"{root / INFO_REL}: {p}")
    cameras = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    format_of(info).check_files(root, cameras, problems)  # its episode and task metadata, by its own rules
    stats = root / STATS_REL
    problems.rule = "stats_json_read"  # a file the v3.0 readers cannot load at all (load_json, flatten_dict)
    if stats.exists():
        if stats.is_file():
            check_stats(stats, problems)
        else:
            problems.add(f"{stats}: not a regular file")
    return problems


def check_stats(path: Path | StorePath, problems: Problems) -> None:
    """meta/stats.json: JSON holding an object (rule `stats_json_read`), then its schema (rule `stats_json`)."""
    from pipeline.dataset.info import read_json_file
    from pipeline.errors import DatasetError

    problems.rule = "stats_json_read"
    try:
        obj = read_json_file(path)
    except DatasetError as exc:
        problems.add(str(exc))
        return
    if not isinstance(obj, dict):
        problems.add(f"{path}: (file): {shown(obj, 40)} is not of type 'object'")
        return
    problems.rule = "stats_json"
    for p in schema_problems(obj, "lerobot_stats", limit=MAX_LISTED):
        problems.add(f"{path}: {p}")


def metadata_refusals(root: Root, command: str, reader: str = "all") -> tuple[Problems, Problems]:
    """`validate_metadata`, split into what `command` refuses the dataset for and what it only warns about
    (`pipeline.checks`: a rule no reader of the format line refuses is a warning; scan refuses only for
    the files it needs to count storage and hours)."""
    return validate_metadata(root).split(command, reader)


def open_validated(root: Root, command: str = "verify", reader: str = "all") -> tuple[Dataset, Rejected]:
    """`open_dataset` after `validate_metadata`: raises `MetadataError` (one line per problem) when a metadata
    file breaks a rule that `command` refuses for (`metadata_refusals`), before any unit is planned; the rules
    it only warns about are in `ds.rule_warnings` (and `ds.warnings`)."""
    refuse, warn = metadata_refusals(root, command, reader)
    refuse.raise_if_any()
    ds, rejected = open_dataset(root, strict_tasks=not any(r in warn.counts for r in TASK_RULES))
    if warn.total:
        ds.rule_warnings = [(rule, line) for rule, lines in warn.by_rule.items() for line in lines][:MAX_LISTED]
        ds.rule_warnings_total = warn.total
        ds.warnings = [line for _rule, line in ds.rule_warnings] + ds.warnings
        ds.warnings_total += warn.total
    return ds, rejected


TASK_RULES = ("tasks_jsonl", "tasks_parquet")
