"""`prep edit --reencode-partial` on a real v3.0 source whose episodes do not start on keyframes (each video
file one h264 encode with GOP 250 over 4 episodes of 25 frames): without the flag the edit is refused with one
line naming `--reencode-partial` and `prep reencode`; with it, the episodes whose cut is off a keyframe are
decoded and re-encoded with the source's settings (info.json's video.g/crf/preset) into files of their own,
every other packet is the source's byte for byte, the re-encoded frames are close to the source's (PSNR),
the summary names each re-encoded file and why, and `prep verify --decode` passes the output."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.synth import SynthSpec, write_synthetic

CAMS = ("observation.images.cam_high", "observation.images.wrist")
FRAMES, PER_FILE, GOP = 25, 4, 250


def _reencode_long_gop(path: Path) -> None:
    """The file again as one encode, GOP 250, no B-frames (so only the cuts, not reordering, are off)."""
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), mode="w", format="mp4") as out:
        st = out.add_stream("libx264", rate=30)
        assert isinstance(st, av.VideoStream)
        st.width, st.height, st.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        st.codec_context.time_base = Fraction(1, 30)
        st.options = {"crf": "18", "preset": "ultrafast", "g": str(GOP),
                      "x264-params": f"keyint={GOP}:min-keyint={GOP}:scenecut=0:bframes=0"}
        for i, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, 30)
            out.mux(st.encode(f))
        out.mux(st.encode(None))
    tmp.replace(path)


@pytest.fixture(scope="module")
def long_gop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = SynthSpec(version="v3.0", episodes=7, frames=FRAMES, height=48, width=64, gop=GOP, cameras=CAMS,
                     episodes_per_file=PER_FILE, preset="ultrafast")
    root = write_synthetic(tmp_path_factory.mktemp("partial") / "src", spec)
    for mp4 in sorted(root.glob("videos/**/*.mp4")):
        _reencode_long_gop(mp4)
    info = json.loads((root / "meta/info.json").read_text())
    for cam in CAMS:
        info["features"][cam]["info"].update({"video.g": GOP, "video.crf": 18, "video.preset": "ultrafast"})
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    return root


def _episodes(root: Path) -> list[dict]:
    return pq.read_table(sorted((root / "meta/episodes").glob("*/*.parquet"))[0]).to_pylist()


def _packets(path: Path, t0: float, t1: float) -> list[bytes]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        tb = float(s.time_base)
        return [bytes(p) for p in c.demux(s) if p.size and t0 - 1e-4 <= p.pts * tb < t1 - 1e-4]


def _frames(path: Path, t0: float, t1: float) -> np.ndarray:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)
                         if t0 - 1e-4 <= float(f.pts * s.time_base) < t1 - 1e-4]).astype(np.float64)


def _video(root: Path, row: dict, cam: str) -> tuple[Path, float, float]:
    pre = f"videos/{cam}/"
    rel = f"videos/{cam}/chunk-{row[pre + 'chunk_index']:03d}/file-{row[pre + 'file_index']:03d}.mp4"
    return root / rel, row[pre + "from_timestamp"], row[pre + "to_timestamp"]


def test_reencode_partial(long_gop: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = ["edit", str(long_gop), "--out", str(out), "--drop", "1", "--backend", "inline", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--reencode-partial" in err and "prep reencode" in err, err
    assert not out.exists()

    assert main([*args, "--reencode-partial"]) == 0
    text = capsys.readouterr().out
    assert "verify    PASSED" in text and "stream copy but 4 re-encoded" in text, text
    reencoded = [line for line in text.splitlines() if line.startswith("reencoded ")]
    # episodes 2 and 3 of file 0 follow the dropped episode 1 inside one GOP: each camera re-encodes both
    assert len(reencoded) == 4 and all("libx264 yuv420p g=250 crf=18 preset=ultrafast" in r for r in reencoded)
    assert sum("episode 2 -> 1" in r for r in reencoded) == 2 and sum("episode 3 -> 2" in r for r in reencoded) == 2
    assert all("not a keyframe" in r for r in reencoded), reencoded
    report = json.loads((out / "prep/edit_report.json").read_text())
    assert report["reencoded_total"] == 4 and report["options"]["reencode_partial"] is True

    src_rows, out_rows = _episodes(long_gop), _episodes(out)
    assert [r["episode_index"] for r in out_rows] == list(range(6))
    for new, old in enumerate((0, 2, 3, 4, 5, 6)):
        for cam in CAMS:
            src_file, s0, s1 = _video(long_gop, src_rows[old], cam)
            out_file, o0, o1 = _video(out, out_rows[new], cam)
            if old in (2, 3):  # a file of its own, re-encoded: the frames close to the source's
                assert (o0, o1) == (0.0, FRAMES / 30) and out_file != _video(out, out_rows[0], cam)[0]
                a, b = _frames(src_file, s0, s1), _frames(out_file, o0, o1)
                assert a.shape == b.shape == (FRAMES, 48, 64, 3)
                psnr = 10 * np.log10(255.0 ** 2 / max(float(np.mean((a - b) ** 2)), 1e-9))
                assert psnr > 30, f"episode {old} {cam}: PSNR {psnr:.1f} dB"
            else:  # stream copy: every packet the source's, byte for byte
                assert _packets(out_file, o0, o1) == _packets(src_file, s0, s1)
                assert len(_packets(out_file, o0, o1)) == FRAMES
    assert main(["verify", str(out), "--decode", "--no-progress"]) == 0
    # a rerun keeps every file, the re-encoded ones included
    assert main([*args, "--reencode-partial"]) == 0
    again = capsys.readouterr().out
    assert "files     10: 0 written, 10 kept" in again and "stream copy but 4 re-encoded" in again, again


def test_reencode_partial_with_b_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GOP 10 with B-frames (x264 veryfast) over 25-frame episodes: frames reorder across the cuts too, so the
    episode before a cut may be re-encoded as well; whatever is re-encoded, the output verifies with a decode
    and the untouched file (episodes 3-5) is the source's byte for byte."""
    spec = SynthSpec(version="v3.0", episodes=7, frames=FRAMES, height=48, width=64, gop=10, cameras=CAMS,
                     episodes_per_file=3)
    src = write_synthetic(tmp_path / "src", spec)
    out = tmp_path / "out"
    assert main(["edit", str(src), "--out", str(out), "--drop", "1,6", "--reencode-partial", "--backend", "inline",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    reencoded = [line for line in text.splitlines() if line.startswith("reencoded ")]
    assert reencoded and "verify    PASSED" in text, text
    assert main(["verify", str(out), "--decode", "--no-progress"]) == 0
    src_rows, out_rows = _episodes(src), _episodes(out)
    for new, old in ((2, 3), (3, 4), (4, 5)):
        for cam in CAMS:
            s = _video(src, src_rows[old], cam)
            o = _video(out, out_rows[new], cam)
            assert _packets(o[0], o[1], o[2]) == _packets(*s)
