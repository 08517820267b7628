"""`prep reencode --src SRC --dst DST`: a LeRobot dataset re-encoded to DST all-intra, as a new dataset.

SRC is a dataset path, or a name under `--root` (default: the current folder). DST is `224`
(224x224) or `WxH`. The output goes to `--out`, by default the sibling folder `<SRC>_<DST>`
(`merged` + `224` -> `merged_224`, `merged` + `320x240` -> `merged_320x240`). prep's own files go
to `<out>/prep/` (LeRobot ignores the folder): `options.json`, `reencode.lock` while running,
`reencode_report.json`, `manifest.json` (+ `.episodes.parquet`) and `comparison.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline import __version__, atomic
from pipeline.commands.common import add_run_options, run_config
from pipeline.commands.scan import scan_dataset
from pipeline.dataset import open_dataset
from pipeline.dataset.model import Dataset, resolve_inside
from pipeline.dataset.write import PREP_DIR, EpisodeVideo, VideoFeatureUpdate, copy_unchanged, write_output_metadata
from pipeline.errors import EpisodeError, PrepError
from pipeline.lock import exclusive_lock
from pipeline.manifest import bytes_on_disk
from pipeline.runner import RunConfig, open_engine
from pipeline.schemas import validate
from pipeline.stages.reencode import ReencodeOptions, ReencodeResult, reencode_failed, reencode_unit, reencode_units
from pipeline.video.encode import DEFAULT_ENGINE, DEFAULT_PROFILE, ENGINES, PROFILES
from pipeline.video.resize import DEFAULT_RESIZE, RESIZE_MODES

OPTIONS_REL = f"{PREP_DIR}/options.json"
LOCK_REL = f"{PREP_DIR}/reencode.lock"
REPORT_REL = f"{PREP_DIR}/reencode_report.json"
MANIFEST_REL = f"{PREP_DIR}/manifest.json"
COMPARISON_REL = f"{PREP_DIR}/comparison.json"


@dataclass(slots=True)
class ReencodeReport:
    src: str
    out: str
    options: dict[str, Any]
    engine: str
    files: int = 0
    encoded: int = 0
    kept: int = 0
    failed: int = 0
    frames: int = 0
    frames_encoded: int = 0
    seconds: float = 0.0
    complete: bool = False
    failures: list[dict[str, Any]] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    manifest: str | None = None

    @property
    def ok(self) -> bool:
        return self.complete and not self.failures


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reencode", help="re-encode a dataset's videos to e.g. 224x224 all-intra, as a new dataset",
        description="Re-encode every video of a LeRobot dataset (v2.1 or v3.0) to a target size, every frame "
        "a keyframe, into a new dataset of the same version (parquet copied byte for byte, metadata updated). "
        "Resumable: a rerun keeps outputs that are complete and correct.")
    p.add_argument("--src", required=True, help="source dataset: a path, or a name under --root")
    p.add_argument("--dst", required=True, help="target size: 224 (224x224) or WxH, e.g. 320x240")
    p.add_argument("--root", type=Path, help="folder holding SRC when SRC is a name (default: current folder)")
    p.add_argument("--out", type=Path, help="output dataset folder (default: <SRC>_<DST> beside SRC)")
    p.add_argument("--resize", choices=sorted(RESIZE_MODES), default=DEFAULT_RESIZE,
                   help="pad = openpi resize_with_pad (keep aspect, black bars); stretch; crop "
                   f"(default: {DEFAULT_RESIZE})")
    p.add_argument("--profile", choices=list(PROFILES), default=DEFAULT_PROFILE,
                   help=f"encoder profile (default: {DEFAULT_PROFILE})")
    p.add_argument("--crf", type=int, help="quality: x264 CRF for h264 profiles (default "
                   f"{PROFILES['h264-intra'].default_crf}), JPEG q for mjpeg (default {PROFILES['mjpeg'].default_crf})")
    p.add_argument("--engine", choices=list(ENGINES), default=DEFAULT_ENGINE,
                   help=f"pyav = in-process; ffmpeg = one ffmpeg process per file (default: {DEFAULT_ENGINE})")
    add_run_options(p)
    p.set_defaults(func=run)


def parse_size(text: str) -> tuple[int, int]:
    """`224` -> (224, 224); `320x240` -> (320, 240) as (width, height)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", text)
    if not m:
        raise PrepError(f"--dst {text!r}: expected a size like 224 or 320x240")
    w = int(m.group(1))
    h = int(m.group(2)) if m.group(2) else w
    if not (2 <= w <= 8192 and 2 <= h <= 8192):
        raise PrepError(f"--dst {text!r}: width and height must be between 2 and 8192")
    return w, h


def size_label(size: tuple[int, int]) -> str:
    return str(size[0]) if size[0] == size[1] else f"{size[0]}x{size[1]}"


def default_out(src: Path, size: tuple[int, int]) -> Path:
    """The sibling folder `<src>_<size>`: merged -> merged_224."""
    src = src.absolute()
    return src.parent / f"{src.name}_{size_label(size)}"


def resolve_src(src: str, root: Path | None) -> Path:
    return ((root or Path.cwd()) / src).absolute()


def check_paths(src: Path, out: Path) -> None:
    s, o = src.resolve(), out.resolve()
    if o == s or s in o.parents:
        raise PrepError(f"output {out} is the source or inside it ({src}); the source is never written: "
                        "choose an --out outside it")
    if o in s.parents:
        raise PrepError(f"output {out} contains the source {src}; choose an --out beside it")


def check_options(options: ReencodeOptions) -> None:
    if options.resize not in RESIZE_MODES:
        raise PrepError(f"unknown resize mode {options.resize!r} (choose from {', '.join(RESIZE_MODES)})")
    if options.profile not in PROFILES:
        raise PrepError(f"unknown profile {options.profile!r} (choose from {', '.join(PROFILES)})")
    if options.engine not in ENGINES:
        raise PrepError(f"unknown engine {options.engine!r} (choose from {', '.join(ENGINES)})")
    prof = PROFILES[options.profile]
    lo, hi = prof.crf_range
    if not lo <= options.quality <= hi:
        raise PrepError(f"--crf {options.quality} is outside {lo}..{hi} for profile {prof.name}")
    w, h = options.size
    if prof.pix_fmt.endswith("420p") and (w % 2 or h % 2):
        raise PrepError(f"--dst {w}x{h}: {prof.pix_fmt} needs an even width and height")
    if options.engine == "ffmpeg" and shutil.which("ffmpeg") is None:
        raise PrepError("--engine ffmpeg needs the `ffmpeg` program on PATH (e.g. apt install ffmpeg)")


def _claim_output(src: Path, out: Path, options: ReencodeOptions) -> None:
    """Refuse an output that holds something else, or a run started with other settings."""
    settings = {"source": str(src.resolve()), **options.output_settings()}
    path = out / OPTIONS_REL
    if path.is_file():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous != settings:
            raise PrepError(f"output {out} was started with other settings ({previous}); now asked for "
                            f"{settings}. Choose another --out, or delete {out} to start over")
        return
    validate(settings, "reencode_options", source=str(path))
    atomic.write_json(path, settings)


def _refuse_foreign(out: Path) -> None:
    """Refuse a non-empty output folder that prep did not start (checked before anything is written)."""
    if not out.exists() or (out / OPTIONS_REL).is_file():
        return
    if not out.is_dir():
        raise PrepError(f"output {out} exists and is not a folder")
    others = sorted(p.name for p in out.iterdir() if p.name != PREP_DIR)
    if others:
        raise PrepError(f"output {out} exists and is not a prep reencode output (holds {', '.join(others[:3])}); "
                        "choose another --out")


def _updates(results: list[ReencodeResult], options: ReencodeOptions) -> dict[str, VideoFeatureUpdate]:
    prof = PROFILES[options.profile]
    encoder: dict[str, Any] = {"video.crf": options.quality}
    if prof.encoder == "libx264":
        encoder.update({"video.g": 1, "video.bf": 0, "video.preset": prof.preset})
    out: dict[str, VideoFeatureUpdate] = {}
    for r in results:
        if r.camera in out or r.status == "failed":
            continue
        prep = {"resize": options.resize, "profile": options.profile, "crf": options.quality,
                "source_width": r.src_width, "source_height": r.src_height, "source_codec": r.src_codec}
        out[r.camera] = VideoFeatureUpdate(options.size[0], options.size[1], prof.codec, prof.pix_fmt, prep, encoder)
    return out


def dataset_bytes(ds: Dataset) -> dict[str, int]:
    """Bytes of a dataset as `prep scan` counts them, less prep's own folder."""
    disk = bytes_on_disk(ds)
    prep = 0
    for dirpath, _dirs, names in os.walk(ds.root / PREP_DIR):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                prep += p.lstat().st_size
    return {"total": disk["total"] - prep, "video": disk["video"], "data": disk["data"], "meta": disk["meta"],
            "prep_folder": prep}


def comparison(native: Dataset, prepared: Dataset) -> dict[str, Any]:
    frames = native.total_frames_expected
    hours = frames / native.fps / 3600

    def side(ds: Dataset) -> dict[str, Any]:
        b = dataset_bytes(ds)
        return {"root": str(ds.root), "bytes": b["total"], "video_bytes": b["video"],
                "gb_per_hour": b["total"] / 1e9 / hours if hours else 0.0,
                "video_gb_per_hour": b["video"] / 1e9 / hours if hours else 0.0,
                "kb_per_frame": b["total"] / 1e3 / frames if frames else 0.0,
                "cameras": [f"{c.key}: {c.codec} {c.width}x{c.height}" for c in ds.cameras],
                "excluded_prep_folder_bytes": b["prep_folder"]}

    a, b = side(native), side(prepared)
    return {"schema": "prep.comparison/1", "prep_version": __version__, "frames": frames, "hours": hours,
            "native": a, "prepared": b,
            "ratio": a["bytes"] / b["bytes"] if b["bytes"] else None,
            "video_ratio": a["video_bytes"] / b["video_bytes"] if b["video_bytes"] else None,
            "note": "GB = 1e9 bytes; bytes of every file under each root except prep's own prep/ folder; "
                    "hours = frames in the metadata / fps"}


def reencode_dataset(src: Path, out: Path, options: ReencodeOptions, config: RunConfig) -> ReencodeReport:
    """Re-encode `src` into the dataset `out`; resumable; never writes under `src`."""
    src, out = src.absolute(), out.absolute()
    check_options(options)
    check_paths(src, out)
    ds, rejected = open_dataset(src)
    _refuse_foreign(out)
    out.mkdir(parents=True, exist_ok=True)
    report = ReencodeReport(str(src), str(out), options.output_settings(), options.engine)
    with exclusive_lock(out / LOCK_REL, f"output {out}"):
        _claim_output(src, out, options)
        atomic.remove_stale_temps(out)
        units = list(reencode_units(ds, out, options))
        t0 = time.perf_counter()
        with open_engine(config) as engine:
            results = list(engine.results(reencode_unit, units, on_error=reencode_failed, desc="reencode",
                                          measure=lambda r: {"frames": float(r.frames)}, unit_name="file",
                                          total=len(units), cost_s=0.3))
        report.seconds = time.perf_counter() - t0
        atomic.remove_stale_temps(out)  # temp files of workers killed mid-task (their task was retried)
        try:
            copy_unchanged(ds, out)
        except OSError as exc:
            raise PrepError(_write_error(out, "copying parquet and metadata", exc)) from None
        report.files = len(results)
        report.encoded = sum(r.status == "encoded" for r in results)
        report.kept = sum(r.status == "kept" for r in results)
        report.failed = sum(r.status == "failed" for r in results)
        report.frames = sum(r.frames for r in results)
        report.frames_encoded = sum(r.frames for r in results if r.status == "encoded")
        report.failures = [
            {"path": r.rel, "camera": r.camera, "reason": r.reason,
             "episodes": sorted(s.episode for s in u.spans if s.episode is not None)}
            for u, r in zip(units, results, strict=True) if r.status == "failed"
        ]
        report.failures += [{"path": e.path, "episode": e.episode, "reason": e.message} for e in rejected]
        report.failures += missing_data_files(ds)
        try:
            if not report.failures:
                files: list[tuple[str, list[EpisodeVideo]]] = [(r.camera, r.episodes) for r in results]
                write_output_metadata(ds, out, files, _updates(results, options))
                report.complete = True
                scan_dataset(out, out / MANIFEST_REL, config)
                report.manifest = str(out / MANIFEST_REL)
                out_ds, _ = open_dataset(out)
                report.comparison = comparison(ds, out_ds)
                validate(report.comparison, "comparison", source=str(out / COMPARISON_REL))
                atomic.write_json(out / COMPARISON_REL, report.comparison, indent=2)
            doc = {"schema": "prep.reencode_report/1", **asdict(report)}
            validate(doc, "reencode_report", source=str(out / REPORT_REL))
            atomic.write_json(out / REPORT_REL, doc, indent=2)
        except OSError as exc:
            raise PrepError(_write_error(out, "writing metadata and reports", exc)) from None
    return report


def _write_error(out: Path, what: str, exc: OSError) -> str:
    """One line for a failed write (a full disk, a read-only mount): nothing half-written is kept."""
    where = f" ({exc.filename})" if exc.filename else ""
    return (f"{out}: {what} failed: {exc.strerror or exc}{where}; finished video files are kept and "
            "meta/info.json is written only when complete: free space and rerun the same command")


def missing_data_files(ds: Dataset) -> list[dict[str, Any]]:
    """A failure per episode whose parquet file is missing (the output would not load without it)."""
    failures: list[dict[str, Any]] = []
    for rel, episodes in ds.iter_data_files():
        try:
            path = resolve_inside(ds.root, rel, episode=episodes[0].index)
        except EpisodeError as exc:
            failures += [{"path": exc.path, "episode": ep.index, "reason": exc.message} for ep in episodes]
            continue
        if not path.is_file():
            failures += [{"path": str(path), "episode": ep.index, "reason": "missing parquet file"}
                         for ep in episodes]
    return failures


def summary(r: ReencodeReport) -> str:
    fps = r.frames_encoded / r.seconds if r.seconds else 0.0
    o = r.options
    lines = [
        f"source    {r.src}",
        f"output    {r.out}",
        f"settings  {o['size'][0]}x{o['size'][1]} resize={o['resize']} profile={o['profile']} crf={o['crf']} "
        f"engine={r.engine}",
        f"files     {r.files:,}: {r.encoded:,} encoded, {r.kept:,} kept (already complete), {r.failed:,} failed",
        f"frames    {r.frames:,} ({r.frames_encoded:,} encoded in {r.seconds:.1f} s, {fps:,.0f} frames/s)",
    ]
    if r.comparison:
        c = r.comparison
        lines.append(f"size      native {c['native']['gb_per_hour']:.3f} GB/hr -> prepared "
                     f"{c['prepared']['gb_per_hour']:.3f} GB/hr ({c['ratio']:.2f}x smaller; video "
                     f"{c['video_ratio']:.2f}x)")
        lines.append(f"reports   {Path(r.out) / COMPARISON_REL}, {Path(r.out) / MANIFEST_REL}")
    for f in r.failures[:20]:
        eps = f.get("episodes") or ([f["episode"]] if f.get("episode") is not None else [])
        where = f" (episode{'s' if len(eps) > 1 else ''} {', '.join(map(str, eps))})" if eps else ""
        lines.append(f"FAILED    {f['path']}{where}: {f['reason']}")
    if len(r.failures) > 20:
        lines.append(f"FAILED    ... and {len(r.failures) - 20} more (see {Path(r.out) / REPORT_REL})")
    if r.failures:
        lines.append("metadata  not written (meta/info.json): the output is incomplete; fix or remove the failed "
                     "input and rerun the same command to finish (done files are kept)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    size = parse_size(args.dst)
    src = resolve_src(args.src, args.root)
    out = args.out.absolute() if args.out else default_out(src, size)
    options = ReencodeOptions(size=size, resize=args.resize, profile=args.profile, crf=args.crf, engine=args.engine)
    report = reencode_dataset(src, out, options, run_config(args))
    print(summary(report))
    return 0 if report.ok else 1
