"""The distribution has a name of its own on the package index (`prep` there is an unrelated 2012 project, so
`pip install 'prep[bench]'` installed it): pyproject, every install hint of the code, the docs, the scripts and
the set-up's stamp name `pipeline.DISTRIBUTION`; the command stays `prep` and the import package `pipeline`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from pipeline import DISTRIBUTION

REPO = Path(__file__).resolve().parents[1]
# `prep[...]` as a requirement (pip install 'prep[bench]', "prep[test]"): never the bare name with an extra
BARE = re.compile(r"(?<![\w.-])prep\[[a-z]")
SCANNED = ("pipeline/**/*.py", "scripts/*.sh", ".ci/*.sh", "bench/*.sh", "bench/*.py", "docs/*.md", "README.md",
           "Dockerfile", "examples/*.py")


def test_pyproject_names_the_distribution_and_the_command() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION != "prep"
    assert project["scripts"] == {"prep": "pipeline.cli:main"}
    assert set(project["optional-dependencies"]) >= {"bench", "test"}


def test_no_hint_installs_the_unrelated_prep() -> None:
    found = []
    for pattern in SCANNED:
        for path in sorted(REPO.glob(pattern)):
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if BARE.search(line) or re.search(r"pip install\s+['\"]?prep\b(?![-_])", line):
                    found.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    assert found == []


def test_the_torch_hint_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pipeline.commands.bench import _require_torch
    from pipeline.errors import PrepError

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(PrepError, match=re.escape(f"pip install '{DISTRIBUTION}[bench]'")):
        _require_torch()


def test_setup_installs_and_reports_the_distribution() -> None:
    setup = (REPO / "scripts/setup.sh").read_text(encoding="utf-8")
    assert f"names = ['{DISTRIBUTION}'," in setup  # the version line after set-up
    assert f'pip_q "{DISTRIBUTION}[test,bench]" install -e' in setup
    assert "uninstall -y prep" in setup  # the former name's install (it owns bin/prep too) goes first
    wheel_globs = [(REPO / f).read_text(encoding="utf-8") for f in ("Dockerfile", "tests/test_wheel.py",
                                                                    "bench/h200_check.sh")]
    normalized = DISTRIBUTION.replace("-", "_")
    assert all(f"{normalized}-*.whl" in text and "/prep-*.whl" not in text for text in wheel_globs)
