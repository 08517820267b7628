"""Metadata rules classified against the readers (issue 25, `pipeline.checks`): a rule no reader of the
format line refuses is a warning in every command, and scan never refuses a dataset for a file it does not need
to count storage and hours. The custom-writer case: a v3.0 dataset whose meta/stats.json has no 'count' (lerobot
0.4.x/0.6.x `load_stats` requires no key) scans, verifies with warnings and re-encodes. The v2.1 counterpart
(episodes_stats.jsonl without 'count': 0.3.x `aggregate_stats` raises at open) is still refused by verify and
reencode, and scanned with a warning. Real synthetic datasets, the real jobs and CLI."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from support.cli import run_prep

from pipeline.checks import decide, metadata_rules
from pipeline.errors import MetadataError
from pipeline.formats.validate import validate_metadata
from pipeline.jobs.reencode import reencode_dataset
from pipeline.jobs.verify import verify_in_process
from pipeline.runner import RunConfig, open_engine
from pipeline.stages.reencode import ReencodeOptions
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import write_synthetic

sys.path.insert(0, str(Path(__file__).resolve().parent / "compat"))
from parity_cases.synth_cases import spec

prep = functools.partial(run_prep, backend="inline", progress=False)


def without_count_v30(d: Path) -> Path:
    root = write_synthetic(d / "ds", spec("v3.0"))
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    for feat in stats.values():
        feat.pop("count", None)
    path.write_text(json.dumps(stats))
    return root


def without_count_v21(d: Path) -> Path:
    root = write_synthetic(d / "ds", spec("v2.1"))
    path = root / "meta/episodes_stats.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for line in lines:
        for feat in line["stats"].values():
            feat.pop("count", None)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_every_rule_the_validator_tags_is_classified(tmp_path: Path) -> None:
    for name, rule in metadata_rules().items():
        assert rule.where, name
    probs = validate_metadata(without_count_v30(tmp_path / "a"))
    assert set(probs.counts) == {"stats_json"} and probs.total >= 1
    assert decide("stats_json", "v3.0", "verify") == "warn" and decide("stats_json", "v3.0", "reencode") == "warn"
    assert decide("episodes_stats_jsonl", "v2.1", "verify") == "refuse"
    assert decide("episodes_stats_jsonl", "v2.1", "scan") == "warn"
    assert decide("episodes_parquet", "v3.0", "scan") == "refuse"  # scan needs the lengths and file spans
    assert decide("camera_key", "v3.0", "scan") == "refuse"  # prep's own safety rule


def test_custom_writer_stats_without_count_scans_verifies_and_reencodes(tmp_path: Path) -> None:
    src = without_count_v30(tmp_path)
    out = tmp_path / "m.json"
    r = prep("scan", str(src), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning   " in r.stdout and "'count' is a required property" in r.stdout
    assert json.loads(out.read_text())["totals"]["episodes"] == 2

    report = verify_in_process(src, VerifyOptions(decode=True))
    assert report.passed, [f.line() for f in report.failures]
    rules = [f for f in report.failures if f.check == "metadata_rule"]
    assert rules and all(f.severity == "warning" for f in rules)
    assert all(p["loads"] for p in report.head_json()["lerobot_loads"].values())
    r = prep("verify", str(src))
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr

    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        result = reencode_dataset(src, tmp_path / "out", ReencodeOptions(size=(32, 32)), engine)
    assert result.ok
    assert verify_in_process(tmp_path / "out", VerifyOptions(size=(32, 32), all_intra=True)).passed


def test_v21_episodes_stats_without_count_is_refused_by_verify_but_scanned(tmp_path: Path) -> None:
    src = without_count_v21(tmp_path)
    with pytest.raises(MetadataError):
        verify_in_process(src, VerifyOptions())
    r = prep("verify", str(src))
    assert r.returncode == 2 and "'count' is a required property" in r.stdout + r.stderr
    out = tmp_path / "m.json"
    r = prep("scan", str(src), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning   " in r.stdout and json.loads(out.read_text())["warnings_total"] >= 1


def test_docs_table_names_every_rule() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs/verify.md").read_text()
    for name, rule in metadata_rules().items():
        assert f"| `{name}` |" in doc, name
        for where in rule.where.values():
            assert where in doc, (name, where)


def test_info_keys_no_reader_reads_are_warnings_everywhere(tmp_path: Path) -> None:
    """robot_type, splits, total_videos, total_chunks of the wrong type: every reader loads it (parity case
    info-unread-fields), so scan, verify and reencode warn and go on; a wrong fps is still refused."""
    for fmt in ("v2.1", "v3.0"):
        root = write_synthetic(tmp_path / fmt / "ds", spec(fmt))
        info = json.loads((root / "meta/info.json").read_text())
        info.update(robot_type=5, splits=["train"], total_videos="two", total_chunks=-1)
        (root / "meta/info.json").write_text(json.dumps(info))
        probs = validate_metadata(root)
        assert set(probs.counts) == {"info_json_unread"} and probs.total == 4, probs.lines
        assert decide("info_json_unread", fmt, "reencode") == "warn"
        out = tmp_path / fmt / "m.json"
        r = prep("scan", str(root), "--out", str(out))
        assert r.returncode == 0 and "robot_type" in r.stdout, r.stdout + r.stderr
        assert json.loads(out.read_text())["dataset"]["robot_type"] is None
        report = verify_in_process(root, VerifyOptions())
        assert report.passed and {f.check for f in report.failures} == {"metadata_rule"}
        with open_engine(RunConfig(backend="inline", progress=False)) as engine:
            result = reencode_dataset(root, tmp_path / fmt / "out", ReencodeOptions(size=(32, 32)), engine)
        assert result.ok
        info["total_episodes"] = "2"  # read by every reader (range, len): still refused
        (root / "meta/info.json").write_text(json.dumps(info))
        assert set(validate_metadata(root).counts) == {"info_json"}


def test_reader_choice_decides_metadata_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--reader` targets reader lines for metadata rules too: a rule only 0.6 refuses (none does today; the
    table is patched) refuses the dataset for `--reader all` and 0.6, and is a warning for `--reader 0.4`, in
    verify and reencode alike."""
    from dataclasses import replace

    from pipeline import checks
    from pipeline.checks import Reader, Severity
    from pipeline.jobs.preverify import SourceRefused

    patched = replace(checks.CHECKS["stats_json"],
                      severity={Reader.V03: None, Reader.V04: Severity.WARNING, Reader.V06: Severity.ERROR})
    monkeypatch.setitem(checks.CHECKS, "stats_json", patched)
    assert decide("stats_json", "v3.0", "verify") == "refuse"
    assert decide("stats_json", "v3.0", "verify", "0.6") == "refuse"
    assert decide("stats_json", "v3.0", "verify", "0.4") == "warn"
    src = without_count_v30(tmp_path)
    with pytest.raises(MetadataError):
        verify_in_process(src, VerifyOptions())
    report = verify_in_process(src, VerifyOptions(reader="0.4"))
    assert report.passed and "metadata_rule" in {f.check for f in report.failures}
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        with pytest.raises((MetadataError, SourceRefused)):
            reencode_dataset(src, tmp_path / "all", ReencodeOptions(size=(32, 32)), engine)
        assert reencode_dataset(src, tmp_path / "r04", ReencodeOptions(size=(32, 32)), engine, reader="0.4").ok
