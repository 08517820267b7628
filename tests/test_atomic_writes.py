"""pipeline/atomic.py as the one place for write errors: which OSErrors become a one-line WriteError (and
which stay, e.g. a source that cannot be read), what the line says, and that it crosses a process boundary."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from pipeline import atomic, lock
from pipeline.atomic import WriteError


def test_a_full_disk_names_the_target_and_its_filesystem(tmp_path: Path) -> None:
    target = tmp_path / "out/x.parquet"
    with pytest.raises(WriteError) as info, atomic.writing(target):
        # shutil.copyfile's ENOSPC names the source as filename and the target as filename2
        raise OSError(errno.ENOSPC, "No space left on device", "/src/data/x.parquet", None, str(target))
    msg = str(info.value)
    assert msg.startswith(f"cannot write {target}: No space left on device (the output disk ")
    assert "/src/" not in msg and "bytes free)" in msg
    assert info.value.exit_code == atomic.WRITE_EXIT == 3


def test_an_error_about_another_file_is_not_a_write_error(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), atomic.writing(tmp_path / "out.json"):
        raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere/source.json")


def test_errors_that_are_not_about_writing_pass_through(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), atomic.writing(tmp_path / "out.json"):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "out.json"))


def test_write_error_pickles_intact() -> None:
    err = WriteError("cannot write /x: Read-only file system", "/x", errno.EROFS)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.path, back.errno, back.exit_code) == (str(err), "/x", errno.EROFS, 3)


def test_atomic_write_onto_a_folder(tmp_path: Path) -> None:
    (tmp_path / "report.json").mkdir()
    with pytest.raises(WriteError, match=r"cannot write .*report\.json: "):
        atomic.write_json(tmp_path / "report.json", {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_check_target_and_writable(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match="a folder is in the way"):
        atomic.check_target(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(WriteError, match=r"cannot write .*/f/sub: Not a directory"):
        atomic.check_writable(tmp_path / "f" / "sub")
    atomic.check_writable(tmp_path / "new/deeper")
    assert (tmp_path / "new/deeper").is_dir() and not list((tmp_path / "new/deeper").iterdir())
    atomic.check_writable(tmp_path / "not/made", create=False)
    assert not (tmp_path / "not").exists()


def test_a_lock_that_cannot_be_written_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "prep/output.lock"
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(WriteError, match="No space left on device"), lock.exclusive_lock(path, "output"):
        pass
    assert not path.exists()


def test_a_held_lock_is_refused_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "reencode.lock"
    lock.refuse_if_held(path, "output")  # no file: nothing to refuse, nothing created
    assert not path.exists()
    # flock is per open file description: a second open in this process conflicts like another run
    with lock.exclusive_lock(path, "output"), pytest.raises(lock.LockedError, match="in use by another prep run"):
        lock.refuse_if_held(path, "output")
    lock.refuse_if_held(path, "output")
