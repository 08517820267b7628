"""An S3 prefix's reads through obstore (Rust's object_store): ranged GETs, HEADs and LISTs, for the store in
`pipeline.storage.objects`, which keeps every write, the lock and server-side copies on s3fs/boto3.

Why: measured on loopback (`python bench/storage_request_cost.py`), a ranged GET costs the client ~0.6 ms of CPU
through obstore against ~3.2 ms through s3fs/aiobotocore, and a process's first request ~20 ms against ~550 ms
(importing s3fs and building its client). A scan is hundreds of small ranged GETs in 3 processes, so that CPU
was most of its time over a local scan (docs/storage.md).

obstore reads only the environment, and not as boto3 does, so it is used only where the environment alone says
everything boto3 would read (`settings`): the keys in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an anonymous
bucket), no profile, an AWS config file that is absent, empty or holds only a `region` / `output` for the default
profile, a region or an endpoint, and none of the settings only botocore knows (`BOTOCORE_ONLY`). Anywhere else
(a profile, SSO, an instance role, a proxy, AWS_CA_BUNDLE for an https endpoint) every read stays on s3fs, as
before. `PREP_S3_READER=s3fs` turns obstore off.

Where object_store's paths differ from S3 keys, s3fs answers instead: a key that object_store cannot name
(a control character, an empty, `.` or `..` segment, a trailing `/`) is read through s3fs (`usable`); a
listing that meets such a key, or an empty object (object_store lists a folder marker `a/` as a file `a`), raises
`Unusable`, and the store lists on from there through s3fs. A process forked from one
whose obstore runtime has started cannot use obstore (its runtime's threads are not in the child: a request
hangs): it reads through s3fs.
"""

from __future__ import annotations

import configparser
import io
import ipaddress
import os
import re
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Literal

SWITCH = "PREP_S3_READER"  # "s3fs": every read through s3fs
# what botocore reads and obstore does not: with any of these set, the reads stay on s3fs
BOTOCORE_ONLY = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT",
                 "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT",
                 "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                 "ALL_PROXY", "all_proxy")
HTTPS_ONLY = ("AWS_CA_BUNDLE",)  # botocore's CA bundle: it matters to an https endpoint only
CONFIG_KEYS_READ = frozenset({"region", "output"})  # what a default profile in ~/.aws/config may hold here
OPTIONS_READ = frozenset({"endpoint_url", "region", "addressing_style", "anon", "requester_pays"})
BUCKET_HOST = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")  # botocore: a virtual-hostable bucket, no dots

_RUNTIME_PID: list[int] = []  # the process whose obstore runtime started (a forked child's pid differs)
_LOCK = threading.Lock()


class Unusable(Exception):
    """A listing met a key object_store cannot name: the caller lists through s3fs."""


def usable(path: str) -> bool:
    """An S3 key object_store names as it is."""
    return (bool(path) and not path.endswith("/") and not path.startswith("/")
            and not any(ord(c) < 32 or ord(c) == 127 for c in path)
            and all(seg not in ("", ".", "..") for seg in path.split("/")))


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _config_region() -> tuple[bool, str | None]:
    """(usable, region) of the AWS config file's default profile: usable when the file is absent or empty, or
    its default profile holds only `CONFIG_KEYS_READ` and no other profile is asked for."""
    path = _env("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")
    try:
        if os.path.getsize(path) == 0:
            return True, None
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return True, None  # absent (or unreadable: botocore reads it as absent too)
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except (configparser.Error, UnicodeDecodeError):
        return False, None  # s3fs/botocore names what is wrong with it
    if not parser.has_section("default"):
        return True, None
    section = dict(parser.items("default"))
    if not set(section) <= CONFIG_KEYS_READ:
        return False, None
    return True, section.get("region") or None


def settings(scheme: str, bucket: str, options: dict[str, str], *, attempts: int, connect_s: float,
             timeout_s: float) -> dict[str, Any] | None:
    """obstore's S3Store arguments for this location and this process's environment, or None where obstore
    would not read what boto3 reads (the module docstring)."""
    if scheme != "s3" or _env(SWITCH).lower() == "s3fs" or not set(options) <= OPTIONS_READ:
        return None
    if any(_env(name) for name in BOTOCORE_ONLY):
        return None
    with _LOCK:
        if _RUNTIME_PID and _RUNTIME_PID[0] != os.getpid():
            return None  # forked after the runtime started
    anon = options.get("anon", "").lower() in ("1", "true", "yes", "on")
    key_id, secret = _env("AWS_ACCESS_KEY_ID"), _env("AWS_SECRET_ACCESS_KEY")
    if not anon and not (key_id and secret):
        return None
    config_ok, config_region = _config_region()
    if not config_ok:
        return None
    endpoint = options.get("endpoint_url") or _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL") or None
    plain_http = bool(endpoint and endpoint.lower().startswith("http://"))
    if not plain_http and any(_env(name) for name in HTTPS_ONLY):
        return None
    region = options.get("region") or _env("AWS_REGION") or _env("AWS_DEFAULT_REGION") or config_region
    if not region and not endpoint:
        return None  # boto3 finds the bucket's region by a redirect; object_store does not
    style = options.get("addressing_style", "auto").lower()
    if style == "virtual":
        virtual = True
    elif style == "path":
        virtual = False
    else:  # botocore's rule: virtual-hosted when the bucket is a plain host label and the endpoint no IP address
        virtual = bool(BUCKET_HOST.match(bucket)) and not _is_ip(endpoint)
    kw: dict[str, Any] = {
        "region": region or "us-east-1",
        "virtual_hosted_style_request": virtual,
        "client_options": {"connect_timeout": f"{connect_s:g}s", "timeout": f"{timeout_s:g}s",
                           "allow_http": plain_http},
        "retry_config": {"max_retries": max(attempts - 1, 0), "retry_timeout": timedelta(seconds=timeout_s * attempts),
                         "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5),
                                     "base": 2.0}},
    }
    if endpoint:
        kw["endpoint"] = endpoint
    if anon:
        kw["skip_signature"] = True
    else:
        kw["access_key_id"], kw["secret_access_key"] = key_id, secret
        token = _env("AWS_SESSION_TOKEN") or _env("AWS_SECURITY_TOKEN")
        if token:
            kw["session_token"] = token
    if options.get("requester_pays", "").lower() in ("1", "true", "yes", "on"):
        kw["request_payer"] = True
    return kw


def _is_ip(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def reader(scheme: str, bucket: str, options: dict[str, str], *, attempts: int, connect_s: float,
           timeout_s: float) -> Reader | None:
    """This location's obstore reader, or None (reads stay on s3fs)."""
    kw = settings(scheme, bucket, options, attempts=attempts, connect_s=connect_s, timeout_s=timeout_s)
    if kw is None:
        return None
    try:
        from obstore.store import S3Store
    except ImportError:
        return None
    with _LOCK:
        if not _RUNTIME_PID:
            _RUNTIME_PID.append(os.getpid())
    return Reader(bucket, S3Store(bucket, **kw))


def _info(bucket: str, meta: Any) -> dict[str, Any]:
    """An obstore ObjectMeta as the store keeps s3fs's answers (`Key`, `Size`, `ETag`, `LastModified`)."""
    path = meta["path"]
    return {"Key": path, "Size": meta["size"], "ETag": meta.get("e_tag") or "", "LastModified": meta["last_modified"],
            "size": meta["size"], "type": "file", "name": f"{bucket}/{path}"}


class Reader:
    """One bucket's reads through obstore. Paths are keys within the bucket; callers check `usable` first."""

    def __init__(self, bucket: str, store: Any) -> None:
        self.bucket = bucket
        self._store = store

    def __reduce__(self) -> Any:
        # obstore's S3Store pickles with its configuration, keys included: a reader never leaves its process (a
        # worker builds its own from its environment, as the store does)
        raise TypeError("an obstore reader holds credentials and is not pickled; pickle its Location instead")

    def head(self, path: str) -> dict[str, Any]:
        """The object's info (FileNotFoundError when there is none)."""
        import obstore

        return _info(self.bucket, obstore.head(self._store, path))

    def get(self, path: str, start: int, end: int, etag: str | None = None) -> bytes:
        """Bytes [start, end) in one ranged GET; `etag`: a `StorageError` if the object is no longer that one (s3fs,
        given the size as the store gives it, does not ask)."""
        import obstore

        if end <= start:
            return b""
        options: Any = {"range": (start, end)}
        if etag:
            options["if_match"] = etag
        try:
            return bytes(obstore.get(self._store, path, options=options).bytes())
        except Exception as exc:
            if type(exc).__name__ == "PreconditionError":
                from pipeline.storage.base import StorageError
                from pipeline.text import printable

                raise StorageError(f"{printable(f's3://{self.bucket}/{path}')}: the object changed while it was "
                                   f"read (its ETag is no longer {printable(str(etag))}); nothing may write a "
                                   "source while prep reads it") from None
            raise

    def list(self, prefix: str, *, offset: str | None = None, limit: int | None = None,
             empty: Literal["raise", "skip", "keep"] = "raise") -> Iterator[dict[str, Any]]:
        """Objects whose key starts with `prefix` (a folder: ends with `/`, or empty for the bucket), sorted by
        key, from after `offset`; at most `limit` (one page) or all, page by page. Raises `Unusable` on a key
        object_store cannot name. An empty object may be a folder marker `a/`, which object_store lists as a file
        `a`: `empty` says what to do with one: "raise" `Unusable` (the caller lists on through s3fs, which tells),
        "skip" it (a listing kept only as a hint) or "keep" it (any object will do)."""
        import obstore

        base = prefix.rstrip("/") or None  # object_store lists a folder path: `a/b` lists keys below `a/b/`
        kw: dict[str, Any] = {"chunk_size": min(limit or 1000, 1000)}
        if offset:
            kw["offset"] = offset
        n = 0
        try:
            for chunk in obstore.list(self._store, base, **kw):
                for meta in chunk:
                    if meta["size"] == 0 and empty != "keep":
                        if empty == "raise":
                            raise Unusable(f"an empty object ({meta['path']!r}) may be a folder marker")
                        continue
                    yield _info(self.bucket, meta)
                    n += 1
                    if limit is not None and n >= limit:
                        return
        except Unusable:
            raise
        except Exception as exc:
            if type(exc).__name__ == "InvalidPathError" or "invalid path" in str(exc):
                raise Unusable(str(exc).splitlines()[0]) from None
            raise


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over ranged GETs (`fetch(start, end) -> bytes`), cached by fsspec's own
    caches as s3fs caches its files: `blockcache` of `block`-sized blocks (at most `maxblocks`), or `none`
    (each read one GET of exactly its range). PyAV and pyarrow read it as they read s3fs's files."""

    def __init__(self, fetch: Any, size: int, *, block: int, maxblocks: int, exact: bool, name: str) -> None:
        from fsspec.caching import BaseCache, BlockCache

        super().__init__()
        self.size, self.name, self._pos = size, name, 0
        self._cache: Any = (BaseCache(block, fetch, size) if exact else
                            BlockCache(block, fetch, size, maxblocks=maxblocks))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence})")
        pos = base + offset
        if pos < 0:
            raise OSError(22, "negative seek position")
        self._pos = pos
        return pos

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        end = self.size if size is None or size < 0 else min(self._pos + size, self.size)
        if end <= self._pos:
            return b""
        data = bytes(self._cache._fetch(self._pos, end))
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)
