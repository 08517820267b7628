"""The check registry: every check prep makes, declared once, and what each reader generation does with a finding.

A LeRobot dataset is read by one line of readers per format (`Reader`): v2.1 by lerobot 0.3.x (openpi's pin,
commit 0cf8648, reads like 0.3.3), v3.0 by lerobot 0.4.x and 0.6.x. Each `Check` declares:

- `name`, as findings (`CheckFailure.check`) and metadata problems (`Problems.rule`) carry it;
- `scope`: a metadata rule (checked before a job starts, `pipeline.formats.validate`), a dataset-level finding,
  a finding about a whole file (in v3.0 it fails every episode of the file), one episode's, or a check of a file
  prep writes (reencode, convert, edit);
- `severity`, per reader generation: what that reader does with a finding (`Severity`; None, or a reader left
  out: it never looks), or `user_option`: the user's own rule (`--expect-frames`, `--size`, `--all-intra`), an
  error for the exit code but no reader's concern (it never changes `lerobot_loads`);
- `repairs`: the `--repair` names (`REPAIR_NAMES`) whose output no longer has the finding;
- `doc`: its line in docs/verify.md (for a metadata rule: what it checks; `where` each reader reads it).

`severity_by_reader` gives the per-reader view of one finding; a finding's own `severity` is the strictest among
the readers the user targets (`--reader 0.4|0.6|all`, default all: `target_severity`). `decide` says what a
command does with a failed metadata rule. docs/verify.md's tables are rendered from this registry
(`python -m pipeline.checks docs/verify.md` rewrites them; tests/test_checks.py compares).

Light module (the standard library only): the CLI, the stages and the jobs all use it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Severity(StrEnum):
    """What a reader does with a finding (the JSON reports' strings)."""

    ERROR = "error"  # refuses the dataset at open, raises at some sample, or hands a frame that is not the row's
    TRAINS_WRONG = "trains_wrong"  # loads every sample, but the values poison training (NaN/inf in a float column)
    WARNING = "warning"  # metadata inconsistent, loading unaffected
    INFO = "info"  # worth knowing

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def fails(self) -> bool:
        """An error or trains_wrong: it fails the episode and the run (exit 1), and a file prep writes."""
        return self in FAILING


_RANK = {Severity.ERROR: 4, Severity.TRAINS_WRONG: 3, Severity.WARNING: 2, Severity.INFO: 1}
FAILING = frozenset({Severity.ERROR, Severity.TRAINS_WRONG})  # severities that fail an episode and the run (exit 1)


class Status(StrEnum):
    """What the stages and jobs write as the status of an episode or a file (the reports' strings)."""

    OK = "ok"  # scan: an episode counted; a copied data file
    FAILED = "failed"  # any unit that did not finish: its reason beside it
    PASSED = "passed"  # verify: an episode without an error
    ENCODED = "encoded"  # reencode: a file encoded and checked
    COPIED = "copied"  # reencode: a depth map copied byte for byte
    KEPT = "kept"  # reencode, convert, edit: an output already complete and correct, kept on a rerun
    WRITTEN = "written"  # convert, edit: an output file written and checked


class Reader(StrEnum):
    """A reader generation: the line of lerobot releases that read a format alike."""

    V03 = "0.3"  # lerobot 0.3.x / openpi (v2.1)
    V04 = "0.4"  # lerobot 0.4.x (v3.0)
    V06 = "0.6"  # lerobot 0.6.x (v3.0)

    @property
    def label(self) -> str:
        return READER_NAMES[self]


READER_NAMES = {Reader.V03: "lerobot 0.3.x / openpi", Reader.V04: "lerobot 0.4.x", Reader.V06: "lerobot 0.6.x"}
READER_LINES: dict[str, tuple[Reader, ...]] = {"v2.1": (Reader.V03,), "v3.0": (Reader.V04, Reader.V06)}
READER_CHOICES = ("all", *(r.value for r in Reader))  # --reader (plain strings: argparse prints them)


@dataclass(frozen=True, slots=True)
class FormatRefusal:
    """What a reader generation does with a dataset of a format it does not read (seen with the real readers:
    lerobot 0.3.3, 0.4.4, 0.6.1 on the real fixture and its v3.0 conversion, offline)."""

    does: str  # what happens, in a few words (the terminal line)
    where: str  # the reader's code that does it


FORMAT_REFUSALS: dict[tuple[Reader, str], FormatRefusal] = {
    # 0.3.3 logs that a 3.0 dataset is "backward-compatible", then LeRobotDatasetMetadata.load_metadata ->
    # utils.py load_tasks finds no meta/tasks.jsonl (FileNotFoundError) and falls back to the Hub
    # (get_safe_version -> get_repo_versions): OfflineModeIsEnabled offline, a Hub error (or another
    # revision) online
    (Reader.V03, "v3.0"): FormatRefusal(
        "no meta/tasks.jsonl, falls back to the Hub: OfflineModeIsEnabled offline",
        "lerobot_dataset.py LeRobotDatasetMetadata.load_metadata -> utils.py load_tasks; get_safe_version"),
    # 0.4.4: LeRobotDatasetMetadata.load_metadata -> utils.py check_version_compatibility (major 2 < 3)
    (Reader.V04, "v2.1"): FormatRefusal(
        "BackwardCompatibilityError at open",
        "lerobot_dataset.py LeRobotDatasetMetadata.load_metadata -> utils.py check_version_compatibility"),
    # 0.6.1: dataset_metadata.py LeRobotDatasetMetadata._load_metadata -> utils.py check_version_compatibility
    (Reader.V06, "v2.1"): FormatRefusal(
        "BackwardCompatibilityError at open",
        "dataset_metadata.py LeRobotDatasetMetadata._load_metadata -> utils.py check_version_compatibility"),
}


def reader_format(reader: Reader) -> str:
    """The format a reader generation reads."""
    return next(v for v, lines in READER_LINES.items() if reader in lines)


def format_refusal(reader: Reader, codebase_version: str) -> FormatRefusal | None:
    """What `reader` does with a dataset of this format; None when it reads the format."""
    if reader in READER_LINES.get(codebase_version, ()):
        return None
    return FORMAT_REFUSALS.get((reader, codebase_version),
                               FormatRefusal(f"does not read {codebase_version}", "check_version_compatibility"))


def refusal_line(reader: Reader, codebase_version: str) -> str:
    """One line for a reader that cannot open this format: what it does and the way forward."""
    fmt = reader_format(reader)
    r = format_refusal(reader, codebase_version)
    does = r.does if r is not None else f"it reads {codebase_version}"
    return (f"{reader.label} ({fmt} only): cannot open this {codebase_version} dataset ({does}); for it: prep "
            f"convert --to {fmt}")


def reader_cannot_open(codebase_version: str, reader: str) -> Reader | None:
    """The `--reader` generation that cannot open a dataset of this format (None: `all`, or one that can)."""
    if reader == "all" or reader not in READER_CHOICES:
        return None
    r = Reader(reader)
    return r if format_refusal(r, codebase_version) is not None else None


def format_refused_by(codebase_version: str, reader: str = "all") -> dict[Reader, dict[str, Any]]:
    """verify's report of the reader generations that cannot open this format at all (the JSON report's
    `format_refused_by`): each with what it does, where, and the way forward; `targeted` when `--reader` named
    it (then the report fails)."""
    out: dict[Reader, dict[str, Any]] = {}
    for r in Reader:
        refused = format_refusal(r, codebase_version)
        if refused is None:
            continue
        fmt = reader_format(r)
        out[r] = {"reader": r.label, "reads": fmt, "codebase_version": codebase_version, "loads": False,
                  "refuses": refused.does, "where": refused.where, "way_forward": f"prep convert --to {fmt}",
                  "targeted": reader == r.value}
    return out


class Scope(StrEnum):
    METADATA = "metadata"  # a metadata rule, checked before a job starts (`pipeline.formats.validate`)
    DATASET = "dataset"  # a dataset-level finding (metadata files, totals, numbering)
    FILE = "file"  # about a whole file (not one span of it): in v3.0 it fails every episode in the file
    EPISODE = "episode"  # about one episode (of a file it may share)
    OUTPUT = "output"  # a check of a file prep writes (reencode, convert, edit), never of a source


class Decision(StrEnum):
    """What a command does with a failed metadata rule (`decide`)."""

    REFUSE = "refuse"
    WARN = "warn"


Severities = Mapping[Reader, Severity | None]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    scope: Scope
    severity: Severities  # per reader generation; None (or left out): that reader never looks
    doc: str  # docs/verify.md: the reader behaviour it mirrors (a metadata rule: what it checks)
    note: str = ""  # the words after the name in the docs table
    user_option: str | None = None  # the user's own rule: an error for the exit code, never a reader's
    repairs: tuple[str, ...] = ()  # the --repair names whose output no longer has the finding
    where: Mapping[Reader, str] = field(default_factory=dict)  # a metadata rule: where each reader reads it
    scan_needs: bool = True  # a metadata rule scan cannot count storage and hours without
    prep_safety: bool = False  # a metadata rule of prep's own: every command refuses

    @property
    def found(self) -> Severity | None:
        """The strictest severity among every reader (None: none looks)."""
        return strictest(self.severity.values())


@dataclass(frozen=True, slots=True)
class Repair:
    """A `--repair` of `prep reencode`: it makes the checks that name it right in the output."""

    name: str
    doc: str
    formats: tuple[str, ...]  # the formats it applies to
    not_applicable: str = "nothing to repair"  # why not, for the others


E, T, W, INFO = Severity.ERROR, Severity.TRAINS_WRONG, Severity.WARNING, Severity.INFO


def every(s: Severity | None) -> dict[Reader, Severity | None]:
    return {r: s for r in Reader}


def v30(s04: Severity | None, s06: Severity | None = None, *, v21: Severity | None = None) -> dict[Reader,
                                                                                                  Severity | None]:
    """Severities of a check only the v3.0 readers look at (v21: what 0.3 does, when it looks)."""
    return {Reader.V03: v21, Reader.V04: s04, Reader.V06: s04 if s06 is None else s06}


def rule(name: str, what: str, where: Mapping[Reader, str], readers: Severities, *, scan_needs: bool = True,
         prep_safety: bool = False) -> Check:
    return Check(name, Scope.METADATA, readers, what, where=where, scan_needs=scan_needs, prep_safety=prep_safety)


R3, R4, R6 = Reader.V03, Reader.V04, Reader.V06

REPAIRS_DECLARED: tuple[Repair, ...] = (
    # parquet timestamp = frame_index / fps; video restamped onto the grid (as always), which the stage
    # allows only where each frame is on the grid up to the stream's time base (never a variable rate)
    # (and a median frame interval off the rate only by that rounding: the stage checks the mean rate)
    Repair("timestamps", "the parquet `timestamp` column rewritten as frame_index/fps", ("v2.1", "v3.0")),
    # v2.1 meta/episodes_stats.jsonl (missing or unreadable) written anew: every numeric column's stats from
    # the parquet rows, every camera's from the frames being encoded. v3.0 keeps per-episode stats as optional
    # columns of meta/episodes/*.parquet (LeRobot 0.4 loads without them); the re-encode keeps them as the source
    # has them (a re-encoded camera's columns, where present, are written anew from its new frames), so `stats`
    # has nothing to make right there.
    Repair("stats", "v2.1 meta/episodes_stats.jsonl written anew", ("v2.1",),
           "it writes meta/episodes_stats.jsonl, without which LeRobot 0.3 cannot open a v2.1 dataset; v3.0's "
           "per-episode stats are optional columns of meta/episodes/*.parquet (LeRobot 0.4 loads without them), "
           "kept as the source has them; drop --repair stats"),
)
REPAIR_NAMES = tuple(r.name for r in REPAIRS_DECLARED)

_DECODE = "`--decode`"

DECLARED: tuple[Check, ...] = (
    # ---- the metadata rules (pipeline.formats.validate): docs/verify.md "Metadata rules" ----
    rule("info_json", "meta/info.json against lerobot_info.schema.json (fps, features, paths, totals, file sizes; "
         "the keys of info_json_unread apart)",
         {R3: "utils.py: load_info (LeRobotDatasetMetadata.load_metadata)",
          R4: "utils.py: load_info (LeRobotDatasetMetadata.load_metadata)",
          R6: "io_utils.py: load_info -> utils.py: DatasetInfo.from_dict (__post_init__ refuses fps, "
              "chunks_size, data/video_files_size_in_mb <= 0)"},
         {R3: E, R4: E, R6: E}),
    rule("info_json_unread", "meta/info.json keys no reader reads when loading: robot_type (string or null), splits "
         "(object), total_videos, total_chunks (integers >= 0); a wrong type is a warning",
         {R3: "lerobot_dataset.py: LeRobotDatasetMetadata.robot_type / total_chunks (properties, used by the "
              "writer and the hub card only)",
          R4: "lerobot_dataset.py: LeRobotDatasetMetadata.robot_type (property; the writer sets splits)",
          R6: "utils.py: DatasetInfo (typed fields, not checked: __post_init__ checks fps, chunks_size, file "
              "sizes only; total_videos/total_chunks are unknown keys, logged and ignored)"},
         {R3: W, R4: W, R6: W}, scan_needs=False),
    rule("camera_key", "a video feature key is a plain name (no '/', '\\\\', '.', '..'): prep's own safety rule, every "
         "command refuses (a key names a folder prep resolves and writes)",
         {R3: "not checked", R4: "not checked", R6: "not checked"},
         {R3: None, R4: None, R6: None}, prep_safety=True),
    rule("episodes_jsonl", "v2.1 meta/episodes.jsonl lines (episode_index, length, tasks)",
         {R3: "utils.py: load_episodes; lerobot_dataset.py: get_episode_data_index reads length"},
         {R3: E}),
    rule("tasks_jsonl", "v2.1 meta/tasks.jsonl lines (task_index, task)",
         {R3: "utils.py: load_tasks; __getitem__ looks up meta.tasks[task_index]"},
         {R3: E}, scan_needs=False),
    rule("episodes_stats_jsonl", "v2.1 meta/episodes_stats.jsonl lines (min, max, mean, std, count per feature)",
         {R3: "utils.py: load_episodes_stats; compute_stats.py: aggregate_stats reads every key at open"},
         {R3: E}, scan_needs=False),
    rule("stats_json_read", "meta/stats.json is a regular file holding a JSON object",
         {R3: "never read for v2.1 (load_metadata aggregates episodes_stats.jsonl instead)",
          R4: "utils.py: load_stats -> load_json (json.load raises), cast_stats_to_numpy -> flatten_dict",
          R6: "io_utils.py: load_stats -> load_json, cast_stats_to_numpy -> flatten_dict"},
         {R3: None, R4: E, R6: E}, scan_needs=False),
    rule("stats_json", "meta/stats.json against lerobot_stats.schema.json (min, max, mean, std, count)",
         {R3: "never read for v2.1 (load_metadata aggregates episodes_stats.jsonl instead)",
          R4: "utils.py: load_stats (cast_stats_to_numpy, no key required)",
          R6: "io_utils.py: load_stats (cast_stats_to_numpy, no key required)"},
         {R3: None, R4: W, R6: W}, scan_needs=False),
    rule("tasks_parquet", "v3.0 meta/tasks.parquet (task_index integer, task string)",
         {R4: "utils.py: load_tasks; __getitem__ meta.tasks.iloc[task_index]",
          R6: "io_utils.py: load_tasks; dataset_reader.py looks the task up per sample"},
         {R4: E, R6: E}, scan_needs=False),
    rule("episodes_parquet", "v3.0 meta/episodes/*.parquet columns (episode_index, length, dataset_from/to_index, "
         "data and video file indices, from/to_timestamp)",
         {R4: "utils.py: load_episodes; lerobot_dataset.py: _get_query_indices, _query_videos",
          R6: "io_utils.py: load_episodes; dataset_reader.py: query indices and video spans"},
         {R4: E, R6: E}),

    # ---- verify's findings: docs/verify.md "Verdicts" (one row per run of checks with the same line) ----
    Check("metadata_files", Scope.DATASET, every(E),
          "`utils.py:load_info/load_tasks/load_episodes/load_episodes_stats` from "
          "`LeRobotDatasetMetadata.load_metadata`; a missing file falls back to the hub (`get_safe_version` -> "
          "`get_repo_versions`), which fails offline. `meta/stats.json` and v3.0's `stats/*` columns are optional "
          "(`load_stats` returns None; `load_episodes` drops them)",
          note="v2.1: `meta/info.json`, `episodes.jsonl`, `tasks.jsonl`, `episodes_stats.jsonl`; v3.0: "
               "`meta/info.json`, `tasks.parquet`, `meta/episodes/*.parquet`",
          repairs=("stats",)),  # only v2.1's meta/episodes_stats.jsonl (jobs/preverify.py)
    *(Check(name, Scope.DATASET, every(E), "0.3.3 `LeRobotDataset.__init__` checks the episode range against the "
            "metadata (hub fallback); 0.4.4 `_check_cached_episodes_sufficient`")
      for name in ("total_episodes", "episode_indices")),
    # 0.3.3 takes its length from the parquet rows (`num_frames` = len(hf_dataset)) and loads; 0.4.4 takes
    # `meta.total_frames` as its length and raises past the rows
    Check("total_frames", Scope.DATASET, v30(E, v21=W),
          "0.3.3 `num_frames` = `len(hf_dataset)` (the rows); 0.4.4 `num_frames` = `meta.total_frames`: an index "
          "past the rows raises"),
    Check("metadata", Scope.DATASET, every(E), "the record is unreadable to the reader too",
          note="a rejected episode record"),
    Check("parquet_columns", Scope.FILE, every(E), "0.3.3 `__init__` reads `hf_dataset['timestamp']`; 0.4.4 "
          "`__getitem__` `item['timestamp'].item()` on the None `load_nested_dataset` fills in",
          repairs=("timestamps",)),  # only a missing timestamp column (jobs/preverify.py)
    Check("parquet_readable", Scope.FILE, every(E), "0.3.3 `__init__` reads `hf_dataset['timestamp']`; 0.4.4 "
          "`__getitem__` `item['timestamp'].item()` on the None `load_nested_dataset` fills in"),
    *(Check(name, Scope.EPISODE, every(E), "`episode_data_index` / `dataset_from_index` address rows by these")
      for name in ("frames_in_parquet", "frame_index", "episode_index", "index")),
    Check("non_finite", Scope.EPISODE, every(T),
          "NaN or inf in a float feature of the data parquet (state, action, others; `timestamp` has its own "
          "checks): every reader (0.3, 0.4, 0.6) hands the value over as it is and loads every sample, but a NaN "
          "action is a NaN loss at the first batch that holds it. An error for the exit code (exit 1; `prep edit "
          "--drop-failed` drops those episodes), named by feature, episode and first `frame_index`; "
          "`totals.non_finite_by_feature` counts episodes and rows per feature; each reader line says `loads` with "
          "the count that poison training; `prep reencode` does not refuse the source for it",
          note="the camera column names the feature"),
    # a metadata rule no reader of the format line refuses (the rules some reader refuses stop the job)
    Check("metadata_rule", Scope.DATASET, every(W),
          "a metadata rule no reader of the dataset's format line refuses: read, loading unaffected (the rule's "
          "row under [Metadata rules](#metadata-rules-what-each-reader-generation-does-with-them))",
          note="the rule's `what`, then the problem"),
    Check("stale_file_index", Scope.DATASET, v30(W),
          "0.4.x `datasets/utils.py load_nested_dataset` and 0.6.x `datasets/io_utils.py load_nested_dataset` read "
          "every `data/*/*.parquet` in path order and address rows by `dataset_from_index`; `data/file_index` is "
          "never read to load. LeRobot 0.4.4's `convert_dataset_v21_to_v30` writes the previous file's index for "
          "the first episode of each new data file: the reader loads it, and every prep command (scan, verify, "
          "reencode, convert, edit, the loader) reads the rows from the file that holds them "
          "(`pipeline/dataset/datafiles.py`)", note="v3.0"),
    *(Check(name, Scope.EPISODE, every(E), "0.3.3 `utils.check_timestamps_sync` (strict `<` 1e-4 s); 0.4.4 "
            "`video_utils.decode_video_frames*` tolerance check at the first off-grid row", repairs=("timestamps",))
      for name in ("timestamp_start", "timestamp_step")),
    Check("frames_from_header", Scope.FILE, every(E), "the container contradicts its own packets",
          note="header count != presented + edit-list frames"),
    Check("edit_list", Scope.EPISODE, every(INFO),
          "torchcodec and pyav present the frames after the edit list, pts from 0",
          note="pre-roll packets hidden by the edit list"),
    Check("frames_from_packets", Scope.EPISODE, every(E), "`_query_videos` looks frame k up at `from_timestamp + "
          "timestamp_k`: a missing frame raises (torchcodec index / tolerance)",
          note="the `length` frames from `from_timestamp`"),
    Check("pts_grid", Scope.EPISODE, every(E), "`decode_video_frames_torchcodec` / `_torchvision`: the nearest "
          "frame must be within `tolerance_s` (1e-4 s) of the query", repairs=("timestamps",)),
    Check("fps", Scope.FILE, every(E), "`decode_video_frames_torchcodec` / `_torchvision`: the nearest "
          "frame must be within `tolerance_s` (1e-4 s) of the query", repairs=("timestamps",)),
    # LeRobot 0.4.4 loads every frame (it never reads to_timestamp), but its delete/split/merge
    # (dataset_tools.py) cut episodes by it and would drop or add a frame
    Check("to_timestamp", Scope.EPISODE, v30(W), "0.4.4 never reads it to load; its `dataset_tools.py` "
          "delete/split/merge cut episodes by it and would drop or add a frame",
          note="!= from_timestamp + length/fps"),
    Check("frames_outside_spans", Scope.EPISODE, v30(W), "no row's query reaches a frame no episode claims",
          note="v3.0"),
    Check("frames_overlap", Scope.EPISODE, v30(E), "`_query_videos` reads `length` frames from the episode's "
          "`from_timestamp`: where they run into the next episode's span (a recorder that dropped frames but kept "
          "the rows), the reader hands the other episode's frames as this one's", note="v3.0"),
    Check("declared_size", Scope.FILE, every(E),
          "info.json shapes are what the reader and policies are configured with"),
    Check("declared_codec", Scope.FILE, every(W), "info.json's `video.codec` is never read to decode: torchcodec "
          "and pyav follow the stream (the `mpeg4-as-h264` parity case loads)"),
    *(Check(name, scope, every(None), "corpus rules the user asked for: errors for the exit code (exit 1), never "
            "a reader's: the reader lines and `lerobot_loads` do not count them, a `rules` line and "
            "`user_rules_failed` do", user_option=option)
      for name, scope, option in (("keyframes", Scope.EPISODE, "--all-intra"),
                                  ("frames_expected", Scope.EPISODE, "--expect-frames"),
                                  ("size", Scope.FILE, "--size"))),
    # lerobot 0.6.x datasets/dataset_reader.py builds DepthEncoderConfig.from_video_info for every depth key:
    # configs/video.py resolve_vcodec raises at open; 0.3.x / 0.4.x never read the flag nor the codec.
    Check("depth_codec", Scope.DATASET, v30(None, E),
          "0.6.x builds a depth encoder config for every depth key at open (`datasets/dataset_reader.py`, "
          "`configs/video.py resolve_vcodec`): a `video.codec` outside its encoder names (`png`, `ffv1`, ...; `av1` "
          "is an alias) refuses the dataset. 0.3.x/0.4.x never read it", note="v3.0"),
    # torchcodec 0.11 (lerobot 0.6.x's default backend) applies a display matrix, pyav and the torchcodec
    # of 0.3.x / 0.4.x do not: every reader loads, but not all hand back the same orientation.
    Check("display_rotation", Scope.FILE, every(W),
          "the video's MP4 track carries a display matrix: every reader loads it, but lerobot 0.3.x/0.4.x "
          "(torchcodec < 0.11, pyav) and 0.6.x's pyav backend hand back the coded frames while 0.6.x's torchcodec "
          "0.11 (`VideoDecoder` applies the matrix) hands them back rotated; the finding names both sizes. `prep "
          "reencode` writes display orientation with no matrix"),
    # A depth map prep copies unchanged is not held to --size / --all-intra (user rules, not a reader's).
    Check("depth_copy", Scope.FILE, every(INFO),
          "a depth map (flag in either spelling, or more than 8 bits of gray) is checked as the copy `prep "
          "reencode` makes of it: frame counts, timestamps, declared size, `--decode`; not `--size`/`--all-intra`. "
          "The summary names these cameras (`depth ...: checked as copies`)"),
    Check("frames_decoded", Scope.EPISODE, every(E), "the decoder stops early: some sample raises"),
    Check("readable", Scope.FILE, every(E), "the decoder stops early: some sample raises"),
    Check("decode_concealed", Scope.EPISODE, every(E), "FFmpeg conceals damaged macroblocks and flags the frame "
          "(`AV_FRAME_FLAG_CORRUPT`); neither backend checks it: training gets a damaged frame", note=_DECODE),
    Check("decoded_size", Scope.EPISODE, every(E), "torchcodec raises at the first frame of another size; pyav "
          "returns it silently at that size", note=_DECODE),
    # ---- cameras stored as images (`dtype: "image"`, a `{bytes, path}` struct column of the data parquet) ----
    # Every reader decodes them alike: datasets' `Image.decode_example` (PIL) on the row's value, then
    # `hf_transform_to_torch` (0.3.x/0.4.x datasets/utils.py, 0.6.x datasets/io_utils.py) makes a CHW tensor of
    # the picture as it is; none compares it with info.json's shape. Seen with lerobot 0.3.3, 0.4.4 and 0.6.1 on
    # datasets written by their own `LeRobotDataset.create(use_videos=False)` (tests/compat/parity_cases).
    Check("image_column", Scope.FILE, every(E),
          "the data file has no `{bytes, path}` column named by the image key: 0.3.x `load_dataset('parquet')` "
          "refuses at open when another data file has it (`DatasetGenerationError`, column names differ) and "
          "hands samples without the key when none has; 0.4.x/0.6.x `load_nested_dataset(features=...)` fills "
          "the column with None: every sample's picture is None, which the policy or the DataLoader's collate "
          "raises at", note="image cameras"),
    Check("pictures_from_footer", Scope.EPISODE, every(E),
          "a row without a picture (the `bytes` child null; counted from the parquet footer, the rows named from "
          "the column): `Image.decode_example` raises `ValueError` at that sample when `path` is null too, opens "
          "`path` relative to the process's working folder when set (`FileNotFoundError` there), and a null "
          "struct is handed as None, which the policy or the DataLoader's collate raises at",
          note="image cameras: one picture per row"),
    Check("picture_readable", Scope.EPISODE, every(E),
          "a picture PIL cannot open or decode (not a picture, truncated): `Image.decode_example` / "
          "`hf_transform_to_torch` raise at that sample (`UnidentifiedImageError`, `OSError: image file is "
          "truncated`)", note="image cameras: the first picture's header; every picture with `--decode`"),
    Check("picture_shape", Scope.EPISODE, every(W),
          "a picture of another size or channel count than info.json's shape: every reader loads it and hands a "
          "CHW tensor of the picture's own shape (a gray picture 1 channel, RGBA 4), so the policy, configured "
          "from info.json, gets another shape, and a batch mixing shapes fails in the DataLoader's collate",
          note="image cameras: the first picture's header; every picture with `--decode`"),
    Check("stage", Scope.EPISODE, every(E), "not a finding about the data: the checks of the unit stopped at an "
          "exception (a bug in prep, named in `found`); the episodes are failed rather than passed unchecked",
          note="the checks could not run"),
    Check("worker_lost", Scope.EPISODE, every(E), "not a finding about the data: the worker running the unit died "
          "on every attempt (memory limit, killed), named in `found` with its memory limit; `prep reencode`'s "
          "check of its source stops with a cluster error instead",
          note="the checks could not run"),

    # ---- the checks of a file prep writes (besides the per-file checks above) ----
    Check("frames_total", Scope.OUTPUT, every(E), "the file holds every frame of its source, no more"),
    Check("first_pts", Scope.OUTPUT, every(E), "the first frame is presented at 0 s"),
    Check("display_matrix", Scope.OUTPUT, every(E), "no display matrix: the frames are written in display "
          "orientation, so every reader and back-end hands back the same frame", note="reencode"),
)

CHECKS: dict[str, Check] = {c.name: c for c in DECLARED}
if len(CHECKS) != len(DECLARED):
    raise RuntimeError("pipeline.checks: a check is declared twice")


def metadata_rules() -> dict[str, Check]:
    """The metadata rules, by name (the registry's scope `metadata`)."""
    return {n: c for n, c in CHECKS.items() if c.scope is Scope.METADATA}


def is_file_check(check: str) -> bool:
    """A finding about a whole file (not one span of it): in v3.0 it fails every episode in the file."""
    c = CHECKS.get(check)
    return c is not None and c.scope is Scope.FILE


def user_option(check: str) -> str | None:
    """The option that made `check` the user's own rule (`--expect-frames`, `--size`, `--all-intra`), or None."""
    c = CHECKS.get(check)
    return None if c is None else c.user_option


def repaired_by(repair: str) -> frozenset[str]:
    """The checks whose errors `--repair <repair>` makes right in the output."""
    return frozenset(c.name for c in DECLARED if repair in c.repairs)


def repair(name: str) -> Repair | None:
    return next((r for r in REPAIRS_DECLARED if r.name == name), None)


def rule_what(rule_name: str) -> str:
    """A metadata rule's `what` (its doc line), or its name when it is not declared."""
    c = CHECKS.get(rule_name)
    return c.doc if c is not None and c.scope is Scope.METADATA else rule_name


# ---- the per-reader verdicts ------------------------------------------------------------------------


def reader_lines(codebase_version: str) -> tuple[Reader, ...]:
    return READER_LINES.get(codebase_version, ())


def targeted(codebase_version: str, reader: str = "all") -> tuple[Reader, ...]:
    """The reader lines whose verdict sets the severity and the exit code. A `reader` that does not read this
    format (0.6 on a v2.1 dataset) targets the format's own line for the findings' severities, and fails the
    dataset for itself (`reader_cannot_open`: verify's report fails, reencode refuses its source)."""
    lines = reader_lines(codebase_version)
    return (Reader(reader),) if reader in lines else lines


def strictest(severities: Iterable[str | None]) -> Severity | None:
    kept = [Severity(s) for s in severities if s is not None]
    return max(kept, key=lambda s: s.rank) if kept else None


def found_severity(check: str, codebase_version: str, readers: Iterable[str] | None = None) -> Severity | None:
    """The severity a finding of `check` is made with on a dataset of this format: the strictest among `readers`
    (default: the format line's; every reader's, for a format none reads); None when none of them looks. A user
    rule, or a check not declared here, is an error. (`target_severity` then sets each finding's severity for the
    readers the user targets, `--reader`.)"""
    c = CHECKS.get(check)
    if c is None or c.user_option is not None:
        return Severity.ERROR
    lines = tuple(readers or ()) or reader_lines(codebase_version) or tuple(Reader)
    return strictest(c.severity.get(Reader(r)) for r in lines)


def severity_by_reader(check: str, severity: str, codebase_version: str) -> dict[Reader, Severity | None]:
    """What each reader of the format line does with a finding of `check` whose severity (as found) is
    `severity`: the registry's entry (None for the user's rules), or the severity as found for a check the
    registry does not declare."""
    lines = reader_lines(codebase_version)
    c = CHECKS.get(check)
    if c is None:
        return {r: Severity(severity) for r in lines}
    if c.user_option is not None:
        return {r: None for r in lines}
    return {r: c.severity.get(r) for r in lines}


def target_severity(check: str, severity: str, codebase_version: str, reader: str = "all") -> Severity:
    """A finding's severity for the readers the user targets: the strictest among them; a user rule keeps its
    own; a finding no targeted reader looks at is info."""
    if user_option(check) is not None:
        return Severity(severity)
    per = severity_by_reader(check, severity, codebase_version)
    if not per:
        return Severity(severity)
    return strictest(per.get(r) for r in targeted(codebase_version, reader)) or Severity.INFO


def lerobot_loads(codebase_version: str, reader_errors: Mapping[Reader, int], trains_wrong: Mapping[Reader, int],
                  decoded: bool, reader: str = "all") -> dict[Reader, dict[str, Any]]:
    """verify's prediction per reader of the format line: loads <=> no finding that reader treats as an error.
    Without --decode the pixels were not looked at, so no error then predicts nothing (`loads: null`).
    `trains_wrong` counts the findings with which that reader loads but training is poisoned."""
    aim = targeted(codebase_version, reader)
    out: dict[Reader, dict[str, Any]] = {}
    for r in reader_lines(codebase_version):
        errors = int(reader_errors.get(r, 0))
        out[r] = {"reader": r.label, "codebase_version": codebase_version,
                  "loads": False if errors else (True if decoded else None), "pixels_checked": decoded,
                  "errors": errors, "trains_wrong": int(trains_wrong.get(r, 0)), "targeted": r in aim}
    return out


class ReaderTally:
    """Per-reader counts of the findings listed in a report (the reduce side of `lerobot_loads`)."""

    def __init__(self, codebase_version: str) -> None:
        self.codebase_version = codebase_version
        self.errors: dict[Reader, int] = {}
        self.trains_wrong: dict[Reader, int] = {}
        self.rules: dict[str, int] = {}  # user rule option -> failures

    def add(self, check: str, severity: str) -> None:
        opt = user_option(check)
        if opt is not None:
            self.rules[opt] = self.rules.get(opt, 0) + 1
            return
        for r, s in severity_by_reader(check, severity, self.codebase_version).items():
            if s == Severity.ERROR:
                self.errors[r] = self.errors.get(r, 0) + 1
            elif s == Severity.TRAINS_WRONG:
                self.trains_wrong[r] = self.trains_wrong.get(r, 0) + 1


def decide(rule_name: str, codebase_version: str, command: str, reader: str = "all") -> Decision:
    """What `command` does with a failed metadata rule on a dataset of this format, for the reader lines the user
    targets (`--reader`; default all: the strictest reader of the format's line):
    - a rule some targeted reader treats as an error: every command refuses the dataset (exit 2), except `scan`
      for a file it does not need to count storage and hours (`scan_needs` False): it warns;
    - a rule no targeted reader treats as an error: every command warns (`verify` lists it as a warning finding,
      `metadata_rule`) and goes on;
    - prep's own safety rule (`camera_key`: a key names a folder of the output, and of the source paths prep
      resolves), or a rule not declared: every command refuses."""
    r = CHECKS.get(rule_name)
    if r is None or r.prep_safety:
        return Decision.REFUSE
    errs = any(r.severity.get(line) == Severity.ERROR for line in targeted(codebase_version, reader))
    if command == "scan" and not r.scan_needs:
        return Decision.WARN
    return Decision.REFUSE if errs else Decision.WARN


# ---- docs/verify.md's tables, rendered from the registry ------------------------------------------------

DOC_TABLES = ("verdicts", "metadata rules", "output checks")


def _label(c: Check) -> str:
    note = f"`{c.user_option}`" if c.user_option else c.note
    return f"`{c.name}`" + (f" ({note})" if note else "")


def _cells(c: Check) -> tuple[str, ...]:
    if c.user_option:
        return ("- (your rule)",) * len(Reader)
    return tuple(str(c.severity.get(r) or "-") for r in Reader)


def _verdict_rows() -> Iterator[str]:
    group: list[Check] = []

    def row() -> str:
        return f"| {', '.join(_label(c) for c in group)} | {' | '.join(_cells(group[0]))} | {group[0].doc} |"

    for c in DECLARED:
        if c.scope in (Scope.METADATA, Scope.OUTPUT):
            continue
        if group and (group[-1].doc, _cells(group[-1])) != (c.doc, _cells(c)):
            yield row()
            group = []
        group.append(c)
    if group:
        yield row()


def render_table(which: str) -> str:
    """One of docs/verify.md's tables (`DOC_TABLES`), as the registry has it."""
    if which == "verdicts":
        head = ["| check | 0.3 (v2.1: lerobot 0.3.x / openpi) | 0.4 (v3.0) | 0.6 (v3.0) | the LeRobot behaviour it "
                "mirrors |", "|---|---|---|---|---|"]
        return "\n".join([*head, *_verdict_rows()])
    if which == "metadata rules":
        lines = ["| rule | what | 0.3 (v2.1) | 0.4 (v3.0) | 0.6 (v3.0) | scan |", "|---|---|---|---|---|---|"]
        for c in metadata_rules().values():
            cells = [f"{c.severity.get(r) or 'ignored'}: {c.where[r]}" if r in c.severity else "-" for r in Reader]
            scan = "refuses" if c.prep_safety or (c.scan_needs and any(
                s == Severity.ERROR for s in c.severity.values())) else "warns"
            lines.append(f"| `{c.name}` | {c.doc} | {' | '.join(cells)} | {scan} |")
        return "\n".join(lines)
    if which == "output checks":
        lines = ["| check | severity | what |", "|---|---|---|"]
        lines += [f"| {_label(c)} | {c.found} | {c.doc} |" for c in DECLARED if c.scope is Scope.OUTPUT]
        return "\n".join(lines)
    raise KeyError(which)


def _markers(which: str) -> tuple[str, str]:
    return (f"<!-- {which}: generated from pipeline/checks.py (python -m pipeline.checks docs/verify.md) -->",
            f"<!-- end of {which} -->")


def doc_table(text: str, which: str) -> str:
    """The table between `which`'s markers in a page's text."""
    begin, end = _markers(which)
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)].strip("\n")


def render_docs(text: str) -> str:
    """A page's text with every table between its markers rendered anew."""
    for which in DOC_TABLES:
        begin, end = _markers(which)
        start = text.index(begin) + len(begin)
        text = text[:start] + "\n" + render_table(which) + "\n" + text[text.index(end, start):]
    return text


def main(argv: list[str]) -> int:
    """`python -m pipeline.checks PAGE`: rewrite the registry's tables in PAGE (docs/verify.md)."""
    if len(argv) != 1:
        print("usage: python -m pipeline.checks docs/verify.md", file=sys.stderr)
        return 2
    page = Path(argv[0])
    text = page.read_text(encoding="utf-8")
    new = render_docs(text)
    if new != text:
        page.write_text(new, encoding="utf-8")
        print(f"rewrote the tables of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
