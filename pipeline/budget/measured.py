"""Corpus figures measured by `prep scan` manifests: GB/hr, frames per episode, fps; estimated rates.

The native manifest calibrates `gb_per_hour_native`, the prepared one `gb_per_hour_prepared`;
frames per episode and fps come from the native manifest, else from the prepared one. A measured
value replaces a document default but not a value set in the config file or on the CLI.

When only one of the two storage rates is known (measured, config or CLI), the other is estimated
from it with `prepared_ratio` (native / prepared; the document's 6.15 / 2.13 unless set), so a
measured 0.1 GB/hr native corpus is never paired with the document's 2.13 GB/hr prepared rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.budget.config import (
    DEFAULT_SOURCE,
    DOC_GB_PER_HOUR_NATIVE,
    DOC_GB_PER_HOUR_PREPARED,
    BudgetConfig,
    origin_of,
)
from pipeline.errors import PrepError
from pipeline.jobs.manifest import load_manifest
from pipeline.storage import StorePath

NO_VIDEO = "no video"


@dataclass(slots=True, frozen=True)
class ManifestFigures:
    role: str  # "native" | "prepared"
    path: str
    root: str
    episodes: int
    frames: int
    hours: float
    total_bytes: int
    gb_per_hour: float
    frames_per_episode: float
    fps: float
    video_bytes: int = 0
    cameras: int = 0
    parts: tuple[ManifestFigures, ...] = ()  # the manifests added up (`--native A --native B`), when several

    @property
    def has_video(self) -> bool:
        """False for a corpus without a camera (state and action only): re-encoding leaves it as it is."""
        return self.cameras > 0 or self.video_bytes > 0

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "dataset_root": self.root, "episodes": self.episodes, "frames": self.frames,
            "hours": self.hours, "total_bytes": self.total_bytes, "gb_per_hour": self.gb_per_hour,
            "frames_per_episode": self.frames_per_episode, "fps": self.fps,
            **({"parts": [p.as_json() for p in self.parts]} if self.parts else {}),
        }


def read_figures(path: Path | StorePath, role: str) -> ManifestFigures:
    """Load and schema-check a manifest (a local file, or an object read through `pipeline.storage`); refuse one
    that measures nothing (one line naming the field)."""
    m = load_manifest(path)
    t = m["totals"]
    fpe = t.get("frames_per_episode", {}).get("mean")
    used = {"totals.episodes": t["episodes"], "totals.frames": t["frames"], "totals.hours": t["hours"],
            "totals.bytes.total": t["bytes"]["total"], "totals.gb_per_hour": t["gb_per_hour"],
            "dataset.fps": m["dataset"]["fps"]}
    if fpe is not None:
        used["totals.frames_per_episode.mean"] = fpe
    for field, value in used.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise PrepError(f"{path}: {field} = {value!r}: a {role} manifest must measure a positive, finite "
                            "number here to calibrate the budget")
    fpe = fpe or t["frames"] / t["episodes"]
    return ManifestFigures(
        role=role, path=str(path), root=m["dataset"]["root"], episodes=t["episodes"], frames=t["frames"],
        hours=t["hours"], total_bytes=t["bytes"]["total"], gb_per_hour=t["gb_per_hour"],
        frames_per_episode=float(fpe), fps=float(m["dataset"]["fps"]),
        video_bytes=int(t["bytes"].get("video") or 0), cameras=len(m["dataset"].get("cameras") or []),
    )


def read_all(paths: Sequence[Path | StorePath], role: str) -> ManifestFigures | None:
    """The manifests of one role (`--native A --native B`), added up: every one counts, never the last only.
    Episodes, timesteps, hours and bytes are summed; GB/hr = bytes / hours, frames per episode = timesteps /
    episodes and fps = timesteps / seconds of the whole. None without a manifest."""
    figs = [read_figures(p, role) for p in paths]
    seen: dict[tuple[str, int, int, int], ManifestFigures] = {}
    for f in figs:
        twin = seen.setdefault((f.root, f.episodes, f.frames, f.total_bytes), f)
        if twin is not f:
            raise PrepError(f"{f.path} and {twin.path} describe the same dataset ({f.root}: the same episodes, "
                            f"timesteps and bytes): added up it would count twice; give one")
    if len(figs) < 2:
        return figs[0] if figs else None
    episodes, frames = sum(f.episodes for f in figs), sum(f.frames for f in figs)
    hours, total = sum(f.hours for f in figs), sum(f.total_bytes for f in figs)
    return ManifestFigures(
        role=role, path=" + ".join(f.path for f in figs), root=" + ".join(f.root for f in figs), episodes=episodes,
        frames=frames, hours=hours, total_bytes=total, gb_per_hour=total / 1e9 / hours,
        frames_per_episode=frames / episodes, fps=frames / (hours * 3600),
        video_bytes=sum(f.video_bytes for f in figs), cameras=max(f.cameras for f in figs), parts=tuple(figs))


def measured_values(native: ManifestFigures | None, prepared: ManifestFigures | None) -> dict[str, tuple[Any, str]]:
    """Parameter -> (value, source) for everything the manifests measure."""
    out: dict[str, tuple[Any, str]] = {}
    if native is not None:
        out["gb_per_hour_native"] = (native.gb_per_hour, f"measured {native.path} (totals.gb_per_hour)")
    if prepared is not None:
        out["gb_per_hour_prepared"] = (prepared.gb_per_hour, f"measured {prepared.path} (totals.gb_per_hour)")
    corpus = native or prepared
    if corpus is not None:
        out["frames_per_episode"] = (corpus.frames_per_episode,
                                     f"measured {corpus.path} (totals.frames_per_episode.mean)")
        out["fps"] = (corpus.fps, f"measured {corpus.path} (dataset.fps)")
    return out


def apply_measured(cfg: BudgetConfig, measured: dict[str, tuple[Any, str]]) -> tuple[BudgetConfig, list[str]]:
    """Replace defaults by measured values; returns the config and notes on measured values overridden."""
    notes: list[str] = []
    for name, (value, source) in measured.items():
        if cfg.source(name) == DEFAULT_SOURCE:
            cfg = cfg.with_values({name: value}, source)
        else:
            notes.append(f"{name}: {source.removeprefix('measured ')} measured {value:.6g}, "
                         f"overridden by {cfg.source(name)} = {getattr(cfg, name):g}")
    return cfg, notes


def consistency_notes(native: ManifestFigures | None, prepared: ManifestFigures | None) -> list[str]:
    """Differences between the two manifests a reader should know about."""
    if native is None or prepared is None:
        return []
    notes = []
    if abs(native.fps - prepared.fps) > 1e-9:
        notes.append(f"fps differs: native {native.fps:g}, prepared {prepared.fps:g}; the native value is used")
    if abs(native.frames_per_episode - prepared.frames_per_episode) > 1e-6:
        notes.append(f"frames per episode differ: native {native.frames_per_episode:g}, prepared "
                     f"{prepared.frames_per_episode:g}; the native value is used")
    if native.frames != prepared.frames:
        notes.append(f"the manifests hold different frame counts (native {native.frames:,}, prepared "
                     f"{prepared.frames:,}): they may not describe the same corpus")
    return notes


def _ratio_source(cfg: BudgetConfig) -> str:
    if cfg.source("prepared_ratio") == DEFAULT_SOURCE:
        return f"document {DOC_GB_PER_HOUR_NATIVE:g} / {DOC_GB_PER_HOUR_PREPARED:g}"
    return cfg.source("prepared_ratio")


def estimate_rates(cfg: BudgetConfig, native: ManifestFigures | None,
                   prepared: ManifestFigures | None) -> tuple[BudgetConfig, list[str]]:
    """Estimate the storage rate nothing gave from the one that was given; returns the config and notes.

    Only one rate known (measured, config or CLI), the other a document default: the other is estimated
    with `prepared_ratio` = native / prepared and labelled "estimated from ...". Both known: the
    ratio shown is theirs (measured when both come from manifests) and a ratio set by hand is unused.
    Neither: the document's 6.15 and 2.13 GB/hr stand. A measured corpus without video (no camera, no
    video bytes) has nothing to re-encode: the other rate is the same (ratio 1), whatever the ratio.
    """
    n_src, p_src = cfg.source("gb_per_hour_native"), cfg.source("gb_per_hour_prepared")
    ratio, r_src = cfg.prepared_ratio, _ratio_source(cfg)
    notes: list[str] = []
    novideo = next((m for m, src in ((native, n_src), (prepared, p_src))
                    if m is not None and not m.has_video and src.startswith("measured ")), None)
    if novideo is not None and (n_src == DEFAULT_SOURCE) != (p_src == DEFAULT_SOURCE):
        known = "native" if n_src != DEFAULT_SOURCE else "prepared"
        other = "prepared" if known == "native" else "native"
        rate = getattr(cfg, f"gb_per_hour_{known}")
        why = f"{NO_VIDEO}: {novideo.path} has no camera and no video bytes, re-encoding keeps every byte"
        if cfg.source("prepared_ratio") != DEFAULT_SOURCE:
            notes.append(f"prepared_ratio {ratio:.6g} ({r_src}) is not used: {why}")
        cfg = cfg.with_values({f"gb_per_hour_{other}": rate},
                              f"estimated from gb_per_hour_{known} {rate:.6g} "
                              f"({cfg.source(f'gb_per_hour_{known}')}) x 1 ({why})")
        return cfg.with_values({"prepared_ratio": 1.0}, f"measured {novideo.path} ({why})"), notes
    if n_src != DEFAULT_SOURCE and p_src == DEFAULT_SOURCE:
        n = cfg.gb_per_hour_native
        cfg = cfg.with_values({"gb_per_hour_prepared": n / ratio},
                              f"estimated from gb_per_hour_native {n:.6g} ({n_src}) / prepared_ratio "
                              f"{ratio:.6g} ({r_src})")
    elif p_src != DEFAULT_SOURCE and n_src == DEFAULT_SOURCE:
        p = cfg.gb_per_hour_prepared
        cfg = cfg.with_values({"gb_per_hour_native": p * ratio},
                              f"estimated from gb_per_hour_prepared {p:.6g} ({p_src}) x prepared_ratio "
                              f"{ratio:.6g} ({r_src})")
    elif n_src != DEFAULT_SOURCE and p_src != DEFAULT_SOURCE:
        actual = cfg.gb_per_hour_native / cfg.gb_per_hour_prepared
        if cfg.source("prepared_ratio") != DEFAULT_SOURCE:
            notes.append(f"prepared_ratio {ratio:.6g} ({r_src}) is not used: both storage rates are given "
                         f"(native / prepared = {actual:.6g})")
        elif native is not None and prepared is not None and n_src.startswith("measured ") \
                and p_src.startswith("measured "):
            cfg = cfg.with_values({"prepared_ratio": actual},
                                  f"measured {native.path} / {prepared.path} (totals.gb_per_hour)")
        else:
            cfg = cfg.with_values({"prepared_ratio": actual},
                                  f"estimated from gb_per_hour_native ({n_src}) / gb_per_hour_prepared ({p_src})")
    return cfg, notes


def rate_warnings(cfg: BudgetConfig) -> list[str]:
    """A prepared rate above the native one: kept (it can be real), but said with both numbers."""
    n, p = cfg.gb_per_hour_native, cfg.gb_per_hour_prepared
    if p <= n:
        return []
    return [f"prepared {p:.6g} GB/hr ({cfg.source('gb_per_hour_prepared')}) is larger than native {n:.6g} GB/hr "
            f"({cfg.source('gb_per_hour_native')}), {p / n:.3g}x: the prepared corpus needs more storage than the "
            "native one. An all-intra re-encode of a low-bitrate inter-frame source can be larger, so the "
            "figures are kept; check the inputs if that is not the case here"]


def rate_label(cfg: BudgetConfig, kind: str) -> str:
    """A short label of where a storage rate came from, for the headline and the plots."""
    source = cfg.source(f"gb_per_hour_{kind}")
    origin = origin_of(source)
    if origin == "measured":
        return "measured"
    if origin == "estimated" and NO_VIDEO in source:
        return f"estimated: = {'native' if kind == 'prepared' else 'prepared'} ({NO_VIDEO})"
    if origin == "estimated":
        return (f"estimated: native / {cfg.prepared_ratio:.3g}" if kind == "prepared"
                else f"estimated: prepared x {cfg.prepared_ratio:.3g}")
    return source
