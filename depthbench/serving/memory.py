"""The device memory serving has: the weights' bytes, the KV bytes of a layout, and the block pool
paged admission works with (what fits in a profile's memory: ``serving.profile``).

Paged KV: a device's KV memory as a pool of blocks of ``block_size`` positions, each request
holding the blocks its positions fill (vLLM's block manager, as the scheduler needs it). A
request is admitted only where the blocks of what its prefill writes are free, beyond a
watermark of ``WATERMARK`` of the pool (none where nothing else is resident, so that a request
that fits the whole pool always runs); a token takes the block its position falls in when it
starts; a finished or preempted request frees its blocks. Under KV pressure the scheduler
preempts (``Scheduler._reserve``), and the preempted request is recomputed from its prompt and
its output so far on readmission, as vLLM's recompute preemption does. Torch-free.
"""

from __future__ import annotations

import math

from depthbench.config import LoopShape, ModelConfig, kv_layout, shape_of

WATERMARK = 0.01   # of the pool's blocks kept free at admission (vLLM's default watermark)


class BlockPool:
    """``n_blocks`` blocks of ``block_size`` KV positions, held per request id."""

    def __init__(self, n_blocks: int, block_size: int, watermark: float = WATERMARK):
        assert n_blocks >= 1 and block_size >= 1
        self.n_blocks, self.block_size = n_blocks, block_size
        self.watermark = math.ceil(watermark * n_blocks)
        self.held: dict[int, int] = {}
        self.free = n_blocks
        self.peak = 0   # the most blocks held at once

    def blocks(self, positions: int) -> int:
        """Blocks that hold ``positions`` KV positions."""
        return -(-positions // self.block_size)

    def can_admit(self, positions: int, alone: bool) -> bool:
        """Whether a request whose prefill writes ``positions`` positions may be admitted: its
        blocks free beyond the watermark (``alone``: nothing else resident, no watermark)."""
        return self.blocks(positions) <= self.free - (0 if alone else self.watermark)

    def take(self, key: int, positions: int) -> bool:
        """Grow ``key``'s blocks to hold ``positions`` positions; False, taking nothing, where
        the blocks it lacks are not free."""
        extra = self.blocks(positions) - self.held.get(key, 0)
        if extra > self.free:
            return False
        if extra > 0:
            self.held[key] = self.held.get(key, 0) + extra
            self.free -= extra
            self.peak = max(self.peak, self.n_blocks - self.free)
        return True

    def release(self, key: int) -> None:
        self.free += self.held.pop(key, 0)


def weight_bytes(cfg: ModelConfig | LoopShape, bytes_per_value: int) -> int:
    """The weights' bytes: every stage's matmul parameters (the core once: its loops share it)
    and the embeddings."""
    s = shape_of(cfg)
    params = (s.prelude_params + s.core_params + s.coda_params + s.head_params + s.gate_params
              + s.vocab_size * s.d_model)
    return params * bytes_per_value


def kv_bytes(cfg: ModelConfig | LoopShape, policy: str, max_depth: int, rows: int, max_len: int,
             bytes_per_value: int) -> int:
    s = shape_of(cfg)
    n_private, shared, _ = kv_layout(policy, max_depth)
    slots = s.n_prelude + s.n_core * (n_private + int(shared)) + s.n_coda
    return 2 * slots * rows * max_len * s.kv_width * bytes_per_value
