"""Count failed samples instead of letting one bad frame kill a long benchmark.

`Guarded` wraps a dataset that has `empty_item()`: an item whose `__getitem__` raises is replaced by
the empty item with `_error` = 1 and the message in `_error_msg`; good items carry `_error` = 0 and
`""`. Every item also carries `_sample_s`, the seconds its `__getitem__` took in the worker.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch
from torch.utils.data import Dataset as TorchDataset


class ItemSource(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    def empty_item(self) -> dict[str, Any]: ...


class Guarded(TorchDataset[dict[str, Any]]):
    def __init__(self, source: ItemSource) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            item = self.source[i]
            error, message = 0, ""
        except Exception as exc:  # counted and reported; the loop goes on
            item = self.source.empty_item()
            error, message = 1, f"item {i}: {type(exc).__name__}: {exc}"
        item["_error"] = torch.tensor(error, dtype=torch.int64)
        item["_error_msg"] = message
        item["_sample_s"] = torch.tensor(time.perf_counter() - start, dtype=torch.float64)
        return item
