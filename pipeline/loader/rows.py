"""The non-video columns of every episode, loaded once into flat numpy arrays.

Arrays (not Python lists) so that forked DataLoader workers share them copy-on-write
without reference-count writes touching every page.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dataset import Dataset, Episode
from pipeline.errors import DatasetError, EpisodeError
from pipeline.storage import STREAM_BLOCK, FileProblem

STATE_KEY = "observation.state"
ACTION_KEY = "action"
COLUMNS = (STATE_KEY, ACTION_KEY, "timestamp", "frame_index", "episode_index", "index")


@dataclass(slots=True)
class EpisodeRows:
    """Rows of all episodes back to back; episode k owns rows starts[k] : starts[k] + lengths[k]."""

    episodes: list[Episode]
    starts: np.ndarray  # int64 (E,)
    lengths: np.ndarray  # int64 (E,)
    state: np.ndarray  # float32 (N, D)
    action: np.ndarray  # float32 (N, A)
    timestamp: np.ndarray  # float64 (N,), seconds from the episode start (the parquet column)
    frame_index: np.ndarray  # int64 (N,)
    index: np.ndarray  # int64 (N,), the dataset-global index column

    @property
    def total(self) -> int:
        return int(self.lengths.sum())

    def locate(self, i: int) -> tuple[int, int]:
        """(episode position, frame offset in the episode) of global row `i`."""
        if not 0 <= i < self.total:
            raise IndexError(f"index {i} out of range for {self.total} rows")
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return k, i - int(self.starts[k])


def _matrix(column: pa.ChunkedArray, n: int) -> np.ndarray:
    """A list<float> column as an (n, d) float32 array."""
    arr = column.combine_chunks()
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        flat = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        return flat.reshape(n, -1) if n else flat.reshape(0, 0)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(n, 1)


def load_rows(ds: Dataset) -> EpisodeRows:
    """Read every episode's rows from its parquet file (each file read once), in episode order."""
    by_file: dict[str, pa.Table] = {}
    parts: list[dict[str, np.ndarray]] = []
    for ep in ds.episodes:
        if ep.data.rel not in by_file:
            path = ds.root / ep.data.rel
            try:
                path.store.check(path.rel)  # inside the dataset (its store's rules)
            except FileProblem as exc:
                raise EpisodeError(ep.index, exc.path, exc.message) from None
            try:
                with path.media(block_size=STREAM_BLOCK, what="parquet file") as source:
                    table = pq.read_table(source, columns=list(COLUMNS))
            except FileProblem as exc:
                raise DatasetError(path, f"cannot read parquet columns {list(COLUMNS)}: {exc.message}") from None
            except (pa.ArrowException, OSError) as exc:
                raise DatasetError(path, f"cannot read parquet columns {list(COLUMNS)}: {exc}") from None
            by_file = {ep.data.rel: table}  # keep one file at a time: episodes are sorted by file
        table = by_file[ep.data.rel]
        ep_col = np.asarray(table.column("episode_index").to_numpy(zero_copy_only=False))
        rows = table.filter(pa.array(ep_col == ep.index))
        n = rows.num_rows
        if n == 0:
            raise DatasetError(ds.root / ep.data.rel, f"episode {ep.index}: no rows")
        order = np.argsort(np.asarray(rows.column("frame_index").to_numpy(zero_copy_only=False)), kind="stable")
        rows = rows.take(pa.array(order))
        parts.append({
            "state": _matrix(rows.column(STATE_KEY), n),
            "action": _matrix(rows.column(ACTION_KEY), n),
            "timestamp": np.asarray(rows.column("timestamp").to_numpy(zero_copy_only=False), dtype=np.float64),
            "frame_index": np.asarray(rows.column("frame_index").to_numpy(zero_copy_only=False), dtype=np.int64),
            "index": np.asarray(rows.column("index").to_numpy(zero_copy_only=False), dtype=np.int64),
        })
    lengths = np.array([len(p["timestamp"]) for p in parts], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(parts) else lengths

    def cat(key: str) -> np.ndarray:
        return np.concatenate([p[key] for p in parts]) if parts else np.zeros(0)

    return EpisodeRows(
        episodes=list(ds.episodes),
        starts=starts,
        lengths=lengths,
        state=cat("state"),
        action=cat("action"),
        timestamp=cat("timestamp"),
        frame_index=cat("frame_index"),
        index=cat("index"),
    )
