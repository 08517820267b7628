"""`prep bench dataloader` writes its result in a venv without prep's dependencies (a lerobot venv, as
docs/bench.md runs it): the result writer must not need jsonschema, which pipeline.schemas imports only
inside validate() (issue 25)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WRITE = """
import sys
sys.modules["jsonschema"] = None  # as if not installed: `import jsonschema` raises ImportError
from pathlib import Path
from pipeline.commands.bench import _write
out = Path(sys.argv[1])
print(_write({"schema": "not checked here", "runs": []}, out, "dataloader"))
"""


def test_result_written_without_jsonschema(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", WRITE, str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    path = tmp_path / "dataloader.json"
    assert r.stdout.strip() == str(path)
    assert json.loads(path.read_text()) == {"schema": "not checked here", "runs": []}
    assert "jsonschema is not installed" in r.stderr
    assert "Traceback" not in r.stderr


def test_result_checked_with_jsonschema(tmp_path: Path) -> None:
    """With jsonschema present the same call validates (and refuses a document that is no bench result)."""
    code = WRITE.replace('sys.modules["jsonschema"] = None', "pass")
    code = code.replace("print(_write(", "from pipeline.errors import PrepError\ntry:\n    print(_write(")
    code += "except PrepError as exc:\n    print('refused:', exc)\n"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("refused:") and "bench.schema.json" in r.stdout, r.stdout
    assert not (tmp_path / "dataloader.json").exists()
