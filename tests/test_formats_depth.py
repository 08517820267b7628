"""Depth cameras (issue 25): found by the flag in both spellings (lerobot 0.6's top-level `is_depth_map`, 0.4's
`video.is_depth_map`) and by pixel format; a depth codec lerobot 0.6 cannot resolve is an error (0.6 refuses at
open); a depth camera prep copies unchanged passes the README's output check
`prep verify OUT --size 224x224 --all-intra --decode` as a copy. Real encoded video (libx265 gray12le lossless,
as lerobot 0.6.1's depth encoder writes it; PNG gray16be)."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.checks import found_severity
from pipeline.dataset.features import is_depth_feature, is_depth_flagged, lerobot06_depth_codec_problem
from pipeline.formats import open_dataset
from pipeline.jobs.reencode import reencode_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import write_synthetic

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases.meta import episodes_files, layout, read_json, read_jsonl, write_json, write_jsonl
from parity_cases.synth_cases import CAM, FPS, _depth_frames, spec

DEPTH = "observation.images.depth"


def encode_depth(path: Path, frames: list[np.ndarray], codec: str) -> None:
    """hevc: lerobot 0.6.1's DepthEncoderConfig (libx265, gray12le, lossless); png: gray16be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape
    with av.open(str(path), mode="w", format="mp4") as out:
        if codec == "hevc":
            s = out.add_stream("libx265", rate=FPS)
            s.pix_fmt = "gray12le"
            s.options = {"x265-params": "lossless=1:log-level=error", "g": "2"}
        else:
            s = out.add_stream("png", rate=FPS)
            s.pix_fmt = "gray16be"
        s.width, s.height = w, h
        s.codec_context.time_base = Fraction(1, FPS)
        for i, d in enumerate(frames):
            f = av.VideoFrame.from_ndarray(np.ascontiguousarray(d, dtype=np.uint16), format="gray16le")
            f = f.reformat(format=s.pix_fmt)
            f.pts = i
            f.time_base = Fraction(1, FPS)
            out.mux(s.encode(f))
        out.mux(s.encode(None))


def depth_dataset(d: Path, fmt: str, codec: str = "hevc", flag: str | None = "is_depth_map") -> Path:
    """A synthetic dataset (one RGB camera) plus a depth camera encoded with `codec`, flagged as lerobot 0.6.1
    writes it (`info.is_depth_map`), as 0.4 did (`info["video.is_depth_map"]`) or not at all (`flag` None)."""
    sp = spec(fmt)
    root = write_synthetic(d / "ds", sp)
    info = read_json(root / "meta/info.json")
    ft: dict[str, Any] = json.loads(json.dumps(info["features"][CAM]))
    ft["shape"] = [sp.height, sp.width, 1]
    vinfo = {k: v for k, v in ft["info"].items() if k != "video.is_depth_map"}
    vinfo.update({"video.codec": codec, "video.pix_fmt": "gray12le" if codec == "hevc" else "gray16be",
                  "video.channels": 1})
    if flag is not None:
        vinfo[flag] = True
    ft["info"] = vinfo
    info["features"][DEPTH] = ft
    if fmt == "v2.1":
        info["total_videos"] = info["total_videos"] * 2
    write_json(root / "meta/info.json", info)
    if fmt == "v3.0":
        for p in episodes_files(root):
            t = pq.read_table(p)
            for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
                t = t.append_column(f"videos/{DEPTH}/{name}", t[f"videos/{CAM}/{name}"])
            for stat in ("min", "max", "mean", "std", "count"):
                t = t.append_column(f"stats/{DEPTH}/{stat}", t[f"stats/{CAM}/{stat}"])
            pq.write_table(t, p)
    per_file: dict[str, list[int]] = {}
    for c, e, rel, _s, _n in layout(root):
        if c == DEPTH:
            per_file.setdefault(rel, []).append(e)
    for rel, eps in per_file.items():
        frames = [f for e in sorted(eps) for f in _depth_frames(sp.frames, e, sp.height, sp.width)]
        encode_depth(root / rel, frames, codec)
    if fmt == "v2.1":
        rows = read_jsonl(root / "meta/episodes_stats.jsonl")
        for r in rows:
            r["stats"][DEPTH] = r["stats"][CAM]
        write_jsonl(root / "meta/episodes_stats.jsonl", rows)
    return root


def reencode(src: Path, out: Path) -> Any:
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        return reencode_dataset(src, out, ReencodeOptions(size=(224, 224)), engine)


README_CHECK = VerifyOptions(size=(224, 224), all_intra=True, decode=True)


@pytest.mark.parametrize("fmt", ["v2.1", "v3.0"])
def test_readme_output_check_passes_on_a_061_depth_camera(fmt: str, tmp_path: Path) -> None:
    """A lerobot 0.6.1-style depth camera (hevc gray12le lossless, top-level `is_depth_map`): reencode copies it
    byte for byte and `verify OUT --size 224x224 --all-intra --decode` passes, naming it checked as a copy."""
    src = depth_dataset(tmp_path, fmt)
    with av.open(str(next((src / "videos").rglob(f"*{DEPTH}*/**/*.mp4")))) as c:
        assert (c.streams.video[0].codec_context.name, c.streams.video[0].format.name) == ("hevc", "gray12le")
    out = tmp_path / "out"
    report = reencode(src, out)
    assert report.ok and report.depth_copied == [DEPTH]
    for mp4 in (src / "videos").rglob("*.mp4"):
        same = (out / mp4.relative_to(src)).read_bytes() == mp4.read_bytes()
        assert same == (DEPTH in str(mp4)), mp4
    checked = verify_in_process(out, README_CHECK)
    assert checked.passed, [f.line() for f in checked.failures]
    copies = [f for f in checked.failures if f.check == "depth_copy"]
    assert [(f.camera, f.severity) for f in copies] == [(DEPTH, "info")]
    # The RGB camera is still held to the rules: the source (96x72, GOP 10) fails them on that camera only.
    source = verify_in_process(src, README_CHECK)
    assert {(f.check, f.camera) for f in source.failures if f.is_error} == {("size", CAM), ("keyframes", CAM)}


def test_cli_summary_names_the_depth_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.cli import main

    out = tmp_path / "out"
    assert reencode(depth_dataset(tmp_path, "v3.0"), out).ok
    capsys.readouterr()
    assert main(["verify", str(out), "--size", "224x224", "--all-intra", "--decode", "--backend", "inline",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("depth "))
    assert DEPTH in line and "checked as copies" in line and "PASSED" in text


def test_depth_found_by_pixel_format_alone_is_checked_as_a_copy(tmp_path: Path) -> None:
    """No flag, no declared pix_fmt: the file's gray12le names it a depth map, copied and checked as a copy."""
    src = depth_dataset(tmp_path, "v3.0", flag=None)
    info = read_json(src / "meta/info.json")
    del info["features"][DEPTH]["info"]["video.pix_fmt"]
    write_json(src / "meta/info.json", info)
    out = tmp_path / "out"
    report = reencode(src, out)
    assert report.ok and report.depth_copied == [DEPTH]
    checked = verify_in_process(out, README_CHECK)
    assert checked.passed, [f.line() for f in checked.failures]
    assert {(f.check, f.camera) for f in checked.failures} == {("depth_copy", DEPTH)}


def test_without_size_rules_there_is_nothing_to_say(tmp_path: Path) -> None:
    src = depth_dataset(tmp_path, "v2.1")
    report = verify_in_process(src, VerifyOptions(decode=True))
    assert report.passed and not report.failures


@pytest.mark.parametrize(("codec", "fmt", "refused"), [("png", "v3.0", True), ("hevc", "v3.0", False),
                                                       ("png", "v2.1", False)])
def test_depth_codec_lerobot06_cannot_resolve_is_an_error(codec: str, fmt: str, refused: bool,
                                                          tmp_path: Path) -> None:
    """lerobot 0.6.1 resolves every depth key's codec at open (configs/video.py resolve_vcodec): `png` is not one
    of its encoder names. 0.6 does not read v2.1 (nor do 0.3/0.4 read the depth codec): nothing to say there."""
    src = depth_dataset(tmp_path, fmt, codec=codec)
    report = verify_in_process(src, VerifyOptions())
    found = [f for f in report.failures if f.check == "depth_codec"]
    assert bool(found) == refused and report.passed == (not refused)
    if refused:
        assert found[0].camera == DEPTH and "'png'" in found[0].found and found[0].severity == "error"


def test_depth_codec_verdict_per_reader(tmp_path: Path) -> None:
    """0.6 refuses a png depth camera at open, 0.4 never looks: the prediction says so per reader, and
    `--reader 0.4` passes the dataset while `--reader 0.6` (and the default, all) fails it."""
    src = depth_dataset(tmp_path, "v3.0", codec="png")
    both = verify_in_process(src, VerifyOptions(decode=True))
    loads = both.head_json()["lerobot_loads"]
    assert (loads["0.4"]["loads"], loads["0.6"]["loads"]) == (True, False) and not both.passed
    assert not verify_in_process(src, VerifyOptions(reader="0.6")).passed
    only04 = verify_in_process(src, VerifyOptions(reader="0.4"))
    assert only04.passed and {f.severity for f in only04.failures if f.check == "depth_codec"} == {"info"}


def test_depth_flag_spellings() -> None:
    assert is_depth_flagged({"info": {"is_depth_map": True}})  # lerobot 0.6.1
    assert is_depth_flagged({"info": {"video.is_depth_map": True}})  # lerobot 0.4.x
    assert is_depth_flagged({"video_info": {"video.is_depth_map": True}})  # older info.json
    assert not is_depth_flagged({"info": {"video.is_depth_map": False, "is_depth_map": False}})
    assert not is_depth_flagged({"info": "nonsense"}) and not is_depth_flagged(None)
    info = {"features": {"a": {"info": {"video.pix_fmt": "gray16be"}}, "b": {"info": {"video.pix_fmt": "gray"}},
                         "c": {"info": {"video.pix_fmt": "yuv420p", "is_depth_map": 1}}}}
    assert [k for k in "abc" if is_depth_feature(info, k)] == ["a", "c"]


def test_depth_codec_names_mirror_lerobot06() -> None:
    for ok in ("hevc", "h264", "libsvtav1", "av1", "libaom-av1", "auto", "hevc_nvenc"):
        assert lerobot06_depth_codec_problem({"info": {"video.codec": ok}}) is None, ok
    assert lerobot06_depth_codec_problem({"info": {}}) is None  # 0.6's default: hevc
    for bad in ("png", "ffv1", "libx265", 7):
        assert lerobot06_depth_codec_problem({"info": {"video.codec": bad}}) is not None, bad
    assert found_severity("depth_codec", "v3.0") == "error"
    assert found_severity("depth_codec", "v3.0", ("0.4",)) is None
    assert found_severity("depth_codec", "v2.1") is None


def test_camera_info_carries_the_depth_flag(tmp_path: Path) -> None:
    src = depth_dataset(tmp_path, "v3.0")
    assert {c.key: c.depth for c in open_dataset(src)[0].cameras} == {CAM: False, DEPTH: True}



def test_reencode_reader_picks_the_generation_that_refuses(tmp_path: Path) -> None:
    """A png depth camera: 0.6 refuses the source at open, 0.4 loads it. `prep reencode` (default: all readers)
    refuses it with nothing written; `--reader 0.4` re-encodes it (the depth camera copied) as 0.4 would load it."""
    src = depth_dataset(tmp_path, "v3.0", codec="png")
    cmd = ["reencode", str(src), "--dst", "224", "--backend", "inline", "--no-progress"]
    refused = run_prep(*cmd, "--out", tmp_path / "all")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "depth_codec" in refused.stdout and "REFUSED" in refused.stdout
    assert not (tmp_path / "all" / "meta" / "info.json").exists()
    only04 = run_prep(*cmd, "--out", tmp_path / "r04", "--reader", "0.4")
    assert only04.returncode == 0, only04.stdout + only04.stderr
    assert (tmp_path / "r04" / "meta" / "info.json").is_file()
    assert "Traceback" not in only04.stdout + only04.stderr
