"""Confirm or overturn, one line of evidence each, the facts measured beforehand about S3 on loopback
(shared/docs/storage-and-slurm-notes.md, "S3 on loopback (moto)"; issue 34). Every client runs against
tests/support/s3.py's counted moto server on 127.0.0.1; nothing here reaches a real endpoint (the environment
of this process and of every child names the loopback endpoint, and AWS_EC2_METADATA_DISABLED=true).

    python bench/storage_facts.py [--pip] [--out bench/results/storage_facts.json]

--pip also resolves `pip install --dry-run s3fs boto3 moto` (unpinned, then with s3fs>=2025) in a scratch venv
made from this interpreter (the package index is contacted; nothing is installed anywhere).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from masking import masked

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402

MiB = 1024 * 1024
BUCKET = "facts"
FACTS: list[dict[str, Any]] = []


def fact(fid: str, claim: str, verdict: str, evidence: str, **data: Any) -> None:
    """verdict: confirmed | overturned | partly | new (a fact the notes did not state)."""
    FACTS.append({"id": fid, "claim": claim, "verdict": verdict, "evidence": evidence, **data})
    print(f"[{verdict:>10}] {fid}: {evidence}", flush=True)


def error_of(fn: Callable[[], Any]) -> str | None:
    """None if fn() succeeds, else 'ErrorType: first line' (with the S3 error code for a ClientError)."""
    try:
        fn()
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return f"{type(exc).__name__}{f' [{code}]' if code else ''}: {first}"
    return None


def ops(server: S3Server, client: str) -> dict[str, int]:
    return server.stats_for(client).ops


# --------------------------------------------------------------------------------------------- server


def check_server() -> None:
    from moto.server import ThreadedMotoServer

    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    srv.stop()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line, deadline = "", time.monotonic() + 20
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "Running on" in line or not line:
            break
    proc.terminate()
    proc.wait(timeout=10)
    printed = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    ok = port > 0 and printed is not None and printed.group(1) != "0"
    fact("server", "ThreadedMotoServer(ip_address='127.0.0.1', port=0) + get_host_and_port(); moto_server -p 0 prints "
         "its port", "confirmed" if ok else "partly",
         f"ThreadedMotoServer gave {host}:{port}; moto_server -p 0 printed {line.strip()!r}. tests/support/s3.py "
         "runs the same WSGI app (DomainDispatcherApplication) under werkzeug's make_server(port=0) behind a "
         "counting middleware")


# ---------------------------------------------------------------------------------------- environment

ENV_PROBE = r'''
import json, os, sys
which = sys.argv[1]
out = {}
try:
    if which == "boto3":
        import boto3; out["len"] = len(boto3.client("s3").get_object(Bucket="facts", Key="env.bin")["Body"].read())
    elif which == "s3fs":
        import s3fs; out["len"] = len(s3fs.S3FileSystem(skip_instance_cache=True).cat_file("facts/env.bin"))
    elif which == "pyarrow from_uri":
        from pyarrow import fs
        f, p = fs.FileSystem.from_uri("s3://facts/env.bin")
        opts = f.__reduce__()[1][0]
        out["endpoint_override"] = opts["endpoint_override"]; out["scheme"] = opts["scheme"]
        out["len"] = len(f.open_input_file(p).read())
    elif which == "pyarrow S3FileSystem()":
        from pyarrow import fs
        opts = fs.S3FileSystem().__reduce__()[1][0]  # no request: where would it go?
        out["endpoint_override"] = opts["endpoint_override"]; out["scheme"] = opts["scheme"]
    elif which == "obstore":
        import obstore
        from obstore.store import S3Store
        out["len"] = len(bytes(obstore.get(S3Store("facts"), "env.bin").bytes()))
except Exception as exc:
    text = str(exc)
    out["error"] = type(exc).__name__ + ": " + text.strip().splitlines()[0][:200]
    out["bad_scheme"] = "BadScheme" in text
    out["builder_error"] = "builder error" in text
print(json.dumps(out))
'''


def check_env(server: S3Server) -> None:
    server.put_bytes(f"s3://{BUCKET}/env.bin", b"e" * 1000)
    rows = []
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        for allow in (False, True):
            for which in ("boto3", "s3fs", "pyarrow from_uri", "pyarrow S3FileSystem()", "obstore"):
                env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
                tag = "env-" + re.sub(r"\W+", "", which)
                env.update(server.env(client=tag, variable=variable))
                if allow:
                    env["AWS_ALLOW_HTTP"] = "true"
                server.reset_stats()
                r = subprocess.run([sys.executable, "-c", ENV_PROBE, which], env=env, capture_output=True,
                                   text=True, timeout=120, check=False)
                out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {"error": r.stderr[-300:]}
                out.update(client=which, variable=variable, aws_allow_http=allow,
                           requests_seen=server.stats_for(tag).requests)
                rows.append(out)

    def row(which: str, variable: str = "AWS_ENDPOINT_URL", allow: bool = False) -> dict[str, Any]:
        return next(r for r in rows if r["client"] == which and r["variable"] == variable
                    and r["aws_allow_http"] == allow)

    def works(r: dict[str, Any]) -> bool:
        return r.get("len") == 1000 and r["requests_seen"] > 0

    for which in ("boto3", "s3fs", "pyarrow from_uri"):
        both = all(works(row(which, v, a)) for v in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3") for a in (False, True))
        fact(f"env.{which}", f"{which} honours AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3",
             "confirmed" if both else "overturned",
             f"{which}: read the 1000-byte object through the loopback endpoint with either variable "
             f"({row(which)['requests_seen']} request(s) seen)" + (
                 f"; from_uri's endpoint_override={row(which)['endpoint_override']!r}, "
                 f"scheme={row(which)['scheme']!r}" if which.startswith("pyarrow") else ""),
             rows=[row(which, v) for v in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")])
    ctor = row("pyarrow S3FileSystem()")
    ctor_s3 = row("pyarrow S3FileSystem()", "AWS_ENDPOINT_URL_S3")
    ignored = not ctor.get("endpoint_override") and not ctor_s3.get("endpoint_override")
    fact("env.pyarrow_ctor", "pyarrow S3FileSystem() ignores the endpoint variables (would go to AWS)",
         "confirmed" if ignored else "overturned",
         f"S3FileSystem() built with AWS_ENDPOINT_URL set has endpoint_override={ctor.get('endpoint_override')!r}, "
         f"scheme={ctor.get('scheme')!r} (the AWS default; read from its pickled options, no request sent): "
         "pass endpoint_override/scheme yourself or use from_uri", rows=[ctor, ctor_s3])
    no_allow, allow = row("obstore"), row("obstore", allow=True)
    no_allow_s3, allow_s3 = row("obstore", "AWS_ENDPOINT_URL_S3"), row("obstore", "AWS_ENDPOINT_URL_S3", True)
    ok = (not works(no_allow) and not works(no_allow_s3) and works(allow) and works(allow_s3))
    fact("env.obstore", "obstore 0.12 honours the endpoint variables only with AWS_ALLOW_HTTP=true for http; "
         "otherwise 'BadScheme'", "confirmed" if ok and no_allow.get("bad_scheme") else "overturned",
         f"without AWS_ALLOW_HTTP: {no_allow.get('error')!r}, its debug text names BadScheme: "
         f"{no_allow.get('bad_scheme')}, {no_allow['requests_seen']} requests reach the server; with it: read "
         f"{allow.get('len')} bytes ({allow['requests_seen']} request, no HEAD), with either variable",
         rows=[no_allow, allow, no_allow_s3, allow_s3])


# -------------------------------------------------------------------------------------- reads (PyAV)


def check_obstore_pyav(server: S3Server, sample: bytes) -> None:
    import av
    import obstore
    from obstore.store import S3Store

    sys.path.insert(0, str(REPO / "bench"))
    from storage_libs import ObstoreFile

    server.put_bytes(f"s3://{BUCKET}/episode.mp4", sample)
    store = S3Store(BUCKET, client_options={"allow_http": True})

    def raw() -> None:
        with av.open(obstore.open_reader(store, "episode.mp4")) as c:
            _ = c.streams.video[0].frames

    err = error_of(raw)

    def wrapped() -> int:
        with ObstoreFile(obstore.open_reader(store, "episode.mp4")) as fh, av.open(fh) as c:
            return int(c.streams.video[0].frames)

    frames = wrapped()
    fact("obstore.pyav", "obstore's reader returns obstore.Bytes, PyAV needs bytes: a small wrapper fixes it",
         "confirmed" if err and frames else "overturned",
         f"av.open(obstore.open_reader(...)) -> {err!r}; through bench/storage_libs.py's ObstoreFile (read -> bytes, "
         f"readinto; ~30 lines) stream.frames = {frames}")


def check_scan_reads_every_packet(server: S3Server, sample: bytes) -> None:
    import av
    import s3fs

    server.put_bytes(f"s3://{BUCKET}/episode.mp4", sample)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    server.reset_stats()
    with fs.open(f"{BUCKET}/episode.mp4", "rb", block_size=64 * 1024) as fh, av.open(fh) as c:
        n = sum(1 for _ in c.demux(c.streams.video[0]))
    demux_bytes = server.stats.bytes_out
    server.reset_stats()
    with fs.open(f"{BUCKET}/episode.mp4", "rb", block_size=64 * 1024) as fh, av.open(fh) as c:
        entries = len(c.streams.video[0].index_entries)
    index_bytes = server.stats.bytes_out
    src = (REPO / "pipeline/video/probe.py").read_text()
    demuxes = "container.demux(stream)" in src
    fact("scan.demux", "today's scan demuxes every packet (video/probe.py), so it reads 100% of the video bytes",
         "confirmed" if demuxes and demux_bytes >= len(sample) * 0.99 else "overturned",
         f"probe.py calls container.demux(stream): {demuxes}. Demuxing the {len(sample):,}-byte episode through s3fs "
         f"(64 KiB blocks) read {demux_bytes:,} bytes ({demux_bytes / len(sample):.0%}, {n} packets); the mp4 "
         f"sample index (stream.index_entries, {entries} entries) read {index_bytes:,} bytes "
         f"({index_bytes / len(sample):.1%})")


def check_open_without_head(server: S3Server, sample: bytes) -> None:
    import av
    import obstore
    import s3fs
    from obstore.store import S3Store
    from pyarrow import fs as pafs

    sys.path.insert(0, str(REPO / "bench"))
    from storage_libs import ObstoreFile

    server.put_bytes(f"s3://{BUCKET}/episode.mp4", sample)
    server.put_bytes(f"s3://{BUCKET}/ds/videos/episode.mp4", sample)
    n = len(sample)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    store = S3Store(BUCKET, client_options={"allow_http": True})
    pfs = pafs.FileSystem.from_uri(f"s3://{BUCKET}/")[0]
    pa_info = error_of(lambda: pfs.open_input_file(pfs.get_file_info(f"{BUCKET}/episode.mp4")))
    opens: dict[str, Callable[[bool], Any]] = {
        "s3fs": lambda known: fs.open(f"{BUCKET}/episode.mp4", "rb", block_size=64 * 1024,
                                      **({"size": n} if known else {})),
        "obstore": lambda known: ObstoreFile(obstore.open_reader(store, "episode.mp4", buffer_size=64 * 1024,
                                                                 **({"size": n} if known else {}))),
        "pyarrow": lambda known: pfs.open_input_file(f"{BUCKET}/episode.mp4"),
    }
    rows = {}

    def read_index(label: str, open_: Callable[[], Any], listed: bool = False) -> None:
        fs.invalidate_cache()
        if listed:
            fs.find(BUCKET, detail=True)  # fills s3fs's listing cache (sizes and ETags)
        server.reset_stats()
        with open_() as fh, av.open(fh) as c:
            _ = len(c.streams.video[0].index_entries)
        st = server.stats
        rows[label] = {"heads": st.heads, "gets": st.gets, "gets_with_if_match": sum(
            1 for r in server.requests() if r.op == "GetObject" and (r.conditions or "").startswith("If-Match"))}

    for name, open_ in opens.items():
        for known in ((False,) if name == "pyarrow" else (False, True)):
            read_index(f"{name} {'size=' if known else 'no size'}", lambda o=open_, k=known: o(k))
    read_index("s3fs after fs.find(detail=True), a file under a prefix",
               lambda: fs.open(f"{BUCKET}/ds/videos/episode.mp4", "rb", block_size=64 * 1024), listed=True)
    read_index("s3fs after fs.find(detail=True), a file at the bucket's root", lambda: opens["s3fs"](False),
               listed=True)
    ok = (rows["obstore size="]["heads"] == 0
          and rows["s3fs after fs.find(detail=True), a file under a prefix"]["heads"] == 0)
    fact("read.no_head", "every client HEADs an object before reading it; which can be told what the listing knows",
         "new" if ok else "partly",
         "; ".join(f"{k}: {v['heads']} HEAD + {v['gets']} GET ({v['gets_with_if_match']} with If-Match)"
                   for k, v in rows.items())
         + ". s3fs HEADs even with size= (its first read asks for the file's details, for an ETag check); "
         "after a listing it answers from its cache (not for files at the bucket's root, which find() does not "
         "cache) and sends each GET with If-Match: <ETag>. obstore skips the "
         f"HEAD with open_reader(size=). pyarrow's Python open_input_file takes only a str (a FileInfo: "
         f"{pa_info!r}), so it HEADs every file", rows=rows)


PICKLE_PROBE = r'''
import pickle, sys, json
from support.s3 import DUMMY_SECRET
out = {}
def probe(name, make):
    try:
        blob = pickle.dumps(make())
        out[name] = {"bytes": len(blob), "secret_inside": DUMMY_SECRET.encode() in blob}
    except Exception as exc:
        out[name] = {"error": type(exc).__name__ + ": " + str(exc)[:120]}
import os, s3fs
from pyarrow import fs as pafs
from obstore.store import S3Store
probe("s3fs from the environment", lambda: s3fs.S3FileSystem(skip_instance_cache=True))
probe("s3fs key=/secret= passed", lambda: s3fs.S3FileSystem(
    skip_instance_cache=True, key=os.environ["AWS_ACCESS_KEY_ID"], secret=os.environ["AWS_SECRET_ACCESS_KEY"]))
probe("s3fs open file", lambda: s3fs.S3FileSystem(skip_instance_cache=True).open("facts/env.bin", "rb"))
probe("pyarrow from_uri", lambda: pafs.FileSystem.from_uri("s3://facts/")[0])
probe("obstore S3Store from the environment", lambda: S3Store("facts"))
print(json.dumps(out))
'''


def check_pickled_secrets(server: S3Server) -> None:
    server.put_bytes(f"s3://{BUCKET}/env.bin", b"e" * 1000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env(client="pickle"), AWS_ALLOW_HTTP="true", PYTHONPATH=str(REPO / "tests"))
    r = subprocess.run([sys.executable, "-c", PICKLE_PROBE], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {"error": r.stderr[-300:]}
    fact("config.pickle", "what a Dask task carries when it holds a client object (secrets must not travel)", "new",
         "; ".join(f"{k}: " + (f"secret inside the pickle: {v['secret_inside']}" if "secret_inside" in v
                               else v.get("error", "?")) for k, v in out.items())
         + ". Workers should build their client from their own environment; never pass key=/secret=", rows=out)


# ------------------------------------------------------------------------------------------- writes


def check_conditional_create(server: S3Server) -> None:
    import obstore
    import s3fs
    from obstore.store import S3Store

    c = server.boto3_client("cond")
    c.put_object(Bucket=BUCKET, Key="lock", Body=b"first")
    second = error_of(lambda: c.put_object(Bucket=BUCKET, Key="lock", Body=b"second", IfNoneMatch="*"))
    fresh = error_of(lambda: c.put_object(Bucket=BUCKET, Key="lock-new", Body=b"x", IfNoneMatch="*"))

    def multipart(key: str) -> None:
        up = c.create_multipart_upload(Bucket=BUCKET, Key=key)
        part = c.upload_part(Bucket=BUCKET, Key=key, UploadId=up["UploadId"], PartNumber=1, Body=b"p" * 1024)
        try:
            c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up["UploadId"], IfNoneMatch="*",
                                        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
        finally:
            multipart.left = [u for u in server.multipart_uploads(BUCKET) if u[0] == key]  # type: ignore[attr-defined]
            for k, uid in multipart.left:  # type: ignore[attr-defined]
                c.abort_multipart_upload(Bucket=BUCKET, Key=k, UploadId=uid)

    mp_existing = error_of(lambda: multipart("lock"))
    left_after_412 = len(multipart.left)  # type: ignore[attr-defined]
    mp_fresh = error_of(lambda: multipart("mp-new"))
    body = server.get_bytes(f"s3://{BUCKET}/lock")
    ok = bool(second and "PreconditionFailed" in second and fresh is None and mp_existing
              and "PreconditionFailed" in mp_existing and mp_fresh is None and body == b"first")
    fact("write.if_none_match", "put_object(IfNoneMatch='*') a second time -> 412 PreconditionFailed, also on "
         "multipart completion", "confirmed" if ok else "overturned",
         f"second put: {second!r}; first put of a new key: {fresh!r}; CompleteMultipartUpload onto the existing key: "
         f"{mp_existing!r} (the upload stays in progress after the 412: {left_after_412} left, must be aborted); "
         f"onto a new key: {mp_fresh!r}; the object still holds {body!r}")

    fs = s3fs.S3FileSystem(skip_instance_cache=True)

    def s3fs_x(data: bytes, block: int | None = None) -> None:
        kw = {"block_size": block} if block else {}
        with fs.open(f"{BUCKET}/lock", "xb", **kw) as fh:
            fh.write(data)

    small = error_of(lambda: s3fs_x(b"small"))
    server.abort_multipart_uploads(BUCKET)
    server.reset_stats()
    big = error_of(lambda: s3fs_x(b"b" * (12 * MiB), block=5 * MiB))
    big_ops = server.stats.ops
    leftovers = server.multipart_uploads(BUCKET)
    server.abort_multipart_uploads(BUCKET)
    pipe = error_of(lambda: fs.pipe_file(f"{BUCKET}/lock", b"pipe", mode="create"))
    store = S3Store(BUCKET, client_options={"allow_http": True})
    ob = error_of(lambda: obstore.put(store, "lock", b"obstore", mode="create"))
    server.reset_stats()
    ob_big_new = error_of(lambda: obstore.put(store, "ob-big", b"o" * (12 * MiB), mode="create"))
    ob_big_ops = server.stats.ops
    ok = bool(small and "FileExistsError" in small and big and "FileExistsError" in big and pipe
              and "FileExistsError" in pipe and ob and "AlreadyExists" in ob)
    fact("write.create_mode", "s3fs open(..., 'xb') / mode='create' -> FileExistsError; obstore put(mode='create') "
         "-> AlreadyExistsError", "confirmed" if ok else "overturned",
         f"s3fs 'xb' single PUT: {small!r}; s3fs pipe_file(mode='create'): {pipe!r}; obstore: {ob!r}; s3fs 'xb' of "
         f"12 MiB in 5 MiB parts: {big!r} (ops {big_ops}); obstore mode='create' of 12 MiB on a new key: "
         f"{ob_big_new!r} with ops {ob_big_ops} (obstore's create mode is always one PUT)")
    fact("write.create_mode_leftover", "s3fs 'xb' multipart: 'if this fails, the MPU is aborted' (its docstring)",
         "overturned" if leftovers else "confirmed",
         f"after the 412 on CompleteMultipartUpload, uploads in progress: {[k for k, _ in leftovers]} "
         "(S3File.commit has no abort on that path): the caller must abort (list_multipart_uploads + "
         "abort_multipart_upload, or s3fs's clear_multipart_uploads)")


def check_if_match(server: S3Server) -> None:
    import obstore
    from obstore.store import S3Store

    c = server.boto3_client("ifmatch")
    etag = c.put_object(Bucket=BUCKET, Key="hb", Body=b"v1")["ETag"]
    wrong = error_of(lambda: c.put_object(Bucket=BUCKET, Key="hb", Body=b"v2-wrong", IfMatch='"0000"'))
    after_wrong = server.get_bytes(f"s3://{BUCKET}/hb")
    right = error_of(lambda: c.put_object(Bucket=BUCKET, Key="hb", Body=b"v2", IfMatch=etag))
    after_right = server.get_bytes(f"s3://{BUCKET}/hb")
    missing = error_of(lambda: c.put_object(Bucket=BUCKET, Key="hb-missing", Body=b"x", IfMatch=etag))
    honoured = bool(wrong and "PreconditionFailed" in wrong and after_wrong == b"v1" and right is None
                    and after_right == b"v2")
    fact("write.if_match", "put_object(IfMatch=<etag>) replaces only the version named (lock takeover/heartbeat)",
         "new" if honoured else "overturned",
         f"moto: wrong ETag -> {wrong!r}, object then {after_wrong!r}; right ETag -> {right!r}, object then "
         f"{after_right!r}; IfMatch on a missing key -> {missing!r}")

    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    cur = fs.call_s3("put_object", Bucket=BUCKET, Key="hb", Body=b"s3fs-v1")["ETag"]
    fs_wrong = error_of(lambda: fs.call_s3("put_object", Bucket=BUCKET, Key="hb", Body=b"x", IfMatch='"0000"'))
    fs_right = error_of(lambda: fs.call_s3("put_object", Bucket=BUCKET, Key="hb", Body=b"s3fs-v2", IfMatch=cur))
    fact("write.if_match_s3fs", "s3fs has no If-Match mode; its call_s3 passes IfMatch through",
         "new" if fs_wrong and fs_right is None else "overturned",
         f"fs.call_s3('put_object', IfMatch=<wrong>) -> {fs_wrong!r} (s3fs turns the 412 into a bare OSError "
         f"EINVAL, told apart from other errors only by its text); right ETag -> {fs_right!r}. A lock needs the "
         "status code: boto3 (botocore, the same configuration chain as s3fs) gives ClientError "
         "Code=PreconditionFailed")

    store = S3Store(BUCKET, client_options={"allow_http": True})
    cur = obstore.head(store, "hb")["e_tag"]
    ob_wrong = error_of(lambda: obstore.put(store, "hb", b"v3-wrong", mode={"e_tag": '"0000"'}))
    ob_right = error_of(lambda: obstore.put(store, "hb", b"v3", mode={"e_tag": cur}))
    fact("write.if_match_obstore", "obstore put(mode={'e_tag': ...}) is a conditional overwrite",
         "new" if ob_wrong and ob_right is None else "overturned",
         f"obstore, wrong e_tag: {ob_wrong!r}; current e_tag: {ob_right!r}; object now "
         f"{server.get_bytes(f's3://{BUCKET}/hb')!r}")

    etag = c.put_object(Bucket=BUCKET, Key="del", Body=b"d")["ETag"]
    del_wrong = error_of(lambda: c.delete_object(Bucket=BUCKET, Key="del", IfMatch='"0000"'))
    still = "del" in [k.rsplit("/", 1)[-1] for k in server.snapshot(f"s3://{BUCKET}/del")]
    del_right = error_of(lambda: c.delete_object(Bucket=BUCKET, Key="del", IfMatch=etag))
    gone = not server.snapshot(f"s3://{BUCKET}/del")
    fact("write.conditional_delete", "delete_object(IfMatch=<etag>) deletes only the version named",
         "new" if del_wrong and still and del_right is None and gone else "overturned",
         f"moto: wrong ETag -> {del_wrong!r} (object kept: {still}); right ETag -> {del_right!r} (gone: {gone})")


def check_copy(server: S3Server) -> None:
    c = server.boto3_client("copy")
    data = os.urandom(11 * MiB)
    c.put_object(Bucket=BUCKET, Key="src.bin", Body=data)
    server.reset_stats()
    c.copy_object(Bucket=BUCKET, Key="dst.bin", CopySource={"Bucket": BUCKET, "Key": "src.bin"})
    st = server.stats_for("copy")
    same = server.get_bytes(f"s3://{BUCKET}/dst.bin") == data
    up = c.create_multipart_upload(Bucket=BUCKET, Key="parts.bin")
    parts = []
    for n, (a, b) in enumerate([(0, 6 * MiB - 1), (6 * MiB, len(data) - 1)], start=1):
        r = c.upload_part_copy(Bucket=BUCKET, Key="parts.bin", UploadId=up["UploadId"], PartNumber=n,
                               CopySource={"Bucket": BUCKET, "Key": "src.bin"}, CopySourceRange=f"bytes={a}-{b}")
        parts.append({"ETag": r["CopyPartResult"]["ETag"], "PartNumber": n})
    c.complete_multipart_upload(Bucket=BUCKET, Key="parts.bin", UploadId=up["UploadId"],
                                MultipartUpload={"Parts": parts})
    same_parts = server.get_bytes(f"s3://{BUCKET}/parts.bin") == data
    fact("write.copy", "server-side copy_object and ranged upload_part_copy work",
         "confirmed" if same and same_parts and st.bytes_out < 4096 and st.bytes_in == 0 else "overturned",
         f"copy_object of 11 MiB: identical {same}, {st.bytes_in} body bytes up and {st.bytes_out} down; two ranged "
         f"UploadPartCopy parts (6 MiB + 5 MiB) completed: identical {same_parts}")

    c.put_object(Bucket=BUCKET, Key="taken", Body=b"original")
    cp = error_of(lambda: c.copy_object(Bucket=BUCKET, Key="taken", IfNoneMatch="*",
                                        CopySource={"Bucket": BUCKET, "Key": "src.bin"}))
    now = server.snapshot(f"s3://{BUCKET}/taken")
    replaced = now.get("taken", (0, ""))[0] == len(data)
    fact("write.copy_if_none_match", "moto ignores IfNoneMatch on CopyObject",
         "confirmed" if cp is None and replaced else "overturned",
         f"copy_object(IfNoneMatch='*') onto an existing key -> {cp!r}; the key now holds {now.get('taken')} "
         "(replaced). Real S3 honours it (2024); a test of 'copy refuses to overwrite' cannot run on moto")


def check_abandoned_writers(server: S3Server) -> None:
    import gc

    import obstore
    import s3fs
    from obstore.store import S3Store
    from pyarrow import fs as pafs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    store = S3Store(BUCKET, client_options={"allow_http": True})
    pfs = pafs.FileSystem.from_uri(f"s3://{BUCKET}/")[0]
    chunk = b"w" * MiB  # the writer means to write 12 MiB and fails after 7

    def writer(open_: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            with open_() as fh:
                for i in range(12):
                    if i == 7:
                        raise RuntimeError("writer failed")
                    fh.write(chunk)
        return run

    cases = {
        "s3fs open('wb', block_size=5 MiB)":
            ("s3fs", lambda: fs.open(f"{BUCKET}/abandon/s3fs", "wb", block_size=5 * MiB)),
        "s3fs open('wb') default block": ("s3fs-default", lambda: fs.open(f"{BUCKET}/abandon/s3fs-default", "wb")),
        "obstore open_writer": ("obstore", lambda: obstore.open_writer(store, "abandon/obstore")),
        "pyarrow open_output_stream": ("pyarrow", lambda: pfs.open_output_stream(f"{BUCKET}/abandon/pyarrow")),
    }
    results = {}
    for label, (name, open_) in cases.items():
        err = error_of(writer(open_))
        snap = server.snapshot(f"s3://{BUCKET}/abandon/{name}")
        obj = snap.get(f"abandon/{name}")
        left = [u for u in server.multipart_uploads(BUCKET) if u[0] == f"abandon/{name}"]
        results[label] = {"error": err, "object_bytes": obj[0] if obj else None, "uploads_left": len(left)}

    unraisable: list[str] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(f"{type(u.exc_value).__name__}: {u.exc_value}")
    try:
        fh = fs.open(f"{BUCKET}/abandon/s3fs-discard", "wb", block_size=5 * MiB)
        for _ in range(7):
            fh.write(chunk)
        fh.discard()
        del fh
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    discard_left = [u for u in server.multipart_uploads(BUCKET) if u[0] == "abandon/s3fs-discard"]
    discard_obj = server.snapshot(f"s3://{BUCKET}/abandon/s3fs-discard")
    aborted = server.abort_multipart_uploads(BUCKET)

    def say(label: str) -> str:
        r = results[label]
        shown = f"a {r['object_bytes']:,}-byte object PUBLISHED" if r["object_bytes"] else "no object"
        return f"{label}: {shown}, {r['uploads_left']} upload(s) left"

    fact("write.abandoned", "what each client does with an in-progress (multipart) upload when the writer raises",
         "new", "a `with` writer that raises after 7 of 12 MiB -> " + "; ".join(say(k) for k in cases)
         + ". fsspec's and pyarrow's __exit__ close (commit) whatever the exception; obstore's aborts. "
         f"s3fs f.discard() aborts (object {'exists' if discard_obj else 'absent'}, {len(discard_left)} uploads "
         f"left) but leaves the file open: at garbage collection its __del__ raises {unraisable[:1]} (ignored). "
         f"Leftovers are listed with list_multipart_uploads and aborted ({aborted} here)", results=results)


def check_pagination(server: S3Server, n: int) -> None:
    import obstore
    import s3fs
    from obstore.store import S3Store
    from pyarrow import fs as pafs

    t0 = time.perf_counter()
    server.put_many(f"s3://{BUCKET}/many", {f"chunk-{i // 1000:03d}/file-{i:05d}.bin": b"x" for i in range(n)})
    fill_s = time.perf_counter() - t0
    rows = {}

    def count(name: str, fn: Callable[[], int]) -> None:
        server.reset_stats()
        t = time.perf_counter()
        found = fn()
        st = server.stats
        rows[name] = {"found": found, "requests": st.requests, "lists": st.lists, "heads": st.heads,
                      "gets": st.gets, "wall_s": round(time.perf_counter() - t, 3), "ops": st.ops}

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    count("s3fs find(detail=True)", lambda: len(fs.find(f"{BUCKET}/many", detail=True)))
    fs.invalidate_cache()
    count("s3fs ls(chunk-000, detail=True)", lambda: len(fs.ls(f"{BUCKET}/many/chunk-000", detail=True)))
    fs.invalidate_cache()
    count("s3fs walk", lambda: sum(len(files) for _, _, files in fs.walk(f"{BUCKET}/many")))
    store = S3Store(BUCKET, client_options={"allow_http": True})
    count("obstore list", lambda: sum(len(batch) for batch in obstore.list(store, "many/")))
    pfs = pafs.FileSystem.from_uri(f"s3://{BUCKET}/")[0]
    count("pyarrow get_file_info(recursive)",
          lambda: sum(1 for i in pfs.get_file_info(pafs.FileSelector(f"{BUCKET}/many", recursive=True))
                      if i.type == pafs.FileType.File))
    c = server.boto3_client("prep")
    count("boto3 list_objects_v2 paginator",
          lambda: sum(len(p.get("Contents", [])) for p in
                      c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="many/")))
    find = rows["s3fs find(detail=True)"]
    ok = find["found"] == n and find["heads"] == 0 and find["lists"] <= n // 1000 + 1
    fact("list.pagination", f"listing a {n:,}-object prefix is paginated: O(listing), no HEAD per file",
         "confirmed" if ok else "overturned",
         "; ".join(f"{k}: {v['found']} found, {v['lists']} LIST, {v['heads']} HEAD, {v['wall_s']} s"
                   for k, v in rows.items()) + f" (filling the prefix: {fill_s:.1f} s with 8 threads)", rows=rows)


# ---------------------------------------------------------------------------------------- hub cache


def check_hub_cache(tmp: Path) -> None:
    from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache

    from pipeline.synth import SynthSpec, write_synthetic

    ds = write_synthetic(tmp / "plain", SynthSpec(episodes=2, frames=30))
    cache = tmp / "hub"
    repo = cache / "datasets--O--N"
    rev = hashlib.sha1(b"rev").hexdigest()
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    for path in sorted(p for p in ds.rglob("*") if p.is_file()):
        rel = path.relative_to(ds)
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        (repo / "blobs").mkdir(exist_ok=True)
        shutil.copyfile(path, repo / "blobs" / blob)
        link = repo / "snapshots" / rev / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / blob, link.parent))
    info = scan_cache_dir(cache)
    found = [(r.repo_id, r.repo_type, r.nb_files) for r in info.repos]
    hit = try_to_load_from_cache("O/N", "meta/info.json", cache_dir=cache, repo_type="dataset")
    snap = snapshot_download("O/N", repo_type="dataset", cache_dir=cache, local_files_only=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "scan", snap, "--out", str(tmp / "m.json")],
                       capture_output=True, text=True, env=env, timeout=300, check=False, cwd=str(tmp))
    text = (r.stdout + r.stderr).strip()
    outside = text.count("outside the dataset root")
    ok = bool(found) and hit and snap and outside > 0
    fact("hub.layout", "a hand-built hub cache is recognised by huggingface_hub offline; prep scan fails every "
         "episode with 'symlink points outside the dataset root'", "confirmed" if ok else "partly",
         f"scan_cache_dir: {found}; try_to_load_from_cache: {'a path' if hit else hit}; snapshot_download("
         f"local_files_only=True): {'the snapshot' if snap else snap}; `prep scan <snapshot>` exit {r.returncode}, "
         f"'outside the dataset root' {outside} times; last line: {text.splitlines()[-1][:160] if text else ''!r}")


# ---------------------------------------------------------------------------------------- install trap


def check_install_trap(tmp: Path) -> None:
    """Dry-run resolutions in a scratch venv, with the pip that `python -m venv` bundles, then the newest pip."""
    venv = tmp / "pipvenv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = venv / "bin" / "pip"
    orders = (["s3fs", "boto3", "moto"], ["boto3", "s3fs", "moto"], ["boto3", "s3fs>=2025", "moto"])
    out: dict[str, dict[str, Any]] = {}
    for stage in ("bundled", "newest"):
        if stage == "newest":
            subprocess.run([str(pip), "install", "--quiet", "--upgrade", "pip"], capture_output=True, timeout=600,
                           check=False)
        pip_version = subprocess.run([str(pip), "--version"], capture_output=True, text=True,
                                     check=False).stdout.split()[1]
        for reqs in orders:
            label = f"pip {pip_version}: {' '.join(reqs)}"
            report = tmp / f"report-{len(out)}.json"
            t0 = time.perf_counter()
            r = subprocess.run([str(pip), "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                                "--report", str(report), *reqs], capture_output=True, text=True, timeout=1200,
                               check=False)
            got = {}
            if report.is_file():
                for item in json.loads(report.read_text()).get("install", []):
                    name = item["metadata"]["name"].lower()
                    if name in ("s3fs", "fsspec", "boto3", "botocore", "aiobotocore", "moto"):
                        got[name] = item["metadata"]["version"]
            errors = [line[:200] for line in r.stderr.splitlines() if line.startswith("ERROR")]
            out[label] = {"resolved": got, "rc": r.returncode, "seconds": round(time.perf_counter() - t0, 1),
                          "errors": errors[-2:]}

    def say(k: str, v: dict[str, Any]) -> str:
        if v["rc"]:
            return f"`{k}` -> fails ({v['errors'][-1] if v['errors'] else 'rc ' + str(v['rc'])})"
        r = v["resolved"]
        return f"`{k}` -> s3fs {r.get('s3fs')}, boto3 {r.get('boto3')} ({v['seconds']:.0f} s)"

    olds = [v["resolved"].get("s3fs", "").startswith("0.") for v in out.values() if not v["rc"]]
    fact("install.trap", "`pip install s3fs boto3 moto` unpinned resolves s3fs 0.4.2 (2020)",
         ("partly" if not all(olds) else "confirmed") if any(olds) else "overturned",
         "; ".join(say(k, v) for k, v in out.items())
         + ". The first-named package stays newest and the resolver backtracks the others: with boto3 named first, "
           "s3fs falls back to 0.4.2 (before aiobotocore). Pin s3fs>=2025 (and a recent pip)", runs=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pip", action="store_true", help="also run the install-trap check (contacts the package index)")
    ap.add_argument("--objects", type=int, default=10_000)
    ap.add_argument("--skip", default="", help="comma list of check names to skip")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/storage_facts.json")
    args = ap.parse_args(argv)
    skip = set(args.skip.split(",")) - {""}
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    import av  # noqa: F401  (imported before the server thread starts)

    with tempfile.TemporaryDirectory(prefix="storage_facts_") as tmp_s, S3Server() as server:
        tmp = Path(tmp_s)
        os.environ.update(server.env(client="prep"))
        os.environ["AWS_ALLOW_HTTP"] = "true"
        server.make_bucket(BUCKET)
        from pipeline.synth import SynthSpec, write_synthetic

        sample_root = write_synthetic(tmp / "sample", SynthSpec(episodes=1))
        sample = next(sample_root.rglob("*.mp4")).read_bytes()
        checks: list[tuple[str, Callable[[], None]]] = [
            ("server", check_server),
            ("env", lambda: check_env(server)),
            ("obstore_pyav", lambda: check_obstore_pyav(server, sample)),
            ("scan", lambda: check_scan_reads_every_packet(server, sample)),
            ("no_head", lambda: check_open_without_head(server, sample)),
            ("pickle", lambda: check_pickled_secrets(server)),
            ("create", lambda: check_conditional_create(server)),
            ("if_match", lambda: check_if_match(server)),
            ("copy", lambda: check_copy(server)),
            ("abandon", lambda: check_abandoned_writers(server)),
            ("pagination", lambda: check_pagination(server, args.objects)),
            ("hub", lambda: check_hub_cache(tmp)),
        ]
        if args.pip:
            checks.append(("pip", lambda: check_install_trap(tmp)))
        for name, check in checks:
            if name in skip:
                continue
            err = error_of(check)
            if err:
                fact(name, "(the check itself)", "error", err)

    result = {
        "benchmark": "storage_facts",
        "source": "shared/docs/storage-and-slurm-notes.md, section 'S3 on loopback (moto)'",
        "server": "moto S3 (tests/support/s3.py, thread mode) on 127.0.0.1",
        "versions": {m: getattr(__import__(m), "__version__", "?") for m in
                     ("s3fs", "fsspec", "obstore", "pyarrow", "av", "boto3", "botocore", "aiobotocore", "moto",
                      "huggingface_hub")},
        "python": platform.python_version(),
        "prep_commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                      text=True, check=False).stdout.strip() or None,
        "command": "python bench/storage_facts.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "facts": FACTS,
    }
    if args.out.is_file() and skip:  # a partial rerun keeps the facts of the checks it skipped
        ran = {name for name, _ in checks} - skip
        old = {f["id"]: f for f in json.loads(args.out.read_text()).get("facts", [])}
        new_ids = {f["id"] for f in FACTS}
        result["facts"] = FACTS + [f for fid, f in old.items() if fid not in new_ids
                                   and not (f["verdict"] == "error" and fid in ran)]
    atomic.write_json(args.out, masked(result), indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
