"""Strings from the data never drive the terminal (real CLI subprocesses, v2.1 and v3.0).

A camera key (a feature name: user data) holding ESC sequences, CR, LF and a bidi override, a template
and an info.json value holding them: every command that prints them (scan, verify, reencode, convert,
budget) shows them escaped (`\\x1b[2J`, `\\r`, `\\n`, `\\u202e`) through `pipeline.text.printable`, in
the terminal and in budget's Markdown, so that no screen is cleared and no line that looks like prep's
own (`FAILED    forged`) is forged; the JSON reports keep the exact string.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.faults import check_source, copy_tree, prep, scenario, scratch, short_paths, snapshot

from pipeline.synth import SynthSpec, write_synthetic
from pipeline.text import printable

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

TIMEOUT_S = 300
HOSTILE = "\x1b[2J\x1b[31m\rFAILED    forged\n\u202eX"
CAMERA = "observation.images.cam" + HOSTILE
ESCAPED = r"\x1b[2J\x1b[31m\rFAILED    forged\n\u202eX"
# What a terminal acts on: C0 controls but the newline ending prep's own lines, DEL, C1, bidi controls,
# line and paragraph separators.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
OTHER = {"v21": "v3.0", "v30": "v2.1"}


def assert_escaped(text: str, *, must_show: bool = True) -> None:
    m = RAW.search(text)
    assert m is None, f"raw {m.group()!r} at {m.start()} in {text[max(0, m.start() - 80):m.start() + 80]!r}"
    assert not any(line.startswith("FAILED    forged") for line in text.splitlines()), "a forged line"
    if must_show:
        assert ESCAPED in text, f"the escaped key is not shown:\n{text}"


def contains(value: Any, needle: str) -> bool:
    if isinstance(value, str):
        return needle in value
    if isinstance(value, dict):
        return any(contains(k, needle) or contains(v, needle) for k, v in value.items())
    if isinstance(value, list):
        return any(contains(v, needle) for v in value)
    return False


def hostile_corpus(layout: str) -> Path:
    """3 episodes, one camera with the hostile key; episode 1's video truncated (so tables list it)."""
    root = scratch() / "hostile" / layout
    if not root.exists():
        write_synthetic(root, SynthSpec(version="v2.1" if layout == "v21" else "v3.0", episodes=3, frames=30,
                                        height=96, width=128, cameras=(CAMERA,), episodes_per_file=1, seed=11))
        video = sorted((root / "videos").rglob("*.mp4"))[1]
        video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    return root


def run(args: list[str]) -> tuple[int, str]:
    r = prep(*args, timeout=TIMEOUT_S)
    text = r.stdout + r.stderr
    assert "Traceback" not in text, text
    return r.returncode, text


@pytest.mark.parametrize("command", ["scan", "verify", "reencode", "convert"])
@pytest.mark.parametrize("layout", ["v21", "v30"])
def test_camera_key_escaped(layout: str, command: str, tmp_path: Path) -> None:
    src = copy_tree(hostile_corpus(layout), tmp_path / "src")
    before = snapshot(src)
    out = tmp_path / "out"
    report = {"scan": tmp_path / "m.manifest.json", "verify": tmp_path / "v.json",
              "reencode": out / "prep/reencode_report.json", "convert": out / "prep/convert_report.json"}[command]
    args = {"scan": ["scan", str(src), "--out", str(report)],
            "verify": ["verify", str(src), "--out", str(report)],
            "reencode": ["reencode", str(src), "--dst", "224", "--out", str(out), "--accept-invalid-source"],
            "convert": ["convert", str(src), "--to", OTHER[layout], "--out", str(out)]}[command]
    with scenario(f"camera key with ESC/CR/LF/bidi ({layout}, {command})", "shown escaped (\\x1b, \\r, \\n, "
                  "\\u202e) in the terminal; the JSON report keeps it exact", bad_input=True) as row:
        code, text = run([*args, "--workers", "1", "--no-progress"])
        row.details = {"exit": code, "output": text[-2000:]}
        # episode 1's video is truncated: the run reports it (exit 1); v3.0 -> v2.1 refuses the cut up front
        refused = (command, layout) == ("convert", "v30")
        assert code == (2 if refused else 1), f"exit {code}\n{text}"
        assert_escaped(text)
        if refused:
            assert "cannot be cut out exactly by a stream copy" in text
            assert not (out / "meta/info.json").exists()
        else:
            doc = json.loads(report.read_text(encoding="utf-8"))
            assert contains(doc, CAMERA), f"{report.name} does not hold the exact key"
        check_source(row, before, src)
        row.observed = f"exit {code}: key shown as ...{ESCAPED}" + ("" if refused else f"; {report.name} exact")


@pytest.mark.parametrize("layout", ["v21", "v30"])
def test_budget_markdown_and_headline_escaped(layout: str, tmp_path: Path) -> None:
    """A manifest of the hostile corpus, in a folder whose name holds the same characters: budget's
    headline and report.md show both escaped, report.json keeps them."""
    src = hostile_corpus(layout)
    folder = tmp_path / ("manifests" + HOSTILE)
    folder.mkdir()
    manifest = folder / "native.manifest.json"
    code, _ = run(["scan", str(src), "--out", str(manifest), "--workers", "1", "--no-progress"])
    assert code == 1  # episode 1 failed; the manifest is written
    before = snapshot(folder)
    with scenario(f"budget on a manifest named with ESC/CR/LF/bidi ({layout})", "headline and report.md "
                  "escaped; report.json exact", bad_input=True) as row:
        code, text = run(["budget", "--native", str(manifest), "--out", str(tmp_path / "budget"), "--no-plots"])
        row.details = {"exit": code, "output": text[-2000:]}
        assert code == 0, text
        assert_escaped(text)
        md = (tmp_path / "budget/report.md").read_text(encoding="utf-8")
        assert_escaped(md)
        assert contains(json.loads((tmp_path / "budget/report.json").read_text(encoding="utf-8")), HOSTILE)
        check_source(row, before, folder)
        row.observed = "exit 0: headline and report.md escaped, report.json exact"


def _set_info(root: Path, key: str, value: Any) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info[key] = value
    path.write_text(json.dumps(info, indent=4))


CASES = [  # id, info.json key, value, the escaped value the line must show
    ("template", "data_path", "data/\x1b[2J\rFAILED    forged\n/{x}.parquet",
     r"data_path: template 'data/\x1b[2J\rFAILED    forged\n/{x}.parquet': control character '\x1b'"),
    ("fps-value", "fps", "\x1b[2J\rFAILED    forged\n", r"invalid fps '\x1b[2J\rFAILED    forged\n'"),
]


@pytest.mark.parametrize("command", ["scan", "verify", "reencode", "convert"])
@pytest.mark.parametrize("layout", ["v21", "v30"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_info_value_escaped_in_the_error(case: tuple[str, str, str, str], layout: str, command: str,
                                         tmp_path: Path) -> None:
    _case_id, key, value, shown = case
    src = copy_tree(hostile_corpus(layout), tmp_path / "src")
    _set_info(src, key, value)
    before = snapshot(src)
    args = {"scan": ["scan", str(src), "--out", str(tmp_path / "m.json")],
            "verify": ["verify", str(src)],
            "reencode": ["reencode", str(src), "--dst", "224", "--out", str(tmp_path / "out")],
            "convert": ["convert", str(src), "--to", OTHER[layout], "--out", str(tmp_path / "out")]}[command]
    with scenario(f"info.json {key} with ESC/CR/LF ({layout}, {command})", "exit 2, one error line, the value "
                  "escaped", bad_input=True) as row:
        r = prep(*args, "--workers", "1", "--no-progress", timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stderr": r.stderr[-1500:]}
        assert "Traceback" not in r.stdout + r.stderr
        assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"prep {command}: error: {src}/meta/info.json: "), r.stderr
        assert shown in lines[0], f"{shown!r} not in {lines[0]!r}"
        assert_escaped(r.stdout + r.stderr, must_show=False)
        check_source(row, before, src)
        row.observed = f"exit 2: {short_paths(lines[0].replace(str(src), '<src>'))[:160]}"


def test_printable_escapes_what_a_terminal_acts_on() -> None:
    """The one escape function: control, format and separator characters escaped, the rest kept, and
    idempotent (a second pass changes nothing)."""
    assert printable(HOSTILE) == ESCAPED
    assert printable("\x00\x7f\x85\u2028\u2029\u200b\udcff") == r"\x00\x7f\x85\u2028\u2029\u200b\udcff"
    kept = "épisode 東京 🤖 a\\b \u00a0"
    assert printable(kept) == kept
    assert printable(printable(HOSTILE)) == printable(HOSTILE)
