"""The error types `prep` raises on bad input: each names the path and the bad value."""

from __future__ import annotations

from pathlib import Path


class PrepError(Exception):
    """A user-facing failure: printed as one line, never as a traceback."""


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
