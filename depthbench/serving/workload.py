"""What is served: the requests of one workload, the same in every batching mode; torch-free,
so ``serve-bench`` and ``serve-sim`` build theirs alike.

A ``Request`` is one prompt and what it generates (its tokens, exit depths and token times as
served). A workload is random prompts (``random_workload``), a person dataset's held-out questions
(``dataset_workload``) or a text dataset's validation prompts (``text_workload``);
``with_arrivals`` spreads its requests over Poisson arrivals at a rate (vLLM's
``benchmark_serving``), where none given sends them all at t = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from depthbench.errors import UserError


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
    # set at each admission: the tokens the prefill writes (the prompt; after a preemption the
    # prompt and the output so far, recomputed) and the admission's order among all
    prefix: list[int] = field(default_factory=list)
    seq: int = -1

    def done(self) -> bool:
        return (len(self.output) >= self.max_new_tokens
                or (self.stop_token is not None and bool(self.output) and self.output[-1] == self.stop_token))

    def fresh(self) -> Request:
        return Request(self.id, list(self.prompt), self.max_new_tokens, self.arrival, self.target,
                       self.stop_token)


def random_workload(vocab_size: int, n: int, prompt_len: int, max_new_tokens: int,
                    seed: int, spread: float = 0.0) -> list[Request]:
    """Random prompts; request i generates ``max_new_tokens`` (32 if 0) scaled by a seeded
    uniform factor in [1 - spread, 1 + spread], so that requests do not all finish together."""
    new = max_new_tokens or 32
    prompts = np.random.default_rng([seed, 1]).integers(0, vocab_size, size=(n, prompt_len))
    f = np.random.default_rng(seed).uniform(1 - spread, 1 + spread, size=n) if spread else np.ones(n)
    return [Request(i, prompts[i].tolist(), max(1, round(new * float(f[i])))) for i in range(n)]


def with_arrivals(reqs: list[Request], rate: float, seed: int) -> list[Request]:
    if rate <= 0:
        return reqs
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(reqs))
    for q, t in zip(reqs, np.cumsum(gaps)):
        q.arrival = float(t)
    return reqs


def dataset_workload(ds, n: int, max_new_tokens: int, seed: int,
                     stop_at_eos: bool = False) -> list[Request]:
    """Prompts ``<bos> NAME [key]`` (the held-out first attribute) from eval_reordered; the
    model generates the value and goes on with further attributes, each request the same
    number of tokens in every mode unless ``stop_at_eos``."""
    s = ds.split("eval_reordered")
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(s), size=n, replace=n > len(s))
    reqs = []
    for i, r in enumerate(rows):
        tok = np.asarray(s.tokens[r], dtype=np.int64)
        order = np.asarray(s.order[r : r + 1], dtype=np.int64)
        k = int(ds.key_positions(order)[0, 0])
        L = int(ds.value_tokens[order[0, 0]])
        new = max_new_tokens or (len(tok) - k - 1)
        reqs.append(Request(i, tok[: k + 1].tolist(), new, target=tok[k + 1 : k + 1 + L].tolist(),
                            stop_token=ds.vocab.eos if stop_at_eos else None))
    return reqs


def text_workload(ds, n: int, prompt_len: int, max_new_tokens: int, seed: int,
                  stop_at_eos: bool = False) -> list[Request]:
    """A text run's prompts: ``prompt_len`` tokens of the validation split at seeded offsets;
    each request generates ``max_new_tokens`` (32 if 0), or stops at end-of-text where
    ``stop_at_eos``."""
    tokens = ds.tokens["validation"]
    if len(tokens) < prompt_len + 1:
        raise UserError(f"the text dataset's validation split has {len(tokens)} tokens, fewer "
                        f"than one prompt of --prompt-len {prompt_len}; lower --prompt-len")
    starts = np.random.default_rng([seed, 2]).integers(0, len(tokens) - prompt_len + 1, size=n)
    return [Request(i, np.asarray(tokens[a:a + prompt_len], dtype=np.int64).tolist(),
                    max_new_tokens or 32, stop_token=ds.vocab.eos if stop_at_eos else None)
            for i, a in enumerate(starts)]


def workload(cfg, ds=None, vocab_size: int = 0) -> list[Request]:
    """The requests ``cfg`` (a ServeConfig) names, arriving at its ``rate`` (0: all at t = 0):
    a dataset's (a text dataset's validation prompts, a person dataset's held-out questions)
    or, with none, random prompts over ``vocab_size`` token ids."""
    if ds is None:
        reqs = random_workload(vocab_size, cfg.requests, cfg.prompt_len, cfg.max_new_tokens,
                               cfg.seed, cfg.length_spread)
    elif ds.kind == "text":
        reqs = text_workload(ds, cfg.requests, cfg.prompt_len, cfg.max_new_tokens, cfg.seed,
                             cfg.stop_at_eos)
    else:
        reqs = dataset_workload(ds, cfg.requests, cfg.max_new_tokens, cfg.seed, cfg.stop_at_eos)
    return with_arrivals(reqs, cfg.rate, cfg.seed)
