"""`prep verify` end to end through the CLI (a real Dask LocalCluster), the JSON report and its
schema, exit codes, and the dataset-level metadata checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.inject import drop_frame, truncate_video

from pipeline.atomic import TEMP_MARK
from pipeline.cli import main
from pipeline.errors import MetadataError, PrepError
from pipeline.jobs.verify import verify_in_process, write_report
from pipeline.schemas import validate
from pipeline.stages.verify import VerifyOptions
from pipeline.synth import SynthSpec, write_synthetic

HIGH, LEFT = "observation.images.cam_high", "observation.images.cam_left_wrist"
RUN = ["--workers", "2", "--no-progress"]


@pytest.fixture(scope="module")
def small_v21(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 episodes x 2 cameras x 90 frames, 224x224 all-intra, v2.1."""
    spec = SynthSpec(version="v2.1", episodes=4, height=224, width=224, gop=1, cameras=(HIGH, LEFT))
    return write_synthetic(tmp_path_factory.mktemp("cli") / "v21", spec)


@pytest.mark.cluster
@pytest.mark.slow
def test_cli_on_a_cluster_reports_one_broken_camera(
    small_v21: Path, copy_dataset: Callable[[Path, str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    root = copy_dataset(small_v21, "broken")
    drop_frame(root, 2, LEFT)
    truncate_video(root, 3, HIGH)
    out = tmp_path / "report" / "verify.json"
    code = main(["verify", str(root), "--expect-frames", "90", "--size", "224x224", "--all-intra", "--decode",
                 "--json", str(out), *RUN])
    text = capsys.readouterr().out
    assert code == 1
    assert "episode  camera" in text and "FAILED" in text and "episodes 2, 3" in text
    lines = [ln.split() for ln in text.splitlines()]
    assert ["error", "2", "cam_left_wrist", "frames_from_packets", "90", "(frames_expected)", "89"] in lines
    report = json.loads(out.read_text())
    validate(report, "verify")
    assert report["passed"] is False
    assert report["totals"]["episodes"] == 4
    assert report["totals"]["episodes_passed"] == 2 and report["totals"]["episodes_failed"] == 2
    assert {(f["episode"], f["camera"], f["check"]) for f in report["failures"]} >= {
        (2, LEFT, "frames_from_packets"), (3, HIGH, "readable")}
    ep2 = report["episodes"][2]
    assert ep2["status"] == "failed" and ep2["checks_failed"] == ["frames_from_packets"]
    assert ep2["cameras"][LEFT]["frames_from_packets"] == 89
    assert ep2["cameras"][HIGH]["frames_decoded"] == 90
    assert [e["status"] for e in report["episodes"]] == ["passed", "passed", "failed", "failed"]
    assert list(root.rglob(f"*{TEMP_MARK}*")) == []


@pytest.mark.cluster
@pytest.mark.slow
def test_cli_real_fixture_fails_expect_frames_naming_its_episodes(
    real_v21: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # (that it passes without --expect-frames is test_verify_faults.py::test_real_fixture_...)
    assert main(["verify", str(real_v21), "--expect-frames", "90", *RUN]) == 1
    text = capsys.readouterr().out
    assert "FAILED    10 errors in episodes 0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in text
    assert "frames_expected  90 (--expect-frames)  421" in text


def test_cli_bad_dataset_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nowhere"), *RUN]) == 2
    assert "no such dataset folder" in capsys.readouterr().err


def test_cli_rejects_bad_options(small_v21: Path) -> None:
    for bad in (["--size", "224x"], ["--size", "2x2x2"], ["--size", "0x224"], ["--size", "0"],
                ["--expect-frames", "0"]):
        with pytest.raises(SystemExit):
            main(["verify", str(small_v21), *bad, *RUN])


def test_metadata_breaking_its_schema_is_refused_before_any_unit(
    small_v21: Path, copy_dataset: Callable[[Path, str], Path],
) -> None:
    """A record that breaks schemas/lerobot_episode.schema.json refuses the dataset (exit 2) with one line
    naming file, line, field and value; no episode is verified (pipeline/formats/validate.py)."""
    root = copy_dataset(small_v21, "meta")
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["length"] = -1
    lines[1] = json.dumps(rec)
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(MetadataError) as info:
        verify_in_process(root, VerifyOptions())
    assert info.value.problems == [f"{root}/meta/episodes.jsonl:2: length: -1 is less than the minimum of 1"]
    assert info.value.total == 1


def test_info_totals_must_match_the_episodes(small_v21: Path, copy_dataset: Callable[[Path, str], Path]) -> None:
    root = copy_dataset(small_v21, "info")
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"], info["total_frames"] = 5, 999
    (root / "meta/info.json").write_text(json.dumps(info))
    report = verify_in_process(root, VerifyOptions())
    assert [(f.episode, f.check, f.expected, f.found) for f in report.failures] == [
        (None, "total_episodes", "5 (info.json)", "4 episode records"),
        (None, "total_frames", "999 (info.json)", "360 (sum of episode lengths)"),
    ]
    assert report.failed_episodes == [] and not report.passed


def test_global_index_must_continue_across_episodes(
    small_v21: Path, copy_dataset: Callable[[Path, str], Path],
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = copy_dataset(small_v21, "index")
    path = root / "data/chunk-000/episode_000002.parquet"
    table = pq.read_table(path)
    col = table.column_names.index("index")
    shifted = pa.array(table["index"].to_numpy() + 1000)
    pq.write_table(table.set_column(col, table.schema.field(col), shifted), path)
    report = verify_in_process(root, VerifyOptions())
    assert [(f.episode, f.check, f.expected) for f in report.failures] == [(2, "index", "180..269")]


def test_schema_rejects_a_malformed_report(small_v21: Path, tmp_path: Path) -> None:
    obj = write_report(verify_in_process(small_v21, VerifyOptions()), tmp_path / "ok.json")
    validate(obj, "verify")
    for mutate in (lambda o: o.pop("failures"), lambda o: o["options"].update(size="224"),
                   lambda o: o["episodes"][0].update(status="maybe")):
        bad = copy.deepcopy(obj)
        mutate(bad)
        with pytest.raises(PrepError, match=r"verify\.schema\.json"):
            validate(bad, "verify")


def test_size_alone_means_a_square_as_reencode_dst(small_v21: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --size 224` is `--size 224x224` (as `reencode --dst 224` is 224x224): it passes on 224x224
    videos, and `--size 112` fails them naming 112x112."""
    reports = {}
    for size in ("224", "224x224", "112"):
        out = tmp_path / f"{size}.json"
        code = main(["verify", str(small_v21), "--size", size, "--json", str(out), "--backend", "inline",
                     "--no-progress"])
        capsys.readouterr()
        reports[size] = (code, json.loads(out.read_text()))
    assert reports["224"][0] == reports["224x224"][0] == 0
    assert reports["224"][1]["options"]["size"] == reports["224x224"][1]["options"]["size"]
    code, report = reports["112"]
    assert code == 1 and report["failures"], report["failures"]
    assert all("112x112" in json.dumps(f) for f in report["failures"] if "size" in f["check"]), report["failures"]
    assert any("size" in f["check"] for f in report["failures"]), report["failures"]
