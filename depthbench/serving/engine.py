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

Exit depths that are known when a token starts (``fixed``, ``trace``, ``replay``) are decided
on the host; the others read one flag per row back from the device after the launch (with
``lookahead`` the flag is the previous loop's, already computed when the launch is queued).

Every launch is timed and, with ``record=True``, logged as (stage, rows, tokens, context length,
KV entries copied, seconds): the data ``serve-sim --calibrate`` fits its cost model to.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from depthbench.model import LoopedTransformer
from depthbench.serving.exits import ExitCriterion
from depthbench.serving.kvcache import KVStore, SlotView, copies_on_exit

STAGES = ("prefill", "start", "core", "finish")
KNOWN_DEPTH = ("fixed", "trace", "replay")


class WallClock:
    """The real clock; the simulator substitutes a virtual one with the same two methods."""

    def now(self) -> float:
        return time.perf_counter()

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))


class TurnClock:
    """A wall clock that runs only while its engine has the machine: several modes measured side
    by side (``serving.bench.run_side_by_side``) each read the time of their own turns, so a
    change in the machine's speed hits all of them alike. Waiting for an arrival advances it
    without sleeping (an idle engine holds no machine time)."""

    def __init__(self):
        self.elapsed, self.since = 0.0, None

    def resume(self) -> None:
        self.since = time.perf_counter()

    def pause(self) -> None:
        self.elapsed += time.perf_counter() - self.since
        self.since = None

    def now(self) -> float:
        return self.elapsed + (0.0 if self.since is None else time.perf_counter() - self.since)

    def wait_until(self, t: float) -> None:
        self.elapsed += max(0.0, t - self.now())


class HostState:
    """What the scheduler reads from an engine, kept on the host: per row its position, loop
    and (where known at start) exit depth; per stage launch counts, tokens and seconds; the
    clock. ``Engine`` runs the model; ``serving.sim.SimEngine`` prices launches instead."""

    def __init__(self, criterion: ExitCriterion, n_rows: int, record: bool = False):
        self.crit = criterion
        self.max_depth = criterion.max_depth
        self.n_rows = n_rows
        self.clock = WallClock()
        self.pos_h = np.zeros(n_rows, dtype=np.int64)
        self.loop_h = np.zeros(n_rows, dtype=np.int64)
        self.target_h = np.zeros(n_rows, dtype=np.int64)   # exit depth, where known at start
        self.stats = {"prefills": 0, "core_rows": 0, "syncs": 0}
        for s in STAGES:
            self.stats[f"{s}_launches"] = 0
            self.stats[f"{s}_s"] = 0.0
            self.stats[f"{s}_tokens"] = 0
        self.record = record
        # (stage, rows, tokens, context length, KV entries copied on exit, seconds)
        self.records: list[tuple[str, int, int, int, int, float]] = []

    @property
    def known_depth(self) -> bool:
        return self.crit.kind in KNOWN_DEPTH

    def _log(self, stage: str, dt: float, rows: int, tokens: int, L: int, copies: int = 0) -> None:
        st = self.stats
        st[f"{stage}_launches"] += 1
        st[f"{stage}_s"] += dt
        st[f"{stage}_tokens"] += tokens
        if self.record:
            self.records.append((stage, rows, tokens, L, copies, dt))

    def _set_target(self, rows: list[int], trace_depths) -> None:
        c = self.crit
        if c.kind == "fixed":
            d = np.full(len(rows), int(c.value), dtype=np.int64)
        elif trace_depths is None:
            d = np.full(len(rows), c.max_depth, dtype=np.int64)
        else:
            d = np.asarray(trace_depths, dtype=np.int64)
        self.target_h[rows] = np.clip(d, c.min_depth, c.max_depth)
        self.loop_h[rows] = 0

    def _known_exits(self, rows: list[int]) -> list[int]:
        self.loop_h[rows] += 1
        return [r for r in rows if self.loop_h[r] >= self.target_h[r]]

    def context(self, rows: list[int]) -> int:
        """The attention length of a decode launch over ``rows`` (the longest row's)."""
        return int(self.pos_h[rows].max()) + 1


class Engine(HostState):
    def __init__(self, model: LoopedTransformer, criterion: ExitCriterion, kv_policy: str,
                 n_rows: int, max_len: int, device=None, record: bool = False):
        super().__init__(criterion, n_rows, record)
        self.model = model.eval()
        self.cfg = model.cfg
        self.device = device or next(model.parameters()).device
        dtype = next(model.parameters()).dtype
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

    @property
    def kv_nbytes(self) -> int:
        return self.kv.nbytes()

    # ---- helpers ------------------------------------------------------------------------------------
    def _rows(self, rows: list[int]) -> torch.Tensor:
        return torch.tensor(rows, device=self.device, dtype=torch.long)

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
        self.stats["prefills"] += B
        first = logits.argmax(-1).tolist()
        self.stats["syncs"] += 1
        self._log("prefill", time.perf_counter() - t0, B, sum(lens), T)
        return first

    @torch.no_grad()
    def start(self, rows: list[int], tokens: list[int], trace_depths=None) -> None:
        """Embedding and prelude of each row's next token, at the row's position."""
        t0 = time.perf_counter()
        m = self.model
        rows_t = self._rows(rows)
        pos = self.pos[rows_t]
        mask, L = self._decode_mask(rows, pos)
        pre = [SlotView(self.kv, torch.full_like(rows_t, self.kv.prelude_slot(j)), rows_t, pos, L)
               for j in range(self.cfg.n_prelude)]
        tok = torch.tensor(tokens, device=self.device, dtype=torch.long)
        e = m.embed_prelude(tok[:, None], pos[:, None], pre, mask)[:, 0]  # (B, C)
        self.E[rows_t] = e
        self.S[rows_t] = m.initial_state(e[:, None], pos[:, None])[:, 0]
        self.loop[rows_t] = 0
        self.pending[rows_t] = False
        self._set_target(rows, trace_depths)
        if trace_depths is not None:
            self.trace_depth[rows_t] = torch.tensor(trace_depths, device=self.device)
        if self.crit.needs_logits:
            self.argmax_run[rows_t] = 0
            self.argmax_prev[rows_t] = -1
        self._log("start", time.perf_counter() - t0, len(rows), len(rows), L)

    @torch.no_grad()
    def core(self, rows: list[int]) -> list[int]:
        """One loop for each row (each at its own loop index); the rows that exit now."""
        t0 = time.perf_counter()
        m = self.model
        rows_t = self._rows(rows)
        pos = self.pos[rows_t]
        loops = self.loop[rows_t] + 1
        mask, L = self._decode_mask(rows, pos)
        s_prev = self.S[rows_t]
        early = None
        if self.crit.lookahead and not self.known_depth:
            # the decision for this launch was taken from the previous loop's signal: read it
            # before queuing the launch (it does not wait for this launch's result)
            early = (self.pending[rows_t] & (loops >= self.crit.min_depth)) | (loops >= self.max_depth)
            early = early.tolist()
        rel = self.kv.read_rel(rows_t, loops, L)
        views = [SlotView(self.kv, self.kv.core_slots(j, loops), rows_t, pos, L,
                          self.kv.core_read_slots(j, rel)) for j in range(self.cfg.n_core)]
        s = m.core_step(s_prev[:, None], self.E[rows_t][:, None], pos[:, None], views, mask)[:, 0]
        self.S[rows_t] = s
        self.loop[rows_t] = loops
        self.stats["core_rows"] += len(rows)
        if self.known_depth:
            exited = self._known_exits(rows)
        else:
            self.loop_h[rows] += 1
            exited = self._decide(rows, rows_t, s, s_prev, pos, loops, mask, L, early)
        self._log("core", time.perf_counter() - t0, len(rows), len(rows), L)
        return exited

    def _decide(self, rows, rows_t, s, s_prev, pos, loops, mask, L, early=None) -> list[int]:
        """Exit decisions from signals on the device (items may be at different loops). With
        ``early`` (lookahead) the decision is already known: the signals only set the pending
        flags for the next loop, and nothing is read back."""
        m, crit = self.model, self.crit
        sig = {"state": s, "prev_state": s_prev}
        if crit.needs_gate:
            sig["gate"] = m.gate_logit(s)
        if crit.needs_logits:
            logits = self._readout(s, rows_t, pos, mask, L)
            self.logits[rows_t] = logits
            sig["logits"] = logits
            am = logits.argmax(-1)
            run = torch.where(am == self.argmax_prev[rows_t], self.argmax_run[rows_t] + 1,
                              torch.ones_like(am))
            self.argmax_prev[rows_t], self.argmax_run[rows_t] = am, run
            sig["argmax_run"] = run
            sig["prev_logp"] = self.prev_logp[rows_t]
            self.prev_logp[rows_t] = torch.log_softmax(logits.float(), -1)
        stop, self.pending[rows_t] = crit.decide(loops, crit.fires(loops, sig), self.pending[rows_t])
        if early is not None:
            return [r for r, x in zip(rows, early) if x]
        self.stats["syncs"] += 1
        return [r for r, x in zip(rows, stop.tolist()) if x]

    @torch.no_grad()
    def finish(self, rows: list[int]) -> tuple[list[int], list[int]]:
        """Coda + head of exited rows: (next tokens, exit depths)."""
        t0 = time.perf_counter()
        rows_t = self._rows(rows)
        pos = self.pos[rows_t]
        depths = self.loop_h[rows].tolist()
        mask, L = self._decode_mask(rows, pos)
        if self.crit.needs_logits:
            logits = self.logits[rows_t]
        else:
            logits = self._readout(self.S[rows_t], rows_t, pos, mask, L)
        self.kv.record_exit(rows_t, pos, depths)
        self.pos[rows_t] = pos + 1
        self.pos_h[rows] += 1
        tokens = logits.argmax(-1).tolist()
        self.stats["syncs"] += 1
        copies = copies_on_exit(self.kv.policy, self.max_depth, depths) if self.record else 0
        self._log("finish", time.perf_counter() - t0, len(rows), len(rows), L, copies)
        return tokens, depths
