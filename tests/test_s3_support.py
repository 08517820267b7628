"""tests/support/s3.py: the loopback S3 server counts what clients do, and its snapshot sees every change."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.config import Config
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
from support.s3 import S3Server, hanging_endpoint, refusing_endpoint, s3_env


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


def test_counts_requests_and_bytes_per_client(s3: S3Server) -> None:
    s3.make_bucket("counted")
    alice, bob = s3.boto3_client("alice"), s3.boto3_client("bob")
    s3.reset_stats()
    body = bytes(range(256)) * 40  # 10,240 bytes
    alice.put_object(Bucket="counted", Key="a/b.bin", Body=body)
    assert alice.get_object(Bucket="counted", Key="a/b.bin")["Body"].read() == body
    part = bob.get_object(Bucket="counted", Key="a/b.bin", Range="bytes=100-199")["Body"].read()
    assert part == body[100:200]
    bob.head_object(Bucket="counted", Key="a/b.bin")
    bob.list_objects_v2(Bucket="counted", Prefix="a/")

    a, b = s3.stats_for("alice"), s3.stats_for("bob")
    assert (a.requests, a.puts, a.gets, a.bytes_in, a.bytes_out) == (2, 1, 1, len(body), len(body))
    assert (b.requests, b.gets, b.heads, b.lists, b.bytes_in) == (3, 1, 1, 1, 0)
    ranged = [r for r in s3.requests() if r.client == "bob" and r.op == "GetObject"]
    assert [(r.range, r.status, r.bytes_out) for r in ranged] == [("bytes=100-199", 206, 100)]  # the range only
    total = s3.stats
    assert total.requests == 5 and total.gets == 2 and total.ops["ListObjectsV2"] == 1
    assert total.bytes_out == a.bytes_out + b.bytes_out > len(body) + 100  # listing bytes are counted too

    s3.make_bucket("counted")  # the helper's own calls are left out of `stats`
    assert s3.stats.requests == 5
    s3.reset_stats()
    assert s3.stats.requests == 0 and s3.requests() == []


def test_conditional_requests_are_recorded(s3: S3Server) -> None:
    s3.make_bucket("conditions")
    c = s3.boto3_client("locker")
    s3.reset_stats()
    etag = c.put_object(Bucket="conditions", Key="lock", Body=b"1", IfNoneMatch="*")["ETag"]
    with pytest.raises(c.exceptions.ClientError) as refused:
        c.put_object(Bucket="conditions", Key="lock", Body=b"2", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    c.put_object(Bucket="conditions", Key="lock", Body=b"3", IfMatch=etag)
    seen = [(r.op, r.status, r.conditions) for r in s3.requests()]
    assert seen == [("PutObject", 200, "If-None-Match: *"), ("PutObject", 412, "If-None-Match: *"),
                    ("PutObject", 200, f"If-Match: {etag}")]


def test_snapshot_sees_every_change(s3: S3Server, tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "meta").mkdir(parents=True)
    (src / "meta" / "info.json").write_text('{"fps": 30}')
    (src / "data chunk é").mkdir()
    (src / "data chunk é" / "x.parquet").write_bytes(b"PAR1" * 100)
    s3.make_bucket("snap")
    assert s3.upload_tree(src, "s3://snap/ds") == 2

    before = s3.snapshot("s3://snap/ds")
    assert before == {
        "ds/meta/info.json": (11, hashlib.md5(b'{"fps": 30}').hexdigest()),
        "ds/data chunk é/x.parquet": (400, hashlib.md5(b"PAR1" * 100).hexdigest()),
    }
    assert s3.snapshot("s3://snap/ds") == before
    s3.put_bytes("s3://snap/ds/meta/info.json", b'{"fps": 31}')  # same size, new content
    assert s3.snapshot("s3://snap/ds") != before
    assert s3.snapshot("s3://snap/other") == {}


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_put_many_fills_a_prefix(s3: S3Server, process: bool) -> None:
    objects = {f"chunk-{i // 100:03d}/file {i:04d}.bin": str(i).encode() for i in range(250)}
    if process:
        with S3Server(process=True) as child:
            child.make_bucket("many")
            assert child.put_many("s3://many/p", objects) == 250
            snap = child.snapshot("s3://many/p")
    else:
        s3.make_bucket("many")
        assert s3.put_many("s3://many/p", objects) == 250
        snap = s3.snapshot("s3://many/p")
    assert snap == {f"p/{k}": (len(v), hashlib.md5(v).hexdigest()) for k, v in objects.items()}


def test_multipart_uploads_in_progress_are_listed_and_aborted(s3: S3Server) -> None:
    s3.make_bucket("parts")
    c = s3.boto3_client("writer")
    upload = c.create_multipart_upload(Bucket="parts", Key="big.mp4")
    c.upload_part(Bucket="parts", Key="big.mp4", UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)
    assert s3.multipart_uploads("parts") == [("big.mp4", upload["UploadId"])]
    assert s3.abort_multipart_uploads("parts") == 1
    assert s3.multipart_uploads("parts") == []
    assert s3.snapshot("s3://parts") == {}


def test_broken_endpoints_fail_fast() -> None:
    import boto3

    def client(url: str) -> object:
        env = s3_env(url)
        return boto3.session.Session().client(
            "s3", endpoint_url=url, region_name=env["AWS_REGION"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            config=Config(connect_timeout=1, read_timeout=1, retries={"max_attempts": 1}),
        )

    with refusing_endpoint() as url:
        t0 = time.monotonic()
        with pytest.raises(EndpointConnectionError):
            client(url).list_buckets()  # type: ignore[attr-defined]
        assert time.monotonic() - t0 < 5
    with hanging_endpoint() as url:
        t0 = time.monotonic()
        with pytest.raises((ReadTimeoutError, ConnectTimeoutError)):
            client(url).list_buckets()  # type: ignore[attr-defined]
        assert time.monotonic() - t0 < 10


def test_process_mode_counts_the_same() -> None:
    with S3Server(process=True) as server:
        server.make_bucket("proc")
        c = server.boto3_client("child")
        c.put_object(Bucket="proc", Key="k", Body=b"abc" * 1000)
        assert c.get_object(Bucket="proc", Key="k", Range="bytes=0-9")["Body"].read() == b"abcabcabca"
        st = server.stats
        assert (st.requests, st.puts, st.gets, st.bytes_in, st.bytes_out) == (2, 1, 1, 3000, 10)
        server.reset_stats()
        assert server.stats.requests == 0
    assert server.env()["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_added_latency_delays_each_request_side_by_side(process: bool) -> None:
    """`latency_s` (bench/object_store.py --latency-ms: a region's round trip) delays every request by at least
    that much, and requests in flight wait side by side, not in turn (4 at once take about one delay, not 4)."""
    from concurrent.futures import ThreadPoolExecutor

    with S3Server(process=process, latency_s=0.3) as server:
        server.make_bucket("slow")
        c = server.boto3_client("late")
        c.put_object(Bucket="slow", Key="k", Body=b"x")
        t0 = time.perf_counter()
        c.head_object(Bucket="slow", Key="k")
        assert time.perf_counter() - t0 >= 0.3
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(lambda _: c.get_object(Bucket="slow", Key="k")["Body"].read(), range(4))) == [b"x"] * 4
        assert 0.3 <= time.perf_counter() - t0 < 4 * 0.3
