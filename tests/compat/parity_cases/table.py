"""The parity verdict of one row (case x reader line: lerobot 0.3 on v2.1, 0.4 and 0.6 on v3.0) and the
table: pure functions over the results the harness collected, so they run (and are tested) without LeRobot.

A row agrees when
- the real reader loads the source  <=>  `prep verify` (with and without --decode) reports no error, and
- every output `prep reencode` completes (meta/info.json written) loads in the real reader, with every
  frame the row's frame (and a depth camera's levels kept), and
- a source the reader loads is re-encoded (not refused), and
- verify's own `lerobot_loads` prediction, once it has one, is what the reader did.

A case may declare, per reader, why prep cannot agree (`Expect.cannot_agree`): such a row that disagrees is a
*known* disagreement, printed with its reason and counted apart; `--strict` fails on the others only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .model import LOADS, RAISES, REFUSES, SILENTLY_WRONG

KINDS = {
    "verify_false_error": "verify errs, the reader loads the source (refused although LeRobot loads it)",
    "verify_missed": "the reader refuses, raises or hands a wrong frame; verify --decode reports no error",
    "verify_nodecode_missed": "(info) verify without --decode misses what the reader trips over",
    "prediction_wrong": "verify's lerobot_loads prediction differs from the reader",
    "reencode_refused_loadable": "reencode refuses or fails a source the reader loads",
    "output_not_loadable": "reencode completed an output the reader refuses or raises on",
    "output_wrong": "reencode completed an output that loads but hands a wrong frame (or lost depth levels)",
    "harness_error": "the harness could not build or run the case",
}
INFO_ONLY = {"verify_nodecode_missed"}


def reader_loads(reader: dict[str, Any] | None) -> bool:
    return bool(reader) and reader.get("outcome") == LOADS


def verdict(row: dict[str, Any]) -> dict[str, Any]:
    """Agreement of one row: {"agree": bool, "kinds": [...], "why": [...]}."""
    kinds: list[str] = []
    why: list[str] = []
    if row.get("error"):
        return {"agree": False, "kinds": ["harness_error"], "why": [row["error"]]}
    loads = reader_loads(row["reader"])
    v, vd = row["verify"], row["verify_decode"]
    if loads and (v["has_error"] or vd["has_error"]):
        kinds.append("verify_false_error")
        why.append("verify: " + findings_text(v if v["has_error"] else vd))
    if not loads and not vd["has_error"]:
        kinds.append("verify_missed")
        why.append(f"reader {reader_text(row['reader'])}; verify --decode passes")
    if not loads and vd["has_error"] and not v["has_error"]:
        kinds.append("verify_nodecode_missed")
    for res in (v, vd):
        if res.get("lerobot_loads") is not None and res["lerobot_loads"] != loads:
            kinds.append("prediction_wrong")
            why.append(f"verify predicts lerobot_loads={res['lerobot_loads']}, "
                       f"the reader: {reader_text(row['reader'])}")
            break
    for r in row["reencode"]:
        tag = "" if r["variant"] == "default" else f" ({r['variant']})"
        if r["wrote_info"]:
            out = r.get("output_reader") or {}
            depth_lost = [c for c, d in (r.get("depth") or {}).items() if not d["preserved"]]
            if out.get("outcome") in (REFUSES, RAISES):
                kinds.append("output_not_loadable")
                why.append(f"output{tag} {reader_text(out)}")
            elif out.get("outcome") == SILENTLY_WRONG or depth_lost:
                kinds.append("output_wrong")
                why.append(f"output{tag} " + (reader_text(out) if out.get("outcome") == SILENTLY_WRONG else
                                             f"depth {depth_text(r['depth'])}"))
        elif loads:
            kinds.append("reencode_refused_loadable")
            why.append(f"reencode{tag} exit {r['rc']}: {r.get('summary', '')}")
    counted = [k for k in kinds if k not in INFO_ONLY]
    out: dict[str, Any] = {"agree": not counted, "kinds": list(dict.fromkeys(kinds)), "why": why}
    reason = (row.get("expect") or {}).get("cannot_agree") or ""
    if counted and reason:
        out["known"] = reason
    return out


# ---------------------------------------------------------------- text


def short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def backend_text(r: dict[str, Any]) -> str:
    o = r["outcome"]
    if o == LOADS:
        return "loads"
    if o == REFUSES:
        return "refuses"
    if o == RAISES:
        return f"raises@{r.get('sample')}"
    fw = r.get("first_wrong") or {}
    return f"wrong@{fw['sample']}" if "sample" in fw else "wrong"


def reader_text(reader: dict[str, Any] | None) -> str:
    if not reader:
        return "-"
    per = reader.get("backends", {})
    texts = {b: backend_text(r) for b, r in per.items()}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return " ".join(f"{'tc' if b == 'torchcodec' else b}:{t}" for b, t in texts.items())


def findings_text(v: dict[str, Any], width: int = 44) -> str:
    if not v["has_error"]:
        return "pass" + (f" ({len(v['warnings'])} warn)" if v.get("warnings") else "")
    if v["rc"] == 2:
        return short("exit2 " + (v["errors"][-1].get("found") or ""), width)
    checks: dict[str, list[str]] = {}
    for f in v["errors"]:
        checks.setdefault(f.get("check") or "?", [])
        ep = f.get("episode")
        if ep is not None and str(ep) not in checks[f.get("check") or "?"]:
            checks[f.get("check") or "?"].append(str(ep))
    parts = [f"{c}({','.join(eps[:3])}{'..' if len(eps) > 3 else ''})" if eps else c for c, eps in checks.items()]
    return short("FAIL " + " ".join(parts), width) if parts else f"exit{v['rc']}"


def depth_text(depth: dict[str, Any]) -> str:
    return ", ".join(f"{d['source_levels']}->{d['output_levels']} levels ({d['output_pix_fmt']})"
                     for d in depth.values())


def reencode_text(r: dict[str, Any]) -> str:
    if r["wrote_info"]:
        return "ok" if r["rc"] == 0 else f"exit{r['rc']}+info"
    n = len(r.get("failures") or [])
    return f"exit{r['rc']}" + (f" {n} failed" if n else "")


def output_text(r: dict[str, Any]) -> str:
    if not r["wrote_info"]:
        return "-"
    text = reader_text(r.get("output_reader"))
    lost = [d for d in (r.get("depth") or {}).values() if not d["preserved"]]
    if lost:
        text += f", depth {lost[0]['source_levels']}->{lost[0]['output_levels']}"
    return text


def line_text(row: dict[str, Any]) -> str:
    """"0.6 v3.0" (rows of before the reader lines: the format alone)."""
    return f"{row['line']} {row['format']}" if row.get("line") else row["format"]


COLUMNS = ("case", "lerobot", "reader (tc, pyav)", "expected", "verify", "verify --decode", "reencode", "output loads",
           "agree")


def table_rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for row in rows:
        v = row["verdict"]
        if row.get("error"):
            out.append((row["case"], line_text(row), "-", "-", "-", "-", "-", "-", "ERROR " + short(row["error"], 60)))
            continue
        exp = row["expect"]["outcome"]
        got = row["reader"]["outcome"]
        expect_cell = "=" if exp == got else f"!{exp}"
        agree = "yes" if v["agree"] else "NO " + ",".join(k for k in v["kinds"] if k not in INFO_ONLY)
        if v.get("known"):
            agree += " (known: see below)"
        re = row["reencode"]
        out.append((row["case"], line_text(row), reader_text(row["reader"]), expect_cell,
                    findings_text(row["verify"]), findings_text(row["verify_decode"]),
                    " / ".join(reencode_text(r) for r in re), " / ".join(output_text(r) for r in re), agree))
    return out


def render(rows: list[dict[str, Any]]) -> str:
    body = table_rows(rows)
    cells = [COLUMNS, *body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    for row in rows:
        for k in row["verdict"]["kinds"]:
            kinds[k] += 1
    reader: Counter[str] = Counter(row["reader"]["outcome"] for row in rows if row.get("reader"))
    return {
        "rows": len(rows),
        "cases": len({row["case"] for row in rows}),
        "agree": sum(1 for row in rows if row["verdict"]["agree"]),
        "disagree": sum(1 for row in rows if not row["verdict"]["agree"]),
        # disagreements a case declares prep cannot avoid, with the reason; `unexplained` are all the others
        "known": [f"{row['case']} {line_text(row)}: {row['verdict']['known']}" for row in rows
                  if not row["verdict"]["agree"] and row["verdict"].get("known")],
        "unexplained": sum(1 for row in rows if not row["verdict"]["agree"] and not row["verdict"].get("known")),
        "disagree_by_kind": dict(sorted(kinds.items())),
        "reader_outcomes": dict(sorted(reader.items())),
        "per_reader": per_reader(rows),
        "expectation_mismatches": [f"{r['case']} {line_text(r)}" for r in rows
                                   if r.get("reader") and r["reader"]["outcome"] != r["expect"]["outcome"]],
    }


def per_reader(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Rows and agreeing rows per reader line ("0.6": {"rows": 31, "agree": 31})."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        d = out.setdefault(row.get("line") or row["format"], {"rows": 0, "agree": 0})
        d["rows"] += 1
        d["agree"] += int(row["verdict"]["agree"])
    return dict(sorted(out.items()))


def render_by_reader(rows: list[dict[str, Any]]) -> str:
    """One line per case, one column per reader line (0.3 / 0.4 / 0.6): what the reader did with the source
    and whether the row agrees ("loads ok", "refuses ok", "loads NO reencode_refused_loadable"; "-": the
    reader does not read the case's formats)."""
    lines = sorted({row.get("line") or row["format"] for row in rows})
    cases = list(dict.fromkeys(row["case"] for row in rows))
    by = {(row["case"], row.get("line") or row["format"]): row for row in rows}

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        if row.get("error"):
            return "ERROR"
        v = row["verdict"]
        tag = "ok" if v["agree"] else "NO " + ",".join(k for k in v["kinds"] if k not in INFO_ONLY)
        return f"{reader_text(row['reader'])} {tag}"

    body = [(c, *(cell(by.get((c, ln))) for ln in lines)) for c in cases]
    head = ("case", *(f"lerobot {ln}" for ln in lines))
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    out = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in [head, *body]]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
