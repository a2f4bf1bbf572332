"""Execution of depth-adaptive decoding on token ids: the engine runs what the scheduler says.

A request owns one row of the KV store from admission to completion and has at most one token
in flight, so a work item is identified by its request's row. Per row the engine keeps the
token's loop state ``S``, its prelude output ``E`` (injected every loop) and the signals the
exit criterion reads. Rows, positions and loop counters are mirrored on the host, so the
scheduler never waits on the device to know what runs next. The launches:

    prefill(rows, prompts)  prompts of any lengths in one right-padded launch through prelude,
                            max_depth loops and coda, filling caches; the first generated token
                            is read out at max_depth
    start(rows, tokens)     embedding + prelude of each row's next token (one batched launch)
    core(rows)              one loop for every given row, each at its own loop index (one
                            batched launch), then the exit decisions; returns the rows that exit
    finish(rows)            coda + head of exited rows, greedy next token, KV of the exit state

Exit depths that the scheduler gives when a token starts (a criterion known in advance:
``fixed``, ``trace``, ``replay``; or every token at max depth in ``static``) are counted on the
host; the others read one flag per row back from the device after the launch (with
``lookahead`` the flag is the previous loop's, already computed when the launch is queued).

Every launch is timed and, with ``record=True``, logged as (stage, rows, tokens, context length,
KV entries copied, seconds): the data ``serve-sim --calibrate`` fits its cost model to.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from depthbench.exits import ExitCriterion
from depthbench.models.looped import LoopedTransformer
from depthbench.serving.executor import Clock, HostState
from depthbench.serving.kvcache import KVStore, SlotView, copies_on_exit


def fires(crit: ExitCriterion, loops: torch.Tensor, sig: dict) -> torch.Tensor:
    """(N,) bool: which items' signal at their loop ``loops`` (1-based, (N,)) says "stop", for a
    criterion read from signals (depths known in advance never get here)."""
    if crit.kind == "latent":
        delta = (sig["state"] - sig["prev_state"]).norm(dim=-1)
        return delta / sig["state"].norm(dim=-1).clamp(min=1e-12) < crit.value
    if crit.kind == "gate":
        return torch.sigmoid(sig["gate"]) > crit.value
    if crit.kind == "qexit":   # the exit distribution's mass up to this loop
        return 1 - sig["survive"] >= crit.value
    logp = torch.log_softmax(sig["logits"].float(), dim=-1)
    if crit.kind == "entropy":
        return -(logp.exp() * logp).sum(-1) < crit.value
    if crit.kind == "kl":
        kl = (logp.exp() * (logp - sig["prev_logp"])).sum(-1)
        return (kl < crit.value) & (loops > 1)  # no previous distribution at loop 1
    assert crit.kind == "argmax", crit.kind
    return sig["argmax_run"] >= crit.value


def decide(crit: ExitCriterion, loops: torch.Tensor, fired: torch.Tensor,
           pending: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exit mask after each item's loop, and the new pending flags (used with lookahead).

    Without lookahead an item exits when its own signal fires; with lookahead it exits one loop
    after its signal fired. Either way the depth stays within [min_depth, max_depth]."""
    stop, new_pending = (pending, fired) if crit.lookahead else (fired, pending)
    stop = (stop & (loops >= crit.min_depth)) | (loops >= crit.max_depth)
    return stop, new_pending


class Engine(HostState):
    def __init__(self, model: LoopedTransformer, criterion: ExitCriterion, kv_policy: str,
                 n_rows: int, max_len: int, device=None, record: bool = False,
                 clock: Clock | None = None, n_prompt_slots: int = 0):
        if not getattr(model, "serves", True):
            from depthbench.errors import UserError
            raise UserError(f"{getattr(model, 'source', 'this model')} runs the evaluators only: "
                            "serving needs the stage methods over depthbench's KV store (serve "
                            "an ouro:, huginn: or depthbench model)")
        super().__init__(criterion, n_rows, record, clock, n_prompt_slots)
        self.model = model.eval()
        self.cfg = model.shape   # any looped model's shape (LoopShape)
        self.device = device or next(model.parameters()).device
        self.device_type = self.device.type
        dtype = next(model.parameters()).dtype
        self.kv = KVStore(self.cfg, kv_policy, self.max_depth, n_rows, max_len, self.device, dtype)
        d, V = self.cfg.d_model, self.cfg.vocab_size
        z = lambda *shape, **kw: torch.zeros(*shape, device=self.device, **kw)  # noqa: E731
        n = n_rows + n_prompt_slots   # work items: the rows' decode tokens, then prompt tokens
        self.S, self.E = z(n, d, dtype=dtype), z(n, d, dtype=dtype)
        self.loop = z(n, dtype=torch.long)
        self.pos = z(n, dtype=torch.long)
        self.row_of = torch.arange(n, device=self.device)
        self.pending = z(n, dtype=torch.bool)
        self.survive = z(n, dtype=torch.float32)   # qexit: prod over loops of (1 - gate prob)
        if criterion.needs_logits:
            self.logits = z(n, V, dtype=dtype)
            self.prev_logp = z(n, V, dtype=torch.float32)
            self.argmax_prev = z(n, dtype=torch.long)
            self.argmax_run = z(n, dtype=torch.long)

    @property
    def kv_nbytes(self) -> int:
        return self.kv.nbytes()

    # ---- helpers ------------------------------------------------------------------------------------
    def _rows(self, rows: list[int]) -> torch.Tensor:
        return torch.tensor(rows, device=self.device, dtype=torch.long)

    def _items(self, items: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(item ids, their KV rows) on the device."""
        it = self._rows(items)
        return it, self.row_of[it]

    def _decode_mask(self, rows_h: list[int], pos: torch.Tensor) -> tuple[torch.Tensor, int]:
        L = self.context(rows_h)
        mask = torch.arange(L, device=self.device)[None, :] <= pos[:, None]  # (B, L)
        return mask[:, None, None, :], L                                      # (B, 1, 1, L)

    def _coda_views(self, rows, pos, L):
        return [SlotView(self.kv, torch.full_like(rows, self.kv.coda_slot(j)), rows, pos, L)
                for j in range(self.cfg.n_coda)]

    def _readout(self, s, rows, pos, mask, L):
        p = pos[:, None]
        return self.model.readout(s[:, None], p, self._coda_views(rows, pos, L), mask)[:, 0]

    # ---- launches -----------------------------------------------------------------------------------
    def admit(self, rows: list[int], prompt_lens: list[int]) -> None:
        super().admit(rows, prompt_lens)
        rows_t = self._rows(rows)
        self.kv.reset(rows_t)
        self.pos[rows_t] = torch.tensor(prompt_lens, device=self.device)

    def place(self, items: list[int], rows: list[int], positions: list[int]) -> None:
        super().place(items, rows, positions)
        it = self._rows(items)
        self.row_of[it] = self._rows(rows)
        self.pos[it] = self._rows(positions)

    @torch.no_grad()
    def prefill(self, rows: list[int], prompts: list[list[int]]) -> list[int]:
        """Run prompts at max_depth in one launch (right-padded to the longest), filling every
        cache slot of their rows; the first generated tokens. Padding positions write cache
        entries that no real token reads: a later token overwrites its position before it
        attends, and attends to nothing after it."""
        t0 = time.perf_counter()
        m, dev = self.model, self.device
        lens = [len(p) for p in prompts]
        T = max(lens)
        idx = torch.tensor([p + [p[-1]] * (T - len(p)) for p in prompts], device=dev)  # (B, T)
        B = len(rows)
        pos = torch.arange(T, device=dev)
        rows_t = self._rows(rows)
        zero = torch.zeros(B, dtype=torch.long, device=dev)
        self.kv.reset(rows_t)

        def views(slot_of_layer, n):
            return [SlotView(self.kv, slot_of_layer(j), rows_t, zero, T) for j in range(n)]

        e = m.embed_prelude(idx, pos, views(lambda j: torch.full_like(rows_t, self.kv.prelude_slot(j)),
                                            self.cfg.n_prelude))
        s = m.initial_state(e, pos)
        for k in range(1, self.max_depth + 1):
            loops = torch.full_like(rows_t, k)
            s = m.core_step(s, e, pos, views(lambda j, lp=loops: self.kv.core_slots(j, lp), self.cfg.n_core))
        last = torch.tensor(lens, device=dev) - 1
        if self.cfg.n_coda:   # the coda fills its caches from every position
            logits = m.readout(s, pos, views(lambda j: torch.full_like(rows_t, self.kv.coda_slot(j)),
                                             self.cfg.n_coda))
            logits = logits[torch.arange(B, device=dev), last]
        else:                 # without a coda only the last real position matters
            logits = m.readout(s[torch.arange(B, device=dev), last][:, None], last[:, None])[:, 0]
        self.pos[rows_t] = torch.tensor(lens, device=dev)
        self.pos_h[rows] = lens
        self.stats.prefills += B
        first = logits.argmax(-1).tolist()
        self.stats.syncs += 1
        self._log("prefill", time.perf_counter() - t0, B, sum(lens), T)
        return first

    @torch.no_grad()
    def start(self, items: list[int], tokens: list[int],
              depths: list[int | None] | None = None) -> None:
        """Embedding and prelude of each item's token at its position (a decode token, or a
        placed prompt token); ``depths``: exit depths where the scheduler knows them (else, or
        for a None entry, the criterion decides)."""
        t0 = time.perf_counter()
        m = self.model
        it, rows_t = self._items(items)
        pos = self.pos[it]
        mask, L = self._decode_mask(items, pos)
        pre = [SlotView(self.kv, torch.full_like(rows_t, self.kv.prelude_slot(j)), rows_t, pos, L)
               for j in range(self.cfg.n_prelude)]
        tok = torch.tensor(tokens, device=self.device, dtype=torch.long)
        e = m.embed_prelude(tok[:, None], pos[:, None], pre, mask)[:, 0]  # (B, C)
        self.E[it] = e
        self.S[it] = m.initial_state(e[:, None], pos[:, None])[:, 0]
        self.loop[it] = 0
        self.pending[it] = False
        self.survive[it] = 1.0
        self._set_target(items, depths)
        if self.crit.needs_logits:
            self.argmax_run[it] = 0
            self.argmax_prev[it] = -1
        self._log("start", time.perf_counter() - t0, len(items), len(items), L,
                  prompt_tokens=self.n_prompt(items))

    @torch.no_grad()
    def core(self, items: list[int]) -> list[int]:
        """One loop for each item (each at its own loop index); the items that exit now."""
        t0 = time.perf_counter()
        m = self.model
        it, rows_t = self._items(items)
        pos = self.pos[it]
        loops = self.loop[it] + 1
        mask, L = self._decode_mask(items, pos)
        s_prev = self.S[it]
        known = self.depths_known(items)
        early = None
        if self.crit.lookahead and not known:
            # the decision for this launch was taken from the previous loop's signal: read it
            # before queuing the launch (it does not wait for this launch's result)
            early = (self.pending[it] & (loops >= self.crit.min_depth)) | (loops >= self.max_depth)
            early = early.tolist()
        rel = self.kv.read_rel(rows_t, loops, L)
        views = [SlotView(self.kv, self.kv.core_slots(j, loops), rows_t, pos, L,
                          self.kv.core_read_slots(j, rel)) for j in range(self.cfg.n_core)]
        s = m.core_step(s_prev[:, None], self.E[it][:, None], pos[:, None], views,
                        self.kv.core_mask(rows_t, loops, mask))[:, 0]
        self.S[it] = s
        self.loop[it] = loops
        self.stats.core_rows += len(items)
        if known:
            exited = self._known_exits(items)
        else:
            self.loop_h[items] += 1
            kn = self.known_h[items]
            if kn.any():   # prompt tokens beside decided ones: signals only for the decided
                u = np.flatnonzero(~kn)
                k = torch.from_numpy(u).to(self.device)
                fired = set(self._decide([items[i] for i in u], it[k], rows_t[k], s[k],
                                         s_prev[k], pos[k], loops[k], mask[k], L,
                                         None if early is None else [early[i] for i in u]))
                exited = [r for r in items if (r in fired if not self.known_h[r]
                                               else self.loop_h[r] >= self.target_h[r])]
            else:
                exited = self._decide(items, it, rows_t, s, s_prev, pos, loops, mask, L, early)
        self._log("core", time.perf_counter() - t0, len(items), len(items), L,
                  prompt_tokens=self.n_prompt(items))
        return exited

    def _decide(self, rows, it, rows_t, s, s_prev, pos, loops, mask, L, early=None) -> list[int]:
        """Exit decisions from signals on the device (items may be at different loops). With
        ``early`` (lookahead) the decision is already known: the signals only set the pending
        flags for the next loop, and nothing is read back."""
        m, crit = self.model, self.crit
        sig = {"state": s, "prev_state": s_prev}
        if crit.needs_gate:
            sig["gate"] = m.gate_logit(s)
        if crit.kind == "qexit":   # the running product Ouro's exit distribution needs
            self.survive[it] = self.survive[it] * (1 - torch.sigmoid(sig["gate"].float()))
            sig["survive"] = self.survive[it]
        if crit.needs_logits:
            logits = self._readout(s, rows_t, pos, mask, L)
            self.logits[it] = logits
            sig["logits"] = logits
            am = logits.argmax(-1)
            run = torch.where(am == self.argmax_prev[it], self.argmax_run[it] + 1,
                              torch.ones_like(am))
            self.argmax_prev[it], self.argmax_run[it] = am, run
            sig["argmax_run"] = run
            sig["prev_logp"] = self.prev_logp[it]
            self.prev_logp[it] = torch.log_softmax(logits.float(), -1)
        stop, self.pending[it] = decide(crit, loops, fires(crit, loops, sig), self.pending[it])
        if early is not None:
            return [r for r, x in zip(rows, early) if x]
        self.stats.syncs += 1
        return [r for r, x in zip(rows, stop.tolist()) if x]

    @torch.no_grad()
    def finish(self, items: list[int]) -> tuple[list[int], list[int]]:
        """Coda + head of exited items: (next tokens, exit depths)."""
        t0 = time.perf_counter()
        it, rows_t = self._items(items)
        pos = self.pos[it]
        depths = self.loop_h[items].tolist()
        mask, L = self._decode_mask(items, pos)
        decided = ~self.known_h[items]   # read out at the exit loop already, for the decision
        if self.crit.needs_logits and decided.all():
            logits = self.logits[it]
        elif self.crit.needs_logits and decided.any():
            logits = self.logits[it].clone()
            k = torch.from_numpy(np.flatnonzero(~decided)).to(self.device)
            logits[k] = self._readout(self.S[it[k]], rows_t[k], pos[k], mask[k], L)
        else:
            logits = self._readout(self.S[it], rows_t, pos, mask, L)
        self.kv.record_exit(rows_t, pos, depths)
        self.pos[it] = torch.where(it < self.n_rows, pos + 1, pos)
        self.advance(items)
        tokens = logits.argmax(-1).tolist()
        self.stats.syncs += 1
        copies = copies_on_exit(self.kv.policy, self.max_depth, depths) if self.record else 0
        self._log("finish", time.perf_counter() - t0, len(items), len(items), L, copies,
                  prompt_tokens=self.n_prompt(items))
        return tokens, depths


def warm_memory(model, prompt: list[int], rows: int, kv_policy: str) -> None:
    """The largest prefill a mode may launch (``rows`` copies of the longest ``prompt``), at one
    loop on a throwaway engine, untimed: the first launch of a shape in a process pays once for
    what the kernels set up for it (measured: the first 128-prompt prefill of 64 tokens took 15%
    longer than the same launch on the next engine, and in a side-by-side run whichever mode
    went first paid it)."""
    Engine(model, ExitCriterion.fixed(1), kv_policy, rows, len(prompt) + 1).prefill(
        list(range(rows)), [prompt] * rows)
