"""An object-store prefix as a store, through fsspec (s3fs for `s3://`; gcsfs, adlfs and huggingface_hub's
HfFileSystem for `gs://`, `az://`, `hf://` when installed; only S3 is tested, against moto on loopback).

Configuration is the environment's, read by each process for itself, as boto3 and the AWS CLI read it:
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`, `AWS_PROFILE`, `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
`AWS_SESSION_TOKEN`, `AWS_REGION`, `~/.aws/config` and `~/.aws/credentials`. A location carries only
`--storage-option` settings (`pipeline.storage.OPTION_KEYS`), never a credential.

Reads are ranged: `open(rel, block_size=HEADER_BLOCK)` fetches a container header or a parquet footer in a few
small GETs (s3fs's default 50 MiB block would fetch a whole video for it), `STREAM_BLOCK` decodes a video in
about one GET per block, `EXACT_READS` makes each read one GET of exactly its range (an mp4's header boxes).
Writes are whole objects: `writer()` hands out a local temp file (in the process's temp folder) and uploads it
on success (multipart when large; s3fs aborts the multipart upload when it fails); `create()` is a conditional
PUT (`If-None-Match: *`); `copy_in()` within one store is a server-side copy.

The lock of an output (`lock`) is an object created with `If-None-Match: *` holding the holder's command,
host, pid, start and heartbeat; a thread refreshes the heartbeat every `LEASE_S / 4` with a conditional
overwrite (`If-Match: <its ETag>`). A lock is taken over only when its holder is gone: on this host with its
pid dead, or with a heartbeat older than `LEASE_S` (its holder stopped refreshing); the takeover is itself a
conditional overwrite of the stale ETag, so of two runs taking over one wins. Release deletes the object only
if it is still ours (`If-Match`). A holder whose lock was taken over (it stalled past the lease) is told by
`ObjectLock.check()`, which the jobs call before they publish.

Every request has connect and read timeouts and a bounded number of attempts; what still fails is one
line naming the URL and what to set (`StorageError`), with any credential value scrubbed (`redact`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pipeline.storage.base import (
    EXACT_READS,
    HEADER_BLOCK,
    STREAM_BLOCK,
    Location,
    MissingFile,
    NotAFile,
    OutsideRoot,
    Stat,
    StorageError,
    Store,
    clean_rel,
    env_key,
    join_url,
)
from pipeline.text import printable

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
ATTEMPTS = 3  # per request (botocore's standard retry mode), and s3fs's own retries of transient errors
PROBE_TIMEOUT_S = 10  # check_reachable: one attempt, short timeouts, so a dead endpoint is one line at once
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECURITY_TOKEN",
              "HF_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")
LEASE_S = 120.0  # a lock whose heartbeat is older than this is its dead holder's
HOLDER_BYTES = 64 * 1024
PACKAGES = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "az": ("adlfs", "azure"), "hf": ("huggingface_hub", "")}
DIST = "lerobot-prep"


def redact(text: str) -> str:
    """`text` with the value of every credential in this process's environment replaced by `***`."""
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4 and value in text:
            text = text.replace(value, "***")
    return text


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise StorageError(f"--storage-option {key}={printable(value)}: expected true or false")


_SESSIONS: dict[tuple[int, int, str | None], Any] = {}


def _session(profile: str | None) -> Any:
    """The aiobotocore session of this process, environment and profile, shared by its S3 clients (the
    reachability probe's and the store's): botocore loads its endpoint and service models once a session, so a
    second client costs ~0.07 s instead of ~0.35 s (measured: moto on loopback, 2 cores)."""
    from aiobotocore.session import AioSession


    key = (os.getpid(), env_key(), profile)  # a forked child, a changed environment: a session of its own
    session = _SESSIONS.get(key)
    if session is None:
        if len(_SESSIONS) >= 16:
            _SESSIONS.clear()
        session = _SESSIONS[key] = AioSession(profile=profile) if profile else AioSession()
    return session


def filesystem(location: Location, *, probe: bool = False) -> Any:
    """The fsspec filesystem for `location` (`probe`: one attempt and short timeouts)."""
    opts = dict(location.options)
    scheme = location.scheme
    try:
        if scheme == "s3":
            import s3fs

            attempts = 1 if probe else ATTEMPTS
            timeout = PROBE_TIMEOUT_S if probe else READ_TIMEOUT_S
            config: dict[str, Any] = {"connect_timeout": min(CONNECT_TIMEOUT_S, timeout), "read_timeout": timeout,
                                      "retries": {"total_max_attempts": attempts, "mode": "standard"}}
            kw: dict[str, Any] = {"default_block_size": STREAM_BLOCK,
                                  "skip_instance_cache": True}  # pipeline.storage caches per environment
            client: dict[str, Any] = {}
            if "addressing_style" in opts:
                config["s3"] = {"addressing_style": opts.pop("addressing_style")}
            if "endpoint_url" in opts:
                kw["endpoint_url"] = opts.pop("endpoint_url")
            if "region" in opts:
                client["region_name"] = opts.pop("region")
            profile = opts.pop("profile", None)
            kw["session"] = _session(profile)  # shared by this process's clients
            for key in ("anon", "requester_pays"):
                if key in opts:
                    kw[key] = _bool(key, opts.pop(key))
            if client:
                kw["client_kwargs"] = client
            kw["config_kwargs"] = config
            fs = s3fs.S3FileSystem(**kw)
            # pickled (fsspec: the constructor's arguments), it builds a session of its own where it is unpickled
            fs.storage_options = {**{k: v for k, v in fs.storage_options.items() if k != "session"},
                                  **({"profile": profile} if profile else {})}
            fs.retries = attempts  # s3fs's own retries of transient errors (a class attribute)
            return fs
        import fsspec

        return fsspec.filesystem(scheme, **opts)
    except ImportError:
        package, extra = PACKAGES.get(scheme, (scheme + "fs", scheme))
        how = f"pip install '{DIST}[{extra}]'" if extra else f"pip install {package}"
        raise StorageError(f"{location.shown}: {scheme}:// needs the package {package} ({how})") from None


_UNSET: Any = object()


def _obstore_reader(location: Location, *, probe: bool = False) -> Any:
    """The location's obstore reader (pipeline.storage.obstore_reads), or None: its reads go through s3fs."""
    from pipeline.storage.obstore_reads import reader

    return reader(location.scheme, location.root.partition("/")[0], dict(location.options),
                  attempts=1 if probe else ATTEMPTS, connect_s=min(CONNECT_TIMEOUT_S, PROBE_TIMEOUT_S if probe else
                                                                   READ_TIMEOUT_S),
                  timeout_s=PROBE_TIMEOUT_S if probe else READ_TIMEOUT_S)


def _obstore_probe(location: Location, prefix: str) -> list[dict[str, Any]] | None:
    """`check_reachable` through obstore: the prefix's first page of objects (one LIST: object_store sends no
    max-keys, so the page is there anyway) when it answered. An endpoint that refuses or does not answer is one
    line here; any other failure returns None, and s3fs's probe names it (a missing bucket, a refused signature,
    as boto3 words them)."""
    probe = _obstore_reader(location, probe=True)
    if probe is None:
        return None
    t0 = time.monotonic()
    try:
        return list(probe.list(prefix, limit=1000, empty="keep"))
    except Exception as exc:
        if not _obstore_unreachable(exc):
            return None
        at = f" at {printable(location.endpoint())}" if location.endpoint() else ""
        if time.monotonic() - t0 >= PROBE_TIMEOUT_S * 0.9:
            raise StorageError(f"{printable(location.url)}: the object store{at} did not answer in time "
                               f"({PROBE_TIMEOUT_S} s); check AWS_ENDPOINT_URL and the network") from None
        raise StorageError(f"{printable(location.url)}: cannot reach the object store{at} (connection failed); "
                           "check AWS_ENDPOINT_URL (or --storage-option endpoint_url=...) and the network") from None


def _obstore_unreachable(exc: BaseException) -> bool:
    """An obstore failure to connect or to get an answer (refused, reset, timed out): its errors say so in words."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return type(exc).__module__.startswith("obstore") and ("error sending request" in text
                                                           or "timed out" in text.lower())


def _first(items: Iterator[Any]) -> Any:
    return next(iter(items), None)


def describe_error(exc: BaseException, url: str, endpoint: str | None = None) -> str | None:
    """One line for a failure to reach or use an object store, or None when `exc` is no such failure. `endpoint`:
    the one the location's requests went to (its option, else the environment's)."""
    name = type(exc).__name__
    text = redact(str(exc).splitlines()[0] if str(exc) else name)
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    at = f" at {printable(endpoint)}" if endpoint else ""
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return (f"{printable(url)}: no credentials found ({text}); set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (~/.aws/credentials), or --storage-option anon=true "
                "for a public bucket")
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ClientConnectorError",
                "ServerDisconnectedError", "ConnectionRefusedError", "ProxyConnectionError"):
        return (f"{printable(url)}: cannot reach the object store{at} ({text}); check AWS_ENDPOINT_URL (or "
                "--storage-option endpoint_url=...) and the network")
    if name in ("ReadTimeoutError", "TimeoutError", "ServerTimeoutError", "ReadTimeout"):
        return (f"{printable(url)}: the object store{at} did not answer in time ({text}); check "
                "AWS_ENDPOINT_URL and the network")
    obstore = type(exc).__module__.startswith("obstore")  # its errors say the HTTP status in words
    if _obstore_unreachable(exc):
        return (f"{printable(url)}: cannot reach the object store{at}, or it did not answer in time ({text}); "
                "check AWS_ENDPOINT_URL (or --storage-option endpoint_url=...) and the network")
    if obstore and ("403 Forbidden" in text or "401 Unauthorized" in text):
        name = "AccessDenied"
    if isinstance(exc, PermissionError) or name in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                                                    "PermissionDeniedError", "UnauthenticatedError"):
        return (f"{printable(url)}: access denied ({text}); check the credentials (AWS_ACCESS_KEY_ID / "
                "AWS_PROFILE) and the bucket's policy")
    if name in ("ProfileNotFound", "ConfigParseError", "InvalidConfigError", "ConfigNotFound"):
        return (f"{printable(url)}: the AWS configuration cannot be used ({text}); name a profile that "
                "~/.aws/config or ~/.aws/credentials holds (AWS_PROFILE or --storage-option profile=...; "
                "AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE say where those files are)")
    if name in ("NoSuchBucket",) or "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"{printable(url)}: no such bucket ({text})"
    if obstore and name != "NotFoundError":
        return f"{printable(url)}: the object store{at} failed the request ({text})"
    return None


@contextlib.contextmanager
def translated(url: str, endpoint: str | None = None) -> Iterator[None]:
    """Turn an object-store failure into one `StorageError` line (FileNotFoundError and StorageError pass)."""
    try:
        yield
    except (StorageError, FileNotFoundError, FileExistsError):
        raise
    except Exception as exc:
        line = describe_error(exc, url, endpoint)
        if line is None:
            cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)  # not `from None`
            line = describe_error(cause, url, endpoint) if cause is not None else None
        if line is None:
            raise
        raise StorageError(line) from None


INFO_CACHED = 16_384  # objects whose HEAD (or listing entry) a store remembers: one request per file read, not
# one per stat and another per open (a source is never written while it is read; a write here forgets its key)
CACHE_BYTES = 32 << 20  # what one open reader keeps of its file at most (blocks of its block size)
COPY_OBJECT_MAX = 5 << 30  # S3's largest CopyObject; above it s3fs copies in parts (UploadPartCopy)
SMALL_FILE = 256 << 10  # a file this small is fetched whole in one GET and kept (a metadata file, a parquet of a
SMALL_KEPT = 32 << 20  # few rows is read by the plan, the checks and the stage): this many bytes at most a store


class ObjectStore(Store):
    def __init__(self, location: Location) -> None:
        super().__init__(location)
        self._fs: Any = None
        self._reads: Any = _UNSET  # obstore's reader (pipeline.storage.obstore_reads), or None: reads through s3fs
        self._infos: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._infos_lock = threading.Lock()
        self._small: OrderedDict[tuple[str, str], bytes] = OrderedDict()  # (key, ETag) -> the whole file
        # what listings said is absent (`learn_folder(absent=True)`): folder key -> [(after, last)] key ranges (last
        # None: to the folder's end) holding no object then, less the keys this process has written since
        self._absent: dict[str, list[tuple[str, str | None]]] = {}
        self._written: set[str] = set()

    def _remember(self, key: str, info: dict[str, Any]) -> None:
        with self._infos_lock:
            self._infos[key] = info
            self._infos.move_to_end(key)
            while len(self._infos) > INFO_CACHED:
                self._infos.popitem(last=False)

    def _forget(self, rel: str) -> None:
        key = self.key(rel)
        with self._infos_lock:
            self._infos.pop(key, None)
            if self._absent and len(self._written) < INFO_CACHED:
                self._written.add(key)
            elif self._absent:  # too many to follow: nothing is known absent any more
                self._absent.clear()
                self._written.clear()
            for k in [k for k in self._small if k[0] == key]:
                del self._small[k]

    def _small_file(self, rel: str, info: dict[str, Any]) -> bytes:
        """A small file's bytes: one GET, then kept (LRU, `SMALL_KEPT` bytes at most) while its ETag stands."""
        key = self.key(rel)
        tag = (key, str(info.get("ETag") or info.get("etag") or info.get("size")))
        with self._infos_lock:
            data = self._small.get(tag)
            if data is not None:
                self._small.move_to_end(tag)
                return data
        size = int(info["size"])
        ob = self._ob(key)
        with translated(self._url(rel), self.location.endpoint()):  # a range: s3fs asks no HEAD for the size
            if ob is not None:
                data = ob[0].get(ob[1], 0, size)
            else:
                data = bytes(self.fs.cat_file(key, start=0, end=size)) if size else b""
        with self._infos_lock:
            self._small[tag] = data
            held = sum(len(v) for v in self._small.values())
            while held > SMALL_KEPT and len(self._small) > 1:
                held -= len(self._small.popitem(last=False)[1])
        return data

    @property
    def reads(self) -> Any:
        """This store's obstore reader where it reads what boto3 would (`obstore_reads.settings`), else None."""
        if self._reads is _UNSET:
            with self._infos_lock:
                if self._reads is _UNSET:
                    self._reads = _obstore_reader(self.location)
        return self._reads

    def _ob(self, key: str) -> tuple[Any, str] | None:
        """(obstore reader, key in its bucket) for a read obstore takes, else None (s3fs reads it)."""
        reads = self.reads
        if reads is None:
            return None
        from pipeline.storage.obstore_reads import usable

        path = key.partition("/")[2]
        return (reads, path) if usable(path) else None

    @property
    def fs(self) -> Any:
        if self._fs is None:
            with self._infos_lock:  # a scan task's units run in threads: one filesystem a store
                if self._fs is None:
                    self._fs = filesystem(self.location)
        return self._fs

    def key(self, rel: str) -> str:
        try:
            rel = clean_rel(rel)
        except ValueError:
            raise OutsideRoot(self.url, rel, f"path leaves {self.location.shown}") from None
        return f"{self.location.root}/{rel}" if rel else self.location.root

    def _url(self, rel: str) -> str:
        return join_url(self.url, rel)

    # ---- reading ---------------------------------------------------------------------------------------------

    def _info(self, rel: str, what: str) -> dict[str, Any]:
        key = self.key(rel)
        with self._infos_lock:
            known = self._infos.get(key)
        if known is not None:
            return known
        ob = self._ob(key)
        with translated(self._url(rel), self.location.endpoint()):
            try:
                info: dict[str, Any] = ob[0].head(ob[1]) if ob is not None else self.fs.info(key)
            except FileNotFoundError:
                if ob is not None and _first(ob[0].list(ob[1] + "/", limit=1, empty="keep")):  # a folder (s3fs)
                    raise NotAFile(self.url, rel, "a folder (a common prefix of objects)", what) from None
                raise MissingFile(self.url, rel, what) from None
        if info.get("type") != "file":
            raise NotAFile(self.url, rel, "a folder (a common prefix of objects)", what)
        self._remember(key, info)
        return info

    def stat(self, rel: str, what: str = "file") -> Stat:
        return _stat_of(self._info(rel, what))

    def _known_absent(self, key: str) -> bool:
        """Whether a listing of this process found no `key` (and it has not written it since): under the lock."""
        if key in self._written:
            return False
        folder, _, _name = key.rpartition("/")
        return any(after < key and (last is None or key <= last) for after, last in self._absent.get(folder, ()))

    def learn_folder(self, rel: str, *, absent: bool = False) -> None:
        """One LIST of `rel`'s folder from `rel` on (at most 1,000 objects, sorted by key: the files a plan in
        key order reads next), each remembered as `iter_files` remembers them; none when `rel` is known. With
        `absent`, what the listing does not hold is remembered too (`has_file` then answers False without a HEAD):
        for an output whose every file one unit writes (another process writing it meanwhile only costs a write
        again)."""
        try:
            key = self.key(rel)
        except OutsideRoot:
            return  # the read that follows names it
        with self._infos_lock:
            if key in self._infos or (absent and self._known_absent(key)):
                return
        if self.location.scheme != "s3" or not rel:
            return
        bucket, _, name = key.partition("/")
        folder = name.rpartition("/")[0]
        ob = None if absent else self._ob(key)
        if ob is not None:
            base = self.location.root.rstrip("/") + "/"
            try:
                for info in ob[0].list(f"{folder}/" if folder else "", offset=name[:-1], limit=1000,
                                       empty="skip"):
                    if info["name"].startswith(base):
                        self._remember(info["name"], info)
            except Exception:  # only a shortcut, as below
                pass
            return
        try:  # name[:-1] sorts just before name
            page = self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=f"{folder}/" if folder else "",
                                   Delimiter="/", StartAfter=name[:-1], MaxKeys=1000)
        except Exception:  # only a shortcut: the HEAD that follows meets (and names) the failure
            return
        base = self.location.root.rstrip("/") + "/"
        for obj in page.get("Contents", []):
            found = f"{bucket}/{obj['Key']}"
            if found.startswith(base) and not obj["Key"].endswith("/"):
                self._remember(found, {**obj, "size": obj.get("Size"), "type": "file", "name": found})
        if absent:
            names = [o["Key"] for o in page.get("Contents", [])] + [c["Prefix"] for c in page.get("CommonPrefixes", [])]
            last = f"{bucket}/{max(names)}" if page.get("IsTruncated") and names else None
            with self._infos_lock:
                if sum(len(v) for v in self._absent.values()) >= INFO_CACHED:
                    self._absent.clear()
                self._absent.setdefault(key.rpartition("/")[0], []).append((key[:-1], last))
                self._written.discard(key)

    def has_file(self, rel: str) -> bool:
        """One HEAD (s3fs's `info` lists the prefix after a 404, to tell a folder: a writer asking whether its
        output exists needs no such answer); none for a file a listing holds, or found absent
        (`learn_folder(absent=True)`)."""
        key = self.key(rel)
        with self._infos_lock:
            if key in self._infos:
                return True
            if self._absent and self._known_absent(key):
                return False
        if self.location.scheme != "s3":
            return super().has_file(rel)
        ob = self._ob(key)
        if ob is not None:
            with translated(self._url(rel), self.location.endpoint()):
                try:
                    self._remember(key, ob[0].head(ob[1]))
                except FileNotFoundError:
                    return False
            return True
        bucket, _, name = key.partition("/")
        with translated(self._url(rel), self.location.endpoint()):
            try:
                out = self.fs.call_s3("head_object", Bucket=bucket, Key=name)
            except FileNotFoundError:
                return False
        self._remember(key, {"ETag": out.get("ETag", ""), "LastModified": out.get("LastModified", ""),
                             "size": out["ContentLength"], "name": key, "type": "file"})
        return True

    def open(self, rel: str, *, block_size: int | None = None, what: str = "file") -> IO[bytes]:
        info = self._info(rel, what)
        if int(info["size"]) <= SMALL_FILE:
            return io.BytesIO(self._small_file(rel, info))
        exact = block_size == EXACT_READS  # each read one ranged GET of its bytes (the mp4 header walk: 1-3 reads)
        block = HEADER_BLOCK if exact else block_size or STREAM_BLOCK
        # A whole-file stream: blocks cached and never read twice (bench/storage_libs.py: 8 MiB blocks, at most 4
        # held, ~1 GET a block). A header read: 64 KiB blocks, cached too (measured here: a header whose moov is at
        # the end, then the first packets, costs 2 GETs, block 0 fetched once; read-ahead blocks cost 3 and
        # refetch block 0 after the seek to the moov).
        maxblocks = 4 if block >= STREAM_BLOCK else max(2, CACHE_BYTES // block)
        cache: dict[str, Any] = ({"cache_type": "none"} if exact else
                                 {"cache_type": "blockcache", "cache_options": {"maxblocks": maxblocks}})
        ob = self._ob(self.key(rel))
        if ob is not None:
            from pipeline.storage.obstore_reads import RangeFile

            reads, path = ob
            etag = str(info.get("ETag") or "") or None
            url, endpoint = self._url(rel), self.location.endpoint()

            def fetch(start: int, end: int) -> bytes:
                with translated(url, endpoint):
                    data: bytes = reads.get(path, start, end, etag)
                    return data

            return RangeFile(fetch, int(info["size"]), block=block, maxblocks=maxblocks, exact=exact,  # type: ignore[return-value]
                             name=self.key(rel))
        with translated(self._url(rel), self.location.endpoint()):
            fh: IO[bytes] = self.fs.open(self.key(rel), "rb", block_size=block, size=int(info["size"]), **cache)
        # what s3fs would HEAD for at the first read; given the size, it sends no If-Match (obstore's reads do)
        fh.details = info  # type: ignore[attr-defined]
        return fh

    def iter_files(self, prefix: str = "") -> Iterator[tuple[str, Stat]]:
        """Objects below `prefix`, streaming page by page (sorted by key, as S3 lists them; one LIST request per
        1,000 objects, no request per object)."""
        top = self.key(prefix)
        base = self.location.root.rstrip("/") + "/"
        bucket, _, key_prefix = top.partition("/")
        if key_prefix:
            key_prefix += "/"
        if self.location.scheme != "s3":
            with translated(self._url(prefix), self.location.endpoint()):
                found = self.fs.find(top, detail=True)
            for key in sorted(found):
                if found[key].get("type") == "file" and key.startswith(base):
                    yield key[len(base):], _stat_of(found[key])
            return
        token: dict[str, str] = {}
        if self.reads is not None:
            from pipeline.storage.obstore_reads import Unusable

            listing = self.reads.list(key_prefix)
            try:
                while True:
                    with translated(self._url(prefix), self.location.endpoint()):
                        info = next(listing, None)
                    if info is None:
                        return
                    if info["name"].startswith(base):
                        self._remember(info["name"], info)
                        yield info["name"][len(base):], _stat_of(info)
                    token = {"StartAfter": info["Key"]}
            except Unusable:  # a key object_store cannot name: s3fs lists the rest
                pass
        while True:
            with translated(self._url(prefix), self.location.endpoint()):
                page = self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key_prefix, **token)
            for obj in page.get("Contents", []):
                key = f"{bucket}/{obj['Key']}"
                if key.startswith(base) and not obj["Key"].endswith("/"):
                    info = {**obj, "size": obj.get("Size"), "type": "file", "name": key}
                    self._remember(key, info)  # a file read after the listing needs no HEAD
                    yield key[len(base):], _stat_of(info)
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def is_dir(self, rel: str) -> bool:
        """A prefix holding at least one object: no request where a listing of this store holds one, else one
        LIST (of one key through s3fs; of a page through obstore, which sends no max-keys)."""
        top = self.key(rel)
        below = top.rstrip("/") + "/"
        with self._infos_lock:
            if any(k.startswith(below) for k in self._infos):
                return True
        if self.location.scheme != "s3":
            with translated(self._url(rel), self.location.endpoint()):
                return bool(self.fs.isdir(top))
        bucket, _, key_prefix = top.partition("/")
        if self.reads is not None:
            from pipeline.storage.obstore_reads import Unusable

            with translated(self._url(rel), self.location.endpoint()), contextlib.suppress(Unusable):
                found = _first(self.reads.list(key_prefix + "/" if key_prefix else "", limit=1, empty="keep"))
                return found is not None
        with translated(self._url(rel), self.location.endpoint()):
            page = self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key_prefix + "/" if key_prefix else "",
                                   MaxKeys=1)
        return bool(page.get("Contents"))

    @contextlib.contextmanager
    def local_copy(self, rel: str, what: str = "file") -> Iterator[Path]:
        size = int(self._info(rel, what)["size"] or 0)
        fd, name = tempfile.mkstemp(prefix="prep-download-", suffix=os.path.splitext(rel)[1])
        os.close(fd)
        try:
            with translated(self._url(rel), self.location.endpoint()):
                # one streamed GET: above its chunk size s3fs's get_file opens a GET of the whole object, drops it
                # and fetches the chunks anew (measured on moto: a 14.7 MB file cost 29.4 MB in 3 GETs)
                self.fs.get_file(self.key(rel), name, chunksize=max(size, STREAM_BLOCK))
            yield Path(name)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    # ---- writing ---------------------------------------------------------------------------------------------

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._forget(rel)
        with translated(self._url(rel), self.location.endpoint()):
            self.fs.pipe_file(self.key(rel), data)

    @contextlib.contextmanager
    def writer(self, rel: str) -> Iterator[Path]:
        self._forget(rel)
        fd, name = tempfile.mkstemp(prefix="prep-upload-", suffix=os.path.splitext(rel)[1])
        os.close(fd)
        try:
            yield Path(name)
            with translated(self._url(rel), self.location.endpoint()):
                self.fs.put_file(name, self.key(rel))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    def create(self, rel: str, data: bytes) -> bool:
        self._forget(rel)
        with translated(self._url(rel), self.location.endpoint()):
            try:
                self.fs.pipe_file(self.key(rel), data, mode="create")
            except FileExistsError:
                return False
        return True

    def copy_in(self, src: Store, src_rel: str, rel: str) -> None:
        self._forget(rel)
        with translated(self._url(rel), self.location.endpoint()):
            if isinstance(src, ObjectStore) and src.location.same_store(self.location):
                size = src.stat(src_rel).size
                if self.location.scheme == "s3" and size < COPY_OBJECT_MAX:  # one CopyObject: no HEAD of the source
                    bucket, _, name = self.key(rel).partition("/")
                    src_bucket, _, src_name = src.key(src_rel).partition("/")
                    self.fs.call_s3("copy_object", Bucket=bucket, Key=name,
                                    CopySource={"Bucket": src_bucket, "Key": src_name})
                    return
                # server-side (copy_object, or upload_part_copy above 5 GB); cp_file, not copy: no LIST
                self.fs.cp_file(src.key(src_rel), self.key(rel))
                return
            from pipeline.storage.local import LocalStore

            if isinstance(src, LocalStore):
                src.stat(src_rel)
                self.fs.put_file(str(src.path_of(src_rel)), self.key(rel))
                return
            with src.open(src_rel) as fin:
                fout = self.fs.open(self.key(rel), "wb", block_size=STREAM_BLOCK)
                try:
                    shutil.copyfileobj(fin, fout, STREAM_BLOCK)
                except BaseException:
                    # s3fs commits a writer closed by `with` even on an exception (a truncated object): discard
                    fout.discard()
                    fout.closed = True
                    raise
                fout.close()

    def remove(self, rel: str) -> None:
        self._forget(rel)
        with translated(self._url(rel), self.location.endpoint()), contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.key(rel))

    @contextlib.contextmanager
    def lock(self, rel: str, what: str, *, command: str | None = None,
             lease_s: float = LEASE_S) -> Iterator[str]:
        held = ObjectLock(self, rel, what, command=command, lease_s=lease_s)
        held.acquire()
        try:
            yield self._url(rel)
        finally:
            held.release()

    def refuse_if_held(self, rel: str, what: str) -> None:
        holder, _etag = ObjectLock(self, rel, what).read()
        if holder is not None and not ObjectLock.gone(holder):
            from pipeline.lock import LockedError, describe

            raise LockedError(describe(holder, self._url(rel), what))

    def check_reachable(self) -> None:
        """One short request (list at most one object of the prefix): credentials, endpoint and bucket now."""
        bucket, _, prefix = self.location.root.partition("/")
        page = _obstore_probe(self.location, prefix) if self.reads is not None else None
        if page is not None:
            base = self.location.root.rstrip("/") + "/"
            for info in page:  # the files a plan reads first (meta/): no HEAD for them
                if info["size"] and info["name"].startswith(base):
                    self._remember(info["name"], info)
            return
        fs = filesystem(self.location, probe=True)
        try:
            with translated(self.url, self.location.endpoint()):
                if self.location.scheme == "s3":
                    fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
                else:
                    fs.ls(self.location.root, detail=False)
        except FileNotFoundError:  # s3fs's NoSuchBucket (a missing prefix lists empty: no error)
            at = printable(self.location.endpoint() or "the default endpoint")
            raise StorageError(f"{printable(self.url)}: bucket {printable(bucket)!r} not found at {at} (check the "
                               "URL, or set AWS_ENDPOINT_URL / AWS_PROFILE for the store that holds it)") from None

    def abort_uploads(self) -> int:
        """Abort the incomplete multipart uploads below this prefix (a killed run's); returns how many."""
        if self.location.scheme != "s3":
            return 0
        bucket, _, prefix = self.location.root.partition("/")
        prefix = f"{prefix.rstrip('/')}/" if prefix else ""  # this output's keys: never a sibling's (out/a vs out/ab)
        n = 0
        with translated(self.url, self.location.endpoint()):
            marker: dict[str, str] = {}
            while True:
                page = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **marker)
                for up in page.get("Uploads", []):
                    self.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
                    n += 1
                if not page.get("IsTruncated"):
                    return n
                marker = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}


def _stat_of(info: dict[str, Any]) -> Stat:
    modified: Any = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
    mtime_ns = int(modified.timestamp() * 1e9) if hasattr(modified, "timestamp") else 0
    version = str(info.get("ETag") or info.get("etag") or info.get("VersionId") or f"{info.get('size')}:{mtime_ns}")
    return Stat(int(info.get("size") or 0), mtime_ns, version.strip('"'))


class LockLost(StorageError):
    """This run's lock was taken over (it stopped refreshing it for longer than the lease): it must not publish."""


class ObjectLock:
    """One output's lock object (see the module docstring)."""

    def __init__(self, store: ObjectStore, rel: str, what: str, *, command: str | None = None,
                 lease_s: float = LEASE_S) -> None:
        self.store, self.rel, self.what, self.lease_s = store, rel, what, lease_s
        self.record: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(),
                                       "started_utc": _utc_now(), "lease_s": lease_s}
        if command:
            self.record["command"] = command
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def gone(holder: dict[str, Any]) -> bool:
        """The holder is provably gone: on this host with its pid dead, or silent for longer than its lease."""
        from pipeline.lock import is_stale

        if is_stale(holder):
            return True
        beat, lease = holder.get("heartbeat_unix"), holder.get("lease_s", LEASE_S)
        return isinstance(beat, (int, float)) and isinstance(lease, (int, float)) and time.time() - beat > lease

    def _call(self, op: str, **kw: Any) -> dict[str, Any]:
        self.store._forget(self.rel)  # the lock object changes: its remembered stat is stale
        bucket, _, key = self.store.key(self.rel).partition("/")
        result: dict[str, Any] = self.store.fs.call_s3(op, Bucket=bucket, Key=key, **kw)
        return result

    def _body(self) -> bytes:
        return (json.dumps({**self.record, "heartbeat_unix": time.time()}) + "\n").encode()

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        """The current holder and an ETag no newer than it (None, None: no lock). The ETag is read first: a
        takeover conditional on it succeeds only if the object is still the one judged gone (or older)."""
        key = self.store.key(self.rel)
        with translated(self.store._url(self.rel), self.store.location.endpoint()):
            try:
                etag = str(self.store.fs.info(key, refresh=True).get("ETag"))
                data = self.store.fs.cat_file(key, start=0, end=HOLDER_BYTES)
            except FileNotFoundError:
                return None, None
        try:
            holder = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            holder = {}
        return (holder if isinstance(holder, dict) else {}), etag

    def _put(self, **condition: str) -> bool:
        with translated(self.store._url(self.rel), self.store.location.endpoint()):
            try:
                out = self._call("put_object", Body=self._body(), **condition)
            except OSError as exc:
                if _precondition_failed(exc):
                    return False
                raise
        self.etag = str(out.get("ETag"))
        return True

    def acquire(self) -> None:
        from pipeline.lock import LockedError, describe

        if not self._put(IfNoneMatch="*"):
            holder, etag = self.read()
            if holder is None:  # released meanwhile
                if not self._put(IfNoneMatch="*"):
                    raise LockedError(describe({}, self.store._url(self.rel), self.what))
            elif not self.gone(holder) or etag is None or not self._put(IfMatch=etag):
                raise LockedError(describe(holder, Path(self.store._url(self.rel)), self.what))
        self._thread = threading.Thread(target=self._beat, name="prep-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            try:
                if not self._put(IfMatch=self.etag or "*"):
                    self.lost = True
                    return
            except Exception:  # a passing network fault: the next beat tries again, the lease allows it
                continue

    def check(self) -> None:
        if self.lost:
            raise LockLost(f"{self.store._url(self.rel)}: this run's lock was taken over by another run (this run "
                           "stopped refreshing it for longer than its lease); nothing more is published")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.etag is not None and not self.lost:
            with translated(self.store._url(self.rel), self.store.location.endpoint()):
                try:
                    self._call("delete_object", IfMatch=self.etag)
                except OSError as exc:  # gone already, or no longer ours: not ours to delete
                    if not (isinstance(exc, FileNotFoundError) or _precondition_failed(exc)):
                        raise


def _precondition_failed(exc: BaseException) -> bool:
    """A conditional request refused (412): s3fs raises FileExistsError for If-None-Match, an EINVAL OSError
    caused by the ClientError for If-Match."""
    if isinstance(exc, FileExistsError):
        return True
    cause = getattr(exc, "__cause__", None)
    response = getattr(cause, "response", None) or {}
    return response.get("Error", {}).get("Code") in ("PreconditionFailed", "412")


def _utc_now() -> str:
    from pipeline.clock import utc_now

    return utc_now()
