"""Writing files so that a crash, a full disk or a second writer never leaves a half-written
output: atomic file writes, atomic directory replacement, and one writer per directory.
Torch-free (reports and result rows use it)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from pathlib import Path

from depthbench.errors import UserError

LOCK_NAME = ".lock"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename over ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


@contextlib.contextmanager
def replaced_dir(out: str | Path):
    """Yield a temporary sibling directory to fill; on success it replaces ``out`` whole (the
    old content is kept until the new one is in place), on any error or interrupt it is
    removed and ``out`` is left as it was."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a directory; choose another output path")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class DirLock:
    """An exclusive lock on a run or experiment directory: a second writer is refused at once
    with the holder's pid. The lock is ``flock`` on ``DIR/.lock``, so the kernel releases it
    when the holder exits, however it exits (no stale locks after a crash)."""

    def __init__(self, directory: str | Path, what: str = "directory"):
        self.dir, self.what, self.fd = Path(directory), what, None

    def __enter__(self) -> DirLock:
        if self.dir.exists() and not self.dir.is_dir():
            raise UserError(f"{self.dir} is a file; choose a directory for the {self.what}")
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise UserError(f"{self.what} {self.dir} is being written by another depthbench "
                                f"process (pid {holder}); wait for it to finish or choose "
                                "another output directory") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def is_empty_dir(d: Path) -> bool:
    """No entries other than the lock file."""
    return not any(p.name != LOCK_NAME for p in Path(d).iterdir())
