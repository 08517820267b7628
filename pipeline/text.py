"""Strings from the data, made safe to show: the one escape every terminal line, log line and Markdown
report goes through.

A feature name, a task text, a file name or a value read from a dataset can hold ESC sequences, CR, LF,
bidi overrides or NUL. Printed raw they clear the screen, recolour it, or forge a line that looks like
prep's own (`FAILED ...`). `printable` shows each such character as its Python escape (`\\x1b`, `\\n`,
`\\r`, `\\u202e`) and leaves every other character (accents, CJK, emoji, the backslash) as it is, so
that it is idempotent: escaping an escaped text changes nothing. JSON outputs keep the exact value.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

# Control (C0, DEL, C1), format (bidi overrides, zero-width), surrogates (undecodable file name bytes),
# and the line and paragraph separators: everything that moves the cursor, changes how a line reads,
# or breaks a line where prep did not.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in NAMED:
        return NAMED[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object) -> str:
    """`str(text)` with every control, format, surrogate and line-separator character shown as its escape
    (`\\x1b`, `\\n`, `\\u202e`, `\\udcff`); every other character kept. Safe for one terminal line."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case (C speed): nothing to escape
        return s
    return "".join(_escape(ch) if unicodedata.category(ch) in UNSAFE_CATEGORIES else ch for ch in s)


MAX_LINE_CHARS = 4000


def one_line(text: object, limit: int = MAX_LINE_CHARS) -> str:
    """`printable(text)` clipped to `limit` characters (a 64 MB value quoted in an error stays one
    readable line), the number of characters left out said."""
    s = printable(text)
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s) - limit:,} more characters)"


def printable_lines(lines: Iterable[object]) -> str:
    """Lines built by prep joined with newlines, each escaped on its own: a newline inside a value from
    the data shows as `\\n` and cannot start a line of its own."""
    return "\n".join(printable(line) for line in lines)


def shown(value: object, width: int = 120) -> str:
    """A value quoted as in Python (`repr`: strings in quotes, control characters escaped), clipped to
    about `width` characters: for naming a bad value in a one-line error."""
    if isinstance(value, str) and len(value) > width:
        value = value[: width - 3]
        return printable(repr(value)[:-1] + "...'")
    text = repr(value)
    return printable(text if len(text) <= width else text[: width - 3] + "...")


def printable_data(value: Any) -> Any:
    """A copy of a JSON-like value (a report) with every string in it, keys included, `printable`: what a
    Markdown or terminal rendering of the report is built from, while its JSON keeps the exact strings."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: printable_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_data(v) for v in value]
    return value
