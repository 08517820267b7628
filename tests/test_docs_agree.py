"""The docs agree with the code and with each other (issue 36: two venvs or three; disk 20-25, 30 or 22 GB; "one
pip cache" against none; exit code 4 missing from the README; `edit` missing from its docs list; a failing suite
reported as current; a budget help citing a document the user cannot see; examples/load.py warning under 0.6.1).

Every `prep ...` command line quoted in README.md and docs/*.md is checked against the real parser: its command
exists, every --option is one of that command's own, and an example (a code block's line,
without synopsis brackets or alternatives) parses. Every figure or path stated in more
than one place is read from each place and compared."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.cli import build_parser
from pipeline.commands import COMMANDS
from pipeline.commands.argtypes import check_option_names, innermost_parser, subparsers

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")
SYNOPSIS = re.compile(r"[\[\]<>|]|\.\.\.")
PLACEHOLDER_VALUES = {"N": "2", "K": "2", "SECONDS": "30", "MINUTES": "1"}


def text(rel: str) -> str:
    return (REPO / rel).read_text(encoding="utf-8")


def quoted_commands() -> list[tuple[str, str, bool]]:
    """(where, command line, complete example?) of every `prep ...` in the pages: code-block lines (a `$ ` prompt,
    `a && prep ...` chains and trailing comments taken off) and inline code spans."""
    found = []
    for page in PAGES:
        in_code = False
        for no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                in_code = not in_code
                continue
            where = f"{page.relative_to(REPO)}:{no}"
            if in_code:
                s = line.strip().removeprefix("$ ")
                for part in re.split(r"\s+(?:&&|;)\s+", s):
                    if part.startswith("prep ") and not re.match(r"prep [\w-]+:", part):  # not prep's own output
                        found.append((where, part.split("  #")[0].split(" # ")[0].strip(), True))
            else:
                found += [(where, m.group(1), False) for m in re.finditer(r"`(prep [^`]+)`", line)
                          if not re.match(r"prep [\w-]+:", m.group(1))]
    return found


def test_the_pages_quote_commands() -> None:
    commands = quoted_commands()
    assert len(commands) > 100
    assert {c.split()[1] for _, c, _ in commands} >= set(COMMANDS)


@pytest.mark.parametrize(("where", "line", "example"), quoted_commands(), ids=lambda v: str(v)[:60])
def test_every_quoted_command_agrees_with_the_parser(where: str, line: str, example: bool) -> None:
    words = shlex.split(line.replace("\\|", "|"))[1:]
    if words[0] in ("--help", "--version", "CMD"):
        return
    command = words[0]
    assert command in COMMANDS, f"{where}: `{line}`: no command {command!r}"
    parser = build_parser(command)
    sub = subparsers(parser)[command]
    options = [w.strip("[]") for word in words[1:] for w in word.split("|") if w.strip("[]").startswith("--")]
    try:
        check_option_names(sub, [*(words[1:2] if command == "bench" else []), *options])
    except SystemExit:
        pytest.fail(f"{where}: `{line}`: an option {command} does not have")
    if not example or SYNOPSIS.search(line):  # an inline mention or a synopsis: its names are checked above
        return
        return
    argv = [PLACEHOLDER_VALUES.get(w, w) for w in words]
    try:
        _args, extra = parser.parse_known_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `{line}` does not parse")
    assert not extra, f"{where}: `{line}`: {extra} not taken by `{innermost_parser(parser, argv).prog}`"


# ---- figures and paths stated in more than one place ------------------------------------------------


def test_disk_figures_agree() -> None:
    """A full test.sh ~30 GB, --no-lerobot ~7 GB, demo ~0.8 GB, the reader venvs and root ~22 GB (the sum of
    compatibility.md's table), everywhere they are stated; the former 20-25 GB nowhere."""
    readme, install = text("README.md"), text("docs/install.md")
    assert "Disk: `demo.sh` ~0.8 GB; a full `test.sh` ~30 GB free (`--no-lerobot`: ~7 GB)" in readme
    assert "needs ~30 GB free on a fresh machine; `bash scripts/test.sh\n--no-lerobot` ~7 GB" in install
    assert "| the checkout | ~0.8 GB |" in install
    for rel in ("scripts/setup.sh", "scripts/python.sh", ".ci/fresh_root.sh"):
        assert "~30 GB" in text(rel), rel
    table = re.findall(r"\| ~\d+ min \| ([\d.]+) GB(?: \+ ([\d.]+) GB root)? \|", text("docs/compatibility.md"))
    assert len(table) == 3
    venvs = sum(float(a) + float(b or 0) for a, b in table)
    for rel, pattern in (("docs/install.md", r"Debian 13 root \| `/opt/prep-venvs` \| ~(\d+) GB"),
                         ("docs/development.md", r"three reader venvs \(~20 min, ~(\d+) GB"),
                         (".ci/fresh_root.sh", r"Debian 13 root ~(\d+)GB|Debian 13 root ~(\d+) GB")):
        m = re.search(pattern, text(rel))
        assert m, rel
        assert int(next(g for g in m.groups() if g)) == round(venvs), rel
    every = "\n".join(p.read_text(encoding="utf-8") for p in [*PAGES, REPO / "scripts/setup.sh"])
    assert "20-25 GB" not in every


def test_reader_venvs_agree() -> None:
    """Three reader venvs (compatibility.md's table = the script's default list); the walkthrough's two are made
    with the LEROBOT_ENVS that names exactly those two; no page says "two" where the script makes three."""
    script = text(".ci/lerobot_envs.sh")
    default = re.search(r'WANT="\$\{LEROBOT_ENVS:-([^}]*)\}"', script)
    assert default
    envs = default.group(1).split()
    table = re.findall(r"^\| `/opt/prep-venvs/lerobot-(v\d+)` \|", text("docs/compatibility.md"), flags=re.M)
    assert table == envs == ["v21", "v30", "v06"]
    for rel in ("README.md", "docs/install.md", "docs/development.md"):
        said = re.findall(r"\b(two|three|four) (?:LeRobot )?(?:reader )?(?:virtual )?(?:environments|venvs|envs)\b",
                          text(rel))
        assert said and set(said) == {"three"}, (rel, said)
    walk = text("docs/walkthrough.md")
    made = re.search(r'`PREP_VENVS=\$PWD/\.venvs LEROBOT_ENVS="([^"]+)" bash \.ci/lerobot_envs\.sh`', walk)
    assert made, "the walkthrough names the venvs it makes"
    used = sorted(set(re.findall(r"\.\./\.\./\.venvs/lerobot-(v\d+)/bin/python", walk)))
    assert sorted(made.group(1).split()) == used == ["v21", "v30"]
    assert "two venvs of their own" in walk


def test_the_pip_cache_is_described_as_the_script_does() -> None:
    script = text(".ci/lerobot_envs.sh")
    assert 'if [[ -z ${PIP_CACHE_DIR:-} ]]; then export PIP_NO_CACHE_DIR=1; fi' in script
    every = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    assert "one pip cache" not in every and "with their pip cache" not in every and ".pip-cache" not in every
    assert "The reader venvs are built without a pip cache" in text("docs/install.md")


def test_exit_codes_agree() -> None:
    """0-4 in the README, the walkthrough and safety.md; 4 is what a cluster fault exits with in the code."""
    from pipeline.errors import ClusterError

    assert int(ClusterError("x").exit_code) == 4
    for rel in ("README.md", "docs/walkthrough.md", "docs/safety.md"):
        flat = " ".join(text(rel).split())
        for code, words in ((1, "check"), (2, "refusal"), (3, "cannot be written"), (4, "cluster failed")):
            assert re.search(rf"\b{code} (?:means )?(?:the |a |some |bad )?[^,.;]*{words}", flat), (rel, code)


def test_every_command_is_listed_everywhere() -> None:
    readme = text("README.md")
    table = re.findall(r"^\| `prep (\w+)", readme, flags=re.M)
    docs_list = readme.split("- Commands:", 1)[1].split("\n- ", 1)[0]
    toc = text("docs/README.md")
    for name in COMMANDS:
        assert name in table, f"README table lacks {name}"
        assert f"[{name}](docs/{name if name != 'bench' else 'bench'}.md)" in docs_list, f"README docs list: {name}"
        assert f"`prep {name}" in toc, f"docs/README.md lacks {name}"


def test_development_reports_no_failing_suite_as_current() -> None:
    dev = " ".join(text("docs/development.md").split())
    assert "fails on the machine's own checkout of main too" not in dev
    for m in re.finditer(r"\b([1-9]\d*) (?:failed|that failed)\b", dev):
        assert "pass since" in dev[m.end():m.end() + 400], dev[m.start():m.end() + 200]


def test_budget_help_cites_nothing_the_user_cannot_see() -> None:
    parser = build_parser("budget")
    help_text = " ".join(subparsers(parser)["budget"].format_help().split())
    assert "sizing document" not in help_text and "doc:" not in help_text and "document:" not in help_text
    assert "each shown below with its option" in help_text


def test_readme_block_installs_what_command_6_needs() -> None:
    """The six-command block: the line before `prep bench dataloader` says it needs PyTorch and installs it; the
    LeRobotDataset snippet names the reader it needs."""
    readme = text("README.md")
    block = readme.split("## Prepare your own corpus", 1)[1].split("```bash", 1)[1].split("```", 1)[0].splitlines()
    bench = next(i for i, line in enumerate(block) if line.startswith("prep bench dataloader"))
    assert "pip install torch" in block[bench - 1] and "'lerobot-prep[bench]'" in block[bench - 1]
    assert "PyTorch" in block[bench - 2]
    snippet = readme.split("```python", 1)[1].split("```", 1)[0]
    assert "lerobot 0.3.x" in snippet.splitlines()[1]  # the line above the import names the reader


LEROBOT_STUB = '''
import warnings

class Info:  # lerobot 0.6's DatasetInfo: dict-style access warns
    codebase_version = "v3.0"
    def __getitem__(self, key):
        warnings.warn(f"Accessing DatasetInfo with dict-style syntax info[{key!r}] is deprecated.",
                      DeprecationWarning, stacklevel=2)
        return getattr(self, key)

class Shaped:
    shape = (3, 4, 4)

class LeRobotDataset:
    def __init__(self, repo_id, root):
        self.meta = type("Meta", (), {"info": INFO})()
        self.num_episodes, self.num_frames, self.fps = 2, 200, 30
    def __getitem__(self, i):
        return {"observation.images.cam": Shaped()}
'''


@pytest.mark.parametrize(("generation", "info"), [("0.6", "Info()"), ("0.3", '{"codebase_version": "v2.1"}')])
def test_examples_load_runs_without_deprecation_warnings(generation: str, info: str, tmp_path: Path) -> None:
    """examples/load.py against a stand-in for each reader's `ds.meta.info` (a DatasetInfo whose dict access warns,
    as lerobot 0.6.1's; a dict, as 0.3.x's), with warnings as errors."""
    pkg = tmp_path / "lerobot/datasets"
    pkg.mkdir(parents=True)
    (tmp_path / "lerobot/__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "lerobot_dataset.py").write_text(textwrap.dedent(LEROBOT_STUB).replace("INFO", info) + "\n")
    res = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", str(REPO / "examples/load.py"),
                          str(tmp_path / "ds")], capture_output=True, text=True, check=False,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == f"{'v3.0' if generation == '0.6' else 'v2.1'} 2 episodes 200 frames 30 fps"
