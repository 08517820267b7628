"""The stand-in training step: it takes `seconds` and consumes the batch.

- cpu: the batch is touched (so lazily shared tensors are really mapped) and the process sleeps,
  leaving every core to the DataLoader workers, as a GPU-bound step would.
- cuda: tensors go host->device with `non_blocking=True` (from pinned memory), then bf16 matmuls
  calibrated on this GPU fill `seconds`, then one synchronize, so the step's wall time is real
  GPU time and the next `next(loader)` is timed from an idle GPU, as in a JAX/PyTorch train loop.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch


class Step(Protocol):
    seconds: float

    def __call__(self, batch: dict[str, Any]) -> float: ...


def _tensors(batch: dict[str, Any]) -> list[torch.Tensor]:
    return [v for k, v in batch.items() if isinstance(v, torch.Tensor) and not k.startswith("_")]


class SleepStep:
    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds)

    def __call__(self, batch: dict[str, Any]) -> float:
        start = time.perf_counter()
        for t in _tensors(batch):
            if t.numel():
                t.reshape(-1)[0].item()
        remaining = self.seconds - (time.perf_counter() - start)
        if remaining > 0:
            time.sleep(remaining)
        return time.perf_counter() - start


class CudaStep:
    """Real GPU work of about `seconds` per step (matmul count calibrated once)."""

    def __init__(self, seconds: float, device: str = "cuda", size: int = 8192) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
        self.seconds = max(0.0, seconds)
        self.device = torch.device(device)
        self.a = torch.randn(size, size, device=self.device, dtype=torch.bfloat16)
        self.b = torch.randn(size, size, device=self.device, dtype=torch.bfloat16)
        self.out = torch.empty(size, size, device=self.device, dtype=torch.bfloat16)
        self.matmul_s = self._calibrate()
        self.matmuls = round(self.seconds / self.matmul_s) if self.seconds > 0 else 0

    def _calibrate(self, reps: int = 50) -> float:
        for _ in range(5):
            torch.matmul(self.a, self.b, out=self.out)
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.matmul(self.a, self.b, out=self.out)
        end.record()
        end.synchronize()
        return max(1e-6, start.elapsed_time(end) / 1000.0 / reps)

    def __call__(self, batch: dict[str, Any]) -> float:
        start = time.perf_counter()
        on_device = [t.to(self.device, non_blocking=True) for t in _tensors(batch)]
        acc = torch.zeros((), device=self.device, dtype=torch.float32)
        for t in on_device:  # consume the batch on the GPU so the copies are part of the step
            if t.numel():
                acc += t.reshape(-1)[:1024].float().sum()
        for _ in range(self.matmuls):
            torch.matmul(self.a, self.b, out=self.out)
        torch.cuda.synchronize(self.device)
        del on_device, acc
        return time.perf_counter() - start


def make_step(seconds: float, device: str) -> Step:
    if device == "cuda":
        return CudaStep(seconds)
    return SleepStep(seconds)
