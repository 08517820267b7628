"""What the safety checks and the resume fingerprint cost, per file and per TB kept.

- fingerprint `ctime` (the default): one stat and three 64 KiB reads per kept source file;
- fingerprint `content`: a BLAKE2b of every byte of every kept source file, from the page cache (CPU bound)
  and cold (each file's pages dropped with posix_fadvise(DONTNEED) first: the disk's read speed);
- `check_tree`: the walk that refuses a symlink, FIFO, socket or device in an output, per entry;
- `atomic_path` with the output root (every folder below it lstat-checked, the temp created O_EXCL|O_NOFOLLOW)
  against a plain write and rename of the same bytes.

Files of `--file-mb` (default 1.7 MB: a 90-frame 480x640 h264 camera file) in a temp folder; per-TB figures
assume files of that size (1e12 bytes). Prints a table and writes bench/results/safety_cost.json.

    python bench/safety_cost.py [--files 400] [--file-mb 1.7] [--entries 100000] [--out ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import __version__, atomic  # noqa: E402
from pipeline.stages.keep import content_hash, fingerprint_matches, source_fingerprint  # noqa: E402

TB = 1e12


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(fn: Any, items: list[Path], before: Any = None) -> float:
    """Seconds for fn over every item (`before` run on each item first, untimed)."""
    total = 0.0
    for p in items:
        if before is not None:
            before(p)
        t0 = time.perf_counter()
        fn(p)
        total += time.perf_counter() - t0
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--file-mb", type=float, default=1.7)
    ap.add_argument("--entries", type=int, default=100_000, help="entries of the tree check_tree walks")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the test files (default: a temp folder)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/safety_cost.json")
    args = ap.parse_args(argv)
    size = int(args.file_mb * 1e6)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prep-safety-cost-", dir=args.dir) as tmp:
        root = Path(tmp)
        files = []
        block = os.urandom(1 << 20)
        for i in range(args.files):
            p = root / "src" / f"chunk-{i // 1000:03d}" / f"episode_{i:06d}.mp4"
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "wb") as fh:
                left = size
                while left > 0:
                    fh.write(block[: min(left, len(block))])
                    left -= len(block)
            files.append(p)
        nbytes = size * len(files)
        per_tb = TB / nbytes
        recorded = {p: source_fingerprint(p) for p in files}

        def row(name: str, seconds: float, note: str) -> None:
            rows.append({"measure": name, "seconds": round(seconds, 4), "files": len(files),
                         "us_per_file": round(seconds / len(files) * 1e6, 1), "s_per_tb": round(seconds * per_tb, 1),
                         "note": note})

        row("fingerprint ctime check (warm)", timed(lambda p: fingerprint_matches(recorded[p], p, "ctime"), files),
            "stat + 3 x 64 KiB reads, page cache")
        row("fingerprint ctime check (cold)", timed(lambda p: fingerprint_matches(recorded[p], p, "ctime"), files,
                                                    drop_cache), "stat + 3 x 64 KiB reads from the disk")
        row("fingerprint content check (warm)",
            timed(lambda p: fingerprint_matches(recorded[p], p, "content"), files),
            "BLAKE2b of every byte, page cache (CPU bound, one core)")
        row("fingerprint content check (cold)",
            timed(lambda p: fingerprint_matches(recorded[p], p, "content"), files, drop_cache),
            "BLAKE2b of every byte read from the disk")
        row("content hash at first encode (warm)", timed(content_hash, files),
            "recorded once per file when it is encoded (the decoder then reads it from the page cache)")

        out = root / "out"
        payload = os.urandom(4096)
        targets = [out / "videos" / f"chunk-{i // 1000:03d}" / "observation.images.cam" / f"episode_{i:06d}.json"
                   for i in range(len(files))]

        def safe_write(p: Path) -> None:
            atomic.write_bytes(p, payload, out)

        def plain_write(p: Path) -> None:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp_name = p.with_name("." + p.name + ".tmp")
            with open(tmp_name, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp_name, p)
            atomic.fsync_dir(p.parent)

        row("atomic write, no-follow discipline", timed(safe_write, targets), "4 KiB file: lstat of every folder "
            "below --out, O_EXCL|O_NOFOLLOW temp, fsync, rename, fsync folder")
        row("plain atomic write (reference)", timed(plain_write, [t.with_suffix(".b") for t in targets]),
            "4 KiB file: mkdir -p, open, fsync, rename, fsync folder")

        tree = root / "tree"
        per_dir = 1000
        for i in range(args.entries):
            d = tree / f"chunk-{i // per_dir:03d}"
            if i % per_dir == 0:
                d.mkdir(parents=True)
            (d / f"f{i:07d}").touch()
        t0 = time.perf_counter()
        atomic.check_tree(tree)
        walk = time.perf_counter() - t0
        rows.append({"measure": "check_tree walk", "seconds": round(walk, 4), "files": args.entries,
                     "us_per_file": round(walk / args.entries * 1e6, 2),
                     "s_per_tb": round(walk / args.entries * (TB / size), 1),
                     "note": f"{args.entries:,} entries in folders of {per_dir}; per TB: files of {args.file_mb} MB"})
    print(f"{'measure':40} {'seconds':>8} {'us/file':>9} {'s/TB':>9}  note")
    for r in rows:
        print(f"{r['measure']:40} {r['seconds']:>8.3f} {r['us_per_file']:>9.1f} {r['s_per_tb']:>9.1f}  {r['note']}")
    doc = {"schema": "prep.bench.safety_cost/1", "prep_version": __version__,
           "created_utc": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count(),
                       "load_average": list(os.getloadavg())},
           "file_bytes": size, "files": args.files, "rows": rows}
    atomic.write_json(args.out, doc, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
