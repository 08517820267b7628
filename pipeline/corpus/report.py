"""The corpus report: Markdown and PNG plots beside a corpus manifest (`<stem>.md`, `<stem>-<plot>.png`).

It shows, from the manifest alone: each dataset's episodes, timesteps, hours, bytes, fps, codecs, label and tasks;
hours per dataset and per label; bytes per camera (and per model slot, from the camera mapping: bytes no slot
reads are storage the model never sees); the episode-length distributions; the mixture (each dataset's share of
training samples, from its weight, against its share of the corpus's timesteps: the ratio is how much more often
than its size says each of its samples is drawn). Strings from the data are escaped (`printable_data`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.budget import fmt
from pipeline.budget.render import md_table
from pipeline.corpus.manifest import UNMAPPED, natural_share
from pipeline.corpus.plots import PLOTS, write_plots
from pipeline.text import printable_data


def sampling_ratio(row: dict[str, Any], doc: dict[str, Any]) -> float | None:
    """How much more often than its size says a dataset's samples are drawn: its share of samples (among the
    datasets that completed) over its share of their timesteps. 1 = as concatenation; above 1 = oversampled."""
    t = doc["totals"]
    nat = natural_share(row, t["frames"])
    if not nat or not t["share_ok"]:
        return None
    return (row["share"] / t["share_ok"]) / nat


def _datasets(doc: dict[str, Any]) -> str:
    ok = [r for r in doc["datasets"] if r["status"] == "ok"]
    rows = [[r["name"], r["label"], r["codebase_version"], fmt.value(r["fps"]), f"{r['episodes']:,}",
             f"{r['frames']:,}", fmt.hours(r["hours"]), fmt.size(r["bytes"]["total"]), f"{r['gb_per_hour']:.3g}",
             ", ".join(r["codecs"]) or "-", "-" if r["tasks"] is None else f"{r['tasks']:,}",
             fmt.value(r["weight"]), fmt.share(r["share"])] for r in ok]
    out = [md_table(["dataset", "label", "format", "fps", "episodes", "timesteps", "hours", "bytes", "GB/hr",
                     "codecs", "tasks", "weight", "share of samples"], rows)]
    failed = [r for r in doc["datasets"] if r["status"] != "ok"]
    if failed:
        out += ["", "Failed (not in the totals; rerun the command to finish them):", ""]
        out += [f"- **{r['name']}** ({r['source']}): {r['reason']}" for r in failed]
    return "\n".join(out)


def _labels(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    rows = [[k, v["datasets"], f"{v['episodes']:,}", f"{v['frames']:,}", fmt.hours(v["hours"]),
             fmt.share(v["hours"] / t["hours"]) if t["hours"] else "-", fmt.size(v["bytes"]), fmt.share(v["share"])]
            for k, v in t["by_label"].items()]
    return md_table(["label", "datasets", "episodes", "timesteps", "hours", "share of hours", "bytes",
                     "share of samples"], rows)


def _cameras(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    slots = md_table(["model slot", "bytes", "share of video"],
                     [[k, fmt.size(v), fmt.share(v / sum(t["bytes_per_slot"].values()))
                       if sum(t["bytes_per_slot"].values()) else "-"] for k, v in t["bytes_per_slot"].items()])
    rows = [[r["name"], c["key"], c["slot"] or UNMAPPED, c["codec"] or "-",
             f"{c['width']}x{c['height']}" if c["width"] else "-", c["pix_fmt"] or "-", fmt.size(c["bytes"])]
            for r in doc["datasets"] if r["status"] == "ok" for c in r["cameras"]]
    per = md_table(["dataset", "camera", "slot", "codec", "size", "pix_fmt", "bytes"], rows)
    unmapped = t["bytes_per_slot"].get(UNMAPPED, 0)
    note = (f"\n{fmt.size(unmapped)} of video feeds no slot of the model (no camera mapping, or a camera the "
            "mapping leaves out): storage and decode the training run does not use." if unmapped else "")
    return f"{slots}\n\n{per}{note}"


def _lengths(doc: dict[str, Any]) -> str:
    rows = []
    for r in doc["datasets"]:
        if r["status"] != "ok":
            continue
        e = r.get("episode_length")
        if not e:
            rows.append([r["name"], "-", "-", "-", "-", "-", "-", "-"])
            continue
        rows.append([r["name"], f"{e['min']:,}", f"{e['p05']:,.0f}", f"{e['p25']:,.0f}", f"{e['median']:,.0f}",
                     f"{e['p75']:,.0f}", f"{e['p95']:,.0f}", f"{e['max']:,}"])
    return md_table(["dataset", "min", "p5", "p25", "median", "p75", "p95", "max"], rows) + \
        "\n\nEpisode lengths in frames (metadata `length` of the episodes that scanned cleanly)."


def _mixture(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    rows = []
    for r in doc["datasets"]:
        if r["status"] != "ok":
            continue
        ratio = sampling_ratio(r, doc)
        rows.append([r["name"], fmt.value(r["weight"]), fmt.share(r["share"]),
                     fmt.share(natural_share(r, t["frames"])), "-" if ratio is None else f"{fmt.sig(ratio)}x"])
    weights = "given in the corpus file" if doc["corpus"]["weights"] == "given" else "equal (every dataset weight 1)"
    return "\n".join([
        f"Weights: {weights}. Share of samples = weight / the sum of the weights (the probability a training "
        "sample is drawn from the dataset); share of timesteps = the dataset's timesteps / the corpus's (what plain "
        "concatenation would draw). Ratio = share of samples / share of timesteps, among the datasets that "
        "completed: above 1, the dataset's samples are drawn more often than its size says (seen more epochs "
        "than the rest); `prep budget --corpus` gives the epochs at the target.",
        "",
        md_table(["dataset", "weight", "share of samples", "share of timesteps", "ratio"], rows),
    ])


CAMERA = "camera"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def render_markdown(doc: dict[str, Any], plots: list[str]) -> str:
    doc = printable_data(doc)
    t = doc["totals"]
    role = "native (prep scan)" if doc["role"] == "native" else "prepared (the outputs of prep reencode)"
    parts = [
        f"# Corpus {doc['corpus']['name']}",
        "",
        f"Generated by prep {doc['prep_version']} ({doc['created_utc']}) from the corpus manifest "
        f"({role}). GB = 1e9 bytes; hours = timesteps / fps / 3600.",
        "",
        f"**{t['datasets_ok']} of {t['datasets']} datasets**: {t['episodes']:,} episodes "
        f"({t['episodes_failed']:,} failed), {t['frames']:,} timesteps, {fmt.hours(t['hours'])}, "
        f"{fmt.size(t['bytes']['total'])} ({t['gb_per_hour']:.3g} GB/hr; video {fmt.size(t['bytes']['video'])}), "
        f"fps {', '.join(fmt.value(f) for f in t['fps']) or '-'}, codecs "
        f"{', '.join(f'{k} ({plural(v, CAMERA)})' for k, v in t['codecs'].items()) or '-'}, "
        + ("tasks: unknown for some dataset" if t["tasks"] is None else f"{t['tasks']:,} tasks (summed per dataset)")
        + ".",
        "",
        "## Datasets",
        "",
        _datasets(doc),
        "",
        "## Hours per label",
        "",
        _labels(doc),
        "",
        "## Bytes per camera",
        "",
        _cameras(doc),
        "",
        "## Episode lengths",
        "",
        _lengths(doc),
        "",
        "## Mixture",
        "",
        _mixture(doc),
        "",
    ]
    if plots:
        parts += ["## Plots", ""]
        parts += [f"![{title}]({p})\n" for p in plots for k, title in PLOTS.items() if p.endswith(f"-{k}")]
    return "\n".join(parts)


def write_corpus_report(doc: dict[str, Any], manifest: Path, *, plots: bool = True) -> list[str]:
    """`<stem>.md` and the plots `<stem>-<name>.png` beside the corpus manifest; returns the file names."""
    folder, stem = manifest.parent, manifest.stem
    names: list[str] = []
    if plots and any(r["status"] == "ok" for r in doc["datasets"]):
        names = write_plots(doc, folder, stem)
    md = folder / f"{stem}.md"
    atomic.write_text(md, render_markdown(doc, names))
    return [md.name, *names]
