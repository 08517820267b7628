"""Choose the object-storage library by measurement: fsspec+s3fs, obstore and pyarrow.fs against moto's S3 on
loopback (tests/support/s3.py, in a child process so the server does not share the client's GIL).

Files are generated here: a LeRobot-like episode video (480x640 h264, 30 fps, 90 frames, as pipeline/synth.py
writes it) with the moov atom at the front (movflags=faststart) and at the end, a ~25 MB video (moov at the
end, as a plain ffmpeg/PyAV writer leaves it), a ~18 MB data parquet of three row groups, and 40 MB of random
bytes. Tasks:

  parquet   pq.ParquetFile(f).metadata (the footer), then one column (`timestamp`) read
  header    av.open(f): stream.frames, codec_context (name, size), stream.index_entries (the mp4 sample
            index: per-sample size, timestamp, keyframe flag; no packet data read), moov front and end
  decode    every frame of the 25 MB video decoded (local disk is the baseline)
  copy      the 25 MB object copied: server-side (s3fs copy, obstore copy, pyarrow copy_file, boto3
            copy_object) vs downloaded + uploaded
  upload    40 MB written (multipart where the client does it)

For each: the requests the server counted (GET/PUT/HEAD/LIST/other), the body bytes it sent (read) and
received (written), and the wall time (median of --repeats). Request counts are the portable result: on
loopback a request costs ~1-3 ms, on real S3 a first byte takes 10-100 ms.

    python bench/storage_libs.py [--repeats 5] [--out bench/results/storage_libs.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from masking import masked

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402
from pipeline.synth import SynthSpec, camera_frames  # noqa: E402

BUCKET = "bench"
KiB, MiB = 1024, 1024 * 1024


# ------------------------------------------------------------------------------------------------- files


def encode(path: Path, chunks: Iterator[np.ndarray], faststart: bool, spec: SynthSpec) -> None:
    """h264 as pipeline/synth.py encodes it (crf 23, GOP 30, veryfast, yuv420p); moov at the front if
    `faststart`, else at the end."""
    with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"} if faststart else {}) as out:
        stream = out.add_stream("libx264", rate=spec.fps)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, spec.pix_fmt
        stream.codec_context.time_base = Fraction(1, spec.fps)
        stream.options = {"crf": str(spec.crf), "g": str(spec.gop), "preset": spec.preset,
                          "x264-params": f"keyint={spec.gop}:min-keyint={spec.gop}:scenecut=0"}
        i = 0
        for frames in chunks:
            for rgb in frames:
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts, frame.time_base = i, Fraction(1, spec.fps)
                out.mux(stream.encode(frame))
                i += 1
        out.mux(stream.encode(None))


def make_files(root: Path, large_chunks: int) -> dict[str, Path]:
    spec = SynthSpec()
    files = {"episode_front.mp4": root / "episode_front.mp4", "episode_end.mp4": root / "episode_end.mp4",
             "large.mp4": root / "large.mp4", "data.parquet": root / "data.parquet"}
    frames = camera_frames(spec, 0, 0)
    encode(files["episode_front.mp4"], iter([frames]), True, spec)
    encode(files["episode_end.mp4"], iter([frames]), False, spec)
    encode(files["large.mp4"], (camera_frames(spec, 0, ep) for ep in range(large_chunks)), False, spec)
    rng = np.random.default_rng(0)
    n, dim = 150_000, 14
    table = pa.table({
        "observation.state": pa.FixedSizeListArray.from_arrays(rng.standard_normal(n * dim, dtype=np.float32), dim),
        "action": pa.FixedSizeListArray.from_arrays(rng.standard_normal(n * dim, dtype=np.float32), dim),
        "timestamp": pa.array((np.arange(n) % 900 / 30).astype(np.float32)),
        "frame_index": pa.array(np.arange(n) % 900, type=pa.int64()),
        "episode_index": pa.array(np.arange(n) // 900, type=pa.int64()),
        "index": pa.array(np.arange(n), type=pa.int64()),
        "task_index": pa.array(np.zeros(n, dtype=np.int64)),
    })
    pq.write_table(table, files["data.parquet"], row_group_size=50_000)
    return files


# --------------------------------------------------------------------------------------------- readers


class ObstoreFile(io.RawIOBase):
    """obstore's ReadableFile as PyAV and pyarrow need it: `read` returns bytes (obstore returns its own
    Bytes), and `readinto` fills a caller's buffer; one copy either way."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return bytes(self._reader.read(size) if size is not None and size >= 0 else self._reader.read())

    def readinto(self, buffer: Any) -> int:
        data = self._reader.read(len(buffer))
        n = len(data)
        memoryview(buffer).cast("B")[:n] = memoryview(data)
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._reader.seek(offset, whence))

    def tell(self) -> int:
        return int(self._reader.tell())

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()


@dataclass(frozen=True, slots=True)
class Reader:
    name: str
    lib: str  # local | s3fs | obstore | pyarrow
    block: int | None = None  # s3fs block_size / obstore buffer_size; None: the library's default
    cache: str | None = None  # s3fs cache_type; None: its default, "readahead"


READERS = [
    Reader("local disk", "local"),
    Reader("s3fs default (50 MiB readahead)", "s3fs"),
    Reader("s3fs 64 KiB", "s3fs", 64 * KiB),
    Reader("s3fs 1 MiB", "s3fs", MiB),
    Reader("s3fs 8 MiB", "s3fs", 8 * MiB),
    Reader("s3fs 8 MiB blockcache", "s3fs", 8 * MiB, "blockcache"),
    Reader("obstore 64 KiB", "obstore", 64 * KiB),
    Reader("obstore 1 MiB (default)", "obstore"),
    Reader("pyarrow NativeFile", "pyarrow"),
]


def client_env(server: S3Server, client: str) -> None:
    """This process's environment for a client named `client` (its access key): every client below is
    configured from the environment alone, as prep's will be."""
    os.environ.update(server.env(client=client))
    os.environ["AWS_ALLOW_HTTP"] = "true"  # obstore refuses an http endpoint without it


class Clients:
    """One client object per library, made once per reader (a real run reuses its client); a distinct access
    key per reader so the server's per-client counts cannot mix."""

    def __init__(self, server: S3Server, local_root: Path) -> None:
        self.server = server
        self.local_root = local_root
        self._cache: dict[str, Any] = {}

    def s3fs(self, tag: str) -> Any:
        if tag not in self._cache:
            import s3fs

            client_env(self.server, tag)
            self._cache[tag] = s3fs.S3FileSystem(skip_instance_cache=True)
        fs = self._cache[tag]
        fs.invalidate_cache()  # no listing cache between repeats: each repeat pays its HEADs
        return fs

    def obstore(self, tag: str) -> Any:
        if tag not in self._cache:
            from obstore.store import S3Store

            client_env(self.server, tag)
            self._cache[tag] = S3Store(BUCKET)
        return self._cache[tag]

    def pyarrow(self, tag: str) -> Any:
        if tag not in self._cache:
            from pyarrow import fs

            client_env(self.server, tag)
            self._cache[tag] = fs.FileSystem.from_uri(f"s3://{BUCKET}/")[0]
        return self._cache[tag]

    @contextlib.contextmanager
    def open(self, reader: Reader, key: str) -> Iterator[Any]:
        tag = "r-" + reader.name.split(" (")[0].replace(" ", "-")
        if reader.lib == "local":
            with open(self.local_root / key, "rb") as fh:
                yield fh
        elif reader.lib == "s3fs":
            kwargs: dict[str, Any] = {"block_size": reader.block} if reader.block else {}
            if reader.cache:
                kwargs["cache_type"] = reader.cache
            with self.s3fs(tag).open(f"{BUCKET}/{key}", "rb", **kwargs) as fh:
                yield fh
        elif reader.lib == "obstore":
            import obstore

            kwargs = {"buffer_size": reader.block} if reader.block else {}
            with ObstoreFile(obstore.open_reader(self.obstore(tag), key, **kwargs)) as fh:
                yield fh
        elif reader.lib == "pyarrow":
            with self.pyarrow(tag).open_input_file(f"{BUCKET}/{key}") as fh:
                yield fh
        else:
            raise ValueError(reader.lib)


def read_parquet(fh: Any) -> tuple[int, int, float]:
    pf = pq.ParquetFile(fh)
    meta = pf.metadata
    col = pf.read(columns=["timestamp"]).column(0)
    return meta.num_rows, meta.num_row_groups, round(float(pa.compute.sum(col).as_py()), 3)


def read_header(fh: Any) -> tuple[Any, ...]:
    with av.open(fh) as container:
        stream = container.streams.video[0]
        cc = stream.codec_context
        entries = stream.index_entries
        return (stream.frames, cc.name, cc.width, cc.height, len(entries),
                sum(1 for e in entries if e.is_keyframe), sum(e.size for e in entries))


def decode_all(fh: Any) -> int:
    with av.open(fh) as container:
        return sum(1 for _ in container.decode(video=0))


# ------------------------------------------------------------------------------------------- measuring


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Case:
    """One client doing one task: `fn` measured, `before` run untimed ahead of each repeat."""

    row: dict[str, Any]
    fn: Callable[[], Any]
    before: Callable[[], None] | None = None
    times: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    server_cpus: list[float] = field(default_factory=list)
    counts: list[Any] = field(default_factory=list)
    value: Any = None


def measure_interleaved(server: S3Server, cases: list[Case], repeats: int) -> list[dict[str, Any]]:
    """Each repeat runs every case once, in turn (round robin), so a swing in the machine's load (other
    processes share its 2 cores) falls on every client alike; then one row per case."""
    for _ in range(repeats):
        for case in cases:
            if case.before is not None:
                case.before()
            server.reset_stats()
            c0, s0, t0 = cpu_self(), cpu_of(server.pid), time.perf_counter()
            case.value = case.fn()
            case.times.append(time.perf_counter() - t0)
            case.cpus.append(cpu_self() - c0)
            case.server_cpus.append(cpu_of(server.pid) - s0)
            case.counts.append(server.stats)
    rows = []
    for case in cases:
        st = case.counts[0]
        value = case.value
        row = {
            **case.row, "repeats": repeats,
            "wall_s": round(statistics.median(case.times), 4), "wall_s_all": [round(t, 4) for t in case.times],
            "client_cpu_s": round(statistics.median(case.cpus), 4),
            "server_cpu_s": round(statistics.median(case.server_cpus), 4),
            "requests": st.requests, "gets": st.gets, "puts": st.puts, "heads": st.heads, "lists": st.lists,
            "other": st.requests - st.gets - st.puts - st.heads - st.lists,
            "bytes_read": st.bytes_out, "bytes_written": st.bytes_in, "ops": st.ops,
            "result": value if isinstance(value, (int, float, str, list, tuple)) else None,
        }
        varying = sorted({c.requests for c in case.counts})
        if len(varying) > 1:
            row["requests_varied"] = varying
        rows.append(row)
        print_row(row)
    return rows


def read_tasks(server: S3Server, clients: Clients, sizes: dict[str, int], repeats: int, decode_repeats: int,
               only: set[str] | None) -> list[dict[str, Any]]:
    tasks: list[tuple[str, str, Callable[[Any], Any]]] = [
        ("parquet footer + 1 column", "data.parquet", read_parquet),
        ("mp4 header, moov at front", "episode_front.mp4", read_header),
        ("mp4 header, moov at end", "episode_end.mp4", read_header),
        ("mp4 header, 25 MB, moov end", "large.mp4", read_header),
        ("decode whole 25 MB video", "large.mp4", decode_all),
    ]
    for reader in READERS:  # each client's first request (session, connection pool) is not timed
        with clients.open(reader, "data.parquet") as fh:
            fh.read(1)
    rows = []
    for task, key, fn in tasks:
        if only and task.split()[0] not in only and not (task.startswith("mp4") and "mp4" in only):
            continue
        cases = []
        for reader in READERS:
            def run(reader: Reader = reader, key: str = key, fn: Callable[[Any], Any] = fn) -> Any:
                with clients.open(reader, key) as fh:
                    return fn(fh)

            cases.append(Case({"task": task, "file": key, "file_bytes": sizes[key], "client": reader.name}, run))
        got = measure_interleaved(server, cases, decode_repeats if fn is decode_all else repeats)
        for row in got:
            row["same_result_as_local"] = row["result"] == got[0]["result"]
        rows += got
    return rows


def write_tasks(server: S3Server, clients: Clients, files: dict[str, Path], repeats: int,
                only: set[str] | None) -> list[dict[str, Any]]:
    import obstore

    rows: list[dict[str, Any]] = []
    src_key, size = "large.mp4", files["large.mp4"].stat().st_size
    boto = server.boto3_client("w-boto3")
    bfs = clients.s3fs("w-s3fs")
    ost = clients.obstore("w-obstore")
    pfs = clients.pyarrow("w-pyarrow")
    boto.head_object(Bucket=BUCKET, Key=src_key)  # each client's first request is not timed
    bfs.info(f"{BUCKET}/{src_key}")
    obstore.head(ost, src_key)
    pfs.get_file_info(f"{BUCKET}/{src_key}")

    def delete(key: str) -> Callable[[], None]:
        return lambda: server.client.delete_object(Bucket=BUCKET, Key=key)

    def dst_ok(key: str, n: int) -> bool:
        return int(server.client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]) == n

    copies: list[tuple[str, Callable[[], Any]]] = [
        ("s3fs copy (server-side)", lambda: bfs.copy(f"{BUCKET}/{src_key}", f"{BUCKET}/copy.mp4")),
        ("obstore copy (server-side)", lambda: obstore.copy(ost, src_key, "copy.mp4")),
        ("pyarrow copy_file (server-side)", lambda: pfs.copy_file(f"{BUCKET}/{src_key}", f"{BUCKET}/copy.mp4")),
        ("boto3 copy_object (server-side)",
         lambda: boto.copy_object(Bucket=BUCKET, Key="copy.mp4", CopySource={"Bucket": BUCKET, "Key": src_key})),
        ("s3fs cat + pipe (download+upload)",
         lambda: bfs.pipe_file(f"{BUCKET}/copy.mp4", bfs.cat_file(f"{BUCKET}/{src_key}"))),
        ("obstore get + put (download+upload)",
         lambda: obstore.put(ost, "copy.mp4", obstore.get(ost, src_key).bytes())),
    ]
    if not only or "copy" in only:
        cases = [Case({"task": "copy 25 MB object", "file": src_key, "file_bytes": size, "client": name}, fn,
                      before=delete("copy.mp4")) for name, fn in copies]
        rows += measure_interleaved(server, cases, repeats)
        for name, fn in copies:  # each once more, checked
            delete("copy.mp4")()
            fn()
            next(r for r in rows if r["client"] == name)["result"] = dst_ok("copy.mp4", size)

    payload = np.random.default_rng(1).integers(0, 256, size=40 * 1000 * 1000, dtype=np.uint8).tobytes()

    def s3fs_write(block: int | None) -> Callable[[], None]:
        def run() -> None:
            kwargs = {"block_size": block} if block else {}
            with bfs.open(f"{BUCKET}/upload.bin", "wb", **kwargs) as fh:
                for i in range(0, len(payload), 4 * MiB):  # as a writer streams it: 4 MiB at a time
                    fh.write(payload[i:i + 4 * MiB])
        return run

    def pyarrow_write() -> None:
        with pfs.open_output_stream(f"{BUCKET}/upload.bin") as fh:
            for i in range(0, len(payload), 4 * MiB):
                fh.write(payload[i:i + 4 * MiB])

    def boto3_write() -> None:
        from boto3.s3.transfer import TransferConfig

        boto.upload_fileobj(io.BytesIO(payload), BUCKET, "upload.bin", Config=TransferConfig(max_concurrency=2))

    uploads: list[tuple[str, Callable[[], Any]]] = [
        ("s3fs open('wb') default block (50 MiB)", s3fs_write(None)),
        ("s3fs open('wb') 8 MiB block", s3fs_write(8 * MiB)),
        ("s3fs pipe_file", lambda: bfs.pipe_file(f"{BUCKET}/upload.bin", payload)),
        ("obstore put (5 MiB parts, default)", lambda: obstore.put(ost, "upload.bin", payload)),
        ("pyarrow open_output_stream", pyarrow_write),
        ("boto3 upload_fileobj (8 MiB parts)", boto3_write),
    ]
    if not only or "upload" in only:
        cases = [Case({"task": "upload 40 MB", "file": "upload.bin", "file_bytes": len(payload), "client": name}, fn,
                      before=delete("upload.bin")) for name, fn in uploads]
        rows += measure_interleaved(server, cases, repeats)
        for name, fn in uploads:  # each once more, checked
            delete("upload.bin")()
            fn()
            row = next(r for r in rows if r["client"] == name)
            row["result"] = dst_ok("upload.bin", len(payload))
            row["multipart_leftovers"] = len(server.multipart_uploads(BUCKET))
    return rows


HEADER = (f"{'task':<27} {'client':<38} {'wall s':>7} {'cpu s':>6} {'GET':>4} {'PUT':>4} {'HEAD':>4} {'LIST':>4} "
          f"{'other':>5} {'MB read':>8} {'MB written':>10}")


def print_row(row: dict[str, Any]) -> None:
    counts = " ".join(f"{row[k]:>{w}}" for k, w in (("gets", 4), ("puts", 4), ("heads", 4), ("lists", 4), ("other", 5)))
    print(f"{row['task']:<27} {row['client']:<38} {row['wall_s']:>7.3f} {row['client_cpu_s']:>6.2f} {counts} "
          f"{row['bytes_read'] / 1e6:>8.3f} {row['bytes_written'] / 1e6:>10.3f}", flush=True)


def markdown_table(result: dict[str, Any]) -> str:
    """The results as docs/storage.md shows them."""
    lines = ["| task | client | GET | PUT | HEAD | LIST | other | MB read | MB written | wall s | client CPU s |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in result["results"]:
        lines.append(f"| {r['task']} | {r['client']} | {r['gets']} | {r['puts']} | {r['heads']} | {r['lists']} | "
                     f"{r['other']} | {r['bytes_read'] / 1e6:.3f} | {r['bytes_written'] / 1e6:.3f} | "
                     f"{r['wall_s']:.3f} | {r['client_cpu_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-repeats", type=int, default=3, help="repeats of the whole-video decode (CPU-bound)")
    ap.add_argument("--large-chunks", type=int, default=19, help="90-frame chunks in the large video (~1.3 MB each)")
    ap.add_argument("--only", default="", help="comma list of: parquet,mp4,decode,copy,upload (default: all)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/storage_libs.json")
    ap.add_argument("--table", action="store_true", help="print --out's results as a markdown table and stop")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())))
        return 0
    only = {x for x in args.only.split(",") if x} or None
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="storage_libs_") as tmp, S3Server(process=True) as server:
        os.environ.update(server.env(client="bench"))  # nothing in this process can reach a real endpoint
        t0 = time.perf_counter()
        files = make_files(Path(tmp), args.large_chunks)
        build_s = time.perf_counter() - t0
        sizes = {k: p.stat().st_size for k, p in files.items()}
        server.make_bucket(BUCKET)
        for key, path in files.items():
            server.client.upload_file(str(path), BUCKET, key)
        print(f"files built in {build_s:.1f} s: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
        print(HEADER)
        clients = Clients(server, Path(tmp))
        rows = read_tasks(server, clients, sizes, args.repeats, args.decode_repeats, only)
        rows += write_tasks(server, clients, files, args.repeats, only)
        leftovers = server.multipart_uploads(BUCKET)

    versions = {}
    for mod in ("s3fs", "fsspec", "obstore", "pyarrow", "av", "boto3", "botocore", "aiobotocore", "moto"):
        with contextlib.suppress(Exception):
            versions[mod] = __import__(mod).__version__
    result = {
        "benchmark": "storage_libs",
        "server": "moto S3 (tests/support/s3.py) in a child process on 127.0.0.1, counted by its WSGI middleware",
        "files": {k: {"bytes": v} for k, v in sizes.items()},
        "files_note": "episode_*: 480x640 h264 crf 23 GOP 30, 30 fps, 90 frames (pipeline/synth.py's encoding); "
                      f"large.mp4: {args.large_chunks} x 90 frames, moov at the end; data.parquet: 150,000 rows, "
                      "3 row groups, observation.state and action float32[14] + 5 scalar columns",
        "repeats": args.repeats,
        "decode_repeats": args.decode_repeats,
        "build_s": round(build_s, 2),
        "multipart_leftovers_at_end": len(leftovers),
        "versions": versions,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_before": list(load_before), "load_avg_after": list(os.getloadavg())},
        "prep_commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                      text=True, check=False).stdout.strip() or None,
        "command": "python bench/storage_libs.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "note": "Clients run round robin within each task (repeat 1 of every client, then repeat 2, ...). "
                "wall_s: median of `repeats` (decode: `decode_repeats`); client_cpu_s: this process's CPU seconds "
                "(all threads: s3fs's event loop, obstore's and pyarrow's I/O threads, the decoder), server_cpu_s: the "
                "moto process's, both medians; counts are from the first repeat (requests_varied lists them where "
                "repeats differed). bytes_read/bytes_written: HTTP body bytes the server sent/received. gets/puts/"
                "heads: object requests; lists: List*; other: bucket-level and multipart create/complete/abort. "
                "One client object per row, reused across repeats, listing cache cleared before each.",
        "results": rows,
    }
    if not only:
        atomic.write_json(args.out, masked(result), indent=2)
        print(f"wrote {args.out}")
    else:
        print(json.dumps(masked(result)["results"], indent=1)[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
