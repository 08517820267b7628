"""Many datasets, one corpus (issue 35): the corpus description, and scan / verify / reencode / budget over a corpus of
four small synthetic datasets (v2.1 and v3.0 mixed, four robots, four camera layouts), one command each, every
dataset through one inline engine session. The real fixture's corpus, a real SIGKILL and a LocalCluster session
are in tests/test_corpus_e2e.py (slow).

Figures are recomputed here from the per-dataset manifests and by the formulas of docs/corpus.md and
pipeline/budget/mixture.py, not copied from a run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.cli import run_prep

from pipeline.corpus.spec import SLOTS, corpus_of_arguments, derived_name, load_corpus
from pipeline.errors import PrepError
from pipeline.synth import SynthSpec, write_synthetic

PNG = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[1]
T = (700_000 * 1024, 700_000 * 2048)
DATASETS = {  # name: (spec, robot_type)
    "alpha": (SynthSpec(version="v2.1", episodes=2, frames=16, height=48, width=64, gop=8,
                        cameras=("observation.images.top", "observation.images.wrist")), "aloha"),
    "beta": (SynthSpec(version="v3.0", episodes=3, frames=20, height=48, width=64, gop=10, episodes_per_file=2,
                       cameras=("observation.images.cam_high", "observation.images.cam_left_wrist",
                                "observation.images.cam_right_wrist")), "so100"),
    "gamma": (SynthSpec(version="v2.1", episodes=1, frames=12, height=48, width=64, gop=6,
                        cameras=("observation.images.front",)), "koch"),
    "delta": (SynthSpec(version="v3.0", episodes=2, frames=24, height=48, width=64, gop=12, episodes_per_file=1,
                        cameras=("observation.images.base", "observation.images.hand")), "ur5"),
}
WEIGHTS = {"alpha": 3.0, "beta": 1.0, "gamma": 1.0, "delta": 1.0}
CORPUS_TOML = """\
name = "mix"

[[datasets]]
source = "data/alpha"
weight = 3
label = "aloha-bimanual"
[datasets.cameras]
base_0_rgb = "observation.images.top"
left_wrist_0_rgb = "observation.images.wrist"

[[datasets]]
source = "data/beta"
[datasets.cameras]
base_0_rgb = "observation.images.cam_high"
left_wrist_0_rgb = "observation.images.cam_left_wrist"
right_wrist_0_rgb = "observation.images.cam_right_wrist"

[[datasets]]
source = "data/gamma"
name = "g"

[[datasets]]
source = "data/delta"
"""


def set_robot(root: Path, robot: str) -> None:
    info = json.loads((root / "meta/info.json").read_text())
    info["robot_type"] = robot
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`data/<name>` for the four datasets and `mix.toml` describing them (read-only: copy before writing)."""
    base = tmp_path_factory.mktemp("corpus")
    for name, (spec, robot) in DATASETS.items():
        set_robot(write_synthetic(base / "data" / name, spec), robot)
    (base / "mix.toml").write_text(CORPUS_TOML)
    return base


def prep(*args: object, cwd: Path, backend: str | None = "inline") -> Any:
    """`prep ARGS` in `cwd`; the commands with an engine run it inline (budget has none)."""
    engine = args[0] != "budget"
    return run_prep(*map(str, args), cwd=cwd, backend=backend if engine else None, progress=not engine,
                    timeout=600)


def one_error(res: Any, command: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"prep {command}: error: "), res.stderr
    return lines[0].removeprefix(f"prep {command}: error: ")


@pytest.fixture(scope="module")
def scanned(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`prep scan --corpus mix.toml --out m/mix.json`, once for the module."""
    res = prep("scan", "--corpus", corpus_dir / "mix.toml", "--out", corpus_dir / "m" / "mix.json", cwd=corpus_dir)
    assert res.returncode == 0, (res.stdout, res.stderr)
    return corpus_dir / "m" / "mix.json"


# ---- the description ---------------------------------------------------------------------------------------


def test_a_corpus_file_reads_sources_weights_labels_and_cameras(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    f = tmp_path / "c.toml"
    f.write_text('[[datasets]]\nsource = "here"\nweight = 2.5\nlabel = "g1"\n[datasets.cameras]\n'
                 'right_wrist_0_rgb = "observation.images.r"\nbase_0_rgb = "observation.images.b"\n'
                 '[[datasets]]\nsource = "lerobot/aloha_sim"\n[[datasets]]\nsource = "s3://bucket/some/prefix/"\n'
                 'storage_options = ["endpoint_url=http://127.0.0.1:9000"]\n')
    c = load_corpus(f)
    assert c.name == "c" and c.weights_given
    a, b, s3 = c.entries
    assert (a.source, a.name, a.weight, a.label) == (str(tmp_path / "here"), "here", 2.5, "g1")
    assert a.cameras == (("base_0_rgb", "observation.images.b"), ("right_wrist_0_rgb", "observation.images.r"))
    assert (b.source, b.name, b.weight) == ("lerobot/aloha_sim", "aloha_sim", 1.0)  # a repo id: resolved when used
    assert (s3.name, s3.storage_options) == ("prefix", ("endpoint_url=http://127.0.0.1:9000",))
    assert c.share(a) == pytest.approx(2.5 / 4.5)


def test_datasets_as_arguments_are_a_corpus_of_equal_weights(tmp_path: Path) -> None:
    for n in ("x/data", "y/data", "z"):
        (tmp_path / n).mkdir(parents=True)
    c = corpus_of_arguments([str(tmp_path / "x/data"), str(tmp_path / "y/data"), str(tmp_path / "z")])
    assert [e.name for e in c.entries] == ["data", "data-2", "z"]
    assert [e.weight for e in c.entries] == [1.0, 1.0, 1.0] and not c.weights_given
    assert derived_name("s3://b/p/q/") == "q" and derived_name("owner/name") == "name"
    assert derived_name(str(tmp_path / "prep")) == "prep_"  # prep's own name is never a dataset's
    with pytest.raises(PrepError, match=r"dataset 2 \(z-2\): source: .* is dataset 1 \(z\) again"):
        corpus_of_arguments([str(tmp_path / "z"), str(tmp_path / "z") + "/"])


@pytest.mark.parametrize(("text", "line"), [
    ('[[datasets]]\nsource = "a"\n[[datasets]]\nsource = "b"\nname = "bee"\nweight = -1\n',
     "dataset 2 (bee): weight: -1 is less than or equal to the minimum of 0"),
    ('[[datasets]]\nsource = "a"\nwieght = 2\n',
     "dataset 1 (a): wieght: unknown field wieght (known: source, name, weight, label, revision, storage_options, "
     "cameras)"),
    ('[[datasets]]\nsource = "a"\n[datasets.cameras]\ntop = "x"\n',
     "dataset 1 (a): cameras.top: unknown field top (known: base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb)"),
    ('[[datasets]]\nname = "x"\n', "dataset 1 (x): source: required, missing"),
    ('[[datasets]]\nsource = "a"\nname = "prep"\n',
     "dataset 1 (prep): name: 'prep' is prep's own name (prep, corpus); choose another"),
    ('[[datasets]]\nsource = "a"\nname = "../x"\n', "dataset 1 (../x): name: '../x': a name is letters, digits, "
     "'.', '_' and '-' (up to 128), not starting with '.' or '-'"),
    ('[[datasets]]\nsource = "a"\nname = "n"\n[[datasets]]\nsource = "b"\nname = "n"\n',
     "dataset 2 (n): name: dataset 1 has the same name; names must be unique"),
    ('datasets = []\n', "datasets: [] should be non-empty"),
    ('name = "x"\n', "datasets: required, missing"),
    ('[[datasets]]\nsource = "a"\n[[datasets]]\nsource = "./a"\n',
     "dataset 2 (a-2): source: {dir}/a is dataset 1 (a) again; each dataset counts once (give it a larger weight "
     "instead)"),
], ids=["weight", "unknown-field", "unknown-slot", "no-source", "reserved-name", "bad-name", "same-name", "empty",
        "no-datasets", "twice"])
def test_a_bad_corpus_file_is_one_line_naming_the_entry_and_field(text: str, line: str, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(text)
    res = prep("scan", "--corpus", "c.toml", cwd=tmp_path)
    assert one_error(res, "scan") == "c.toml: " + line.format(dir=tmp_path)  # the file as given
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]  # nothing written


def test_corpus_usage_mistakes_are_one_line(corpus_dir: Path, tmp_path: Path) -> None:
    assert one_error(prep("scan", "a", "--corpus", corpus_dir / "mix.toml", cwd=tmp_path), "scan") == \
        f"give the datasets as arguments or as --corpus {corpus_dir / 'mix.toml'}, not both"
    assert one_error(prep("verify", "--corpus", "nope.toml", cwd=tmp_path), "verify") == \
        "nope.toml: corpus file not found"
    (tmp_path / "c.json").write_text("{}")
    assert "a corpus description is a TOML file" in one_error(prep("scan", "--corpus", "c.json", cwd=tmp_path), "scan")
    (tmp_path / "bad.toml").write_text("[[datasets]\n")
    assert one_error(prep("scan", "--corpus", "bad.toml", cwd=tmp_path), "scan").startswith(
        "bad.toml: cannot read the corpus file: ")
    assert one_error(prep("reencode", "--corpus", corpus_dir / "mix.toml", "--dst", "32", cwd=tmp_path),
                     "reencode") == "a corpus re-encode needs --out DIR: each dataset's output goes to DIR/<name>/"
    assert one_error(prep("reencode", "--corpus", corpus_dir / "mix.toml", cwd=tmp_path), "reencode") == \
        "the following arguments are required: --dst SIZE (e.g. prep reencode DATASET --dst 224)"
    assert one_error(prep("scan", cwd=tmp_path), "scan") == \
        "the following arguments are required: DATASET (or several, or --corpus FILE)"
    assert one_error(prep("budget", "--corpus", corpus_dir / "mix.toml", cwd=tmp_path), "budget").endswith(
        "a corpus description; budget reads its manifest: `prep scan --corpus "
        f"{corpus_dir / 'mix.toml'} --out corpus.json`, then `prep budget --corpus corpus.json`")
    assert list(tmp_path.glob("manifests")) == []


# ---- scan: the corpus manifest -----------------------------------------------------------------------------


def test_scan_writes_each_manifest_and_the_corpus_manifest(scanned: Path) -> None:
    doc = json.loads(scanned.read_text())
    folder = scanned.parent
    assert doc["schema"] == "prep.corpus_manifest/1" and doc["role"] == "native"
    assert doc["corpus"] == {"name": "mix", "file": str(folder.parent / "mix.toml"), "weights": "given"}
    rows = {r["name"]: r for r in doc["datasets"]}
    assert list(rows) == ["alpha", "beta", "g", "delta"]
    total_w = sum(WEIGHTS.values())
    for name, key in zip(rows, DATASETS, strict=True):
        r = rows[name]
        m = json.loads((folder / f"{name}.manifest.json").read_text())  # the same file `prep scan` alone writes
        assert r["manifest"] == f"{name}.manifest.json" and r["status"] == "ok"
        spec, robot = DATASETS[key]
        assert (r["episodes"], r["frames"], r["codebase_version"], r["robot_type"]) == (
            spec.episodes, spec.episodes * spec.frames, spec.version, robot)
        assert r["hours"] == m["totals"]["hours"] and r["bytes"]["total"] == m["totals"]["bytes"]["total"]
        assert r["bytes_per_camera"] == m["totals"]["bytes"]["per_camera"]
        assert r["weight"] == WEIGHTS[key] and r["share"] == pytest.approx(WEIGHTS[key] / total_w)
        assert r["codecs"] == ["h264"] and r["fps"] == 30 and r["tasks"] == min(spec.episodes, 4)
        assert r["episode_length"]["min"] == r["episode_length"]["max"] == spec.frames
    assert rows["alpha"]["label"] == "aloha-bimanual" and rows["beta"]["label"] == "so100"  # given, else robot_type
    assert [c["slot"] for c in rows["beta"]["cameras"]] == list(SLOTS)
    assert [c["slot"] for c in rows["alpha"]["cameras"]] == ["base_0_rgb", "left_wrist_0_rgb"]
    t = doc["totals"]
    ok = list(rows.values())
    assert (t["datasets"], t["datasets_ok"], t["datasets_failed"]) == (4, 4, 0)
    assert t["episodes"] == 8 and t["frames"] == sum(r["frames"] for r in ok)
    assert t["hours"] == pytest.approx(sum(r["hours"] for r in ok))
    assert t["bytes"]["total"] == sum(r["bytes"]["total"] for r in ok)
    video = sum(r["bytes"]["video"] for r in ok)
    assert sum(t["bytes_per_slot"].values()) == video
    mapped = sum(c["bytes"] for r in (rows["alpha"], rows["beta"]) for c in r["cameras"])
    assert t["bytes_per_slot"]["unmapped"] == video - mapped
    assert sorted(t["by_label"]) == ["aloha-bimanual", "koch", "so100", "ur5"]
    assert t["by_label"]["aloha-bimanual"]["share"] == pytest.approx(0.5)
    assert sum(c for _, c in t["episode_length_bins"]["bins"]) == 8
    table = pq.read_table(scanned.with_suffix(".parquet")).to_pylist()
    assert [r["name"] for r in table] == ["alpha", "beta", "g", "delta", "(total)"]
    assert table[-1]["is_total"] and table[-1]["frames"] == t["frames"] and table[-1]["bytes_total"] == \
        t["bytes"]["total"]
    assert dict(table[0]["bytes_per_camera"]) == rows["alpha"]["bytes_per_camera"]


def test_scan_writes_the_corpus_report_and_plots(scanned: Path) -> None:
    md = scanned.with_suffix(".md").read_text()
    for section in ("## Datasets", "## Hours per label", "## Bytes per camera", "## Episode lengths", "## Mixture"):
        assert section in md
    for plot in ("hours", "labels", "cameras", "lengths", "shares"):
        png = scanned.with_name(f"mix-{plot}.png")
        assert png.read_bytes()[:8] == PNG and f"(mix-{plot}.png)" in md
    # the mixture table: alpha is weight 3 of 6 (50 %) of the samples, 32 of 152 timesteps
    assert "| alpha | 3 | 50.0 % | 21.1 % | 2.38x |" in md  # 0.5 / (32 / 152)


def test_datasets_as_arguments_equal_a_corpus_file_of_equal_weights(corpus_dir: Path, tmp_path: Path) -> None:
    names = list(DATASETS)
    (tmp_path / "eq.toml").write_text("".join(f'[[datasets]]\nsource = "{corpus_dir / "data" / n}"\n' for n in names))
    a = prep("scan", *(corpus_dir / "data" / n for n in names), "--out", tmp_path / "a/corpus.json", cwd=tmp_path)
    b = prep("scan", "--corpus", tmp_path / "eq.toml", "--out", tmp_path / "b/corpus.json", cwd=tmp_path)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)

    def doc(p: Path) -> dict[str, Any]:
        d = json.loads(p.read_text())
        d.pop("created_utc")
        assert d["corpus"].pop("file") == (None if p.parent.name == "a" else str(tmp_path / "eq.toml"))
        assert d["corpus"].pop("name") == ("corpus" if p.parent.name == "a" else "eq")
        return d

    da, db = doc(tmp_path / "a/corpus.json"), doc(tmp_path / "b/corpus.json")
    assert da == db and da["corpus"]["weights"] == "equal"
    assert [r["share"] for r in da["datasets"]] == [0.25] * 4


def test_the_default_corpus_manifest_goes_to_manifests(corpus_dir: Path, tmp_path: Path) -> None:
    res = prep("scan", *(corpus_dir / "data" / n for n in ("alpha", "gamma")), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "manifests").iterdir() if not p.name.endswith(".png")) == [
        "alpha.manifest.episodes.parquet", "alpha.manifest.json", "corpus.json", "corpus.md", "corpus.parquet",
        "gamma.manifest.episodes.parquet", "gamma.manifest.json"]
    assert f"manifest  {tmp_path / 'manifests/corpus.json'}" in res.stdout


# ---- a failing dataset stays separate ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def with_failures(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mix.toml plus a dataset whose info.json is broken and one whose camera mapping names a missing camera."""
    base = tmp_path_factory.mktemp("failing")
    shutil.copytree(corpus_dir / "data", base / "data", symlinks=True)
    (base / "data/broken/meta").mkdir(parents=True)
    (base / "data/broken/meta/info.json").write_text('{"codebase_version": "v2.1"')
    shutil.copytree(base / "data/gamma", base / "data/gamma2", symlinks=True)
    (base / "mix.toml").write_text(CORPUS_TOML + '\n[[datasets]]\nsource = "data/broken"\n\n'
                                   '[[datasets]]\nsource = "data/gamma2"\nname = "gamma-top"\n[datasets.cameras]\n'
                                   'base_0_rgb = "observation.images.top"\n')
    return base


def test_scan_keeps_a_failing_dataset_separate(with_failures: Path) -> None:
    res = prep("scan", "--corpus", "mix.toml", "--out", "m/mix.json", cwd=with_failures)
    assert res.returncode == 1, res.stderr
    doc = json.loads((with_failures / "m/mix.json").read_text())
    rows = {r["name"]: r for r in doc["datasets"]}
    assert [r["status"] for r in rows.values()] == ["ok", "ok", "ok", "ok", "failed", "failed"]
    assert rows["broken"]["reason"] == f"{with_failures}/data/broken/meta/info.json: invalid JSON at line 1 column " \
        "28: Expecting ',' delimiter"
    assert rows["gamma-top"]["reason"] == "dataset 6 (gamma-top): cameras.base_0_rgb: observation.images.top is not " \
        "a camera of the dataset (it has: observation.images.front)"
    assert (doc["totals"]["datasets_ok"], doc["totals"]["datasets_failed"], doc["totals"]["episodes"]) == (4, 2, 8)
    assert "FAILED    broken: " in res.stdout and "FAILED    gamma-top: dataset 6 (gamma-top): cameras" in res.stdout
    assert (with_failures / "m/mix.json.parts/done/alpha.json").is_file()  # kept for a rerun of the failed ones
    assert not (with_failures / "m/broken.manifest.json").exists()


def test_verify_gives_a_verdict_per_dataset_and_one_for_the_corpus(with_failures: Path, corpus_dir: Path) -> None:
    res = prep("verify", "--corpus", "mix.toml", "--out", "v", cwd=with_failures)
    assert res.returncode == 1
    doc = json.loads((with_failures / "v/corpus_verify.json").read_text())
    assert doc["verdict"] == {"passed": False, "datasets": 6, "datasets_passed": 4, "datasets_failed": 0,
                              "datasets_not_verified": 2}
    assert [d["summary"].get("verdict") for d in doc["datasets"]] == ["passed"] * 4 + [None, None]
    assert (with_failures / "v/alpha/verify.json").is_file() and not (with_failures / "v/broken").exists()
    lines = res.stdout.splitlines()
    assert lines[-2] == "corpus    FAILED: 4 of 6 datasets pass (0 failed, 2 not verified)"
    assert any(line.startswith("NOT VERIFIED  broken") for line in lines)
    # a rule one dataset breaks: verified, its verdict failed; the corpus fails; no report file without --out
    res = prep("verify", "--corpus", corpus_dir / "mix.toml", "--expect-frames", "16", cwd=with_failures)
    assert res.returncode == 1
    assert res.stdout.splitlines()[-1] == "corpus    FAILED: 1 of 4 datasets pass (3 failed, 0 not verified)"
    assert res.stdout.startswith("PASSED        alpha") and "\nFAILED        beta" in res.stdout
    ok = prep("verify", "--corpus", corpus_dir / "mix.toml", cwd=with_failures)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "corpus    PASSED: 4 of 4 datasets pass"


# ---- reencode and resume -----------------------------------------------------------------------------------


def test_reencode_a_corpus_then_verify_and_budget_its_outputs(corpus_dir: Path, scanned: Path, tmp_path: Path) -> None:
    res = prep("reencode", "--corpus", corpus_dir / "mix.toml", "--dst", "32", "--out", tmp_path / "r", cwd=tmp_path)
    assert res.returncode == 0, (res.stdout, res.stderr)
    for name in ("alpha", "beta", "g", "delta"):
        assert (tmp_path / "r" / name / "meta/info.json").is_file()
        assert (tmp_path / "r" / name / "prep/manifest.json").is_file()
    prepared = json.loads((tmp_path / "r/corpus.json").read_text())
    assert prepared["role"] == "prepared" and prepared["totals"]["datasets_ok"] == 4
    assert all(c["width"] == 32 for r in prepared["datasets"] for c in r["cameras"])
    assert not (tmp_path / "r/prep").exists()  # every dataset complete: the work folder is gone
    runs = json.loads((tmp_path / "r/corpus_reencode.json").read_text())
    assert runs["totals"] == {**runs["totals"], "datasets": 4, "ok": 4, "failed": 0, "kept": 0}
    # the prepared corpus file: the same names, weights, labels and cameras, the outputs as sources
    again = load_corpus(tmp_path / "r/corpus.toml")
    first = load_corpus(corpus_dir / "mix.toml")
    assert [(e.name, e.weight, e.label, e.cameras) for e in again.entries] == [
        (e.name, e.weight, e.label, e.cameras) for e in first.entries]
    v = prep("verify", "--corpus", tmp_path / "r/corpus.toml", "--size", "32", "--all-intra", cwd=tmp_path)
    assert v.returncode == 0, v.stdout
    b = prep("budget", "--corpus", scanned, "--corpus-prepared", tmp_path / "r/corpus.json", "--out",
             tmp_path / "b", "--no-plots", cwd=tmp_path)
    assert b.returncode == 0, b.stderr
    mix = json.loads((tmp_path / "b/report.json").read_text())["mixture"]
    for d in mix["datasets"]:
        row = next(r for r in prepared["datasets"] if r["name"] == d["name"])
        assert d["bytes"]["prepared"] == {"value": row["bytes"]["total"], "source": f"measured "
                                          f"{tmp_path / 'r/corpus.json'} ({d['name']}: bytes.total)"}


def test_a_reencode_killed_between_datasets_resumes_across_them(corpus_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The run stops (KeyboardInterrupt, as Ctrl-C) while the third dataset is being re-encoded: the rerun keeps the
    two finished ones as they are (their completion records match) and does the rest."""
    import pipeline.jobs.reencode as job
    from pipeline.corpus.spec import load_corpus as load
    from pipeline.jobs.corpus import reencode_corpus
    from pipeline.runner import RunConfig, open_engine
    from pipeline.stages.reencode import ReencodeOptions

    corpus = load(corpus_dir / "mix.toml")
    options = ReencodeOptions(size=(32, 32))
    real = job.reencode_dataset
    calls: list[str] = []
    stop = ["g"]  # the first run is interrupted at g, the rerun is not

    def interrupted(src: Path, out: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(out.name)
        if out.name in stop:
            stop.remove(out.name)
            raise KeyboardInterrupt
        return real(src, out, *args, **kwargs)

    monkeypatch.setattr(job, "reencode_dataset", interrupted)
    with open_engine(RunConfig(backend="inline", progress=False)) as engine, pytest.raises(KeyboardInterrupt):
        reencode_corpus(corpus, tmp_path / "r", options, engine, quiet=True)
    assert calls == ["alpha", "beta", "g"]
    assert sorted(p.name for p in (tmp_path / "r/prep/corpus.parts/done").iterdir()) == ["alpha.json", "beta.json"]
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "r/alpha").rglob("*.mp4")}
    calls.clear()
    with open_engine(RunConfig(backend="inline", progress=False)) as engine:
        run = reencode_corpus(corpus, tmp_path / "r", options, engine, quiet=True)
    assert calls == ["g", "delta"]  # alpha and beta kept without being opened again
    assert [(d.entry.name, d.status, d.kept) for d in run.datasets] == [
        ("alpha", "ok", True), ("beta", "ok", True), ("g", "ok", False), ("delta", "ok", False)]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "r/alpha").rglob("*.mp4")} == before
    assert run.ok and not (tmp_path / "r/prep/corpus.parts").exists()
    doc = json.loads((tmp_path / "r/corpus.json").read_text())
    assert [r["kept"] for r in doc["datasets"]] == [True, True, False, False]


def test_a_changed_dataset_is_redone_on_resume(corpus_dir: Path, tmp_path: Path) -> None:
    """A completion record names the dataset as it was: a dataset written to since is scanned again."""
    shutil.copytree(corpus_dir / "data", tmp_path / "data", symlinks=True)
    (tmp_path / "data/broken/meta").mkdir(parents=True)
    (tmp_path / "data/broken/meta/info.json").write_text("{")
    (tmp_path / "c.toml").write_text("".join(f'[[datasets]]\nsource = "data/{n}"\n' for n in ("alpha", "gamma",
                                                                                             "broken")))
    assert prep("scan", "--corpus", "c.toml", "--out", "m/c.json", cwd=tmp_path).returncode == 1
    set_robot(tmp_path / "data/gamma", "koch-v2")  # info.json rewritten: another identity
    res = prep("scan", "--corpus", "c.toml", "--out", "m/c.json", cwd=tmp_path)
    rows = {r["name"]: r for r in json.loads((tmp_path / "m/c.json").read_text())["datasets"]}
    assert (rows["alpha"]["kept"], rows["gamma"]["kept"]) == (True, False)
    assert rows["gamma"]["robot_type"] == "koch-v2" and "(kept)" in res.stdout


# ---- budget: the mixture against a hand computation ----------------------------------------------------------


def test_budget_of_a_weighted_corpus_matches_a_hand_computation(scanned: Path, tmp_path: Path) -> None:
    res = prep("budget", "--corpus", scanned, "--out", tmp_path, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    m = report["mixture"]
    frames = {"alpha": 2 * 16, "beta": 3 * 20, "g": 1 * 12, "delta": 2 * 24}  # episodes x frames, by hand
    cams = {"alpha": 2, "beta": 3, "g": 1, "delta": 2}
    weights = {"alpha": 3, "beta": 1, "g": 1, "delta": 1}
    total = sum(frames.values())  # 152
    assert total == 152
    by_name = {d["name"]: d for d in m["datasets"]}
    for name, d in by_name.items():
        share = weights[name] / 6
        assert d["share"] == pytest.approx(share) and d["timesteps"] == frames[name]
        assert d["share_of_timesteps"] == pytest.approx(frames[name] / 152)
        assert d["sampling_ratio"] == pytest.approx(share / (frames[name] / 152))
        assert d["per_step"] == pytest.approx(share * 2048)
        for t, target in zip(d["targets"], T, strict=True):
            assert t["samples"] == pytest.approx(share * target)
            assert t["epochs"] == pytest.approx(share * target / frames[name])
    # alpha 0.5 / (32/152) = 2.375 and g (1/6) / (12/152) = 2.11 are drawn more than twice their size: flagged
    assert m["oversampled"] == ["alpha", "g"]
    assert by_name["g"]["flag"].startswith("oversampled: drawn 2.11x as often as its size says (16.7 % of the "
                                           "samples, 7.89 % of the timesteps): 9,955,556 epochs over it at 0.717 B")
    assert not by_name["beta"]["oversampled"] and by_name["beta"]["flag"] is None
    # re-encode: camera frames x the measured per-frame CPU cost of bench/results/reencode.json
    bench = json.loads((REPO / "bench/results/reencode.json").read_text())
    cpu = next(r["cpu_ms_per_frame_median"] for r in bench["results"]
               if (r["case"], r["workers"], r["variant"]) == ("prep", 1, "quiet-worker"))
    camera_frames = sum(frames[n] * cams[n] for n in frames)
    r = m["reencode"]
    assert r["camera_frames"] == camera_frames == 32 * 2 + 60 * 3 + 12 + 48 * 2
    assert r["cpu_hours"] == pytest.approx(camera_frames * cpu / 3.6e6)
    assert [(w["cores"], w["hours"]) for w in r["wall"]] == [
        (n, pytest.approx(camera_frames * cpu / 3.6e6 / n)) for n in (16, 64, 256)]
    assert r["source"].startswith("measured bench/results/reencode.json (shipped with prep) (2026-12-01T19:50:14Z)")
    # the corpus is the four manifests added up, as --native each
    parts = report["manifests"]["native"]["parts"]
    assert [Path(p["path"]).name for p in parts] == [f"{n}.manifest.json" for n in frames]
    # seed defaults labelled: the GPU step time, in report.json and report.md
    origins = {o["figure"]: o for o in report["figure_origins"]}
    step = origins["GPU step time and node throughput"]
    assert step["origin"] == "seed default" and step["seed_inputs"][:2] == ["step_a_s", "step_c_s"]
    assert origins["re-encode CPU-hours and wall time"]["origin"] == "measured"
    md = (tmp_path / "report.md").read_text()
    assert "## Mixture" in md and "## Measured or seed default" in md and "(mixture.png)" in md
    assert "| GPU step time and node throughput | **seed default** |" in md
    assert (tmp_path / "mixture.png").read_bytes()[:8] == PNG
    assert "OVERSAMPLED 2.38x" in res.stdout and "re-encode   " in res.stdout


def test_budget_anchors_make_the_step_time_measured(scanned: Path, tmp_path: Path) -> None:
    res = prep("budget", "--corpus", scanned, "--anchor", "B=64,wall=0.5", "--out", tmp_path, "--no-plots",
               "--oversample", "3", "--reencode-cores", "8", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    step = next(o for o in report["figure_origins"] if o["figure"] == "GPU step time and node throughput")
    # a and c come from the anchor now; the node's GPUs and the training batch are still the seed's
    assert step["seed_inputs"] == ["gpus_per_node", "train_batch"]
    assert {i["name"]: i["origin"] for i in step["inputs"]}["step_a_s"] == "command line"
    assert report["mixture"]["oversampled"] == [] and report["mixture"]["oversample_threshold"] == 3
    assert [w["cores"] for w in report["mixture"]["reencode"]["wall"]] == [8]


def test_budget_without_a_corpus_has_no_mixture_but_says_what_is_seed_default(tmp_path: Path) -> None:
    res = prep("budget", "--out", tmp_path, "--no-plots", cwd=tmp_path)
    assert res.returncode == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mixture"] is None
    assert {o["origin"] for o in report["figure_origins"]} == {"seed default"}
    assert one_error(prep("budget", "--corpus-prepared", "x.json", cwd=tmp_path), "budget") == \
        "--corpus-prepared needs --corpus (a corpus manifest)"


def test_the_mixture_shares_sum_to_one(scanned: Path, tmp_path: Path) -> None:
    prep("budget", "--corpus", scanned, "--out", tmp_path, "--no-plots", cwd=tmp_path)
    m = json.loads((tmp_path / "report.json").read_text())["mixture"]
    assert math.fsum(d["share"] for d in m["datasets"]) == pytest.approx(1.0)
    assert math.fsum(x["share"] for x in m["labels"]) == pytest.approx(1.0)
