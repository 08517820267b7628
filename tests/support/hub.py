"""A Hugging Face hub cache in huggingface_hub's own layout, built from files: what `snapshot_download` leaves
on a machine (`huggingface_hub.scan_cache_dir` reads it without a warning)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def make_hub_cache(cache: Path, repo_id: str, files: dict[str, bytes], revision: str = "main") -> Path:
    """`cache/datasets--OWNER--NAME/{blobs/<sha256>, refs/<revision>, snapshots/<commit>/<path>}` with each
    snapshot file a relative symlink into blobs/, as huggingface_hub writes it. Returns the snapshot folder."""
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    snap = repo / "snapshots" / commit
    for rel, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snap


def snapshot_of(root: Path, cache: Path, repo_id: str, revision: str = "main") -> Path:
    """A hub-cache snapshot holding every file of the dataset folder `root` (its bytes as blobs)."""
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return make_hub_cache(cache, repo_id, files, revision)
