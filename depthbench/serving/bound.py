"""The serving bound of a workload: the least time its work can take under a per-stage cost model
that no batching mode's knobs influence.

The work (``workload_work``): per stage, the rows a mode must run for the tokens it emitted and
the cached positions those rows read. Each request's prompt is prefilled at full depth (its
first token); every later token runs one start (prelude) row, one core row per loop of its
exit depth, and one finish (coda and head) row, each reading the positions before it. Where
chunked prefill is allowed (``prefill_chunk`` > 0) a prompt token may instead ride in those
launches at full depth, and the cheaper route counts.

The cost of a launch of ``n`` rows reading ``r`` cached positions (``Costs.seconds``) is the
simulator's price of it on a profile (``serving.profile.ProfileCosts``): a hardware profile in ``serve-sim``,
and for the real engine a profile fitted (per stage ``a + alpha FLOPs + beta bytes``, linear in
rows and positions read, plus the scheduler's seconds per launch and per token) to the launch
timers of a width sweep of full-depth serving (``calibrate.width_sweep``), whatever modes are
compared.

The ideal time (``ideal_seconds``) packs each stage's rows into launches of ``n_max`` rows, the
largest any mode may issue (core: ``width`` plus the prefill chunk; start, finish and prefill:
the pool plus the chunk), T* = sum_s [ceil(N_s / n_max) launches priced at the stage's cost],
which for linear costs is sum_s (a_s ceil(N_s / n_max) + b_s N_s + c_s R_s). A mode's
``fraction`` is T* over its measured whole-run seconds, a property of the mode alone (adding or
removing another mode changes nothing); a fraction above 1 says the cost model is wrong.
``mode_bounds`` returns a mode's ``result.Bounds``: its fraction, its speedups, the FLOP ceiling
and the paper's eq. 1 estimate (``paper_bound``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from depthbench.serving.result import Bounds

if TYPE_CHECKING:
    from depthbench.flops import FlopModel
    from depthbench.serving.result import ModeResult
    from depthbench.serving.workload import Request


class Work(NamedTuple):
    """One stage's share of a workload: rows (prefill: prompt tokens), the cached positions those
    rows read (prefill: the sum of squared prompt lengths), the fewest launches they fit, and the
    tokens its rows emit (a finish row of a decoded token emits one, of a prompt token only the
    prompt's last; None: the stage's own convention), on which the host's per-token cost falls,
    as in the modes' launches."""
    rows: float
    read: float
    launches: int
    emitted: float | None = None


class Costs(Protocol):
    def seconds(self, stage: str, rows: float, read: float,
                emitted: float | None = None) -> float: ...


def workload_work(done, max_depth: int, width: int, pool: int, chunk: int) -> list[dict]:
    """The routes a workload's work may take, each {stage: Work}: prompts in prefill launches
    (at most ``pool`` prompts each), and (``chunk`` > 0) prompt tokens riding at full depth in
    the start, core and finish launches beside decode tokens (at most ``chunk`` of them per
    launch). A core launch holds at most ``width`` decode tokens, a start or finish launch at most
    ``pool`` rows. ``done``: the served requests (prompts, and per emitted token its depth; the
    first came from the prompt)."""
    dec = np.zeros(4)   # decoded tokens, their positions read, their loops, positions read by them
    p_tok = p_sq = p_read = n_req = 0.0
    for q in done:
        if not q.depths:
            continue
        P = len(q.prompt)
        n_req += 1
        p_tok, p_sq, p_read = p_tok + P, p_sq + P * P, p_read + P * (P + 1) / 2
        d = np.asarray(q.depths[1:], dtype=float)
        ctx = P + 1 + np.arange(len(d), dtype=float)   # positions the i-th decoded token reads
        dec += (len(d), ctx.sum(), d.sum(), (d * ctx).sum())
    n_dec, r_dec, n_loop, r_loop = dec.tolist()

    def fit(rows, per):
        return math.ceil(rows / per - 1e-9) if rows else 0

    shared = fit(n_dec, pool)
    separate = {"prefill": Work(p_tok, p_sq, fit(n_req, pool)),
                "start": Work(n_dec, r_dec, shared), "core": Work(n_loop, r_loop, fit(n_loop, width)),
                "finish": Work(n_dec, r_dec, shared, n_dec)}
    if not chunk:
        return [separate]
    shared = max(shared, fit(p_tok, chunk))
    core = max(fit(n_loop, width), fit(max_depth * p_tok, chunk))
    chunked = {"prefill": Work(0.0, 0.0, 0),
               "start": Work(n_dec + p_tok, r_dec + p_read, shared),
               "core": Work(n_loop + max_depth * p_tok, r_loop + max_depth * p_read, core),
               "finish": Work(n_dec + p_tok, r_dec + p_read, shared, n_dec + n_req)}
    return [separate, chunked]


def stage_seconds(costs: Costs, stage: str, w: Work) -> float:
    """The least seconds ``w`` takes: its fewest launches, each with an equal share of the rows
    and of the positions read (for a cost convex in rows, such as the roofline's, equal
    launches cost least)."""
    if w.rows <= 0 or w.launches <= 0:
        return 0.0
    if w.emitted is None:
        return w.launches * costs.seconds(stage, w.rows / w.launches, w.read / w.launches)
    return w.launches * costs.seconds(stage, w.rows / w.launches, w.read / w.launches,
                                      w.emitted / w.launches)


def ideal_route(costs: Costs, routes: list[dict]) -> tuple[float, dict]:
    """(T*, the route that takes it): the cheapest route's sum over stages of
    ``stage_seconds``."""
    return min(((sum(stage_seconds(costs, s, w) for s, w in r.items()), r) for r in routes),
               key=lambda x: x[0])


def ideal_seconds(costs: Costs, routes: list[dict]) -> float:
    """T*: the cheapest route's sum over stages of ``stage_seconds``."""
    return ideal_route(costs, routes)[0]


def mode_bounds(r: ModeResult, done: list[Request], base: ModeResult, static: ModeResult,
                fm: FlopModel, fm_params: FlopModel, k_max: int, costs,
                n_max: tuple[int, int, int]) -> Bounds:
    """One mode's bound and speedups, from its result ``r``: ``ideal_s`` (``bound.ideal_seconds``
    of the work it did: T*), ``fraction`` = T* / its whole-run seconds (its own; no other mode
    enters it), ``speedup`` over full-depth serving at its best knobs (``base``), ``bound`` =
    speedup / fraction (its speedup at T*), ``speedup_vs_static`` over ``static`` at the
    comparison's knobs, the FLOP ceiling and the paper's eq. 1 estimate on its own depths."""
    width, pool, chunk = n_max
    ideal, route = ideal_route(costs, workload_work(done, k_max, width, pool, chunk))
    fraction = ideal / r.wall_s
    speedup = r.tokens_per_s / base.tokens_per_s
    ceiling = fm.ceiling(k_max, r.mean_depth)
    decode_speedup = r.decode_tokens_per_s / base.decode_tokens_per_s
    paper = paper_bound(fm_params, k_max, [d for q in done for d in q.depths])
    return Bounds(
        ideal_s=ideal,
        # where the time goes: the ideal's launches per emitted token by stage, beside the mode's
        ideal_launches_per_token={s: w.launches / max(1, r.output_tokens)
                                  for s, w in route.items()},
        fraction=fraction, speedup=speedup,
        bound=speedup / fraction if fraction else None,
        speedup_vs_static=r.tokens_per_s / static.tokens_per_s,
        ceiling=ceiling, fraction_of_ceiling=speedup / ceiling,
        fraction_of_gain=(speedup - 1) / (ceiling - 1) if ceiling > 1 + 1e-9 else None,
        decode_speedup=decode_speedup, decode_fraction_of_ceiling=decode_speedup / ceiling,
        paper_bound=paper, paper_fraction=speedup / paper)


def paper_bound(fm: FlopModel, k_max: int, depths: list[int]) -> float:
    """The continuous-depth-batching paper's estimate (its eq. 1): parameter-only FLOPs, every
    token priced at its depth and each request's first token at full depth (the depth lists
    carry it: prefill emits at ``k_max``)."""
    if not depths:
        return float("nan")
    return len(depths) * fm.forward(k_max) / sum(fm.forward(d) for d in depths)


# a cost fit below this R^2 on a stage, whose residuals are also more than MAX_FIT_ERROR of
# the stage's mean launch time, explains too little of its launches for a fraction of its
# ideal to mean anything (on a busy 2-core CPU the fit has read R^2 0.000 and a fraction 1.29);
# launches that all cost the same are predicted well with an R^2 near 0, hence both
MIN_FIT_R2 = 0.5
MAX_FIT_ERROR = 0.1


def withheld_reason(fit: dict | None, rate: float, concurrency: int = 0,
                    width: int = 0) -> str | None:
    """Why a run's bound and fractions are not reported, or None where they mean something: the
    bound is the least time of a run's work with every request waiting from the start, so under
    open-loop arrivals (``rate`` > 0: the run waits on requests, not on work) or a closed loop of
    fewer clients than a core launch's ``width`` it does not apply (only a saturated run can
    come near it); and a fitted cost model (``fit``: per stage ``r2`` and ``rel_rmse``) that
    explains little of a stage's launch times (R^2 below ``MIN_FIT_R2`` and residuals above
    ``MAX_FIT_ERROR`` of its mean launch) cannot price it."""
    if rate > 0:
        return (f"not applicable under arrivals at {rate:g} requests/s: the bound is the least "
                "time of the work with every request waiting from the start")
    if 0 < concurrency < width:
        return (f"not applicable to a closed loop of {concurrency} clients, fewer than a core "
                f"launch's {width} rows: the bound assumes every request waiting from the start")
    r2, err = (fit or {}).get("r2", {}), (fit or {}).get("rel_rmse", {})
    weak = {k: (v, err.get(k, float("inf"))) for k, v in r2.items()
            if not v >= MIN_FIT_R2 and not err.get(k, float("inf")) <= MAX_FIT_ERROR}
    if weak:
        return ("withheld: the cost fit explains too little of the launch times ("
                + ", ".join(f"{k}: R^2 {a:.2f}, error {b:.0%} of a launch" for k, (a, b) in weak.items())
                + f"; R^2 {MIN_FIT_R2} or an error within {MAX_FIT_ERROR:.0%} needed); rerun on "
                "a quieter machine or with more --requests")
    return None

