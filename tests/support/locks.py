"""An output folder's lock as a test sees it: `<out>/prep/output.lock`, a JSON record of its holder.

- `holder(path)`: the record a lock file holds ({} when it is absent or not a JSON object yet);
- `stale_lock(out)`: plant the lock of a holder that has exited (a reaped pid on this host, started in 2020);
  returns that pid;
- `dead_pid()`: the pid of a process that has exited and been reaped.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

LOCK_REL = "prep/output.lock"  # written out, not imported: the tests pin the path users see


def holder(path: Path) -> dict[str, Any]:
    """The holder record in lock file `path` ({} when absent, unreadable or not a JSON object)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def stale_lock(out: Path) -> int:
    """A lock at `<out>/prep/output.lock` left by a holder that is gone; returns its pid."""
    pid = dead_pid()
    (out / "prep").mkdir(parents=True, exist_ok=True)
    (out / LOCK_REL).write_text(json.dumps({"pid": pid, "host": socket.gethostname(),
                                            "started_utc": "2020-01-01T00:00:00+00:00"}) + "\n")
    return pid
