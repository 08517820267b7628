"""What the storage tests share: prep run in this process (its exit code, stdout and stderr), and the AWS_*
environment replaced by a test's (nothing of the machine's own configuration leaks in)."""

from __future__ import annotations

import os
from typing import Any


def prep(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`prep ARGS --no-progress` in this process: (exit code, stdout, stderr)."""
    from pipeline.cli import main

    capsys.readouterr()
    code = main([*args, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def set_env(monkeypatch: Any, env: dict[str, str]) -> None:
    """Every AWS_* variable removed, then `env` set (pytest's monkeypatch puts them back)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
