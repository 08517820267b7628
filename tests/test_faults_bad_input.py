"""Bad inputs through `prep reencode`: each must give a clear message naming the file and the
episode, a non-zero exit, and the other episodes done (their outputs equal the clean run's);
a dataset whose metadata breaks its rules (unreadable info.json, an episodes.jsonl line that is not
JSON or breaks schemas/lerobot_episode.schema.json, ...) is refused before anything is written (exit 2). The
source is never changed. Where reencode does not catch a fault, `prep verify` on the source must.

The metadata readers' property tests (any info.json / episodes.jsonl / episodes parquet gives a
dataset or one clear error) are tests/test_metadata_fuzz.py; they are not repeated here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.faults import (
    KnownBug,
    Row,
    baseline_digest,
    check_source,
    copy_tree,
    corpus,
    dataset_files,
    file_digest,
    known_bug,
    prep,
    reencode_args,
    scenario,
    short_paths,
    snapshot,
    temp_files,
)
from support.inject import reencode_video, remux_faststart, truncate_file, write_video

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]

CAM = "observation.images.cam_high"
V21_VIDEO = "videos/chunk-000/{cam}/episode_{ep:06d}.mp4"
V21_DATA = "data/chunk-000/episode_{ep:06d}.parquet"
V30_VIDEO = "videos/{cam}/chunk-000/file-000.mp4"


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    layout: str
    fault: Callable[[Path], str]  # makes the fault in a copy; returns the bad file (relative)
    episodes: tuple[int, ...]  # the episodes the fault belongs to
    whole_dataset: bool = False  # refused as a whole (exit 2, nothing written)
    verify_check: str | None = None  # `prep verify` on the source must report this check
    bug: str | None = None  # a known pipeline bug this case exposes (the test is xfail on it)


def _video(root: Path, ep: int = 1) -> Path:
    return root / V21_VIDEO.format(cam=CAM, ep=ep)


def truncated(root: Path) -> str:
    truncate_file(_video(root), 0.5)
    return V21_VIDEO.format(cam=CAM, ep=1)


def truncated_faststart(root: Path) -> str:
    remux_faststart(_video(root))
    truncate_file(_video(root), 0.6)
    return V21_VIDEO.format(cam=CAM, ep=1)


def zero_bytes(root: Path) -> str:
    _video(root).write_bytes(b"")
    return V21_VIDEO.format(cam=CAM, ep=1)


def random_bytes(root: Path) -> str:
    _video(root).write_bytes(os.urandom(64 * 1024))
    return V21_VIDEO.format(cam=CAM, ep=1)


def other_resolution(root: Path) -> str:
    reencode_video(root, 1, CAM, size=(160, 120))
    return V21_VIDEO.format(cam=CAM, ep=1)


def other_fps(root: Path) -> str:
    """The same 30 frames at 15 fps (pts i/15) where info.json says 30."""
    import av

    path = _video(root)
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames = [(i / 15.0, f) for i, f in enumerate(c.decode(stream))]
    write_video(path, frames, 15.0, gop=30)
    return V21_VIDEO.format(cam=CAM, ep=1)


def missing_parquet(root: Path) -> str:
    (root / V21_DATA.format(ep=1)).unlink()
    return V21_DATA.format(ep=1)


def info_not_json(root: Path) -> str:
    path = root / "meta/info.json"
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    return "meta/info.json"


def _edit_episode_line(root: Path, edit: Callable[[dict], str]) -> str:
    path = root / "meta/episodes.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = edit(json.loads(lines[1]))
    path.write_text("\n".join(lines) + "\n")
    return "meta/episodes.jsonl"


def episode_line_not_json(root: Path) -> str:
    return _edit_episode_line(root, lambda obj: json.dumps(obj)[:25])


def negative_length(root: Path) -> str:
    return _edit_episode_line(root, lambda obj: json.dumps({**obj, "length": -30}))


def missing_length(root: Path) -> str:
    return _edit_episode_line(root, lambda obj: json.dumps({k: v for k, v in obj.items() if k != "length"}))


def template_escapes(root: Path) -> str:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info["video_path"] = "../escaped/{video_key}/episode_{episode_index:06d}.mp4"
    path.write_text(json.dumps(info, indent=4))
    return "meta/info.json"


def symlink_outside(root: Path) -> str:
    target = root.parent / "outside.mp4"
    shutil.copyfile(_video(root), target)
    _video(root).unlink()
    _video(root).symlink_to(target)
    return V21_VIDEO.format(cam=CAM, ep=1)


def v30_truncated(root: Path) -> str:
    truncate_file(root / V30_VIDEO.format(cam=CAM), 0.5)
    return V30_VIDEO.format(cam=CAM)


CASES = [
    Case("truncated", "truncated mp4 (index lost)", "v21", truncated, (1,)),
    Case("truncated-faststart", "truncated mp4 (index first, frames missing)", "v21", truncated_faststart, (1,)),
    Case("zero-byte", "zero-byte mp4", "v21", zero_bytes, (1,)),
    Case("random-bytes", "random bytes named .mp4", "v21", random_bytes, (1,)),
    Case("other-resolution", "video 160x120 where info.json says 320x240", "v21", other_resolution, (1,),
         verify_check="declared_size"),
    Case("other-fps", "video at 15 fps where info.json says 30", "v21", other_fps, (1,), verify_check="fps"),
    Case("missing-parquet", "episode's data parquet missing", "v21", missing_parquet, (1,),
         verify_check="parquet_readable"),
    Case("info-not-json", "meta/info.json not JSON", "v21", info_not_json, (), whole_dataset=True),
    Case("episodes-line-not-json", "meta/episodes.jsonl line 2 not JSON", "v21", episode_line_not_json, (1,),
         whole_dataset=True),
    Case("negative-length", "episodes.jsonl length -30", "v21", negative_length, (1,), whole_dataset=True),
    Case("missing-length", "episodes.jsonl length missing", "v21", missing_length, (1,), whole_dataset=True),
    Case("template-escapes", "video_path template '../escaped/...'", "v21", template_escapes, (),
         whole_dataset=True),
    Case("symlink-outside", "symlink to a video outside the dataset", "v21", symlink_outside, (1,)),
    Case("v30-truncated", "truncated v3.0 mp4 holding episodes 0 and 1", "v30", v30_truncated, (0, 1)),
]


def names_episodes(line: str, case: Case) -> bool:
    """The message names each episode: `episode N`, `episodes ... N`, or a v2.1 file `episode_00000N`."""
    if case.id == "episodes-line-not-json":  # the record is unreadable: its line number is all there is
        return "episodes.jsonl:2" in line
    return all(re.search(rf"episodes? (?:[\d, ]*\b)?{ep}\b", line) or f"episode_{ep:06d}" in line
               for ep in case.episodes)


def other_outputs_done(case: Case, out: Path, bad: str) -> list[str]:
    """Files of the clean run's output that belong to other episodes but are missing or different."""
    reference = baseline_digest(case.layout)
    bad_eps = {f"episode_{e:06d}" for e in case.episodes}
    problems = []
    for rel, digest in reference.items():
        if not (rel.startswith("videos/") or rel.startswith("data/")):
            continue  # metadata is not written while a failure stands
        if rel == bad or (case.layout == "v21" and any(b in rel for b in bad_eps)):
            continue
        if case.layout == "v30" and rel.startswith("videos/") and rel.endswith(bad.rsplit("/", 1)[-1]) \
                and CAM in rel:
            continue
        if not (out / rel).is_file() or file_digest(out / rel) != digest:
            problems.append(rel)
    return problems


def run_case(row: Row, case: Case, tmp_path: Path) -> None:
    src = copy_tree(corpus(case.layout), tmp_path / "src")
    bad = case.fault(src)
    before = snapshot(src)
    out = tmp_path / "out"
    r = prep(*reencode_args(src, out))
    if "REFUSED" in r.stdout:
        # verify (no decode) found errors in the source: refused before anything is written, verify's table
        # naming the episode(s); with --accept-invalid-source each bad input then fails alone, as below.
        assert r.returncode == 1 and not out.exists(), r.stdout + r.stderr
        assert "--accept-invalid-source" in r.stdout
        table = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("error")]
        named = {int(t[1]) for t in table if len(t) > 1 and t[1].isdigit()}
        assert named & set(case.episodes) or not named, (case.episodes, r.stdout)  # a file's failure: listed once
        r = prep(*reencode_args(src, out, "--accept-invalid-source"))
    text = r.stdout + r.stderr
    row.details = {"exit": r.returncode, "stdout": r.stdout[-1500:], "stderr": r.stderr[-1500:]}
    check_source(row, before, src)
    assert "Traceback" not in text, text
    if case.whole_dataset:
        assert r.returncode == 2, text
        assert str(src / bad) in r.stderr, f"the message does not name {bad}: {r.stderr}"
        first = r.stderr.strip().splitlines()[0].replace(str(src), "<src>")
        row.observed = f"exit {r.returncode}: {short_paths(first)[:200]}"
        assert not out.exists(), "something was written for a dataset refused as a whole"
        return
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAILED")]
    first = " ".join(failed[0].split()[1:]) if failed else ""
    row.observed = f"exit {r.returncode}; " + (f"FAILED {short_paths(first)[:150]}" if failed else "no FAILED line")
    missing = other_outputs_done(case, out, bad)
    assert not missing, f"other episodes not done: {missing}"
    assert not temp_files(out), temp_files(out)
    if case.verify_check:
        v = prep("verify", str(src), "--workers", "1", "--no-progress")
        assert v.returncode == 1 and case.verify_check in v.stdout, v.stdout + v.stderr
        row.observed += f"; prep verify on the source: exit 1, check {case.verify_check} on episode 1"
        check_source(row, before, src)
    row.observed += f"; other episodes done ({len(dataset_files(out))} files), source unchanged"
    known_bug(r.returncode != 0, f"exit {r.returncode} for a bad input ({case.title})")
    bad_name = bad.rsplit("/", 1)[-1]
    lines = [line for line in failed if bad_name in line]
    known_bug(bool(lines), f"no FAILED line names {bad}")
    assert not (out / "meta/info.json").exists(), "info.json written although a file failed"
    eps = ", ".join(map(str, case.episodes))
    known_bug(names_episodes(lines[0], case), f"the FAILED line does not name episode(s) {eps}")


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(raises=KnownBug, strict=True, reason=c.bug)] if c.bug else [])
     for c in CASES],
)
def test_bad_input(case: Case, tmp_path: Path) -> None:
    what = ("refused before anything is written: exit 2, one line naming the file" if case.whole_dataset else
            "exit 1; FAILED line names file and episode; other episodes done; no info.json")
    with scenario(f"bad input: {case.title}", what + "; source unchanged", bad_input=True) as row:
        run_case(row, case, tmp_path)


def test_symlink_inside_dataset_is_followed(tmp_path: Path) -> None:
    """A deduplicated layout: episode 1's parquet and one video are symlinks to files elsewhere
    inside the dataset (allowed: they do not leave the root). The output must hold both, as files."""
    from pipeline.jobs.verify import verify_in_process
    from pipeline.stages.verify import VerifyOptions

    src = copy_tree(corpus("v21"), tmp_path / "src")
    (src / "blobs").mkdir()
    data, video = V21_DATA.format(ep=1), V21_VIDEO.format(cam=CAM, ep=2)
    for rel, blob, up in ((data, "ep1.parquet", "../.."), (video, "ep2.mp4", "../../..")):
        (src / rel).rename(src / "blobs" / blob)
        (src / rel).symlink_to(f"{up}/blobs/{blob}")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario("symlinks inside the dataset (a parquet and a video point into blobs/)",
                  "followed: exit 0, output holds both as files equal to the targets, verify passes") as row:
        r = prep(*reencode_args(src, out))
        check_source(row, before, src)
        row.observed = f"exit {r.returncode}"
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout + r.stderr
        assert (out / video).is_file() and not (out / video).is_symlink(), "the symlinked video was not encoded"
        lost = [rel for rel in (data,) if not (out / rel).is_file()]
        row.files_lost = len(lost)
        row.observed += f"; {len(lost)} file(s) missing from the output: {lost}" if lost else "; every file present"
        report = verify_in_process(out, VerifyOptions(size=(224, 224), all_intra=True)) if not r.returncode else None
        if report is not None:
            row.observed += f"; verify of the output: {'passed' if report.passed else 'FAILED'}"
        known_bug(not lost, f"reencode exit {r.returncode} but {lost} missing from the output")
        assert r.returncode == 0 and report is not None and report.passed
        assert (out / data).read_bytes() == (src / "blobs/ep1.parquet").read_bytes()
