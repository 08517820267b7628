"""Render a budget report (the report.json dict) as Markdown and as the terminal headline.

Both renderings start from `printable_data(report)`: every string of the report (paths, dataset roots,
sources, notes) with its control characters escaped, so a file name from the data cannot drive the
terminal or break a Markdown line; report.json keeps the exact strings."""

from __future__ import annotations

from typing import Any

from pipeline.budget import fmt
from pipeline.text import printable, printable_data

PLOT_TITLES = {
    "throughput.png": "Node throughput vs global batch",
    "memory.png": "Memory per GPU vs per-GPU batch",
    "days.png": "Days to the target vs nodes",
    "storage.png": "Storage vs target timesteps",
    "coverage.png": "Your corpus vs the target (hours, log scale)",
    "mixture.png": "The mixture: epochs over each dataset at the target (log scale)",
}

def _cell(text: Any) -> str:
    return printable(text).replace("|", "\\|")


def _code(text: Any) -> str:
    """A Markdown code span that a backtick inside `text` cannot close early."""
    s = printable(text)
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(table: list[list[str]]) -> list[str]:
    """Rows aligned for the terminal: first and last column left-aligned, the values right-aligned."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) if i == 0 or i == len(row) - 1 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in table]


def headline_text(report: dict[str, Any]) -> str:
    """The headline table (and the corpus coverage, given a manifest) as aligned plain text, for the terminal."""
    report = printable_data(report)
    h = report["headline"]
    lines = text_table([["", *h["columns"], ""]] + [[r["label"], *r["values"], r["note"]] for r in h["rows"]])
    t, m = report["training"], report["memory"]
    tp = "; ".join(f"{fmt.rate(r['frames_per_s'])} at global batch {r['global_batch']}" for r in report["throughput"])
    lines += [
        "",
        f"throughput  frames/s per node: {tp}; ceiling 1/a = {fmt.rate(report['step_model']['ceiling_frames_per_s'])}",
        f"memory      {fmt.gb(m['train_gb_per_gpu'])} GB per GPU at {t['per_gpu_batch']:g} samples/GPU "
        f"(usable {fmt.value(m['usable_gb'])} GB){'' if m['train_fits'] else ' DOES NOT FIT'}; "
        f"largest per-GPU batch {m['max_per_gpu_batch']:,} (global {m['max_global_batch']:,})",
    ]
    if report["corpus"] is not None:
        c = report["corpus"]
        lines += ["", f"your corpus {c['manifest']} ({c['role']}): {corpus_holds(c)}"]
        lines += text_table([["", *h["columns"], ""]] + [[label, *values, note]
                                                         for label, values, note in coverage_rows(report)])
        lines += [f"            {one_epoch_text(c)}"]
    if report.get("mixture"):
        lines += ["", *mixture_text(report)]
    lines += [f"note        {n}" for n in report["notes"]]
    lines += [f"warning     {w}" for w in report["warnings"]]
    return "\n".join(lines)


def mixture_text(report: dict[str, Any]) -> list[str]:
    """The mixture on the terminal: one line per dataset (share, epochs at each target, flag), the re-encode cost."""
    m = report["mixture"]
    cols = [f"epochs at pi0 batch {t['pi0_batch']}" for t in m["datasets"][0]["targets"]]
    table = [["mixture", "weight", "share", "of timesteps", *cols, ""]]
    for d in m["datasets"]:
        table.append([d["name"], fmt.value(d["weight"]), fmt.share(d["share"]), fmt.share(d["share_of_timesteps"]),
                      *(fmt.sig(t["epochs"]) for t in d["targets"]),
                      f"OVERSAMPLED {fmt.sig(d['sampling_ratio'])}x" if d["oversampled"] else ""])
    r = m["reencode"]
    walls = ", ".join(f"{fmt.duration(w['hours'] / 24)} on {w['cores']:,} cores" for w in r["wall"])
    lines = text_table(table)
    lines += [f"left out    {x['name']}: {x['reason']}" for x in m["left_out"]]
    lines.append(f"re-encode   {r['camera_frames']:,} camera frames x {fmt.sig(r['cpu_ms_per_frame'])} CPU ms = "
                 f"{fmt.sig(r['cpu_hours'])} CPU-hours; wall {walls} (measured per-frame cost: report.md)")
    return lines


def corpus_holds(c: dict[str, Any]) -> str:
    b = c["bytes"]
    tag = {kind: "measured" if b[kind]["source"].startswith("measured") else "estimated" for kind in b}
    return (f"{c['episodes']:,} episode{'s' * (c['episodes'] != 1)}, {c['timesteps']:,} timesteps, "
            f"{fmt.hours(c['hours'])}, "
            f"{fmt.size(b['native']['value'])} native ({tag['native']}), "
            f"{fmt.size(b['prepared']['value'])} prepared ({tag['prepared']})")


def coverage_rows(report: dict[str, Any]) -> list[tuple[str, list[str], str]]:
    """The corpus against each target: (label, one value per target, how it is computed)."""
    c = report["corpus"]
    inputs = {i["name"]: i["value"] for i in report["inputs"]}
    ts = c["targets"]
    head = {r["label"]: r["note"] for r in report["headline"]["rows"]}
    miss = [t["missing"] for t in ts]
    return [
        ("share of the target", [fmt.share(t["share"]) for t in ts], f"{c['timesteps']:,} timesteps / T"),
        ("missing timesteps", [fmt.billions(m["timesteps"]) for m in miss], "T - corpus, at least 0"),
        ("missing hours", [fmt.hours(m["hours"]) for m in miss], f"/ {fmt.value(inputs['fps'])} fps / 3600"),
        ("missing episodes", [fmt.millions(m["episodes"]) for m in miss],
         f"/ {fmt.value(inputs['frames_per_episode'])} frames per episode"),
        ("missing storage, native", [fmt.tb(m["storage_tb"]["native"]) for m in miss], head["storage, native"]),
        ("missing storage, prepared", [fmt.tb(m["storage_tb"]["prepared"]) for m in miss],
         head["storage, prepared"]),
        ("epochs over the corpus at T", [fmt.sig(t["epochs"]) for t in ts], "T / corpus timesteps"),
    ]


def one_epoch_text(c: dict[str, Any]) -> str:
    e = c["one_epoch"]
    by_nodes = {d["nodes"]: d for d in e["days"]}
    one, n = by_nodes[1], by_nodes[e["headline_nodes"]]
    multi = (f", {fmt.duration(n['days'])} on {n['nodes']} nodes at {fmt.percent(n['efficiency'])}"
             if n["nodes"] != 1 else "")
    return (f"one epoch of the corpus ({c['timesteps']:,} timesteps at {fmt.rate(e['frames_per_s_per_node'])} "
            f"frames/s per node): {fmt.duration(one['days'])} on 1 node{multi}")


SOURCE_WORDS = {"cli": "CLI", "config": "config file", "measured": "measured", "estimated": "estimated",
                "document default": "document default (pi05-pretraining-sizing.txt)"}


def source_cell(source: str, origin: str) -> str:
    """The provenance shown in the inputs table: the kind first (measured, estimated, ...), then the detail."""
    detail = source.removeprefix(origin).strip()
    return f"{SOURCE_WORDS[origin]} {detail}".rstrip()


def _inputs(report: dict[str, Any]) -> str:
    rows = []
    for i in report["inputs"]:
        v = i["value"]
        if isinstance(v, list):
            shown = ", ".join(f"B={a['global_batch']}, wall={a['wall_s']:g} s" if isinstance(a, dict)
                              else fmt.value(a) for a in v) or "none"
        else:
            shown = fmt.value(v)
        rows.append([f"`{i['name']}`", shown, i["unit"], source_cell(i["source"], i["origin"]), i["description"]])
    out = [md_table(["parameter", "value", "unit", "source", "meaning"], rows)]
    manifests = [(role, m) for role, m in report["manifests"].items() if m]
    if manifests:
        out.append("\nMeasured manifests (`prep scan`; GB/hr = total bytes / 1e9 / hours):\n")
        out.append(md_table(
            ["role", "manifest", "episodes", "frames", "hours", "bytes", "GB/hr", "frames/episode", "fps"],
            [[role, _code(m['path']), f"{m['episodes']:,}", f"{m['frames']:,}", f"{m['hours']:.6g}",
              f"{m['total_bytes']:,}", f"{m['gb_per_hour']:.6g}", f"{m['frames_per_episode']:.6g}",
              f"{m['fps']:g}"] for role, m in manifests]))
    else:
        out.append("\nNo manifest given: GB/hr, frames per episode and fps are the sizing document's defaults "
                   "unless set in the config file or on the command line.")
    return "\n".join(out)


def _throughput(report: dict[str, Any], gpus: int) -> str:
    s = report["step_model"]
    a, c = s["a_s_per_sample"], s["c_s"]
    t = report["training"]
    out = [
        f"Step time of one {gpus}-GPU node at global batch B (per-GPU batch = B / {gpus}):\n",
        "```",
        f"wall_s(B)     = a * B + c = {a:.6g} * B + {c:.6g}      # fit: {s['method']}",
        "node frames/s = B / wall_s(B)",
        f"ceiling       = 1 / a = 1 / {a:.6g} = {fmt.rate(s['ceiling_frames_per_s'])} frames/s",
        f"at B = {t['global_batch']}: {t['global_batch']} / ({a:.6g} * {t['global_batch']} + {c:.6g}) "
        f"= {t['global_batch']} / {fmt.seconds(t['wall_s'])} = {fmt.rate(t['frames_per_s'])} frames/s",
        "```",
    ]
    if s["anchors"]:
        out.append("\nAnchors (measured steps) and the fit:\n")
        out.append(md_table(["global batch", "measured wall s", "fitted wall s", "residual s"],
                            [[x["global_batch"], fmt.seconds(x["wall_s"]), fmt.seconds(x["fit_wall_s"]),
                              f"{x['residual_s']:+.3f}"] for x in s["anchors"]]))
    out.append("")
    out.append(md_table(["global batch", "per-GPU batch", "wall s/step", "frames/s", "GB per GPU", "fits"],
                        [[r["global_batch"], f"{r['per_gpu_batch']:g}", fmt.seconds(r["wall_s"]),
                          fmt.rate(r["frames_per_s"]), fmt.gb(r["memory_gb_per_gpu"]),
                          "yes" if r["fits"] else "NO"] for r in report["throughput"]]))
    return "\n".join(out)


def _memory(report: dict[str, Any]) -> str:
    m = report["memory"]
    b = m["train_per_gpu_batch"]
    return "\n".join([
        "```",
        f"memory per GPU (GB) = fixed + per_sample * b = {m['fixed_gb']:g} + {m['per_sample_gb']:g} * b",
        f"at b = {b:g}: {m['fixed_gb']:g} + {m['per_sample_gb']:g} * {b:g} = {fmt.gb(m['train_gb_per_gpu'])} GB "
        f"(usable {m['usable_gb']:g} GB of {m['gpu_memory_gb']:g} GB: {'fits' if m['train_fits'] else 'DOES NOT FIT'})",
        f"largest b = floor((usable - fixed) / per_sample) = floor(({m['usable_gb']:g} - {m['fixed_gb']:g}) / "
        f"{m['per_sample_gb']:g}) = {m['max_per_gpu_batch']} (global {m['max_global_batch']:,})",
        "```",
    ])


def _targets(report: dict[str, Any], inputs: dict[str, Any]) -> str:
    fpe, fps = inputs["frames_per_episode"], inputs["fps"]
    gn, gp = inputs["gb_per_hour_native"], inputs["gb_per_hour_prepared"]
    tb_ = inputs["train_batch"]
    out = []
    for t in report["targets"]:
        T = t["timesteps"]
        out += [
            f"**pi0 batch {t['pi0_batch']}**\n",
            "```",
            f"T        = {t['pi0_steps']:,} * {t['pi0_batch']:,} = {T:,.0f} = {fmt.billions(T)} timesteps",
            f"episodes = T / {fmt.value(fpe)} = {fmt.millions(t['episodes'])}",
            f"hours    = T / {fmt.value(fps)} / 3600 = {fmt.count(t['hours'])} h",
            f"native   = {t['hours']:,.1f} h * {fmt.value(gn)} GB/hr / 1000 = {fmt.tb(t['storage_tb']['native'])}",
            f"prepared = {t['hours']:,.1f} h * {fmt.value(gp)} GB/hr / 1000 = {fmt.tb(t['storage_tb']['prepared'])}",
            f"steps    = T / {tb_:,} (one node) = {t['steps_one_node']:,.0f}",
            "```",
            "",
        ]
    return "\n".join(out)


def _days(report: dict[str, Any], inputs: dict[str, Any]) -> str:
    eff, lo, hi = inputs["efficiency"], inputs["efficiency_low"], inputs["efficiency_high"]
    rate = report["training"]["frames_per_s"]
    header = ["nodes"]
    for t in report["targets"]:
        b = t["pi0_batch"]
        header += [f"batch {b}: ideal", f"batch {b}: at {fmt.percent(eff)}",
                   f"batch {b}: {fmt.percent(lo)}-{fmt.percent(hi)}"]
    rows: list[list[Any]] = []
    for i, d0 in enumerate(report["targets"][0]["days"]):
        row: list[Any] = [d0["nodes"]]
        for t in report["targets"]:
            d = t["days"][i]
            row += [fmt.days(d["ideal"]), fmt.days(d["efficiency"]),
                    f"{fmt.days(d['efficiency_high'])}-{fmt.days(d['efficiency_low'])}"]
        rows.append(row)
    return "\n".join([
        "```",
        f"days(N) = T / (N * eff * {fmt.rate(rate)} frames/s) / 86400      # eff = 1 on one node; per-node batch "
        f"{inputs['train_batch']}",
        "```",
        "",
        md_table(header, rows),
    ])


def _landscape(report: dict[str, Any], gpus: int) -> str:
    land = report["landscape"]

    def cell(v: dict[str, Any]) -> str:
        text = v["text"] if v["reported"] else "*not reported*"
        note = f" ({v['note']})" if v.get("note") else ""
        return f"{text}{note} {v['source']}"

    rows = []
    for run in land["runs"]:
        ts = (f"{fmt.billions(run['timesteps'])} ({run['steps']['text']} x {run['batch']['text']})"
              if run["timesteps"] is not None else f"*{run['timesteps_note']}*")
        rows.append([run["name"], cell(run["params"]), cell(run["steps"]), cell(run["batch"]), ts,
                     cell(run["data"]), cell(run["compute"])])
    tgt = land["target"]
    tsl = " - ".join(fmt.billions(x) for x in tgt["timesteps"])
    steps = " - ".join(f"{x / 1e3:,.0f}k" for x in tgt["steps_one_node"])
    days = " - ".join(fmt.days(x) for x in tgt["days_one_node"])
    hours = " - ".join(f"{fmt.count(x)} h" for x in tgt["hours"])
    rows.append(["**ours (target)**", "π0.5 (row above)", f"{steps} at batch {tgt['train_batch']}",
                 str(tgt["train_batch"]), f"**{tsl}** (π0's steps x batch range)", f"{hours} (this report)",
                 f"{days} days on one {gpus}-GPU node (this report)"])
    refs = "\n".join(f"- [{k}] {v}" for k, v in land["references"].items())
    return "\n".join([
        f"Published VLA pre-training runs, from {_code(land['path'])}. Timesteps seen = steps x batch only where "
        "both are reported as single numbers; *italic* = not reported or not derivable, never guessed.\n",
        md_table(["run", "params", "steps", "batch", "timesteps seen", "data", "compute"], rows),
        "",
        refs,
    ])


def _corpus(report: dict[str, Any]) -> str:
    c = report["corpus"]
    if c is None:
        return ("No manifest given, so nothing here is about your data: run `prep scan` on your corpus and pass "
                "the manifest with `--native` (and the re-encoded one with `--prepared`) to see how much of the "
                "target it covers, what is missing, and how many epochs over it the target would mean.")
    h = report["headline"]
    b = c["bytes"]
    fpe, fps = c["frames_per_episode"], c["fps"]
    has = md_table(["the corpus has", "value", "source"], [
        ["episodes", f"{c['episodes']:,}", f"measured {_code(c['manifest'])} (totals.episodes)"],
        ["timesteps (frames)", f"{c['timesteps']:,}", f"measured {_code(c['manifest'])} (totals.frames)"],
        ["hours", f"{fmt.hours(c['hours'])} ({c['hours'] * 3600:,.1f} s)", f"measured {_code(c['manifest'])} "
         "(totals.hours = frames / fps / 3600)"],
        ["frames per episode, fps", f"{fmt.value(fpe)}, {fmt.value(fps)}",
         f"measured {_code(c['manifest'])} (totals.frames_per_episode.mean, dataset.fps)"],
        ["bytes, native", f"{fmt.size(b['native']['value'])} ({b['native']['value']:,.0f} bytes)",
         b["native"]["source"]],
        ["bytes, prepared", f"{fmt.size(b['prepared']['value'])} ({b['prepared']['value']:,.0f} bytes)",
         b["prepared"]["source"]],
    ])
    rows = [[label, *values, note] for label, values, note in coverage_rows(report)]
    covers = md_table(["against the target", *h["columns"], "how"], rows)
    lo, hi = min(t["share"] for t in c["targets"]), max(t["share"] for t in c["targets"])
    miss = [t["missing"] for t in c["targets"]]
    epochs = [t["epochs"] for t in c["targets"]]
    if hi < 1:
        nxt = (f"The corpus covers {fmt.share(lo)} to {fmt.share(hi)} of the target. To reach it with unique data "
               f"(π0's ~1-epoch regime), collect {' to '.join(fmt.hours(m['hours']) for m in miss)} more "
               f"({' to '.join(fmt.millions(m['episodes']) for m in miss)} episodes of {fmt.value(fpe)} frames; "
               f"{' to '.join(fmt.tb(m['storage_tb']['native']) for m in miss)} native, "
               f"{' to '.join(fmt.tb(m['storage_tb']['prepared']) for m in miss)} prepared). Training on this "
               f"corpus alone to the target means {' to '.join(fmt.sig(e) for e in epochs)} epochs over it, "
               "far outside the regime the equivalence assumes.")
    elif lo >= 1:
        nxt = (f"The corpus holds {fmt.share(lo)} to {fmt.share(hi)} of the target: one pass over "
               f"{fmt.sig(min(epochs) * 100)}-{fmt.sig(max(epochs) * 100)} % of it reaches the target; nothing "
               "is missing.")
    else:
        nxt = (f"The corpus covers {fmt.share(lo)} to {fmt.share(hi)} of the target: enough for the smaller "
               "target, not for the larger one (see the missing rows).")
    return "\n".join([
        f"Your corpus: {_code(c['manifest'])} (the {c['role']} manifest). Coverage is counted in timesteps, the unit "
        "of the equivalence; missing hours, episodes and TB convert the missing timesteps with the inputs' fps, "
        "frames per episode and GB/hr.",
        "",
        has,
        "",
        covers,
        "",
        one_epoch_text(c)[0].upper() + one_epoch_text(c)[1:] + ".",
        "",
        nxt,
    ])


def _mixture(report: dict[str, Any]) -> str:
    m = report["mixture"]
    ts = m["datasets"][0]["targets"]
    inputs = {i["name"]: i["value"] for i in report["inputs"]}
    weights = "given in the corpus file" if m["weights"] == "given" else "equal (every dataset weight 1)"
    head = ["dataset", "label", "weight", "share of samples", "share of timesteps", "hours", "storage native",
            "storage prepared", "samples per step"]
    for t in ts:
        head += [f"samples at {fmt.billions(t['timesteps'])}", f"epochs at {fmt.billions(t['timesteps'])}"]
    head.append("flag")
    rows = []
    for d in m["datasets"]:
        b = d["bytes"]
        tag = {k: "measured" if b[k]["source"].startswith("measured") else "estimated" for k in b}
        row = [d["name"], d["label"], fmt.value(d["weight"]), fmt.share(d["share"]), fmt.share(d["share_of_timesteps"]),
               fmt.hours(d["hours"]), f"{fmt.size(b['native']['value'])} ({tag['native']})",
               f"{fmt.size(b['prepared']['value'])} ({tag['prepared']})", fmt.sig(d["per_step"])]
        for t in d["targets"]:
            row += [fmt.millions(t["samples"]), fmt.sig(t["epochs"])]
        row.append(f"**oversampled** ({fmt.sig(d['sampling_ratio'])}x)" if d["oversampled"] else "")
        rows.append(row)
    labels = md_table(["label", "datasets", "hours", "timesteps", "share of samples"],
                      [[x["label"], x["datasets"], fmt.hours(x["hours"]), f"{x['timesteps']:,}", fmt.share(x["share"])]
                       for x in m["labels"]])
    r = m["reencode"]
    walls = md_table(["cores", "wall time"], [[f"{w['cores']:,}", fmt.duration(w["hours"] / 24)] for w in r["wall"]])
    out = [
        f"Corpus manifest {_code(m['corpus'])}"
        + (f", prepared {_code(m['prepared_corpus'])}" if m["prepared_corpus"] else "")
        + f". Weights: {weights}. Share of samples = weight / the sum of the weights of the datasets below; samples "
        "at T = share x T (T = pi0 steps x batch: seed defaults unless set); epochs = samples / the dataset's "
        f"timesteps; samples per step = share x the training batch ({fmt.value(inputs['train_batch'])}). A dataset "
        f"drawn more than {fmt.value(m['oversample_threshold'])}x as often as its share of the timesteps says is "
        "flagged **oversampled**: its samples repeat many more epochs than the rest (overfitting to it).",
        "",
        md_table(head, rows),
    ]
    flags = [d["flag"] for d in m["datasets"] if d["flag"]]
    if flags:
        out += ["", *(f"- {d['name']}: {d['flag']}" for d in m["datasets"] if d["flag"])]
    if m["left_out"]:
        out += ["", "Left out (failed in the corpus manifest; not in the shares):", "",
                *(f"- {x['name']}: {x['reason']}" for x in m["left_out"])]
    out += [
        "", "By label:", "", labels, "",
        "### Re-encoding the corpus (CPU time)",
        "",
        "```",
        f"camera frames = sum of timesteps x cameras = {r['camera_frames']:,}",
        f"CPU-hours     = {r['camera_frames']:,} x {r['cpu_ms_per_frame']:.4g} ms / 3.6e6 = {fmt.sig(r['cpu_hours'])}",
        "wall(N)       = CPU-hours / N cores",
        "```",
        "",
        walls,
        "",
        f"Per-frame cost: {r['source']}."
        + (f" Measured speed-up from 1 to 2 workers: {r['speedup_1_to_2_workers']:.2f}x." if
           r["speedup_1_to_2_workers"] else "") + f" {r['note'][0].upper()}{r['note'][1:]}.",
    ]
    return "\n".join(out)


def _origins(report: dict[str, Any]) -> str:
    rows = [[o["figure"], f"**{o['origin']}**" if o["origin"] == "seed default" else o["origin"],
             ", ".join(f"`{n}`" for n in o["seed_inputs"]) or "-", o["note"] or ""]
            for o in report["figure_origins"]]
    return "\n".join([
        "Each figure's origin is the least certain of its inputs' (inputs table): **seed default** = a built-in "
        "default of prep (the sizing document's figures), not a measurement of your data or hardware.",
        "",
        md_table(["figure", "origin", "seed-default inputs", "note"], rows),
    ])


def render_markdown(report: dict[str, Any]) -> str:
    report = printable_data(report)
    inputs = {i["name"]: i["value"] for i in report["inputs"]}
    h = report["headline"]
    parts = [
        "# π-equivalent pre-training budget",
        "",
        f"Generated by `prep budget` (prep {report['prep_version']}, {report['created_utc']}). "
        "Equivalence = matching π0's timesteps seen (steps x global batch). Every number below follows from "
        "the inputs table by the formulas shown.",
        "",
        f"Units and rounding: {report['units']['rounding']}",
        "",
        "## Headline",
        "",
        md_table(["", *h["columns"], "from"], [[r["label"], *r["values"], r["note"]] for r in h["rows"]]),
        "",
        "## Your corpus",
        "",
        _corpus(report),
        "",
        *(["## Mixture", "", _mixture(report), ""] if report.get("mixture") else []),
        *(["## Measured or seed default", "", _origins(report), ""] if report.get("figure_origins") else []),
        "## Inputs",
        "",
        _inputs(report),
        "",
        "## Throughput",
        "",
        _throughput(report, int(inputs["gpus_per_node"])),
        "",
        "## GPU memory",
        "",
        _memory(report),
        "",
        "## Target, data and storage",
        "",
        _targets(report, inputs),
        "## Days to the target vs nodes (data parallel)",
        "",
        _days(report, inputs),
        "",
        "## Landscape",
        "",
        _landscape(report, int(inputs["gpus_per_node"])),
        "",
    ]
    if report["plots"]:
        parts += ["## Plots", ""]
        parts += [f"![{PLOT_TITLES.get(p, p)}]({p})\n" for p in report["plots"]]
    if report["warnings"]:
        parts += ["## Warnings", "", *(f"- **{w}**" for w in report["warnings"]), ""]
    if report["notes"]:
        parts += ["## Notes", "", *(f"- {n}" for n in report["notes"]), ""]
    return "\n".join(parts)
