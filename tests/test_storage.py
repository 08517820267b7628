"""The storage seam (pipeline.storage): locations, the local store's read rules (hub-cache links followed, every
other escaping link refused), and the object store against a real S3 server (moto) on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.hub import make_hub_cache

from pipeline.storage import (
    Location,
    MissingFile,
    NotAFile,
    OutsideRoot,
    StorageError,
    local_location,
    parse_location,
    parse_options,
)
from pipeline.storage import hub as hubmod
from pipeline.storage.objects import redact

KEY_ID, SECRET = "AKIAPREPTESTKEY00001", "prep-test-secret-value-0123456789abcdef"


# ---- a hub cache in huggingface_hub's own layout -------------------------------------------------------------


def test_hub_cache_layout_is_huggingface_hubs(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    make_hub_cache(tmp_path / "hub", "lerobot/demo", {"meta/info.json": b"{}", "data/chunk-000/x.parquet": b"P"})
    info = scan_cache_dir(tmp_path / "hub")
    assert not info.warnings
    (repo,) = info.repos
    assert (repo.repo_id, repo.repo_type, repo.nb_files) == ("lerobot/demo", "dataset", 2)
    assert {r.refs for r in repo.revisions} == {frozenset({"main"})}


def test_snapshot_links_are_followed_other_escapes_refused(tmp_path: Path) -> None:
    snap = make_hub_cache(tmp_path / "hub", "lerobot/demo", {"meta/info.json": b'{"a": 1}'})
    outside = tmp_path / "secret.txt"
    outside.write_text("not the dataset's")
    (snap / "meta" / "evil.json").symlink_to(outside)
    loc = parse_location(str(snap))
    assert loc.link_root == str(snap.parent.parent)  # the cache repository folder
    store = loc.store()
    assert store.read_bytes("meta/info.json") == b'{"a": 1}'
    assert store.stat("meta/info.json").size == 8
    with pytest.raises(OutsideRoot, match="outside its hub-cache repository folder"):
        store.read_bytes("meta/evil.json")
    assert [rel for rel, _ in store.iter_files()] == ["meta/info.json"]  # the escaping link is passed over


def test_plain_folder_keeps_todays_rule(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{}")
    (root / "meta" / "inside.json").symlink_to("info.json")
    (root / "meta" / "escape.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    os.mkfifo(root / "meta" / "fifo.json")
    store = local_location(root).store()
    assert store.read_bytes("meta/inside.json") == b"{}"
    with pytest.raises(OutsideRoot, match="outside the dataset root"):
        store.open("meta/escape.json")
    with pytest.raises(OutsideRoot, match="leaves the dataset root"):
        store.stat("../elsewhere.json")
    with pytest.raises(NotAFile, match="FIFO"):
        store.open("meta/fifo.json")  # refused, never blocking
    with pytest.raises(NotAFile, match="folder"):
        store.stat("meta")
    with pytest.raises(MissingFile, match="missing episode video"):
        store.stat("videos/x.mp4", what="episode video")


def test_repo_id_resolves_offline_like_lerobot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(StorageError, match="prep never downloads"):
        parse_location("lerobot/demo")
    snap = make_hub_cache(tmp_path / "hf" / "hub", "lerobot/demo", {"meta/info.json": b"{}"})
    assert parse_location("lerobot/demo").root == str(snap)
    make_hub_cache(tmp_path / "hf" / "hub", "lerobot/demo", {"meta/info.json": b'{"v": 3}'}, revision="v3.0")
    v30 = parse_location("lerobot/demo", revision="v3.0")
    assert v30.store().read_bytes("meta/info.json") == b'{"v": 3}'
    own = tmp_path / "hf" / "lerobot" / "lerobot" / "demo" / "meta"  # LeRobotDataset(repo_id)'s own copy wins
    own.mkdir(parents=True)
    (own / "info.json").write_text("{}")
    assert parse_location("lerobot/demo").root == str(own.parent)
    (tmp_path / "lerobot" / "demo").mkdir(parents=True)  # a local folder of that name wins over the hub
    assert parse_location("lerobot/demo").root == str(tmp_path / "lerobot" / "demo")
    with pytest.raises(StorageError, match="--revision applies to a hub repo id"):
        parse_location("lerobot/demo", revision="main")


def test_urls_and_options() -> None:
    loc = parse_location("s3://bucket/some/prefix/", options=["endpoint_url=http://127.0.0.1:9", "anon=true"])
    assert (loc.scheme, loc.root, loc.url) == ("s3", "bucket/some/prefix", "s3://bucket/some/prefix")
    assert loc.options == (("anon", "true"), ("endpoint_url", "http://127.0.0.1:9"))
    assert loc.child("meta/info.json").url == "s3://bucket/some/prefix/meta/info.json"
    same = ["endpoint_url=http://127.0.0.1:9"]
    assert parse_location("s3://bucket", options=same).contains(loc)
    assert not loc.contains(parse_location("s3://bucket/some", options=same))
    assert not parse_location("s3://bucket/some/pre", options=same).contains(loc)
    assert not parse_location("s3://bucket").contains(loc)  # another endpoint: another store
    with pytest.raises(StorageError, match="credentials in a URL"):
        parse_location(f"s3://{KEY_ID}:{SECRET}@bucket/x")
    with pytest.raises(StorageError, match="credentials are never options"):
        parse_options([f"secret={SECRET}"])
    with pytest.raises(StorageError, match="unknown key"):
        parse_options(["block=1"])
    with pytest.raises(StorageError, match="unknown scheme"):
        parse_location("ftp://host/x")
    with pytest.raises(StorageError, match="leaves the bucket"):
        parse_location("s3://bucket/../other")
    import pickle

    assert pickle.loads(pickle.dumps(loc)) == loc


# ---- the object store against moto on loopback ----------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> str:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    import boto3

    bucket = f"b{time.monotonic_ns()}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return bucket


def test_object_store_reads_writes_and_copies(s3: str, tmp_path: Path) -> None:
    store = parse_location(f"s3://{s3}/ds one/ünï").store()  # spaces and non-ASCII in keys
    store.write_bytes("meta/info.json", b'{"fps": 30}')
    assert store.read_bytes("meta/info.json") == b'{"fps": 30}'
    st = store.stat("meta/info.json")
    assert st.size == 11 and st.version
    with store.writer("videos/a b.mp4") as tmp:
        tmp.write_bytes(b"x" * 100_000)
    with store.open("videos/a b.mp4", block_size=4096) as fh:
        fh.seek(50_000)
        assert fh.read(10) == b"x" * 10
    assert [r for r, _ in store.iter_files()] == ["meta/info.json", "videos/a b.mp4"]
    assert store.create("prep/output.lock", b"one") is True
    assert store.create("prep/output.lock", b"two") is False  # If-None-Match: *
    assert store.read_bytes("prep/output.lock") == b"one"
    out = parse_location(f"s3://{s3}/out").store()
    out.copy_in(store, "videos/a b.mp4", "videos/copy.mp4")  # server-side
    assert out.stat("videos/copy.mp4").size == 100_000
    local = local_location(tmp_path / "local").store()
    local.copy_in(store, "meta/info.json", "meta/info.json")
    assert (tmp_path / "local" / "meta" / "info.json").read_bytes() == b'{"fps": 30}'
    out.copy_in(local, "meta/info.json", "meta/from-local.json")
    assert out.read_bytes("meta/from-local.json") == b'{"fps": 30}'
    with pytest.raises(MissingFile):
        store.stat("meta/nothing.json")
    with pytest.raises(NotAFile, match="folder"):
        store.stat("meta")
    with pytest.raises(StorageError, match="over the 5 bytes"):
        store.read_bytes("meta/info.json", limit=5)
    out.remove("videos/copy.mp4")
    assert not out.exists("videos/copy.mp4")
    with store.local_copy("videos/a b.mp4") as p:
        assert p.stat().st_size == 100_000
    assert not p.exists()


def test_writer_failure_leaves_nothing(s3: str) -> None:
    store = parse_location(f"s3://{s3}/ds").store()
    with pytest.raises(RuntimeError), store.writer("videos/x.mp4") as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("encoder failed")
    assert not store.exists("videos/x.mp4")
    assert not tmp.exists()


def test_unreachable_and_unauthorised_are_one_line(s3: str, moto_endpoint: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from support.s3 import checking_signatures, iam_access_key

    key = iam_access_key(moto_endpoint)
    loc = parse_location(f"s3://{s3}/ds")
    with checking_signatures(moto_endpoint):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        loc.store().check_reachable()
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + SECRET)
        with pytest.raises(StorageError) as err:
            loc.store().check_reachable()
        assert "access denied" in str(err.value) and SECRET not in str(err.value)
        assert "\n" not in str(err.value)
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        with pytest.raises(StorageError, match=r"no credentials found.*AWS_ACCESS_KEY_ID"):
            loc.store().check_reachable()


def test_endpoint_down_or_hanging_is_one_line(s3: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    with pytest.raises(StorageError, match=r"cannot reach the object store at http://127\.0\.0\.1"):
        parse_location(f"s3://{s3}/ds").store().check_reachable()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts and never answers
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(StorageError, match=r"did not answer in time|cannot reach"):
            parse_location(f"s3://{s3}/ds").store().check_reachable()
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        listener.close()


def test_redact_scrubs_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    assert redact(f"signature for {SECRET} failed") == "signature for *** failed"


def test_storage_imports_nothing_heavy() -> None:
    code = ("import sys, pipeline.storage, pipeline.storage.local; "
            "print(sorted(m for m in ('s3fs', 'fsspec', 'botocore', 'huggingface_hub', 'pyarrow', 'av') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_location_is_frozen_and_hashable() -> None:
    a = Location("s3", "b/p")
    assert {a: 1}[Location("s3", "b/p")] == 1
    assert hubmod.looks_like_repo_id("lerobot/aloha_static_coffee")
    assert not hubmod.looks_like_repo_id("../x") and not hubmod.looks_like_repo_id("a/b/c")


def test_threads_opening_one_location_share_one_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan task's units run in threads (`Engine.map(threads=)`): each asks for the dataset's store at once, and
    all get the same one, so a process has one listing, one client and one cache per location (a store built
    per thread cost a client each and listed the same folders again). Building one is slowed down here, as a
    worker's first import of the object-store module slows it there."""
    from pipeline.storage import objects

    build = objects.ObjectStore.__init__

    def slow_build(self: objects.ObjectStore, location: Location) -> None:
        time.sleep(0.05)
        build(self, location)

    monkeypatch.setattr(objects.ObjectStore, "__init__", slow_build)
    loc = Location("s3", f"race-{os.getpid()}-{time.monotonic_ns()}/p")  # a store no test has opened yet
    start = threading.Barrier(8)
    got: list[object] = []

    def open_it() -> None:
        start.wait()
        got.append(loc.store())

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len({id(s) for s in got}) == 1


# ---- one writer per output: the lock on an object store ---------------------------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_object_lock_one_writer_and_takeover(s3: str) -> None:
    import json

    from pipeline.lock import LockedError
    from pipeline.storage.objects import ObjectLock

    store = parse_location(f"s3://{s3}/out").store()
    with store.lock("prep/output.lock", "output s3://out", command="prep reencode A") as where:
        assert where.endswith("/out/prep/output.lock")
        with pytest.raises(LockedError, match=r"prep reencode A.*pid \d+ on"), \
                store.lock("prep/output.lock", "output s3://out", command="prep reencode B"):
            pass
        with pytest.raises(LockedError):
            store.refuse_if_held("prep/output.lock", "output s3://out")
    assert not store.exists("prep/output.lock")  # released
    store.refuse_if_held("prep/output.lock", "output s3://out")

    # a holder on this host whose process is gone (a killed run): taken over at once
    dead = {"pid": _dead_pid(), "host": socket.gethostname(), "started_utc": "x", "heartbeat_unix": time.time()}
    store.write_bytes("prep/output.lock", json.dumps(dead).encode())
    with store.lock("prep/output.lock", "output", command="prep reencode C"):
        assert json.loads(store.read_bytes("prep/output.lock"))["command"] == "prep reencode C"

    # another host's holder: respected while its heartbeat is fresh, taken over once it is older than its lease
    other = {"pid": 1, "host": "elsewhere", "started_utc": "x", "heartbeat_unix": time.time(), "lease_s": 60}
    store.write_bytes("prep/output.lock", json.dumps(other).encode())
    with pytest.raises(LockedError, match="on elsewhere"), store.lock("prep/output.lock", "output"):
        pass
    store.write_bytes("prep/output.lock", json.dumps({**other, "heartbeat_unix": time.time() - 61}).encode())
    a = ObjectLock(store, "prep/output.lock", "output", command="taker A")
    b = ObjectLock(store, "prep/output.lock", "output", command="taker B")
    stale_holder, stale_etag = a.read()
    assert stale_holder is not None and ObjectLock.gone(stale_holder) and stale_etag
    assert a._put(IfMatch=stale_etag) is True  # two takers judged the same stale lock: exactly one wins
    assert b._put(IfMatch=stale_etag) is False
    a.etag and a.release()


def test_object_lock_lost_holder_does_not_publish(s3: str) -> None:
    import json

    from pipeline.storage.objects import LockLost, ObjectLock

    store = parse_location(f"s3://{s3}/out2").store()
    mine = ObjectLock(store, "prep/output.lock", "output", command="slow run", lease_s=0.4)
    mine.acquire()
    first = mine.etag
    time.sleep(0.35)  # the heartbeat (every lease/4) has refreshed the lock: a new ETag
    assert mine.etag != first
    mine._stop.set()  # the holder stalls: no more heartbeats
    mine._thread.join()
    time.sleep(0.5)
    taker = ObjectLock(store, "prep/output.lock", "output", command="next run", lease_s=30)
    taker.acquire()  # the stalled holder's lease expired: taken over
    mine.lost = not mine._put(IfMatch=mine.etag)  # its next heartbeat finds the lock is no longer its own
    with pytest.raises(LockLost, match="taken over"):
        mine.check()
    mine.release()  # must not delete the new holder's lock
    assert json.loads(store.read_bytes("prep/output.lock"))["command"] == "next run"
    taker.release()
    assert not store.exists("prep/output.lock")


def test_local_store_lock_is_pipeline_lock(tmp_path: Path) -> None:
    from pipeline.lock import LockedError

    store = local_location(tmp_path / "out").store()
    with store.lock("prep/output.lock", "output", command="prep edit X"), \
            pytest.raises(LockedError, match="prep edit X"):
        store.refuse_if_held("prep/output.lock", "output")
    store.refuse_if_held("prep/output.lock", "output")


def test_streamed_copy_that_fails_publishes_nothing(s3: str) -> None:
    """s3fs commits a writer closed by `with` even when the body raised (a truncated object): copy_in discards."""
    import io

    import boto3

    from pipeline.storage.objects import ObjectStore

    class Failing(io.RawIOBase):
        def __init__(self) -> None:
            self.sent = 0

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
            if self.sent >= 12 << 20:
                raise OSError("source connection reset")
            n = min(len(b), 1 << 20)
            b[:n] = b"\0" * n
            self.sent += n
            return n

    class Elsewhere(ObjectStore):  # another endpoint's store, whose stream breaks after 12 MiB (past one part)
        def open(self, rel, *, block_size=None, what="file"):  # type: ignore[no-untyped-def,override]
            return io.BufferedReader(Failing())

    src = Elsewhere(Location("s3", "other/ds", None, (("endpoint_url", "http://127.0.0.1:9"),)))
    out = parse_location(f"s3://{s3}/copied").store()
    with pytest.raises(OSError, match="connection reset"):
        out.copy_in(src, "videos/big.mp4", "videos/big.mp4")
    assert not out.exists("videos/big.mp4")
    assert boto3.client("s3").list_multipart_uploads(Bucket=s3).get("Uploads", []) == []
