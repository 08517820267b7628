"""`prep scan DATASET [--out PATH]`: the storage/hours manifest of a dataset (the job: pipeline.jobs.scan).
DATASET is a folder, a hub-cache snapshot, a hub repo id or an s3:// URL (`pipeline.commands.where`); the
manifest is a local path (default: manifests/<name>.manifest.json) or an object, --out s3://BUCKET/KEY.json."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.commands import help_of
from pipeline.commands.common import (
    SmallInput,
    add_run_options,
    default_in_cwd,
    plural,
    report_records,
    run_config,
)
from pipeline.commands.corpus import OUT_RECORDS, add_corpus_option, corpus_of, object_report, report_path
from pipeline.commands.corpus import resume_note as corpus_resume_note
from pipeline.commands.corpus import run_scan as run_corpus_scan
from pipeline.commands.where import add_location_options, dataset_location, default_name, shared_paths
from pipeline.storage import Location, StorePath
from pipeline.text import printable_lines

DEFAULT_DIR = Path("manifests")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scan", help=help_of("scan"),
                       description="Scan a LeRobot dataset (v2.1 or v3.0) without decoding pixels and write "
                       "a JSON manifest plus a per-episode Parquet table. A killed scan rerun with the same "
                       "arguments resumes from its finished batches (<manifest>.parts/).")
    add_location_options(p, several=True)
    add_corpus_option(p)
    p.add_argument("--out", type=report_path, metavar="PATH",
                   help="manifest file: a local path or an object, s3://BUCKET/KEY.json (put last, after its "
                   "table; configured by the environment, docs/storage.md). Default: "
                   f"{DEFAULT_DIR}/<DATASET name>.manifest.json in the current folder; the per-episode table goes "
                   f"beside it. A corpus: the corpus manifest (default: {DEFAULT_DIR}/<corpus name>.json), each "
                   "dataset's manifest beside it")
    p.add_argument("--fresh", action="store_true", help="ignore the finished batches of an interrupted run")
    add_run_options(p, SmallInput(256, "file sets (a v2.1 episode; in v3.0, the episodes that share their files)"))
    p.set_defaults(func=run)


def default_out(src: Path | Location) -> Path:
    name = default_name(src) if isinstance(src, Location) else src.resolve().name
    return default_in_cwd(DEFAULT_DIR / f"{name}.manifest.json")


def output_of(args: argparse.Namespace) -> Path | StorePath:
    if args.out is not None:
        return object_report(args) or Path(args.out).absolute()
    return default_out(dataset_location(args, reachable=False)).absolute()


def check_default_manifest(out: Path) -> None:
    """The default manifest and its per-episode table replace only prep's own, untracked files (commands/defaults)."""
    from pipeline.commands.defaults import check_default_output, prep_json
    from pipeline.jobs.manifest import table_path_for

    table = table_path_for(out)
    if out.exists():
        table_mine = prep_json(out, "manifest")
    else:  # a table left without its manifest (an interrupted publish): prep's when it has the manifest's columns
        import pyarrow.parquet as pq

        try:
            table_mine = pq.read_schema(table).names[:3] == ["episode_index", "status", "reason"]
        except (OSError, ValueError, Exception):  # pyarrow raises its own ArrowInvalid for a non-parquet file
            table_mine = False
    check_default_output([(out, prep_json(out, "manifest")), (table, table_mine)])


def resume_note(args: argparse.Namespace) -> str | None:
    if getattr(args, "_corpus", None) is not None:
        return corpus_resume_note(args, "scan")
    return f"finished batches are kept in {output_of(args)}.parts/"


def _declared(camera: dict[str, Any]) -> str:
    """What info.json says where the files say otherwise (LeRobot decodes what the files are)."""
    declared = camera.get("declared", {})
    diff = [f"{k} {declared[k]}" for k in ("codec", "pix_fmt")
            if declared.get(k) and camera.get(k) and declared[k] != camera[k]]
    if declared.get("width") and declared.get("height") and \
            (declared["width"], declared["height"]) != (camera["width"], camera["height"]):
        diff.append(f"size {declared['width']}x{declared['height']}")
    return f" (info.json declares {', '.join(diff)})" if diff else ""


def summary(m: dict[str, Any], out: Path | StorePath) -> str:
    t, d, b = m["totals"], m["dataset"], m["totals"]["bytes"]
    cams = d["cameras"]
    n_images = sum(1 for c in cams if c.get("stored") == "image")
    stored = f", {n_images} stored as images" if n_images else ""
    lines = [
        f"dataset   {d['root']}  (LeRobot {d['codebase_version']}, {d['fps']:g} fps, {plural(len(cams), 'camera')}"
        f"{stored})",
        *(f"camera    {c['key']}: {c['codec']} {c['width']}x{c['height']} {c['pix_fmt']}{_declared(c)}"
          + (f", images in the data parquet ({c.get('pictures', 0):,} pictures)" if c.get("stored") == "image" else "")
          for c in cams),
        f"episodes  {t['episodes']:,} ok, {t['episodes_failed']:,} failed",
        f"timesteps {t['frames']:,} ({t['frames_per_episode']['mean']:.1f} per episode; "
        f"{plural(t['frames'] * len(cams), 'camera frame')})",
        f"duration  {t['seconds']:,.1f} s = {t['hours']:.4f} h",
        f"bytes     {b['total']:,} total: video {b['video']:,} ({t['video_share']:.1%}), "
        f"data {b['data']:,}" + (f" (images {b['images']:,})" if b.get("images") else "")
        + f", meta {b['meta']:,}, other {b['other']:,}",
        *(f"          {cam}: {n:,}" for cam, n in b["per_camera"].items()),
        f"rate      {t['gb_per_hour']:.3f} GB/hr, {t['kb_per_frame']:.2f} kB per timestep (all cameras)",
    ]
    warnings = m.get("warnings") or []
    for w in warnings[:10]:
        lines.append(f"warning   {w}")
    if m.get("warnings_total", 0) > min(10, len(warnings)):
        lines.append(f"warning   ... and {m['warnings_total'] - min(10, len(warnings)):,} more (see the manifest)")
    for f in m["failures"][:10]:
        lines.append(f"FAILED    episode {f['episode']}: {f.get('path') or ''}: {f['reason']}")
    if t["episodes_failed"] > 10:
        lines.append(f"FAILED    ... and {t['episodes_failed'] - 10:,} more (see the manifest)")
    lines.append(f"manifest  {out}")
    return printable_lines(lines)


def run(args: argparse.Namespace) -> int:
    from pipeline.jobs.scan import scan_dataset
    from pipeline.runner import open_engine

    corpus = corpus_of(args, "scan")
    if corpus is not None:
        return run_corpus_scan(args, corpus)
    src = dataset_location(args)  # an object store: reachable with these credentials, or one line now
    out = output_of(args)
    if isinstance(out, StorePath):
        config = run_config(args, shared=shared_paths(src), records_flag=OUT_RECORDS)
    else:
        if args.out is None:
            check_default_manifest(out)
        config = run_config(args, records=report_records(out), shared=shared_paths(src))
    with open_engine(config) as engine:  # `cd DATASET && prep scan .`: the default is refused, said so
        manifest, _ = scan_dataset(src, out, engine, resume=not args.fresh, out_is_default=args.out is None)
    print(summary(manifest, out))
    return 1 if manifest["failures"] else 0
