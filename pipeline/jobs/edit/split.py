"""`prep edit --split NAME=FRACTION|EPISODES ...`: one dataset per part under `<out>/<name>`, each an edit of the
source with the same rules and checks; every part's selection and output are checked before the first is
written."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PrepError
from pipeline.formats.write import PREP_DIR
from pipeline.jobs.edit.features import FeatureOptions, resolve
from pipeline.jobs.edit.job import claim_edit_output, open_source, output_of, source_root, write_edit
from pipeline.jobs.edit.plan import check_cuts
from pipeline.jobs.edit.publish import EditReport
from pipeline.jobs.edit.selection import (
    EditOptions,
    Members,
    Selection,
    Source,
    episode_tasks,
    plan_tasks,
    ranges,
    select,
)
from pipeline.jobs.output import OutputClaim
from pipeline.runner import Engine
from pipeline.storage import Location, StorePath
from pipeline.text import printable


@dataclass(slots=True, frozen=True)
class SplitPart:
    """One part of a split: a name (its folder under --out) and a fraction of the episodes or a list."""

    name: str
    fraction: float | None = None
    episodes: tuple[int, ...] | None = None


def _largest_remainder(n: int, fractions: Sequence[float]) -> list[int]:
    """Counts for `fractions` of `n` that sum to round(sum * n) (each at least its floor)."""
    exact = [f * n for f in fractions]
    counts = [int(x) for x in exact]
    target = min(n, round(sum(exact)))
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:max(0, target - sum(counts))]:
        counts[i] += 1
    return counts


def split_selections(parts: Sequence[SplitPart], base: Sequence[int], tasks_of: dict[int, tuple[str, ...]], *,
                     seed: int, shuffle: bool, group_by_task: bool, total: int) -> dict[str, list[int]]:
    """The episodes of each part (lists; `split_arrays` with the tasks given as a dict)."""
    import numpy as np

    base_arr = np.asarray(base, dtype=np.int64)
    keys = sorted({tasks_of.get(int(e), ()) for e in base_arr}) if group_by_task else [()]
    code = {k: i for i, k in enumerate(keys)}
    codes = np.array([code[tasks_of.get(int(e), ())] for e in base_arr], dtype=np.int32) if group_by_task else None
    chosen = split_arrays(parts, base_arr, codes, seed=seed, shuffle=shuffle, total=total)
    return {name: [int(e) for e in arr] for name, arr in chosen.items()}


def split_arrays(parts: Sequence[SplitPart], base: Any, codes: Any, *, seed: int, shuffle: bool,
                 total: int) -> dict[str, Any]:
    """The episodes of each part (sorted numpy int64 arrays): listed parts take their episodes (of `base`, the
    sorted source indices left after the other options), the fraction parts share the rest, shuffled with
    `seed` (numpy's default_rng) unless not `shuffle`. `codes` (aligned with `base`, or None: one group): each
    episode's group, numbered in the groups' sorted order (`--group-by-task`: the set of its tasks); the
    fractions are allocated within each group, so every part gets its share of every task."""
    import numpy as np

    names = [p.name for p in parts]
    if len(set(names)) != len(names):
        raise PrepError(f"--split: a part name is given twice ({', '.join(names)})")
    taken: list[tuple[str, Any]] = []
    out: dict[str, Any] = {}
    for p in parts:
        if p.episodes is None:
            continue
        given = np.asarray(p.episodes, dtype=np.int64)
        bad = given[(given < 0) | (given >= total)]
        if len(bad):
            raise PrepError(f"--split {p.name}: episode {int(bad[0])} is not in the dataset (episodes 0..{total - 1})")
        for other, arr in taken:
            both = given[np.isin(given, arr)]
            if len(both):
                raise PrepError(f"--split: episode {int(both[0])} is in both {other!r} and {p.name!r}")
        arr = np.unique(given)
        taken.append((p.name, arr))
        out[p.name] = arr[np.isin(arr, base)]
    frac_parts = [p for p in parts if p.fraction is not None]
    fractions = [float(p.fraction or 0.0) for p in frac_parts]
    if sum(fractions) > 1.0 + 1e-9:
        raise PrepError(f"--split: the fractions sum to {sum(fractions):g}, more than 1")
    left = ~np.isin(base, np.concatenate([a for _n, a in taken])) if taken else np.ones(len(base), dtype=bool)
    rest = base[left]
    rest_codes = codes[left] if codes is not None else np.zeros(len(rest), dtype=np.int32)
    rng = np.random.default_rng(seed)
    pieces: dict[str, list[Any]] = {p.name: [] for p in frac_parts}
    for key in np.unique(rest_codes):
        members = rest[rest_codes == key]
        if shuffle:
            members = members[rng.permutation(len(members))]
        start = 0
        for p, n in zip(frac_parts, _largest_remainder(len(members), fractions), strict=True):
            pieces[p.name].append(members[start:start + n])
            start += n
    for name, got in pieces.items():
        out[name] = np.sort(np.concatenate(got)) if got else np.zeros(0, dtype=np.int64)
    for name in names:
        if not len(out[name]):
            raise PrepError(f"--split {name}: no episode falls in this part")
    return {n: out[n] for n in names}


SPLIT_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_part_name(name: str) -> None:
    if name == PREP_DIR:
        raise PrepError(f"--split: part name {name!r} is reserved: <out>/{PREP_DIR} holds prep's lock and records; "
                        "choose another name")
    if not name or name in (".", "..") or not set(name) <= SPLIT_NAME_CHARS:
        raise PrepError(f"--split: part name {name!r} must be a folder name of letters, digits, '_', '.', '-'"[:300])


def part_of(out: Path | Location, name: str) -> Path | Location:
    """A part's output: `<out>/<name>`, a folder or a prefix."""
    return out / name if isinstance(out, Path) else out.child(name)


def top_names(out: Path | Location) -> list[str]:
    """The names directly in the output: a folder's entries, an object prefix's first path parts (one listing)."""
    if isinstance(out, Path):
        return [p.name for p in out.iterdir()] if out.exists() else []
    return sorted({rel.split("/", 1)[0] for rel, _st in out.store().iter_files()})


@dataclass(slots=True)
class SplitReport:
    parts: dict[str, EditReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.parts.values())


def split_dataset(src: Path | Location | StorePath, out: Path | Location, parts: Sequence[SplitPart],
                  options: EditOptions, engine: Engine, *,
                  seed: int = 0, shuffle: bool = True, group_by_task: bool = False,
                  verify: bool = True, reencode_partial: bool = False,
                  features: FeatureOptions | None = None) -> SplitReport:
    """One dataset per part under `out/<name>` (each an edit of `src`, the same rules and checks); `options`
    (if any) first leaves episodes out of every part, `features` the same cameras and keys of every part. Every
    part's selection and output are checked before the first is written. `src` and `out` may be where they live
    (a local folder, an object-store prefix: then each part is a prefix below `out`)."""
    src, out = source_root(src), output_of(out)
    if not parts:
        raise PrepError("--split: no part given (NAME=FRACTION or NAME=EPISODES)")
    for p in parts:
        check_part_name(p.name)
    info = open_source(src, out)
    features = features or FeatureOptions()
    fmap = resolve(features, [src], [info])[0]
    import numpy as np

    # one pass: the episode count and (--group-by-task) each episode's group, as int32 codes
    group_code: dict[tuple[str, ...], int] = {}
    group_of = array("i")
    total = 0
    for _e, texts, _n in episode_tasks(src, info):
        total += 1
        if group_by_task:
            group_of.append(group_code.setdefault(texts, len(group_code)))
    base_sel = select(options, src, info)[0] if options.given() else Selection.all(total)
    base = base_sel.kept_array()
    codes = None
    if group_by_task:
        keys = list(group_code)  # in order of first appearance; ranked in sorted order of the task tuples
        rank = np.empty(len(keys), dtype=np.int32)
        rank[np.array(sorted(range(len(keys)), key=lambda c: keys[c]), dtype=np.int64)] = np.arange(len(keys))
        codes = rank[np.frombuffer(group_of, dtype=np.int32)[base]]
        del group_of
    chosen = split_arrays(parts, base, codes, seed=seed, shuffle=shuffle, total=total)
    selections: dict[str, Selection] = {}
    claims: dict[str, OutputClaim] = {}
    for name, kept in chosen.items():
        members = Members(kept)
        other = f"in another part of the split (not {name!r})"
        selections[name] = Selection.of((e, None if e in members else base_sel.reason_of(e) or other)
                                        for e in range(total))
        claims[name] = claim_edit_output(part_of(out, name), [src])
    layout = fmap.info(info) if fmap.changes else None
    sources = {name: Source(src, info, sel, plan_tasks(src, info, sel), layout=layout, features=fmap)
               for name, sel in selections.items()}
    engine.prepare(max(sel.kept_count for sel in selections.values()))
    for name, source in sources.items():
        check_cuts([source], str(part_of(out, name)), engine, reencode_partial=reencode_partial)
    others = sorted(n for n in top_names(out) if n not in chosen)
    if others:
        raise PrepError(f"output {printable(out)} holds {', '.join(printable(o) for o in others[:3])}, "
                        "which is not a part of this split; choose another --out")
    split_settings = {"split": {p.name: (p.fraction if p.fraction is not None else ranges(list(p.episodes or ())))
                                for p in parts}, "seed": seed, "shuffle": shuffle, "group_by_task": group_by_task,
                      **features.settings()}
    reports = {}
    for name, source in sources.items():
        reports[name] = write_edit([source], claims[name], total, engine, verify=verify,
                                   settings_extra=split_settings, cuts_checked=True,
                                   reencode_partial=reencode_partial)
    return SplitReport(reports)
