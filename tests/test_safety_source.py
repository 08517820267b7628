"""The source is read-only for every command: an `--out` (or a default report location) inside the dataset, or
one of its files, is refused with one line before anything is read or written; the source tree is byte for
byte and mtime for mtime unchanged, nothing is written anywhere. scan, verify, budget, bench, reencode,
convert; v2.1 and v3.0. A report outside the source is still written (the control)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from support.faults import check_source, corpus, scenario, snapshot
from support.safety import INLINE, OTHER, VERSIONS, Watch, args_of, copy, first_video, record_outcome, refused, run

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("target", ["meta/info.json", "first video", "a new report in the root"])
@pytest.mark.parametrize("command", ["scan", "verify"])
@pytest.mark.parametrize("version", VERSIONS)
def test_report_inside_the_source_is_refused(version: str, command: str, target: str, tmp_path: Path) -> None:
    """`prep verify SRC --out SRC/meta/info.json` once overwrote the dataset's info.json with the report;
    `prep scan SRC --out SRC/videos/.../episode_000000.mp4` a source video."""
    src = copy(corpus(version), tmp_path / "src")
    before = snapshot(src)
    out = {"meta/info.json": src / "meta/info.json", "first video": first_video(src),
           "a new report in the root": src / f"{command}.json"}[target]
    with scenario(f"{command} {version}: --out is {target} of the source",
                  "exit 2, one line; source tree unchanged; nothing written", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, version, src, out))
        refused(r, command, "is inside the dataset", "the source is never written")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_scan_default_report_in_the_dataset_is_refused(version: str, tmp_path: Path) -> None:
    """`cd SRC && prep scan .` would write manifests/ into the source, which a later reencode copies as content."""
    src = copy(corpus(version), tmp_path / "src")
    before = snapshot(src)
    with scenario(f"scan {version}: `cd SRC && prep scan .` (default manifests/ inside the dataset)",
                  "exit 2, one line naming the default; no manifests/ in the source", bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, "scan", ".", *INLINE, cwd=src)
        refused(r, "scan", "the default --out", "is inside the dataset", "pass --out PATH outside it")
        assert not (src / "manifests").exists()
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("command", ["reencode", "convert"])
@pytest.mark.parametrize("version", VERSIONS)
def test_dataset_output_inside_the_source_is_refused(version: str, command: str, tmp_path: Path) -> None:
    src = copy(corpus(version), tmp_path / "src")
    before = snapshot(src)
    with scenario(f"{command} {version}: --out inside the source", "exit 2, one line; source unchanged",
                  bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, *args_of(command, version, src, src / "out"))
        refused(r, command, "is the source or inside it")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A `prep scan` manifest of each corpus (written outside it)."""
    from support.faults import prep

    folder = tmp_path_factory.mktemp("manifests")
    found = {}
    for version in VERSIONS:
        path = folder / f"{version}.manifest.json"
        r = prep(*args_of("scan", version, corpus(version), path))
        assert r.returncode == 0, r.stdout + r.stderr
        found[version] = path
    return found


@pytest.mark.parametrize("how", ["--out inside", "default in the dataset"])
@pytest.mark.parametrize("version", VERSIONS)
def test_budget_report_inside_the_scanned_dataset_is_refused(version: str, how: str, manifests: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """`prep budget --native M` where M is a manifest of SRC: its report folder may not be inside SRC."""
    src = corpus(version)
    before = snapshot(src)
    with scenario(f"budget {version}: report folder ({how}) inside the dataset the manifest is of",
                  "exit 2, one line; source unchanged", bad_input=True) as row:
        watch = Watch(src)
        if how == "--out inside":
            r = run(row, "budget", "--native", str(manifests[version]), "--out", str(src / "budget"), "--no-plots")
            refused(r, "budget", "--out", "is inside the dataset")
        else:
            r = run(row, "budget", "--native", str(manifests[version]), "--no-plots", cwd=src / "meta")
            refused(r, "budget", "the default --out", "is inside the dataset")
        outside = record_outcome(row, watch, src)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_budget_report_inside_the_prepared_dataset_is_refused(version: str, tmp_path: Path) -> None:
    """`prep budget DATASET --out DATASET/report`: DATASET (a reencode output) is read, never written."""
    from support.safety import finished

    ds = copy(finished(version), tmp_path / "prepared")
    before = snapshot(ds)
    with scenario(f"budget {version}: --out inside the DATASET argument", "exit 2, one line; dataset unchanged",
                  bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, "budget", str(ds), "--out", str(ds / "report"), "--no-plots")
        refused(r, "budget", "is inside the dataset")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, ds)


def test_budget_report_over_its_own_input_is_refused(manifests: dict[str, Path], tmp_path: Path) -> None:
    """A report folder whose report.json would replace the --native manifest it reads."""
    native = tmp_path / "report.json"
    native.write_bytes(manifests["v21"].read_bytes())
    with scenario("budget: --out would overwrite the --native manifest (report.json)", "exit 2, one line",
                  bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, "budget", "--native", str(native), "--out", str(tmp_path), "--no-plots")
        refused(r, "budget", "would overwrite the input --native")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside


def test_budget_outside_the_source_writes_its_report(manifests: dict[str, Path], tmp_path: Path) -> None:
    """The control: the same budget with --out beside the dataset writes its reports, the source unchanged."""
    src = corpus("v21")
    before = snapshot(src)
    out = tmp_path / "budget"
    with scenario("budget v21: --out outside the source (control)", "exit 0; report.json and report.md written; "
                  "nothing else") as row:
        watch = Watch(tmp_path, allowed=[out])
        r = run(row, "budget", "--native", str(manifests["v21"]), "--out", str(out), "--no-plots")
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="prep bench dataloader needs torch")
@pytest.mark.parametrize("version", VERSIONS)
def test_bench_report_inside_the_dataset_is_refused(version: str, tmp_path: Path) -> None:
    src = copy(corpus(version), tmp_path / "src")
    before = snapshot(src)
    with scenario(f"bench {version}: --out inside the dataset", "exit 2, one line; source unchanged",
                  bad_input=True) as row:
        watch = Watch(tmp_path)
        r = run(row, "bench", "dataloader", str(src), "--out", str(src / "bench"), "--steps", "1")
        refused(r, "bench", "is inside the dataset")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)


@pytest.mark.parametrize("command", ["scan", "verify"])
@pytest.mark.parametrize("version", VERSIONS)
def test_report_beside_the_source_is_written(version: str, command: str, tmp_path: Path) -> None:
    """The control: a report outside the source is written (report, table), its work folder and lock removed,
    nothing else written, no temp file left."""
    src = corpus(version)
    before = snapshot(src)
    report = tmp_path / "reports" / f"{command}.json"
    with scenario(f"{command} {version}: report beside the source (control)",
                  "exit 0; only the report and its table written; no temp left") as row:
        watch = Watch(tmp_path, allowed=[report.parent])  # the report's folder, made for it
        r = run(row, *args_of(command, version, src, report))
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(p.name for p in report.parent.iterdir()) == sorted([report.name,
                                                                          report.stem + ".episodes.parquet"])
        outside = record_outcome(row, watch, tmp_path)
        assert not outside and not row.temps_left, outside
        check_source(row, before, src)


@pytest.mark.parametrize("version", VERSIONS)
def test_convert_back_into_the_source_is_refused(version: str, tmp_path: Path) -> None:
    """`prep convert OUT --to V --out SRC` where OUT was made from SRC: an output that is an existing dataset
    (not a prep convert output) is refused, the dataset unchanged."""
    src = copy(corpus(version), tmp_path / "src")
    before = snapshot(src)
    with scenario(f"convert {version}: --out is another existing dataset", "exit 2, one line; dataset unchanged",
                  bad_input=True) as row:
        other = copy(corpus("v30" if version == "v21" else "v21"), tmp_path / "other")
        watch = Watch(tmp_path)
        r = run(row, "convert", str(other), "--to", OTHER["v30" if version == "v21" else "v21"],
                "--out", str(src), *INLINE)
        refused(r, "convert", "is not a prep convert output")
        outside = record_outcome(row, watch, tmp_path)
        assert not outside, outside
        check_source(row, before, src)
