"""Zero writes outside the allowed paths, as the kernel saw them: a few cases run under `strace -f -e
trace=%file` (every process of the run), each write-like call sorted into allowed (the case's --out or report
folder), the source, the case's folder outside the allowed paths, and the system (multiprocessing's
semaphores in /dev/shm). The source and the outside lists must be empty. Skipped where strace is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.faults import corpus, scenario
from support.safety import args_of, copy, finished, make_special
from support.strace import available, trace

pytestmark = [pytest.mark.faults, pytest.mark.slow,
              pytest.mark.skipif(not available(), reason="strace is not installed")]


def _case(name: str, args: list[str], allowed: list[Path], src: Path, work: Path, code: int) -> None:
    with scenario(f"strace: {name}", "no write in the source or outside the allowed paths") as row:
        t = trace(name, args, allowed=allowed, source=src, work=work)
        row.command, row.exit = args[0], t.exit
        row.outside_writes = len(t.source) + len(t.outside)
        row.details = t.summary()
        row.observed = (f"exit {t.exit}; {t.calls} write calls: {len(t.allowed)} paths allowed, {len(t.temp)} in its "
                        f"$TMPDIR, {len(t.source)} in the source, {len(t.outside)} outside, {len(t.system)} system")
        assert t.exit == code, t.summary()
        assert not t.source and not t.outside, t.summary()
        assert all(p.startswith(("/dev/shm/", "/dev/null")) for p in t.system), t.system


def test_strace_reencode_resume_v30(tmp_path: Path) -> None:
    src = corpus("v30")  # the one the finished output was made from (read-only: the trace proves it)
    out = copy(finished("v30"), tmp_path / "out")
    (out / "meta/info.json").unlink()
    for p in list((out / "videos").rglob("*.mp4"))[:2]:
        p.unlink()
    _case("reencode v30 resume (2 videos and info.json missing)", args_of("reencode", "v30", src, out), [out], src,
          tmp_path, 0)


def test_strace_scan_and_verify_reports_v21(tmp_path: Path) -> None:
    src = copy(corpus("v21"), tmp_path / "src")
    reports = tmp_path / "reports"
    _case("scan v21 --out reports/m.json", args_of("scan", "v21", src, reports / "m.json"), [reports], src, tmp_path, 0)
    _case("verify v21 --out reports/v.json", args_of("verify", "v21", src, reports / "v.json"), [reports], src,
          tmp_path, 0)


def test_strace_budget_writes_only_its_folder(tmp_path: Path) -> None:
    """`prep budget --out NEW` proves NEW writable before reading its inputs: the probe goes into NEW (made and
    removed), never into the folder above it."""
    from support.faults import prep

    src = corpus("v21")
    manifest = tmp_path / "m.json"
    r = prep(*args_of("scan", "v21", src, manifest))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "budget"
    _case("budget --native m.json --out budget", ["budget", "--native", str(manifest), "--out", str(out),
                                                   "--no-plots"], [out], src, tmp_path, 0)


def test_strace_edit_drop_v30_and_split_v21(tmp_path: Path) -> None:
    """prep edit writes only under its --out: a v3.0 drop (stream copy of shared files, parquet rewrite,
    metadata publish) and a v2.1 split (one dataset per part below --out)."""
    src30 = copy(corpus("v30"), tmp_path / "src30")
    out30 = tmp_path / "edited30"
    _case("edit v30 --drop 1", ["edit", str(src30), "--drop", "1", "--out", str(out30), "--backend", "inline",
                                "--no-progress"], [out30], src30, tmp_path, 0)
    src21 = copy(corpus("v21"), tmp_path / "src21")
    out21 = tmp_path / "split21"
    _case("edit v21 --split train=0.5 val=0.5", ["edit", str(src21), "--split", "train=0.5", "val=0.5", "--out",
                                                 str(out21), "--backend", "inline", "--no-progress"],
          [out21], src21, tmp_path, 0)


def test_strace_refused_symlinked_lock_writes_nothing(tmp_path: Path) -> None:
    src = copy(corpus("v21"), tmp_path / "src")
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    make_special(out / "prep/output.lock", "symlink", victim)
    _case("reencode v21 with OUT/prep/output.lock -> a file (refused)", args_of("reencode", "v21", src, out), [],
          src, tmp_path, 2)
    assert victim.read_text() == "precious\n"


def test_the_trace_parser_sees_writes_through_links_and_not_reads() -> None:
    """The parser is what proves "zero writes": it must report a write through a link at the link's target,
    both paths of a rename, a dirfd-relative unlink, and no read-only open."""
    from support.strace import written_paths

    lines = {
        'openat(AT_FDCWD</w>, "/w/out/prep/output.lock", O_RDWR|O_CREAT|O_CLOEXEC, 0644) = 3</w/victim.txt>':
            ["/w/victim.txt"],
        'openat(AT_FDCWD</w>, "rel/file", O_WRONLY|O_CREAT|O_EXCL, 0666) = 4</w/rel/file>': ["/w/rel/file"],
        'openat(AT_FDCWD</w>, "/w/src/meta/info.json", O_RDONLY|O_CLOEXEC) = 3</w/src/meta/info.json>': [],
        'rename("/w/out/.a.prep-tmp-x", "/w/out/a") = 0': ["/w/out/.a.prep-tmp-x", "/w/out/a"],
        'unlinkat(4</w/r/m.json.parts>, "plan.json", 0) = 0': ["/w/r/m.json.parts/plan.json"],
        'mkdir("/w/out/prep", 0777) = -1 EEXIST (File exists)': [],
        'newfstatat(AT_FDCWD</w>, "/w/src", {st_mode=S_IFDIR|0755, st_size=4096, ...}, 0) = 0': [],
    }
    with scenario("strace parser: writes through links, renames, dirfd-relative calls; reads ignored",
                  "each line parsed to the paths it writes") as row:
        for line, expected in lines.items():
            assert written_paths(line, "/w") == expected, line
        row.observed = f"{len(lines)} sample lines parsed as expected"
