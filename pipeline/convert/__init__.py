"""Conversion between the LeRobot layouts v2.1 and v3.0, as pure building blocks.

- `layout`: the deterministic plan (source episode records -> output files, one unit of work each,
  and each episode's place in the output);
- `source`: streaming readers of a source's metadata (JSON Lines / parquet, row by row);
- `meta`: the output's metadata both ways (info.json, tasks, episodes, per-episode and global stats),
  written incrementally;
- `hf`: the Hugging Face `datasets` features stored in a data parquet's schema, as each version's
  LeRobot writes them.

The stages that write one output file each are in `pipeline/stages/convert.py`, the stream copies in
`pipeline/video/remux.py`, the job (plan -> engine -> reduce -> publish, `prep convert` and
`prep reencode --format`) in `pipeline/jobs/convert.py`. Nothing here imports Dask.
"""
