"""Where a read-only command's dataset lives: the DATASET argument as a `pipeline.storage.Location`.

DATASET is a local folder, a Hugging Face hub-cache snapshot, a hub repo id `OWNER/NAME` (resolved offline
from the local caches, at `--revision`), or an object-store URL (`s3://BUCKET/PREFIX`; the settings the
environment cannot say as `--storage-option KEY=VALUE`). Credentials come from the environment and the AWS
config files, never from the command line. What the command writes (a manifest, a report) stays local.

Light on purpose: `pipeline.storage` imports no object-store library until a URL is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.storage import OPTION_KEYS, Location, parse_location


def dataset_arg(text: str) -> str:
    """DATASET as typed (a URL keeps its `//`: no `Path` here); an empty string is refused (it would be the
    current folder, silently)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a dataset folder, hub repo id or URL, got {text!r} (use . for "
                                         "the current folder)")
    return text


DATASET_HELP = ("the dataset: a folder holding meta/info.json, a Hugging Face hub-cache snapshot, a hub repo id "
                "OWNER/NAME (found offline in the local caches, as LeRobotDataset(repo_id) finds it; never "
                "downloaded) or s3://BUCKET/PREFIX (configured as the AWS CLI is: AWS_ENDPOINT_URL, AWS_PROFILE, "
                "the key variables, ~/.aws/config)")


def add_location_options(p: Any, *, several: bool = False) -> None:
    """DATASET's positional argument and `--revision`, `--storage-option` (repeatable). `several`: DATASET is
    optional and more may follow (`args.more`), for commands that also take a corpus (`prep scan A B C`)."""
    if several:
        p.add_argument("dataset", type=dataset_arg, metavar="DATASET", nargs="?", help=DATASET_HELP
                       + ". Several DATASETs are a corpus (docs/corpus.md), as --corpus FILE listing them with "
                       "equal weights")
        p.add_argument("more", type=dataset_arg, metavar="DATASET", nargs="*", help=argparse.SUPPRESS)
    else:
        p.add_argument("dataset", type=dataset_arg, metavar="DATASET", help=DATASET_HELP)
    p.add_argument("--revision", metavar="REV",
                   help="with a hub repo id: the cached revision to read (a branch, tag or commit; default main)")
    add_storage_option(p)


def add_storage_option(p: Any, whose: str = "") -> None:
    """`--storage-option KEY=VALUE` (repeatable, `args.storage_options`): what the environment cannot say about an
    object-store URL (`whose`: which one, when a command takes several)."""
    p.add_argument("--storage-option", dest="storage_options", action="append", default=[], metavar="KEY=VALUE",
                   help=f"with an object-store URL{whose}, what the environment cannot say (repeatable): "
                   + "; ".join(f"{k}: {v}" for k, v in OPTION_KEYS.items())
                   + ". Credentials are never options (set them in the environment or ~/.aws/credentials)")


def dataset_location(args: argparse.Namespace, *, reachable: bool = True) -> Location:
    """The DATASET argument's location (parsed once per run). `reachable`: an object store is asked one short
    question first, so missing credentials or a dead endpoint are one line naming the URL (exit 2)."""
    loc: Location | None = getattr(args, "_location", None)
    if loc is None:
        loc = parse_location(args.dataset, revision=args.revision, options=args.storage_options)
        args._location = loc
        if reachable and not loc.is_local:
            loc.store().check_reachable()
    return loc


def default_name(location: Location) -> str:
    """The name a default output (a manifest) takes after the dataset: a local folder's own name (links
    resolved), a hub dataset's NAME (not its snapshot's commit), an object prefix's last part (or bucket)."""
    if location.is_local:
        repo = location.link_root
        if repo is not None and repo != location.root:  # a hub snapshot: .../datasets--OWNER--NAME/snapshots/<rev>
            return Path(repo).name.split("--")[-1]
        return Path(location.root).resolve().name
    return location.name


def shared_paths(location: Location) -> list[Path]:
    """What the workers of a remote or SLURM cluster must see at the same path: a local dataset's folder (a hub
    snapshot's whole cache repository folder: its links point into its blobs); nothing for an object store
    (each worker reads it with its own credentials)."""
    if not location.is_local:
        return []
    return [Path(location.link_root or location.root)]
