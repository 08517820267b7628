"""Reencode's check of an object-store source from its videos' container index (issue 34): the verdicts are a
demux's, a source the demux would refuse is refused with the same lines, and the source is read about once.

- `VerifyOptions(index=True)` gives the very findings of a demux for every fault verify knows (v2.1 and v3.0:
  frames dropped, added, off the grid, a truncated file with or without its index, a mislabelled codec, a frame
  outside every span), and reads no packet of a clean file;
- `probe_indexed` declines a truncated copy whose index survived; `same_packets` tells a demux that differs;
- s3 -> s3: a source with a defect is refused as locally (same table and REFUSED line, nothing written); a video
  whose index says less than its demux (simulated) still ends in the same refusal, after the encode, with no
  meta/info.json; a disagreement on a clean source checks it again and ends with local's bytes;
- the requests each file costs, counted by the server: each source video fetched whole once plus its header,
  no sidecar read back, no HEAD of an output after its PUT.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.inject import drop_frame, shift_video_frame, truncate_video
from support.s3 import S3Server
from support.storage import prep, set_env
from test_verify_faults import HIGH, LEFT, V21_FAULTS, V30_FAULTS, add_frame

from pipeline.jobs.verify import VerifyReport, verify_in_process
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic
from pipeline.video.indexed import probe_indexed, same_packets
from pipeline.video.probe import probe_video

CAMS = (HIGH, LEFT)


def _spec(version: str) -> SynthSpec:
    return SynthSpec(version=version, episodes=3, height=96, width=128, gop=1, cameras=CAMS, frames=90,
                     episodes_per_file=2)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("index")
    return {v: write_synthetic(base / v.replace(".", ""), _spec(v)) for v in ("v2.1", "v3.0")}


def findings(report: VerifyReport) -> list[tuple[object, ...]]:
    return [(f.episode, f.camera, f.check, f.severity, f.expected, f.found, f.path) for f in report.failures]


def same_report(root: Path) -> VerifyReport:
    """verify from the index and from a demux: the same findings and totals (returned: the demux's)."""
    demuxed = verify_in_process(root, VerifyOptions())
    indexed = verify_in_process(root, VerifyOptions(index=True))
    assert findings(indexed) == findings(demuxed)
    assert (indexed.errors_total, indexed.warnings_total) == (demuxed.errors_total, demuxed.warnings_total)
    return demuxed


def rotate(root: Path, degrees: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
    from parity_cases import mp4

    for path in sorted((root / "videos").rglob("*.mp4")):
        mp4.set_rotation(path, degrees)


FAULTS = [("v2.1", name, fault) for name, fault, *_ in V21_FAULTS] + \
         [("v3.0", name, fault) for name, fault, *_ in V30_FAULTS] + [
    ("v3.0", "a frame outside every span", lambda r: add_frame(r, 1, HIGH)),
    ("v2.1", "a frame added", lambda r: add_frame(r, 0, LEFT)),
    ("v2.1", "rotated 90 degrees", lambda r: rotate(r, 90)),
    ("v3.0", "rotated 270 degrees", lambda r: rotate(r, 270)),
]


@pytest.mark.parametrize(("version", "name", "fault"), FAULTS, ids=[f"{v}-{n}" for v, n, _ in FAULTS])
def test_the_index_gives_the_demux_verdicts(version: str, name: str, fault: Callable[[Path], object],
                                            clean: dict[str, Path], copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(clean[version], "broken")
    fault(root)
    same_report(root)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_a_mislabelled_codec_is_the_same_warning(version: str, clean: dict[str, Path],
                                                 copy_dataset: Callable[[Path, str], Path]) -> None:
    import json

    root = copy_dataset(clean[version], "mislabelled")
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["features"][LEFT]["info"]["video.codec"] = "av1"
    info_path.write_text(json.dumps(info, indent=4))
    assert same_report(root).warnings_total > 0


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_a_clean_source_is_checked_without_a_demux(version: str, clean: dict[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.stages.verify as verify_stage

    def no_demux(*_a: object, **_k: object) -> None:
        raise AssertionError("a clean file was demuxed")

    monkeypatch.setattr(verify_stage, "probe_video", no_demux)
    report = verify_in_process(clean[version], VerifyOptions(index=True))
    assert report.passed and not report.failures


def test_the_index_declines_what_it_cannot_stand_for(clean: dict[str, Path],
                                                     copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(clean["v2.1"], "declined")
    video = next(root.glob(f"videos/chunk-000/{LEFT}/episode_000000.mp4"))
    whole = probe_indexed(video)
    assert whole is not None and same_packets(whole.probe, probe_video(video, pix_fmt=False))
    other = next(root.glob(f"videos/chunk-000/{HIGH}/episode_000001.mp4"))
    shift_video_frame(root, 1, HIGH, 10)  # a frame off the grid: the index and a demux of the old file differ
    assert not same_packets(whole.probe, probe_video(other, pix_fmt=False))
    truncate_video(root, 0, LEFT, faststart=True)  # its index survives, half its samples do not
    assert probe_indexed(video) is None


# ---- s3 -> s3 ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        server.make_bucket("isrc")
        server.make_bucket("iout")
        yield server


def refusal_lines(stdout: str, src: str) -> list[str]:
    """The refusal's table and REFUSED line, the source's root named SRC."""
    return [line.replace(src, "SRC") for line in stdout.splitlines() if line.strip()]


def run_both(name: str, root: Path, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[tuple[int, str], tuple[int, str], str]:
    """reencode local -> local and s3 -> s3 (inline): (code, stdout) of each, and the s3 output URL."""
    url, out = f"s3://isrc/{name}", f"s3://iout/{name}"
    s3.upload_tree(root, url)
    set_env(monkeypatch, s3.env(client="prep"))
    local = prep(capsys, "reencode", str(root), "--dst", "64", "--out", str(tmp_path / "out"), "--backend", "inline")
    remote = prep(capsys, "reencode", url, "--dst", "64", "--out", out, "--backend", "inline")
    return (local[0], "\n".join(refusal_lines(local[1], str(root)))), \
        (remote[0], "\n".join(refusal_lines(remote[1], url))), out


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["dropped", "truncated-faststart"])
def test_an_s3_source_with_a_packet_defect_is_refused_as_locally(
        fault: str, clean: dict[str, Path], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], copy_dataset: Callable[[Path, str], Path]) -> None:
    """The index shows a dropped frame (the file is demuxed, as locally) and declines a truncated copy whose index
    survived (demuxed): the same refusal, before anything is written."""
    root = copy_dataset(clean["v2.1"], fault)
    if fault == "dropped":
        drop_frame(root, 1, LEFT, which=20)
    else:
        truncate_video(root, 0, LEFT, faststart=True)
    (lcode, local), (rcode, remote), out = run_both(fault, root, s3, tmp_path, monkeypatch, capsys)
    assert lcode == rcode == 1 and "REFUSED" in local
    assert remote == local
    assert s3.list_keys(out) == []  # refused before the output was claimed


@pytest.mark.slow
def test_an_index_that_says_less_than_the_demux_still_ends_in_the_refusal(
        clean: dict[str, Path], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], copy_dataset: Callable[[Path, str], Path]) -> None:
    """A file whose index lists what its demux does not find (simulated: both index reads of the broken file give
    the clean file's index) passes the check from the index; the stage's demux tells, the job checks the source
    by demuxing it and refuses it with local's lines; no meta/info.json."""
    import pipeline.stages.reencode as reencode_stage
    import pipeline.stages.verify as verify_stage

    rel = f"videos/chunk-000/{LEFT}/episode_000001.mp4"
    lying = probe_indexed(clean["v2.1"] / rel)
    assert lying is not None
    real, original = probe_indexed, reencode_stage._reencode
    copies: dict[str, str] = {}  # the stage's local copy -> the source file it holds

    def probe(source: object, *, episode: int | None = None) -> object:
        named = copies.get(str(source), str(source))
        return lying if named.endswith(rel) else real(source, episode=episode)  # type: ignore[arg-type]

    def remember(unit: object, src: object, read: object, result: object) -> None:
        copies[str(read)] = str(src)
        original(unit, src, read, result)  # type: ignore[arg-type]

    root = copy_dataset(clean["v2.1"], "lying")
    drop_frame(root, 1, LEFT, which=20)
    monkeypatch.setattr(verify_stage, "probe_indexed", probe)
    monkeypatch.setattr(reencode_stage, "probe_indexed", probe)
    monkeypatch.setattr(reencode_stage, "_reencode", remember)
    (lcode, local), (rcode, remote), out = run_both("lying", root, s3, tmp_path, monkeypatch, capsys)
    assert lcode == rcode == 1 and "REFUSED" in local
    assert remote == local
    assert not any(k.endswith("meta/info.json") for k in s3.list_keys(out))
    assert not any(k.endswith("prep/output.lock") for k in s3.list_keys(out))


@pytest.mark.slow
def test_a_disagreement_on_a_clean_source_checks_it_again_and_ends_with_local_bytes(
        clean: dict[str, Path], s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import pipeline.jobs.preverify as preverify
    import pipeline.stages.reencode as reencode_stage

    calls: list[bool] = []
    check = preverify.check_source

    def counted(*args: object, **kw: object) -> object:
        calls.append(bool(kw.get("index")))
        return check(*args, **kw)  # type: ignore[arg-type]

    import pipeline.jobs.reencode as job

    monkeypatch.setattr(job, "check_source", counted)
    monkeypatch.setattr(reencode_stage, "same_packets", lambda *_a: False)
    (lcode, _), (rcode, _), out = run_both("disagree", clean["v2.1"], s3, tmp_path, monkeypatch, capsys)
    assert lcode == rcode == 0
    assert calls == [False, True, False]  # local; s3 from the index, then by demux after the stage's word
    local = {p.relative_to(tmp_path / "out").as_posix(): p.read_bytes() for p in (tmp_path / "out").rglob("*")
             if p.is_file() and not p.relative_to(tmp_path / "out").as_posix().startswith("prep/")}
    prefix = out.removeprefix("s3://iout/")
    remote = {k[len(prefix) + 1:]: s3.get_bytes(f"s3://iout/{k}") for k in s3.list_keys(out)
              if not k[len(prefix) + 1:].startswith("prep/")}
    assert remote == local


@pytest.mark.slow
def test_each_source_video_costs_one_download_and_its_header(clean: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Counted by the server, per file: a source video is read whole once (the stage's download) besides its
    header (the check: at most 2 ranged GETs) and never HEADed (its stat from a listing of its folder); no stats
    sidecar is read back; an output video is asked for once (whether a rerun finds it) and put once."""
    from pipeline.storage import HEADER_BLOCK
    from pipeline.storage.objects import SMALL_FILE

    root = write_synthetic(tmp_path / "larger", SynthSpec(version="v2.1", episodes=3, height=240, width=320, gop=2,
                                                          cameras=CAMS, frames=60))
    url, out = "s3://isrc/counted", "s3://iout/counted"
    s3.upload_tree(root, url)
    set_env(monkeypatch, s3.env(client="counted"))
    s3.reset_stats()
    code, stdout, err = prep(capsys, "reencode", url, "--dst", "64", "--out", out, "--backend", "inline")
    assert code == 0, stdout + err
    reqs = [r for r in s3.requests() if r.client == "counted"]
    videos = sorted(p.relative_to(root).as_posix() for p in root.glob("videos/**/*.mp4"))
    assert len(videos) == 6
    for rel in videos:
        size = (root / rel).stat().st_size
        assert size > SMALL_FILE  # a smaller file is fetched whole at its first read
        src = [r for r in reqs if r.path == f"/isrc/counted/{rel}"]
        gets = [r for r in src if r.op == "GetObject"]
        whole = [r for r in gets if r.bytes_out == size]
        assert len(whole) == 1, (rel, [(r.range, r.bytes_out) for r in gets])
        assert len(gets) <= 3 and sum(r.bytes_out for r in gets) <= size + 2 * HEADER_BLOCK, rel
        assert sum(r.op == "HeadObject" for r in src) == 0, rel  # stats from a listing of its folder
        dst = [r for r in reqs if r.path == f"/iout/counted/{rel}"]
        assert sum(r.op == "PutObject" for r in dst) == 1, rel
        first = rel.endswith("episode_000000.mp4")  # the manifest reads each camera's first output's header
        assert sum(r.op == "HeadObject" for r in dst) <= 1 + first, rel  # a rerun's question; no size after a PUT
        assert sum(r.op == "GetObject" for r in dst) <= 2 * first, rel
    sidecars = [r for r in reqs if "/prep/stats/" in r.path and r.op in ("GetObject", "HeadObject")]
    assert sidecars == []
    assert len(reqs) <= 10 * len(videos) + 60, len(reqs)  # measured: 107 (6 videos, 3 parquets, the metadata)


def test_a_listed_folder_answers_whether_a_file_is_there(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """`learn_folder(absent=True)`: one LIST answers `has_file` for the keys after it in its folder (present:
    from the listing; absent: no HEAD), and a key this process writes afterwards is asked for again."""
    from pipeline.storage import parse_location
    from pipeline.storage.objects import ObjectStore

    s3.put_many("s3://iout/listed/videos", {f"f{i:03d}.mp4": b"x" * i for i in range(1, 11, 2)})
    set_env(monkeypatch, s3.env(client="listed"))
    store = ObjectStore(parse_location("s3://iout/listed"))
    s3.reset_stats()
    store.learn_folder("videos/f000.mp4", absent=True)
    assert [store.has_file(f"videos/f{i:03d}.mp4") for i in range(12)] == [i % 2 == 1 and i < 11 for i in range(12)]
    assert store.stat("videos/f003.mp4").size == 3
    assert s3.stats_for("listed").ops == {"ListObjectsV2": 1}
    store.write_bytes("videos/f004.mp4", b"new")
    assert store.has_file("videos/f004.mp4") and not store.has_file("other/f004.mp4")
    assert s3.stats_for("listed").ops == {"ListObjectsV2": 1, "PutObject": 1, "HeadObject": 2}


def test_a_large_object_is_downloaded_in_one_get(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source file over s3fs's chunk size (a v3.0 video of many episodes) is fetched once, in one GET (s3fs's
    get_file would open a GET of the whole object, drop it and fetch the chunks anew: twice the bytes)."""
    from pipeline.storage import STREAM_BLOCK, parse_location
    from pipeline.storage.objects import ObjectStore

    data = bytes(range(256)) * ((STREAM_BLOCK + (1 << 20)) // 256)
    s3.put_bytes("s3://isrc/large/videos/file-000.mp4", data)
    set_env(monkeypatch, s3.env(client="large"))
    store = ObjectStore(parse_location("s3://isrc/large"))
    s3.reset_stats()
    with store.local_copy("videos/file-000.mp4") as path:
        assert path.read_bytes() == data
    stats = s3.stats_for("large")
    assert stats.gets == 1 and stats.bytes_out == len(data), stats
