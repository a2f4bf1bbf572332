"""Execution of depth-adaptive decoding on token ids: the engine runs what the scheduler says.

A request owns one row of the KV store from admission to completion and has at most one token
in flight, so a work item is identified by its request's row. Per row the engine keeps the
token's loop state ``S``, its prelude output ``E`` (injected every loop) and the signals the
exit criterion reads. The launches:

    prefill(request)     the prompt through prelude, max_depth loops and coda, filling caches;
                         the first generated token is read out at max_depth
    start(rows, tokens)  embedding + prelude of each row's next token (one batched launch)
    core(rows)           one loop for every given row, each at its own loop index (one batched
                         launch), then the exit decisions; returns the rows that exit
    finish(rows)         coda + head of the exited rows, greedy next token, copy-on-exit KV
"""

from __future__ import annotations

import time

import torch

from depthbench.model import LoopedTransformer
from depthbench.serving.exits import ExitCriterion
from depthbench.serving.kvcache import KVStore, SlotView


class Engine:
    def __init__(self, model: LoopedTransformer, criterion: ExitCriterion, kv_policy: str,
                 n_rows: int, max_len: int, device=None):
        self.model = model.eval()
        self.cfg = model.cfg
        self.crit = criterion
        self.device = device or next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        self.max_depth = criterion.max_depth
        self.kv = KVStore(self.cfg, kv_policy, self.max_depth, n_rows, max_len, self.device, dtype)
        d, V = self.cfg.d_model, self.cfg.vocab_size
        z = lambda *shape, **kw: torch.zeros(*shape, device=self.device, **kw)  # noqa: E731
        self.S, self.E = z(n_rows, d, dtype=dtype), z(n_rows, d, dtype=dtype)
        self.loop = z(n_rows, dtype=torch.long)
        self.pos = z(n_rows, dtype=torch.long)
        self.pending = z(n_rows, dtype=torch.bool)
        self.trace_depth = z(n_rows, dtype=torch.long)
        if criterion.needs_logits:
            self.logits = z(n_rows, V, dtype=dtype)
            self.prev_logp = z(n_rows, V, dtype=torch.float32)
            self.argmax_prev = z(n_rows, dtype=torch.long)
            self.argmax_run = z(n_rows, dtype=torch.long)
        self.stats = {"core_launches": 0, "core_rows": 0, "start_launches": 0,
                      "finish_launches": 0, "prefills": 0, "prefill_s": 0.0, "start_s": 0.0,
                      "core_s": 0.0, "finish_s": 0.0}

    # ---- helpers ------------------------------------------------------------------------------------
    def _decode_mask(self, rows: torch.Tensor) -> tuple[torch.Tensor, int]:
        pos = self.pos[rows]
        L = int(pos.max()) + 1
        mask = torch.arange(L, device=self.device)[None, :] <= pos[:, None]  # (B, L)
        return mask[:, None, None, :], L                                      # (B, 1, 1, L)

    def _coda_views(self, rows, pos, L):
        return [SlotView(self.kv, torch.full_like(rows, self.kv.coda_slot(j)), rows, pos, L)
                for j in range(self.cfg.n_coda)]

    def _readout(self, s, rows, pos, mask, L):
        p = pos[:, None]
        return self.model.readout(s[:, None], p, self._coda_views(rows, pos, L), mask)[:, 0]

    # ---- launches -----------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, rows: list[int], prompts: list[list[int]]) -> list[int]:
        """Run prompts at max_depth, filling every cache slot of their rows; the first tokens.
        Prompts of equal length share one batched launch per layer."""
        t0 = time.perf_counter()
        first = [0] * len(rows)
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_len.setdefault(len(p), []).append(i)
        for members in by_len.values():
            toks = self._prefill_group([rows[i] for i in members], [prompts[i] for i in members])
            for i, t in zip(members, toks):
                first[i] = t
        self.stats["prefills"] += len(rows)
        self.stats["prefill_s"] += time.perf_counter() - t0
        return first

    def _prefill_group(self, rows_list: list[int], prompts: list[list[int]]) -> list[int]:
        m, dev = self.model, self.device
        idx = torch.tensor(prompts, device=dev)                            # (B, T)
        B, T = idx.shape
        pos = torch.arange(T, device=dev)
        rows = torch.tensor(rows_list, device=dev)
        zero = torch.zeros(B, dtype=torch.long, device=dev)

        def views(slot_of_layer, n):
            return [SlotView(self.kv, slot_of_layer(j), rows, zero, T) for j in range(n)]

        e = m.embed_prelude(idx, pos, views(lambda j: torch.full_like(rows, self.kv.prelude_slot(j)),
                                            self.cfg.n_prelude))
        s = m.initial_state(e, pos)
        for k in range(1, self.max_depth + 1):
            loops = torch.full_like(rows, k)
            s = m.core_step(s, e, pos, views(lambda j, lp=loops: self.kv.core_slots(j, lp), self.cfg.n_core))
        coda = views(lambda j: torch.full_like(rows, self.kv.coda_slot(j)), self.cfg.n_coda)
        # the coda fills its caches from every position; without a coda only the last one matters
        logits = m.readout(s if coda else s[:, -1:], pos if coda else pos[-1:], coda)
        self.pos[rows] = T
        return logits[:, -1].argmax(-1).tolist()

    @torch.no_grad()
    def start(self, rows: torch.Tensor, tokens: torch.Tensor, trace_depths=None) -> None:
        """Embedding and prelude of each row's next token, at the row's position."""
        t0 = time.perf_counter()
        m = self.model
        pos = self.pos[rows]
        mask, L = self._decode_mask(rows)
        pre = [SlotView(self.kv, torch.full_like(rows, self.kv.prelude_slot(j)), rows, pos, L)
               for j in range(self.cfg.n_prelude)]
        e = m.embed_prelude(tokens[:, None], pos[:, None], pre, mask)[:, 0]  # (B, C)
        self.E[rows] = e
        self.S[rows] = m.initial_state(e[:, None], pos[:, None])[:, 0]
        self.loop[rows] = 0
        self.pending[rows] = False
        if trace_depths is not None:
            self.trace_depth[rows] = trace_depths
        if self.crit.needs_logits:
            self.argmax_run[rows] = 0
            self.argmax_prev[rows] = -1
        self.stats["start_launches"] += 1
        self.stats["start_s"] += time.perf_counter() - t0

    @torch.no_grad()
    def core(self, rows: torch.Tensor) -> torch.Tensor:
        """One loop for each row (each at its own loop index); the rows that exit now."""
        t0 = time.perf_counter()
        m = self.model
        pos = self.pos[rows]
        loops = self.loop[rows] + 1
        mask, L = self._decode_mask(rows)
        s_prev = self.S[rows]
        views = [SlotView(self.kv, self.kv.core_slots(j, loops), rows, pos, L)
                 for j in range(self.cfg.n_core)]
        s = m.core_step(s_prev[:, None], self.E[rows][:, None], pos[:, None], views, mask)[:, 0]
        self.S[rows] = s
        self.loop[rows] = loops
        self.stats["core_launches"] += 1
        self.stats["core_rows"] += len(rows)
        # ---- exit signals and decisions (items may be at different loops) ---------------------
        crit = self.crit
        sig = {"state": s, "prev_state": s_prev, "trace_depth": self.trace_depth[rows]}
        if crit.needs_gate:
            sig["gate"] = m.gate_logit(s)
        if crit.needs_logits:
            logits = self._readout(s, rows, pos, mask, L)
            self.logits[rows] = logits
            sig["logits"] = logits
            am = logits.argmax(-1)
            run = torch.where(am == self.argmax_prev[rows], self.argmax_run[rows] + 1,
                              torch.ones_like(am))
            self.argmax_prev[rows], self.argmax_run[rows] = am, run
            sig["argmax_run"] = run
            sig["prev_logp"] = self.prev_logp[rows]
            self.prev_logp[rows] = torch.log_softmax(logits.float(), -1)
        stop, self.pending[rows] = crit.decide(loops, crit.fires(loops, sig), self.pending[rows])
        exited = rows[stop]
        self.stats["core_s"] += time.perf_counter() - t0
        return exited

    @torch.no_grad()
    def finish(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Coda + head of exited rows: (next tokens, exit depths)."""
        t0 = time.perf_counter()
        pos = self.pos[rows]
        depth = self.loop[rows]
        if self.crit.needs_logits:
            logits = self.logits[rows]
        else:
            mask, L = self._decode_mask(rows)
            logits = self._readout(self.S[rows], rows, pos, mask, L)
        self.kv.copy_on_exit(rows, pos, depth)
        self.pos[rows] = pos + 1
        self.stats["finish_launches"] += 1
        tokens = logits.argmax(-1)
        self.stats["finish_s"] += time.perf_counter() - t0
        return tokens, depth

