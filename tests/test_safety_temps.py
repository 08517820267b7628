"""Temp files that cannot collide with data: a legal source file whose name holds `.part-` (the old temp mark:
a `data_path` of `episode_{episode_index:06d}.part-0.parquet`, a root `NOTES.part-1.txt`), or even a name of
prep's own temp form, is copied like any other file, kept on a resume, and never removed by the clean-up;
the clean-up removes only the temp files prep itself left. v2.1 and v3.0; reencode and convert."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.faults import check_source, corpus, count_line, output_digest, prep, scenario, snapshot
from support.safety import (
    INLINE,
    OTHER,
    VERSIONS,
    Watch,
    args_of,
    copy,
    finished,
    first_video,
    record_outcome,
    run,
    temps,
)

from pipeline import atomic

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REWRITTEN = {"meta/info.json", "meta/episodes_stats.jsonl", "meta/stats.json"}


def part_named(version: str, dst: Path) -> tuple[Path, list[str]]:
    """A copy of the corpus whose data files are named `*.part-0.parquet` (data_path says so) and which holds
    other files with prep-like names; returns it and the relative paths of those other files."""
    src = copy(corpus(version), dst)
    info_path = src / "meta/info.json"
    info = json.loads(info_path.read_text())
    for p in sorted((src / "data").rglob("*.parquet")):
        p.rename(p.with_name(p.stem + ".part-0.parquet"))
    assert info["data_path"].endswith(".parquet")
    info["data_path"] = info["data_path"][: -len(".parquet")] + ".part-0.parquet"
    info_path.write_text(json.dumps(info, indent=4))
    extras = {
        "NOTES.part-1.txt": "notes with the old temp mark in the name\n",
        "meta/notes.part-2.json": "{}\n",
        "docs/.README.md.part-0123456789ab.md": "the old temp form exactly\n",
        atomic.temp_path_for(Path("LICENSE")).name: "prep's own temp form, as data\n",
    }
    for rel, text in extras.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src, sorted(extras)


def source_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("version", VERSIONS)
def test_reencode_copies_part_named_files_and_resumes_keeping_them(version: str, tmp_path: Path) -> None:
    src, extras = part_named(version, tmp_path / "src")
    before = snapshot(src)
    out = tmp_path / "out"
    with scenario(f"reencode {version}: data_path *.part-0.parquet, NOTES.part-1.txt, temp-like names in the source",
                  "exit 0 drop-in; every file copied; verify passes; a rerun keeps them all") as row:
        watch = Watch(tmp_path, allowed=[out])
        r = run(row, *args_of("reencode", version, src, out))
        assert r.returncode == 0 and "drop-in" in r.stdout, r.stdout + r.stderr
        missing, different = [], []
        for rel in source_files(src):
            if not (out / rel).is_file():
                missing.append(rel)
            elif not rel.endswith(".mp4") and rel not in REWRITTEN and not rel.startswith("meta/episodes/") \
                    and (out / rel).read_bytes() != (src / rel).read_bytes():
                different.append(rel)
        row.files_lost = len(missing) + len(different)
        assert not missing and not different, (missing, different)
        assert list((out / "data").rglob("*.part-0.parquet")), "no data parquet in the output"
        v = prep("verify", str(out), *INLINE)
        assert v.returncode == 0, v.stdout + v.stderr
        again = run(row, *args_of("reencode", version, src, out))
        assert again.returncode == 0, again.stdout + again.stderr
        counts = count_line(again.stdout)
        assert counts.get("kept") == counts.get("files") and counts.get("encoded", 0) == 0, again.stdout
        assert all((out / rel).read_bytes() == (src / rel).read_bytes() for rel in extras)
        outside = record_outcome(row, watch, tmp_path)
        row.temps_left = len([t for t in temps(out) if not (src / Path(t).relative_to(out)).exists()])
        assert not outside and not row.temps_left, (outside, temps(out))
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_convert_copies_part_named_files(version: str, tmp_path: Path) -> None:
    src, extras = part_named(version, tmp_path / "src")
    before = snapshot(src)
    out = tmp_path / "out"
    root_extras = [rel for rel in extras if "/" not in rel]
    with scenario(f"convert {version} -> {OTHER[version]}: *.part-0.parquet data, NOTES.part-1.txt, temp-like "
                  "root names", "exit 0; the root files copied byte for byte; a rerun keeps them") as row:
        watch = Watch(tmp_path, allowed=[out])
        r = run(row, *args_of("convert", version, src, out))
        assert r.returncode == 0, r.stdout + r.stderr
        assert all((out / rel).read_bytes() == (src / rel).read_bytes() for rel in root_extras), root_extras
        again = run(row, *args_of("convert", version, src, out))
        assert again.returncode == 0, again.stdout + again.stderr
        lost = [rel for rel in root_extras if not (out / rel).is_file()]
        row.files_lost = len(lost)
        assert not lost, lost
        outside = record_outcome(row, watch, tmp_path)
        row.temps_left = len([t for t in temps(out) if Path(t).name not in root_extras])
        assert not outside and not row.temps_left, (outside, temps(out))
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_resume_removes_only_prep_temps(version: str, tmp_path: Path) -> None:
    """A killed run's temp files (named by `temp_path_for`) in an unfinished output are removed by the rerun;
    a file of the output that is not prep's temp (`x.part-3.mp4`, which the source does not hold) stays."""
    src = corpus(version)
    before = snapshot(src)
    out = copy(finished(version), tmp_path / "out")
    reference = output_digest(finished(version))
    (out / "meta/info.json").unlink()
    video = first_video(out)
    stale = [atomic.temp_path_for(video), atomic.temp_path_for(out / "meta/stats.json"),
             atomic.temp_path_for(out / "prep/stats/x.json")]
    for t in stale:
        t.parent.mkdir(parents=True, exist_ok=True)
        t.write_bytes(b"half a file, left by a killed run")
    foreign = video.with_name("x.part-3.mp4")
    foreign.write_bytes(b"not prep's")
    with scenario(f"reencode {version}: resume removes prep's stale temps, nothing else",
                  "exit 0; the 3 stale temps removed; x.part-3.mp4 kept; output as the clean run") as row:
        r = run(row, *args_of("reencode", version, src, out))
        assert r.returncode == 0, r.stdout + r.stderr
        left = [t for t in stale if t.exists()]
        assert not left, left
        assert foreign.read_bytes() == b"not prep's"
        foreign.unlink()
        got = output_digest(out)
        lost = sorted(k for k in reference if got.get(k) != reference[k])
        row.files_lost = len(lost)
        assert got == reference, lost
        record_outcome(row, None, out)
        assert not row.temps_left
        check_source(row, before, src)


def test_temp_names_cannot_be_mistaken() -> None:
    """The clean-up's name test: exactly `.NAME.prep-tmp-<24 hex>[.ext]`, so no LeRobot or user name that
    merely holds a mark (`.part-`, `.prep-tmp-`) is taken for a temp file."""
    with scenario("temp names: only prep's exact temp form is a temp", "legal names never match") as row:
        made = atomic.temp_path_for(Path("/x/episode_000000.part-0.parquet")).name
        assert atomic.is_temp_name(made)
        for legal in ("episode_000000.part-0.parquet", "NOTES.part-1.txt",
                      ".file-002.parquet.part-0123456789ab.parquet", "a.prep-tmp-0123456789abcdef01234567",
                      ".a.prep-tmp-0123.mp4", ".a.prep-tmp-" + "g" * 24, "file.prep-tmp-" + "0" * 24):
            assert not atomic.is_temp_name(legal), legal
        row.observed = f"{made} is a temp name; 7 legal look-alikes are not"
