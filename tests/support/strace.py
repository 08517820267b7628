"""Every path a prep run writes, as the kernel saw it: the run under `strace -f -ff -y -e trace=%file`, each
successful write-like call (open/openat/creat with a write or create flag, mkdir, rename, link, symlink,
unlink, rmdir, truncate, chmod, utime, mknod) parsed to absolute paths and sorted into:

- `allowed`: under the paths the case may write (its `--out`, the report's folder);
- `temp`: under the run's private temp folder ($TMPDIR, set to `<work>/tmp` for the run: e.g. the source
  check's spool table);
- `source`: under the source dataset (must be none);
- `outside`: under the case's work folder but not allowed (must be none);
- `system`: anywhere else (Python's multiprocessing semaphores in /dev/shm, /dev/null, ...): listed, so that
  a reader sees every one of them.

Used by tests/test_safety_strace.py and bench/strace_writes.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
ONE_PATH = {"mkdir", "mkdirat", "unlink", "unlinkat", "rmdir", "truncate", "chmod", "fchmodat", "fchmodat2",
            "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat", "creat", "chown", "lchown", "fchownat",
            "setxattr", "lsetxattr", "removexattr", "lremovexattr"}
TWO_PATHS = {"rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat"}
CALL_RE = re.compile(r"^(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?)(?:<(?P<opened>.*)>)?")
# an argument: a dirfd with its path (`AT_FDCWD</cwd>`, `5</dir>`), a quoted string, or anything else
ARG_RE = re.compile(r'(?:AT_FDCWD|\d+)<(?:[^>\\]|\\.)*>|"(?:[^"\\]|\\.)*"|[^,]+')


def available() -> bool:
    return shutil.which("strace") is not None


def _unquote(text: str) -> str:
    return text[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "surrogateescape")


def _fd_path(arg: str) -> str | None:
    m = re.fullmatch(r"(?:AT_FDCWD|\d+)<(.*)>", arg.strip())
    return m.group(1) if m else None


def _resolve(dirfd: str | None, path: str, cwd: str) -> str:
    if path.startswith("/"):
        return os.path.normpath(path)
    base = _fd_path(dirfd) if dirfd is not None else None
    return os.path.normpath(os.path.join(base or cwd, path))


def written_paths(line: str, cwd: str) -> list[str]:
    """The absolute paths a successful write-like call in one strace line changes (empty for anything else)."""
    m = CALL_RE.match(line.strip())
    if not m or m.group("ret") == "?" or int(m.group("ret")) < 0:
        return []
    name = m.group("name")
    args = [a.strip() for a in ARG_RE.findall(m.group("args"))]
    quoted = [(i, a) for i, a in enumerate(args) if a.startswith('"')]
    if not quoted:
        return []
    if name in ("open", "openat", "openat2"):
        flags = args[quoted[0][0] + 1] if quoted[0][0] + 1 < len(args) else ""
        if not any(f in flags for f in WRITE_FLAGS):
            return []
    elif name not in ONE_PATH and name not in TWO_PATHS:
        return []
    if name in ("open", "openat", "openat2", "creat") and m.group("opened"):
        return [os.path.normpath(m.group("opened"))]  # the file the kernel opened (a link's target, not the link)
    out = []
    for i, q in quoted[: 2 if name in TWO_PATHS else 1]:
        if name in ("symlink", "symlinkat") and i == 0:
            continue  # the link's target text is not written
        dirfd = args[i - 1] if i > 0 and _fd_path(args[i - 1]) is not None else None
        out.append(_resolve(dirfd, _unquote(q), cwd))
    return out


@dataclass
class Traced:
    case: str
    command: list[str]
    exit: int
    allowed: list[str] = field(default_factory=list)
    temp: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    system: list[str] = field(default_factory=list)
    calls: int = 0

    def summary(self) -> dict[str, object]:
        return {"case": self.case, "command": self.command, "exit": self.exit, "write_calls": self.calls,
                "allowed_paths": len(self.allowed), "temp_paths": len(self.temp), "source_writes": self.source,
                "outside_writes": self.outside,
                "system_writes": self.system}


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def trace(case: str, args: list[str], *, allowed: list[Path], source: Path, work: Path, cwd: Path | None = None,
          timeout: float = 600) -> Traced:
    """Run `prep ARGS` under strace and sort every path it wrote (see the module)."""
    cwd = cwd or work
    logs = Path(tempfile.mkdtemp(prefix="prep-strace-"))
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp)}
    cmd = ["strace", "-f", "-ff", "-y", "-qq", "-s", "4096", "-e", "trace=%file", "-o", str(logs / "trace"),
           sys.executable, "-m", "pipeline.cli", *args]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        result = Traced(case, ["prep", *args], r.returncode)
        ok = [os.path.realpath(p) for p in allowed]
        src = [os.path.realpath(source)]
        wk = [os.path.realpath(work)]
        private = [os.path.realpath(tmp)]
        seen: dict[str, set[str]] = {"allowed": set(), "temp": set(), "source": set(), "outside": set(),
                                     "system": set()}
        for log in sorted(logs.iterdir()):
            for line in log.read_text(errors="replace").splitlines():
                for path in written_paths(line, str(cwd)):
                    result.calls += 1
                    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
                    kind = ("allowed" if _under(real, ok) else "temp" if _under(real, private)
                            else "source" if _under(real, src)
                            else "outside" if _under(real, wk) else "system")
                    seen[kind].add(real)
        result.allowed, result.source = sorted(seen["allowed"]), sorted(seen["source"])
        result.temp = sorted(seen["temp"])
        result.outside, result.system = sorted(seen["outside"]), sorted(seen["system"])
        return result
    finally:
        shutil.rmtree(logs, ignore_errors=True)
