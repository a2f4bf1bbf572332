"""``depthbench generate``: the generator's dataset written into place atomically.

The files are written into a temporary sibling directory that is renamed into place only when
complete, so an error or interrupt never leaves a half-written dataset at ``out``; ``--force``
replaces only a depthbench dataset."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from depthbench.data_gen import GenConfig, generate_into
from depthbench.errors import UserError
from depthbench.fsio import check_replaceable, replaced_dir


def generate(cfg: GenConfig, out: str | Path, *, force: bool = False,
             progress: Callable[[int], None] | None = None) -> dict:
    """Write the dataset of ``cfg`` to ``out`` and return its manifest (with ``seconds``); one
    writer at a time."""
    from depthbench.fsio import writer_lock
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    with writer_lock(out, "dataset"):
        return _generate(cfg, out, force, progress)


def _generate(cfg: GenConfig, out: Path, force: bool, progress) -> dict:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(p.name != ".lock" for p in out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty; pass --force to replace it or choose "
                              "another --out")
    try:
        check_replaceable(out, "dataset")
    except UserError:
        raise FileExistsError(f"{out} is not empty and not a depthbench dataset (no marker, or "
                              "files its manifest does not list); --force only replaces a "
                              "depthbench dataset: choose another --out") from None
    with replaced_dir(out, "dataset") as tmp:
        t0 = time.perf_counter()
        manifest = generate_into(cfg, tmp, progress)
        seconds = time.perf_counter() - t0
    return {**manifest, "seconds": seconds}
