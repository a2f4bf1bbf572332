"""Every batching mode over the same workload, side by side, with the bounds; torch-free, so
``serve-bench`` (the torch engine) and ``serve-sim`` (the priced one) produce the same rows.

Per mode: output tokens/s, TTFT and inter-token latency percentiles, mean exit depth and its
histogram, core launches and rows per launch, padding waste (empty places in core launches of
``width`` rows), launches per token by stage, host syncs, KV memory, realized speedup over
``static``, the ceiling ``(F0 + K_max Fr) / (F0 + mean_depth Fr)``, fraction of ceiling
(``realized / ceiling`` and ``(realized - 1) / (ceiling - 1)``); the continuous-depth-batching
paper's bound (parameter FLOPs, the requested depths, each request's first token at full
depth) and the fraction of it realized, over the whole run and over the steady-state window
(the middle 80% of emitted tokens); the achievable bound (``achievable_bound``: the work every
mode shares at the cheapest any mode of the comparison paid for it, the looped work at
``static``'s price scaled by depth) and the fraction of it realized, over the same two spans;
and the exact-match recall of what was generated when the
workload comes from a dataset. ``compare_modes`` takes an executor factory.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from depthbench.config import ServeConfig, kv_layout, shape_of
from depthbench.flops import FlopModel
from depthbench.serving.executor import STAGES, TurnClock
from depthbench.serving.scheduler import POOLED, Request, Scheduler, cdb_sizes, knob_defaults

ADAPTIVE = ("cdb", "no_refill", "batch1")   # the modes whose tokens exit at their own depth


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


def _percentiles(x: list[float]) -> dict:
    if not x:
        return {"p50": None, "p90": None, "p99": None}
    a = np.asarray(x) * 1000.0
    return {f"p{q}": float(np.percentile(a, q)) for q in (50, 90, 99)}


def resolve_knobs(cfg, device_type: str):
    """``cfg`` (a ServeConfig or SimConfig) with each batching knob left at 0 set to the default
    for ``device_type`` (``scheduler.knob_defaults``), so the result records what ran."""
    d = knob_defaults(cfg.width, device_type, cfg.min_coda_batch)
    cfg = cfg.replace(**{k: getattr(cfg, k) or v for k, v in d.items()})
    # no engine holds more rows than there are requests (engine_rows), nor takes more into a
    # launch: the record names the width and pool that ran
    return cfg.replace(width=min(cfg.width, cfg.requests), pool=min(cfg.pool, cfg.requests))


def engine_rows(mode: str, cfg: ServeConfig) -> int:
    """KV rows an engine needs for ``mode``: 1 for batch1, cdb's pool (cdb and static), else
    the width."""
    if mode == "batch1":
        return 1
    rows = (cdb_sizes(cfg.width, cfg.min_coda_batch, cfg.pool)[1] if mode in POOLED
            else cfg.width)
    return min(rows, cfg.requests)  # never more KV rows than requests


def prompt_slots(mode: str, cfg: ServeConfig) -> int:
    """Prompt-token work items an engine needs for ``mode``: the prefill chunk in the pooled
    modes (chunked prefill), else none."""
    return cfg.prefill_chunk if mode in POOLED else 0


def splits_prompts(cfg: ServeConfig) -> bool:
    """Whether chunked prefill may split a prompt across launches: where the KV layout keeps
    every loop's keys, a later chunk reads an earlier one as a whole-prompt prefill does."""
    n_private, shared, _ = kv_layout(cfg.kv_policy, cfg.max_depth)
    return n_private == cfg.max_depth and not shared


def _scheduler(eng, mode: str, cfg: ServeConfig) -> Scheduler:
    return Scheduler(eng, mode, 1 if mode == "batch1" else cfg.width, cfg.admit_min,
                     cfg.min_coda_batch, cfg.coda_wait, cfg.pool, prompt_slots(mode, cfg),
                     splits_prompts(cfg))


def run_side_by_side(entries: dict, requests: list[Request],
                     interleave: bool = True) -> dict:
    """Each entry ``key: (mode, cfg, make_engine)`` (an executor factory taking a clock or None: the
    real ``Engine`` or the simulator's) serves ``requests`` on a fresh engine, timed by the
    engine's clock: per key the mode's result and the requests served. With ``interleave`` the
    entries run side by side, one scheduler step (a core launch and what precedes it) at a time,
    each step going to the entry with the fewest tokens emitted so far, each engine on a
    ``TurnClock`` that runs only during its own steps: the entries start and finish together, so
    a drift in the machine's speed over the run hits all of them alike. Otherwise (the
    simulator; CUDA, where a launch outlives its step) one after another."""
    def prepare(key):
        mode, cfg, make = entries[key]
        if cfg.warmup_requests:  # first-call allocations and kernel selection stay out of the timing
            _scheduler(make(), mode, cfg).run([q.fresh() for q in requests[: cfg.warmup_requests]])
        eng = make(TurnClock() if interleave else None)
        sched, reqs = _scheduler(eng, mode, cfg), [q.fresh() for q in requests]
        return sched, cfg, reqs, sched.steps(reqs)

    def result(sched, cfg, reqs):   # the engine (and its KV store) is dropped after this
        done = sorted(reqs, key=lambda q: q.id)
        return mode_result(sched.mode, cfg, done, sched.engine, sched.now(), sched.width,
                           sched.t0), done

    out = {}
    if not interleave:   # one engine at a time: no more memory than the largest mode needs
        for key in entries:
            sched, cfg, reqs, steps = prepare(key)
            deque(steps, maxlen=0)   # run every step
            out[key] = result(sched, cfg, reqs)
        return out
    live = {key: prepare(key) for key in entries}
    while live:
        key = min(live, key=lambda k: live[k][0].emitted)
        sched, cfg, reqs, steps = live[key]
        sched.clock.resume()
        try:
            next(steps)
        except StopIteration:
            del live[key]
            out[key] = result(sched, cfg, reqs)
        finally:
            sched.clock.pause()
    return {key: out[key] for key in entries}


def mode_result(mode: str, cfg: ServeConfig, done: list[Request], eng, wall: float,
                width: int, t0: float = 0.0) -> dict:
    """One mode's row (``t0``: the engine clock's reading when the scheduler started, what
    the requests' token times count from)."""
    n_tokens = sum(len(q.output) for q in done)
    decode_depths = [d for q in done for d in q.depths[1:]]  # the first token comes from prefill
    itl = [b - a for q in done for a, b in zip(q.token_times, q.token_times[1:])]
    hist = np.bincount(decode_depths, minlength=cfg.max_depth + 1)[1:].tolist() if decode_depths else []
    st = eng.stats
    times = [t for q in done for t in q.token_times]
    depths = [d for q in done for d in q.depths]
    # per emitted token, the prompt it was prefilled with (its request's first token) or 0
    prompts = [len(q.prompt) if i == 0 else 0 for q in done for i in range(len(q.depths))]
    recall = [q.output[: len(q.target)] == q.target for q in done if q.target]
    # seconds on prompt tokens: prefill launches, and the prompt tokens' share of launches that
    # carry them beside decode tokens (chunked prefill)
    prefill_s = eng.prompt_seconds()
    decode_s = max(wall - prefill_s, 1e-9)
    steady = steady_state(times)
    lo, hi = steady.pop("_window")
    return {
        "mode": mode, "wall_s": wall, "output_tokens": n_tokens, "tokens_per_s": n_tokens / wall,
        # decode alone: the first token of each request comes from the (full-depth) prefill
        "prefill_s": prefill_s, "decode_tokens_per_s": len(decode_depths) / decode_s,
        "ttft_ms": _percentiles([q.token_times[0] - q.arrival for q in done]),
        "itl_ms": _percentiles(itl),
        "mean_depth": float(np.mean(decode_depths)) if decode_depths else float("nan"),
        "depth_histogram": hist,
        "core_launches": st["core_launches"],
        "rows_per_launch": st["core_rows"] / max(1, st["core_launches"]),
        "padding_waste": 1.0 - st["core_rows"] / max(1, st["core_launches"] * width),
        "exact_match": float(np.mean(recall)) if recall else None,
        "kv_cache_mb": eng.kv_nbytes / 2**20,
        # where the time went: engine launches by kind, the rest is scheduling
        "time_split": {k: st[f"{k}_s"] / wall for k in STAGES},
        "launches_per_token": {k: st[f"{k}_launches"] / max(1, n_tokens) for k in STAGES},
        "host_syncs": st["syncs"],
        **steady,
        # the tokens the bounds are priced on, and the seconds per decoded token outside the
        # loop over the whole run and the steady window (add_all_bounds pops them)
        "_tokens": {"depths": depths, "prompts": prompts},
        "_nonlooped": {"whole": eng.nonlooped_per_token(),
                       "steady": (eng.nonlooped_per_token(t0 + lo, t0 + hi)
                                  if lo is not None else None)},
    }


def steady_state(times: list[float], trim: float = 0.1) -> dict:
    """Throughput over the steady-state window: the tokens emitted between the ``trim`` and
    ``1 - trim`` quantiles of emission time (fill and drain removed), and which tokens those
    are (the window's bounds are priced on them), and the window's ends (``_window``)."""
    if len(times) < 10:
        return {"steady_tokens_per_s": None, "steady_window_s": None,
                "_steady": [False] * len(times), "_window": (None, None)}
    t = np.asarray(times)
    lo, hi = np.quantile(t, [trim, 1 - trim])
    inside = (t > lo) & (t <= hi)
    n = int(inside.sum())
    return {"steady_tokens_per_s": n / (hi - lo) if hi > lo else None,
            "steady_window_s": float(hi - lo), "_steady": inside.tolist(),
            "_window": (float(lo), float(hi))}


def paper_bound(fm: FlopModel, k_max: int, depths: list[int]) -> float:
    """The continuous-depth-batching paper's bound (its eq. 1): parameter-only FLOPs, every
    token priced at its requested depth and each request's first token at full depth (the
    depth lists carry it: prefill emits at ``k_max``)."""
    if not depths:
        return float("nan")
    return len(depths) * fm.forward(k_max) / sum(fm.forward(d) for d in depths)


class Prices(NamedTuple):
    """Seconds per token that price the achievable bound (``achievable_bound``): what ``static``
    paid, and the cheapest any mode of the comparison paid for the work every mode shares."""
    prompt: float        # static: per prompt token (its prefill)
    decoded: float       # static: per decoded token at full depth (all but the prefill)
    shared: float        # of which outside the loop (prelude, coda, head)
    best_prompt: float   # the least any mode paid per prompt token
    best_shared: float   # the least any mode paid per decoded token outside the loop


def flop_prices(fm: FlopModel, k_max: int, prompt: float = 1.0, decoded: float = 1.0) -> Prices:
    """Prices with nothing measured: time proportional to parameter FLOPs, the non-looped share
    of a decoded token ``F0 / F(k_max)``."""
    shared = decoded * fm.f0 / fm.forward(k_max)
    return Prices(prompt, decoded, shared, prompt, shared)


def ideal_seconds(fm: FlopModel, k_max: int, depths: list[int], prompts: list[int],
                  prices: Prices | None = None) -> float:
    """The seconds depth alone would take on these tokens (see ``achievable_bound``): every
    prompt token at ``best_prompt``, every decoded token at ``best_shared`` for its non-looped
    work plus static's looped seconds per token, ``decoded - shared``, scaled by its depth,
    ``d / k_max``. Over a whole run, ``ideal_seconds / wall`` is ``speedup /
    achievable_bound``."""
    p = prices or flop_prices(fm, k_max)
    loop = max(p.decoded - p.shared, 0.0) / k_max
    return (p.best_prompt * sum(q for q in prompts if q)
            + sum(p.best_shared + loop * d for d, q in zip(depths, prompts) if not q))


def achievable_bound(fm: FlopModel, k_max: int, depths: list[int], prompts: list[int],
                     prices: Prices | None = None) -> float:
    """The speedup over ``static`` that depth allows on these tokens, counting the work every
    mode shares: each request's prompt prefilled at full depth and every decoded token's
    prelude, coda and head. Per emitted token (``prompts[i]`` > 0: a request's first token,
    from the prefill of a prompt of that many tokens), what static pays (``prices.prompt`` per
    prompt token, ``prices.decoded`` per decoded token) over ``ideal_seconds``: the shared work
    at the cheapest price any mode of the comparison paid for it and static's looped seconds
    scaled by depth. Taking the shared work at the cheapest price keeps the bound a bound when
    a mode batches its non-looped launches better than static does (a coda launch reads every
    weight of its layers, however few rows it holds): whatever a mode gains that way is counted
    in the bound, not in its fraction of it. ``add_all_bounds`` measures the prices; without
    them (``flop_prices``: time proportional to FLOPs) the bound equals ``paper_bound`` when
    every prompt is one token."""
    if not depths:
        return float("nan")
    p = prices or flop_prices(fm, k_max)
    static = p.prompt * sum(q for q in prompts if q) + p.decoded * sum(1 for q in prompts if not q)
    return static / ideal_seconds(fm, k_max, depths, prompts, p)


def result_rows(res: dict, **keys) -> list[dict]:
    """Flat result rows (one per mode) of a serve_bench result, led by grouping ``keys``."""
    rows = []
    for r in res["results"]:
        row = {**keys, **{k: v for k, v in r.items() if not isinstance(v, (dict, list))}}
        for name, fmt in (("ttft_ms", "ttft_{}_ms"), ("itl_ms", "itl_{}_ms"),
                          ("time_split", "time_{}"), ("launches_per_token", "launches_per_token_{}")):
            row.update({fmt.format(k): v for k, v in r[name].items()})
        rows.append(row)
    return rows


def compare_modes(engines, mcfg, requests: list[Request], cfg: ServeConfig,
                  seq_len_for_flops: int, progress=None, interleave: bool = False) -> dict:
    """Every mode of ``cfg`` over the same requests (``engines(mode)`` makes a fresh engine;
    ``interleave``: side by side, see ``run_side_by_side``), with the bounds, speedups over
    ``static`` and whether the adaptive modes agree. ``mcfg``: a model config or any looped
    model's shape (``model.shape``)."""
    shape = shape_of(mcfg)
    fm = FlopModel.of_shape(shape, seq_len_for_flops)
    fm_params = FlopModel.of_shape(shape, 0)   # parameters only, the paper's convention
    ran = run_side_by_side({m: (m, cfg, engines(m)) for m in cfg.modes}, requests, interleave)
    results = [ran[m][0] for m in cfg.modes]
    outputs = {m: ran[m][1] for m in cfg.modes}
    if progress:
        progress(", ".join(cfg.modes))
    add_all_bounds(results, fm, fm_params, cfg.max_depth)
    same = None
    adaptive = [m for m in ADAPTIVE if m in outputs]
    if len(adaptive) > 1:
        ref = [q.output for q in outputs[adaptive[0]]]
        same = all([q.output for q in outputs[m]] == ref for m in adaptive[1:])
    return {"config": cfg.to_dict(), "exit": cfg.exit, "results": results,
            "adaptive_modes_agree": same, "f0": fm.f0, "fr": fm.fr,
            "outputs": {m: [q.output for q in d] for m, d in outputs.items()},
            "depth_traces": {m: {str(q.id): q.depths[1:] for q in d} for m, d in outputs.items()}}


def add_all_bounds(results: list[dict], fm: FlopModel, fm_params: FlopModel, k_max: int) -> None:
    """Bounds, speedups over ``static`` and fractions of every mode's result of one comparison
    (results straight from ``mode_result``). The prices (``Prices``) are static's seconds per
    token and the cheapest any mode paid per token for the shared work (per prompt token, and
    per decoded token outside the loop), over the whole run and over the steady windows."""
    static = next((r for r in results if r["mode"] == "static"), None)
    # a static mode runs max depth: its bounds are priced on the tokens an adaptive mode ran
    requested = next((r["_tokens"] for r in results if r["mode"] in ADAPTIVE), None)
    prices, steady = flop_prices(fm_params, k_max), None
    flop_share = fm_params.f0 / fm_params.forward(k_max)
    per = {}   # mode -> seconds per prompt token, per decoded token outside the loop (whole, steady)
    for r in results:
        nl = r.pop("_nonlooped", None)
        n_prompt = sum(r["_tokens"]["prompts"])
        n_decoded = sum(1 for p in r["_tokens"]["prompts"] if not p)
        if not (n_prompt and n_decoded):
            continue
        if nl is None or nl["whole"] is None:   # stages not timed apart: the FLOP share
            nl = {"whole": (r["wall_s"] - r["prefill_s"]) / n_decoded * flop_share, "steady": None}
        per[r["mode"]] = (r["prefill_s"] / n_prompt, nl["whole"], nl["steady"])
    rest = static["wall_s"] - static["prefill_s"] if static is not None else 0.0
    if "static" in per and rest > 0:   # static's own seconds
        prompt, shared, shared_steady = per["static"]
        n_decoded = sum(1 for p in static["_tokens"]["prompts"] if not p)
        decoded = rest / n_decoded
        prices = Prices(prompt, decoded, min(shared, decoded), min(v[0] for v in per.values()),
                        min(v[1] for v in per.values()))
        in_window = [v[2] for v in per.values() if v[2] is not None]
        steady = _steady_prices(static, prices, shared_steady, min(in_window, default=None))
    for r in results:
        add_bounds(r, static, fm, fm_params, k_max, requested, prices, steady)


def _steady_prices(static: dict, prices: Prices, shared: float | None,
                   best_shared: float | None) -> Prices | None:
    """Static's prices in its steady state: a prompt token at its whole-run price, a decoded
    token at what the rest of its steady window's seconds cost per decoded token there (the
    whole run's decode price also carries the fill and drain, when launches run part empty), the
    shared work at the steady windows' prices (``shared``: static's, ``best_shared``: the least
    any mode paid in its own window; the whole run's where a window has none)."""
    if not static.get("steady_window_s"):
        return None
    inside = [p for p, s in zip(static["_tokens"]["prompts"], static["_steady"]) if s]
    decoded = sum(1 for p in inside if not p)
    rest = static["steady_window_s"] - prices.prompt * sum(inside)
    if not (decoded and rest > 0):
        return None
    shared = prices.shared if shared is None else shared
    best = prices.best_shared if best_shared is None else best_shared
    decoded = max(rest / decoded, shared)
    return prices._replace(decoded=decoded, shared=shared, best_shared=min(best, shared))


def add_bounds(r: dict, static: dict | None, fm: FlopModel, fm_params: FlopModel, k_max: int,
               requested: dict | None, prices: Prices | None = None,
               steady_prices: Prices | None = None) -> None:
    """The bounds of one mode's result and, given the ``static`` result, realized fractions.

    Every bound is priced on the tokens of the throughput it divides: the whole run's tokens
    (``paper_bound``, ``achievable_bound``) or the steady-state window's (``steady_bound``,
    ``steady_achievable_bound``). A static mode runs max depth: its bounds are priced on the
    tokens (``requested``: depths and prompts) of an adaptive mode of the same comparison, over
    its whole run, the bound of the workload. ``prices``: see ``achievable_bound``;
    ``steady_prices``: static's seconds per token in its steady state (``_steady_prices``).

    ``steady_achievable_fraction`` of an adaptive mode is the window's own tokens' ideal seconds
    (``ideal_seconds`` at static's steady-state prices) over the window's measured seconds:
    static's steady window holds another mix of prompts and decoded tokens than the mode's, so a
    ratio of the two windows' throughputs prices the mode's window at the wrong mix. Over the
    whole run the same quotient at the whole run's prices is ``achievable_fraction``."""
    tokens, steady = r.pop("_tokens"), r.pop("_steady")
    if r["mode"] not in ADAPTIVE and requested is not None:
        tokens, steady = requested, [True] * len(requested["depths"])
    depths, prompts = tokens["depths"], tokens["prompts"]
    win_d = [d for d, s in zip(depths, steady) if s]
    win_p = [p for p, s in zip(prompts, steady) if s]
    ceiling = fm.ceiling(k_max, r["mean_depth"])
    r["ceiling"] = ceiling
    r["paper_bound"] = paper_bound(fm_params, k_max, depths)
    r["achievable_bound"] = achievable_bound(fm_params, k_max, depths, prompts, prices)
    r["steady_bound"] = paper_bound(fm_params, k_max, win_d) if win_d else None
    r["steady_achievable_bound"] = (achievable_bound(fm_params, k_max, win_d, win_p, prices)
                                    if win_d else None)
    if static is None:
        return
    realized = r["tokens_per_s"] / static["tokens_per_s"]
    r["speedup"] = realized
    r["fraction_of_ceiling"] = realized / ceiling
    r["fraction_of_gain"] = (realized - 1) / (ceiling - 1) if ceiling > 1 + 1e-9 else None
    dec = r["decode_tokens_per_s"] / static["decode_tokens_per_s"]
    r["decode_speedup"] = dec
    r["decode_fraction_of_ceiling"] = dec / ceiling
    r["paper_fraction"] = realized / r["paper_bound"]
    r["achievable_fraction"] = realized / r["achievable_bound"]
    ss, ss0 = r["steady_tokens_per_s"], static["steady_tokens_per_s"]
    r["steady_speedup"] = ss / ss0 if ss and ss0 else None
    r["steady_fraction"] = (r["steady_speedup"] / r["steady_bound"]
                            if r["steady_speedup"] and r["steady_bound"] else None)
    if r["mode"] in ADAPTIVE and steady_prices and win_d and r["steady_window_s"]:
        r["steady_achievable_fraction"] = (
            ideal_seconds(fm_params, k_max, win_d, win_p, steady_prices) / r["steady_window_s"])
    else:   # a static mode (its window's tokens are all at full depth), or no measured prices
        r["steady_achievable_fraction"] = (r["steady_speedup"] / r["steady_achievable_bound"]
                                           if r["steady_speedup"] and r["steady_achievable_bound"]
                                           else None)
