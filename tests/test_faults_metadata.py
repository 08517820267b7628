"""Bad metadata through every job: `prep scan`, `prep verify` and `prep reencode` (real CLI subprocesses).
A job refuses the dataset before any unit runs when the rule is one a reader of the format line refuses for
(pipeline/checks.py; scan only for the files it needs to count storage and hours): exit 2, one line per
problem naming file, line or row, field and value, no traceback, nothing written (no manifest, no report,
no output folder), no engine started, the source unchanged. Otherwise it warns with the same line and goes on
(exit 0 on this otherwise sound corpus), the source unchanged."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.faults import check_source, copy_tree, corpus, prep, scenario, short_paths, snapshot

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    layout: str
    fault: Callable[[Path], None]
    message: str  # a regular expression the error line must match ({root} = the dataset root, escaped)
    refused_by: frozenset[str] = frozenset({"scan", "verify", "reencode"})  # the others warn and go on


def _edit_line(root: Path, rel: str, no: int, edit: Callable[[str], str]) -> None:
    path = root / rel
    lines = path.read_text().splitlines()
    lines[no] = edit(lines[no])
    path.write_text("\n".join(lines) + "\n")


def _set_obj(rel: str, no: int, key: str, value: object) -> Callable[[Path], None]:
    def fault(root: Path) -> None:
        _edit_line(root, rel, no, lambda line: json.dumps({**json.loads(line), key: value}))
    return fault


def _tasks_index(values: list[object], typ: pa.DataType) -> Callable[[Path], None]:
    def fault(root: Path) -> None:
        path = root / "meta/tasks.parquet"
        t = pq.read_table(path)
        t = t.set_column(t.column_names.index("task_index"), "task_index",
                         pa.array((values * t.num_rows)[: t.num_rows], type=typ))
        pq.write_table(t, path)
    return fault


def _episodes_column(name: str, make: Callable[[list[object]], pa.Array]) -> Callable[[Path], None]:
    def fault(root: Path) -> None:
        path = sorted((root / "meta/episodes").rglob("file-*.parquet"))[0]
        t = pq.read_table(path)
        t = t.set_column(t.column_names.index(name), name, make(t[name].to_pylist()))
        pq.write_table(t, path)
    return fault


def _info(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def fault(root: Path) -> None:
        path = root / "meta/info.json"
        info = json.loads(path.read_text())
        edit(info)
        path.write_text(json.dumps(info, indent=4))
    return fault


def _rename_camera(info: dict) -> None:
    info["features"]["../../data/chunk-000/evil"] = info["features"].pop("observation.images.cam_high")


STATS = "meta/episodes_stats.jsonl"
NOT_SCAN = frozenset({"verify", "reencode"})  # a file scan does not need to count storage and hours
CASES = [
    Case("v30-task-index-null", "v3.0 meta/tasks.parquet task_index null", "v30",
         _tasks_index([None], pa.int64()), r"{root}/meta/tasks\.parquet row 0: task_index: null \(expected integer\)",
         NOT_SCAN),
    Case("v30-task-index-string", "v3.0 meta/tasks.parquet task_index a string column", "v30",
         _tasks_index(["0"], pa.string()),
         r"{root}/meta/tasks\.parquet: column task_index: type string \(expected integer\)",
         NOT_SCAN),
    Case("v30-episodes-null-length", "v3.0 meta/episodes parquet: length null in row 1", "v30",
         _episodes_column("length", lambda v: pa.array([v[0], None, *v[2:]], type=pa.int64())),
         r"{root}/meta/episodes/chunk-000/file-000\.parquet row 1: length: null \(expected integer\)"),
    Case("v30-episodes-index-float", "v3.0 meta/episodes parquet: episode_index float64", "v30",
         _episodes_column("episode_index", lambda v: pa.array([float(x) for x in v])),
         r"{root}/meta/episodes/chunk-000/file-000\.parquet: column episode_index: type double \(expected integer\)"),
    Case("stats-not-json", "v2.1 meta/episodes_stats.jsonl line 2 not JSON", "v21",
         lambda r: _edit_line(r, STATS, 1, lambda line: line[:40]),
         r"{root}/meta/episodes_stats\.jsonl:2: line is not JSON",
         NOT_SCAN),
    Case("stats-null", "v2.1 meta/episodes_stats.jsonl line 2 stats: null", "v21", _set_obj(STATS, 1, "stats", None),
         r"{root}/meta/episodes_stats\.jsonl:2: stats: None is not of type 'object'",
         NOT_SCAN),
    Case("stats-list", "v2.1 meta/episodes_stats.jsonl line 3 a JSON list", "v21",
         lambda r: _edit_line(r, STATS, 2, lambda line: "[1, 2]"),
         r"{root}/meta/episodes_stats\.jsonl:3: \(line\): \[1, 2\] is not of type 'object'",
         NOT_SCAN),
    Case("stats-count-negative", "v2.1 episodes_stats.jsonl: a count of -5", "v21",
         lambda r: _edit_line(r, STATS, 0, lambda line: json.dumps(
             (o := json.loads(line)) | {"stats": o["stats"] | {"action": o["stats"]["action"] | {"count": [-5]}}})),
         r"{root}/meta/episodes_stats\.jsonl:1: stats/action/count/0: -5 is less than the minimum of 0",
         NOT_SCAN),
    Case("tasks-missing-task", "v2.1 meta/tasks.jsonl line without 'task'", "v21",
         lambda r: _edit_line(r, "meta/tasks.jsonl", 0, lambda line: '{"task_index": 0}'),
         r"{root}/meta/tasks\.jsonl:1: \(line\): 'task' is a required property",
         NOT_SCAN),
    Case("episode-length-string", "v2.1 episodes.jsonl length \"30\" (a string)", "v21",
         _set_obj("meta/episodes.jsonl", 2, "length", "30"),
         r"{root}/meta/episodes\.jsonl:3: length: '30' is not of type 'integer'"),
    Case("chunks-size-zero", "info.json chunks_size 0", "v21", _info(lambda i: i.update(chunks_size=0)),
         r"{root}/meta/info\.json: chunks_size: 0 is less than the minimum of 1"),
    Case("camera-key-escapes", "camera key '../../data/chunk-000/evil'", "v21", _info(_rename_camera),
         r"{root}/meta/info\.json: features/\.\./\.\./data/chunk-000/evil: camera key .* is not a plain name"),
    Case("stats-json-not-json", "meta/stats.json not JSON", "v30",
         lambda r: (r / "meta/stats.json").write_text('{"action": '),
         r"{root}/meta/stats\.json: invalid JSON at line 1 column 12", NOT_SCAN),  # 0.4/0.6 load_json raises
    Case("stats-json-not-json-v21", "v2.1 meta/stats.json not JSON (0.3 never reads it)", "v21",
         lambda r: (r / "meta/stats.json").write_text('{"action": '),
         r"{root}/meta/stats\.json: invalid JSON at line 1 column 12", frozenset()),
    Case("stats-json-no-count", "v3.0 meta/stats.json without 'count' (0.4/0.6 load_stats requires no key)", "v30",
         lambda r: (r / "meta/stats.json").write_text(json.dumps(
             {k: {s: v for s, v in f.items() if s != "count"}
              for k, f in json.loads((r / "meta/stats.json").read_text()).items()})),
         r"{root}/meta/stats\.json: [^ ]+: 'count' is a required property", frozenset()),
]


def run_all(src: Path, tmp: Path) -> dict[str, tuple[list[str], Path]]:
    outs = {"scan": tmp / "m.manifest.json", "verify": tmp / "v.json", "reencode": tmp / "out"}
    cmds = {"scan": ["scan", str(src), "--out", str(outs["scan"])],
            "verify": ["verify", str(src), "--json", str(outs["verify"])],
            "reencode": ["reencode", "--src", str(src), "--dst", "224", "--out", str(outs["reencode"])]}
    return {name: ([*cmd, "--workers", "1", "--no-progress"], outs[name]) for name, cmd in cmds.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_metadata_refused_by_every_job(case: Case, tmp_path: Path) -> None:
    src = copy_tree(corpus(case.layout), tmp_path / "src")
    case.fault(src)
    before = snapshot(src)
    pattern = re.compile(case.message.replace("{root}", re.escape(str(src))))
    with scenario(f"bad metadata: {case.title}", "scan, verify, reencode: exit 2, one line naming file, line/row, "
                  "field, value; nothing written or started; source unchanged", bad_input=True) as row:
        seen = []
        for name, (args, out) in run_all(src, tmp_path).items():
            r = prep(*args)
            row.details[name] = {"exit": r.returncode, "stderr": r.stderr[-1500:]}
            assert "Traceback" not in r.stdout + r.stderr, r.stderr
            if name not in case.refused_by:  # no reader refuses for it (or scan does not need the file): a warning
                assert r.returncode == 0, f"{name}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
                assert name != "scan" or any(pattern.search(line) for line in r.stdout.splitlines()
                                             if line.startswith("warning   ")), r.stdout
                continue
            assert r.returncode == 2, f"{name}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
            lines = r.stderr.strip().splitlines()
            assert all(line.startswith(f"prep {name}: error: ") for line in lines), r.stderr
            hits = [line for line in lines if pattern.search(line)]
            assert hits, f"{name}: no line matches {pattern.pattern}:\n{r.stderr}"
            assert "nothing was started" in lines[-1], lines[-1]
            assert "[engine]" not in r.stderr, "an engine was started for a refused dataset"
            assert not out.exists(), f"{name} wrote {out} for a refused dataset"
            assert not Path(str(out) + ".parts").exists()
            seen.append(hits[0].split("error: ", 1)[1])
        check_source(row, before, src)
        refused = ", ".join(sorted(case.refused_by)) or "none"
        first = short_paths(seen[0].replace(str(src), "<src>"))[:160] if seen else "warned, went on"
        row.observed = f"refused by {refused} (exit 2), the others warn: {first}"
