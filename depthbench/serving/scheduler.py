"""The batching policy: what runs next. The engine executes; this decides. Its requests are
``workload.Request``s; the knobs it runs with, a ``batching.Batching``.

Modes (all over the same requests):
    static     the baseline: cdb's scheduling (resident pool, coda batching) with every token at
               max_depth, so that cdb differs from it only in depth
    static_lockstep  every token runs max_depth in batches of ``width`` rows that start and end
               together; requests join and leave between tokens (pool = width)
    no_refill  tokens exit early, but a batch waits for its slowest token before the next one
    batch1     one request at a time, with exits
    cdb        continuous depth batching: every core launch takes all in-flight work items,
               whatever loop they are at; exited items queue for the coda and head, which
               runs once ``min_coda_batch`` of them wait (or the oldest has waited
               ``coda_wait`` core launches, or nothing else is in flight), so its weights are
               read for many tokens at once; then their requests' next tokens (or new
               requests, in freed rows) join the next core launch

The scheduler decides and an executor (``serving.executor.Executor``: the torch engine, or the
simulator's priced one) runs what it is told; this module imports neither. Each token's exit
depth, where it is known when the token starts, is chosen here, in ``start_depths``. The
scheduler reads time from the executor's clock, so the same policies run on the real engine and,
in ``serve-sim``, on a virtual clock.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator

from depthbench.config import MODES
from depthbench.errors import UserError
from depthbench.serving.batching import Batching
from depthbench.serving.executor import Executor
from depthbench.serving.workload import Request, Status


class Scheduler:
    def __init__(self, engine: Executor, mode: str, batching: Batching):
        assert mode in MODES
        # the knobs as this mode runs them, their defaults the executor's device kind's
        # (``Batching.for_mode``). Rows free up one or two at a time; prefilling each newcomer
        # alone costs more than the decode it enables (a prefill reads every weight max_depth
        # times), so while work is in flight new requests are admitted once ``admit_min`` rows
        # are free (or all arrived requests fit). Every mode admits this way, so the baseline
        # pays what cdb pays. cdb keeps more requests resident than a core launch takes (the
        # pool): tokens waiting for the coda or for admission then leave no place in a launch
        # empty.
        b = batching.for_mode(mode, engine.device_type)
        self.engine, self.mode, self.clock = engine, mode, engine.clock
        self.width, self.min_coda_batch, self.coda_wait = b.width, b.min_coda_batch, b.coda_wait
        self.pool = min(b.pool, engine.n_rows)   # the executor's KV rows
        self.admit_min = min(b.admit_min, self.pool)   # never more free rows than there are
        # a closed loop of ``concurrency`` clients (0: none): a request is sent when its
        # arrival time has come and one of the clients is free, i.e. an earlier request finished
        self.concurrency = b.concurrency
        self.held: deque[Request] = deque()
        self.rows_free = list(range(self.pool))[::-1]
        self.active: dict[int, Request] = {}
        self.waiting: deque[Request] = deque()
        # chunked prefill (cdb and static): prompt tokens ride in core launches beside decode
        # tokens, at most ``prefill_chunk`` of them in flight at once, a prompt split across
        # launches where ``split_prompts`` (KV layouts that keep every loop's keys, where a
        # later chunk reads an earlier one exactly as a whole-prompt prefill would)
        self.chunk = b.prefill_chunk
        assert not self.chunk or self.chunk <= engine.n_prompt_slots, \
            "the executor has too few prompt slots"
        self.split_prompts = b.split_prompts
        self.slots_free = (list(range(engine.n_rows, engine.n_rows + self.chunk))[::-1]
                           if self.chunk else [])
        self.prompt_q: deque[list] = deque()     # [request, next prompt position to start]
        self.prompt_of: dict[int, tuple[Request, int]] = {}   # prompt item -> (request, position)
        self.t0 = 0.0
        self.iterations = 0
        self.emitted = 0                    # tokens emitted so far (progress, side by side)
        # paged KV (the simulator's memory): admission by free blocks, preemption when full
        self.blocks = getattr(engine, "blocks", None)
        self.preemptions = 0
        self.admissions = 0

    def now(self) -> float:
        return self.clock.now() - self.t0

    # ---- request life cycle ---------------------------------------------------------------------------
    def _emit(self, req: Request, token: int, depth: int, t: float) -> None:
        req.output.append(token)
        req.depths.append(depth)
        req.token_times.append(t)
        self.emitted += 1
        if req.done():
            req.status = Status.FINISHED
            self._vacate(req)
            if self.held:   # a client is free: it sends its next request now (or at its time)
                nxt = self.held.popleft()
                nxt.arrival = max(nxt.arrival, self.now())
                self.waiting.append(nxt)

    def _vacate(self, req: Request) -> None:
        """A finished or preempted request leaves its row and its KV blocks."""
        del self.active[req.row]
        self.rows_free.append(req.row)
        if self.blocks:
            self.blocks.release(req.id)

    def _fits(self, req: Request) -> bool:
        """Whether ``req``'s KV blocks are free to admit it (always, without paged KV); takes them."""
        if not self.blocks:
            return True
        n = len(req.prompt) + len(req.output)
        if self.blocks.can_admit(n, alone=not self.active):
            return self.blocks.take(req.id, n)
        if not self.active:   # the whole pool is free, and it does not fit
            raise UserError(f"request {req.id} needs {self.blocks.blocks(n)} KV blocks and the "
                            f"pool holds {self.blocks.n_blocks}; give shorter prompts or outputs")
        return False

    def _reserve(self, rows: list[int]) -> list[int]:
        """The rows of ``rows`` (about to start a token) whose token's KV position has its block:
        each takes the block it needs, oldest admission first; where none is free the youngest
        admission among ``rows`` is preempted (a token in a loop is never interrupted) and the
        rest tried again. A preempted request frees its row and blocks and waits first in line;
        readmitted, its prompt and its output so far are prefilled again (vLLM's recompute
        preemption)."""
        if not self.blocks:
            return rows
        order = deque(sorted(rows, key=lambda r: self.active[r].seq))
        kept = set()
        while order:
            q = self.active[order[0]]
            if self.blocks.take(q.id, len(q.prompt) + len(q.output)):
                kept.add(order.popleft())
                continue
            victim = self.active[order.pop()]
            self._vacate(victim)
            victim.status, victim.row = Status.WAITING, -1
            self.waiting.appendleft(victim)
            self.preemptions += 1
        return [r for r in rows if r in kept]

    def _admit(self, busy: bool = False) -> list[int]:
        """Admit arrived requests into free rows (with paged KV, while the head of the line's
        blocks are free); their prefixes are prefilled together. The rows of admitted requests
        that still have tokens to generate."""
        if busy:
            now = self.now()
            arrived = sum(1 for q in itertools.islice(self.waiting, self.admit_min)
                          if q.arrival <= now)
            if not arrived or len(self.rows_free) < min(self.admit_min, arrived):
                return []
        new = []
        while (self.waiting and self.rows_free and self.waiting[0].arrival <= self.now()
               and self._fits(self.waiting[0])):
            req = self.waiting.popleft()
            req.row, req.status = self.rows_free.pop(), Status.RUNNING
            req.prefix, req.seq = req.prompt + req.output, self.admissions
            self.admissions += 1
            self.active[req.row] = req
            new.append(req)
        if not new:
            return []
        if self.chunk:   # the prompts go through core launches (``_prompt_chunks``)
            self.engine.admit([q.row for q in new], [len(q.prefix) for q in new])
            self.prompt_q.extend([q, 0] for q in new)
            return []
        first = self.engine.prefill([q.row for q in new], [q.prefix for q in new])
        t = self.now()
        for req, tok in zip(new, first):
            self._emit(req, tok, self.engine.max_depth, t)
        return [q.row for q in new if q.status == Status.RUNNING]

    def start_depths(self, reqs: list[Request]) -> list[int] | None:
        """The exit depths of the next tokens of ``reqs`` where they are known at start (None:
        the executor decides from the criterion's signals). The one place a mode chooses its
        exits: the static modes run every token at max depth whatever the criterion; every other
        mode follows the criterion."""
        if not MODES[self.mode].exits:
            return [self.engine.max_depth] * len(reqs)
        crit = self.engine.crit
        if not crit.known_in_advance:
            return None
        # decoded token i of a request (its first output token comes from the prefill)
        return [crit.start_depth(q.id, len(q.output) - 1) for q in reqs]

    def _prompt_chunks(self) -> tuple[list[int], list[int]]:
        """Prompt tokens to start now, as many as free prompt slots take, in admission order
        (a prompt split where ``split_prompts``, else started whole once it fits): (items,
        tokens), each item placed at its request's row and position."""
        items, tokens, rows, positions = [], [], [], []
        while self.prompt_q and self.slots_free:
            q, p = self.prompt_q[0]
            n = min(len(q.prefix) - p, len(self.slots_free))
            if n < len(q.prefix) - p and not self.split_prompts:
                if len(self.slots_free) < self.chunk:
                    break   # wait until the prompts in flight leave room for this one whole
                raise UserError(f"a prompt of {len(q.prefix)} tokens exceeds --prefill-chunk "
                                f"{self.chunk}, and this KV layout does not split prompts "
                                "(only depth_indexed, last_exited and skip_exited do); raise the chunk")
            for j in range(p, p + n):
                slot = self.slots_free.pop()
                self.prompt_of[slot] = (q, j)
                items.append(slot)
                tokens.append(q.prefix[j])
                rows.append(q.row)
                positions.append(j)
            if p + n == len(q.prefix):
                self.prompt_q.popleft()
            else:
                self.prompt_q[0][1] = p + n
        if items:
            self.engine.place(items, rows, positions)
        return items, tokens

    def _start(self, rows: list[int], prompt: tuple[list[int], list[int]] = ((), ())) -> None:
        """One start launch: the next tokens of ``rows`` and the prompt tokens ``prompt``
        (items, tokens; at max depth)."""
        reqs = [self.active[r] for r in rows]
        depths = self.start_depths(reqs)
        items, tokens = prompt
        if items:
            depths = (depths or [None] * len(rows)) + [self.engine.max_depth] * len(items)
        self.engine.start(list(rows) + list(items), [q.output[-1] for q in reqs] + list(tokens),
                          depths)

    def _finish(self, exited: list[int]) -> list[int]:
        """Coda + head of exited items; the rows whose requests go on (a prompt's last token
        emits its request's first generated token)."""
        if not exited:
            return []
        tokens, depths = self.engine.finish(exited)
        t = self.now()
        going = []
        for item, tok, d in zip(exited, tokens, depths):
            if item < self.engine.n_rows:
                self._emit(self.active[item], tok, d, t)
                if item in self.active:
                    going.append(item)
                continue
            q, j = self.prompt_of.pop(item)
            self.slots_free.append(item)
            if j == len(q.prefix) - 1:
                self._emit(q, tok, self.engine.max_depth, t)
                if q.status == Status.RUNNING:
                    going.append(q.row)
        return going

    def _idle_until_next_arrival(self) -> None:
        if self.waiting:
            self.clock.wait_until(self.t0 + self.waiting[0].arrival)

    # ---- the policies -------------------------------------------------------------------------------
    def run(self, requests: list[Request]) -> list[Request]:
        deque(self.steps(requests), maxlen=0)   # run every step
        return sorted(requests, key=lambda q: q.id)

    def steps(self, requests: list[Request]) -> Iterator[None]:
        """Serve ``requests``, yielding after every core launch (and every idle wait): the
        unit in which ``serving.bench.run_side_by_side`` interleaves modes."""
        order = sorted(requests, key=lambda q: (q.arrival, q.id))
        cap = self.concurrency or len(order)
        self.waiting, self.held = deque(order[:cap]), deque(order[cap:])
        self.t0 = self.clock.now()
        yield from self._run_cdb() if MODES[self.mode].pooled else self._run_token_batches()

    def _run_token_batches(self) -> Iterator[None]:
        """static_lockstep, no_refill, batch1: a batch of tokens starts together and ends together; the
        coda runs once per batch, on every row (exited rows wait for it idle)."""
        while self.waiting or self.active:
            self._admit(busy=bool(self.active))
            if not self.active:
                self._idle_until_next_arrival()
                yield
                continue
            rows = self._reserve(sorted(self.active))
            if not rows:   # every row preempted: admission decides again
                continue
            self._start(rows)
            running, exited = rows, []
            while running:
                out = self.engine.core(running)
                self.iterations += 1
                yield
                if out:
                    gone = set(out)
                    running = [r for r in running if r not in gone]
                    exited += out
            self._finish(sorted(exited))

    def _run_cdb(self) -> Iterator[None]:
        inflight: list[int] = []            # rows with a token in the loop
        prompt: list[int] = []              # prompt items in the loop (every launch takes them)
        coda: list[int] = []                # items whose token exited and waits for the coda
        waited = 0                          # core launches the oldest of ``coda`` has waited
        ready: list[int] = []               # rows whose next token is ready to start
        while self.waiting or self.active:
            ready += self._admit(busy=bool(inflight or coda or prompt))
            chunk = self._prompt_chunks() if self.chunk else ((), ())
            ready = self._reserve(ready)
            if ready or chunk[0]:
                self._start(ready, chunk)
                inflight += ready
                prompt += chunk[0]
                ready = []
            if not inflight and not coda and not prompt:
                self._idle_until_next_arrival()
                yield
                continue
            if inflight or prompt:
                # at most ``width`` decode rows per launch, those that waited longest first
                launch, inflight = inflight[: self.width], inflight[self.width:]
                out = self.engine.core(sorted(launch) + prompt)
                inflight += launch
                self.iterations += 1
                if out:
                    gone = set(out)
                    inflight = [r for r in inflight if r not in gone]
                    prompt = [r for r in prompt if r not in gone]
                    waited = waited + 1 if coda else 0
                    coda += out
                elif coda:
                    waited += 1
            # prompt tokens wait for the coda beside decode tokens, counted with them
            if coda and (len(coda) >= self.min_coda_batch or waited >= self.coda_wait
                         or not inflight):
                ready = self._finish(sorted(coda))
                coda, waited = [], 0
            yield
