"""Exit criteria: when a token stops looping.

A criterion is a spec and its parameters; it imports no torch, so the scheduler and the
simulator read it without a model. Depths known when a token starts (``fixed``, ``trace``,
``replay``: ``known_in_advance``) come from ``start_depth``; the others are decided on the
device after each loop from signals the torch engine computes (``serving.engine``: a per-loop
readout of the coda and head for ``kl``, ``entropy`` and ``argmax``; the learned gate for
``gate``).

    fixed:K       exit at loop K
    latent:TAU    relative state change |s_t - s_{t-1}| / |s_t| < TAU
    kl:TAU        KL(p_t || p_{t-1}) < TAU (nats)
    entropy:TAU   entropy of p_t < TAU (nats)
    argmax:N      the argmax has not changed for N loops
    gate:Q        the learned exit gate's halting probability > Q
    qexit:Q       Ouro's rule: the cumulative exit probability 1 - prod_{s<=t} (1 - sigmoid(gate_s))
                  reaches Q (the exit distribution Ouro's gate defines; Q in (0, 1])
    replay:FILE   depths recorded in a JSON trace {"request id": [depth per token, ...]}
    trace:MEAN    a synthetic trace: depths ~ 1 + Binomial(max_depth - 1, (MEAN-1)/(max_depth-1)),
                  seeded per (request, token): for random-weight models

Every criterion fires only from ``min_depth`` on and is forced at ``max_depth``. With
``lookahead`` the decision to stop after loop t is taken from the signal of loop t-1, so the
scheduler knows which items leave before the launch of loop t is read back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from depthbench.errors import UserError
from depthbench.schedules import MAX_DEPTH

KNOWN_IN_ADVANCE = ("fixed", "trace", "replay")

EXIT_HELP = ("fixed:K, latent:TAU, kl:TAU, entropy:TAU, argmax:N, gate:Q, qexit:Q, "
             "replay:FILE.json, trace:MEAN")


class ExitSpecError(UserError, ValueError):
    """An exit-criterion spec that does not parse."""


@dataclass(frozen=True)
class ExitCriterion:
    kind: str
    value: float = 0.0
    trace: dict | None = None
    min_depth: int = 1
    max_depth: int = 16
    lookahead: bool = False
    seed: int = 0

    @classmethod
    def fixed(cls, k: int, max_depth: int | None = None) -> ExitCriterion:
        """Every token at loop ``k`` (within 1..``max_depth``, default ``k``)."""
        return cls("fixed", k, max_depth=max_depth or k)

    @property
    def needs_logits(self) -> bool:
        return self.kind in ("kl", "entropy", "argmax")

    @property
    def needs_gate(self) -> bool:
        return self.kind in ("gate", "qexit")

    @property
    def known_in_advance(self) -> bool:
        """Whether a token's exit depth is known when it starts (no signal is read)."""
        return self.kind in KNOWN_IN_ADVANCE

    def check_model(self, shape) -> None:
        """A criterion that reads an exit gate needs a model (its ``LoopShape``) that has one."""
        if self.needs_gate and not shape.exit_gate:
            raise ExitSpecError(f"exit {self.kind}:Q needs a model with an exit gate (trained "
                                "with exit_gate=true, or Ouro's); choose another --exit")

    def check_covers(self, request_ids) -> None:
        """A replay trace must name every request of the workload it is replayed on (a request
        it does not name would silently run at max depth)."""
        if self.kind != "replay":
            return
        missing = [i for i in request_ids if str(i) not in self.trace]
        if missing:
            raise ExitSpecError(f"the exit trace has no depths for {len(missing)} of the "
                                f"{len(list(request_ids))} requests (e.g. request {missing[0]}); "
                                "record it with --save-trace on the same workload")

    def trace_depth(self, request_id: int, token_index: int) -> int:
        """The depth a trace assigns to token ``token_index`` of request ``request_id``."""
        if self.kind == "replay":
            depths = self.trace.get(str(request_id))
            if depths is None or token_index >= len(depths):
                # a token the trace never saw would run at some depth nobody chose
                raise ExitSpecError(f"the exit trace holds {0 if depths is None else len(depths)} "
                                    f"depths for request {request_id}, which decodes more tokens "
                                    "here; record the trace with --save-trace on the same "
                                    "workload (requests and --max-new-tokens)")
            return int(depths[token_index])
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(request_id, token_index)))
        p = (self.value - 1) / max(1, self.max_depth - 1)
        return 1 + int(rng.binomial(self.max_depth - 1, min(max(p, 0.0), 1.0)))

    def start_depth(self, request_id: int, token_index: int) -> int:
        """The exit depth of decoded token ``token_index`` of ``request_id``, for a criterion
        known in advance, within [min_depth, max_depth]. A synthetic trace draws the loop at
        which a criterion's signal fires; with ``lookahead`` the stop is read one loop later, so
        the token runs that one more loop, as a signal criterion does on the real engine (a
        replayed trace holds the recorded exits themselves, and fixed:K fires on no signal)."""
        assert self.known_in_advance, self.kind
        d = int(self.value) if self.kind == "fixed" else self.trace_depth(request_id, token_index)
        if self.lookahead and self.kind == "trace":
            d += 1
        return min(max(d, self.min_depth), self.max_depth)


def replay_file(spec: str) -> str:
    """The trace file a ``replay:FILE`` exit spec reads ("" for any other spec)."""
    kind, _, arg = str(spec).strip().partition(":")
    return arg if kind == "replay" else ""


def parse_exit(spec: str, min_depth: int = 1, max_depth: int = 16, lookahead: bool = False,
               seed: int = 0) -> ExitCriterion:
    if not (isinstance(min_depth, int) and isinstance(max_depth, int) and 1 <= min_depth <= max_depth):
        raise ExitSpecError(f"need 1 <= min_depth <= max_depth (got {min_depth}, {max_depth})")
    kind, sep, arg = str(spec).strip().partition(":")
    if not sep or not arg:
        raise ExitSpecError(f"exit spec {spec!r} is not KIND:VALUE; specs: {EXIT_HELP}")
    common = dict(min_depth=min_depth, max_depth=max_depth, lookahead=lookahead, seed=seed)
    if kind == "replay":
        path = Path(arg)
        try:
            trace = json.loads(path.read_text())
        except FileNotFoundError:
            raise ExitSpecError(f"exit trace {path} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ExitSpecError(f"exit trace {path} is not JSON") from None
        if not isinstance(trace, dict) or not all(
                isinstance(k, str) and k.isdigit() and isinstance(v, list)
                and all(type(d) is int and 1 <= d <= MAX_DEPTH for d in v)
                for k, v in trace.items()):
            raise ExitSpecError(f"exit trace {path} must map request ids (\"0\", \"1\", ...) to "
                                f"lists of depths, integers in 1..{MAX_DEPTH}")
        if not trace:
            raise ExitSpecError(f"exit trace {path} names no request")
        return ExitCriterion("replay", trace=trace, **common)
    try:
        value = float(arg)
    except ValueError:
        raise ExitSpecError(f"exit spec {spec!r}: {arg!r} is not a number; specs: {EXIT_HELP}") from None
    if not math.isfinite(value):
        raise ExitSpecError(f"exit spec {spec!r}: the value must be finite")
    if kind in ("fixed", "argmax"):
        if value != int(value) or value < 1:
            raise ExitSpecError(f"exit spec {spec!r}: {kind} takes an integer >= 1")
        if kind == "fixed" and value > max_depth:
            raise ExitSpecError(f"exit spec {spec!r}: K={int(value)} exceeds max_depth={max_depth}")
        return ExitCriterion(kind, int(value), **common)
    if kind in ("latent", "kl", "entropy"):
        if value <= 0:
            raise ExitSpecError(f"exit spec {spec!r}: the threshold must be > 0")
        return ExitCriterion(kind, value, **common)
    if kind == "gate":
        if not 0 < value < 1:
            raise ExitSpecError(f"exit spec {spec!r}: the gate threshold must be in (0, 1)")
        return ExitCriterion(kind, value, **common)
    if kind == "qexit":
        if not 0 < value <= 1:
            raise ExitSpecError(f"exit spec {spec!r}: the cumulative exit probability must be in (0, 1]")
        return ExitCriterion(kind, value, **common)
    if kind == "trace":
        if not 1 <= value <= max_depth:
            raise ExitSpecError(f"exit spec {spec!r}: the mean depth must be in [1, max_depth]")
        return ExitCriterion(kind, value, **common)
    raise ExitSpecError(f"exit spec {spec!r} is not understood; specs: {EXIT_HELP}")
