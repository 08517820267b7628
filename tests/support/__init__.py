"""What the tests share: one home for running prep, comparing trees and videos, building datasets, and the
fault, safety and cluster harnesses. tests/ is on sys.path (pyproject's `pythonpath`), so `from support.cli
import run_prep`.

- cli: `run_prep(*args, backend=, env=, timeout=, cwd=, inprocess=)` (in this process when safe, else a
  child), `said(r)` for assertion messages, `prep_cmd`/`child_env` for a child of this checkout;
- trees: `tree` (sha256 per file), `snapshot`/`changed` (entries with mode, mtime, bytes), `disk_bytes`;
- media: `packets`, `payloads`, `episode_payloads`, `decoded`, `frame_hashes`, `psnr`;
- datasets: synthetic v2.1/v3.0 builders (`synth`, `small`) and the real fixture (`real_fixture`, a copy);
- locks: an output lock's `holder`, a `stale_lock`, `dead_pid`; tmpfs: `require_tmpfs`, `tmpfs`, `remount`;
- faults, safety, strace: the fault-injection and safety suites' harness (real processes, on purpose);
- cluster: a real `dask scheduler` + `dask worker` cluster on loopback; inject: one precise fault in a copy
  of a dataset; legacy_metadata: the per-record metadata readers the columnar ones must equal;
  parquet_footer: rewrite a parquet footer's row counts;
- s3: a real S3 server (moto) on loopback that counts requests and bytes, and broken endpoints.
"""
