"""Video files as data: packets, payloads, decoded frames and their hashes, PSNR.

- `packets(path)`: (payload, pts, dts, keyframe) of every non-empty packet of the first video stream;
- `payloads(path, t0=0.0, t1=None)`: the payloads of the packets whose pts lies in [t0, t1) (seconds, 0.1 ms
  slack), in decode order; `episode_payloads(root)`: each episode's payloads per camera, cut by its span;
- `decoded(path)`: every frame as rgb24 arrays; `frame_hashes(path)`: sha1 of each decoded frame (one thread);
- `psnr(a, b, identical=inf)`: the PSNR (dB, 8-bit peak) of two images or stacks; `identical` for equal ones.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import av
import numpy as np


def packets(path: Path) -> list[tuple[bytes, int, int, bool]]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return [(bytes(p), int(p.pts), int(p.dts), bool(p.is_keyframe)) for p in c.demux(s) if p.size]


def payloads(path: Path, t0: float = 0.0, t1: float | None = None) -> list[bytes]:
    """The packet payloads whose pts lie in [t0, t1) (t1 None: to the end), in decode order."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        tb = float(s.time_base)
        return [bytes(p) for p in c.demux(s)
                if p.size and p.pts is not None and t0 - 1e-4 <= p.pts * tb and (t1 is None or p.pts * tb < t1 - 1e-4)]


def episode_payloads(root: Path, only: list[int] | None = None, *,
                     allow_rejected: bool = False) -> dict[tuple[int, str], list[bytes]]:
    """Each episode's packet payloads per camera, cut from its file by its span: {(episode, camera): payloads}.
    The dataset's metadata must hold no rejected episode unless `allow_rejected`."""
    from pipeline.dataset import resolve_inside
    from pipeline.formats import open_dataset

    ds, rejected = open_dataset(root)
    assert allow_rejected or not rejected, rejected
    out: dict[tuple[int, str], list[bytes]] = {}
    for ep in ds.episodes:
        if only is not None and ep.index not in only:
            continue
        for ref in ep.videos:
            out[(ep.index, ref.camera)] = payloads(resolve_inside(ds.root, ref.rel), ref.from_timestamp,
                                                   ref.to_timestamp)
    return out


def decoded(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def frame_hashes(path: Path) -> tuple[str, ...]:
    """sha1 of every decoded frame (rgb24), in order."""
    out = []
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        stream.codec_context.thread_count = 1
        for frame in c.decode(stream):
            out.append(hashlib.sha1(frame.to_ndarray(format="rgb24").tobytes()).hexdigest())
    return tuple(out)


def psnr(a: np.ndarray, b: np.ndarray, identical: float = float("inf")) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return identical if mse == 0 else float(10 * np.log10(255.0**2 / mse))
