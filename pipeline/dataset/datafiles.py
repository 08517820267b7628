"""v3.0: where an episode's rows really are, found the way LeRobot finds them.

LeRobot (0.4.x `datasets/utils.py load_nested_dataset`, 0.6.x `datasets/io_utils.py load_nested_dataset`) reads
every `data/*/*.parquet` in sorted path order as one table and addresses an episode's rows by position:
`dataset_from_index`..`dataset_to_index`. It never reads an episode's `data/chunk_index` / `data/file_index` to
load. LeRobot 0.4.4's own v2.1 -> v3.0 converter (`convert_dataset_v21_to_v30`) writes the first episode of every
new data file with the previous file's `data/file_index`: those rows are in the next file, and the reader loads
them bit-exact. `DataFiles.locate` names the file that holds an episode's first row by that rule; every command
reads the rows from there (a stale `data/file_index` is a warning, `stale_file_index`).

The locator reads one parquet footer per data file (rows per file), not the rows (~0.3 ms a file here: 2,000 data
files add 0.6 s to opening a dataset; a LeRobot corpus of 100 MB data files has one per 100 MB of parquet).
It is used only when it is consistent: the files' rows add up to the last episode's `dataset_to_index`
(otherwise positions mean nothing and the named files are kept; verify's row checks then say what is wrong).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.storage import HEADER_BLOCK, FileProblem, Root, as_root

DATA_DIR = "data"
_NUMBERS = re.compile(r"chunk-(\d+)/file-(\d+)\.parquet$")
STALE_KEPT = 1000  # stale episodes listed one by one (the rest counted)


@dataclass(slots=True, frozen=True)
class Stale:
    """One episode whose `data/file_index` names another file than the one holding its rows."""

    episode: int
    named: str  # the file data/chunk_index, data/file_index name
    real: str  # the file its rows are in (by dataset_from_index, across all data files)
    from_index: int
    to_index: int

    def line(self) -> str:
        return (f"episode {self.episode}: data/file_index names {self.named}, but its rows (index {self.from_index}.."
                f"{self.to_index - 1}) are in {self.real}; LeRobot finds rows by dataset_from_index across all data "
                "files and loads them, prep reads them from there")


class DataFiles:
    """Every data file of a v3.0 dataset in LeRobot's order, with the global index range each holds."""

    def __init__(self, where: Root) -> None:
        root = self.root = as_root(where)
        paths = (root / DATA_DIR).glob("*/*.parquet")  # one listing, sorted as LeRobot sorts them
        self.rels = [p.relative_to(root).as_posix() for p in paths]
        counts = []
        self.readable = True
        for p in paths:
            try:
                with p.media(block_size=HEADER_BLOCK, what="parquet file") as source:  # the footer only
                    counts.append(pq.read_metadata(source).num_rows)
            except (pa.ArrowException, OSError, FileProblem):  # an unreadable file: positions after it are unknown
                self.readable = False
                break
        self.ends = np.cumsum(np.asarray(counts, dtype=np.int64)) if counts else np.zeros(0, dtype=np.int64)

    @property
    def total_rows(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def usable(self, last_to_index: int) -> bool:
        """Positions are the reader's addresses only when every file was read and the rows add up."""
        return self.readable and len(self.rels) > 0 and self.total_rows == last_to_index

    def file_of(self, from_index: np.ndarray) -> np.ndarray:
        """The position in `rels` of the file holding each global index."""
        return np.searchsorted(self.ends, from_index, side="right")

    def locate(self, named: str, from_index: int) -> str:
        """The file holding global index `from_index` (the named one when it does)."""
        k = int(self.file_of(np.asarray([from_index]))[0])
        return self.rels[k] if k < len(self.rels) else named


def numbers_of(rel: str) -> tuple[int, int] | None:
    """(chunk_index, file_index) of a LeRobot data file name (`data/chunk-000/file-001.parquet`)."""
    m = _NUMBERS.search(rel)
    return (int(m.group(1)), int(m.group(2))) if m else None


def relocate_columns(root: Root, fill: Callable[[int, int], str], chunk: np.ndarray, file: np.ndarray,
                     index: np.ndarray, from_index: np.ndarray, length: np.ndarray) -> tuple[list[Stale], int]:
    """Point every episode's (chunk, file) columns (changed in place) at the data file that holds its rows.
    Returns the first `STALE_KEPT` stale episodes and how many there are in all."""
    if not len(index):
        return [], 0
    files = DataFiles(root)
    if not files.usable(int((from_index + length).max())):
        return [], 0
    real = files.file_of(from_index)
    pairs = np.unique(np.stack([chunk, file], axis=1), axis=0)
    named_rel = {(int(c), int(f)): fill(int(c), int(f)) for c, f in pairs}
    pair_of = {rel: p for p, rel in named_rel.items()}
    real_pair = []
    for rel in files.rels:  # each real file's (chunk, file), as the template would name it
        p = pair_of.get(rel) or numbers_of(rel)
        real_pair.append(p if p is not None and fill(*p) == rel else None)
    want = np.asarray([p if p is not None else (-1, -1) for p in real_pair], dtype=np.int64).reshape(-1, 2)
    rc, rf = want[real, 0], want[real, 1]
    off = np.flatnonzero(((rc != chunk) | (rf != file)) & (rc >= 0))
    stale = [Stale(int(index[k]), named_rel[(int(chunk[k]), int(file[k]))], files.rels[int(real[k])],
                   int(from_index[k]), int(from_index[k] + length[k])) for k in off[:STALE_KEPT]]
    chunk[off], file[off] = rc[off], rf[off]
    return stale, len(off)


def locator(where: Root) -> DataFiles | None:
    """A `DataFiles` for a streaming reader of the episode metadata (convert, edit), or None when positions are
    not the reader's addresses (see `DataFiles.usable`); the last `dataset_to_index` is read column-wise."""
    root = as_root(where)
    last = -1
    for path in (root / "meta/episodes").glob("chunk-*/file-*.parquet"):
        try:
            # not pq.read_table: that imports pyarrow.dataset and pandas (~0.5 s)
            with path.media(what="episode metadata parquet") as source, pq.ParquetFile(source) as pf:
                col = pf.read(columns=["dataset_to_index"])["dataset_to_index"]
        except (pa.ArrowException, OSError, KeyError, FileProblem):
            return None
        values = [v for v in col.to_pylist() if isinstance(v, int)]
        if values:
            last = max(last, max(values))
    files = DataFiles(root)
    return files if files.usable(last) else None
