"""A real S3 server on loopback for tests and benches: moto's WSGI application under werkzeug, behind a
middleware that counts every request (operation, path, status, Range header, body bytes in and out) per client.

    with S3Server() as s3:                       # 127.0.0.1, an ephemeral port, a thread of this process
        s3.make_bucket("src")
        s3.upload_tree(dataset_dir, "s3://src/ds")
        env = {**os.environ, **s3.env()}         # AWS_ENDPOINT_URL, dummy keys, region: for every process
        before = s3.snapshot("s3://src/ds")      # {key: (size, etag)}
        s3.reset_stats()
        subprocess.run([...prep..., "s3://src/ds"], env=env)
        assert s3.stats.gets <= ...
        assert s3.snapshot("s3://src/ds") == before and s3.multipart_uploads("out") == []

As a pytest fixture: `@pytest.fixture(scope="session") def s3(): with S3Server() as server: yield server`.

Clients are told apart by their access key id: `env(client="worker")` gives AWS_ACCESS_KEY_ID=worker (moto
accepts any key), and `stats_for("worker")` counts that client's requests only. `stats` counts every client
except this class's own helper calls (make_bucket, upload_tree, snapshot, ...), which use the key `s3support`.

moto keeps its buckets in module globals: two thread-mode servers in one process share them (use distinct
bucket names, or `reset()`). `S3Server(process=True)` runs the server in a child Python process instead:
isolated state, and a server that does not compete with the measured client for this process's GIL (what
the benches use). The counters work the same in both modes.

`refusing_endpoint()` (a port that refuses connections) and `hanging_endpoint()` (accepts, never answers)
give URLs for failure tests; `s3_env(url)` gives the environment for them.

Self-contained on purpose (stdlib, werkzeug, moto, boto3): runnable as a script, `python s3.py --serve`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUPPORT_CLIENT = "s3support"
DUMMY_SECRET = "dummy-secret-key"
DEFAULT_REGION = "us-east-1"
CONTROL = "/_s3counter/"  # the middleware answers these paths itself; they are never counted


def s3_env(endpoint: str, client: str = "prep", region: str = DEFAULT_REGION,
           variable: str = "AWS_ENDPOINT_URL") -> dict[str, str]:
    """The environment a process needs to reach `endpoint` with dummy credentials and no AWS probing.

    `variable` names the endpoint variable (AWS_ENDPOINT_URL or the service-specific AWS_ENDPOINT_URL_S3).
    The config and credentials files point at the null device, so ~/.aws never leaks into a test; the EC2
    metadata service is never probed. Merge it over os.environ: `{**os.environ, **s3_env(url)}`."""
    return {
        variable: endpoint,
        "AWS_ACCESS_KEY_ID": client,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def iam_access_key(endpoint: str) -> dict[str, str]:
    """A new IAM user of the moto server at `endpoint`, allowed every action: its `AccessKeyId` and
    `SecretAccessKey` (what a signature checked by `checking_signatures` must be made with)."""
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name=DEFAULT_REGION, aws_access_key_id="s3support",
                       aws_secret_access_key="x")
    user = f"prep{time.monotonic_ns()}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key: dict[str, str] = iam.create_access_key(UserName=user)["AccessKey"]
    return key


@contextlib.contextmanager
def checking_signatures(endpoint: str) -> Iterator[None]:
    """Within: the moto server at `endpoint` checks every request's signature and IAM policy (by default it
    checks none); after: none again."""

    def auth(count: str) -> None:  # moto checks only after this many requests
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=count.encode(),
                                                      headers={"Content-Type": "text/plain"}, method="POST"),
                               timeout=10).close()

    auth("0")
    try:
        yield
    finally:
        auth("inf")


def split_url(url: str) -> tuple[str, str]:
    """("bucket", "prefix") of "s3://bucket/prefix" (the prefix without a leading or trailing slash)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3:// URL: {url!r}")
    return parsed.netloc, parsed.path.strip("/")


# ---------------------------------------------------------------------------------------------- counting


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the server saw it. Bytes are HTTP body bytes (headers not counted)."""

    client: str  # the access key id that signed it ("anonymous" if unsigned)
    method: str
    path: str  # URL-decoded, path-style: /bucket/key
    query: str
    op: str  # the S3 operation, named as in the API: GetObject, UploadPart, ListObjectsV2, ...
    status: int
    range: str | None  # the Range header, as sent
    bytes_in: int
    bytes_out: int
    user_agent: str
    conditions: str | None = None  # If-Match / If-None-Match headers, as sent ("If-None-Match: *")


@dataclass(frozen=True, slots=True)
class Stats:
    """Totals over a set of requests. `gets`, `puts` and `heads` are requests on objects (a key);
    `lists` are ListObjects/ListObjectsV2/ListMultipartUploads/ListParts; `ops` counts by operation."""

    requests: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    gets: int = 0
    puts: int = 0
    heads: int = 0
    lists: int = 0
    posts: int = 0
    deletes: int = 0
    ops: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[Request]) -> Stats:
        rs = list(records)
        return cls(
            requests=len(rs),
            bytes_in=sum(r.bytes_in for r in rs),
            bytes_out=sum(r.bytes_out for r in rs),
            gets=sum(1 for r in rs if r.op == "GetObject"),
            puts=sum(1 for r in rs if r.method == "PUT" and _has_key(r.path)),
            heads=sum(1 for r in rs if r.method == "HEAD"),
            lists=sum(1 for r in rs if r.op.startswith("List")),
            posts=sum(1 for r in rs if r.method == "POST"),
            deletes=sum(1 for r in rs if r.method == "DELETE" or r.op == "DeleteObjects"),
            ops=dict(sorted(Counter(r.op for r in rs).items())),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _has_key(path: str) -> bool:
    parts = path.lstrip("/").split("/", 1)
    return len(parts) == 2 and parts[1] != ""


def s3_operation(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    """The S3 operation of a path-style request (the names AWS uses), or METHOD-bucket / METHOD-object."""
    q = urllib.parse.parse_qs(query, keep_blank_values=True)
    if path in ("", "/"):
        return "ListBuckets" if method == "GET" else f"{method}-service"
    keyed = _has_key(path)
    copy = "x-amz-copy-source" in headers
    if keyed:
        table = {
            "GET": "ListParts" if "uploadId" in q else "GetObject",
            "HEAD": "HeadObject",
            "PUT": ("UploadPartCopy" if copy else "UploadPart") if "partNumber" in q
            else ("CopyObject" if copy else "PutObject"),
            "POST": "CreateMultipartUpload" if "uploads" in q
            else "CompleteMultipartUpload" if "uploadId" in q else "POST-object",
            "DELETE": "AbortMultipartUpload" if "uploadId" in q else "DeleteObject",
        }
        return table.get(method, f"{method}-object")
    if method == "GET":
        for sub, name in (("uploads", "ListMultipartUploads"), ("location", "GetBucketLocation"),
                          ("versioning", "GetBucketVersioning"), ("versions", "ListObjectVersions")):
            if sub in q:
                return name
        if any(s in q for s in ("acl", "policy", "cors", "lifecycle", "tagging", "encryption")):
            return "GET-bucket-config"
        return "ListObjectsV2" if q.get("list-type") == ["2"] else "ListObjects"
    return {"HEAD": "HeadBucket", "PUT": "CreateBucket", "DELETE": "DeleteBucket",
            "POST": "DeleteObjects" if "delete" in q else "POST-bucket"}.get(method, f"{method}-bucket")


_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def _client_of(environ: dict[str, Any]) -> str:
    m = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if m:
        return m.group(1)
    q = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    cred = q.get("X-Amz-Credential", [""])[0]
    return cred.split("/", 1)[0] if cred else "anonymous"


class _CountingInput:
    """wsgi.input that counts what the application reads."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.count = 0

    def read(self, *args: Any) -> bytes:
        data = self._stream.read(*args)
        self.count += len(data)
        return data

    def read1(self, *args: Any) -> bytes:
        data = self._stream.read1(*args)
        self.count += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        n = self._stream.readinto(buffer)
        self.count += n or 0
        return n  # type: ignore[no-any-return]

    def readline(self, *args: Any) -> bytes:
        data = self._stream.readline(*args)
        self.count += len(data)
        return data

    def readlines(self, *args: Any) -> list[bytes]:
        lines = self._stream.readlines(*args)
        self.count += sum(len(x) for x in lines)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        for line in self._stream:
            self.count += len(line)
            yield line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class CountingMiddleware:
    """WSGI middleware: records one `Request` per request; answers GET {CONTROL}stats (JSON records) and
    POST {CONTROL}reset itself."""

    def __init__(self, app: Callable[..., Any], latency_s: float = 0.0) -> None:
        self.app = app
        self.latency_s = latency_s  # each request waits this long first: a round trip to a region, not loopback
        self._lock = threading.Condition()
        self._records: list[Request] = []
        self._in_flight = 0

    def records(self, settle_s: float = 5.0) -> list[Request]:
        """The records so far. A request is recorded when the server closes its response, which can be just
        after the client has read it: wait (up to `settle_s`) for requests in flight to be recorded."""
        with self._lock:
            self._lock.wait_for(lambda: self._in_flight == 0, timeout=settle_s)
            return list(self._records)

    def reset(self, settle_s: float = 5.0) -> None:
        with self._lock:
            self._lock.wait_for(lambda: self._in_flight == 0, timeout=settle_s)
            self._records.clear()

    def _control(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        what = environ["PATH_INFO"][len(CONTROL):]
        if what == "reset" and environ["REQUEST_METHOD"] == "POST":
            self.reset()
            body = b"{}"
        elif what == "stats":
            body = json.dumps([asdict(r) for r in self.records()]).encode()
        else:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith(CONTROL):
            return self._control(environ, start_response)
        with self._lock:
            self._in_flight += 1
        if self.latency_s:
            time.sleep(self.latency_s)  # the server is threaded: requests in flight wait side by side
        counted = _CountingInput(environ["wsgi.input"])
        environ["wsgi.input"] = counted
        status = [0]
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")  # WSGI's str
        query = environ.get("QUERY_STRING", "")
        headers = {"x-amz-copy-source": "1"} if "HTTP_X_AMZ_COPY_SOURCE" in environ else {}
        record = {
            "client": _client_of(environ), "method": method, "path": path, "query": query,
            "op": s3_operation(method, path, query, headers), "range": environ.get("HTTP_RANGE"),
            "user_agent": environ.get("HTTP_USER_AGENT", "")[:120],
            "conditions": "; ".join(f"{name}: {environ[key]}" for name, key in
                                    (("If-Match", "HTTP_IF_MATCH"), ("If-None-Match", "HTTP_IF_NONE_MATCH"))
                                    if key in environ) or None,
        }

        def counting_start_response(st: str, hdrs: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status[0] = int(st.split(None, 1)[0])
            return start_response(st, hdrs, exc_info)

        try:
            body = self.app(environ, counting_start_response)
        except BaseException:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()
            raise
        return self._count_body(body, counted, status, record)

    def _count_body(self, body: Iterable[bytes], counted: _CountingInput, status: list[int],
                    record: dict[str, Any]) -> Iterator[bytes]:
        sent = 0
        try:
            for chunk in body:
                sent += len(chunk)
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            with self._lock:
                self._records.append(Request(status=status[0], bytes_in=counted.count, bytes_out=sent, **record))
                self._in_flight -= 1
                self._lock.notify_all()


# ------------------------------------------------------------------------------------------------ server


def _quiet_handler() -> type:
    """moto's request handler without werkzeug's one-line-per-request log (errors are still logged)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    return QuietHandler


def _make_app(latency_s: float = 0.0) -> CountingMiddleware:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return CountingMiddleware(DomainDispatcherApplication(create_backend_app), latency_s)


class S3Server:
    """moto's S3 on http://127.0.0.1:<ephemeral port>, counted. A context manager; `start()`/`stop()` too."""

    def __init__(self, host: str = "127.0.0.1", region: str = DEFAULT_REGION, process: bool = False,
                 latency_s: float = 0.0) -> None:
        self.host = host
        self.region = region
        self.process = process
        self.latency_s = latency_s  # added before each request is served (a region's round trip)
        self._app: CountingMiddleware | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._port = 0
        self._client: Any = None

    # lifecycle
    def start(self) -> S3Server:
        if self.process:
            self._start_process()
        else:
            self._start_thread()
        return self

    def _start_thread(self) -> None:
        from werkzeug.serving import make_server

        self._app = _make_app(self.latency_s)
        self._server = make_server(self.host, 0, self._app, threaded=True, request_handler=_quiet_handler())
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-server", daemon=True)
        self._thread.start()

    def _start_process(self) -> None:
        env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true", "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", "--host", self.host,
             "--latency", str(self.latency_s)],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env,  # stdin: EOF when we die
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("PORT "):
            self._proc.kill()
            self._proc.wait()
            raise RuntimeError(f"the S3 server process did not start: {line!r}")
        self._port = int(line.split()[1])

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            for pipe in (self._proc.stdout, self._proc.stdin):
                if pipe is not None:
                    pipe.close()
            self._proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # addresses and environment
    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int:
        """The process serving requests: this one in thread mode, the child in process mode."""
        return self._proc.pid if self._proc is not None else os.getpid()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self._port}"

    def env(self, client: str = "prep", variable: str = "AWS_ENDPOINT_URL") -> dict[str, str]:
        """Environment for a client of this server (see `s3_env`); `client` names it in `stats_for`."""
        return s3_env(self.endpoint, client=client, region=self.region, variable=variable)

    def boto3_client(self, client: str = SUPPORT_CLIENT) -> Any:
        """A boto3 S3 client for this server, signed as `client`, explicit endpoint (no environment needed)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=self.region, aws_access_key_id=client,
            aws_secret_access_key=DUMMY_SECRET,
            config=Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=60,
                          s3={"addressing_style": "path"}),
        )

    @property
    def client(self) -> Any:
        """The helper's own boto3 client (its requests are left out of `stats`)."""
        if self._client is None:
            self._client = self.boto3_client()
        return self._client

    # counters
    def requests(self) -> list[Request]:
        """Every request counted since the last reset, in completion order."""
        if self._app is not None:
            return self._app.records()
        with urllib.request.urlopen(f"{self.endpoint}{CONTROL}stats", timeout=30) as resp:
            return [Request(**r) for r in json.loads(resp.read())]

    @property
    def stats(self) -> Stats:
        """Totals over every client except the helper's own calls."""
        return Stats.of(r for r in self.requests() if r.client != SUPPORT_CLIENT)

    def stats_for(self, client: str) -> Stats:
        return Stats.of(r for r in self.requests() if r.client == client)

    def stats_by_client(self) -> dict[str, Stats]:
        records = self.requests()
        return {c: Stats.of(r for r in records if r.client == c) for c in sorted({r.client for r in records})}

    def reset_stats(self) -> None:
        if self._app is not None:
            self._app.reset()
            return
        req = urllib.request.Request(f"{self.endpoint}{CONTROL}reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30):
            pass

    def reset(self) -> None:
        """Forget every bucket and object (moto's own reset: all of this process's moto state in thread mode)
        and the counters."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30):
            pass
        self.reset_stats()

    # buckets and objects
    def make_bucket(self, name: str) -> str:
        """Create bucket `name` (idempotent); returns "s3://name"."""
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
            self.client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def upload_tree(self, local_dir: str | Path, url: str) -> int:
        """Upload every file under `local_dir` (symlinks followed) to `url` ("s3://bucket/prefix"), keys being
        the prefix plus the relative POSIX path. Single PUTs, so object ETags are plain MD5s. Returns the count."""
        bucket, prefix = split_url(url)
        root = Path(local_dir)
        n = 0
        for path in sorted(root.rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            key = f"{prefix}/{rel}" if prefix else rel
            with path.open("rb") as fh:
                self.client.put_object(Bucket=bucket, Key=key, Body=fh)
            n += 1
        return n

    def put_bytes(self, url: str, data: bytes) -> None:
        bucket, key = split_url(url)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def put_many(self, url: str, objects: dict[str, bytes], threads: int = 8) -> int:
        """Store every {relative key: body} under `url`; returns the count. In thread mode straight into moto's
        backend (10,000 small objects: ~1 s); in process mode by PUTs, `threads` at a time (~30 s for 10,000 on
        a loaded 2-core machine). Either way they are plain objects with MD5 ETags, and not counted."""
        bucket, prefix = split_url(url)
        keyed = {(f"{prefix}/{k}" if prefix else k): v for k, v in objects.items()}
        if self._app is not None:
            from moto.core import DEFAULT_ACCOUNT_ID
            from moto.s3.models import s3_backends

            backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
            for key, body in keyed.items():
                backend.put_object(bucket, key, body)
            return len(keyed)
        from concurrent.futures import ThreadPoolExecutor

        client = self.client

        def put(item: tuple[str, bytes]) -> None:
            client.put_object(Bucket=bucket, Key=item[0], Body=item[1])

        with ThreadPoolExecutor(max_workers=threads) as pool:
            for _ in pool.map(put, keyed.items()):
                pass
        return len(keyed)

    def get_bytes(self, url: str) -> bytes:
        bucket, key = split_url(url)
        return bytes(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def list_keys(self, url: str) -> list[str]:
        return sorted(self.snapshot(url))

    def snapshot(self, url: str) -> dict[str, tuple[int, str]]:
        """{key: (size, etag)} of every object under `url`; equal snapshots mean an unchanged prefix."""
        bucket, prefix = split_url(url)
        out: dict[str, tuple[int, str]] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (int(obj["Size"]), str(obj["ETag"]).strip('"'))
        return out

    def multipart_uploads(self, bucket: str) -> list[tuple[str, str]]:
        """[(key, upload id)] of the multipart uploads in progress in `bucket` (empty after a clean run)."""
        out: list[tuple[str, str]] = []
        kwargs: dict[str, str] = {"Bucket": bucket}
        while True:
            page = self.client.list_multipart_uploads(**kwargs)
            out.extend((u["Key"], u["UploadId"]) for u in page.get("Uploads", []))
            if not page.get("IsTruncated"):
                return out
            kwargs["KeyMarker"] = page["NextKeyMarker"]
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]

    def abort_multipart_uploads(self, bucket: str) -> int:
        """Abort every upload in progress in `bucket`; returns how many."""
        uploads = self.multipart_uploads(bucket)
        for key, upload_id in uploads:
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        return len(uploads)


# --------------------------------------------------------------------------------------- broken endpoints


@contextlib.contextmanager
def refusing_endpoint(host: str = "127.0.0.1") -> Iterator[str]:
    """An http URL whose port refuses every connection. The port is bound but never listened on, so it
    stays reserved (no other process can take it) and a connect gets an immediate RST."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        sock.close()


@contextlib.contextmanager
def hanging_endpoint(host: str = "127.0.0.1") -> Iterator[str]:
    """An http URL that accepts connections, reads nothing and never answers (until the block exits)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(64)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([listener], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):
                    held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, name="s3-hanging", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


# ------------------------------------------------------------------------------------------ script mode


def _serve(host: str, latency_s: float = 0.0) -> None:
    import signal

    from werkzeug.serving import make_server

    server = make_server(host, 0, _make_app(latency_s), threaded=True, request_handler=_quiet_handler())

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    def orphaned() -> None:  # the parent holds our stdin open: EOF means it has gone, whatever killed it
        sys.stdin.read()
        stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=orphaned, daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="moto S3 on loopback with request counting")
    ap.add_argument("--serve", action="store_true", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds each request waits before it is served")
    args = ap.parse_args()
    _serve(args.host, args.latency)
