"""docs/walkthrough.md, run as a user of a clone runs it: every `$ command` of its console blocks, from the
checkout root, on the example dataset the repository carries (examples/g1_inspire_v21); each command's
output (stdout) must still be what the page shows, with timings and the checkout's path masked.

A block preceded by `<!-- not run: REASON -->` is shown but not run (e.g. one that needs a Ctrl-C). The
loading step runs when the LeRobot reader venvs are on this machine ($PREP_VENVS, as .ci/lerobot_envs.sh
makes them), the bench step when torch is importable; else those commands are skipped, never faked.

To refresh the page after a deliberate change of an output: `python tests/test_walkthrough.py` prints every
command's output as the page should show it."""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "walkthrough.md"
CLONE = "~/prep"  # where the page's outputs say the clone is
# where .ci/lerobot_envs.sh made the reader venvs: $PREP_VENVS, a search list like PATH
VENVS = [Path(p) for p in os.environ.get("PREP_VENVS", "/opt/prep-venvs").split(os.pathsep) if p]
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->")
# commands whose output is all measurement: only the shape is compared (the label of every line)
MEASURED = ("prep bench ",)
# lines that state sizes of re-encoded output: their sizes are masked (a fresh machine may resolve another
# PyAV wheel, whose x264 writes other bytes); the native side's sizes stay exact
ENCODED = re.compile(r"prepared|^files .* written")


@dataclass
class Step:
    command: str
    expected: list[str]
    line: int  # in the page, for messages
    run: bool = True
    why_not: str = ""
    output: list[str] = field(default_factory=list)


def steps(text: str) -> list[Step]:
    """The `$ command` lines of the page's fenced blocks (indented ones too), each with the lines below it."""
    found: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.search(before)
        j = i + 1
        block: list[tuple[int, str]] = []
        while j < len(lines) and lines[j].strip() != "```":
            block.append((j + 1, lines[j][indent:]))
            j += 1
        if block and block[0][1].startswith("$ "):
            for number, line in block:
                if line.startswith("$ "):
                    found.append(Step(line[2:], [], number, run=marker is None,
                                      why_not=marker.group(1) if marker else ""))
                else:
                    found[-1].expected.append(line)
        i = j + 1
    return found


def mask(text: str) -> str:
    """Timings and rates (they differ on every run and machine) as `#`; runs of spaces as one."""
    text = re.sub(r"\d[\d,]*(?:\.\d+)?(?= s\b)", "#", text)  # 21.5 s
    text = re.sub(r"\d[\d,]*(?:\.\d+)?(?= [\w.]+/s\b)", "#", text)  # 168 frames/s, 1.5 episodes/s
    text = re.sub(r"load average [\d.]+(?:-[\d.]+)?", "load average #", text)
    if ENCODED.search(text):  # sizes of what the encoder wrote depend on PyAV's x264 build, not on prep
        text = re.sub(r"\d[\d,]*(?:\.\d+)?(?= ?(?:GB/hr|TB|GB|MB|kB|x\b|x smaller|dB))", "#", text)
    return re.sub(r" {2,}", " ", text).rstrip()


def shape(line: str) -> str:
    """A measured line's label: its first word, or `-` for a rule."""
    words = line.split()
    return words[0] if words else ""


def compared(step: Step, lines: list[str]) -> list[str]:
    if step.command.startswith(MEASURED):
        return [shape(line) for line in lines]
    return [mask(line) for line in lines]


def make_clone(where: Path) -> Path:
    """What a clone holds that the page uses: examples/, and the reader venvs when this machine has them."""
    clone = where / "prep"
    clone.mkdir(parents=True)
    shutil.copytree(ROOT / "examples", clone / "examples")
    for env in ("v21", "v30"):  # where the page makes them: the clone's .venvs/
        venv = next((v / f"lerobot-{env}" for v in VENVS if (v / f"lerobot-{env}" / "bin" / "python").exists()), None)
        if venv is not None:
            (clone / ".venvs").mkdir(exist_ok=True)
            (clone / ".venvs" / f"lerobot-{env}").symlink_to(venv)
    bin_dir = where / "bin"
    bin_dir.mkdir()
    prep = bin_dir / "prep"  # `prep` on PATH, as with .venv activated: this checkout's prep
    prep.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} "
                    '-m pipeline.cli "$@"\n')
    prep.chmod(0o755)
    return clone


def unavailable(step: Step, cwd: Path) -> str:
    """Why this machine cannot run the step (a reader venv or torch missing), else ''."""
    venv = re.search(r"(\S*\.venvs/lerobot-v\d+)/bin/python", step.command)
    if venv and not (cwd / venv.group(1) / "bin" / "python").exists():
        return f"no {Path(venv.group(1)).name} (LeRobot reader venv) on this machine"
    if step.command.startswith("prep bench ") and importlib.util.find_spec("torch") is None:
        return "no torch in this environment"
    return ""


def run_steps(all_steps: list[Step], where: Path) -> list[Step]:
    clone = make_clone(where)
    cwd = clone
    env = {**os.environ, "PATH": f"{where / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    ran = []
    for step in all_steps:
        if not step.run:
            continue
        why = unavailable(step, cwd)
        if why:
            step.run, step.why_not = False, why
            continue
        here = where / "cwd"
        res = subprocess.run(["bash", "-c", 'eval "$1"; rc=$?; pwd > "$2"; exit $rc', "bash", step.command,
                              str(here)], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                             check=False)
        cwd = Path(here.read_text().strip())
        out = res.stdout.replace(str(clone), CLONE)
        step.output = out.splitlines()
        ran.append(step)
        expect_fail = any(line.startswith("FAILED") for line in step.expected)
        assert (res.returncode != 0) == expect_fail, (
            f"docs/walkthrough.md:{step.line}: `{step.command}` exited {res.returncode}\n{out[-2000:]}"
            f"\n{res.stderr[-2000:]}")
    return ran


@pytest.mark.slow
def test_walkthrough_outputs_match_the_page(tmp_path: Path) -> None:
    page = steps(PAGE.read_text(encoding="utf-8"))
    ran = run_steps(page, tmp_path)
    names = {s.command.split()[1] for s in ran if s.command.startswith("prep ")}
    assert {"scan", "verify", "reencode", "budget", "convert"} <= names, names  # the page was parsed
    wrong = []
    for step in ran:
        want, got = compared(step, step.expected), compared(step, step.output)
        if want != got:
            diff = "\n".join(difflib.unified_diff(want, got, "docs/walkthrough.md", "now", lineterm="", n=1))
            wrong.append(f"docs/walkthrough.md:{step.line}: `{step.command}` prints something else now:\n{diff}")
    assert not wrong, "\n\n".join(wrong)


def test_the_page_runs_from_a_clone() -> None:
    """No command of the page needs what a clone lacks: the test fixtures, this machine's /opt or /tmp."""
    page = steps(PAGE.read_text(encoding="utf-8"))
    assert page and page[0].command.startswith("mkdir -p out/walkthrough && cp -r examples/g1_inspire_v21 ")
    for step in page:
        assert "shared/fixtures" not in step.command and "/opt/" not in step.command, step.command
        assert "/tmp/" not in step.command, step.command
    assert (ROOT / "examples/g1_inspire_v21/LICENSE").is_file()
    size = sum(p.stat().st_size for p in (ROOT / "examples").rglob("*") if p.is_file())
    assert size < 6_000_000, f"examples/ is {size:,} bytes: keep the committed dataset small"


def test_the_parser_and_masking() -> None:
    text = ("x\n<!-- not run: needs a Ctrl-C -->\n```\n$ a b\nout 1.5 s (3 frames/s)\n```\n"
            "  ```\n  $ c\n  line\n  $ d\n  ```\n```bash\nnot a console\n```\n")
    got = steps(text)
    assert [(s.command, s.expected, s.run) for s in got] == [
        ("a b", ["out 1.5 s (3 frames/s)"], False), ("c", ["line"], True), ("d", [], True)]
    assert got[0].why_not == "needs a Ctrl-C"
    assert mask("time      6.6 s (1.5 episodes/s)") == mask("time      12.0 s (0.8 episodes/s)")
    assert mask("time      6.6 s (1.5 episodes/s)") == "time # s (# episodes/s)"
    assert mask("files     2 video files") != mask("files     3 video files")  # counts are compared


if __name__ == "__main__":  # print the outputs the page should show
    with tempfile.TemporaryDirectory(prefix="prep-walkthrough-") as tmp:
        for s in run_steps(steps(PAGE.read_text(encoding="utf-8")), Path(tmp)):
            print(f"$ {s.command}")
            print("\n".join(s.output))
            print()
