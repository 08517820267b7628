"""The checks behind the hostile-input suite, one rule at a time: `check_template`
(pipeline/dataset/template.py) and the JSON / TOML bounds (pipeline/bounded.py). The end-to-end runs
through every command are tests/test_faults_input.py."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from pipeline.bounded import (
    MAX_DEPTH,
    JsonBoundError,
    check_json_text,
    load_toml,
    loads_json,
    loads_toml,
    read_json,
)
from pipeline.dataset.template import check_template
from pipeline.errors import DatasetError
from pipeline.formats import FORMATS

V21 = FORMATS["v2.1"].layout.path_fields
V30 = FORMATS["v3.0"].layout.path_fields


@pytest.mark.parametrize("text,fields,values,expected", [
    ("data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", V21["data_path"],
     {"episode_chunk": 1, "episode_index": 1042}, "data/chunk-001/episode_001042.parquet"),
    ("videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4", V21["video_path"],
     {"episode_chunk": 0, "episode_index": 7, "video_key": "cam"}, "videos/chunk-000/cam/episode_000007.mp4"),
    ("videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", V30["video_path"],
     {"chunk_index": 2, "file_index": 5, "video_key": "cam"}, "videos/cam/chunk-002/file-005.mp4"),
    # what str.format also fills: a nested plain field, a conversion, a fill character, {{ }}
    ("e{episode_index:0{episode_chunk}d}", V21["data_path"], {"episode_chunk": 4, "episode_index": 7}, "e0007"),
    ("{episode_index!s:_>8}{{x}}", V21["data_path"], {"episode_chunk": 0, "episode_index": 3}, "_______3{x}"),
])
def test_template_accepts_what_str_format_fills(text: str, fields: frozenset[str], values: dict[str, object],
                                                expected: str) -> None:
    tpl = check_template(text, "info.json", "data_path", fields)
    assert tpl.fill(**values) == text.format(**values) == expected


@pytest.mark.parametrize("text,reason", [
    ("{episode_index.real}", "attribute or index access 'episode_index.real'"),
    ("{episode_index[0]}", "attribute or index access 'episode_index[0]'"),
    ("{episode_index:{episode_index.real.nope}}", "attribute or index access 'episode_index.real.nope'"),
    ("{episode_index:{episode_chunk[0]}}", "attribute or index access 'episode_chunk[0]'"),
    ("{}", "positional field {}"),
    ("{0}", "positional field {0}"),
    ("{task}", "unknown field 'task'"),
    ("{episode_index:>999999999}", "width 999,999,999 is above 64"),
    ("{episode_index:.65}", "precision 65 is above 64"),
    ("{episode_index:\u0669\u0669\u0669}", "width 999 is above 64"),  # Arabic-Indic digits: str.format reads them
    ("{episode_index:{episode_chunk:3}}", "may not have a spec or conversion of its own"),
    ("{episode_index!x}", "conversion !x"),
    ("{episode_index:zz}", "is not a format spec"),
    ("a\x00b{episode_index}", "control character '\\x00'"),
    ("a\x1b[2J{episode_index}", "control character '\\x1b'"),
    ("a\nb{episode_index}", "control character '\\n'"),
    ("a\udcffb{episode_index}", "control character '\\udcff'"),
    ("{episode_index", "not a format template"),
    ("x" * 1025, "1,025 characters, above 1024"),
])
def test_template_refused(text: str, reason: str) -> None:
    with pytest.raises(DatasetError) as err:
        check_template(text, "/ds/meta/info.json", "data_path", V21["data_path"])
    line = str(err.value)
    assert line.startswith("/ds/meta/info.json: data_path: "), line
    assert reason in line, line
    assert "\n" not in line and "\x00" not in line and "\x1b" not in line


def test_template_width_checked_again_when_a_nested_field_fills_it() -> None:
    tpl = check_template("{episode_index:{episode_chunk}}", "info.json", "data_path", V21["data_path"])
    assert tpl.fill(episode_chunk=5, episode_index=1) == "    1"
    with pytest.raises(DatasetError, match=r"format spec '999999999' \(once filled\): width 999,999,999 is above 64"):
        tpl.fill(episode_chunk=999999999, episode_index=1)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_json_depth_bound_is_exact() -> None:
    assert loads_json(deep(MAX_DEPTH)) is not None
    with pytest.raises(JsonBoundError) as err:
        loads_json(deep(MAX_DEPTH + 1))
    assert err.value.colno == MAX_DEPTH + 1 and "nested deeper than 100 levels" in err.value.msg
    # brackets inside strings are text, not nesting
    assert loads_json(json.dumps({"a": deep(5000)})) == {"a": deep(5000)}
    obj = {"a": [{"b": 1}, {"c": json.loads(deep(200))}]}
    with pytest.raises(JsonBoundError, match=r"at a\[1\]/c\[0\]\.\.\. \(100 levels deep\)"):
        loads_json(json.dumps(obj))
    with pytest.raises(json.JSONDecodeError):  # what every caller catches
        loads_json(deep(3000))


def test_json_size_bound(tmp_path: Path) -> None:
    check_json_text('{"a": 12}', max_chars=10)
    with pytest.raises(JsonBoundError, match="11 characters, above the 10 prep reads"):
        check_json_text('{"a": 1234}', max_chars=10)
    fifo = tmp_path / "info.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):  # never blocks on a FIFO
        read_json(fifo)


@pytest.mark.parametrize("text,where", [
    ("a = " + deep(3000), "in 'a', at line 1"),
    ("[t]\nb = " + "{x = " * 300 + "1" + "}" * 300, "in 'b', at line 2"),
    ("c = '" + "[" * 300 + "'\nd = " + deep(300), "in 'd', at line 2"),  # brackets in a string do not count
    (".".join(["k"] * 300) + " = 1", "at k/k/k/k... (101 levels deep)"),
])
def test_toml_depth_bound(text: str, where: str) -> None:
    with pytest.raises(tomllib.TOMLDecodeError) as err:
        loads_toml(text)
    assert f"nested deeper than 100 levels ({where}" in str(err.value), str(err.value)


def test_toml_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("a = " + deep(MAX_DEPTH - 1) + "\nb = '[[[[[[['\n")
    assert load_toml(path)["b"] == "[[[[[[["


def test_jsonl_line_bound_refuses_as_it_reads(tmp_path: Path) -> None:
    """A JSON Lines line longer than the bound is refused by `iter_lines` while it is read (a file with
    no newline is never held whole), naming the file and the line."""
    from pipeline.formats.jsonl import iter_lines

    path = tmp_path / "episodes.jsonl"
    path.write_text('{"a": 1}\n' + "x" * 50 + "\n")
    with pytest.raises(DatasetError, match=r"episodes\.jsonl: line 2: (51|more than 20) characters, above the 20"):
        list(iter_lines(path, max_chars=20))
    path.write_text('{"a": 1}\n' + "x" * 50)  # no newline at the end: the carried part is bounded too
    with pytest.raises(DatasetError, match=r"episodes\.jsonl: line 2: more than 20 characters, above the 20"):
        list(iter_lines(path, max_chars=20))
    assert [n for n, _ in iter_lines(path, max_chars=60)] == [1, 2]
