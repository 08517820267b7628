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

    def __init__(self, path: Path | str, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")


class EpisodeError(PrepError):
    """One episode (or one of its files) is bad; the others go on."""

    def __init__(self, episode: int | None, path: Path | str, message: str) -> None:
        self.episode = episode
        self.path = str(path)
        self.message = message
        where = f"episode {episode}: " if episode is not None else ""
        super().__init__(f"{where}{self.path}: {message}")


class MetadataError(DatasetError):
    """A dataset's metadata breaks its declared rules: one line per problem (file, line or row, field,
    value), the first few listed and all counted. Raised before any unit of a job runs."""

    def __init__(self, root: Path | str, problems: list[str], total: int) -> None:
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
