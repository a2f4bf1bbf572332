"""KV storage for depth-adaptive decoding, and the policies for the looped layers.

One preallocated tensor pair holds every slot: ``k[slot, row, position, head, :]``. A row is a
request's place in the batch; a slot is one layer's cache (prelude and coda layers have one
each; a core layer has N private slots, one per loop 1..N, and possibly one shared slot).
The store also keeps, per (row, position), the depth its token exited at (``max_depth`` while
it is in flight). What a token at loop i reads from an earlier token t at core layer j, with
d_t its exit depth and e = min(i, d_t):

    depth_indexed        private slot e (N = max_depth): as in training; nothing is copied,
                         the read picks the slot per position
    last_exited          the same values, laid out by copying: a token that exits at d copies
                         its depth-d KV into slots d+1..max_depth, and reads take slot i
    skip_exited          private slot i, and a token that exited before loop i is left out of
                         the attention at loop i (d_t < i is masked), as the original Huginn
                         code's default cache does with early exits
    single               the shared slot: the earlier token's last state (N = 0)
    first_then_shared:N  private slot e if e <= N, else the shared slot (N = 1 without :N)

A token at loop i writes private slot i if i <= N, else the shared slot. Only the depth-indexed
layouts reproduce the training-time computation at full depth; the others use less memory
(slots per core layer: max_depth, 1 and N + 1).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from depthbench.config import (  # noqa: F401  (KV_POLICIES, copies_on_exit: re-exported)
    KV_POLICIES,
    LoopShape,
    copies_on_exit,
    kv_layout,
)


class SlotView:
    """What one attention call sees: per batch row a (slot, row, position) to write its new
    keys and values at, and the cached keys and values of positions 0..length-1 to read, from
    the row's slot or, with ``read_slots`` (B, length), from a slot per position."""

    def __init__(self, store: KVStore, slots: torch.Tensor, rows: torch.Tensor,
                 pos: torch.Tensor, length: int, read_slots: torch.Tensor | None = None):
        self.store, self.slots, self.rows, self.pos, self.length = store, slots, rows, pos, length
        self.read_slots = read_slots

    def extend(self, k: torch.Tensor, v: torch.Tensor):
        """k, v: (B, H, T, dh) for T new positions pos..pos+T-1 of each row. Writes and reads go
        through one flat index over (slot, row, position) of the store (``KVStore.flat``): one
        ``index_select`` per read instead of indexing three dimensions of a 5-D tensor."""
        st = self.store
        B, H, T, dh = k.shape
        k, v = k.transpose(1, 2), v.transpose(1, 2)                       # (B, T, H, dh)
        base = st.flat(self.slots, self.rows)                             # (B,)
        at = (base + self.pos)[:, None] + st.positions[None, :T]          # (B, T)
        st.kf.index_copy_(0, at.reshape(-1), k.reshape(B * T, H, dh))
        st.vf.index_copy_(0, at.reshape(-1), v.reshape(B * T, H, dh))
        L = self.length
        if self.read_slots is None:
            idx = base[:, None] + st.positions[None, :L]
        else:
            idx = st.flat(self.read_slots, self.rows[:, None]) + st.positions[None, :L]
        idx = idx.reshape(-1)
        ks = st.kf.index_select(0, idx).view(B, L, H, dh)
        vs = st.vf.index_select(0, idx).view(B, L, H, dh)
        return ks.transpose(1, 2), vs.transpose(1, 2)                     # (B, H, L, dh)


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class KVStore:
    def __init__(self, cfg: LoopShape, policy: str, max_depth: int, n_rows: int, max_len: int,
                 device, dtype=torch.float32):
        from depthbench.config import ConfigError
        from depthbench.errors import UserError
        try:
            self.n_private, self.shared, self.copies = kv_layout(policy, max_depth)
        except ConfigError as e:
            raise UserError(str(e)) from None
        self.cfg, self.policy, self.max_depth = cfg, policy, max_depth
        self.per_core = self.n_private + int(self.shared)
        self.n_slots = cfg.n_prelude + cfg.n_core * self.per_core + cfg.n_coda
        H, dh = cfg.n_kv_heads, cfg.head_dim   # grouped-query models cache their KV heads
        shape = (self.n_slots, n_rows, max_len, H, dh)
        need = 2 * math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        free = _free_bytes(torch.device(device))
        if need > 0.8 * free:
            raise UserError(f"the KV store needs {need / 2**30:.1f} GiB ({self.n_slots} slots x "
                            f"{n_rows} rows x {max_len} positions) but {free / 2**30:.1f} GiB is "
                            "free; lower --width, --max-depth or the sequence length")
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.kf, self.vf = self.k.view(-1, H, dh), self.v.view(-1, H, dh)   # (slot, row, pos) flat
        self.n_rows = n_rows
        self.depth = torch.full((n_rows, max_len), max_depth, device=device, dtype=torch.long)
        self.positions = torch.arange(max_len, device=device)
        self.max_len = max_len
        # skip_exited reads slot i and masks the tokens that never reached it
        self.skips = policy == "skip_exited"
        # per-position reads are needed where a read's slot depends on the earlier token's exit
        self.per_position = not self.copies and 0 < self.n_private and not self.skips

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def flat(self, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The flat index of position 0 of (slot, row) in ``kf``/``vf``."""
        return (slots * self.n_rows + rows) * self.max_len

    # ---- slot numbering ---------------------------------------------------------------------------
    def prelude_slot(self, j: int) -> int:
        return j

    def coda_slot(self, j: int) -> int:
        return self.cfg.n_prelude + self.cfg.n_core * self.per_core + j

    def _rel(self, loops: torch.Tensor) -> torch.Tensor:
        """Slot within a core layer's group for 1-based ``loops`` (any shape)."""
        return torch.where(loops <= self.n_private, loops - 1, torch.full_like(loops, self.n_private))

    def core_slots(self, j: int, loops: torch.Tensor) -> torch.Tensor:
        """Write slots of core layer j for items at 1-based ``loops``."""
        return self.cfg.n_prelude + j * self.per_core + self._rel(loops)

    def read_rel(self, rows: torch.Tensor, loops: torch.Tensor, L: int) -> torch.Tensor | None:
        """(B, L) slots within a core layer's group that items at ``loops`` read for positions
        0..L-1 (None where every position reads the row's write slot)."""
        if not self.per_position:
            return None
        return self._rel(torch.minimum(loops[:, None], self.depth[rows, :L]))

    def core_read_slots(self, j: int, rel: torch.Tensor | None) -> torch.Tensor | None:
        return None if rel is None else self.cfg.n_prelude + j * self.per_core + rel

    def core_mask(self, rows: torch.Tensor, loops: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The attention mask (B, 1, 1, L) of the core layers for items at ``loops``: ``mask``,
        less (``skip_exited``) the positions whose token exited before the item's loop (a token
        in flight counts as max_depth, so an item always sees itself)."""
        if not self.skips:
            return mask
        L = mask.shape[-1]
        return mask & (self.depth[rows, :L] >= loops[:, None])[:, None, None, :]

    # ---- exits ----------------------------------------------------------------------------------------
    def reset(self, rows: torch.Tensor, pos: torch.Tensor | None = None) -> None:
        """Mark positions in flight (reads take the reader's own loop): a token's position at
        its start, or (``pos`` None) every position of newly admitted rows."""
        if pos is None:
            self.depth[rows] = self.max_depth
        else:
            self.depth[rows, pos] = self.max_depth

    def record_exit(self, rows: torch.Tensor, pos: torch.Tensor, depth: list[int]) -> None:
        """Note the exit depths of tokens (host list): the depth-indexed reads use them;
        ``last_exited`` copies the exit-state KV into the deeper slots instead."""
        if not depth:
            return
        if not self.copies:
            self.depth[rows, pos] = torch.tensor(depth, device=rows.device)
            return
        d = np.asarray(depth, dtype=np.int64)
        n_extra = self.max_depth - d
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
            self.k[dst, r, p] = self.k[src, r, p]
            self.v[dst, r, p] = self.v[src, r, p]
