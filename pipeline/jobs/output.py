"""What every command that writes shares about its output: where it may be (never in a source), that
nothing else is in it, that nothing in it redirects a write, the options file that claims it, and the one
lock that keeps a second command off it.

- `check_paths(src, out)`: an output folder (reencode, convert, ...) is neither the source, inside it, nor
  holding it; `check_outside(sources, out)`: a report (scan, verify, budget, bench) is not written inside a
  source or over one of its files.
- `check_output_tree(out)`: no symlink, FIFO, socket or device anywhere in the output (at start and on a
  resume), so no write is redirected and no read of a kept file blocks.
- `output_lock(out, command)`: the one lock of an output folder, `<out>/prep/output.lock`, for every command
  (reencode, convert, edit, ...); a second command on the same output is refused while the first runs,
  naming the holder's command, pid and start time. Re-entrant within one process (`prep reencode --format`
  converts into the output it already holds). `refuse_busy(out)` refuses at once, writing nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pipeline import atomic
from pipeline.errors import PrepError
from pipeline.formats.write import PREP_DIR
from pipeline.lock import exclusive_lock, refuse_if_held
from pipeline.schemas import validate
from pipeline.text import printable

LOCK_REL = f"{PREP_DIR}/output.lock"  # the one lock file of an output folder, whatever the command
_HELD: dict[str, int] = {}  # realpath of an output -> how deep this process holds its lock


def check_paths(src: Path, out: Path, *, staged: bool = False) -> None:
    """The output is neither the source nor inside it, nor contains it (symlinks resolved); `staged`
    allows the one exception, `reencode_as`'s staged source in `<out>/prep/`."""
    s, o = Path(os.path.realpath(src)), Path(os.path.realpath(out))
    if o == s or s in o.parents:
        raise PrepError(f"output {printable(out)} is the source or inside it ({printable(src)}); the source "
                        "is never written: choose an --out outside it")
    if o in s.parents and not (staged and (o / PREP_DIR) in s.parents):
        raise PrepError(f"output {printable(out)} contains the source {printable(src)}; choose an --out "
                        "beside it")


def check_outside(sources: Iterable[Path | None], out: Path, *, flag: str = "--out", default: bool = False) -> None:
    """A report (a file, or a folder of reports) is not written inside a source dataset, nor over one of its
    files (symlinks resolved): the source is read-only for every command. `default`: the path is the
    command's default (in the current folder), said so in the refusal."""
    o = Path(os.path.realpath(out))
    for src in sources:
        if src is None:
            continue
        s = Path(os.path.realpath(src))
        if o == s or s in o.parents:
            how = (f"the default {flag} {printable(out)} (in the current folder)" if default
                   else f"{flag} {printable(out)}")
            hint = " (or run from another folder)" if default else ""
            raise PrepError(f"{how} is inside the dataset {printable(Path(src).absolute())}; the source is never "
                            f"written: pass {flag} PATH outside it{hint}")


def check_output_tree(out: Path) -> None:
    """No symlink, FIFO, socket or device anywhere in the output folder (the folder itself may be a link the
    user made): refused with one line naming it (`atomic.UnsafePathError`), before anything is read or written."""
    atomic.check_tree(out, what="the output")


def command_line(command: str | None = None) -> str:
    """This process's command line as the user typed it (`prep reencode --src ...`), for a lock's holder.
    `command`: the command this process runs for the lock (`prep COMMAND` when it was started otherwise: a
    test, a job called from Python); None: whatever it was started with."""
    args = sys.argv[1:]
    if command is None or args[:1] == [command]:
        return shlex.join(["prep", *args]) if args else "prep"
    return f"prep {command}"


def refuse_busy(out: Path) -> None:
    """Refuse now (`LockedError`, naming the holder) when another run holds the output's lock; writes nothing."""
    if os.path.realpath(out) not in _HELD:
        refuse_if_held(out / LOCK_REL, f"output {printable(out)}")


@contextlib.contextmanager
def output_lock(out: Path, command: str) -> Iterator[Path]:
    """Hold the output folder's one lock (`<out>/prep/output.lock`) for the duration, whatever the command;
    raises `LockedError` naming the live holder (its command, pid and start time). `command`: what the holder
    shows (`command_line(name)`). Re-entrant in one process."""
    key = os.path.realpath(out)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield out / LOCK_REL
        finally:
            _HELD[key] -= 1
        return
    with exclusive_lock(out / LOCK_REL, f"output {printable(out)}", root=out, command=command) as path:
        _HELD[key] = 1
        try:
            yield path
        finally:
            del _HELD[key]


def refuse_foreign(out: Path, options_rel: str, command: str) -> None:
    """Refuse a non-empty output folder that `prep <command>` did not start (its options file, at
    `<out>/<options_rel>`, is absent); checked before anything is written."""
    if not out.exists() or (out / options_rel).is_file():
        return
    if not out.is_dir():
        raise PrepError(f"output {printable(out)} exists and is not a folder")
    others = sorted(p.name for p in out.iterdir() if p.name != PREP_DIR)
    if others:
        raise PrepError(f"output {printable(out)} exists and is not a prep {command} output (holds "
                        f"{', '.join(printable(n) for n in others[:3])}); choose another --out")


def claim_output(src: Path, out: Path, settings: dict[str, Any], options_rel: str, schema: str) -> None:
    """Record `settings` (and the source) in `<out>/<options_rel>`; refuse a run started with other ones."""
    settings = {"source": str(src.resolve()), **settings}
    path = out / options_rel
    if os.path.lexists(path):
        try:
            previous = json.loads(atomic.read_regular_text(path))
        except (OSError, ValueError, RecursionError):
            previous = None
        if previous != settings:
            raise PrepError(f"output {printable(out)} was started with other settings ({previous}); now asked "
                            f"for {settings}. Choose another --out, or delete {printable(out)} to start over")
        return
    validate(settings, schema, source=str(path))
    atomic.write_json(path, settings, root=out)
