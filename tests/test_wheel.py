"""A plain wheel install works: the wheel carries the run-time data, and `prep` runs from any folder.

The wheel is built from a copy of the repository (setuptools' in-tree build/ folder could otherwise
carry stale files into it), installed with pip into a fresh virtual environment, and run from an
unrelated folder with no PYTHONPATH, so nothing of the checkout can be read by accident.

The fresh venv sees this environment's installed packages through a .pth file (offline and fast), and
pip installs the wheel *with* its dependencies and --no-index: every requirement the wheel declares
must be satisfied there, or the install fails. prep itself is not importable in the venv before the
install (checked), so the package that runs is the wheel's.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
                                ".ruff_cache", ".pytest_cache", ".hypothesis")

pytestmark = pytest.mark.slow


def run(argv: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def ok(res: subprocess.CompletedProcess[str]) -> str:
    cmd = " ".join(res.args)
    assert res.returncode == 0, f"{cmd}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    ok(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], cwd=tmp))
    (whl,) = (tmp / "dist").glob("lerobot_prep-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    v = tmp_path_factory.mktemp("venv") / "v"
    ok(run([sys.executable, "-m", "venv", "--without-pip", v], cwd=v.parent))
    py = v / "bin/python"
    purelib = Path(ok(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=v)).strip())
    (purelib / "_prep_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    assert run([py, "-c", "import pipeline"], cwd=v).returncode != 0, "prep importable in the venv before install"
    ok(run([sys.executable, "-m", "pip", "--python", py, "install", "--no-index", "-q", wheel], cwd=v))
    return v


def test_wheel_carries_the_data_files_from_their_single_source(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        schemas = sorted((REPO / "schemas").glob("*.schema.json"))
        assert schemas
        for path in schemas:
            assert zf.read(f"pipeline/data/schemas/{path.name}") == path.read_bytes()
        assert zf.read("pipeline/data/vla_landscape.toml") == (REPO / "manifests/vla_landscape.toml").read_bytes()
    assert "pipeline/py.typed" in names
    assert not any(n.startswith(("schemas/", "manifests/", "tests/", "bench/")) for n in names)


def test_installed_prep_scans_the_real_fixture_from_another_folder(venv: Path, real_v21: Path,
                                                                    tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copytree(real_v21, work / "g1", symlinks=True)
    where = ok(run([venv / "bin/python", "-c", "import pipeline; print(pipeline.__file__)"], cwd=work))
    assert Path(where.strip()).is_relative_to(venv), where
    assert ok(run([venv / "bin/prep", "--version"], cwd=work)).strip() == "prep 0.1.0"
    out = ok(run([venv / "bin/prep", "scan", "g1", "--out", "g1.json", "--workers", "1", "--no-progress"], cwd=work))
    assert "manifest" in out
    manifest = json.loads((work / "g1.json").read_text())
    assert manifest["totals"]["episodes"] == 10 and manifest["totals"]["frames"] == 3608
    assert (work / "g1.episodes.parquet").is_file()


def test_installed_prep_runs_the_demo_from_another_folder(venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = ok(run([venv / "bin/prep", "demo", "--episodes", "2", "--work", "demo-work", "--workers", "2",
                  "--no-progress"], cwd=work, timeout=900))
    assert "verify passed" in out
    reports = sorted(work.rglob("report.json"))  # the budget report: reads the schemas and the landscape
    assert reports, f"no budget report.json under {work}"
    assert json.loads(reports[0].read_text())["landscape"]
