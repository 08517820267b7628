"""The format layer (pipeline/formats/): the registry and its dispatch, the model's independence from it, and each
format's one reader in its two modes (strict: convert and edit; lenient: the columnar model) agreeing on a sound
dataset and differing, as designed, on a bad record."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import DatasetError, EpisodeError
from pipeline.formats import FORMATS, VERSIONS, format_of, open_dataset, read_info
from pipeline.formats.base import Format
from pipeline.formats.v21 import iter_episode_lines

REPO = Path(__file__).resolve().parents[1]


def test_registry() -> None:
    assert VERSIONS == ("v2.1", "v3.0")
    assert tuple(FORMATS) == VERSIONS and len(FORMATS) == 2
    for version in VERSIONS:
        fmt = FORMATS[version]
        assert isinstance(fmt, Format) and fmt.version == version
        assert format_of(version) is fmt
        assert format_of({"codebase_version": version}) is fmt
    assert not FORMATS["v2.1"].layout.shares_files and FORMATS["v3.0"].layout.shares_files
    assert FORMATS["v2.1"].episodes_stats_rel == "meta/episodes_stats.jsonl"
    assert FORMATS["v3.0"].episodes_stats_rel is None
    with pytest.raises(KeyError):
        format_of("v1.6")


def test_registry_imports_no_format_module() -> None:
    """`import pipeline.formats` (the commands' choices) loads neither numpy nor pyarrow: a format's module loads
    when it is first asked for."""
    probe = ("import sys, json; import pipeline.formats as f; f.VERSIONS; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pyarrow', 'pandas'))))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert json.loads(res.stdout) == []


def test_model_imports_no_format() -> None:
    """pipeline.dataset (the columnar model, layer 2) imports nothing of pipeline.formats (layer 3)."""
    for path in sorted((REPO / "pipeline" / "dataset").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            assert not any(n == "pipeline.formats" or n.startswith("pipeline.formats.") for n in names), path


@pytest.mark.parametrize("fixture", ["synth_v21", "synth_v30"])
def test_strict_and_lenient_readers_agree(fixture: str, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(fixture)
    info = read_info(root)
    fmt = format_of(info)
    ds, rejected = open_dataset(root)
    assert not rejected and ds.layout is fmt.layout
    assert list(fmt.iter_episode_tasks(root, info)) == [(e.index, e.tasks, e.frames_expected) for e in ds.episodes]
    assert dict(fmt.iter_tasks(root)) == ds.tasks


def test_v21_episode_reader_modes(tmp_path: Path) -> None:
    """One reader of episodes.jsonl: lenient hands a bad line to `reject` and reads on; strict refuses it."""
    path = tmp_path / "episodes.jsonl"
    lines = [{"episode_index": 0, "tasks": ["a"], "length": 5}, {"episode_index": 1, "tasks": ["a"], "length": 0},
             {"episode_index": 2, "tasks": ["b"], "length": 7}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rejected: list[tuple[int, EpisodeError, int | None]] = []
    good = [(n, i, length) for n, i, length, _t, _o in
            iter_episode_lines(path, lambda n, err, i: rejected.append((n, err, i)))]
    assert good == [(1, 0, 5), (3, 2, 7)]
    assert [(n, i, e.message) for n, e, i in rejected] == [(2, 1, "invalid length 0: expected a positive integer")]
    with pytest.raises(DatasetError, match="line 2: invalid length 0: expected a positive integer"):
        list(iter_episode_lines(path))
