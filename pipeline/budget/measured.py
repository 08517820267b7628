"""Corpus figures measured by `prep scan` manifests: GB/hr, frames per episode, fps.

The native manifest calibrates `gb_per_hour_native`, the prepared one `gb_per_hour_prepared`;
frames per episode and fps come from the native manifest, else from the prepared one. A measured
value replaces a document default but not a value set in the config file or on the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.budget.config import DEFAULT_SOURCE, BudgetConfig
from pipeline.errors import PrepError
from pipeline.manifest import load_manifest


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

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "dataset_root": self.root, "episodes": self.episodes, "frames": self.frames,
            "hours": self.hours, "total_bytes": self.total_bytes, "gb_per_hour": self.gb_per_hour,
            "frames_per_episode": self.frames_per_episode, "fps": self.fps,
        }


def read_figures(path: Path, role: str) -> ManifestFigures:
    """Load and schema-check a manifest; refuse one that measures nothing."""
    m = load_manifest(path)
    t = m["totals"]
    if t["episodes"] <= 0 or t["frames"] <= 0 or t["hours"] <= 0 or t["gb_per_hour"] <= 0:
        raise PrepError(f"{path}: {role} manifest measures no episodes, frames or bytes "
                        f"(episodes {t['episodes']}, frames {t['frames']}, gb_per_hour {t['gb_per_hour']:g})")
    fpe = t.get("frames_per_episode", {}).get("mean") or t["frames"] / t["episodes"]
    return ManifestFigures(
        role=role, path=str(path), root=m["dataset"]["root"], episodes=t["episodes"], frames=t["frames"],
        hours=t["hours"], total_bytes=t["bytes"]["total"], gb_per_hour=t["gb_per_hour"],
        frames_per_episode=float(fpe), fps=float(m["dataset"]["fps"]),
    )


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
