"""Writing files so that a crash, a full disk or a second writer never leaves a half-written
output: atomic file writes, atomic directory replacement, and one writer per directory.
Torch-free (reports and result rows use it)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
from pathlib import Path

from depthbench.errors import UserError

LOCK_NAME = ".lock"
# A directory depthbench made holds this file, naming what it is ({"made_by": "depthbench",
# "kind": ...}); only such a directory (or one holding nothing but what the tool lists it
# wrote) is ever replaced whole. A file name alone (manifest.json, report.json) is no proof.
MARKER = ".depthbench"


def _tmp_sibling(path: Path, what: str = "tmp") -> Path:
    """A fresh hidden sibling whose name is short whatever ``path``'s is (a 255-character name
    still has room for it)."""
    return path.parent / f".db-{what}-{os.getpid()}-{secrets.token_hex(4)}"


def remove_interrupted_writes(d: Path) -> None:
    """Delete the temporary siblings (``_tmp_sibling``) that a killed writer left in ``d``;
    call only while holding ``d``'s lock, so that no live writer owns one."""
    for tmp in Path(d).glob(".db-tmp-*") if Path(d).is_dir() else ():
        tmp.unlink(missing_ok=True)


def atomic_write_many(files: dict) -> None:
    """Write several files so that they appear together or not at all: every one is written to
    a temporary sibling and fsynced first; only then are they renamed into place. A failure
    before the renames leaves every target as it was."""
    items = [(Path(p), data.encode() if isinstance(data, str) else data)
             for p, data in files.items()]
    for path, _ in items:
        if path.is_dir() and not path.is_symlink():
            raise UserError(f"{path} is a directory; choose another output path")
        path.parent.mkdir(parents=True, exist_ok=True)
    tmps: list[Path] = []
    try:
        for path, data in items:
            tmps.append(_tmp_sibling(path))
            with open(tmps[-1], "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for (path, _), tmp in zip(items, tmps):
            os.replace(tmp, path)
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename over ``path``."""
    atomic_write_many({path: data})


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _read_json(path: Path):
    """A JSON file's value, or None where it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _listed(d: Path, kind: str) -> set[str] | None:
    """The files an older depthbench wrote into ``d`` without a marker, as its own index lists
    them (a dataset's manifest, a report's report.json), or None."""
    index = {"dataset": "manifest.json", "text-dataset": "manifest.json",
             "report": "report.json"}.get(kind)
    doc = _read_json(d / index) if index else None
    if not isinstance(doc, dict):
        return None
    if kind in ("dataset", "text-dataset") and isinstance(doc.get("files"), dict):
        return {index, *map(str, doc["files"])}
    if kind == "report" and isinstance(doc.get("figures"), list):
        return {index, "index.html", "README.md", "findings.md", *map(str, doc["figures"]),
                *map(str, doc.get("files", []))}
    return None


def made_by_tool(d: Path, kind: str) -> bool:
    """``d`` is a directory depthbench made as a ``kind`` (its marker says so, or it holds
    nothing but the files its own index lists), so replacing it loses nothing of the user's."""
    return foreign_entry(d, kind) is None


def foreign_entry(d: Path, kind: str) -> str | None:
    """What in ``d`` depthbench did not write as a ``kind`` (None: nothing, so replacing ``d``
    loses nothing of the user's): everything, without its marker or its own index; with a
    marker, a dataset's entry its manifest does not list (a user's notes put inside it)."""
    d = Path(d)
    mark = _read_json(d / MARKER)
    listed = _listed(d, kind)
    if isinstance(mark, dict) and mark.get("made_by") == "depthbench":
        if mark.get("kind") != kind:
            return MARKER
        if kind == "report" or listed is None:
            return None
    if listed is None:
        return next((p.name for p in d.iterdir()), None)
    return next((p.name for p in sorted(d.iterdir()) if p.name not in listed | {LOCK_NAME, MARKER}),
                None)


def check_replaceable(out: Path, kind: str, flag: str = "--out") -> None:
    """Refuse (UserError) an ``out`` that exists and is not an empty directory or a ``kind``
    depthbench made (a symlinked ``out``: the directory it points to)."""
    out = Path(out).resolve() if Path(out).is_symlink() else Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} exists and is not a directory; choose another path")
    if out.is_dir() and not is_empty_dir(out) and (extra := foreign_entry(out, kind)) is not None:
        if (out / MARKER).is_file() and extra != MARKER:
            raise UserError(f"{flag} {out} holds {extra}, which depthbench did not write there; "
                            "replacing the directory would delete it: move it out first or "
                            "choose another directory")
        raise UserError(f"{flag} {out} is not empty and is not a {kind} depthbench made (no "
                        f"{MARKER} marker); depthbench replaces only its own outputs: choose "
                        "an empty or new directory")


@contextlib.contextmanager
def replaced_dir(out: str | Path, kind: str):
    """Yield a temporary sibling directory to fill; on success it replaces ``out`` whole (the
    old content is kept until the new one is in place), on any error or interrupt it is
    removed and ``out`` is left as it was. Only an empty directory or a ``kind`` depthbench
    made is replaced; a symlinked ``out`` keeps its link and gets new content."""
    out = Path(out)
    if out.is_symlink():
        out = out.resolve()
    check_replaceable(out, kind)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(out)
    tmp.mkdir()
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"made_by": "depthbench", "kind": kind}) + "\n")
        if out.exists():
            old = _tmp_sibling(out, "old")
            out.rename(old)
            try:
                tmp.rename(out)
            except BaseException:
                old.rename(out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _hold(lock: Path, what: str, other: str) -> int:
    """An exclusive ``flock`` on ``lock`` (created if missing) stamped with this pid; a second
    holder is refused at once with the holder's pid. The open descriptor is returned."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise UserError(f"{what} is being written by another depthbench process (pid "
                            f"{holder}); wait for it to finish or choose {other}") from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class DirLock:
    """An exclusive lock on a run or experiment directory: a second writer is refused at once
    with the holder's pid. The lock is ``flock`` on ``DIR/.lock``, so the kernel releases it
    when the holder exits, however it exits (no stale locks after a crash)."""

    def __init__(self, directory: str | Path, what: str = "directory"):
        self.dir, self.what, self.fd = Path(directory), what, None
        self.created = False

    def __enter__(self) -> DirLock:
        if self.dir.exists() and not self.dir.is_dir():
            raise UserError(f"{self.dir} is a file; choose a directory for the {self.what}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.created = not (self.dir / LOCK_NAME).exists()
        self.fd = _hold(self.dir / LOCK_NAME, f"{self.what} {self.dir}",
                        "another output directory")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.fd is not None:
            if exc_type is not None and self.created:
                # refused or failed work leaves no lock file in a directory it found
                (self.dir / LOCK_NAME).unlink(missing_ok=True)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def head_text(path: Path, size: int = 1 << 16) -> str:
    """The first ``size`` bytes of a file as text ("" where they are not UTF-8)."""
    with open(path, "rb") as f:
        try:
            return f.read(size).decode()
        except UnicodeDecodeError:
            return ""


def refuse_foreign(paths, ours, flag: str = "--out") -> None:
    """Refuse (UserError) to replace a file the user keeps: every existing, non-empty file among
    ``paths`` must be one depthbench writes there (``ours(path)``: rows of a kind, a trace, a
    record), so a rerun may replace its own outputs and nothing else; and no path may lie under
    a file (it could not be written after the work)."""
    for p in map(Path, paths):
        under = next((q for q in p.parents if q.is_file()), None)
        if under is not None:
            raise UserError(f"{flag} would write {p}, but {under} is a file, not a folder; "
                            "choose another path")
        if p.is_dir():
            raise UserError(f"{flag} would write {p}, which is a directory; choose another path")
        if p.is_file() and p.stat().st_size and not ours(p):
            raise UserError(f"{flag} would replace {p}, which is not a file depthbench wrote; "
                            "move it or choose another path")


@contextlib.contextmanager
def writer_lock(out: str | Path, what: str):
    """One writer at a time of an output directory that is replaced whole (a dataset): a lock
    on ``.NAME.lock`` beside it (the directory itself is swapped in at the end, so it cannot hold
    the lock), taken before anything is checked or written; a second writer is refused at once.
    The lock file is removed when the writer is done."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    side = out.parent / f".{out.name}.lock"
    fd = _hold(side, f"{what} {out}", "another --out")
    try:
        yield
    finally:
        side.unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def is_empty_dir(d: Path) -> bool:
    """No entries other than the lock file."""
    return not any(p.name != LOCK_NAME for p in Path(d).iterdir())


RUN_OWN = ("run.json", "metrics.jsonl", LOCK_NAME, "checkpoints")


def file_record_ok(rec) -> bool:
    """A manifest's entry for one file: {sha256: 64 hex digits, bytes: an integer >= 0}."""
    return (isinstance(rec, dict) and set(rec) == {"sha256", "bytes"}
            and isinstance(rec["sha256"], str) and len(rec["sha256"]) == 64
            and set(rec["sha256"]) <= set("0123456789abcdef")
            and type(rec["bytes"]) is int and rec["bytes"] >= 0)


def refuse_over_inputs(outputs, run=None, data=None, inputs=(), flag: str = "--out",
                       checkpoint=None) -> None:
    """Refuse (UserError) output paths that would land on what a command reads: inside the
    dataset directory ``data`` or the checkpoint folder ``checkpoint``, on the run directory's
    own files (its record, training log, lock and checkpoints) or on any of the input files
    ``inputs``."""
    def real(p):
        return Path(p).resolve()

    folders = [f for f in ((data, "the dataset", "a dataset"),
                           (checkpoint, "the checkpoint directory", "a checkpoint folder")) if f[0]]
    own = [real(run) / n for n in RUN_OWN] if run else []
    ins = {real(p) for p in inputs if p}
    for out in map(real, outputs):
        for d, what, one in folders:
            if real(d) == out or real(d) in out.parents:
                raise UserError(f"{flag} {out} is inside {what} {d}; write results elsewhere "
                                f"({one} holds only its own files)")
        if any(out == o or o in out.parents for o in own) or out in ins:
            raise UserError(f"{flag} {out} would replace a file this command reads (the run's "
                            "record, log or checkpoints, or an input file); choose another path")
