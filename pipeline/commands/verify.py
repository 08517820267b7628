"""`prep verify SRC [--expect-frames N] [--size WxH] [--all-intra] [--decode] [--json PATH]`.

Proves a corpus is sound before training: every frame count by origin agrees (metadata, parquet,
container header, packets, and with --decode the decoder), timestamps sit on the 1/fps grid, and
the optional corpus rules hold (episode length, frame size, all-intra). Exit 0 only when all pass.
`verify_dataset` is the entry point for other commands (`prep reencode`, `prep demo`).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import __version__, atomic
from pipeline.clock import utc_now
from pipeline.commands.argtypes import positive_int
from pipeline.commands.common import add_run_options, run_config
from pipeline.dataset import Dataset, open_dataset
from pipeline.errors import EpisodeError
from pipeline.runner import RunConfig, open_engine
from pipeline.schemas import validate
from pipeline.stages.verify import (
    FILE_CHECKS,
    EpisodeVerify,
    VerifyOptions,
    verify_unit,
    verify_unit_failed,
    verify_units,
)
from pipeline.video.checks import CheckFailure

VERIFY_SCHEMA = "verify"
TABLE_ROWS = 40


@dataclass(slots=True)
class VerifyReport:
    """The outcome of `verify_dataset`: per-episode counts, the failures (each listed once), totals."""

    dataset: Dataset
    options: VerifyOptions
    episodes: list[EpisodeVerify]
    failures: list[CheckFailure]
    rejected: list[EpisodeError]
    seconds: float

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def failed_episodes(self) -> list[int]:
        bad = {e.episode for e in self.episodes if not e.passed and e.episode is not None}
        bad |= {r.episode for r in self.rejected if r.episode is not None}
        return sorted(bad)

    def to_json(self) -> dict[str, Any]:
        ds, opts = self.dataset, self.options
        checks: dict[str, int] = {}
        for f in self.failures:
            checks[f.check] = checks.get(f.check, 0) + 1
        n = len(self.episodes)
        return {
            "schema": "prep.verify/1",
            "prep_version": __version__,
            "created_utc": utc_now(),
            "dataset": {
                "root": str(ds.root),
                "codebase_version": ds.codebase_version,
                "fps": ds.fps,
                "cameras": list(ds.camera_keys),
                "declared_total_episodes": _int_or_none(ds.info.get("total_episodes")),
                "declared_total_frames": _int_or_none(ds.info.get("total_frames")),
            },
            "options": {
                "expect_frames": opts.expect_frames,
                "size": f"{opts.size[0]}x{opts.size[1]}" if opts.size else None,
                "all_intra": opts.all_intra,
                "decode": opts.decode,
            },
            "passed": self.passed,
            "totals": {
                "episodes": n + len(self.rejected),
                "episodes_passed": sum(1 for e in self.episodes if e.passed),
                "episodes_failed": len(self.failed_episodes) + sum(1 for r in self.rejected if r.episode is None),
                "episodes_rejected_by_metadata": len(self.rejected),
                "frames_expected": sum(e.frames_expected for e in self.episodes),
                "failures": len(self.failures),
                "failures_by_check": checks,
                "seconds": self.seconds,
                "episodes_per_s": n / self.seconds if self.seconds > 0 else 0.0,
            },
            "failures": [_failure_json(f) for f in self.failures],
            "episodes": [_episode_json(e) for e in self.episodes],
        }


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _failure_json(f: CheckFailure) -> dict[str, Any]:
    return {"episode": f.episode, "camera": f.camera, "check": f.check, "expected": f.expected,
            "found": f.found, "path": f.path}


def _episode_json(e: EpisodeVerify) -> dict[str, Any]:
    return {
        "episode": e.episode,
        "status": "passed" if e.passed else "failed",
        "frames_expected": e.frames_expected,
        "frames_in_parquet": e.frames_in_parquet,
        "cameras": {cam: asdict(c) for cam, c in e.cameras.items()},
        "checks_failed": sorted({f.check for f in e.failures}),
    }


def dataset_failures(ds: Dataset, rejected: list[EpisodeError]) -> list[CheckFailure]:
    """Cheap dataset-level consistency: info.json totals and episode numbering vs what was found
    (array operations over the episode columns)."""
    out: list[CheckFailure] = []
    info_path = str(ds.root / "meta/info.json")
    for r in rejected:
        out.append(CheckFailure("metadata", "a valid episode record", r.message, r.episode, None, r.path))
    n_rejected = max(ds.rejected_count, len(rejected))
    found = len(ds.episodes) + n_rejected
    declared = ds.info.get("total_episodes")
    if declared is not None and declared != found:
        out.append(CheckFailure("total_episodes", f"{declared} (info.json)", f"{found} episode records",
                                None, None, info_path))
    declared_frames = ds.info.get("total_frames")
    if declared_frames is not None and not n_rejected and declared_frames != ds.total_frames_expected:
        out.append(CheckFailure("total_frames", f"{declared_frames} (info.json)",
                                f"{ds.total_frames_expected} (sum of episode lengths)", None, None, info_path))
    indices = ds.episodes.episode_index
    off = np.flatnonzero(indices != np.arange(len(indices)))
    if not n_rejected and len(off):
        gap = int(off[0])
        out.append(CheckFailure("episode_indices", f"0..{len(indices) - 1}", f"episode {int(indices[gap])} at "
                                f"position {gap}", None, None, info_path))
    return out


def _dedupe(failures: list[CheckFailure]) -> list[CheckFailure]:
    """List a whole-file failure once (under the first episode it names), not once per episode."""
    seen: set[tuple[str, str | None, str | None, str, str]] = set()
    out: list[CheckFailure] = []
    for f in sorted(failures, key=lambda f: (f.episode is not None, f.episode or 0, f.camera or "", f.check)):
        if f.check in FILE_CHECKS:
            key = (f.check, f.camera, f.path, f.expected, f.found)
            if key in seen:
                continue
            seen.add(key)
        out.append(f)
    return out


def verify_dataset(src: Path, options: VerifyOptions, config: RunConfig) -> VerifyReport:
    """Verify every episode of `src` in parallel through the runner (a Dask LocalCluster or
    `config.scheduler`); raises PrepError when the dataset's metadata as a whole is unreadable."""
    t0 = time.monotonic()
    ds, rejected = open_dataset(src)
    units = list(verify_units(ds, options, contiguous_index=not rejected))
    with open_engine(config) as engine:
        nested = list(engine.results(verify_unit, units, on_error=verify_unit_failed, desc="verify",
                                     unit_name="file-set", total=len(units)))
    return build_report(ds, rejected, options, nested, time.monotonic() - t0)


def verify_in_process(src: Path, options: VerifyOptions) -> VerifyReport:
    """`verify_dataset` without a scheduler, one unit after another in this process: for tests,
    benchmarks, and callers already running inside a worker."""
    t0 = time.monotonic()
    ds, rejected = open_dataset(src)
    nested = [verify_unit(u) for u in verify_units(ds, options, contiguous_index=not rejected)]
    return build_report(ds, rejected, options, nested, time.monotonic() - t0)


def build_report(ds: Dataset, rejected: list[EpisodeError], options: VerifyOptions,
                 nested: list[list[EpisodeVerify]], seconds: float) -> VerifyReport:
    """Gather the units' results: episodes in order, dataset-level checks first, failures deduplicated."""
    episodes = sorted((e for group in nested for e in group), key=lambda e: (e.episode is None, e.episode or 0))
    failures = dataset_failures(ds, rejected) + _dedupe([f for e in episodes for f in e.failures])
    return VerifyReport(ds, options, episodes, failures, rejected, seconds)


def write_report(report: VerifyReport, path: Path) -> dict[str, Any]:
    """Validate the JSON report against schemas/verify.schema.json and write it atomically."""
    obj = report.to_json()
    validate(obj, VERIFY_SCHEMA, source=str(path))
    atomic.write_json(path, obj, indent=2)
    return obj


def failures_table(failures: list[CheckFailure], limit: int = TABLE_ROWS) -> str:
    rows = [("episode", "camera", "check", "expected", "found")]
    for f in failures[:limit]:
        rows.append((str(f.episode) if f.episode is not None else "-", _short_camera(f.camera), f.check,
                     _clip(f.expected), _clip(f.found)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    if len(failures) > limit:
        lines.append(f"... and {len(failures) - limit} more failures (write them all with --json PATH)")
    return "\n".join(lines)


def _short_camera(camera: str | None) -> str:
    if not camera:
        return "-"
    return camera.removeprefix("observation.images.")


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def summary(report: VerifyReport) -> str:
    t = report.to_json()["totals"]
    ds = report.dataset
    lines = []
    if report.failures:
        lines += [failures_table(report.failures), ""]
    lines += [
        f"dataset   {ds.root}  (LeRobot {ds.codebase_version}, {ds.fps:g} fps, {len(ds.cameras)} cameras)",
        f"episodes  {t['episodes']:,}: {t['episodes_passed']:,} passed, {t['episodes_failed']:,} failed"
        + (f" ({t['episodes_rejected_by_metadata']} rejected by metadata)" if report.rejected else ""),
        f"frames    {t['frames_expected']:,} expected (metadata lengths)",
        f"checks    {', '.join(f'{k}: {v}' for k, v in sorted(t['failures_by_check'].items())) or 'all passed'}",
        f"time      {t['seconds']:.1f} s ({t['episodes_per_s']:.1f} episodes/s)",
        "PASSED" if report.passed else f"FAILED    {t['failures']} failures in episodes "
        + _episode_list(report.failed_episodes),
    ]
    return "\n".join(lines)


def _episode_list(episodes: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(e) for e in episodes[:limit])
    return shown + (f", ... ({len(episodes)} in all)" if len(episodes) > limit else "") if episodes else "(dataset)"


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 224x224, got {text!r}") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return w, h


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify", help="prove a dataset is sound: frame counts, timestamps, keyframes",
                       description="Verify a LeRobot dataset (v2.1 or v3.0): per episode and camera, the "
                       "frame counts by origin (metadata, parquet, header, packets, decoded) must agree, "
                       "timestamps and pts must sit on the 1/fps grid. Exit 0 only when every check passes.")
    p.add_argument("src", type=Path, help="dataset root (the folder holding meta/info.json)")
    p.add_argument("--expect-frames", type=positive_int, metavar="N",
                   help="every episode must have exactly N frames (e.g. 90 = 3 s at 30 fps)")
    p.add_argument("--size", type=parse_size, metavar="WxH", help="every video must be WxH, e.g. 224x224")
    p.add_argument("--all-intra", action="store_true", help="every frame must be a keyframe")
    p.add_argument("--decode", action="store_true", help="also decode every frame (slower; catches corrupt "
                   "packets a demux cannot see)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full report (schemas/verify.schema.json)")
    add_run_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = VerifyOptions(expect_frames=args.expect_frames, size=args.size, all_intra=args.all_intra,
                            decode=args.decode)
    report = verify_dataset(args.src, options, run_config(args))
    if args.json:
        write_report(report, args.json)
    print(summary(report))
    if args.json:
        print(f"report    {args.json}")
    return 0 if report.passed else 1
