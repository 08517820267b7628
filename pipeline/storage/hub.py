"""Hugging Face hub datasets on this machine, found offline, never downloaded.

Two places hold them:
- `$HF_LEROBOT_HOME/OWNER/NAME` (default `$HF_HOME/lerobot`): where `LeRobotDataset(repo_id)` keeps a dataset
  by default (`snapshot_download(local_dir=...)`: plain files, no revisions);
- the hub cache (`$HF_HUB_CACHE`, default `$HF_HOME/hub`): `datasets--OWNER--NAME/snapshots/<rev>/...`, whose
  files are relative symlinks into `../../blobs/`, with `refs/<branch>` naming each branch's revision
  (huggingface_hub's `snapshot_download(..., local_files_only=True)` resolves it; that is what we call).

A snapshot's links into `blobs/` are followed; every other symlink stays refused (`pipeline.storage.local`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pipeline.storage.base import StorageError
from pipeline.text import printable

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
REPO_FOLDER_RE = re.compile(r"^(datasets|models|spaces)--.+$")


def looks_like_repo_id(text: str) -> bool:
    return bool(REPO_ID_RE.match(text)) and ".." not in text


def snapshot_repo_folder(path: Path) -> Path | None:
    """The cache repository folder (`.../datasets--OWNER--NAME`) when `path` is a snapshot or below one."""
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and REPO_FOLDER_RE.match(parts[i - 1]):
            return Path(*parts[:i])
    return None


def hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface"


def lerobot_home() -> Path:
    """Where `LeRobotDataset(repo_id)` keeps datasets (lerobot.utils.constants.HF_LEROBOT_HOME)."""
    if os.environ.get("HF_LEROBOT_HOME"):
        return Path(os.environ["HF_LEROBOT_HOME"]).expanduser()
    return hf_home() / "lerobot"


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return hf_home() / "hub"


def resolve_repo_id(repo_id: str, revision: str | None = None) -> Path:
    """The local folder of hub dataset `repo_id`: LeRobot's own copy (no revision asked), else the hub cache's
    snapshot of `revision` (default the `main` branch). Offline; one line when neither has it."""
    own = lerobot_home() / repo_id
    if revision is None and (own / "meta" / "info.json").is_file():
        return own
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache()
    try:
        path = snapshot_download(repo_id, repo_type="dataset", revision=revision, local_files_only=True,
                                 cache_dir=str(cache))
    except LocalEntryNotFoundError:
        refs = _cached_refs(cache, repo_id)
        if refs and revision is None:
            hint = f"; cached revisions: {', '.join(printable(r) for r in refs)} (pass --revision)"
        elif refs:
            hint = f"; cached revisions: {', '.join(printable(r) for r in refs)}"
        else:
            hint = (f"; prep never downloads: fetch it first (`hf download --repo-type dataset {repo_id}`, or "
                    "LeRobotDataset(repo_id) once)")
        asked = f" at revision {printable(revision)}" if revision else ""
        places = (f"{printable(str(cache))}" if revision else
                  f"{printable(str(own))} nor in the hub cache {printable(str(cache))}")
        raise StorageError(f"{printable(repo_id)}: no such folder, and no cached copy of the hub dataset{asked} in "
                           f"{places}{hint}") from None
    return Path(path)


def _cached_refs(cache: Path, repo_id: str) -> list[str]:
    refs = cache / ("datasets--" + repo_id.replace("/", "--")) / "refs"
    try:
        return sorted(p.name for p in refs.iterdir() if p.is_file())
    except OSError:
        return []
