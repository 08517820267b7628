"""Reading datasets where they live (issue 34, the read side): `prep scan` and `prep verify` on a Hugging Face
hub-cache snapshot (a repo id resolved offline) and on `s3://` (a real S3 server, moto, on loopback, counting
every request and byte), against the same dataset as a plain folder.

- a hub snapshot in huggingface_hub's exact layout scans, verifies and re-encodes like the plain folder;
- s3:// (v2.1 and v3.0, keys with spaces and non-ASCII) gives the local copy's manifest and report numbers;
- scan reads at most 2% of a corpus' bytes (header and footer ranges; counted by the server);
- credentials missing or wrong, an endpoint down or hanging: one line naming the URL and what to set, exit 2;
- a prefix of 10,000+ objects lists in pages (a bounded number of LIST requests, no HEAD per object);
- no secret in stdout, stderr, the manifest, the report, nor any Dask task key (a LocalCluster's workers get
  the credentials from their own environment).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.hub import snapshot_of
from support.s3 import S3Server, hanging_endpoint, refusing_endpoint
from support.storage import CAMS_U, prep, same_numbers, set_env, small_pair

from pipeline.synth import SynthSpec, write_synthetic

SECRET = "prep-read-secret-5f2c1e9a77d04b3c"  # a value that must never leave the environment
PREFIX = "ds one/ünï"  # keys with a space and non-ASCII characters
S3_BUCKETS = ("src",)  # made in this module's moto server (the `s3` fixture, tests/conftest.py)


# ---- comparing runs ------------------------------------------------------------------------------------------


def read_json(path: Path, replace: tuple[str, str] | None = None) -> Any:
    text = path.read_text(encoding="utf-8")
    if replace:
        text = text.replace(json.dumps(replace[0])[1:-1], json.dumps(replace[1])[1:-1])
    return json.loads(text)


# ---- corpora ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """v2.1 and v3.0, 3 episodes x 2 cameras (one of them named with a space and non-ASCII), 96x128."""
    return small_pair(tmp_path_factory.mktemp("small"), cameras=CAMS_U, frames=45)


def corpus_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# ---- a hub-cache snapshot is the plain folder ------------------------------------------------------------


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_hub_snapshot_scans_verifies_reencodes_like_the_folder(version: str, small: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from huggingface_hub import scan_cache_dir

    plain = small[version]
    cache = tmp_path / "hub"
    snap = snapshot_of(plain, cache, f"lerobot/demo_{version}")
    info = scan_cache_dir(cache)
    assert not info.warnings and [r.repo_id for r in info.repos] == [f"lerobot/demo_{version}"]
    assert all(p.is_symlink() for p in snap.rglob("*") if not p.is_dir())  # every file a link into blobs/
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "no-lerobot-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)

    runs = {}
    for name, where in (("plain", str(plain)), ("repo-id", f"lerobot/demo_{version}"), ("snapshot", str(snap))):
        code, out, err = prep(capsys, "scan", where, "--out", str(tmp_path / f"{name}.json"), "--backend", "inline")
        assert code == 0, out + err
        v_code, v_out, v_err = prep(capsys, "verify", where, "--out", str(tmp_path / f"{name}.verify.json"),
                                    "--backend", "inline")
        assert v_code == 0 and "PASSED" in v_out, v_out + v_err
        runs[name] = (read_json(tmp_path / f"{name}.json"), read_json(tmp_path / f"{name}.verify.json"))
        table = pq.read_table(tmp_path / f"{name}.episodes.parquet")
        runs[name] += (table.drop_columns([c for c in table.column_names if c == "path"]),)
    assert runs["repo-id"][0]["dataset"]["root"] == str(snap)
    for name in ("repo-id", "snapshot"):
        assert same_numbers(runs[name][0]) == same_numbers(runs["plain"][0]), name
        assert runs[name][0]["totals"]["bytes"]["total"] == corpus_bytes(plain)  # each file once (its blob)
        assert same_numbers(runs[name][1]) == same_numbers(runs["plain"][1]), name
        assert runs[name][2].equals(runs["plain"][2]), name

    outs = {}
    for name, where in (("plain", str(plain)), ("snapshot", str(snap))):
        out = tmp_path / f"out-{name}"
        code, stdout, err = prep(capsys, "reencode", "--src", where, "--dst", "64", "--out", str(out),
                                 "--backend", "inline")
        assert code == 0, stdout + err
        outs[name] = {p.relative_to(out).as_posix(): p for p in sorted(out.rglob("*"))
                      if p.is_file() and p.relative_to(out).parts[0] != "prep"}
    assert sorted(outs["snapshot"]) == sorted(outs["plain"])
    assert "meta/tasks.jsonl" in outs["plain"] or "meta/tasks.parquet" in outs["plain"]
    for rel, path in outs["plain"].items():
        assert outs["snapshot"][rel].read_bytes() == path.read_bytes(), rel
    assert not any(p.is_symlink() for p in (tmp_path / "out-snapshot").rglob("*"))


# ---- s3:// gives the local numbers ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_s3_scan_and_verify_match_the_local_copy(version: str, small: dict[str, Path], s3: S3Server,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    local = small[version]
    url = f"s3://src/{PREFIX}/{version}"
    s3.upload_tree(local, url)
    set_env(monkeypatch, s3.env(client="prep"))
    before = s3.snapshot(url)
    results = {}
    for name, where in (("local", str(local)), ("s3", url)):
        code, out, err = prep(capsys, "scan", where, "--out", str(tmp_path / f"{name}.json"), "--backend", "inline")
        assert code == 0, out + err
        v_code, v_out, v_err = prep(capsys, "verify", where, "--out", str(tmp_path / f"{name}.verify.json"),
                                    "--backend", "inline")
        assert v_code == 0 and "PASSED" in v_out, v_out + v_err
        assert where in out and where in v_out  # the dataset line names it
        results[name] = (read_json(tmp_path / f"{name}.json", (str(local), url) if name == "local" else None),
                         read_json(tmp_path / f"{name}.verify.json",
                                   (str(local), url) if name == "local" else None),
                         pq.read_table(tmp_path / f"{name}.episodes.parquet"))
    assert results["s3"][0]["dataset"]["root"] == url
    assert same_numbers(results["s3"][0]) == same_numbers(results["local"][0])
    assert results["s3"][0]["totals"]["bytes"]["total"] == corpus_bytes(local)
    assert same_numbers(results["s3"][1]) == same_numbers(results["local"][1])
    assert results["s3"][2].equals(results["local"][2])
    assert s3.snapshot(url) == before  # read-only


def test_s3_scan_fails_a_bad_camera_as_the_local_scan_does(small: dict[str, Path], s3: S3Server, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """On an object store a unit's cameras are probed at once (threads): a camera that cannot be read still fails
    its episode with the local scan's reason, and the other episodes and cameras keep their numbers."""
    import shutil

    local = tmp_path / "bad"
    shutil.copytree(small["v21"], local)
    bad = sorted(local.glob("videos/*/observation.images.top/episode_000001.mp4"))[0]
    bad.write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\xff" * 4000)  # an mp4 whose boxes lie
    url = f"s3://src/{PREFIX}/bad"
    s3.upload_tree(local, url)
    set_env(monkeypatch, s3.env(client="prep"))
    tables = {}
    for name, where in (("local", str(local)), ("s3", url)):
        code, out, err = prep(capsys, "scan", where, "--out", str(tmp_path / f"{name}.json"), "--backend", "inline")
        assert code in (0, 1), out + err
        tables[name] = pq.read_table(tmp_path / f"{name}.episodes.parquet").to_pylist()
    assert [r["status"] for r in tables["s3"]] == [r["status"] for r in tables["local"]]
    assert [r["status"] for r in tables["s3"]].count("failed") == 1, tables["s3"]
    for mine, theirs in zip(tables["s3"], tables["local"], strict=True):
        assert (mine["reason"] or "").replace(url, "ROOT") == (theirs["reason"] or "").replace(str(local), "ROOT")


def test_s3_scan_reads_at_most_two_percent(s3: S3Server, tmp_path_factory: pytest.TempPathFactory,
                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A corpus laid out as LeRobot v3.0 packs it (many episodes per file): scan reads the container headers,
    the parquet footers and the columns it counts, the metadata, and one listing; nothing whole."""
    local = write_synthetic(tmp_path_factory.mktemp("packed") / "v30",
                            SynthSpec(version="v3.0", episodes=12, episodes_per_file=6, frames=150, height=240,
                                      width=320, crf=12, reuse_video=True))  # two files a camera: the first
    # unit's open also probes the pixel format, the other's reads the header alone
    url = "s3://src/packed/v30"
    s3.upload_tree(local, url)
    total = corpus_bytes(local)
    set_env(monkeypatch, s3.env(client="prep"))
    s3.reset_stats()
    code, out, err = prep(capsys, "scan", url, "--out", str(local.parent / "m.json"), "--backend", "inline")
    assert code == 0, out + err
    stats = s3.stats_for("prep")
    share = stats.bytes_out / total
    with capsys.disabled():
        print(f"\nscan of {total:,} bytes read {stats.bytes_out:,} ({share:.2%}) in {stats.requests} requests: "
              f"{stats.ops}")
    assert share <= 0.02, (share, stats.ops)
    assert stats.puts == 0 and stats.deletes == 0
    assert stats.heads <= len(s3.list_keys(url))  # one HEAD per file read at most (none after a listing)
    s3.reset_stats()
    code, out, err = prep(capsys, "verify", url, "--backend", "inline")
    assert code == 0, out + err
    verify = s3.stats_for("prep")
    with capsys.disabled():
        print(f"verify (every packet demuxed) read {verify.bytes_out:,} bytes ({verify.bytes_out / total:.2%}) in "
              f"{verify.requests} requests: {verify.ops}")
    assert verify.bytes_out <= 1.1 * total  # streamed: nothing read twice


def test_s3_scan_of_one_file_per_episode_reads_at_most_two_percent(
        s3: S3Server, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A v2.1 corpus (one 480x640 mp4 of ~1.3 MB per episode and camera, moov last): each video costs its header
    boxes alone (pipeline.video.mp4header: its first 8 kB and its moov, 2 GETs; the first unit also its first
    sample, for the pixel format), never a sample through FFmpeg's probe, and the manifest is the local scan's."""
    local = write_synthetic(tmp_path_factory.mktemp("episodes") / "v21",
                            SynthSpec(version="v2.1", episodes=8, reuse_video=True))
    url = "s3://src/episodes/v21"
    s3.upload_tree(local, url)
    total = corpus_bytes(local)
    videos = [p for p in local.rglob("*.mp4")]
    set_env(monkeypatch, s3.env(client="prep"))
    out = local.parent
    code, stdout, err = prep(capsys, "scan", str(local), "--out", str(out / "local.json"), "--backend", "inline")
    assert code == 0, stdout + err
    s3.reset_stats()
    code, stdout, err = prep(capsys, "scan", url, "--out", str(out / "s3.json"), "--backend", "inline")
    assert code == 0, stdout + err
    stats = s3.stats_for("prep")
    share = stats.bytes_out / total
    video_gets = [r for r in s3.requests() if r.client == "prep" and r.op == "GetObject" and r.path.endswith(".mp4")]
    with capsys.disabled():
        print(f"\nscan of {total:,} bytes ({len(videos)} videos) read {stats.bytes_out:,} ({share:.2%}) in "
              f"{stats.requests} requests ({len(video_gets)} GETs of videos): {stats.ops}")
    assert share <= 0.02, (share, stats.ops)
    assert len(video_gets) <= 2 * len(videos) + 3  # 2 a video, and the first sample of each camera once
    assert stats.heads < len(videos) // 2  # a LIST per folder (stages/scan.py), not a HEAD per file
    assert sum(r.bytes_out for r in video_gets) <= 0.015 * sum(p.stat().st_size for p in videos)
    assert stats.puts == 0 and stats.deletes == 0
    manifest = read_json(out / "s3.json")
    assert manifest["dataset"]["root"] == url
    assert same_numbers(manifest) == same_numbers(read_json(out / "local.json", (str(local), url)))
    table = pq.read_table(out / "s3.episodes.parquet")
    assert table.equals(pq.read_table(out / "local.episodes.parquet"))
    assert '"pix_fmt": "yuv420p"' in (out / "s3.json").read_text()  # the first unit's first samples, decoded


# ---- failures are one line --------------------------------------------------------------------------------


def one_line_error(code: int, out: str, err: str, url: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert url in lines[0], lines[0]
    return lines[0]


def test_s3_credentials_missing_or_wrong_are_one_line(s3: S3Server, small: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:

    url = "s3://src/creds/v21"
    s3.upload_tree(small["v21"], url)
    env = s3.env(client="prep")
    set_env(monkeypatch, {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    for command in ("scan", "verify"):
        line = one_line_error(*prep(capsys, command, url, "--out", str(tmp_path / "x.json")), url)
        assert "no credentials found" in line and "AWS_ACCESS_KEY_ID" in line, line

    from support.s3 import checking_signatures, iam_access_key

    key = iam_access_key(s3.endpoint)
    set_env(monkeypatch, {**env, "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": SECRET})
    with checking_signatures(s3.endpoint):
        for command in ("scan", "verify"):
            code, out, err = prep(capsys, command, url, "--out", str(tmp_path / "x.json"))
            line = one_line_error(code, out, err, url)
            assert "access denied" in line and "AWS_ACCESS_KEY_ID" in line, line
            assert SECRET not in out + err


def test_s3_profile_from_the_aws_config_files(s3: S3Server, small: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A named profile of ~/.aws/config and ~/.aws/credentials (AWS_PROFILE or --storage-option profile=) carries
    the endpoint and the keys, as the AWS CLI reads them; a profile that is not there is one line, exit 2 (it was
    botocore's ProfileNotFound traceback)."""
    url = "s3://src/profile/v21"
    s3.upload_tree(small["v21"], url)
    env = s3.env(client="prep")
    config, creds = tmp_path / "config", tmp_path / "credentials"
    config.write_text(f"[profile lab]\nregion = {env['AWS_REGION']}\nendpoint_url = {s3.endpoint}\n")
    creds.write_text(f"[lab]\naws_access_key_id = prep\naws_secret_access_key = {SECRET}\n")
    bare = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                       "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")}
    set_env(monkeypatch, {**bare, "AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(creds)})
    for how in (("--storage-option", "profile=lab"), ()):
        if not how:
            monkeypatch.setenv("AWS_PROFILE", "lab")
        code, out, err = prep(capsys, "scan", url, "--out", str(tmp_path / "m.json"), *how)
        assert code == 0, out + err
        assert SECRET not in out + err
        assert json.loads((tmp_path / "m.json").read_text())["totals"]["episodes"] == 3
        (tmp_path / "m.json").unlink()
    for how in (("--storage-option", "profile=nope"), ()):
        monkeypatch.setenv("AWS_PROFILE", "lab" if how else "nope")
        line = one_line_error(*prep(capsys, "scan", url, "--out", str(tmp_path / "m.json"), *how), url)
        assert "(nope) could not be found" in line and "AWS_PROFILE" in line, line
    assert not (tmp_path / "m.json").exists()


def test_s3_missing_bucket_is_one_line(s3: S3Server, small: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A bucket that does not exist, as source or as output: one line naming the URL and the endpoint (it was a
    FileNotFoundError traceback from s3fs)."""
    set_env(monkeypatch, s3.env(client="prep"))
    url = "s3://no-such-bucket/corpora/merged"
    for args in (("scan", url, "--out", str(tmp_path / "x.json")), ("verify", url),
                 ("reencode", url, "--dst", "224", "--out", str(tmp_path / "o")),
                 ("convert", url, "--to", "v3.0", "--out", str(tmp_path / "c"))):
        line = one_line_error(*prep(capsys, *args), url)
        assert "bucket 'no-such-bucket' not found" in line and s3.endpoint in line, line
    out = "s3://no-such-bucket/out"
    line = one_line_error(*prep(capsys, "reencode", str(small["v21"]), "--dst", "224", "--out", out), out)
    assert "not found" in line, line
    assert not any((tmp_path / n).exists() for n in ("x.json", "o", "c"))


@pytest.mark.parametrize("endpoint", ["down", "hanging"])
def test_s3_endpoint_down_or_hanging_is_one_line(endpoint: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from support.s3 import s3_env

    url = "s3://src/ds"
    with (refusing_endpoint() if endpoint == "down" else hanging_endpoint()) as address:
        set_env(monkeypatch, s3_env(address, client="prep"))
        t0 = time.monotonic()
        for command in ("scan", "verify"):
            line = one_line_error(*prep(capsys, command, url, "--out", str(tmp_path / "x.json")), url)
            assert re.search(r"cannot reach|did not answer in time", line), line
            assert "AWS_ENDPOINT_URL" in line, line
        assert time.monotonic() - t0 < 120  # bounded: connect/read timeouts, one attempt for the first question
    assert not (tmp_path / "x.json").exists()


# ---- listing ---------------------------------------------------------------------------------------------


def test_a_prefix_of_ten_thousand_objects_lists_in_pages(s3: S3Server, small: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pipeline.storage import parse_location

    url = "s3://src/many/v21"
    s3.upload_tree(small["v21"], url)
    # no empty object: obstore cannot tell one from a folder marker, and s3fs lists on from it
    # (test_empty_objects_and_folder_markers_list_as_s3_says)
    extra = {f"extra/{i:05d}.txt": b"x" * (1 + i % 7) for i in range(10_001)}
    s3.put_many(url, extra)
    set_env(monkeypatch, s3.env(client="prep"))
    s3.reset_stats()
    files = list(parse_location(url).store().iter_files())
    listing = s3.stats_for("prep")
    assert len(files) == len(extra) + sum(1 for p in small["v21"].rglob("*") if p.is_file())
    assert listing.ops == {"ListObjectsV2": (len(files) + 999) // 1000}, listing.ops  # pages, no HEAD
    assert [rel for rel, _ in files] == sorted(rel for rel, _ in files)

    s3.reset_stats()
    code, out, err = prep(capsys, "scan", url, "--out", str(tmp_path / "m.json"), "--backend", "inline")
    assert code == 0, out + err
    stats = s3.stats_for("prep")
    manifest = read_json(tmp_path / "m.json")
    assert manifest["totals"]["files"] == len(files)
    assert manifest["totals"]["bytes"]["other"] == sum(len(v) for v in extra.values())
    assert stats.lists <= (len(files) + 999) // 1000 + 12, stats.ops  # one listing of the whole, a few small ones
    heads = [r.path for r in s3.requests() if r.client == "prep" and r.op == "HeadObject"]
    assert not any("/extra/" in p for p in heads), heads  # no request per listed object


# ---- secrets stay in the environment ----------------------------------------------------------------------


def test_no_secret_in_output_reports_or_task_keys(s3: S3Server, small: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from distributed import LocalCluster

    url = f"s3://src/{PREFIX}/secret-v30"
    s3.upload_tree(small["v30"], url)
    set_env(monkeypatch, {**s3.env(client="prep"), "AWS_SECRET_ACCESS_KEY": SECRET})
    # the workers are processes started now: they inherit this environment (the credentials), never a task's
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        scan = prep(capsys, "scan", url, "--out", str(tmp_path / "m.json"), "--scheduler", address)
        verify = prep(capsys, "verify", url, "--out", str(tmp_path / "r.json"), "--scheduler", address)
        keys = [str(t[0]) for t in cluster.scheduler.transition_log]
        events = repr(cluster.scheduler.get_events())
    assert scan[0] == 0 and verify[0] == 0, (scan, verify)
    assert any(k.startswith("scan-") for k in keys) and any(k.startswith("verify-") for k in keys), keys[:5]
    assert s3.stats_for("prep").requests > 0
    written = [p.read_bytes().decode("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    for text in [*scan[1:], *verify[1:], *keys, events, *written]:
        assert SECRET not in text
