"""Requests and the batching policy: what runs next. The engine executes; this decides.

Modes (all over the same requests):
    static     every token runs max_depth; requests join and leave between tokens
    no_refill  tokens exit early, but a batch waits for its slowest token before the next one
    batch1     one request at a time, with exits
    cdb        continuous depth batching: every core launch takes all in-flight work items,
               whatever loop they are at; exited items go to the coda and head and their
               request's next token (or a new request) takes the freed place at once
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

import torch

from depthbench.config import SERVE_MODES
from depthbench.serving.engine import Engine
from depthbench.serving.exits import parse_exit

MODES = SERVE_MODES


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    arrival: float = 0.0
    target: list[int] | None = None      # expected first generated tokens (recall)
    stop_token: int | None = None
    status: Status = Status.WAITING
    row: int = -1
    output: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)

    def done(self) -> bool:
        return (len(self.output) >= self.max_new_tokens
                or (self.stop_token is not None and bool(self.output) and self.output[-1] == self.stop_token))

    def fresh(self) -> Request:
        return Request(self.id, list(self.prompt), self.max_new_tokens, self.arrival, self.target,
                       self.stop_token)


class Scheduler:
    def __init__(self, engine: Engine, mode: str, width: int, admit_min: int | None = None):
        assert mode in MODES
        if mode == "static":  # the baseline ignores the exit criterion: every token runs max_depth
            engine.crit = parse_exit(f"fixed:{engine.max_depth}", engine.max_depth, engine.max_depth)
        self.engine, self.mode = engine, mode
        self.width = 1 if mode == "batch1" else width
        # cdb frees rows one or two at a time; prefilling each newcomer alone costs more than
        # the decode it enables, so while work is in flight new requests are admitted once
        # ``admit_min`` rows are free (or all arrived requests fit). Token batches admit
        # between tokens anyway.
        self.admit_min = admit_min if admit_min is not None else (
            max(1, self.width // 8) if mode == "cdb" else 1)
        self.rows_free = list(range(self.width))[::-1]
        self.active: dict[int, Request] = {}
        self.waiting: deque[Request] = deque()
        self.t0 = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # ---- request life cycle ---------------------------------------------------------------------------
    def _emit(self, req: Request, token: int, depth: int) -> None:
        req.output.append(token)
        req.depths.append(depth)
        req.token_times.append(self.now())
        if req.done():
            req.status = Status.FINISHED
            del self.active[req.row]
            self.rows_free.append(req.row)

    def _admit(self, busy: bool = False) -> None:
        """Admit arrived requests into free rows; their prompts are prefilled together."""
        if busy:
            now = self.now()
            arrived = sum(1 for q in itertools.islice(self.waiting, self.admit_min)
                          if q.arrival <= now)
            if not arrived or len(self.rows_free) < min(self.admit_min, arrived):
                return
        new = []
        while self.waiting and self.rows_free and self.waiting[0].arrival <= self.now():
            req = self.waiting.popleft()
            req.row, req.status = self.rows_free.pop(), Status.RUNNING
            self.active[req.row] = req
            new.append(req)
        if new:
            first = self.engine.prefill([q.row for q in new], [q.prompt for q in new])
            for req, tok in zip(new, first):
                self._emit(req, tok, self.engine.max_depth)

    def _start(self, rows: list[int]) -> None:
        eng = self.engine
        reqs = [self.active[r] for r in rows]
        trace = None
        if eng.crit.kind in ("replay", "trace"):
            # decoded token i of a request (its first output token comes from the prefill)
            trace = torch.tensor([eng.crit.trace_depth(q.id, len(q.output) - 1) for q in reqs],
                                 device=eng.device)
        eng.start(torch.tensor(rows, device=eng.device),
                  torch.tensor([q.output[-1] for q in reqs], device=eng.device), trace)

    def _finish(self, exited: torch.Tensor) -> None:
        if exited.numel() == 0:
            return
        tokens, depths = self.engine.finish(exited)
        for row, tok, d in zip(exited.tolist(), tokens.tolist(), depths.tolist()):
            self._emit(self.active[row], tok, d)

    def _idle_until_next_arrival(self) -> None:
        if self.waiting:
            time.sleep(max(0.0, self.waiting[0].arrival - self.now()))

    # ---- the policies -------------------------------------------------------------------------------
    def run(self, requests: list[Request]) -> list[Request]:
        self.waiting = deque(sorted(requests, key=lambda q: (q.arrival, q.id)))
        self.t0 = time.perf_counter()
        if self.mode == "cdb":
            self._run_cdb()
        else:
            self._run_token_batches()
        return sorted(requests, key=lambda q: q.id)

    def _run_token_batches(self) -> None:
        """static, no_refill, batch1: a batch of tokens starts together and ends together."""
        dev = self.engine.device
        while self.waiting or self.active:
            self._admit()
            if not self.active:
                self._idle_until_next_arrival()
                continue
            rows = sorted(self.active)
            self._start(rows)
            running = torch.tensor(rows, device=dev)
            while running.numel():
                exited = self.engine.core(running)
                self._finish(exited)
                running = running[~torch.isin(running, exited)]

    def _run_cdb(self) -> None:
        dev = self.engine.device
        inflight: set[int] = set()
        while self.waiting or self.active:
            self._admit(busy=bool(inflight))
            new = sorted(r for r in self.active if r not in inflight)
            if new:
                self._start(new)
                inflight.update(new)
            if not inflight:
                self._idle_until_next_arrival()
                continue
            exited = self.engine.core(torch.tensor(sorted(inflight), device=dev))
            self._finish(exited)
            inflight.difference_update(exited.tolist())
