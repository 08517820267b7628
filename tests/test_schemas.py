"""Every schema we ship is a valid JSON Schema, and the files we ship validate against theirs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pipeline.schemas import SCHEMA_DIR, PrepError, validate

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted(SCHEMA_DIR.glob("*.schema.json")), ids=lambda p: p.name)
def test_schema_is_valid(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_shipped_manifests_validate() -> None:
    shipped = sorted(REPO.glob("manifests/**/*.manifest.json"))
    assert shipped, "the real fixture's manifest is shipped"
    for path in shipped:
        validate(json.loads(path.read_text()), "manifest", source=str(path))


def test_validation_names_the_bad_field() -> None:
    doc = json.loads((REPO / "manifests/reference/g1_inspire_v21.manifest.json").read_text())
    doc["totals"]["video_share"] = 1.5
    with pytest.raises(PrepError, match=r"totals/video_share"):
        validate(doc, "manifest", source="x")
