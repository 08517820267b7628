"""The Hugging Face `datasets` features stored in a LeRobot data parquet's schema (key `huggingface`).

lerobot 0.3.x writes them with datasets 3.x, where a fixed-length vector is `{"_type": "Sequence",
"length": n, ...}`; lerobot 0.4.x with datasets >= 4, where the same vector is `{"_type": "List", ...}`.
datasets 3.6 (lerobot 0.3.3's pin) refuses a `List` ("Feature type 'List' not found") when it opens the
parquet, so a v2.1 output must carry `Sequence`; datasets 4 still reads `Sequence`, but LeRobot 0.4's
writer records `List`, so a v3.0 output carries that. A source without these features (LeRobot's own
v2.1 -> v3.0 converter writes pandas metadata instead) gets them from `meta/info.json`, as LeRobot's
`get_hf_features_from_features` derives them.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

HF_KEY = b"huggingface"
SEQUENCE_TYPE = {"v2.1": "Sequence", "v3.0": "List"}


def retarget(obj: Any, version: str) -> Any:
    """`obj` (a features dict, as JSON) with every Sequence/List node named as `version`'s datasets names it."""
    name = SEQUENCE_TYPE[version]
    if isinstance(obj, list):
        return [retarget(v, version) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: retarget(v, version) for k, v in obj.items()}
    if out.get("_type") in ("Sequence", "List"):
        out["_type"] = name
    return out


def features_from_info(features: dict[str, Any], version: str) -> dict[str, Any]:
    """LeRobot's `get_hf_features_from_features` as JSON (videos are not in the parquet)."""
    out: dict[str, Any] = {}
    for key, ft in features.items():
        dtype, shape = ft.get("dtype"), list(ft.get("shape") or [])
        if dtype == "video":
            continue
        if dtype == "image":
            out[key] = {"_type": "Image"}
        elif shape == [1]:
            out[key] = {"dtype": dtype, "_type": "Value"}
        elif len(shape) == 1:
            out[key] = {"feature": {"dtype": dtype, "_type": "Value"}, "length": shape[0],
                        "_type": SEQUENCE_TYPE[version]}
        elif 2 <= len(shape) <= 5:
            out[key] = {"shape": shape, "dtype": dtype, "_type": f"Array{len(shape)}D"}
        else:
            raise ValueError(f"feature {key!r}: shape {shape} has no datasets feature")
    return out


def source_features(schema: pa.Schema) -> dict[str, Any] | None:
    """The features a parquet's schema metadata records, or None."""
    meta = schema.metadata or {}
    if HF_KEY not in meta:
        return None
    try:
        doc = json.loads(meta[HF_KEY].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    feats = doc.get("info", {}).get("features") if isinstance(doc, dict) else None
    return feats if isinstance(feats, dict) else None


def target_metadata(schema: pa.Schema, info_features: dict[str, Any], version: str) -> dict[bytes, bytes]:
    """The schema metadata of an output data parquet: only `huggingface` (no pandas block), in the
    target version's naming, from the source's own features when it has them."""
    feats = source_features(schema)
    feats = retarget(feats, version) if feats is not None else features_from_info(info_features, version)
    # Only the columns the file holds, in its column order (as datasets writes them).
    ordered = {name: feats[name] for name in schema.names if name in feats}
    return {HF_KEY: json.dumps({"info": {"features": ordered}}).encode("utf-8")}
