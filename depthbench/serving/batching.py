"""The batching knobs one scheduler runs with, as one value: ``Batching``. Torch-free.

A serve config names them (``Batching.of``), a ``0`` standing for the device's default and a
``prefill_chunk`` of -1 for auto; ``Batching.resolved`` fills those in for a device kind, once,
so that every result records what ran; ``Batching.for_mode`` says what one mode runs with (one
row for batch1; a pool, a coda batch and chunked prefill only in the pooled modes), which the
``Scheduler`` reads; ``rows`` and ``prompt_slots`` size the executor a mode needs. The
comparison's full-depth candidates are variants of the value (``compare.baseline_candidates``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from depthbench.config import MODES, kv_layout

# the per-mode knobs a result records beside its width
KNOBS = ("admit_min", "min_coda_batch", "coda_wait", "pool", "prefill_chunk")


def knob_defaults(width: int, device_type: str = "cuda", min_coda_batch: int = 0) -> dict:
    """The batching knobs a ``0`` (or None) stands for, per device kind; the pool's default
    holds ``min_coda_batch`` (given or default) more requests than a core launch takes, so the
    tokens waiting for the coda leave no place in a launch empty.

    On a GPU a launch of a few rows costs nearly what a full one does (it reads every weight of
    its layers), so the coda runs once width/2 exited tokens wait (or the oldest has waited 4
    core launches), newcomers are admitted once width/8 rows are free, and the pool is width +
    coda batch. On a CPU each launch carries a fixed host cost that a larger, rarer coda or
    prefill launch spreads over more tokens: coda batch 3 width/2, admission at 3 width/4 free
    rows, a coda wait of 16 launches, a pool of at least 3 width (``benchmarks/serve_cpu.py``
    measures both sets on the CPU)."""
    w = max(1, width)
    if device_type == "cpu":
        mcb = min_coda_batch or max(1, 3 * w // 2)
        return {"admit_min": max(1, 3 * w // 4), "min_coda_batch": mcb, "coda_wait": 16,
                "pool": max(3 * w, w + mcb)}
    mcb = min_coda_batch or max(1, w // 2)
    return {"admit_min": max(1, w // 8), "min_coda_batch": mcb, "coda_wait": 4, "pool": w + mcb}


def chunk_default(width: int, device_type: str = "cuda") -> int:
    """Chunked prefill's default (``prefill_chunk`` -1, auto): a prefill launch per admission on
    every device. On the simulated H100 (``benchmarks/chunk_default.py``: two shapes, prompts of
    8 to 2,048 tokens, chunks of 128 to 8,192 prompt tokens per core launch) prefill launches
    are the fastest for cdb at every prompt length, or within 1% of the fastest, and keep it
    1.11-1.37x of full-depth serving; chunks read 0.06-0.13x at prompts of 1,024 tokens and
    more, where the earlier default (2 width) lost at 9 of 10 workloads with prompts of 128 or
    more. Chunked prefill stays a knob (``--prefill-chunk C``)."""
    return 0


def cdb_sizes(width: int, min_coda_batch: int = 0, pool: int = 0,
              device_type: str = "cuda") -> tuple[int, int]:
    """cdb's coda batch and pool (0: ``knob_defaults``); the pool never holds fewer rows than a
    core launch takes."""
    d = knob_defaults(width, device_type, min_coda_batch)
    return d["min_coda_batch"], max(width, pool or d["pool"])


@dataclass(frozen=True)
class Batching:
    """How a scheduler batches: ``width`` rows per core launch at most; while work is in
    flight, newcomers admitted once ``admit_min`` rows are free; in the pooled modes, the coda
    run once ``min_coda_batch`` exited tokens wait or the oldest has waited ``coda_wait`` core
    launches, ``pool`` requests resident, ``prefill_chunk`` prompt tokens in core launches at
    once (0: prompts in prefill launches; -1: auto), a prompt split across launches only where
    ``split_prompts`` (a KV layout that keeps every loop's keys); ``concurrency`` clients in a
    closed loop (0: none). A ``0`` knob is the device's default (``knob_defaults``)."""
    width: int = 1
    admit_min: int = 0
    min_coda_batch: int = 0
    coda_wait: int = 0
    pool: int = 0
    prefill_chunk: int = 0
    split_prompts: bool = True
    concurrency: int = 0

    @classmethod
    def of(cls, cfg) -> Batching:
        """The knobs ``cfg`` (a ServeConfig or SimConfig) gives, unresolved."""
        n_private, shared, _ = kv_layout(cfg.kv_policy, cfg.max_depth)
        return cls(cfg.width, cfg.admit_min, cfg.min_coda_batch, cfg.coda_wait, cfg.pool,
                   cfg.prefill_chunk, n_private == cfg.max_depth and not shared, cfg.concurrency)

    def resolved(self, device_type: str, requests: int) -> Batching:
        """Each knob left at 0 (or auto) at ``device_type``'s default, and no more rows in a
        launch or resident than there are ``requests``: what a result records as run."""
        d = knob_defaults(self.width, device_type, self.min_coda_batch)
        b = replace(self, **{k: getattr(self, k) or v for k, v in d.items()})
        b = replace(b, width=min(b.width, requests), pool=min(b.pool, requests))
        if b.prefill_chunk < 0:   # a KV layout that cannot split a prompt keeps prefill launches
            b = replace(b, prefill_chunk=chunk_default(b.width, device_type)
                        if b.split_prompts else 0)
        return b

    def for_mode(self, mode: str, device_type: str = "cuda") -> Batching:
        """What ``mode`` runs with: one row at a time for batch1; in the pooled modes (cdb,
        static) the pool, coda batch and wait and chunked prefill (a chunk left at auto: off),
        elsewhere a pool of the width and the coda every token. Knobs at 0 take
        ``device_type``'s defaults; admission never waits for more rows than the pool has."""
        width = 1 if MODES[mode].one_row else self.width
        d = knob_defaults(width, device_type)
        if MODES[mode].pooled:
            mcb, pool = cdb_sizes(width, self.min_coda_batch, self.pool, device_type)
            wait, chunk = self.coda_wait or d["coda_wait"], max(0, self.prefill_chunk)
        else:
            mcb, pool, wait, chunk = 1, width, 1, 0
        return replace(self, width=width, admit_min=min(self.admit_min or d["admit_min"], pool),
                       min_coda_batch=mcb, coda_wait=wait, pool=pool, prefill_chunk=chunk)

    def rows(self, mode: str) -> int:
        """KV rows an executor needs for ``mode`` (of resolved knobs): 1 for batch1, the pool in
        the pooled modes, else the width."""
        if MODES[mode].one_row:
            return 1
        return cdb_sizes(self.width, self.min_coda_batch, self.pool)[1] if MODES[mode].pooled \
            else self.width

    def prompt_slots(self, mode: str) -> int:
        """Prompt-token work items an executor needs for ``mode``: the prefill chunk in the
        pooled modes (chunked prefill), else none."""
        return max(0, self.prefill_chunk) if MODES[mode].pooled else 0

    def knobs(self) -> dict:
        """The width and ``KNOBS``, as a result records them."""
        return {"width": self.width, **{k: getattr(self, k) for k in KNOBS}}

    def label(self, mode: str) -> str:
        """A full-depth candidate's name: its mode and the knobs it runs with."""
        if mode == "static_lockstep":
            return f"static_lockstep width={self.width}"
        return "static " + " ".join(f"{k}={getattr(self, k)}" for k in KNOBS)
