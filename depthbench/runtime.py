"""Where code runs: the distributed group (from torchrun's environment only), the device and
autocast dtype (decided here, once, with the reason), and CPU threads."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import torch
import torch.distributed as dist

from depthbench.errors import UserError


@dataclass
class Runtime:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    autocast_dtype: torch.dtype | None
    reason: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def all_sum(self, values: list[float]) -> list[float]:
        """Sum plain numbers across ranks (float64, so counts and sums stay exact)."""
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def barrier(self):
        if self.world > 1:
            dist.barrier()


# On a CPU, compiling the blocks (inductor's C++ kernels) costs about 20 s cold and 2-3 s from
# the on-disk cache that every process of a grid shares, and saves 10-30% of a tiny step
# (benchmarks/bench_train.py --compile, docs/benchmarks/compile.json): it repays itself from
# about this many steps even cold
CPU_COMPILE_MIN_STEPS = 1000


def compiles(asked: bool, steps: int, device_type: str) -> tuple[bool, str]:
    """Whether a run of ``steps`` steps compiles its blocks, and why: asked for (the train
    config's ``compile``), and on a CPU only where the run is long enough to repay compiling and
    a C++ compiler is there. A pure function of the config and the machine, so that runs
    sharing a prefix compile alike (``train.updates.shared_steps``)."""
    if not asked:
        return False, "eager"
    if device_type == "cpu":
        if steps < CPU_COMPILE_MIN_STEPS:
            return False, (f"eager ({steps} steps do not repay compiling on a CPU; from "
                           f"{CPU_COMPILE_MIN_STEPS})")
        if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
            return False, "eager (no C++ compiler for inductor's CPU kernels)"
    return True, "compiled blocks"


def cuda_available() -> bool:
    """Whether a CUDA GPU is visible (the pipeline asks before its first stage)."""
    return torch.cuda.is_available()


def setup(device: str = "auto", threads: int = 0) -> Runtime:
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        bf16 = torch.cuda.is_bf16_supported()
        dtype = torch.bfloat16 if bf16 else None
        reason = f"CUDA GPU {torch.cuda.get_device_name(dev)}: " + (
            "bf16 autocast" if bf16 else "fp32 (no bf16 support)")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        dev, dtype = torch.device("cpu"), None
        # a lone tiny run is faster on all cores (bench_train.py: 70 vs 97 ms/step on 2 cores),
        # but parallel workers (the pipeline's pool, torchrun's ranks) run 1 thread each
        if threads:
            torch.set_num_threads(threads)
        reason = f"CPU, fp32, {torch.get_num_threads()} thread(s)"
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        reason += f", DDP over {world} processes ({dist.get_backend()})"
    return Runtime(rank, world, local_rank, dev, dtype, reason)


def teardown(rt: Runtime) -> None:
    if rt.world > 1 and dist.is_initialized():
        dist.destroy_process_group()


def hold_freed_memory() -> bool:
    """On glibc, serve blocks up to 32 MiB from the heap and keep what is freed there, so a
    launch's activations reuse pages instead of being mapped, zero-filled and unmapped again.
    glibc's adaptive mmap threshold otherwise makes a launch's cost depend on which sizes were
    allocated and freed before it: serving modes measured side by side moved by 10-15% in time
    per row with the modes run beside them. True when the allocator took the settings."""
    import ctypes
    import platform
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    return all(libc.mallopt(opt, val) == 1 for opt, val in (
        (m_mmap_threshold, 32 << 20), (m_trim_threshold, 1 << 30), (m_top_pad, 64 << 20)))


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """Contiguous [lo, hi) of n rows for this rank (sizes differ by at most one)."""
    return n * rank // world, n * (rank + 1) // world
