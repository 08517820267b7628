"""Resume over a damaged output: files under their final name that were damaged after the run
(truncated or emptied videos, a corrupted parquet copy, a cut info.json: bit rot, a bad rsync, a
user's edit) are detected by the rerun, which redoes exactly those and keeps the rest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.faults import (
    baseline,
    baseline_digest,
    check_source,
    corpus,
    count_line,
    digest_diff,
    output_digest,
    prep,
    reencode_args,
    scenario,
    snapshot,
    temp_files,
)

from pipeline.jobs.verify import verify_in_process
from pipeline.stages.verify import VerifyOptions

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.cluster]


def test_damaged_outputs_are_redone(tmp_path: Path) -> None:
    src = corpus("v21")
    reference = baseline_digest("v21")
    before = snapshot(src)
    out = tmp_path / "out"
    shutil.copytree(baseline("v21"), out)
    videos = sorted(p for p in out.rglob("*.mp4"))
    with open(videos[0], "r+b") as fh:  # cut in half
        fh.truncate(videos[0].stat().st_size // 2)
    videos[1].write_bytes(b"")
    parquet = sorted(out.rglob("data/**/*.parquet"))[0]
    parquet.write_bytes(parquet.read_bytes()[:100] + b"\0" * 100)
    info = out / "meta/info.json"
    info.write_text(info.read_text()[:50])
    with scenario("resume over a damaged output (2 videos cut/emptied, a parquet and info.json corrupted)",
                  "rerun re-encodes exactly the 2 damaged videos, rewrites the parquet and metadata; equals the "
                  "clean run; verify passes") as row:
        r = prep(*reencode_args(src, out))
        counts = count_line(r.stdout)
        row.observed = f"exit {r.returncode}; {counts.get('encoded')} encoded, {counts.get('kept')} kept"
        assert r.returncode == 0, r.stdout + r.stderr
        assert counts.get("encoded") == 2 and counts.get("kept") == 6, r.stdout
        diff = digest_diff(reference, output_digest(out))
        row.files_lost = len(diff["missing"]) + len(diff["different"])
        assert not any(diff.values()), f"output differs from the clean run: {diff}"
        assert not temp_files(out)
        report = verify_in_process(out, VerifyOptions(size=(224, 224), all_intra=True))
        assert report.passed, [f.line() for f in report.failures[:5]]
        check_source(row, before, src)
        row.observed += "; output equals the clean run (parquet and info.json restored), verify passed"
