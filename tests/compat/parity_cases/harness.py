"""One parity row: build the case, run the real reader on it, `prep verify` (without and with --decode),
`prep reencode` (each variant) and the real reader on each output. Runs inside a LeRobot venv (the
reader's); prep runs through its CLI with `prep_python`."""

from __future__ import annotations

import shutil
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import prep_cli
from .model import CASES, FORMAT_OF_READER
from .reader import depth_report, message, read_dataset

OUTPUT_SIZE = (int(prep_cli.DST), int(prep_cli.DST))


def run_case(name: str, reader: str, work: Path, prep_python: str, scheduler: str | None = None) -> dict[str, Any]:
    """One row: case `name` read by the reader line `reader` ("0.3", "0.4", "0.6": the venv this runs in)."""
    import os

    from . import build_case

    os.environ.setdefault("PARITY_PREP_PYTHON", prep_python)  # for cases that run prep while building
    c = CASES[name]
    fmt = FORMAT_OF_READER[reader]
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    row: dict[str, Any] = {"case": name, "format": fmt, "line": reader, "what": c.what, "control": c.control,
                           "expect": asdict(c.expect_for(reader))}
    t0 = time.monotonic()
    try:
        built = build_case(name, fmt, d / "case")
    except Exception as exc:
        row.update(error=f"build failed: {message(exc)}", traceback=traceback.format_exc()[-3000:])
        return row
    row["build_s"] = round(time.monotonic() - t0, 2)
    row["notes"] = built.notes
    t1 = time.monotonic()
    row["reader"] = read_dataset(built.root, built)
    row["reader_s"] = round(time.monotonic() - t1, 2)
    row["verify"] = prep_cli.verify(prep_python, built.root, d / "verify.json", fmt, decode=False, scheduler=scheduler,
                                    reader=reader)
    row["verify_decode"] = prep_cli.verify(prep_python, built.root, d / "verify-decode.json", fmt, decode=True,
                                          scheduler=scheduler, reader=reader)
    row["reencode"] = []
    for k, variant in enumerate(c.variants(fmt)):
        out = d / f"out{k}"
        r = prep_cli.reencode(prep_python, built.root, out, variant, scheduler=scheduler, reader=reader)
        if r["wrote_info"]:
            t2 = time.monotonic()
            r["output_reader"] = read_dataset(out, built, size=OUTPUT_SIZE)
            r["output_reader_s"] = round(time.monotonic() - t2, 2)
            if built.depth_cameras:
                r["depth"] = depth_report(built.root, out, built.depth_cameras)
        row["reencode"].append(r)
    row["seconds"] = round(time.monotonic() - t0, 2)
    return row
