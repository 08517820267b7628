"""The scan job: a dataset's storage/hours manifest (`prep scan`).

plan     dataset -> one `ScanUnit` per set of files (v2.1: per episode), lazily, in episode order
stage    `pipeline.stages.scan.scan_unit` (probe headers and packets, count parquet rows; no pixels)
reduce   `ScanTotals` per episode result; per-episode rows streamed to Parquet row groups
publish  the per-episode table, then the manifest JSON (the file that says complete) last

Resumable: finished batches are recorded in the work folder `<manifest>.parts/` (see
`pipeline.jobs.parts`); a rerun with the same dataset and output redoes only the rest, and the folder
is removed once the manifest is written.

The manifest may be an object (`s3://BUCKET/KEY.json`, a `StorePath`): its records are objects below
`<manifest>.parts/` under the store's lock, the table and the manifest are made in a local temp folder and put
beside it, the manifest last.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.checks import Status
from pipeline.dataset import Dataset
from pipeline.formats.validate import open_validated
from pipeline.jobs import parts
from pipeline.jobs.manifest import (
    ScanTotals,
    build_manifest,
    bytes_on_disk,
    episode_row,
    episodes_schema,
    publish_manifest,
    table_path_for,
)
from pipeline.runner import Engine
from pipeline.stages.scan import (
    CameraScan,
    EpisodeScan,
    ImageScan,
    ScanUnit,
    scan_unit,
    scan_unit_failed,
    scan_units,
    units_in_flight,
)
from pipeline.storage import Location, StorePath, local_root
from pipeline.tables import RowGroupWriter

COST_S = 0.004  # stage seconds per v2.1 episode (3 cameras), before any is measured
RECORD_VERSION = 3  # 2: frames_from_index (the container index) beside frames_from_packets; 3: image cameras


def plan(ds: Dataset) -> Iterator[ScanUnit]:
    return scan_units(ds)


def encode(results: list[EpisodeScan]) -> list[dict[str, Any]]:
    """A unit's results as JSON (completion records)."""
    return [{"episode": s.episode, "frames_expected": s.frames_expected, "status": s.status, "reason": s.reason,
             "path": s.path, "frames_in_parquet": s.frames_in_parquet, "parquet_bytes": s.parquet_bytes,
             "cameras": {k: [c.frames_from_header, c.frames_from_index, c.frames_from_packets, c.keyframes, c.bytes,
                             c.codec, c.width, c.height, c.pix_fmt, c.fps] for k, c in s.cameras.items()},
             "images": {k: [i.frames_from_footer, i.bytes, i.format, i.width, i.height, i.pix_fmt]
                        for k, i in s.images.items()}}
            for s in results]


def decode(obj: list[dict[str, Any]]) -> list[EpisodeScan]:
    return [EpisodeScan(episode=d["episode"], frames_expected=d["frames_expected"], status=Status(d["status"]),
                        reason=d["reason"], path=d["path"], frames_in_parquet=d["frames_in_parquet"],
                        parquet_bytes=d["parquet_bytes"],
                        cameras={k: CameraScan(*v) for k, v in d["cameras"].items()},
                        images={k: ImageScan(*v) for k, v in d.get("images", {}).items()}) for d in obj]


def scan_dataset(src: Path | Location, out: Path | StorePath, engine: Engine, *, resume: bool = True,
                 out_is_default: bool = False) -> tuple[dict[str, Any], Path | StorePath]:
    """Scan `src` through `engine` and write its manifest to `out` (a local path, or an object: its table put
    beside it first); returns (manifest, per-episode table). The manifest may not be written inside `src` (the
    source is read-only; `out_is_default`: the refusal says that `out` is the command's default)."""
    ds, rejected = open_validated(src, "scan")  # metadata checked before any unit (scan refuses fewer rules)
    if isinstance(out, StorePath):
        parts.check_object_report([ds.location], out)  # in the source, or a bucket out of reach: refused now
    else:
        out = Path(out).absolute()
        parts.check_report_place([local_root(ds)], out, table_path_for(out), default=out_is_default)  # in the source
    engine.prepare()  # a scheduler that cannot be reached: refused before anything is written
    if isinstance(out, Path):
        atomic.check_target(out)  # a read-only, full or blocked output: refused before any work
    fp = parts.fingerprint("scan", RECORD_VERSION, ds, out=str(out))
    with parts.work_folder(out, fingerprint=fp, resume=resume) as work:
        cameras = ds.camera_keys
        totals = ScanTotals(cameras)
        table = RowGroupWriter(work.path / "episodes.parquet", episodes_schema(cameras, ds.image_camera_keys))
        try:
            stream = parts.run(engine, work, plan(ds), scan_unit, on_error=scan_unit_failed, desc="scan",
                               unit_name="file-set", total=len(ds.file_groups("set")),
                               cost_s=COST_S * max(1, len(cameras)) / 3, encode=encode, decode=decode,
                               threads=units_in_flight(ds.location))
            for scans in stream:
                for s in scans:
                    totals.add(s)
                    table.add(episode_row(s, cameras, ds.image_camera_keys))
            table.close()
        except BaseException:
            table.abort()
            raise
        skip: list[Path] = []  # a manifest written inside the dataset is not the dataset's (an object's never is)
        if isinstance(work, parts.WorkFolder) and isinstance(out, Path):
            skip = [work.path, work.lock_path, out, table_path_for(out)]
        disk = bytes_on_disk(ds, skip=skip)
        manifest = build_manifest(ds, totals, rejected, disk, rejected_count=ds.rejected_count)
        if isinstance(out, StorePath):
            table_path: Path | StorePath = publish_in_store(manifest, table.path, out, work.path)
        else:
            table_path = publish_manifest(manifest, table.path, out)
        work.remove()
    return manifest, table_path


def publish_in_store(manifest: dict[str, Any], table: Path, out: StorePath, spool: Path) -> StorePath:
    """The manifest and its table made in the local folder `spool`, then put beside `out`, the manifest last."""
    folder = spool / "publish"
    atomic.make_dirs(folder)
    local = publish_manifest(manifest, table, folder / out.name, root=folder)
    parts.put_report(folder, out)
    return out.parent / local.name
