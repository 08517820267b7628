"""What the storage tests share (tests/test_storage_*.py: prep on s3:// against moto on loopback, support.s3).

- `prep(capsys, *args)`: prep run in this process (its exit code, stdout and stderr); `run_local(*args, out=)`:
  the same where no capsys is at hand (a module-scoped reference output), exit 0 required;
- `set_env(monkeypatch, env)`: the AWS_* environment replaced by a test's (nothing of the machine's own
  configuration leaks in); `prep_env(s3, secret)`: what a prep client of the server gets (signed as `prep`, the
  test module's secret if it has one); `child_env(s3, secret)`: the whole environment of a prep child process;
- `start_child(s3, *args, log=)` / `run_child(s3, *args)`: prep as a child process (one to kill, one to finish);
  `wait_for(predicate)`: poll until it holds;
- `small_pair(base, cameras=, frames=, ...)`: v2.1 and v3.0 datasets of one small shape (each test module picks
  its own: camera names with a space and non-ASCII, frames, GOP); `CAMS`, `CAMS_U`: the two camera sets they use;
  `LONGER`: a v2.1 dataset long enough to be killed half-way;
- `local_files(root)` / `s3_files(s3, url)`: a dataset's files but prep's own folder ({relative path: bytes}),
  `digests(files)`, `hashes_local(root)` / `hashes_s3(s3, url)`: the same as sha256 digests;
- `same_numbers(doc)`: a manifest or report without what differs between two runs on two copies;
- `one_line(code, stdout, err)`: a refusal is one line on stderr, exit 2 (returns the line).

The moto server itself is the module-scoped `s3` fixture of tests/conftest.py (the buckets a module's
`S3_BUCKETS` names), and `s3_prep` sets a test's environment to `prep_env(s3, <the module's SECRET>)`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.synth import SynthSpec, write_synthetic

if TYPE_CHECKING:
    from support.s3 import S3Server

REPO = Path(__file__).resolve().parents[2]  # the checkout (a child process imports its `pipeline`)
CAMS = ("observation.images.top", "observation.images.wrist")
CAMS_U = ("observation.images.top", "observation.images.wrist ü")  # one name with a space and non-ASCII
LONGER = SynthSpec(version="v2.1", episodes=12, height=240, width=320, frames=90, cameras=CAMS)
VOLATILE = {"created_utc", "prep_version", "seconds", "episodes_per_s", "root", "table", "episodes_table"}


# ---- running prep ----------------------------------------------------------------------------------------------


def prep(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`prep ARGS --no-progress` in this process: (exit code, stdout, stderr)."""
    from pipeline.cli import main

    capsys.readouterr()
    code = main([*args, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def run_local(*args: str, out: Path) -> Path:
    """`prep ARGS --out OUT --backend inline --no-progress` in this process; it must exit 0. Returns OUT."""
    from pipeline.cli import main

    assert main([*args, "--out", str(out), "--backend", "inline", "--no-progress"]) == 0
    return out


def set_env(monkeypatch: Any, env: dict[str, str]) -> None:
    """Every AWS_* variable removed, then `env` set (pytest's monkeypatch puts them back)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def prep_env(s3: S3Server, secret: str | None = None) -> dict[str, str]:
    """The AWS_* environment of a prep client of `s3`: signed as `prep` (`s3.stats_for("prep")`), with `secret` as
    its secret key when given (a value a test then looks for everywhere prep writes)."""
    return {**s3.env(client="prep"), **({"AWS_SECRET_ACCESS_KEY": secret} if secret is not None else {})}


def child_env(s3: S3Server, secret: str | None = None) -> dict[str, str]:
    """The environment of a prep child process: this one's without any AWS_* variable, `prep_env(s3, secret)`, and
    this checkout as PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, **prep_env(s3, secret), "PYTHONPATH": str(REPO)}


def prep_argv(*args: str) -> list[str]:
    """`python -m pipeline.cli ARGS --no-progress`."""
    return [sys.executable, "-m", "pipeline.cli", *args, "--no-progress"]


def start_child(s3: S3Server, *args: str, log: Path, secret: str | None = None) -> subprocess.Popen[bytes]:
    """prep ARGS started as a child process of `child_env(s3, secret)`, in a session of its own (a test signals
    its group), stdout and stderr into `log`."""
    return subprocess.Popen(prep_argv(*args), cwd=REPO, env=child_env(s3, secret), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def run_child(s3: S3Server, *args: str, secret: str | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """prep ARGS run to its end as a child process of `child_env(s3, secret)`: its exit code, stdout and stderr."""
    return subprocess.run(prep_argv(*args), cwd=REPO, env=child_env(s3, secret), capture_output=True, text=True,
                          timeout=timeout)


def wait_for(predicate: Callable[[], object], timeout: float = 120.0, interval: float = 0.05) -> bool:
    """Poll `predicate` every `interval` seconds until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


# ---- datasets ----------------------------------------------------------------------------------------------------


def small_pair(base: Path, *, cameras: tuple[str, ...], frames: int, episodes: int = 3,
               v30_gop: int | None = None) -> dict[str, Path]:
    """{"v21", "v30"}: `episodes` x `cameras` x `frames` at 96x128 below `base`, v3.0 in files of 2 episodes (and
    GOP `v30_gop` if given: a keyframe where each episode starts when it is the episode's length)."""
    shape: dict[str, Any] = {"episodes": episodes, "height": 96, "width": 128, "cameras": cameras, "frames": frames}
    v30: dict[str, Any] = {"episodes_per_file": 2, **({"gop": v30_gop} if v30_gop is not None else {})}
    return {"v21": write_synthetic(base / "v21", SynthSpec(version="v2.1", **shape)),
            "v30": write_synthetic(base / "v30", SynthSpec(version="v3.0", **shape, **v30))}


# ---- comparing outputs -------------------------------------------------------------------------------------------


def local_files(root: Path) -> dict[str, bytes]:
    """Every file below `root` but prep's own folder (root/prep/): {relative POSIX path: bytes}."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != "prep"}


def s3_files(s3: S3Server, url: str) -> dict[str, bytes]:
    """Every object listed below `url` but prep's own folder (<url>/prep/): {key relative to url: bytes}."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    out = {}
    for key in s3.list_keys(url):
        rel = key[len(prefix) + 1:] if prefix else key
        if not rel.startswith("prep/"):
            out[rel] = s3.get_bytes(f"s3://{bucket}/{key}")
    return out


def digests(files: dict[str, bytes]) -> dict[str, str]:
    """{name: sha256 hex digest of its bytes}."""
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def hashes_local(root: Path) -> dict[str, str]:
    return digests(local_files(root))


def hashes_s3(s3: S3Server, url: str) -> dict[str, str]:
    return digests(s3_files(s3, url))


def same_numbers(doc: Any) -> Any:
    """A manifest or report without what differs between two runs on two copies (times, the root's name)."""
    if isinstance(doc, dict):
        return {k: same_numbers(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [same_numbers(v) for v in doc]
    return doc


def one_line(code: int, stdout: str, err: str) -> str:
    """The one line a refusal prints (exit 2, no traceback, one non-blank line on stderr)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, stdout, err)
    return lines[0]
