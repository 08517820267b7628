"""The convert stages: one unit = one output file (see `pipeline/formats/plan.py`).

Each stage keeps an output that already exists and passes its checks (resume), and otherwise writes it
under a temp name, checks it and renames it into place (`pipeline/atomic.py`); a failure is a result
with a reason, never a partial file. Videos are checked with `pipeline/video/checks.py` (frame count per
episode, pts on the i/fps grid from each episode's start, header count, no frame outside the spans);
parquets by `data_failures` (rows per episode, `episode_index`, `frame_index` 0..n-1, `index` continuous).

- `concat_video`: v2.1 episode mp4s -> one v3.0 file (stream copy, exact frame offsets);
- `cut_video`: an episode's span of a v3.0 file -> its v2.1 mp4 (stream copy; needs a keyframe start);
- `concat_data`: v2.1 episode parquets -> one v3.0 data file, a row group per episode, `index` continuous;
- `split_data`: a v3.0 data file -> the v2.1 parquets of its episodes (the source is read once per group);
- `check_keyframes`: which episodes of a v3.0 file do not start on a keyframe (decides whether v3.0 -> v2.1
  can stream-copy at all).

`convert_unit` is the one stage the convert job maps (`pipeline/jobs/convert.py`): a unit is one output
file, except a `DataSplitGroup` (the v2.1 parquets of one v3.0 data file, which is read once for them);
it returns one result per output file.

Rows keep their values and column types; the schema's metadata is the Hugging Face features as the
target version's LeRobot writes them (`pipeline/formats/hf.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.checks import Status
from pipeline.dataset.info import read_json_file
from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats.hf import target_metadata
from pipeline.formats.plan import DataConcatUnit, DataSplitUnit, KeyframeCheckUnit, VideoConcatUnit, VideoCutUnit
from pipeline.rates import fps_fraction, frames_to_seconds
from pipeline.stages.keep import keep_or_write
from pipeline.stages.result import FileResult, failure_text, file_stage, reason_of
from pipeline.storage import (
    STREAM_BLOCK,
    FileProblem,
    Location,
    Output,
    Root,
    Source,
    StorePath,
    as_file,
    as_root,
    output_file,
    output_folder,
    output_size,
)
from pipeline.video.checks import TIMESTAMP_TOLERANCE_S, CheckFailure, Span, VideoExpect, check_coverage, check_video
from pipeline.video.remux import ConcatInput, StartProblem, concat_stream_copy, cut_stream_copy, episodes_off_keyframe


@dataclass(slots=True, frozen=True)
class DataSplitGroup:
    """The v2.1 episode parquets cut from one v3.0 data file (one task reads the source once)."""

    units: tuple[DataSplitUnit, ...]


ConvertUnit = VideoConcatUnit | DataConcatUnit | VideoCutUnit | DataSplitGroup


ConvertResult = FileResult  # kind: "video-concat" | "video-cut" | "data-concat" | "data-split"


def _written(kind: str, unit: Any, status: Status, dst: Output, rewritten: int = 0) -> ConvertResult:
    return FileResult(kind=kind, out_rel=unit.out_rel, status=status, out_bytes=output_size(dst),
                      index_rewritten=rewritten)


def source_file(root: Root, rel: str, episode: int | None) -> StorePath:
    """The source dataset's file `rel`, checked to lie inside it (its store's rules: links too)."""
    path = as_root(root) / rel
    try:
        path.store.check(path.rel)
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    return path


# ---- videos ---------------------------------------------------------------------------------------


def video_failures(path: Source, fps: float, spans: list[Span], total: int, camera: str | None) -> list[CheckFailure]:
    """checks.py on a written file, plus: the file holds exactly `total` frames, the first at pts 0. Only the
    findings that refuse a file (errors, never a warning or info finding: `pipeline.video.checks.failing`)."""
    probe, failures = check_video(path, VideoExpect(fps=fps), spans, camera=camera)
    if probe is None:
        return failures
    failures += check_coverage(probe, spans, camera=camera)
    if probe.frames_from_packets != total:
        failures.append(CheckFailure("frames_total", f"{total} (source frames)", str(probe.frames_from_packets),
                                     None, camera, str(path)))
    if probe.pts_s and abs(min(probe.pts_s)) > TIMESTAMP_TOLERANCE_S:
        failures.append(CheckFailure("first_pts", "0", f"{min(probe.pts_s):.6f}", None, camera, str(path)))
    return [f for f in failures if f.is_error]


def video_check(fps: float, spans: list[Span], total: int, camera: str | None) -> Callable[[Source], str | None]:
    """`video_failures` as the check of `keep_or_write`: the reason a file fails, or None."""
    def check(path: Source) -> str | None:
        failures = video_failures(path, fps, spans, total, camera)
        return "output failed its checks: " + failure_text(failures) if failures else None

    return check


def data_check(episodes: Sequence[tuple[int, int]], first_index: int) -> Callable[[Source], str | None]:
    """`data_failures` as the check of `keep_or_write`: the reason a file fails, or None."""
    def check(path: Source) -> str | None:
        problems = data_failures(path, episodes, first_index)
        return "output failed its checks: " + "; ".join(problems[:3]) if problems else None

    return check


def concat_spans(unit: VideoConcatUnit) -> list[Span]:
    """Each episode's span in the output: [frames_before / fps, (frames_before + n) / fps)."""
    spans, before = [], 0
    for item in unit.inputs:
        spans.append(Span(item.episode, frames_to_seconds(before, unit.fps),
                          frames_to_seconds(before + item.frames, unit.fps), item.frames))
        before += item.frames
    return spans


def concat_video(unit: VideoConcatUnit) -> ConvertResult:
    def body() -> ConvertResult:
        dst = output_file(unit.out_root, unit.out_rel)

        def write(tmp: Path) -> None:
            inputs = [ConcatInput(i.episode, source_file(unit.src_root, i.rel, i.episode), i.frames)
                      for i in unit.inputs]
            concat_stream_copy(inputs, tmp, fps_fraction(unit.fps))

        status = keep_or_write(dst, output_folder(unit.out_root), write,
                               video_check(unit.fps, concat_spans(unit), unit.frames, unit.camera))
        return _written("video-concat", unit, status, dst)

    return file_stage("video-concat", unit.out_rel, len(unit.inputs), unit.frames, body)


def cut_video(unit: VideoCutUnit) -> ConvertResult:
    def body() -> ConvertResult:
        dst = output_file(unit.out_root, unit.out_rel)
        out_span = [Span(unit.episode, 0.0, None, unit.frames)]

        def write(tmp: Path) -> None:
            src = source_file(unit.src_root, unit.src_rel, unit.episode)
            span = Span(unit.episode, unit.from_timestamp, unit.to_timestamp, unit.frames)
            cut_stream_copy(src, tmp, span, fps_fraction(unit.fps))

        status = keep_or_write(dst, output_folder(unit.out_root), write,
                               video_check(unit.fps, out_span, unit.frames, unit.camera), episode=unit.episode)
        return _written("video-cut", unit, status, dst)

    return file_stage("video-cut", unit.out_rel, 1, unit.frames, body)


# ---- data -----------------------------------------------------------------------------------------


def _source_features(src_root: Location) -> dict[str, Any]:
    """The source's info.json features (only needed when a parquet carries no Hugging Face features)."""
    try:
        info = read_json_file(StorePath(src_root, "meta/info.json"))
    except (DatasetError, OSError, ValueError):
        return {}
    feats = info.get("features") if isinstance(info, dict) else None
    return feats if isinstance(feats, dict) else {}


def _read_parquet(path: Source, episode: int | None) -> pa.Table:
    try:
        with as_file(path).media(block_size=STREAM_BLOCK, what="parquet file") as source:
            return pq.read_table(source)
    except FileProblem as exc:
        raise EpisodeError(episode, exc.path, exc.message) from None
    except FileNotFoundError:
        raise EpisodeError(episode, path, "missing parquet file") from None
    except (pa.ArrowException, OSError) as exc:
        raise EpisodeError(episode, path, f"unreadable parquet ({type(exc).__name__}: {exc})") from None


def with_index(table: pa.Table, first: int, episode: int | None, path: Source) -> tuple[pa.Table, int]:
    """The table with `index` = first, first+1, ...; returns it and how many rows had another value."""
    if "index" not in table.column_names:
        raise EpisodeError(episode, path, "no 'index' column (LeRobot reads each row's global index from it)")
    want = np.arange(first, first + table.num_rows, dtype=np.int64)
    col = table.column("index")
    have = col.to_numpy(zero_copy_only=False)
    changed = int(np.count_nonzero(have != want)) if len(have) == len(want) else table.num_rows
    if changed == 0:
        return table, 0
    pos = table.column_names.index("index")
    field = table.schema.field(pos)
    return table.set_column(pos, field, pa.array(want, type=field.type)), changed


def _episode_column_check(table: pa.Table, episode: int, path: Source) -> None:
    if "episode_index" not in table.column_names:
        return
    values = table.column("episode_index").to_numpy(zero_copy_only=False)
    bad = values[values != episode]
    if len(bad):
        raise EpisodeError(episode, path, f"{len(bad)} rows have episode_index {int(bad[0])}, not {episode}")


def data_failures(path: Source, episodes: Sequence[tuple[int, int]], first_index: int) -> list[str]:
    """What is wrong with a written data parquet that should hold `episodes` [(episode, rows)] in order,
    with `index` running from `first_index` (empty list = it passes)."""
    try:
        with as_file(path).media(what="parquet file") as source, pq.ParquetFile(source) as pf:
            names = pf.schema_arrow.names
            table = pf.read(columns=[c for c in ("episode_index", "frame_index", "index") if c in names])
    except FileProblem as exc:
        return [f"unreadable parquet ({exc.message})"]
    except (pa.ArrowException, OSError) as exc:
        return [f"unreadable parquet ({type(exc).__name__}: {exc})"]
    total = sum(n for _, n in episodes)
    if table.num_rows != total:
        return [f"{table.num_rows} rows, expected {total}"]
    out = []
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    if "index" in cols and not np.array_equal(cols["index"], np.arange(first_index, first_index + total)):
        out.append(f"index is not continuous from {first_index}")
    start = 0
    for ep, n in episodes:
        if "episode_index" in cols and not np.all(cols["episode_index"][start:start + n] == ep):
            out.append(f"rows {start}..{start + n - 1} are not all episode {ep}")
        if "frame_index" in cols and not np.array_equal(cols["frame_index"][start:start + n], np.arange(n)):
            out.append(f"episode {ep}: frame_index is not 0..{n - 1}")
        start += n
    return out


def concat_data(unit: DataConcatUnit) -> ConvertResult:
    def body() -> ConvertResult:
        dst = output_file(unit.out_root, unit.out_rel)
        expected = [(i.episode, i.frames) for i in unit.inputs]
        rewritten = 0

        def write(tmp: Path) -> None:
            nonlocal rewritten
            writer: pq.ParquetWriter | None = None
            out_schema: pa.Schema | None = None
            first_episode = unit.inputs[0].episode
            index = unit.first_index
            try:
                for item in unit.inputs:
                    path = source_file(unit.src_root, item.rel, item.episode)
                    table = _read_parquet(path, item.episode)
                    if table.num_rows != item.frames:
                        raise EpisodeError(item.episode, path, f"{table.num_rows} rows (frames_in_parquet) but the "
                                                               f"metadata length is {item.frames}")
                    _episode_column_check(table, item.episode, path)
                    table, changed = with_index(table, index, item.episode, path)
                    rewritten += changed
                    if out_schema is None:
                        meta = target_metadata(table.schema, _source_features(unit.src_root), "v3.0")
                        out_schema = table.schema.with_metadata(meta)
                        writer = pq.ParquetWriter(tmp, out_schema, compression="snappy", use_dictionary=True)
                    elif not table.schema.remove_metadata().equals(out_schema.remove_metadata()):
                        raise EpisodeError(item.episode, path, f"columns {table.schema.remove_metadata()} differ "
                                                               f"from episode {first_episode}'s")
                    assert writer is not None
                    # One row group per episode (LeRobot's writers since mid-2026: an episode read by byte range)
                    writer.write_table(table.replace_schema_metadata(out_schema.metadata),
                                       row_group_size=max(1, table.num_rows))
                    index += item.frames
            finally:
                if writer is not None:
                    writer.close()

        status = keep_or_write(dst, output_folder(unit.out_root), write, data_check(expected, unit.first_index))
        return _written("data-concat", unit, status, dst, rewritten)

    return file_stage("data-concat", unit.out_rel, len(unit.inputs), unit.frames, body)


def split_data(units: Sequence[DataSplitUnit]) -> list[ConvertResult]:
    """The episode parquets of `units`; each source file is read once for all its units (pass the units of
    one source file together: that is how they batch into one task)."""
    results: list[ConvertResult] = []
    for _src, group in groupby(units, key=lambda u: (u.src_root, u.src_rel)):
        results.extend(_split_one_source(list(group)))
    return results


def _split_one_source(units: list[DataSplitUnit]) -> Iterator[ConvertResult]:
    cache: dict[str, Any] = {}

    def source() -> tuple[pa.Table, np.ndarray, StorePath]:
        if "table" not in cache:
            u = units[0]
            path = source_file(u.src_root, u.src_rel, u.episode)
            table = _read_parquet(path, None)
            if "episode_index" not in table.column_names:
                raise EpisodeError(None, path, "no 'episode_index' column")
            cache.update(table=table, episodes=table.column("episode_index").to_numpy(zero_copy_only=False),
                         path=path)
        return cache["table"], cache["episodes"], cache["path"]

    for unit in units:
        def body(unit: DataSplitUnit = unit) -> ConvertResult:
            dst = output_file(unit.out_root, unit.out_rel)
            changed = 0

            def write(tmp: Path) -> None:
                nonlocal changed
                table, episodes, path = source()
                rows = np.flatnonzero(episodes == unit.episode)
                if len(rows) != unit.frames:
                    raise EpisodeError(unit.episode, path, f"{len(rows)} rows (frames_in_parquet) but the metadata "
                                                           f"length is {unit.frames}")
                if rows[-1] - rows[0] + 1 != len(rows):
                    raise EpisodeError(unit.episode, path, "the episode's rows are not consecutive")
                part = table.slice(int(rows[0]), len(rows))
                part, changed = with_index(part, unit.dataset_from_index, unit.episode, path)
                meta = target_metadata(part.schema, _source_features(unit.src_root), "v2.1")
                pq.write_table(part.replace_schema_metadata(meta), tmp, compression="snappy")

            status = keep_or_write(dst, output_folder(unit.out_root), write,
                                   data_check([(unit.episode, unit.frames)], unit.dataset_from_index),
                                   episode=unit.episode)
            return _written("data-split", unit, status, dst, changed)

        yield file_stage("data-split", unit.out_rel, 1, unit.frames, body)


def check_keyframes(unit: KeyframeCheckUnit) -> list[StartProblem]:
    """The episodes of one v3.0 file that a stream-copy cut could not copy exactly (one demux, no decode)."""
    path = StorePath(unit.src_root, "") / unit.rel
    spans = [Span(ep, t0, t1, n) for ep, t0, t1, n in unit.spans]
    try:
        path = source_file(unit.src_root, unit.rel, spans[0].episode if spans else None)
        return episodes_off_keyframe(path, spans, unit.camera)
    except EpisodeError as exc:
        return [StartProblem(s.episode, unit.camera, str(path), exc.message) for s in spans]


# ---- the stage the job maps -----------------------------------------------------------------------


def _split_group(unit: DataSplitGroup) -> list[ConvertResult]:
    return split_data(unit.units)


STAGES: dict[type, Callable[[Any], ConvertResult | list[ConvertResult]]] = {
    VideoConcatUnit: concat_video,
    DataConcatUnit: concat_data,
    VideoCutUnit: cut_video,
    DataSplitGroup: _split_group,
}
KINDS: dict[type, str] = {VideoConcatUnit: "video-concat", DataConcatUnit: "data-concat", VideoCutUnit: "video-cut",
                          DataSplitGroup: "data-split"}


def convert_unit(unit: ConvertUnit) -> list[ConvertResult]:
    """One unit's output files, each written (checked, renamed) or kept; failures are results with reasons."""
    out = STAGES[type(unit)](unit)
    return out if isinstance(out, list) else [out]


def unit_outputs(unit: ConvertUnit) -> list[tuple[str, int, int]]:
    """(output path, episodes, frames) of each output file of a unit, in the order `convert_unit` returns them."""
    if isinstance(unit, DataSplitGroup):
        return [(u.out_rel, 1, u.frames) for u in unit.units]
    if isinstance(unit, VideoCutUnit):
        return [(unit.out_rel, 1, unit.frames)]
    return [(unit.out_rel, len(unit.inputs), unit.frames)]


def convert_failed(unit: ConvertUnit, exc: BaseException) -> list[ConvertResult]:
    """The results of a unit whose task raised or whose worker died beyond the retries."""
    reason = reason_of(exc)
    return [FileResult(kind=KINDS[type(unit)], out_rel=rel, status=Status.FAILED, reason=reason, episodes=n, frames=f)
            for rel, n, f in unit_outputs(unit)]


def keyframes_failed(unit: KeyframeCheckUnit, exc: BaseException) -> list[StartProblem]:
    reason = reason_of(exc)
    return [StartProblem(ep, unit.camera, str(StorePath(unit.src_root, "") / unit.rel), f"not checked: {reason}")
            for ep, _t0, _t1, _n in unit.spans]
