"""`run_prep`: the `prep` command line for tests, in this process when that is safe, else as a subprocess.

`run_prep(*args, backend=None, env=None, timeout=300, cwd=None, inprocess=None, progress=True)` returns a
`subprocess.CompletedProcess[str]` (returncode, stdout, stderr) either way, with the same text a child process
would have printed (UTF-8; `\\r\\n` and `\\r` read as `\\n`, as `subprocess.run(text=True)` reads them).

- `backend="inline"` appends `--backend inline` (every command with engine options takes it: scan, verify,
  reencode, convert, edit, demo); `progress=False` appends `--no-progress`.
- In process (the default when safe): `pipeline.cli.main(args)` with stdout and stderr captured, `SystemExit`
  turned into its exit code and any other exception into a traceback on stderr and exit 1 (what the
  interpreter does), `sys.argv` set to what a `python -m pipeline.cli` child has (a lock's holder and the
  resume hint read it), `env` applied to `os.environ` (and `tempfile`'s cached folder dropped, so a `TMPDIR`
  counts) and `cwd` entered. Afterwards everything is put back as it was: the environment, `sys.argv`, the
  current folder, SIGINT/SIGTERM handlers, logging handlers and levels, warning filters; the output-lock table of
  `pipeline.jobs.output` must be as before (a run that leaves a lock held fails the test). A run past `timeout`
  is interrupted (SIGALRM) and fails the test.
- A subprocess (`sys.executable -m pipeline.cli`, this checkout first on PYTHONPATH) when the caller asks
  (`inprocess=False`) or the run needs one: a Dask cluster (`--workers`, `--scheduler`, `--backend local` or
  `remote` on a command with engine options: worker processes write to the real stderr), a `PYTHONPATH` of its
  own, or environment read when a library is imported (`DASK_*`, `HF_*`, `OMP_*`, ...). A test that sends
  signals, kills, or needs the real process (its pid, its group) starts one itself (support.faults).
- An in-process run that starts a Dask cluster anyway (a default engine on a large input) fails the test:
  name the engine (`backend="inline"`) or ask for a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pipeline

REPO = Path(pipeline.__file__).resolve().parents[1]  # the checkout whose `pipeline` these tests import
ENGINE_COMMANDS = frozenset({"scan", "verify", "reencode", "convert", "edit", "demo"})
IMPORT_TIME_ENV = ("PYTHON", "DASK_", "HF_", "OMP_", "MKL_", "OPENBLAS_", "TORCH", "CUDA", "LD_", "MPLBACKEND")
CLUSTER_LINE = ("[engine] local:", "[engine] remote:")

Result = subprocess.CompletedProcess


def prep_cmd(*args: object) -> list[str]:
    """The argv of a `prep` child process running this checkout's code."""
    return [sys.executable, "-m", "pipeline.cli", *map(str, args)]


def child_env(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with `env` on top (a None value removes the variable) and this checkout first
    on PYTHONPATH, unless `env` gives a PYTHONPATH of its own."""
    full = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    if not env or "PYTHONPATH" not in env:
        rest = full.get("PYTHONPATH", "")
        full["PYTHONPATH"] = str(REPO) + (os.pathsep + rest if rest else "")
    return full


def said(r: subprocess.CompletedProcess[str], tail: int = 3000) -> str:
    """A run's exit code and the ends of its output, for an assertion message."""
    return f"rc {r.returncode}\n--- stdout\n{r.stdout[-tail:]}\n--- stderr\n{r.stderr[-tail:]}"


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand of a `prep` command line (its first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def with_options(argv: list[str], extra: list[str]) -> list[str]:
    """`extra` appended to the command line, before a `--` if there is one."""
    if "--" in argv:
        i = argv.index("--")
        return [*argv[:i], *extra, *argv[i:]]
    return [*argv, *extra]


def needs_subprocess(argv: Sequence[str], env: Mapping[str, str | None] | None) -> str | None:
    """Why this run must be a child process (None: it can run in this one)."""
    if command_of(argv) in ENGINE_COMMANDS:
        for i, a in enumerate(argv):
            flag, _, value = a.partition("=")
            if flag in ("--workers", "--scheduler"):
                return f"{flag} starts a Dask cluster"
            if flag == "--backend":
                value = value or (argv[i + 1] if i + 1 < len(argv) else "")
                if value in ("local", "remote"):
                    return f"--backend {value} starts a Dask cluster"
    for key in env or {}:
        if key.startswith(IMPORT_TIME_ENV):
            return f"{key} is read when a library is imported"
    return None


def run_prep(*args: object, backend: str | None = None, env: Mapping[str, str | None] | None = None,
             timeout: float = 300, cwd: Path | str | None = None, inprocess: bool | None = None,
             progress: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `prep ARGS` (see the module's docstring) and return its exit code, stdout and stderr."""
    argv = [str(a) for a in args]
    extra = (["--backend", backend] if backend else []) + ([] if progress else ["--no-progress"])
    if backend and command_of(argv) not in ENGINE_COMMANDS:
        raise ValueError(f"prep {command_of(argv)} takes no --backend")
    argv = with_options(argv, extra)
    why = needs_subprocess(argv, env)
    if inprocess is None:
        inprocess = why is None
    elif inprocess and why is not None:
        raise ValueError(f"run_prep(inprocess=True): {why}; this run needs a subprocess")
    if not inprocess:
        return subprocess.run(prep_cmd(*argv), capture_output=True, text=True, cwd=cwd, env=child_env(env),
                              timeout=timeout, check=False)
    return run_in_process(argv, env=env, timeout=timeout, cwd=cwd)


# ---- in this process -------------------------------------------------------------------------------


class _PastTimeout(BaseException):
    """Raised by SIGALRM in a run past its timeout (a BaseException: no `except Exception` in prep keeps it)."""


class _Capture:
    """A text stream as a child's stdout or stderr is: UTF-8 (stdout strict, stderr backslashreplace)."""

    def __init__(self, errors: str) -> None:
        self.raw = io.BytesIO()
        self.stream = io.TextIOWrapper(self.raw, encoding="utf-8", errors=errors, write_through=True)

    def text(self) -> str:
        self.stream.flush()
        data = self.raw.getvalue().decode("utf-8", errors="strict")
        return data.replace("\r\n", "\n").replace("\r", "\n")


def _output_locks() -> dict[str, int] | None:
    module = sys.modules.get("pipeline.jobs.output")
    held = getattr(module, "_HELD", None)
    return dict(held) if isinstance(held, dict) else None


def _loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                   if isinstance(v, logging.Logger))]


@contextlib.contextmanager
def _process_state(argv: list[str], env: Mapping[str, str | None] | None, cwd: Path | str | None) -> Iterator[None]:
    """Apply argv, env and cwd for the run; put back everything a run could change."""
    saved_environ = dict(os.environ)
    saved_argv = sys.argv[:]
    saved_cwd = os.getcwd()
    saved_tempdir = tempfile.tempdir
    in_main = threading.current_thread() is threading.main_thread()
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)} if in_main else {}
    saved_logging = {id(lg): (lg, list(lg.handlers), lg.level, lg.disabled, list(lg.filters)) for lg in _loggers()}
    try:
        for key, value in (env or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if env:
            tempfile.tempdir = None  # read again from TMPDIR, as a new process would
        sys.argv = [str(REPO / "pipeline" / "cli.py"), *argv]  # what `python -m pipeline.cli ARGS` has
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            _fresh_warning_filters()
            yield
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environ)
        tempfile.tempdir = saved_tempdir
        for s, handler in saved_signals.items():
            signal.signal(s, handler)
        for lg in _loggers():
            if id(lg) in saved_logging:
                _, handlers, level, disabled, filters = saved_logging[id(lg)]
                lg.handlers[:], lg.level, lg.disabled, lg.filters[:] = handlers, level, disabled, filters
            else:  # a logger made during the run: no handler of the run's streams stays on it
                lg.handlers[:] = []


def _fresh_warning_filters() -> None:
    """The warning filters and display of a new interpreter (pytest records warnings; a child prints them)."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


def run_in_process(argv: list[str], *, env: Mapping[str, str | None] | None = None, timeout: float = 300,
                   cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """`pipeline.cli.main(argv)` in this process, as a child would run it (see the module's docstring)."""
    from pipeline import cli

    out, err = _Capture("strict"), _Capture("backslashreplace")
    locks_before = _output_locks()
    in_main = threading.current_thread() is threading.main_thread()
    code: int
    with _process_state(argv, env, cwd):
        if in_main and timeout:
            def past(signum: int, frame: FrameType | None) -> None:
                raise _PastTimeout()

            signal.signal(signal.SIGALRM, past)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            with contextlib.redirect_stdout(out.stream), contextlib.redirect_stderr(err.stream):
                try:
                    code = cli.main(argv)
                except SystemExit as exc:
                    code = _exit_code(exc)
                except Exception:
                    traceback.print_exc()
                    code = 1
        except _PastTimeout:
            raise AssertionError(f"prep {' '.join(argv)} ran past {timeout} s (in process)\n"
                                 f"{out.text()[-3000:]}\n{err.text()[-3000:]}") from None
        finally:
            if in_main and timeout:
                signal.setitimer(signal.ITIMER_REAL, 0)
    locks_after = _output_locks()
    if locks_after is not None and locks_after != (locks_before or {}):
        module = sys.modules["pipeline.jobs.output"]
        module._HELD.clear()
        module._HELD.update(locks_before or {})
        raise AssertionError(f"prep {' '.join(argv)} left output locks held in this process: {locks_after}")
    result = subprocess.CompletedProcess(["prep", *argv], code, out.text(), err.text())
    if any(line in result.stderr for line in CLUSTER_LINE):
        raise AssertionError(f"prep {' '.join(argv)} started a Dask cluster in this process: pass "
                             "backend='inline' or inprocess=False\n" + result.stderr[-2000:])
    return result


def _exit_code(exc: SystemExit) -> int:
    """The exit status an interpreter gives `sys.exit(code)`; a message is printed to stderr, as Python does."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF  # what the parent sees of the status
    print(exc.code, file=sys.stderr)
    return 1
