"""The corpus description: which datasets make one training mixture, and how each enters it.

A corpus is read from a TOML file (`--corpus corpus.toml`) or made from the datasets named on the command
line (`prep scan A B C`: the same as a file listing them with equal weights):

    name = "pretrain-mix"                      # optional; default: the file's name without .toml

    [[datasets]]
    source = "data/g1_inspire_v21"             # a folder (relative to this file), OWNER/NAME or s3://BUCKET/PREFIX
    name = "g1"                                # optional, unique: names the dataset's outputs
    weight = 2.0                               # optional, > 0 (default 1): share = weight / sum of weights
    label = "unitree_g1"                       # optional: robot or embodiment (default: info.json robot_type)
    [datasets.cameras]                         # optional: the model's camera slots -> this dataset's cameras
    base_0_rgb = "observation.images.cam_high"
    left_wrist_0_rgb = "observation.images.cam_left_wrist"

TOML because prep already reads TOML within bounds (`pipeline.bounded.load_toml`: size and nesting checked
before parsing) with the standard library's `tomllib` (no YAML dependency), its budget and cluster files are
TOML, and TOML has no implicit typing (YAML reads `no` as false and `1.10` as 1.1).

The file is checked against schemas/corpus.schema.json; a violation is one line naming the file, the entry
(its number and name) and the field. A source is located (`pipeline.storage.parse_location`) only when its
dataset is worked on, so a hub dataset missing from the cache fails that dataset, not the corpus.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.bounded import MAX_TOML_BYTES, load_toml, loads_toml
from pipeline.errors import PrepError
from pipeline.storage import Location, MissingFile, StorePath, parse_location
from pipeline.storage.base import URL_RE
from pipeline.storage.hub import looks_like_repo_id, snapshot_repo_folder
from pipeline.text import printable

CORPUS_SCHEMA = "corpus"
# openpi's (and LeRobot's pi0/pi0.5) image inputs: the model's three camera slots, in its order
SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
RESERVED = ("prep", "corpus")  # folders and files of prep's own under a corpus output
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


@dataclass(slots=True, frozen=True)
class Entry:
    """One dataset of the corpus. `number`: its place in the corpus (1-based), for messages."""

    number: int
    source: str  # as written (a corpus file's relative folder already joined to the file's folder)
    name: str
    weight: float = 1.0
    label: str | None = None
    cameras: tuple[tuple[str, str], ...] = ()  # (slot, camera key), in SLOTS order
    revision: str | None = None
    storage_options: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """`dataset 2 (g1)`: how messages name the entry."""
        return f"dataset {self.number} ({printable(self.name)})"

    def locate(self) -> Location:
        """The dataset's location (a hub repo id resolved offline now); `StorageError` when it cannot be."""
        return parse_location(self.source, revision=self.revision, options=self.storage_options)

    def camera_map(self) -> dict[str, str]:
        return dict(self.cameras)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "weight": self.weight, "label": self.label,
                "cameras": self.camera_map()}


@dataclass(slots=True, frozen=True)
class Corpus:
    """The datasets of one mixture, in the order given. `path`: the corpus file, a local one or an object (None: the
    command line)."""

    name: str
    entries: tuple[Entry, ...]
    path: Path | StorePath | None = None
    weights_given: bool = field(default=False)  # a corpus file set some weight

    @property
    def weight_total(self) -> float:
        return math.fsum(e.weight for e in self.entries)

    def share(self, entry: Entry) -> float:
        """The entry's share of the training samples: its weight over the sum of the weights."""
        return entry.weight / self.weight_total

    @property
    def shown(self) -> str:
        return printable(str(self.path)) if self.path is not None else "the datasets given"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": str(self.path) if self.path is not None else None,
                "datasets": [e.to_json() for e in self.entries]}


# ---- names ----------------------------------------------------------------------------------------


def derived_name(source: str) -> str:
    """The name a dataset gets when none is given: a local folder's own name (a hub snapshot's NAME), a hub repo
    id's NAME, an object prefix's last part; characters a file name should not hold become '_'."""
    m = URL_RE.match(source)
    if m:
        rest = m.group("rest").rstrip("/")
        raw = rest.rsplit("/", 1)[-1] or rest
    else:
        path = Path(source).expanduser()
        if os.path.lexists(path):
            resolved = path.resolve()
            repo = snapshot_repo_folder(resolved)
            raw = repo.name.split("--")[-1] if repo is not None else resolved.name
        elif looks_like_repo_id(source):
            raw = source.rsplit("/", 1)[-1]
        else:
            raw = path.name
    name = re.sub(r"[^A-Za-z0-9._-]", "_", raw).lstrip(".-")[:128] or "dataset"
    return f"{name}_" if name in RESERVED else name


def _unique(names: Sequence[str]) -> list[str]:
    """Derived names made unique in order: a second `data` becomes `data-2`."""
    seen: set[str] = set()
    out = []
    for n in names:
        candidate, k = n, 1
        while candidate in seen:
            k += 1
            candidate = f"{n}-{k}"
        seen.add(candidate)
        out.append(candidate)
    return out


# ---- reading a corpus file --------------------------------------------------------------------------


def _schema_problem(doc: Any, path: Path | StorePath) -> str | None:
    """The first violation of schemas/corpus.schema.json, as `dataset N (NAME): FIELD: what` (None: valid)."""
    import jsonschema

    from pipeline.schemas import load_schema

    validator = jsonschema.Draft202012Validator(load_schema(CORPUS_SCHEMA))
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    err = errors[0]
    parts = list(err.absolute_path)
    if len(parts) >= 2 and parts[0] == "datasets" and isinstance(parts[1], int):
        item = doc["datasets"][parts[1]]
        name = item.get("name") if isinstance(item, dict) else None
        label = name if isinstance(name, str) else item.get("source") if isinstance(item, dict) else None
        head = f"dataset {parts[1] + 1}" + (f" ({printable(label)})" if isinstance(label, str) else "")
        rest = parts[2:]
    else:
        head, rest = "", parts
    fld = ".".join(str(p) for p in rest)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        known = ", ".join(err.schema.get("properties", {}))
        what = f"unknown field {printable(extra[0]) if extra else '?'} (known: {known})"
        fld = ".".join([*map(str, rest), *(map(printable, extra[:1]))])
    elif err.validator == "required":
        missing = [k for k in err.validator_value if not isinstance(err.instance, dict) or k not in err.instance]
        fld = ".".join([*map(str, rest), *missing[:1]])
        what = "required, missing"
    elif err.validator == "not" and rest and rest[-1] == "name":
        what = f"{printable(repr(err.instance))} is prep's own name ({', '.join(RESERVED)}); choose another"
    elif err.validator == "pattern" and rest and rest[-1] == "name":
        what = (f"{printable(repr(err.instance))}: a name is letters, digits, '.', '_' and '-' (up to 128), not "
                "starting with '.' or '-'")
    else:
        what = printable(err.message)
    where = ": ".join(x for x in (head, fld) if x)
    return f"{printable(str(path))}: {where}: {what}" if where else f"{printable(str(path))}: {what}"


def _source_of(raw: str, base: Path) -> str:
    """A corpus file's `source`: a URL as it is; a relative folder joined to the corpus file's folder; a hub repo
    id (`OWNER/NAME` that is no folder there) as it is."""
    if URL_RE.match(raw):
        return raw
    path = Path(raw).expanduser()
    if path.is_absolute():
        return str(path)
    candidate = base / path
    if os.path.lexists(candidate) or not looks_like_repo_id(raw):
        return str(candidate)
    return raw


def _source_beside(raw: str, corpus: StorePath, number: int) -> str:
    """A corpus file in an object store: its `source` a URL or an absolute local path as it is; a relative one beside
    the file, in its bucket (one leaving the bucket is refused), unless nothing is stored there and it reads as a hub
    repo id (`OWNER/NAME`), as a local corpus file's relative source is a folder when one is there."""
    import posixpath

    if URL_RE.match(raw) or raw.startswith(("/", "~")):
        return raw if URL_RE.match(raw) else str(Path(raw).expanduser())
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(corpus.rel), raw))
    if joined == ".." or joined.startswith("../"):
        raise PrepError(f"{printable(str(corpus))}: dataset {number}: source: {printable(raw)} leaves the bucket "
                        f"{corpus.location.shown}; a corpus file in an object store names its datasets relative to "
                        "itself in its bucket, or by URL")
    candidate = StorePath(corpus.location, "" if joined == "." else joined)
    if not looks_like_repo_id(raw) or candidate.is_dir():
        return candidate.url
    return raw


def _load_object(path: StorePath) -> Any:
    """A corpus file in an object store, read bounded as a local one is (its size before the GET)."""
    try:
        path.store.check_reachable()  # credentials, endpoint, bucket: one line naming the URL
        data = path.read_bytes(limit=MAX_TOML_BYTES, what="corpus file")
    except MissingFile:
        raise PrepError(f"{printable(str(path))}: corpus file not found") from None
    try:
        return loads_toml(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PrepError(f"{printable(str(path))}: cannot read the corpus file: not UTF-8: {exc}") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise PrepError(f"{printable(str(path))}: cannot read the corpus file: {printable(str(exc))}") from None


def load_corpus(path: Path | StorePath) -> Corpus:
    """Read and check a corpus file (a local one, or an object: `pipeline.storage.parse_file`); `PrepError` (one
    line, exit 2) naming the entry and the field at fault."""
    if not isinstance(path, StorePath):
        path = Path(path)
    if path.suffix.lower() == ".json":
        raise PrepError(f"{printable(str(path))}: a corpus description is a TOML file (corpus.toml, docs/corpus.md); "
                        "a .json corpus is the manifest `prep scan --corpus` writes (pass it to prep budget --corpus)")
    if isinstance(path, StorePath):
        doc = _load_object(path)
    else:
        try:
            doc = load_toml(path)
        except FileNotFoundError:
            raise PrepError(f"{printable(str(path))}: corpus file not found") from None
        except IsADirectoryError:
            raise PrepError(f"{printable(str(path))}: is a folder, not a corpus file (corpus.toml)") from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise PrepError(f"{printable(str(path))}: cannot read the corpus file: {printable(str(exc))}") from None
    problem = _schema_problem(doc, path)
    if problem is not None:
        raise PrepError(problem)
    items: list[dict[str, Any]] = doc["datasets"]
    if isinstance(path, StorePath):
        sources = [_source_beside(item["source"], path, i + 1) for i, item in enumerate(items)]
    else:
        sources = [_source_of(item["source"], path.absolute().parent) for item in items]
    derived = _unique([derived_name(s) for s in sources])
    given: dict[str, int] = {}
    for i, item in enumerate(items):
        if "name" in item:
            given.setdefault(item["name"], i)
    for i, item in enumerate(items):  # an explicit name used twice, or taken by a derived one: said, never renamed
        if "name" in item and given[item["name"]] != i:
            raise PrepError(f"{printable(str(path))}: dataset {i + 1} ({printable(item['name'])}): name: "
                            f"dataset {given[item['name']] + 1} has the same name; names must be unique")
    names = []
    taken = set(given)
    for i, item in enumerate(items):
        if "name" in item:
            names.append(item["name"])
            continue
        name, k = derived[i], 1
        while name in taken:
            k += 1
            name = f"{derived[i]}-{k}"
        taken.add(name)
        names.append(name)
    entries = tuple(
        Entry(number=i + 1, source=sources[i], name=names[i], weight=float(item.get("weight", 1.0)),
              label=item.get("label"), cameras=tuple((s, item["cameras"][s]) for s in SLOTS
                                                     if s in item.get("cameras", {})),
              revision=item.get("revision"), storage_options=tuple(item.get("storage_options", ())))
        for i, item in enumerate(items))
    _refuse_twice(entries, path)
    name = doc.get("name") or re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip(".-") or "corpus"
    return Corpus(name=name, entries=entries, path=path if isinstance(path, StorePath) else path.absolute(),
                  weights_given=any("weight" in item for item in items))


def corpus_of_arguments(datasets: Sequence[str], *, revision: str | None = None,
                        storage_options: Iterable[str] = ()) -> Corpus:
    """The datasets named on the command line, as a corpus with equal weights (`--revision` and
    `--storage-option` apply to each)."""
    opts = tuple(storage_options)
    names = _unique([derived_name(s) for s in datasets])
    entries = tuple(Entry(number=i + 1, source=s, name=names[i], revision=revision,
                          storage_options=opts if URL_RE.match(s) else ())
                    for i, s in enumerate(datasets))
    _refuse_twice(entries, None)
    return Corpus(name="corpus", entries=entries, path=None)


def _identity(entry: Entry) -> str:
    """What two entries naming the same dataset share: a URL, a resolved folder, or a repo id and revision."""
    if URL_RE.match(entry.source):
        return entry.source.rstrip("/")
    path = Path(entry.source).expanduser()
    if os.path.lexists(path) or not looks_like_repo_id(entry.source):
        return str(path.resolve())
    return f"{entry.source}@{entry.revision or 'main'}"


def _refuse_twice(entries: Sequence[Entry], path: Path | StorePath | None) -> None:
    """A dataset listed twice would count twice in every total: refused in one line."""
    seen: dict[str, Entry] = {}
    where = f"{printable(str(path))}: " if path is not None else ""
    for e in entries:
        first = seen.setdefault(_identity(e), e)
        if first is not e:
            raise PrepError(f"{where}{e.where}: source: {printable(e.source)} is {first.where} again; each dataset "
                            "counts once (give it a larger weight instead)")


# ---- the camera mapping against a dataset ---------------------------------------------------------


def camera_problem(entry: Entry, cameras: Sequence[str]) -> str | None:
    """Why the entry's camera mapping does not fit a dataset with these camera keys (None: it fits)."""
    for slot, key in entry.cameras:
        if key not in cameras:
            have = ", ".join(printable(c) for c in cameras) or "none"
            return f"{entry.where}: cameras.{slot}: {printable(key)} is not a camera of the dataset (it has: {have})"
    return None
