"""Shared fixtures: synthetic corpora built once per session, the real v2.1 fixture, and a test module's S3
server (moto on loopback).

Session-scoped datasets are read-only by convention: a test that writes into a dataset
copies it first (`copy_dataset`).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.datasets import real_fixture, small_spec
from support.s3 import S3Server
from support.storage import prep_env, set_env

from pipeline.synth import SynthSpec, write_synthetic


def pytest_configure(config: pytest.Config) -> None:
    """Tests do not depend on the shell that started pytest. A non-interactive shell starts `cmd &` (as in
    `nohup bash scripts/test.sh > log &`) with SIGINT ignored, and an ignored signal stays ignored across
    exec: every `prep` a test starts would then ignore the Ctrl-C the signal tests send it. Give pytest
    Python's own SIGINT handler back (a handler, unlike "ignored", is reset to the default in each child)
    and unblock SIGINT/SIGTERM, so every child process starts with the default dispositions."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _process_state() -> dict[str, object]:
    """What an in-process prep run (support.cli.run_prep) or a test could leave changed for the next test."""
    output = sys.modules.get("pipeline.jobs.output")
    return {"cwd": os.getcwd(), "sys.argv": list(sys.argv),
            "signals": {s.name: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)},
            "output locks held": dict(getattr(output, "_HELD", {}))}


@pytest.fixture(autouse=True)
def _leaves_the_process_as_it_found_it() -> Iterator[None]:
    """Every test leaves the current folder, sys.argv, the SIGINT/SIGTERM/SIGALRM handlers and the output-lock
    table of pipeline.jobs.output as it found them (in-process prep runs share this process)."""
    before = _process_state()
    yield
    after = _process_state()
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`lerobot` is the old name of the `readers` marker: every readers test carries both (`-m lerobot` works)."""
    for item in items:
        if item.get_closest_marker("readers") is not None and item.get_closest_marker("lerobot") is None:
            item.add_marker(pytest.mark.lerobot)


@pytest.fixture(scope="session")
def real_v21() -> Path:
    """The real LeRobot v2.1 fixture (read-only; copy before writing)."""
    return real_fixture()


@pytest.fixture(scope="session")
def synth_v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes x 3 cameras x 90 frames, 480x640 h264 GOP 30, format v2.1."""
    return write_synthetic(tmp_path_factory.mktemp("synth") / "v21", SynthSpec(version="v2.1", episodes=3))


@pytest.fixture(scope="session")
def synth_v30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes x 3 cameras x 90 frames in two files per camera (2 + 1 episodes), format v3.0."""
    return write_synthetic(
        tmp_path_factory.mktemp("synth") / "v30", SynthSpec(version="v3.0", episodes=3, episodes_per_file=2)
    )


@pytest.fixture(scope="session")
def lowres_v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """synth_v21 at 48x64 (3 episodes x 3 cameras x 90 frames, GOP 30): its layout, metadata and frame counts at
    a hundredth of the encode, for tests of everything but the pixels and their size."""
    return write_synthetic(tmp_path_factory.mktemp("synth") / "v21_48x64",
                           SynthSpec(version="v2.1", episodes=3, height=48, width=64))


@pytest.fixture(scope="session")
def lowres_v30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """synth_v30 at 48x64 (files of 2 + 1 episodes)."""
    return write_synthetic(tmp_path_factory.mktemp("synth") / "v30_48x64",
                           SynthSpec(version="v3.0", episodes=3, episodes_per_file=2, height=48, width=64))


@pytest.fixture(scope="session")
def small_v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """7 episodes x 2 cameras x 24 frames of 48x64 h264, GOP 12, format v2.1 (support.datasets.small_spec)."""
    return write_synthetic(tmp_path_factory.mktemp("small") / "v21", small_spec("v2.1"))


@pytest.fixture(scope="session")
def small_v30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same in v3.0, 3 episodes per file (files hold 0-2, 3-5, 6)."""
    return write_synthetic(tmp_path_factory.mktemp("small") / "v30", small_spec("v3.0"))


@pytest.fixture
def copy_dataset(tmp_path: Path) -> Callable[[Path, str], Path]:
    def copy(src: Path, name: str = "ds") -> Path:
        dst = tmp_path / name
        shutil.copytree(src, dst, symlinks=True)
        return dst

    return copy


@pytest.fixture(scope="module")
def s3(request: pytest.FixtureRequest) -> Iterator[S3Server]:
    """moto's S3 on loopback (support.s3.S3Server, a thread of this process) for one test module, with the buckets
    the module's `S3_BUCKETS` names made. Thread-mode servers share moto's state in this process: each module
    names buckets of its own. A module extends it by a fixture of the same name that takes it (uploads)."""
    with S3Server() as server:
        for bucket in getattr(request.module, "S3_BUCKETS", ()):
            server.make_bucket(bucket)
        yield server


@pytest.fixture
def s3_prep(s3: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> S3Server:
    """This test's prep runs signed as `prep` against `s3`, the module's `SECRET` (if it has one) as their secret
    key, and nothing of the machine's AWS configuration (support.storage.prep_env); returns `s3`."""
    set_env(monkeypatch, prep_env(s3, getattr(request.module, "SECRET", None)))
    return s3
