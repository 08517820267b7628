"""The object store's hot reads through obstore (pipeline.storage.obstore_reads): taken only where the environment
alone configures the store as boto3 would read it, the same bytes, stats, listings and request counts as s3fs's,
s3fs wherever object_store's paths differ from S3's keys, and never in a process forked from one whose obstore
runtime has started (its requests would hang). Against moto's S3 on loopback."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.s3 import S3Server, checking_signatures, iam_access_key
from support.storage import REPO, child_env, prep_env, set_env

from pipeline.storage import StorageError, parse_location
from pipeline.storage.base import EXACT_READS, HEADER_BLOCK, STREAM_BLOCK
from pipeline.storage.objects import ObjectStore
from pipeline.storage.obstore_reads import settings, usable

S3_BUCKETS = ("obs",)
SECRET = "obstore-test-secret-0123456789abcdef"
BIG = bytes(range(256)) * 4096  # 1 MiB: above the store's small-file size, so reads are ranged
ODD_KEYS = ("x\x01.txt", "dot/./x.txt", "dbl//x.txt")  # keys object_store cannot name


def conf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], *, config: str | None = None,
         options: dict[str, str] | None = None, bucket: str = "obs") -> dict[str, Any] | None:
    for name in [k for k in os.environ if k.startswith("AWS_") or k.endswith(("_PROXY", "_proxy"))
                 or k == "PREP_S3_READER"]:
        monkeypatch.delenv(name)
    path = tmp_path / "aws-config"
    path.write_text(config or "")
    for k, v in {"AWS_CONFIG_FILE": str(path), **env}.items():
        monkeypatch.setenv(k, v)
    return settings("s3", bucket, options or {}, attempts=3, connect_s=10, timeout_s=60)


def test_obstore_reads_only_where_the_environment_says_everything(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    keys = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": SECRET}
    local = {**keys, "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    kw = conf(monkeypatch, tmp_path, local)
    assert kw is not None
    assert kw["endpoint"] == "http://127.0.0.1:9000" and kw["client_options"]["allow_http"] is True
    assert kw["virtual_hosted_style_request"] is False  # an IP address endpoint: path-style, as botocore does
    assert kw["retry_config"]["max_retries"] == 2 and kw["client_options"]["timeout"] == "60s"
    assert kw["access_key_id"] == "AKIA1" and kw["region"] == "us-east-1"
    named = conf(monkeypatch, tmp_path, {**keys, "AWS_ENDPOINT_URL_S3": "https://minio.lab:9000", "AWS_REGION": "x"})
    assert named is not None and named["virtual_hosted_style_request"] is True and named["region"] == "x"
    assert named["client_options"]["allow_http"] is False
    assert conf(monkeypatch, tmp_path, {**keys, "AWS_ENDPOINT_URL": "https://minio.lab"},
                bucket="a.b")["virtual_hosted_style_request"] is False  # type: ignore[index]  # dots: path-style
    assert conf(monkeypatch, tmp_path, local, options={"addressing_style": "virtual"}
                )["virtual_hosted_style_request"] is True  # type: ignore[index]
    # AWS itself: the region from the environment or the default profile of the config file
    assert conf(monkeypatch, tmp_path, {**keys, "AWS_DEFAULT_REGION": "eu-west-3"})["region"] == "eu-west-3"  # type: ignore[index]
    got = conf(monkeypatch, tmp_path, keys, config="[default]\nregion = ap-south-1\noutput = json\n")
    assert got is not None and got["region"] == "ap-south-1" and "endpoint" not in got
    token = conf(monkeypatch, tmp_path, {**keys, "AWS_REGION": "x", "AWS_SESSION_TOKEN": "tok"})
    assert token is not None and token["session_token"] == "tok"
    assert conf(monkeypatch, tmp_path, {"AWS_REGION": "x"}, options={"anon": "true"})["skip_signature"] is True  # type: ignore[index]
    # everything else stays on s3fs: what botocore reads and object_store does not
    for env, config, options in [
        ({"AWS_REGION": "x"}, None, None),  # no keys in the environment: botocore's chain finds them
        (keys, None, None),  # neither a region nor an endpoint: boto3 follows the bucket's region
        ({**local, "AWS_PROFILE": "lab"}, None, None),
        (local, None, {"profile": "lab"}),
        (local, "[default]\nregion = x\ns3 =\n  addressing_style = path\n", None),
        (local, "[default\nbroken", None),
        ({**local, "PREP_S3_READER": "s3fs"}, None, None),
        ({**local, "HTTPS_PROXY": "http://proxy:3128"}, None, None),
        ({**keys, "AWS_ENDPOINT_URL": "https://minio.lab", "AWS_CA_BUNDLE": "/etc/lab-ca.pem"}, None, None),
    ]:
        assert conf(monkeypatch, tmp_path, env, config=config, options=options) is None, (env, config, options)
    # a CA bundle says nothing to a plain-http endpoint
    assert conf(monkeypatch, tmp_path, {**local, "AWS_CA_BUNDLE": "/etc/lab-ca.pem"}) is not None


def test_usable_keys() -> None:
    assert usable("data/chunk-000/episode_000000.parquet") and usable("videos/wrist ü/a%b+c#d.mp4")
    assert not any(usable(k) for k in ("", "a/", "/a", "a//b", "a/./b", "a/../b", "a\x01b", "a\tb", "a\x7fb"))


@pytest.fixture
def obs(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """`s3` with a prefix of plain, odd, empty and marker objects; this test signed as `prep`."""
    client = s3.client
    objs = {"ds/a.bin": BIG, "ds/meta/info.json": b'{"x": 1}', "ds/empty.txt": b"", "ds/videos/": b"",
            "ds/videos/cam/ep0.mp4": BIG[:700_000], "ds/z/deeper/f.txt": b"f"}
    for key, body in objs.items():
        client.put_object(Bucket="obs", Key=key, Body=body)
    set_env(monkeypatch, prep_env(s3, SECRET))
    yield s3
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="obs"):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket="obs", Key=obj["Key"])


def pair(monkeypatch: pytest.MonkeyPatch) -> tuple[ObjectStore, ObjectStore]:
    """(a store reading through obstore, one reading through s3fs) of s3://obs/ds."""
    loc = parse_location("s3://obs/ds")
    fast = ObjectStore(loc)
    assert fast.reads is not None
    monkeypatch.setenv("PREP_S3_READER", "s3fs")
    slow = ObjectStore(loc)
    assert slow.reads is None
    monkeypatch.delenv("PREP_S3_READER")
    return fast, slow


def reads(store: ObjectStore) -> dict[str, Any]:
    """What a scan asks of a store, every way it reads."""
    out: dict[str, Any] = {"files": list(store.iter_files())}
    store.learn_folder("videos/cam/ep0.mp4")
    out["stat"] = store.stat("videos/cam/ep0.mp4")
    out["small"] = store.read_bytes("meta/info.json")
    for name, block in (("header", HEADER_BLOCK), ("exact", EXACT_READS), ("stream", STREAM_BLOCK)):
        with store.open("a.bin", block_size=block) as fh:
            head = fh.read(100)
            fh.seek(-5000, os.SEEK_END)
            tail = fh.read()
            fh.seek(300_000)
            buf = bytearray(70_000)
            n = fh.readinto(buf)  # type: ignore[attr-defined]
            out[name] = (head, tail, bytes(buf[:n]), fh.tell())
    out["has"] = (store.has_file("a.bin"), store.has_file("nope.bin"))
    return out


def test_obstore_and_s3fs_read_alike(obs: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = pair(monkeypatch)
    got: dict[str, Any] = {}
    obs.client.delete_object(Bucket="obs", Key="ds/videos/")
    obs.client.delete_object(Bucket="obs", Key="ds/empty.txt")
    for label, store in (("obstore", fast), ("s3fs", slow)):
        obs.reset_stats()
        got[label] = (reads(store), obs.stats_for("prep").ops)
    assert got["obstore"] == got["s3fs"]  # bytes, stats, listings, and the requests each way
    assert got["obstore"][0]["header"][2] == BIG[300_000:370_000]
    assert got["obstore"][1] == {"ListObjectsV2": 1, "HeadObject": 1, "GetObject": 9}


def test_odd_keys_empty_objects_and_folder_markers_read_as_s3fs_reads_them(obs: S3Server,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """object_store cannot name some S3 keys, and lists a folder marker `a/` as a file `a`: s3fs answers there."""
    for key in ODD_KEYS:
        obs.client.put_object(Bucket="obs", Key=f"ds/{key}", Body=b"odd")
    fast, slow = pair(monkeypatch)
    listed = list(fast.iter_files())
    assert listed == list(slow.iter_files())
    files = dict(listed)
    assert files["empty.txt"].size == 0 and "videos" not in files  # an empty object kept, a folder marker not
    assert set(ODD_KEYS) <= set(files)
    for key in ODD_KEYS:  # read through s3fs, or refused by the seam's own path rules, alike
        outcome = []
        for store in (fast, slow):
            try:
                outcome.append(store.read_bytes(key))
            except StorageError as exc:
                outcome.append(str(exc))
        assert outcome[0] == outcome[1], outcome
        obs.client.delete_object(Bucket="obs", Key=f"ds/{key}")
    assert fast.read_bytes(ODD_KEYS[0]) == b"odd"
    fresh = ObjectStore(parse_location("s3://obs/ds"))
    with pytest.raises(Exception) as err:
        fresh.stat("videos")
    assert "not a regular file" in str(err.value)  # a folder (its marker), as s3fs tells it
    with pytest.raises(Exception) as err:
        fresh.stat("nothing/here")
    assert "missing" in str(err.value)


def test_a_changed_object_is_refused_mid_read(obs: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """obstore's GETs carry the ETag the read began with (If-Match): a source rewritten meanwhile is one line."""
    store, _ = pair(monkeypatch)
    with store.open("a.bin", block_size=HEADER_BLOCK) as fh:
        assert fh.read(10) == BIG[:10]
        obs.client.put_object(Bucket="obs", Key="ds/a.bin", Body=BIG[::-1])
        fh.seek(500_000)
        with pytest.raises(StorageError, match=r"s3://obs/ds/a\.bin: the object changed while it was read"):
            fh.read(10)


def _child_read(url: str, queue: Any) -> None:
    from pipeline.storage import parse_location as parse

    store = parse(url).store()
    queue.put((store.reads is None, store.read_bytes("meta/info.json")))  # type: ignore[attr-defined]


def test_a_forked_child_reads_through_s3fs(obs: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """obstore's runtime threads are not in a forked child: a request there would hang."""
    store = parse_location("s3://obs/ds").store()
    assert store.reads is not None and store.read_bytes("meta/info.json") == b'{"x": 1}'  # type: ignore[attr-defined]
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_read, args=("s3://obs/ds", queue))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("a forked child's read hung")
    assert queue.get(timeout=5) == (True, b'{"x": 1}')


def test_a_scan_process_reads_without_s3fs(obs: S3Server) -> None:
    """The reason for obstore: a process that only reads imports neither s3fs nor aiobotocore (~0.55 s of CPU
    a process, measured), and its requests cost less CPU."""
    code = ("import sys; from pipeline.storage import parse_location as p; s = p('s3://obs/ds').store(); "
            "s.check_reachable(); files = [r for r, _ in s.iter_files()]; s.learn_folder('videos/cam/ep0.mp4'); "
            "f = s.open('videos/cam/ep0.mp4', block_size=65536); f.seek(-100, 2); f.read(); "
            "print(len(files), sorted(m for m in ('s3fs', 'aiobotocore', 'botocore') if m in sys.modules))")
    env = {**child_env(obs, SECRET)}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "AWS_CA_BUNDLE"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # the empty object and the folder marker make the listing go on through s3fs: without them, no botocore
    assert out.stdout.split(" ", 1)[1].strip() == "['aiobotocore', 'botocore', 's3fs']", out.stdout
    obs.client.delete_object(Bucket="obs", Key="ds/empty.txt")
    obs.client.delete_object(Bucket="obs", Key="ds/videos/")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1)[1].strip() == "[]", out.stdout


def test_access_denied_mid_run_is_one_line(obs: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    key = iam_access_key(obs.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # not the user's: every signature is refused
    store = ObjectStore(parse_location("s3://obs/ds"))
    assert store.reads is not None
    with checking_signatures(obs.endpoint):
        for ask in (lambda: store.stat("a.bin"), lambda: list(store.iter_files())):
            with pytest.raises(StorageError) as err:
                ask()
            line = str(err.value)
            assert "\n" not in line and SECRET not in line and "s3://obs/ds" in line, line
            assert "access denied" in line and "AWS_ACCESS_KEY_ID" in line, line


def test_a_reader_never_pickles_its_credentials(obs: S3Server) -> None:
    """obstore's S3Store pickles with its keys: a reader refuses, so no task payload can carry them."""
    import pickle

    store = ObjectStore(parse_location("s3://obs/ds"))
    assert store.reads is not None
    with pytest.raises(TypeError, match="holds credentials"):
        pickle.dumps(store.reads)
    assert SECRET.encode() in pickle.dumps(store.reads._store)  # what the refusal keeps out of a payload
