"""The corpus manifest: one row per dataset plus totals (`prep scan --corpus`, and the prepared corpus a corpus
`prep reencode` writes), in JSON (schemas/corpus_manifest.schema.json) and Parquet beside it.

Each row is reduced from the dataset's own manifest (`prep scan`'s, or the one `prep reencode` writes into its
output: `prep/manifest.json`) and its per-episode table, read one dataset at a time and dropped: episodes,
frames, hours, bytes by kind and per camera, fps, codecs, robot and label, tasks, the mixture weight and share,
the camera mapping (which of the model's slots each camera feeds) and the episode-length distribution (quantiles,
and counts in quarter-octave bins: bin k holds lengths in [2^(k/4), 2^((k+1)/4)), so bins add up across datasets).
A dataset that failed is a row with its status and reason and no figures; the totals are over the datasets that
completed. Paths in the manifest (each dataset's manifest) are relative to the corpus manifest's folder.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import __version__, atomic
from pipeline.clock import utc_now
from pipeline.corpus.spec import SLOTS
from pipeline.errors import PrepError
from pipeline.jobs.manifest import load_manifest, read_json_at
from pipeline.schemas import validate
from pipeline.storage import HEADER_BLOCK, LOCAL, URL_RE, MissingFile, StorePath, output_file
from pipeline.text import printable

# A `pipeline.jobs.corpus.CorpusRun` / `DatasetRun` (not imported: the corpus job imports this module)
CorpusRun = Any
DatasetRun = Any

CORPUS_MANIFEST_SCHEMA = "corpus_manifest"
SCHEMA_ID = "prep.corpus_manifest/1"
BINS_PER_OCTAVE = 4
KINDS = ("total", "video", "data", "meta", "other")
UNMAPPED = "unmapped"
QUANTILES = (("p05", 5), ("p25", 25), ("median", 50), ("p75", 75), ("p95", 95))


def natural_share(row: dict[str, Any], total_frames: int) -> float:
    """A dataset's share of the corpus's timesteps (what plain concatenation would sample)."""
    return row["frames"] / total_frames if total_frames else 0.0


def parquet_path_for(out: Path) -> Path:
    """The corpus manifest's Parquet table: corpus.json -> corpus.parquet."""
    return out.with_suffix(".parquet")


def dataset_manifest(run: DatasetRun, role: str) -> Path | StorePath:
    """The dataset's own manifest: scan's `<name>.manifest.json`, or a reencode output's `prep/manifest.json` (an
    output in an object store: that object, read through its store)."""
    assert run.output is not None
    if role != "native":
        return output_file(run.output, "prep/manifest.json")
    m = URL_RE.match(run.output)
    if m is not None and m.group("scheme") != LOCAL:  # scan's manifest put in an object store
        folder, _, name = run.output.rpartition("/")
        return output_file(folder, name)
    return Path(run.output)


def _read_lengths(table: Path | StorePath) -> pa.Table:
    if isinstance(table, StorePath):
        with table.media(block_size=HEADER_BLOCK) as fh:
            return pq.read_table(fh, columns=["status", "frames_expected"])
    return pq.read_table(table, columns=["status", "frames_expected"])


def length_stats(table: Path | StorePath) -> dict[str, Any] | None:
    """The distribution of the clean episodes' metadata lengths (frames), from the per-episode table."""
    try:
        t = _read_lengths(table)
    except (OSError, ValueError, pa.ArrowException, PrepError):
        return None
    status = t.column("status").to_numpy(zero_copy_only=False)
    lengths = t.column("frames_expected").to_numpy(zero_copy_only=False)
    ok = lengths[(status == "ok") & ~np.isnan(lengths.astype(float))].astype(np.int64)
    ok = ok[ok > 0]
    if ok.size == 0:
        return None
    q = np.percentile(ok, [p for _, p in QUANTILES])
    bins = np.floor(np.log2(ok) * BINS_PER_OCTAVE).astype(np.int64)
    ks, counts = np.unique(bins, return_counts=True)
    return {"min": int(ok.min()), "max": int(ok.max()), "mean": float(ok.mean()),
            **{name: float(v) for (name, _), v in zip(QUANTILES, q, strict=True)},
            "bins_per_octave": BINS_PER_OCTAVE, "bins": [[int(k), int(c)] for k, c in zip(ks, counts, strict=True)]}


def _slots(cameras: dict[str, str]) -> dict[str, str]:
    """camera key -> the model's slot it feeds (a mapping is slot -> camera)."""
    return {cam: slot for slot, cam in cameras.items()}


def relative(path: Path | StorePath, folder: Path | str) -> str:
    """A dataset's manifest as the corpus manifest names it: relative to the corpus manifest's folder (a local one,
    or the object prefix the corpus manifest is put in)."""
    if isinstance(path, StorePath):
        return posixpath.relpath(path.url, str(folder))
    return os.path.relpath(path, folder)


def dataset_row(d: DatasetRun, role: str, folder: Path | str, share: float) -> dict[str, Any]:
    """One dataset's row: its figures from its manifest (a failed dataset: status, reason, no figures)."""
    e = d.entry
    row: dict[str, Any] = {"name": e.name, "source": e.source, "status": d.status, "reason": d.reason,
                           "kept": d.kept, "weight": e.weight, "share": share, "label": e.label,
                           "camera_map": e.camera_map()}
    if not d.ok:
        return row
    path = dataset_manifest(d, role)
    try:
        m = load_manifest(path)
    except PrepError as exc:
        return {**row, "status": "failed", "reason": f"its manifest cannot be read: {' '.join(str(exc).split())}"}
    t, ds = m["totals"], m["dataset"]
    slots = _slots(e.camera_map())
    per_camera = {k: int(v) for k, v in t["bytes"]["per_camera"].items()}
    cams = [{"key": c["key"], "slot": slots.get(c["key"]), "stored": c.get("stored", "video"),
             "codec": c.get("codec"), "width": c.get("width"),
             "height": c.get("height"), "pix_fmt": c.get("pix_fmt"), "bytes": per_camera.get(c["key"], 0)}
            for c in ds["cameras"]]
    table = path.parent / m["episodes_table"] if m.get("episodes_table") else None
    robot = ds.get("robot_type")
    row.update({
        "label": e.label or robot or "unlabelled",
        "robot_type": robot,
        "root": ds["root"],
        "manifest": relative(path, folder),
        "codebase_version": ds["codebase_version"],
        "fps": ds["fps"],
        "episodes": t["episodes"],
        "episodes_failed": t["episodes_failed"],
        "frames": t["frames"],
        "frames_per_episode": t["frames_per_episode"],
        "episode_length": length_stats(table) if table is not None else None,
        "seconds": t["seconds"],
        "hours": t["hours"],
        "bytes": {k: int(t["bytes"][k]) for k in KINDS},
        "bytes_per_camera": per_camera,
        "cameras": cams,
        "codecs": sorted({c["codec"] for c in cams if c["codec"]}),
        "gb_per_hour": t["gb_per_hour"],
        "tasks": d.summary.get("tasks"),
        "warnings_total": int(m.get("warnings_total", 0)),
    })
    return row


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The corpus's totals over the datasets that completed; by label, by camera slot, by codec."""
    ok = [r for r in rows if r["status"] == "ok"]
    frames = sum(r["frames"] for r in ok)
    hours = math.fsum(r["hours"] for r in ok)
    b = {k: sum(r["bytes"][k] for r in ok) for k in KINDS}
    per_slot = {s: 0 for s in (*SLOTS, UNMAPPED)}
    codecs: dict[str, int] = {}
    for r in ok:
        for c in r["cameras"]:
            per_slot[c["slot"] or UNMAPPED] += c["bytes"]
            if c["codec"]:
                codecs[c["codec"]] = codecs.get(c["codec"], 0) + 1
    labels: dict[str, dict[str, Any]] = {}
    for r in ok:
        lab = labels.setdefault(r["label"], {"datasets": 0, "episodes": 0, "frames": 0, "hours": 0.0,
                                             "bytes": 0, "share": 0.0})
        lab["datasets"] += 1
        lab["episodes"] += r["episodes"]
        lab["frames"] += r["frames"]
        lab["hours"] += r["hours"]
        lab["bytes"] += r["bytes"]["total"]
        lab["share"] += r["share"]
    bins: dict[int, int] = {}
    for r in ok:
        for k, c in (r.get("episode_length") or {}).get("bins", []):
            bins[k] = bins.get(k, 0) + c
    tasks = [r["tasks"] for r in ok]
    return {
        "datasets": len(rows), "datasets_ok": len(ok), "datasets_failed": len(rows) - len(ok),
        "episodes": sum(r["episodes"] for r in ok), "episodes_failed": sum(r["episodes_failed"] for r in ok),
        "frames": frames, "hours": hours, "bytes": b,
        "gb_per_hour": b["total"] / 1e9 / hours if hours else 0.0,
        "bytes_per_slot": per_slot, "codecs": dict(sorted(codecs.items())),
        "fps": sorted({r["fps"] for r in ok}),
        "tasks": sum(tasks) if tasks and all(t is not None for t in tasks) else None,
        "share_ok": math.fsum(r["share"] for r in ok),
        "by_label": dict(sorted(labels.items())),
        "episode_length_bins": {"bins_per_octave": BINS_PER_OCTAVE, "bins": sorted([k, c] for k, c in bins.items())},
    }


def corpus_manifest(run: CorpusRun, role: str, folder: Path | str) -> dict[str, Any]:
    corpus = run.corpus
    rows = [dataset_row(d, role, folder, corpus.share(d.entry)) for d in run.datasets]
    return {"schema": SCHEMA_ID, "prep_version": __version__, "created_utc": utc_now(), "role": role,
            "corpus": {"name": corpus.name, "file": str(corpus.path) if corpus.path is not None else None,
                       "weights": "given" if corpus.weights_given else "equal"},
            "slots": list(SLOTS), "datasets": rows, "totals": totals(rows)}


# ---- Parquet -------------------------------------------------------------------------------------------

PARQUET_SCHEMA = pa.schema([
    ("name", pa.string()), ("is_total", pa.bool_()), ("status", pa.string()), ("reason", pa.string()),
    ("label", pa.string()), ("robot_type", pa.string()), ("weight", pa.float64()), ("share", pa.float64()),
    ("codebase_version", pa.string()), ("fps", pa.float64()), ("episodes", pa.int64()),
    ("episodes_failed", pa.int64()), ("frames", pa.int64()), ("hours", pa.float64()),
    ("bytes_total", pa.int64()), ("bytes_video", pa.int64()), ("bytes_data", pa.int64()), ("bytes_meta", pa.int64()),
    ("bytes_other", pa.int64()), ("gb_per_hour", pa.float64()),
    ("bytes_per_camera", pa.map_(pa.string(), pa.int64())), ("bytes_per_slot", pa.map_(pa.string(), pa.int64())),
    ("codecs", pa.list_(pa.string())), ("tasks", pa.int64()),
    ("length_min", pa.int64()), ("length_median", pa.float64()), ("length_mean", pa.float64()),
    ("length_max", pa.int64()), ("manifest", pa.string()), ("source", pa.string()),
])


def _parquet_rows(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for r in doc["datasets"]:
        ok = r["status"] == "ok"
        b = r.get("bytes") or {}
        lengths = r.get("episode_length") or {}
        per_slot: dict[str, int] = {}
        for c in r.get("cameras") or []:
            per_slot[c["slot"] or UNMAPPED] = per_slot.get(c["slot"] or UNMAPPED, 0) + c["bytes"]
        yield {"name": r["name"], "is_total": False, "status": r["status"], "reason": r["reason"],
               "label": r["label"], "robot_type": r.get("robot_type"), "weight": r["weight"], "share": r["share"],
               "codebase_version": r.get("codebase_version"), "fps": r.get("fps"), "episodes": r.get("episodes"),
               "episodes_failed": r.get("episodes_failed"), "frames": r.get("frames"), "hours": r.get("hours"),
               **{f"bytes_{k}": b.get(k) for k in KINDS}, "gb_per_hour": r.get("gb_per_hour"),
               "bytes_per_camera": list((r.get("bytes_per_camera") or {}).items()) if ok else None,
               "bytes_per_slot": list(per_slot.items()) if ok else None, "codecs": r.get("codecs"),
               "tasks": r.get("tasks"), "length_min": lengths.get("min"), "length_median": lengths.get("median"),
               "length_mean": lengths.get("mean"), "length_max": lengths.get("max"), "manifest": r.get("manifest"),
               "source": r["source"]}
    t = doc["totals"]
    cams: dict[str, int] = {}
    for r in doc["datasets"]:
        for k, v in (r.get("bytes_per_camera") or {}).items():
            cams[k] = cams.get(k, 0) + v
    yield {"name": "(total)", "is_total": True, "status": "ok" if not t["datasets_failed"] else "failed",
           "reason": f"{t['datasets_failed']} of {t['datasets']} datasets failed" if t["datasets_failed"] else None,
           "label": None, "robot_type": None, "weight": None, "share": t["share_ok"], "codebase_version": None,
           "fps": None, "episodes": t["episodes"], "episodes_failed": t["episodes_failed"], "frames": t["frames"],
           "hours": t["hours"], **{f"bytes_{k}": t["bytes"][k] for k in KINDS}, "gb_per_hour": t["gb_per_hour"],
           "bytes_per_camera": list(cams.items()), "bytes_per_slot": list(t["bytes_per_slot"].items()),
           "codecs": list(t["codecs"]), "tasks": t["tasks"], "length_min": None, "length_median": None,
           "length_mean": None, "length_max": None, "manifest": None, "source": None}


def write_parquet(doc: dict[str, Any], path: Path, root: Path | None = None) -> None:
    table = pa.Table.from_pylist(list(_parquet_rows(doc)), schema=PARQUET_SCHEMA)
    with atomic.atomic_path(path, root) as tmp:
        pq.write_table(table, tmp)


def publish_corpus_manifest(run: CorpusRun, out: Path, *, role: str, root: Path | None = None,
                            folder: str | None = None) -> Path:
    """Write the corpus manifest `out` (JSON, checked against its schema) with its Parquet table beside it; the
    JSON last. Returns `out`. `folder`: where the manifest will be read from when that is not `out`'s folder (the
    object prefix a corpus written in a local temp folder is put in): its datasets' manifests are named from there."""
    out = Path(out).absolute()
    doc = corpus_manifest(run, role, folder if folder is not None else out.parent)
    doc["table"] = parquet_path_for(out).name
    validate(doc, CORPUS_MANIFEST_SCHEMA, source=str(out))
    write_parquet(doc, parquet_path_for(out), root)
    atomic.write_json(out, doc, indent=2, root=root)
    return out


def load_corpus_manifest(path: Path | StorePath) -> dict[str, Any]:
    """A corpus manifest, schema-checked (one line naming the field at fault): a local path, or an object
    (`pipeline.storage.parse_file`), read bounded as a local one is."""
    try:
        doc = read_json_at(path if isinstance(path, StorePath) else Path(path), what="corpus manifest")
    except (FileNotFoundError, MissingFile):
        raise PrepError(f"{printable(str(path))}: corpus manifest not found") from None
    except (OSError, ValueError) as exc:
        raise PrepError(f"{printable(str(path))}: cannot read the corpus manifest: {printable(str(exc))}") from None
    if isinstance(doc, dict) and doc.get("schema") != SCHEMA_ID:
        what = doc.get("schema") if isinstance(doc.get("schema"), str) else "no schema"
        raise PrepError(f"{printable(str(path))}: not a corpus manifest ({printable(what)}; expected {SCHEMA_ID}, "
                        "as `prep scan --corpus` writes)")
    validate(doc, CORPUS_MANIFEST_SCHEMA, source=str(path))
    result: dict[str, Any] = doc
    return result


# ---- the prepared corpus's description -------------------------------------------------------------------


def _toml_string(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def write_corpus_toml(run: CorpusRun, path: Path, root: Path | None = None) -> None:
    """The corpus of a corpus reencode's outputs, as a corpus file (same names, weights, labels and camera
    mapping; the sources are the output folders, relative to it): `prep verify --corpus OUT/corpus.toml`. Not
    written when no dataset was."""
    if not any(d.ok for d in run.datasets):
        return
    lines = [f"# The prepared corpus written by prep reencode ({utc_now()}): each dataset's re-encoded output.",
             f"name = {_toml_string(run.corpus.name)}", ""]
    for d in run.datasets:
        if not d.ok or d.output is None:
            lines.append(f"# {d.entry.name}: not written ({d.reason})".replace("\n", " "))
            lines.append("")
            continue
        e = d.entry
        # a local output relative to this file; an object-store output as its URL (the file may be read anywhere)
        source = d.output if URL_RE.match(d.output) else os.path.relpath(d.output, path.parent)
        lines += ["[[datasets]]", f"source = {_toml_string(source)}",
                  f"name = {_toml_string(e.name)}", f"weight = {e.weight!r}"]
        if e.label:
            lines.append(f"label = {_toml_string(e.label)}")
        if e.cameras:
            lines.append("[datasets.cameras]")
            lines += [f"{slot} = {_toml_string(cam)}" for slot, cam in e.cameras]
        lines.append("")
    atomic.write_text(path, "\n".join(lines), root)
