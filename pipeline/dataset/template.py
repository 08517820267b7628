"""info.json's path templates (`data_path`, `video_path`), checked all the way down before any is filled.

LeRobot fills them with `str.format`, which runs whatever the template asks for: attribute and index
access (`{episode_index.real}`, `{episode_index[0]}`), nested replacement fields in a format spec
(`{episode_index:{episode_index.real.nope}}`), any width (`{episode_index:>999999999}` builds a 1 GB
string per episode). `check_template` parses a template once and refuses, with one line naming the file,
the key and the (escaped) template:

- a template that is not a string, longer than `MAX_TEMPLATE_CHARS`, or holding a control character
  (NUL, ESC, CR, LF, ...) or a surrogate;
- any field that is not one of the plain names the layout fills (no attribute or index access, no
  positional `{}` / `{0}`), at the top level and inside format specs;
- a format spec that is not Python's format-spec mini-language, or whose width or precision is above
  `MAX_WIDTH` (a spec with nested fields is checked again once filled, for every path);
- more than one level of nesting (what `str.format` itself allows).

`Template.fill` then fills it: with `str.format` when every spec is checked as written (all it can run
is a plain field with a bounded spec), else field by field, each filled spec checked before it is used.
"""

from __future__ import annotations

import functools
import os
import re
import string
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import DatasetError
from pipeline.text import shown

MAX_TEMPLATE_CHARS = 1024
MAX_WIDTH = 64  # of a format spec's width and precision: `06d` is what LeRobot writes
# Python's format-spec mini-language: [[fill]align][sign][z][#][0][width][grouping][.precision][type]
SPEC_RE = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>=^]))?(?P<sign>[-+ ])?z?#?0?(?P<width>\d+)?[,_]?"
                     r"(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?", re.DOTALL)
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cs"})  # control characters (NUL, ESC, CR, LF, DEL, C1), surrogates


@dataclass(frozen=True)
class Field:
    name: str
    conversion: str | None
    spec: str  # checked when `spec_fields` is empty; else a spec template filled and checked per path
    spec_fields: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    """A checked template: literal text and fields, filled without `str.format` on the raw text."""

    text: str
    where: str
    key: str
    parts: tuple[str | Field, ...]
    nested: bool = False  # a spec holds a field: filled and checked per path

    @property
    def fields(self) -> set[str]:
        names: set[str] = set()
        for p in self.parts:
            if isinstance(p, Field):
                names.add(p.name)
                names.update(p.spec_fields)
        return names

    def fill(self, **values: Any) -> str:
        if not self.nested:  # every field a checked plain name with a checked spec: str.format is safe here
            try:
                return self.text.format(**values)
            except (ValueError, TypeError) as exc:
                raise DatasetError(self.where, f"{self.key}: template {shown(self.text)} cannot be filled with "
                                               f"{shown(values)}: {exc}") from None
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
                continue
            spec = p.spec
            if p.spec_fields:
                spec = "".join(lit + (str(values[name]) if name is not None else "")
                               for lit, name, _s, _c in string.Formatter().parse(spec))
                _check_spec(spec, self.text, self.where, self.key, filled=True)
            value = values[p.name]
            if p.conversion == "r":
                value = repr(value)
            elif p.conversion == "a":
                value = ascii(value)
            elif p.conversion == "s":
                value = str(value)
            try:
                out.append(format(value, spec))
            except (ValueError, TypeError) as exc:
                raise DatasetError(self.where, f"{self.key}: template {shown(self.text)} cannot be filled: "
                                               f"{{{p.name}:{spec}}} with {shown(value)}: {exc}") from None
        return "".join(out)


def _refuse(where: str, key: str, text: str, why: str) -> DatasetError:
    return DatasetError(where, f"{key}: template {shown(text)}: {why}")


def _check_spec(spec: str, text: str, where: str, key: str, filled: bool = False) -> None:
    m = SPEC_RE.fullmatch(spec)
    what = f"format spec {shown(spec)}" + (" (once filled)" if filled else "")
    if m is None:
        raise _refuse(where, key, text, f"{what} is not a format spec")
    for part in ("width", "precision"):
        if m.group(part) is not None and int(m.group(part)) > MAX_WIDTH:
            raise _refuse(where, key, text, f"{what}: {part} {int(m.group(part)):,} is above {MAX_WIDTH}")


def _check_name(name: str, allowed: Collection[str], text: str, where: str, key: str) -> None:
    if name in allowed:
        return
    plain = sorted(allowed)
    if name == "" or name.isdigit():
        why = f"positional field {{{name}}}"
    elif "." in name or "[" in name:
        why = f"attribute or index access {shown(name)}"
    else:
        why = f"unknown field {shown(name)}"
    raise _refuse(where, key, text, f"{why}: only the plain fields {', '.join(plain)} are allowed")


def check_template(text: Any, where: Path | str, key: str, allowed: Collection[str]) -> Template:
    """`text` (info.json's `key`) checked as described in the module docstring; raises `DatasetError`
    naming `where`, `key` and the escaped template."""
    where = str(where)
    if not isinstance(text, str):
        raise DatasetError(where, f"{key}: expected a string template, found {shown(text)}")
    if len(text) > MAX_TEMPLATE_CHARS:
        raise _refuse(where, key, text, f"{len(text):,} characters, above {MAX_TEMPLATE_CHARS}")
    bad = next((ch for ch in text if unicodedata.category(ch) in FORBIDDEN_CATEGORIES), None)
    if bad is not None:
        raise _refuse(where, key, text, f"control character {shown(bad)} (a path cannot hold it)")
    try:
        top = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise _refuse(where, key, text, f"not a format template ({exc})") from None
    parts: list[str | Field] = []
    for literal, name, spec, conv in top:
        if literal:
            parts.append(literal)
        if name is None:
            continue
        _check_name(name, allowed, text, where, key)
        if conv not in (None, "r", "s", "a"):
            raise _refuse(where, key, text, f"conversion !{conv} of {{{name}}} (str.format knows !r, !s, !a)")
        spec = spec or ""
        try:
            inner = list(string.Formatter().parse(spec))
        except ValueError as exc:
            raise _refuse(where, key, text, f"format spec {shown(spec)}: {exc}") from None
        nested = []
        for _lit, sub, sub_spec, sub_conv in inner:
            if sub is None:
                continue
            _check_name(sub, allowed, text, where, key)
            if sub_spec or sub_conv:
                raise _refuse(where, key, text, f"nested field {{{sub}}} in a format spec may not have a spec or "
                                                "conversion of its own (more nesting than str.format allows)")
            nested.append(sub)
        if not nested:
            _check_spec(spec, text, where, key)
        parts.append(Field(name, conv, spec, tuple(nested)))
    return Template(text, where, key, tuple(parts), any(isinstance(p, Field) and p.spec_fields for p in parts))


@functools.lru_cache(maxsize=64)
def cached_template(text: str, where: str, key: str, allowed: frozenset[str]) -> Template:
    """`check_template`, remembered (templates are filled once per episode from a handful of texts)."""
    return check_template(text, where, key, allowed)


def inside_root(rel: str, template: str, path: Path | str | object, key: str) -> str:
    """A filled template's path, normalised; refused when it is absolute or leaves the dataset root."""
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm == ".." or norm.startswith(".." + os.sep):
        raise DatasetError(path, f"{key}: template {shown(template)} gives {shown(rel)}, which leaves the "
                                 "dataset root")
    return norm.replace(os.sep, "/")
