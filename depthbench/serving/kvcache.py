"""KV storage for depth-adaptive decoding, and the policies for the looped layers.

One preallocated tensor pair holds every slot: ``k[slot, row, head, position, :]``. A row is a
request's place in the batch; a slot is one layer's cache (prelude and coda layers have one
each; the core layers have as many as the policy says). What a token at loop i reads from an
earlier token at core layer j:

    depth_indexed      slot (j, i): one per loop, as in training. A token that exits at depth
                       d < max_depth copies its depth-d KV into slots (j, d+1..max_depth).
    single             slot (j): the earlier token's last state (its exit state).
    first_then_shared  slot (j, first) at loop 1, slot (j, shared) after; a token that exits at
                       depth 1 copies its loop-1 KV into the shared slot.

Only ``depth_indexed`` reproduces the training-time computation at full depth; the others use
less memory (slots per core layer: max_depth, 1 and 2).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from depthbench.config import KV_POLICIES, ModelConfig  # noqa: F401  (re-exported)


def copies_on_exit(policy: str, max_depth: int, depths) -> int:
    """Per core layer, how many (slot, position) entries ``copy_on_exit`` writes for tokens
    that exited at ``depths``."""
    d = np.asarray(depths, dtype=np.int64)
    if policy == "depth_indexed":
        return int((max_depth - d).sum())
    return int((d == 1).sum()) if policy == "first_then_shared" else 0


class SlotView:
    """What one attention call sees: per batch row a (slot, row, position) to write its new
    keys and values at, and the cached keys and values of positions 0..position to read."""

    def __init__(self, store: KVStore, slots: torch.Tensor, rows: torch.Tensor,
                 pos: torch.Tensor, length: int):
        self.store, self.slots, self.rows, self.pos, self.length = store, slots, rows, pos, length

    def extend(self, k: torch.Tensor, v: torch.Tensor):
        """k, v: (B, H, T, dh) for T new positions pos..pos+T-1 of each row."""
        st = self.store
        T = k.shape[2]
        if T == 1:
            st.k[self.slots, self.rows, :, self.pos] = k[:, :, 0]
            st.v[self.slots, self.rows, :, self.pos] = v[:, :, 0]
        else:  # prefill: every row writes positions 0..T-1
            assert int(self.pos.max()) == 0
            st.k[self.slots, self.rows, :, :T] = k
            st.v[self.slots, self.rows, :, :T] = v
        L = self.length
        return st.k[self.slots, self.rows, :, :L], st.v[self.slots, self.rows, :, :L]  # (B, H, L, dh)


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class KVStore:
    def __init__(self, cfg: ModelConfig, policy: str, max_depth: int, n_rows: int, max_len: int,
                 device, dtype=torch.float32):
        if policy not in KV_POLICIES:
            from depthbench.errors import UserError
            raise UserError(f"unknown KV policy {policy!r}; choose one of {', '.join(KV_POLICIES)}")
        self.cfg, self.policy, self.max_depth = cfg, policy, max_depth
        per_core = {"depth_indexed": max_depth, "single": 1, "first_then_shared": 2}[policy]
        self.per_core = per_core
        self.n_slots = cfg.n_prelude + cfg.n_core * per_core + cfg.n_coda
        H, dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        shape = (self.n_slots, n_rows, H, max_len, dh)
        need = 2 * math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        free = _free_bytes(torch.device(device))
        if need > 0.8 * free:
            from depthbench.errors import UserError
            raise UserError(f"the KV store needs {need / 2**30:.1f} GiB ({self.n_slots} slots x "
                            f"{n_rows} rows x {max_len} positions) but {free / 2**30:.1f} GiB is "
                            "free; lower --width, --max-depth or the sequence length")
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    # ---- slot numbering ---------------------------------------------------------------------------
    def prelude_slot(self, j: int) -> int:
        return j

    def coda_slot(self, j: int) -> int:
        return self.cfg.n_prelude + self.cfg.n_core * self.per_core + j

    def core_slots(self, j: int, loops: torch.Tensor) -> torch.Tensor:
        """Slots of core layer j for items at 1-based ``loops``."""
        base = self.cfg.n_prelude + j * self.per_core
        if self.policy == "depth_indexed":
            return base + loops - 1
        if self.policy == "single":
            return torch.full_like(loops, base)
        return base + (loops > 1).long()

    def copy_on_exit(self, rows: torch.Tensor, pos: torch.Tensor, depth: list[int]) -> None:
        """Fill the deeper core slots of tokens that exited early (depth_indexed: loops
        d+1..max_depth; first_then_shared: the shared slot after an exit at loop 1). ``single``
        already holds the exit state. ``depth`` is on the host: nothing is read back."""
        if self.policy == "single" or not depth:
            return
        d = np.asarray(depth, dtype=np.int64)
        n_extra = self.max_depth - d if self.policy == "depth_indexed" else (d == 1).astype(np.int64)
        if int(n_extra.sum()) == 0:
            return
        item = np.repeat(np.arange(len(d)), n_extra)
        start = np.repeat(np.cumsum(n_extra) - n_extra, n_extra)
        dst_loop = d[item] + 1 + np.arange(len(item)) - start
        dev = rows.device
        item_t = torch.from_numpy(item).to(dev)
        src_loop, dst_loop = torch.from_numpy(d[item]).to(dev), torch.from_numpy(dst_loop).to(dev)
        r, p = rows[item_t], pos[item_t]
        for j in range(self.cfg.n_core):
            src, dst = self.core_slots(j, src_loop), self.core_slots(j, dst_loop)
            self.k[dst, r, :, p] = self.k[src, r, :, p]
            self.v[dst, r, :, p] = self.v[src, r, :, p]
