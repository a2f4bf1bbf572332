"""Where a row came from: the package version and commit, torch, the accelerator, the CPU and the
thread count, stamped on every result row (``rows.row_files``) as lm-eval stamps its results
JSON, so that two numbers that differ can be traced to code or machine. A row that already
carries them (rows copied into a report) keeps its own."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

COLUMNS = ("depthbench_version", "git_commit", "torch_version", "accelerator", "cpu_model",
           "threads")


@functools.cache
def _git_commit() -> str:
    """The commit of the checkout the package runs from ("+dirty" when tracked files differ from
    it; "" for an installed wheel or where git is missing)."""
    here = Path(__file__).resolve().parent.parent
    if not (here / ".git").exists():
        return ""
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode:
            return ""
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=30).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + ("+dirty" if dirty else "")


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def _accelerator() -> str:
    import torch
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "none"


def provenance() -> dict:
    """The provenance columns of a row written now."""
    import torch

    from depthbench.version import __version__
    return {"depthbench_version": __version__, "git_commit": _git_commit(),
            "torch_version": torch.__version__, "accelerator": _accelerator(),
            "cpu_model": _cpu_model(), "threads": torch.get_num_threads()}
