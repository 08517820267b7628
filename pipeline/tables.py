"""Per-episode tables written as they are reduced: Parquet row groups through `pyarrow.ParquetWriter`,
so a table of millions of rows never sits in memory (a few thousand rows are buffered at a time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.atomic import create_new, writing

ROWS_PER_GROUP = 16_384


class RowGroupWriter:
    """Append rows (dicts of the schema's columns); a row group is written every `rows_per_group` rows.

    Row groups fall at fixed row counts, so the same rows give the same file byte for byte."""

    def __init__(self, path: Path, schema: pa.Schema, rows_per_group: int = ROWS_PER_GROUP,
                 root: Path | None = None) -> None:
        self.path, self.schema, self.rows_per_group = path, schema, rows_per_group
        create_new(path, root)  # a new regular file of prep's (never through a link), then opened by name
        with writing(path):  # a full or read-only disk: WriteError naming the table
            self._writer = pq.ParquetWriter(path, schema)
        self._cols: dict[str, list[Any]] = {name: [] for name in schema.names}
        self._n = 0
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        for name, col in self._cols.items():
            col.append(row.get(name))
        self._n += 1
        self.rows += 1
        if self._n >= self.rows_per_group:
            self._flush()

    def _flush(self) -> None:
        if self._n:
            with writing(self.path):
                self._writer.write_table(pa.Table.from_pydict(self._cols, schema=self.schema))
            self._cols = {name: [] for name in self.schema.names}
            self._n = 0

    def close(self) -> Path:
        """Write what is buffered and close the file (an empty table still has its schema)."""
        self._flush()
        with writing(self.path):
            self._writer.close()
        return self.path

    def abort(self) -> None:
        try:
            self._writer.close()
        except OSError:  # the disk that failed the write may fail the close too: the file goes anyway
            pass
        finally:
            self.path.unlink(missing_ok=True)
