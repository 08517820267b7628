"""JSON Schemas of every file `prep` writes, and validation against them."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pipeline.errors import PrepError
from pipeline.resources import data_path, missing

# The package's copy of the repository's schemas/ (see pipeline/resources.py).
SCHEMA_DIR = data_path("schemas")


@cache
def load_schema(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{name}.schema.json"
    if not path.is_file():
        raise missing(path)
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def validate(obj: Any, name: str, *, source: str = "document") -> None:
    """Raise `PrepError` naming the first violation of schemas/<name>.schema.json."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema(name))
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise PrepError(f"{source}: does not match schemas/{name}.schema.json at {where}: {_reason(err)}")


def _reason(err: Any) -> str:
    """jsonschema's message, except for a titled `not` (e.g. NaN), whose raw message quotes the subschema."""
    sub = err.validator_value
    title = sub.get("title") if err.validator == "not" and isinstance(sub, dict) else None
    return f"{err.instance!r} is {title}, which is not allowed" if title else str(err.message)
