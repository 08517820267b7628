"""The edit stages: one unit = one output file of `prep edit` (see `pipeline/jobs/edit/`).

- `copy_video`: a v2.1 episode mp4 under its new episode's name, byte for byte (one episode per file: no cut);
- `splice_video`: a v3.0 video file's kept episodes back to back (`pipeline/stages/edit_video.py`: stream
  copy, exact offsets, refused where a cut is off a keyframe);
- `edit_data`: the kept episodes' rows of one source parquet (v2.1: one episode; v3.0: the episodes of one
  source file), `episode_index`, `index` and `task_index` renumbered, one row group per episode;
- `check_splice`: which kept episodes of a v3.0 file a splice could not cut exactly (run before anything is
  written, so such an edit is refused whole).

Each stage keeps an output that already exists, passes its checks and whose record says it was made by this very
unit from these very source files (`pipeline.stages.keep`: a file cut short, or a source changed since, even with
its size and mtime put back, is written again), and otherwise writes it under a temp name, checks it and renames
it into place; a failure is a result with a reason, never a partial file.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.checks import Status
from pipeline.errors import EpisodeError
from pipeline.formats.hf import HF_KEY
from pipeline.rates import fps_fraction, frames_to_seconds
from pipeline.stages.convert import _read_parquet, data_check, source_file, video_check, video_failures
from pipeline.stages.edit_video import (
    EncodeSettings,
    SpliceSpan,
    encode_settings,
    partial_reencode,
    reencode_span,
    splice_problems,
    splice_segments,
)
from pipeline.stages.keep import OutputRecord, keep_or_copy, keep_or_write, record_of
from pipeline.stages.result import FileResult, file_stage, reason_of
from pipeline.storage import (
    STREAM_BLOCK,
    FileProblem,
    Output,
    Root,
    Source,
    StorePath,
    as_root,
    output_file,
    output_folder,
    output_size,
)
from pipeline.video.checks import Span
from pipeline.video.remux import StartProblem


@dataclass(slots=True, frozen=True)
class CopyVideoUnit:
    """A v2.1 episode mp4 copied under the new episode's path."""

    src_root: Root  # the source dataset: a local folder's path, or its `Location` (an object store's)
    out_root: str
    src_rel: str
    out_rel: str
    episode: int  # in the source
    new_episode: int
    frames: int
    fps: float = 0.0  # > 0: the copy is checked as every file an edit writes (its frames, pts on the grid from 0)
    camera: str | None = None


@dataclass(slots=True, frozen=True)
class VideoSegment:
    """The kept spans of one source file (every episode of its run is listed, kept or not, so that each packet
    is attributed and each cut checked) and the kept ones' new indices, in time order."""

    src_root: Root
    src_rel: str
    spans: tuple[SpliceSpan, ...]
    new_episodes: tuple[int, ...]

    @property
    def frames(self) -> int:
        return sum(s.frames for s in self.spans if s.keep)


@dataclass(slots=True, frozen=True)
class SpliceVideoUnit:
    """One output video file: the segments (one per source file; several only when a merge packs files with
    the same codec parameters together) back to back."""

    out_root: str
    out_rel: str
    camera: str
    fps: float
    segments: tuple[VideoSegment, ...]

    @property
    def frames(self) -> int:
        return sum(g.frames for g in self.segments)

    @property
    def new_episodes(self) -> tuple[int, ...]:
        return tuple(e for g in self.segments for e in g.new_episodes)


@dataclass(slots=True, frozen=True)
class DataPart:
    """One kept episode's rows in a source parquet and where they go."""

    episode: int
    new_episode: int
    frames: int
    new_from_index: int


@dataclass(slots=True, frozen=True)
class DataInput:
    """The kept episodes of one source parquet; `task_map` old -> new task_index (pairs, sorted); `columns`
    the columns that change (source column, its new name or None when left out: an image camera dropped, a
    feature renamed)."""

    src_root: Root
    src_rel: str
    parts: tuple[DataPart, ...]
    task_map: tuple[tuple[int, int], ...]
    columns: tuple[tuple[str, str | None], ...] = ()


@dataclass(slots=True, frozen=True)
class EditDataUnit:
    """One output parquet: its inputs' kept episodes, renumbered, a row group each (several inputs only when
    a merge packs files together)."""

    out_root: str
    out_rel: str
    inputs: tuple[DataInput, ...]

    @property
    def parts(self) -> tuple[DataPart, ...]:
        return tuple(p for i in self.inputs for p in i.parts)

    @property
    def frames(self) -> int:
        return sum(p.frames for p in self.parts)


@dataclass(slots=True, frozen=True)
class SpliceCheckUnit:
    src_root: Root
    src_rel: str
    camera: str
    spans: tuple[SpliceSpan, ...]


@dataclass(slots=True, frozen=True)
class ReencodeVideoUnit:
    """`--reencode-partial`: one kept episode of a v3.0 source file whose cut is off a keyframe, decoded and
    encoded with the source's codec settings into an output file of its own. `why`: the cut's problem;
    `feature_info`: the camera's `info` in info.json (video.g/crf/preset/pix_fmt as JSON text)."""

    src_root: Root
    src_rel: str
    out_root: str
    out_rel: str
    camera: str
    fps: float
    span: SpliceSpan
    new_episode: int
    why: str
    feature_info: str

    @property
    def frames(self) -> int:
        return self.span.frames


EditUnit = CopyVideoUnit | SpliceVideoUnit | EditDataUnit | ReencodeVideoUnit


EditResult = FileResult  # kind: "video-copy" | "video-splice" | "video-reencode" | "data"


def _record(unit: EditUnit, sources: Sequence[Source]) -> OutputRecord:
    """The record of a unit's output file: the unit (its output folder aside) and its source files."""
    key = {"unit": type(unit).__name__, **{k: v for k, v in asdict(unit).items() if k != "out_root"}}
    return record_of(unit.out_root, unit.out_rel, key, sources)


def _result(kind: str, unit: EditUnit, status: Status, dst: Output, note: str | None = None) -> EditResult:
    return FileResult(kind=kind, out_rel=unit.out_rel, status=status, out_bytes=output_size(dst), note=note)


# ---- videos ---------------------------------------------------------------------------------------


def copy_failures(unit: CopyVideoUnit, path: Source) -> list[Any]:
    """The checks of a copied episode mp4 (`video_failures`: it decodes as a video holding the episode's
    `frames` frames, pts on the 1/fps grid from 0), as the v3.0 path checks each file it splices; none when the
    unit carries no fps."""
    if unit.fps <= 0:
        return []
    n = unit.frames
    return video_failures(path, unit.fps, [Span(unit.episode, 0.0, frames_to_seconds(n, unit.fps), n)], n,
                          unit.camera)


def copy_video(unit: CopyVideoUnit) -> EditResult:
    def body() -> EditResult:
        dst = output_file(unit.out_root, unit.out_rel)
        src = source_file(unit.src_root, unit.src_rel, unit.episode)
        try:
            size = src.stat("video file").size
        except FileProblem as exc:
            raise EpisodeError(unit.episode, exc.path, exc.message) from None

        def write(tmp: Path) -> None:
            try:
                with src.open(block_size=STREAM_BLOCK) as fin, open(tmp, "wb") as fout:  # the source through
                    shutil.copyfileobj(fin, fout, STREAM_BLOCK)  # its store
            except OSError as exc:
                raise EpisodeError(unit.episode, src, f"cannot copy: {exc.strerror or exc}") from None

        def check(path: Source) -> str | None:
            failures = copy_failures(unit, path)
            if not failures:
                return None
            # a broken kept video fails its file: meta/info.json is withheld, as in v3.0
            found = "; ".join(f"{f.check}: expected {f.expected}, found {f.found}".replace(str(path), str(src))
                              for f in failures[:3])  # the copy holds the source's bytes: name the source
            more = f" (+{len(failures) - 3} more)" if len(failures) > 3 else ""
            return f"the kept episode's video failed its checks: {found}{more}"

        record = _record(unit, [src])
        keep = lambda path: output_size(path) == size and check(path) is None  # noqa: E731
        if isinstance(dst, StorePath) and server_side(src, dst):  # CopyObject: no byte through this process
            status = keep_or_copy(dst, src, check, record=record, keep=keep, episode=unit.episode, blame=src)
        else:  # renamed into place only when complete and checked
            status = keep_or_write(dst, output_folder(unit.out_root), write, check, record=record, keep=keep,
                                   episode=unit.episode, blame=src)
        return _result("video-copy", unit, status, dst)

    return file_stage("video-copy", unit.out_rel, 1, unit.frames, body)


def server_side(src: StorePath, dst: StorePath) -> bool:
    """Whether the store can copy `src` to `dst` itself (one object store: endpoint and bucket)."""
    return not src.location.is_local and src.location.same_store(dst.location)


def out_spans(unit: SpliceVideoUnit) -> list[Span]:
    """Each kept episode's span in the output file (new indices): [before / fps, (before + n) / fps)."""
    spans, before = [], 0
    for g in unit.segments:
        kept = [s for s in sorted(g.spans, key=lambda s: s.from_timestamp) if s.keep]
        for s, new in zip(kept, g.new_episodes, strict=True):
            spans.append(Span(new, frames_to_seconds(before, unit.fps),
                              frames_to_seconds(before + s.frames, unit.fps), s.frames))
            before += s.frames
    return spans


def splice_video(unit: SpliceVideoUnit) -> EditResult:
    def body() -> EditResult:
        dst = output_file(unit.out_root, unit.out_rel)
        segments: list[tuple[Source, Sequence[SpliceSpan]]] = [
            (source_file(g.src_root, g.src_rel, g.spans[0].episode if g.spans else None), g.spans)
            for g in unit.segments]
        status = keep_or_write(dst, output_folder(unit.out_root),
                               lambda tmp: splice_segments(segments, tmp, fps_fraction(unit.fps)),
                               video_check(unit.fps, out_spans(unit), unit.frames, unit.camera),
                               record=_record(unit, [path for path, _spans in segments]))
        return _result("video-splice", unit, status, dst)

    return file_stage("video-splice", unit.out_rel, len(unit.new_episodes), unit.frames, body)


def check_splice(unit: SpliceCheckUnit) -> list[StartProblem]:
    path = as_root(unit.src_root) / unit.src_rel
    try:
        path = source_file(unit.src_root, unit.src_rel, unit.spans[0].episode if unit.spans else None)
        return splice_problems(path, unit.spans, unit.camera)
    except EpisodeError as exc:
        return [StartProblem(s.episode, unit.camera, str(path), exc.message) for s in unit.spans if s.keep]


def check_splice_failed(unit: SpliceCheckUnit, exc: BaseException) -> list[StartProblem]:
    reason = reason_of(exc)
    return [StartProblem(s.episode, unit.camera, str(as_root(unit.src_root) / unit.src_rel), f"not checked: {reason}")
            for s in unit.spans if s.keep]


def check_partial(unit: SpliceCheckUnit) -> list[StartProblem]:
    """`--reencode-partial`: the kept episodes of the file to re-encode (one `StartProblem` each, its reason
    the cut's problem), so that the others are copied exactly."""
    path = as_root(unit.src_root) / unit.src_rel
    try:
        path = source_file(unit.src_root, unit.src_rel, unit.spans[0].episode if unit.spans else None)
        found = partial_reencode(path, unit.spans)
    except EpisodeError as exc:
        return [StartProblem(s.episode, unit.camera, str(path), f"not checked: {exc.message}") for s in unit.spans
                if s.keep]
    return [StartProblem(e, unit.camera, str(path), why) for e, why in sorted(found.items())]


def reencode_video(unit: ReencodeVideoUnit) -> EditResult:
    import json

    def body() -> EditResult:
        dst = output_file(unit.out_root, unit.out_rel)
        n = unit.span.frames
        spans = [Span(unit.new_episode, 0.0, frames_to_seconds(n, unit.fps), n)]
        src = source_file(unit.src_root, unit.src_rel, unit.span.episode)
        settings: EncodeSettings = encode_settings(src, json.loads(unit.feature_info))
        note = (f"episode {unit.span.episode} -> {unit.new_episode} ({unit.camera}) re-encoded with "
                f"{settings.describe()}: {unit.why}")
        check = video_check(unit.fps, spans, n, unit.camera)
        status = keep_or_write(dst, output_folder(unit.out_root),
                               lambda tmp: reencode_span(src, tmp, unit.span, fps_fraction(unit.fps), settings),
                               lambda path: None if (reason := check(path)) is None else "re-encoded " + reason,
                               record=_record(unit, [src]), episode=unit.span.episode)
        return _result("video-reencode", unit, status, dst, note)

    return file_stage("video-reencode", unit.out_rel, 1, unit.frames, body)


# ---- data -----------------------------------------------------------------------------------------


def _renumbered(table: pa.Table, part: DataPart, task_map: dict[int, int], path: Source) -> pa.Table:
    n = table.num_rows

    def put(name: str, values: np.ndarray) -> None:
        nonlocal table
        pos = table.column_names.index(name)
        field = table.schema.field(pos)
        table = table.set_column(pos, field, pa.array(values, type=field.type))

    if "index" not in table.column_names:
        raise EpisodeError(part.episode, path, "no 'index' column (LeRobot reads each row's global index from it)")
    put("index", np.arange(part.new_from_index, part.new_from_index + n, dtype=np.int64))
    if "episode_index" in table.column_names:
        put("episode_index", np.full(n, part.new_episode, dtype=np.int64))
    if "task_index" in table.column_names:
        old = table.column("task_index").to_numpy(zero_copy_only=False)
        uniq = np.unique(old)
        missing = [int(t) for t in uniq if int(t) not in task_map]
        if missing:
            raise EpisodeError(part.episode, path, f"task_index {missing[0]} is not a task of the episode's "
                                                   "metadata (its 'tasks')")
        lut = {int(t): task_map[int(t)] for t in uniq}
        put("task_index", np.array([lut[int(t)] for t in old], dtype=np.int64) if len(lut) > 1
            else np.full(n, next(iter(lut.values()), 0), dtype=np.int64))
    return table


def _renamed_metadata(metadata: dict[bytes, bytes], change: dict[str, str | None]) -> dict[bytes, bytes]:
    """The schema metadata of a parquet whose columns `change` (left out: None, or renamed): the features of
    its `huggingface` block and the columns of its `pandas` block follow them; other keys are kept."""
    out = dict(metadata)
    for key in (HF_KEY, b"pandas"):
        if key not in out:
            continue
        try:
            doc = json.loads(out[key].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            out.pop(key)  # unreadable: it could only describe columns that are gone
            continue
        if key == HF_KEY and isinstance(doc, dict) and isinstance(doc.get("info"), dict) \
                and isinstance(doc["info"].get("features"), dict):
            feats = doc["info"]["features"]
            doc["info"]["features"] = {change.get(k) or k: v for k, v in feats.items() if change.get(k, k) is not None}
        elif key == b"pandas" and isinstance(doc, dict) and isinstance(doc.get("columns"), list):
            cols = []
            for c in doc["columns"]:
                name = c.get("field_name", c.get("name")) if isinstance(c, dict) else None
                if isinstance(name, str) and name in change:
                    if change[name] is None:
                        continue
                    c = {**c, "field_name": change[name], **({"name": change[name]} if c.get("name") == name else {})}
                cols.append(c)
            doc["columns"] = cols
        out[key] = json.dumps(doc).encode("utf-8")
    return out


def shaped_columns(table: pa.Table, columns: Sequence[tuple[str, str | None]]) -> pa.Table:
    """`table` with the columns `columns` names left out (None) or renamed, and its schema metadata to match
    (`_renamed_metadata`); the other columns, their order and values, unchanged."""
    if not columns:
        return table
    change = dict(columns)
    metadata = _renamed_metadata(table.schema.metadata or {}, change)  # before: a rename drops the metadata
    kept = [n for n in table.column_names if change.get(n, n) is not None]
    table = table.select(kept).rename_columns([change.get(n) or n for n in kept])
    return table.replace_schema_metadata(metadata)


def edit_data(unit: EditDataUnit) -> EditResult:
    def body() -> EditResult:
        dst = output_file(unit.out_root, unit.out_rel)
        expected = [(p.new_episode, p.frames) for p in unit.parts]
        first_index = unit.parts[0].new_from_index
        sources = [source_file(inp.src_root, inp.src_rel, inp.parts[0].episode) for inp in unit.inputs]

        def write(tmp: Path) -> None:
            writer: pq.ParquetWriter | None = None
            schema: pa.Schema | None = None
            try:
                for inp in unit.inputs:
                    first = inp.parts[0].episode
                    src = source_file(inp.src_root, inp.src_rel, first)
                    table = shaped_columns(_read_parquet(src, first if len(inp.parts) == 1 else None), inp.columns)
                    if "episode_index" not in table.column_names:
                        raise EpisodeError(first, src, "no 'episode_index' column")
                    if schema is None:
                        schema = table.schema
                        writer = pq.ParquetWriter(tmp, schema, compression="snappy", use_dictionary=True)
                    elif table.column_names != schema.names and set(table.column_names) == set(schema.names):
                        table = table.select(schema.names)  # a merge's source with its features in another order
                    if not table.schema.remove_metadata().equals(schema.remove_metadata()):
                        raise EpisodeError(first, src, "its columns differ from the first source file's in this "
                                                       "output file")
                    assert writer is not None
                    episodes = table.column("episode_index").to_numpy(zero_copy_only=False)
                    task_map = dict(inp.task_map)
                    for part in inp.parts:
                        rows = np.flatnonzero(episodes == part.episode)
                        if len(rows) != part.frames:
                            raise EpisodeError(part.episode, src, f"{len(rows)} rows (frames_in_parquet) but the "
                                                                  f"metadata length is {part.frames}")
                        if rows[-1] - rows[0] + 1 != len(rows):
                            raise EpisodeError(part.episode, src, "the episode's rows are not consecutive")
                        piece = _renumbered(table.slice(int(rows[0]), len(rows)), part, task_map, src)
                        writer.write_table(piece.replace_schema_metadata(schema.metadata), row_group_size=len(rows))
            finally:
                if writer is not None:
                    writer.close()

        status = keep_or_write(dst, output_folder(unit.out_root), write, data_check(expected, first_index),
                               record=_record(unit, sources))
        return _result("data", unit, status, dst)

    return file_stage("data", unit.out_rel, len(unit.parts), unit.frames, body)


# ---- the stage the job maps -----------------------------------------------------------------------


STAGES: dict[type, Callable[[Any], EditResult]] = {
    CopyVideoUnit: copy_video,
    SpliceVideoUnit: splice_video,
    EditDataUnit: edit_data,
    ReencodeVideoUnit: reencode_video,
}
KINDS: dict[type, str] = {CopyVideoUnit: "video-copy", SpliceVideoUnit: "video-splice", EditDataUnit: "data",
                          ReencodeVideoUnit: "video-reencode"}


def edit_unit(unit: EditUnit) -> list[EditResult]:
    """One unit's output file, written (checked, renamed) or kept; a failure is a result with its reason."""
    return [STAGES[type(unit)](unit)]


def edit_failed(unit: EditUnit, exc: BaseException) -> list[EditResult]:
    """The result of a unit whose task raised or whose worker died beyond the retries."""
    reason = reason_of(exc)
    episodes = 1 if isinstance(unit, CopyVideoUnit | ReencodeVideoUnit) else len(unit.new_episodes) if isinstance(
        unit, SpliceVideoUnit) else len(unit.parts)
    return [FileResult(kind=KINDS[type(unit)], out_rel=unit.out_rel, status=Status.FAILED, reason=reason,
                       episodes=episodes, frames=unit.frames)]
