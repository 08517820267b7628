"""What one mp4 header read costs on S3 (moto on loopback, counted by the server), by reader: FFmpeg's own open
through the seam's block reader (block sizes x PyAV `buffer_size`), against the header-box reader that `prep
scan` uses (`pipeline.video.mp4header`: ftyp + moov in exact ranges, end of file inside the mdat), with and
without the first sample (what the scan's first unit decodes for the pixel format).

    python bench/scan_header_reads.py [--out bench/results/scan_header_reads.json]

The file: one episode video as pipeline/synth.py writes it (480x640 h264, 90 frames, GOP 30, crf 23, moov at the
end, ~1.3 MB), and the same remuxed with its moov first (`movflags=+faststart`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import av

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.s3 import S3Server  # noqa: E402

from pipeline import atomic  # noqa: E402
from pipeline.synth import SynthSpec, write_synthetic  # noqa: E402


def faststart(src: Path, dst: Path) -> None:
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options={"movflags": "+faststart"}) as out:
        stream = out.add_stream_from_template(inp.streams.video[0])
        for packet in inp.demux(inp.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                out.mux(packet)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scan_header_reads.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prep-bench-header-"))
    ds = write_synthetic(work / "ds", SynthSpec(version="v2.1", episodes=1, cameras=("cam",)))
    last = next(ds.rglob("*.mp4"))
    first = work / "first.mp4"
    faststart(last, first)
    rows: list[dict[str, Any]] = []
    with S3Server(process=True) as s3:
        s3.make_bucket("bench")
        s3.upload_tree(work, "s3://bench/w")
        os.environ.update(s3.env(client="bench"))
        from pipeline.storage import EXACT_READS, parse_location
        from pipeline.video.probe import INDEX_OPEN_OPTIONS, probe_header

        store = parse_location("s3://bench/w").store()
        for layout, path in (("moov last", last), ("moov first", first)):
            rel = path.relative_to(work).as_posix()
            size = store.stat(rel).size

            def measure(reader: str, run: Any, layout: str = layout, size: int = size) -> None:
                s3.reset_stats()
                run()
                st = s3.stats_for("bench")
                rows.append({"layout": layout, "reader": reader, "gets": st.gets, "bytes": st.bytes_out,
                             "file_bytes": size, "share": round(st.bytes_out / size, 4)})
                print(f"{layout:10} {reader:52} {st.gets:3} GETs {st.bytes_out:>9,} B ({st.bytes_out / size:.2%})")

            for block in (64 << 10, 16 << 10, 4 << 10):
                for buffer in (32768, 4096):
                    def ffmpeg(block: int = block, buffer: int = buffer, rel: str = rel) -> None:
                        with store.open(rel, block_size=block) as fh, \
                                av.open(fh, options=INDEX_OPEN_OPTIONS, buffer_size=buffer) as c:
                            len(c.streams.video[0].index_entries)

                    measure(f"FFmpeg open, {block >> 10} KiB blocks, buffer_size {buffer}", ffmpeg)
            for pix_fmt in (False, True):
                def boxes(pix_fmt: bool = pix_fmt, rel: str = rel, size: int = size) -> None:
                    with store.open(rel, block_size=EXACT_READS) as fh:
                        assert probe_header(fh, shown=rel, size=size, pix_fmt=pix_fmt) is not None

                measure("header boxes" + (" + first sample (pix_fmt)" if pix_fmt else ""), boxes)
    doc = {"bench": "scan_header_reads", "command": "python bench/scan_header_reads.py " + " ".join(sys.argv[1:]),
           "server": "moto on 127.0.0.1 (its own process)", "cpus": os.cpu_count(), "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(a.out, doc, indent=2)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
