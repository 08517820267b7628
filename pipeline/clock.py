"""The one way `prep` stamps the files it writes: UTC, to the second, ISO 8601 with a `Z`."""

from __future__ import annotations

import datetime as dt


def utc_now() -> str:
    """E.g. `2026-11-29T10:05:00Z`."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
