"""The error types `prep` raises on bad input: each names the path and the bad value."""

from __future__ import annotations

from pathlib import Path


class PrepError(Exception):
    """A user-facing failure: printed as one line, never as a traceback."""

    def lines(self) -> list[str]:
        """What the command line prints, one `prep CMD: error:` line each (escaped there: a newline in a
        value from the data stays inside its line)."""
        return [str(self)]


class DatasetError(PrepError):
    """The dataset as a whole cannot be read (missing or invalid metadata, unsupported version)."""

    def __init__(self, path: Path | str | object, message: str) -> None:  # a path, or a store's file (its str())
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")


class EpisodeError(PrepError):
    """One episode (or one of its files) is bad; the others go on."""

    def __init__(self, episode: int | None, path: Path | str | object, message: str) -> None:
        self.episode = episode
        self.path = str(path)
        self.message = message
        where = f"episode {episode}: " if episode is not None else ""
        super().__init__(f"{where}{self.path}: {message}")


class MetadataError(DatasetError):
    """A dataset's metadata breaks its declared rules: one line per problem (file, line or row, field,
    value), the first few listed and all counted. Raised before any unit of a job runs."""

    def __init__(self, root: Path | str | object, problems: list[str], total: int) -> None:
        self.problems = list(problems)
        self.total = total
        more = f" ({total - len(problems)} more not listed)" if total > len(problems) else ""
        tail = (f"{total} metadata problem{'s' if total != 1 else ''}{more}; nothing was started: "
                "fix the metadata and rerun")
        super().__init__(root, tail)
        self.args = ("\n".join([*self.problems, str(self.path) + ": " + tail]),)

    def __str__(self) -> str:
        return str(self.args[0])

    def lines(self) -> list[str]:
        return [*self.problems, self.args[0].rsplit("\n", 1)[-1]]

class ClusterError(PrepError):
    """The execution environment failed mid-run, not the data: the Dask scheduler was lost, no worker connected,
    a worker cannot import prep or stopped answering, a worker was killed at its memory limit. One line, then
    the command that resumes the run (finished work is kept)."""

    exit_code = 4

    def __init__(self, message: str, *, kept: bool = True) -> None:
        super().__init__(message)
        self.kept = kept  # False: the run stopped before it wrote anything (no "kept in ..." note)


class WorkerLost(Exception):
    """A task whose worker died while running it, on every attempt (Dask's `KilledWorker`, beyond the retries):
    a property of the cluster (memory limit, OOM killer, a crash), never a finding about the units.

    `kind` is "memory" when the worker's nanny restarted it for passing its memory limit (`limit` and `rss` in
    bytes, from the nanny's own event), else "died". `units` names the task's units (files, episodes)."""

    def __init__(self, kind: str, worker: str, units: str, *, limit: int = 0, rss: int = 0,
                 advice: str = "raise --memory-limit or lower --workers") -> None:
        self.kind, self.worker, self.units = kind, worker, units
        self.limit, self.rss, self.advice = limit, rss, advice
        super().__init__(self.describe())

    def describe(self) -> str:
        if self.kind == "memory":
            return (f"Dask worker {self.worker} was killed at its memory limit ({_size(self.limit)} per worker; it "
                    f"held {_size(self.rss)}) while running {self.units}: a resource problem, not the data; "
                    f"{self.advice}, then rerun")
        limit = f"memory limit {_size(self.limit)}" if self.limit else "no memory limit"
        return (f"Dask worker {self.worker} died while running {self.units} on every attempt ({limit}; killed by "
                "the system or crashed: see its log): not a finding about the data")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
