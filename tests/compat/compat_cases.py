"""The compatibility test cases, shared by test_lerobot_v21.py and test_lerobot_v30.py.

Each of those modules skips unless its lerobot version is installed, provides the `fmt`
fixture ("v21" or "v30") and imports these functions, so the same checks run against
lerobot 0.3.3 (format v2.1, as openpi pins it) and lerobot 0.4.4 (format v3.0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compat_support import (
    backend_arg,
    backend_of,
    drop_last_frame,
    iterate_all,
    lerobot_frames,
    lerobot_version,
    letterbox,
    load_info,
    mse,
    open_dataset,
    psnr,
    reference_frames,
    report,
    sample_indices,
    video_file,
    video_keys,
    writable_copy,
)

BACKENDS = ("default", "pyav")
CORPORA = ("synthetic", "real", "synthetic-224", "real-224")


def corpus_name(kind: str, fmt: str) -> str:
    """("real-224", "v30") -> "real-v30-224"."""
    base, _, suffix = kind.partition("-")
    return f"{base}-{fmt}" + (f"-{suffix}" if suffix else "")


@pytest.mark.readers
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CORPORA)
def test_iterate_every_sample(corpora, fmt: str, kind: str, backend: str) -> None:
    """Open with LeRobotDataset(repo_id, root=...), default tolerance, and read every sample with
    a 50-step action chunk: image shape/dtype/range, timestamps, action chunk shape and padding."""
    name = corpus_name(kind, fmt)
    root = corpora.get(name)
    ds = open_dataset(root, backend_arg(backend))
    n = iterate_all(ds, root)
    info = load_info(root)
    shapes = {tuple(info["features"][c]["shape"]) for c in video_keys(info)}
    report(
        f"compat {fmt} lerobot {lerobot_version()} {name} backend={backend_of(ds)}: "
        f"{n} samples x {len(video_keys(info))} cameras read, shapes {sorted(shapes)}, action chunks ok"
    )


@pytest.mark.readers
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", CORPORA)
def test_frames_identical_to_pyav_decode(corpora, fmt: str, kind: str, backend: str) -> None:
    """The frames LeRobot returns are the frames PyAV decodes straight from the same mp4 (the
    right frame for each timestamp, nothing shifted): identical with the pyav backend; torchcodec
    converts YUV to RGB with its own swscale setup, so it may differ by rounding only."""
    name = corpus_name(kind, fmt)
    root = corpora.get(name)
    ds = open_dataset(root, backend_arg(backend), horizon=None)
    got = lerobot_frames(ds, root, sample_indices(ds))
    ref = reference_frames(ds, root, got)
    worst, worst_mean = 0, 0.0
    for key, frame in got.items():
        diff = np.abs(frame.astype(np.int16) - ref[key].astype(np.int16))
        worst, worst_mean = max(worst, int(diff.max())), max(worst_mean, float(diff.mean()))
        # A wrong frame (off by one in time) differs by far more than rounding on moving content.
        assert float(diff.mean()) < 1.0, f"{name} {key}: mean |diff| {float(diff.mean()):.2f} vs PyAV decode"
        if backend_of(ds) == "pyav":
            assert int(diff.max()) == 0, f"{name} {key}: pyav backend differs from PyAV decode by {int(diff.max())}"
    report(
        f"compat {fmt} {name} backend={backend_of(ds)}: {len(got)} frames vs PyAV decode: "
        f"max |diff| {worst}, worst mean |diff| {worst_mean:.3f} (of 255)"
    )


# (source, output variant, minimum PSNR in dB over RGB, minimum over the channel mean):
# geometry and scaling are proven at crf 0. The synthetic texture is chroma-heavy, so 4:2:0 alone
# costs it ~29 dB against an RGB reference: its RGB bar is checked on the 4:4:4 profile, and its
# 4:2:0 output on the channel mean (luma-like). The default crf is reported, with a loose floor
# that only a wrong or shifted picture would miss.
LETTERBOX_CASES = [
    ("synthetic", "-224-444-crf0", 35.0, 35.0),
    ("synthetic", "-224-crf0", None, 35.0),
    ("synthetic", "-224", 20.0, None),
    ("real", "-224-crf0", 35.0, 35.0),
    ("real", "-224", 28.0, None),
]


@pytest.mark.readers
@pytest.mark.parametrize(("source", "variant", "min_rgb", "min_mean"), LETTERBOX_CASES,
                         ids=[f"{s}{v}" for s, v, _a, _b in LETTERBOX_CASES])
def test_letterbox_matches_openpi(
    corpora, fmt: str, source: str, variant: str, min_rgb: float | None, min_mean: float | None
) -> None:
    """Frames LeRobot returns from `prep reencode --dst 224` equal openpi's resize_with_pad of the
    decoded source frame (PIL bilinear to 224x168, pasted at (0, 28) on black): PSNR >= 35 dB at
    crf 0 (geometry and scaling proven apart from compression); the default crf's PSNR is reported."""
    src_name = corpus_name(source, fmt)
    out_name = src_name + variant
    out = corpora.get(out_name)
    src = corpora.get(src_name)
    ds = open_dataset(out, None, horizon=None)
    src_ds = open_dataset(src, "pyav", horizon=None)
    got = lerobot_frames(ds, out, sample_indices(ds, per_episode=8 if source == "synthetic" else 4))
    originals = reference_frames(src_ds, src, got)
    total, total_mean, worst, bars = 0.0, 0.0, float("inf"), 0
    for key, frame in got.items():
        ref = letterbox(originals[key])
        assert ref.shape == frame.shape == (224, 224, 3)
        m = mse(frame, ref)
        total += m
        total_mean += mse(frame.mean(axis=-1), ref.mean(axis=-1))
        worst = min(worst, psnr(m))
        bars = max(bars, int(frame[:28].max()), int(frame[196:].max()))
    rgb_psnr, mean_psnr = psnr(total / len(got)), psnr(total_mean / len(got))
    report(
        f"compat {fmt} {out_name} backend={backend_of(ds)}: PSNR vs openpi letterbox of the source "
        f"{rgb_psnr:.2f} dB RGB (worst frame {worst:.2f}), {mean_psnr:.2f} dB channel mean, "
        f"{len(got)} frames; bar rows max {bars}"
    )
    if min_rgb is not None:
        assert rgb_psnr >= min_rgb, f"{out_name}: PSNR {rgb_psnr:.2f} dB < {min_rgb}"
    if min_mean is not None:
        assert mean_psnr >= min_mean, f"{out_name}: channel-mean PSNR {mean_psnr:.2f} dB < {min_mean}"
    if variant.endswith("crf0"):
        assert bars <= 2, f"{out_name}: letterbox bars not black (max {bars})"


@pytest.mark.readers
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["synthetic", "synthetic-224"])
def test_negative_control_dropped_frame(corpora, fmt: str, kind: str, backend: str, tmp_path: Path) -> None:
    """One video re-muxed without its last frame must be rejected by the real reader while
    iterating (an exception or a timestamp tolerance error), proving these tests can fail."""
    name = corpus_name(kind, fmt)
    broken = writable_copy(corpora.get(name), tmp_path / f"{name}-broken")
    ds0 = open_dataset(broken, backend_arg(backend), horizon=None)
    last_ep = ds0.meta.total_episodes - 1
    cam = video_keys(load_info(broken))[0]
    path, _start = video_file(ds0, broken, last_ep, cam)
    before = _frame_count(path)
    after = drop_last_frame(path)
    assert after == before - 1, f"negative control is malformed: {before} -> {after} frames"
    ds = open_dataset(broken, backend_arg(backend), horizon=None)
    n = len(ds)
    ds[n - 2]  # the frame before the dropped one still loads
    reached = -1
    with pytest.raises(Exception) as excinfo:
        for reached in range(n):
            ds[reached]
    where = [str(entry.path) for entry in excinfo.traceback[1:]]
    assert any("/lerobot/" in p or "/torchcodec/" in p or "/torchvision/" in p for p in where), (
        f"the exception did not come from the reader: {where}"
    )
    assert reached == n - 1, f"rejected at sample {reached}, expected the dropped frame's sample {n - 1}"
    text = str(excinfo.value).strip()
    msg = text.splitlines()[0][:160] if text else ""
    report(
        f"compat {fmt} negative control {name} backend={backend_of(ds)}: {path.name} of {cam} "
        f"{before} -> {after} frames: sample {reached} rejected with {type(excinfo.value).__name__}: {msg}"
    )


def _frame_count(path: Path) -> int:
    import av

    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))

