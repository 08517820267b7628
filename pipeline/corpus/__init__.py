"""Many datasets, one corpus (docs/corpus.md).

- `spec`: the corpus description (`corpus.toml`, or the datasets named on the command line): entries with a
  source, a name, a mixture weight, a label and a camera mapping; validated against schemas/corpus.schema.json.
  Light and low in the layers (base and storage only): the jobs import it.
- `manifest`: the corpus manifest (one row per dataset plus totals, JSON and Parquet) reduced from the
  per-dataset manifests, one dataset at a time.
- `report`, `plots`: the corpus report (Markdown and PNG plots).

This package's `__init__` imports nothing: `pipeline.corpus.spec` sits in layer 1, the rest in layer 7
(bench/architecture.py).
"""
