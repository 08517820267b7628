"""What every command that writes shares about its output: where it may be (never in a source), that
nothing else is in it, that nothing in it redirects a write, the options file that claims it, and the one
lock that keeps a second command off it. Built on the storage seam: an output is a `pipeline.storage.Location`
(local for now) and its store's `lock`, `refuse_if_held` and `check_output` are the lock and the unsafe-entry
check, so that an object-store output costs the jobs nothing.

- `claim_output(out, command, options, sources=...)`: a writing job's output (reencode, convert, edit). Made,
  it refuses at once, before the job reads or starts anything heavy, an output that is (or is inside, or holds)
  one of `sources`, one another run holds (naming it), one another command started (`options.command`'s
  options file absent from a non-empty folder) and one with a symlink, FIFO, socket or device in it. Held
  (`with claim.hold(settings, source=src):`), it takes the output's one lock, records the settings in the
  options file (or refuses a run started with other ones) and removes the temp files a killed run left.
- `check_paths(src, out)`: an output folder is neither the source, inside it, nor holding it;
  `check_outside(sources, out)`: a report (scan, verify, budget, bench) is not written inside a source or over
  one of its files.
- `output_lock(out, command)`: the one lock of an output folder, `<out>/prep/output.lock`, for every command;
  a second command on the same output is refused while the first runs, naming the holder's command, pid and
  start time. Re-entrant within one process (`prep reencode --format` converts into the output it already
  holds). `refuse_busy(out)` refuses at once, writing nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pipeline import atomic
from pipeline.errors import PrepError
from pipeline.formats.write import PREP_DIR
from pipeline.schemas import validate
from pipeline.storage import Location, Store, local_location, output_location
from pipeline.text import printable

if TYPE_CHECKING:
    from pipeline.stages.result import FileResult  # checks only: commands import this module without PyAV

LOCK_REL = f"{PREP_DIR}/output.lock"  # the one lock file of an output folder, whatever the command
_HELD: dict[str, int] = {}  # realpath of an output -> how deep this process holds its lock
# The folders of a dataset output that a run writes; convert and edit clear only these (and the files directly in
# the output and in prep/) of a killed run's temp files: prep/ may hold a staged source (reencode_as, edit --to)
DATASET_FOLDERS = ("videos", "data", "meta")


@dataclass(frozen=True, slots=True)
class OptionsFile:
    """The file that says which command started an output and with which settings: `<out>/<rel>`, checked against
    `schemas/<schema>.schema.json`; `command` starts such outputs (named when a folder is not one of them)."""

    rel: str
    schema: str
    command: str


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


def command_line(command: str | None = None) -> str:
    """This process's command line as the user typed it (`prep reencode --src ...`), for a lock's holder.
    `command`: the command this process runs for the lock (`prep COMMAND` when it was started otherwise: a
    test, a job called from Python); None: whatever it was started with."""
    args = sys.argv[1:]
    if command is None or args[:1] == [command]:
        return shlex.join(["prep", *args]) if args else "prep"
    return f"prep {command}"


def held_key(location: Location) -> str:
    """What `_HELD` knows an output by: a local folder's real path, an object prefix's URL at its endpoint."""
    if location.is_local:
        return os.path.realpath(location.root)
    return f"{location.url.rstrip('/')} at {location.endpoint() or ''}"


def _store(out: Path) -> Store:
    return local_location(out).store()


def check_output_tree(out: Path) -> None:
    """No symlink, FIFO, socket or device anywhere in the output folder (the folder itself may be a link the
    user made): refused with one line naming it (`atomic.UnsafePathError`), before anything is read or written."""
    _store(out).check_output()


def refuse_busy(out: Path) -> None:
    """Refuse now (`LockedError`, naming the holder) when another run holds the output's lock; writes nothing."""
    if os.path.realpath(out) not in _HELD:
        _store(out).refuse_if_held(LOCK_REL, f"output {printable(out)}")


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
    with _store(out).lock(LOCK_REL, f"output {printable(out)}", command=command) as path:
        _HELD[key] = 1
        try:
            yield Path(path)
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


def check_locations(src: Location, out: Location, *, staged: bool = False) -> None:
    """An object-store output is neither the source's prefix nor inside it, nor holds it (the source is never
    written); a local output of a local source is `check_paths`'s. `staged`: the one exception, a source staged in
    `<out>/prep/` (`reencode_as`)."""
    if src.is_local and out.is_local:
        check_paths(Path(src.root), Path(out.root), staged=staged)
        return
    if src.contains(out):  # one scheme and endpoint (a bucket is one whatever the other options say)
        raise PrepError(f"output {printable(out.url)} is the source or inside it ({printable(src.url)}); the source "
                        "is never written: choose an --out outside it")
    if out.contains(src) and not (staged and out.child(PREP_DIR).contains(src) and src != out.child(PREP_DIR)):
        raise PrepError(f"output {printable(out.url)} contains the source {printable(src.url)}; choose an --out "
                        "beside it")


def record_settings_in(store: Store, src: Location, settings: Mapping[str, Any], options: OptionsFile) -> None:
    """`record_settings` for an object-store output: the options object, created once (a conditional create: of
    two runs that got this far only one writes it) and compared on every later run."""
    settings = {"source": str(src.path.resolve()) if src.is_local else src.url, **settings}
    shown = store.url
    if not store.create(options.rel, (json.dumps(settings, indent=4, ensure_ascii=False) + "\n").encode("utf-8")):
        try:
            previous = json.loads(store.read_bytes(options.rel))
        except (OSError, ValueError, RecursionError, PrepError):
            previous = None
        if previous != settings:
            raise PrepError(f"output {printable(shown)} was started with other settings ({previous}); now asked "
                            f"for {settings}. Choose another --out, or delete {printable(shown)} to start over")


def record_settings(src: Path | Location, out: Path, settings: Mapping[str, Any], options: OptionsFile) -> None:
    """Record `settings` (and the source) in the options file; refuse a run started with other ones."""
    if isinstance(src, Location):
        src = src.path if src.is_local else src
    settings = {"source": str(src.resolve()) if isinstance(src, Path) else src.url, **settings}
    path = out / options.rel
    if os.path.lexists(path):
        try:
            previous = json.loads(atomic.read_regular_text(path))
        except (OSError, ValueError, RecursionError):
            previous = None
        if previous != settings:
            raise PrepError(f"output {printable(out)} was started with other settings ({previous}); now asked "
                            f"for {settings}. Choose another --out, or delete {printable(out)} to start over")
        return
    validate(settings, options.schema, source=str(path))
    atomic.write_json(path, settings, root=out)


class OutputClaim:
    """A writing job's output folder (see `claim_output`). `folders`: where a killed run's temp files are looked
    for (None: the whole output, a file the source holds at the same place kept: reencode)."""

    def __init__(self, out: Path | Location, command: str, options: OptionsFile | None, *,
                 sources: Iterable[Path | Location] = (), staged: bool = False,
                 folders: Sequence[str] | None = DATASET_FOLDERS) -> None:
        self.location: Location = output_location(out)
        self.store: Store = self.location.store()
        self.command, self.options, self.folders = command, options, folders
        self._staged = staged
        if not self.location.is_local:
            self._claim_object(sources)
            return
        self.path = Path(self.location.root)
        for src in sources:
            if isinstance(src, Location) and not src.is_local:
                continue  # an object-store source and a local output cannot overlap
            check_paths(src.path if isinstance(src, Location) else src, self.path, staged=staged)
        if os.path.realpath(self.path) not in _HELD:  # a busy output (any command's): refused, naming the holder
            self.store.refuse_if_held(LOCK_REL, f"output {printable(self.path)}")
        if options is not None:  # a folder that is not this command's: refused before any walk
            refuse_foreign(self.path, options.rel, options.command)
        self.store.check_output()  # a symlink, FIFO, socket or device in the output (a resume too)

    def _claim_object(self, sources: Iterable[Path | Location]) -> None:
        """An object-store output: outside every source, not held by a live run, and (when not empty) started by
        this command (its options object is there). Reads only: one HEAD or LIST each."""
        self.path = Path("/nonexistent-object-output")  # never a local path: the store's methods are used
        for src in sources:
            check_locations(src if isinstance(src, Location) else local_location(src), self.location,
                            staged=self._staged)
        self.store.check_reachable()
        if held_key(self.location) not in _HELD:  # held by this process: `reencode --format` converts into it
            self.store.refuse_if_held(LOCK_REL, f"output {printable(self.location.url)}")
        if self.options is not None and not self.store.exists(self.options.rel):
            # prep's own folder may hold a killed run's lock or a staged source (as a local output's may)
            first = next((f for f in self.store.iter_files() if not f[0].startswith(f"{PREP_DIR}/")), None)
            if first is not None:
                raise PrepError(f"output {printable(self.location.url)} exists and is not a prep "
                                f"{self.options.command} output (holds {printable(first[0])}); choose another --out")

    @contextlib.contextmanager
    def _hold_object(self, settings: Mapping[str, Any] | None, source: Path | Location | None) -> Iterator[OutputClaim]:
        key = held_key(self.location)
        with contextlib.ExitStack() as stack:
            if key in _HELD:  # re-entrant within one process, as a local output's lock is
                _HELD[key] += 1
            else:
                stack.enter_context(self.store.lock(LOCK_REL, f"output {printable(self.location.url)}",
                                                    command=command_line(self.command)))
                _HELD[key] = 1
            try:
                if settings is not None:
                    assert self.options is not None and source is not None
                    src = source if isinstance(source, Location) else local_location(source)
                    record_settings_in(self.store, src, settings, self.options)
                    self.remove_temps()
                yield self
            finally:
                _HELD[key] -= 1
                if not _HELD[key]:
                    del _HELD[key]

    @contextlib.contextmanager
    def hold(self, settings: Mapping[str, Any] | None = None, *,
             source: Path | Location | None = None) -> Iterator[OutputClaim]:
        """Hold the output's lock for the duration; with `settings`, record them (with `source`) in the options file
        (a run started with other ones is refused) and remove the temp files a killed run left (an object store:
        its incomplete multipart uploads below the output)."""
        if not self.location.is_local:
            with self._hold_object(settings, source):
                yield self
            return
        self.path.mkdir(parents=True, exist_ok=True)
        with output_lock(self.path, command_line(self.command)):
            if settings is not None:
                assert self.options is not None and source is not None
                record_settings(source, self.path, settings, self.options)
                self.remove_temps(source)
            yield self

    def remove_temps(self, source: Path | Location | None = None) -> None:
        """The temp files of a killed run (or of workers killed mid-task, whose task was retried); an object store:
        the incomplete multipart uploads below the output (a part never shows as an object)."""
        if not self.location.is_local:
            self.store.abort_uploads()  # type: ignore[attr-defined]
            return
        if isinstance(source, Location):
            source = source.path if source.is_local else None
        if self.folders is None:
            atomic.remove_stale_temps(self.path, source=source)
            return
        for sub in self.folders:
            atomic.remove_stale_temps(self.path / sub)
        for top in (self.path, self.path / PREP_DIR):  # reports and top-level files written beside them
            atomic.remove_stale_temps(top, recursive=False)


def claim_output(out: Path | Location, command: str, options: OptionsFile | None, *,
                 sources: Iterable[Path | Location] = (),
                 staged: bool = False, folders: Sequence[str] | None = DATASET_FOLDERS) -> OutputClaim:
    """The output of `prep <command>`, refused now where it may not be written (see the module docstring);
    `with claim.hold(settings, source=src):` around everything the job writes. `staged`: the source is
    `<out>/prep/...` (`reencode_as`, `edit --to`); `options` None: no options file of its own (a staged job's
    outer output)."""
    return OutputClaim(out, command, options, sources=sources, staged=staged, folders=folders)


# ---- what the stream-copy jobs (convert, edit) share after their map ---------------------------------------------

FAILURES_LISTED = 10_000  # failed output files listed in a report (all are counted)


class FilesReport(Protocol):
    """The counts a convert or edit report keeps of its output files."""

    files: int
    written: int
    kept: int
    failed: int
    out_bytes: int
    complete: bool
    publish_seconds: float
    failures: list[dict[str, Any]]


R = TypeVar("R", bound=FilesReport)


def count_file(report: FilesReport, r: FileResult) -> bool:
    """One output file's result into the report's counts (a failure listed, up to `FAILURES_LISTED`); False
    for a failed file."""
    report.files += 1
    if r.failed:
        report.failed += 1
        if len(report.failures) < FAILURES_LISTED:
            report.failures.append({"path": r.out_rel, "kind": r.kind, "reason": r.reason})
        return False
    report.out_bytes += r.out_bytes
    if r.status == "written":
        report.written += 1
    else:
        report.kept += 1
    return True


def publish_files(out: Path, report: R, publish: Callable[[], None], write_report: Callable[[Path, R], None]) -> None:
    """After a stream-copy job's map: its metadata (`publish`, meta/info.json last) only when every output file
    succeeded, then its report; a failed write is one line saying what is kept."""
    t1 = time.perf_counter()
    try:
        if not report.failures:
            publish()
            report.complete = True
        report.publish_seconds = time.perf_counter() - t1
        write_report(out, report)
    except OSError as exc:
        raise PrepError(f"{out}: writing metadata failed: {exc.strerror or exc}"
                        f"{f' ({exc.filename})' if exc.filename else ''}; finished files are kept and "
                        "meta/info.json is written only when complete: free space and rerun") from None
