"""Hostile metadata and bad values through every command that reads them (real CLI subprocesses).

Each case is run per layout (v2.1, v3.0) and per command that reads the input (scan, verify, reencode,
convert on a dataset; budget on manifests and TOML), and must end with the exact outcome: the exit code,
exactly one line naming the file, the key (or line) and the bad value, escaped; no traceback; nothing
written; the inputs unchanged; within a subprocess timeout (never a speed assertion).

- info.json path templates (pipeline/dataset/template.py): attribute access in a nested format spec,
  a 999,999,999-wide field, an embedded NUL;
- JSON and TOML nested 2,000+ deep (pipeline/bounded.py): meta/info.json, an episodes.jsonl line (v2.1),
  meta/stats.json (v3.0), a --native / --prepared manifest, a --config / --landscape TOML; and the bound
  itself (100 levels) still accepted;
- a parquet footer claiming 10^15 rows against 30 (what every reader generation does with it: raise);
- a dataset without a camera (state and action only): reencode's summary and budget's storage.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.faults import check_source, copy_tree, corpus, prep, scenario, short_paths, snapshot
from support.parquet_footer import set_num_rows

from pipeline.manifest import table_path_for
from pipeline.synth import SynthSpec, write_synthetic

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

TIMEOUT_S = 180  # a refusal takes seconds; the bound catches a hang or a 1 GB path per episode
DEEP = 3000
DATASET_COMMANDS = ("scan", "verify", "reencode", "convert")
LAYOUTS = ("v21", "v30")
OTHER = {"v21": "v3.0", "v30": "v2.1"}


def command_args(name: str, src: Path, tmp: Path, layout: str) -> tuple[list[str], Path]:
    """The command line of `name` on `src`, and the output it would write."""
    outs = {"scan": tmp / "m.manifest.json", "verify": tmp / "v.json", "reencode": tmp / "out",
            "convert": tmp / "conv"}
    args = {"scan": ["scan", str(src), "--out", str(outs["scan"])],
            "verify": ["verify", str(src), "--out", str(outs["verify"])],
            "reencode": ["reencode", str(src), "--dst", "224", "--out", str(outs["reencode"])],
            "convert": ["convert", str(src), "--to", OTHER[layout], "--out", str(outs["convert"])]}[name]
    return [*args, "--workers", "1", "--no-progress"], outs[name]


def deep_list(levels: int) -> str:
    return "[" * levels + "]" * levels


def _set_info(root: Path, key: str, raw_json: str) -> None:
    """Set info.json's `key` to a JSON text written as it is (indent kept: the line numbers are stable)."""
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info[key] = "__VALUE__"
    path.write_text(json.dumps(info, indent=4).replace('"__VALUE__"', raw_json))


def assert_one_line(stderr: str, command: str, pattern: re.Pattern[str], extra_tail: bool = False) -> str:
    """Exactly one `prep CMD: error:` line matches `pattern` (and, for a metadata refusal, the one summary
    line after it); no other line; nothing raw that a terminal would act on."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert all(line.startswith(f"prep {command}: error: ") for line in lines), stderr
    hits = [line for line in lines if pattern.search(line)]
    assert len(hits) == 1, f"{command}: expected one line matching {pattern.pattern}:\n{stderr}"
    assert len(lines) == (2 if extra_tail else 1), stderr
    if extra_tail:
        assert "nothing was started" in lines[-1], lines[-1]
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", stderr), f"raw control character in {stderr!r}"
    return hits[0].split("error: ", 1)[1]


# ---- info.json path templates ---------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateCase:
    id: str
    title: str
    key: str
    template: dict[str, str]  # layout -> the template
    message: str  # regex after "{root}/meta/info.json: {key}: template '...': "


V21_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V30_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TEMPLATE_CASES = [
    TemplateCase("nested-attribute", "a nested format spec with attribute access", "data_path",
                 {"v21": "data/chunk-{episode_chunk:03d}/episode_{episode_index:{episode_index.real.nope}}.parquet",
                  "v30": "data/chunk-{chunk_index:03d}/file-{file_index:{file_index.real.nope}}.parquet"},
                 r"attribute or index access '(episode|file)_index\.real\.nope': only the plain fields "),
    TemplateCase("huge-width", "a 999,999,999-wide field", "video_path",
                 {"v21": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:>999999999}.mp4",
                  "v30": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:>999999999}.mp4"},
                 r"format spec '>999999999': width 999,999,999 is above 64"),
    TemplateCase("nul", "an embedded NUL", "data_path",
                 {"v21": V21_DATA.replace(".parquet", "\x00.parquet"),
                  "v30": V30_DATA.replace(".parquet", "\x00.parquet")},
                 r"control character '\\x00' \(a path cannot hold it\)"),
]


@pytest.mark.parametrize("command", DATASET_COMMANDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", TEMPLATE_CASES, ids=[c.id for c in TEMPLATE_CASES])
def test_template_refused(case: TemplateCase, layout: str, command: str, tmp_path: Path) -> None:
    src = copy_tree(corpus(layout), tmp_path / "src")
    _set_info(src, case.key, json.dumps(case.template[layout]))
    before = snapshot(src)
    args, out = command_args(command, src, tmp_path, layout)
    pattern = re.compile(re.escape(f"{src}/meta/info.json: {case.key}: template '") + r".*': " + case.message)
    with scenario(f"info.json {case.key}: {case.title} ({layout}, {command})",
                  "exit 2, one line naming info.json, the key and the escaped template; nothing written",
                  bad_input=True) as row:
        r = prep(*args, timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stderr": r.stderr[-800:]}
        assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        line = assert_one_line(r.stderr, command, pattern)
        assert r.stdout == "", r.stdout
        assert not out.exists() and not Path(f"{out}.parts").exists(), f"{command} wrote {out}"
        check_source(row, before, src)
        row.observed = f"exit 2: {short_paths(line.replace(str(src), '<src>'))[:160]}"


# ---- JSON and TOML nested too deep ------------------------------------------------------------------


def deep_info(root: Path) -> tuple[str, str]:
    _set_info(root, "robot_type", deep_list(DEEP))
    return ("meta/info.json",
            r": JSON refused at line \d+ column \d+: nested deeper than 100 levels \(at robot_type\[0\]")


def deep_episode_line(root: Path) -> tuple[str, str]:
    path = root / "meta/episodes.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:-1] + ', "extra": ' + deep_list(DEEP) + "}"
    path.write_text("\n".join(lines) + "\n")
    return "meta/episodes.jsonl", r":2: line refused \(nested deeper than 100 levels \(at extra\[0\]"


def deep_stats(root: Path) -> tuple[str, str]:
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    stats["extra"] = "__VALUE__"
    path.write_text(json.dumps(stats).replace('"__VALUE__"', deep_list(DEEP)))
    return "meta/stats.json", r": JSON refused at line 1 column \d+: nested deeper than 100 levels \(at extra\[0\]"


JSON_CASES: list[tuple[str, str, Callable[[Path], tuple[str, str]], bool]] = [
    # id, layout, fault (-> file, message after the file), refused as a metadata problem (+1 summary line)
    ("info-v21", "v21", deep_info, False),
    ("info-v30", "v30", deep_info, False),
    ("episodes-jsonl-v21", "v21", deep_episode_line, True),
    ("stats-json-v30", "v30", deep_stats, True),
]


@pytest.mark.parametrize("command", DATASET_COMMANDS)
@pytest.mark.parametrize("case", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_deep_json_refused(case: tuple[str, str, Callable[[Path], tuple[str, str]], bool], command: str,
                           tmp_path: Path) -> None:
    case_id, layout, fault, metadata = case
    src = copy_tree(corpus(layout), tmp_path / "src")
    rel, message = fault(src)
    before = snapshot(src)
    args, out = command_args(command, src, tmp_path, layout)
    pattern = re.compile(re.escape(str(src / rel)) + message)
    if command == "scan" and case_id.startswith("stats-json"):
        # scan does not need meta/stats.json to count storage and hours (pipeline/checks.py): the same
        # one line, as a warning, and the scan goes on
        r = prep(*args, timeout=TIMEOUT_S)
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stdout + r.stderr
        assert any(line.startswith("warning   ") and pattern.search(line) for line in r.stdout.splitlines()), r.stdout
        assert snapshot(src) == before
        return
    with scenario(f"JSON {DEEP} deep: {rel} ({layout}, {command})",
                  "exit 2, one line naming the file, the line and the key path; nothing written",
                  bad_input=True) as row:
        r = prep(*args, timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stderr": r.stderr[-800:]}
        assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        line = assert_one_line(r.stderr, command, pattern, extra_tail=metadata)
        assert not out.exists(), f"{command} wrote {out}"
        check_source(row, before, src)
        row.observed = f"exit 2: {short_paths(line.replace(str(src), '<src>'))[:160]}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_json_at_the_depth_bound_is_read(layout: str, tmp_path: Path) -> None:
    """100 levels (the bound) in info.json and, for v2.1, in an episodes.jsonl line: every later reader
    (schema validation, the engine, the manifest) handles them; scan exits 0."""
    src = copy_tree(corpus(layout), tmp_path / "src")
    _set_info(src, "robot_extra", deep_list(99))  # 99 inside info.json's own object: 100 levels
    if layout == "v21":
        path = src / "meta/episodes.jsonl"
        lines = path.read_text().splitlines()
        lines[1] = lines[1][:-1] + ', "extra": ' + deep_list(99) + "}"
        path.write_text("\n".join(lines) + "\n")
    args, out = command_args("scan", src, tmp_path, layout)
    with scenario(f"JSON 100 deep (the bound) in info.json ({layout}, scan)", "read as before: exit 0") as row:
        r = prep(*args, timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stderr": r.stderr[-800:]}
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr
        assert json.loads(out.read_text())["totals"]["episodes"] == 4
        row.observed = "exit 0, 4 episodes"


def _budget_inputs(tmp: Path) -> Path:
    folder = tmp / "inputs"
    folder.mkdir()
    return folder


BUDGET_CASES: list[tuple[str, str, Callable[[Path], list[str]], str]] = [
    # id, file written, args (given the file), message after "<file>: "
    ("native-manifest", "deep.manifest.json", lambda p: ["--native", str(p)],
     r"cannot read manifest: nested deeper than 100 levels \(at dataset/robot_type\[0\]"),
    ("prepared-manifest", "deep.manifest.json", lambda p: ["--prepared", str(p)],
     r"cannot read manifest: nested deeper than 100 levels \(at dataset/robot_type\[0\]"),
    ("dataset-manifest", "ds/prep/manifest.json", lambda p: [str(p.parent.parent)],
     r"cannot read manifest: nested deeper than 100 levels \(at dataset/robot_type\[0\]"),
    ("config-arrays", "deep.toml", lambda p: ["--config", str(p)],
     r"cannot read config: nested deeper than 100 levels \(in 'pi0_batch', at line 2, column \d+\)"),
    ("config-inline-tables", "deep.toml", lambda p: ["--config", str(p)],
     r"cannot read config: nested deeper than 100 levels \(in 'pi0_batch', at line 2, column \d+\)"),
    ("config-dotted-keys", "deep.toml", lambda p: ["--config", str(p)],
     r"cannot read config: nested deeper than 100 levels \(at model/k/k/k\.\.\. \(101 levels deep\)\)"),
    ("landscape-arrays", "deep.toml", lambda p: ["--landscape", str(p)],
     r"cannot read landscape file: nested deeper than 100 levels \(in 'x', at line 2, column \d+\)"),
]


def _budget_file(case_id: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if "manifest" in case_id:
        path.write_text('{"schema": "prep.manifest/1", "dataset": {"robot_type": ' + deep_list(DEEP) + "}}")
    elif case_id == "config-arrays":
        path.write_text("[model]\npi0_batch = " + deep_list(DEEP) + "\n")
    elif case_id == "config-inline-tables":
        path.write_text("[model]\npi0_batch = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n")
    elif case_id == "config-dotted-keys":
        path.write_text("[model]\n" + ".".join(["k"] * DEEP) + " = 1\n")
    else:
        path.write_text('schema = "x"\nx = ' + deep_list(DEEP) + "\n")


@pytest.mark.parametrize("case", BUDGET_CASES, ids=[c[0] for c in BUDGET_CASES])
def test_budget_deep_input_refused(case: tuple[str, str, Callable[[Path], list[str]], str], tmp_path: Path) -> None:
    case_id, rel, args_of, message = case
    inputs = _budget_inputs(tmp_path)
    path = inputs / rel
    _budget_file(case_id, path)
    before = snapshot(inputs)
    out = tmp_path / "budget"
    shown = str(path.parent.parent / "prep/manifest.json") if case_id == "dataset-manifest" else str(path)
    pattern = re.compile(re.escape(shown) + ": " + message)
    with scenario(f"budget: {case_id} {DEEP} deep", "exit 2, one line naming the file and the key or line; no "
                  "report", bad_input=True) as row:
        r = prep("budget", *args_of(path), "--out", str(out), "--no-plots", timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stderr": r.stderr[-800:]}
        assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        line = assert_one_line(r.stderr, "budget", pattern)
        assert not (out / "report.json").exists() and not (out / "report.md").exists()
        check_source(row, before, inputs)
        row.observed = f"exit 2: {short_paths(line.replace(str(inputs), '<in>'))[:160]}"


# ---- a parquet footer claiming 10^15 rows -------------------------------------------------------------

CLAIM = 10**15
FOOTER_OUTCOME = {  # command -> (exit code, a line on stdout that must name the file)
    "scan": (1, r"FAILED    episode {ep}: {file}: the footer's row group 0 claims 1,000,000,000,000,000 rows where "
                r"its pages hold {rows}: LeRobot {readers} raise\(s\) loading this file \(datasets' parquet loader: "
                r"OverflowError above 2,147,483,647 rows a row group\)"),
    "verify": (1, r"error +{ep} +- +parquet_readable +a readable parquet file +unreadable parquet"),
    "reencode": (1, r"error +{ep} +- +parquet_readable +a readable parquet file +unreadable parquet"),
    "convert": (1, r"FAILED .*: (episode {ep}: )?{file}: unreadable parquet"),
}


@pytest.mark.parametrize("command", DATASET_COMMANDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_footer_claims_too_many_rows(layout: str, command: str, tmp_path: Path) -> None:
    """No command calls such an episode sound: scan fails it saying what the readers do (LeRobot 0.3.3,
    0.4.4 and 0.6.1, through `datasets`, raise OverflowError above 2^31-1 rows a row group: measured),
    verify and reencode report it unreadable, convert fails its file; the other episodes go on."""
    src = copy_tree(corpus(layout), tmp_path / "src")
    rel = "data/chunk-000/episode_000001.parquet" if layout == "v21" else "data/chunk-000/file-000.parquet"
    rows = pq.read_metadata(src / rel).num_rows
    set_num_rows(src / rel, CLAIM)
    assert pq.read_metadata(src / rel).num_rows == CLAIM
    episodes = [1] if layout == "v21" else [0, 1]  # the v3.0 corpus holds 2 episodes a file
    before = snapshot(src)
    args, out = command_args(command, src, tmp_path, layout)
    code, template = FOOTER_OUTCOME[command]
    readers = "0.3.x \\(v2.1\\)" if layout == "v21" else "0.4.x and 0.6.x \\(v3.0\\)"
    with scenario(f"parquet footer claims 10^15 rows ({layout}, {command})",
                  "the episode is never ok: failed, naming the file and what the readers do", bad_input=True) as row:
        r = prep(*args, timeout=TIMEOUT_S)
        row.details = {"exit": r.returncode, "stdout": r.stdout[-1500:], "stderr": r.stderr[-800:]}
        assert "Traceback" not in r.stdout + r.stderr, r.stderr
        assert r.returncode == code, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        for ep in episodes if command == "scan" else episodes[:1]:
            pattern = template.format(ep=ep, file=re.escape(str(src / rel)), rows=f"{rows:,}", readers=readers)
            assert re.search(pattern, r.stdout), f"no line matches {pattern}:\n{r.stdout}"
        if command == "scan":
            table = pq.read_table(table_path_for(out)).to_pylist()
            status = {t["episode_index"]: t["status"] for t in table}
            assert status == {e: ("failed" if e in episodes else "ok") for e in range(4)}, status
        check_source(row, before, src)
        row.observed = f"exit {r.returncode}: episode(s) {episodes} failed"


# ---- a dataset without a camera -------------------------------------------------------------------------

LEROBOT_V30 = Path(os.environ.get("PREP_VENVS", "/opt/prep-venvs")) / "lerobot-v30/bin/python"
WRITE_NO_CAMERA = """
import sys
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
names = [f"j{i}" for i in range(6)]
features = {"observation.state": {"dtype": "float32", "shape": (6,), "names": names},
            "action": {"dtype": "float32", "shape": (6,), "names": names}}
ds = LeRobotDataset.create("local/nocam", fps=30, features=features, root=sys.argv[1], use_videos=False)
rng = np.random.default_rng(0)
for ep in range(3):
    for _ in range(40):
        ds.add_frame({"observation.state": rng.random(6, dtype=np.float32),
                      "action": rng.random(6, dtype=np.float32), "task": f"task {ep % 2}"})
    ds.save_episode()
ds.finalize()
"""


def no_camera_dataset(kind: str, root: Path) -> Path:
    if kind == "synthetic":
        write_synthetic(root, SynthSpec(version="v3.0", episodes=3, frames=40, cameras=(), episodes_per_file=2,
                                        seed=3))
        path = root / "meta/info.json"
        info = json.loads(path.read_text())
        info["video_path"] = None  # as LeRobot writes it for a dataset without video
        path.write_text(json.dumps(info, indent=4))
        return root
    if not LEROBOT_V30.exists():
        pytest.skip(f"LeRobot 0.4.4 venv not found at {LEROBOT_V30} (.ci/lerobot_envs.sh makes it)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root.parent / "hf-home")}
    r = subprocess.run([str(LEROBOT_V30), "-c", WRITE_NO_CAMERA, str(root)], capture_output=True, text=True,
                       timeout=600, env=env, check=False)
    assert r.returncode == 0, f"LeRobot 0.4.4 could not write the dataset:\n{r.stderr[-3000:]}"
    return root


@pytest.mark.parametrize("kind", ["synthetic", "lerobot-0.4.4"])
def test_no_camera_dataset_reencode_and_budget(kind: str, tmp_path: Path) -> None:
    """Re-encode a v3.0 dataset with no camera: a complete output, a summary that says there is no video
    (exit 0); budget on its manifests keeps the storage rate (native = prepared), never x 1/2.89."""
    src = no_camera_dataset(kind, tmp_path / "src")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario(f"dataset without a camera ({kind}): reencode, then budget", "reencode exit 0 saying there is "
                  "no video; budget storage native = prepared") as row:
        r = prep(*command_args("reencode", src, tmp_path, "v30")[0], timeout=TIMEOUT_S)
        row.details["reencode"] = {"exit": r.returncode, "stdout": r.stdout[-1500:], "stderr": r.stderr[-800:]}
        assert "Traceback" not in r.stdout + r.stderr, r.stderr
        assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        assert "(no video: nothing to re-encode; every file copied as it is)" in r.stdout, r.stdout
        assert "verdict   drop-in" in r.stdout
        assert json.loads((out / "prep/comparison.json").read_text())["video_ratio"] is None
        assert json.loads((out / "meta/info.json").read_text())["total_episodes"] == 3
        check_source(row, before, src)

        scan_out = tmp_path / "native.manifest.json"
        r = prep("scan", str(src), "--out", str(scan_out), "--workers", "1", "--no-progress", timeout=TIMEOUT_S)
        assert r.returncode == 0, r.stderr
        for label, args in (("--native", ["--native", str(scan_out)]), ("DATASET", [str(out)])):
            rep = tmp_path / f"budget{label}"
            r = prep("budget", *args, "--out", str(rep), "--no-plots", timeout=TIMEOUT_S)
            row.details[f"budget {label}"] = {"exit": r.returncode, "stderr": r.stderr[-800:]}
            assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
            inputs = {i["name"]: i for i in json.loads((rep / "report.json").read_text())["inputs"]}
            native, prepared = inputs["gb_per_hour_native"], inputs["gb_per_hour_prepared"]
            assert native["value"] == prepared["value"], (native, prepared)
            assert inputs["prepared_ratio"]["value"] == 1
            assert "no video" in (prepared if label == "--native" else native)["source"]
            assert "no video" in r.stdout, r.stdout
        check_source(row, before, src)
        row.observed = "reencode exit 0 (no video said); budget native = prepared"
    shutil.rmtree(tmp_path / "hf-home", ignore_errors=True)
