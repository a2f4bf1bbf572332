"""Every batching mode over the same workload, side by side, with the bound; torch-free, so
``serve-bench`` (the torch engine) and ``serve-sim`` (the priced one) produce the same rows.

Per mode: output tokens/s, TTFT and inter-token latency percentiles, mean exit depth and its
histogram, core launches and rows per launch, padding waste (empty places in core launches of
``width`` rows), launches per token by stage, host syncs, KV memory, throughput over the
steady-state window (a description: no ratio between modes is taken over windows), and the
exact-match recall of what was generated when the workload comes from a dataset. Over whole
runs: the mode's ``fraction`` of the ideal time of its work under a per-stage cost model
(``serving.bound``), its ``speedup`` over full-depth serving at its own best knobs
(``full_depth``, chosen among ``baseline_candidates``), its ``bound`` (the speedup at the ideal
time), its speedup over ``static`` at the comparison's knobs, the FLOP ceiling ``(F0 + K_max
Fr) / (F0 + mean_depth Fr)`` and the paper's eq. 1 estimate. ``compare_modes`` takes an
executor factory and returns each mode's ``result.ModeResult``, its ``Bounds`` returned by
``bound.mode_bounds``; the serve rows are derived from those (``ModeResult.row``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from depthbench.config import MODES, ServeConfig, shape_of
from depthbench.console import progress_bar
from depthbench.flops import FlopModel
from depthbench.serving.batching import KNOBS, Batching
from depthbench.serving.bound import mode_bounds
from depthbench.serving.executor import STAGES, TurnClock
from depthbench.serving.result import Comparison, ModeResult
from depthbench.serving.scheduler import Scheduler
from depthbench.serving.workload import Request


def _percentiles(x: list[float]) -> dict:
    """Seconds -> milliseconds: mean, p50, p90 and p99 (None where there is nothing)."""
    if not x:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(x) * 1000.0
    return {"mean": float(a.mean()), **{f"p{q}": float(np.percentile(a, q)) for q in (50, 90, 99)}}


def latencies(done: list[Request], wall: float, slo_ttft_ms: float = 0.0,
              slo_tpot_ms: float = 0.0) -> dict:
    """The latencies serving benchmarks report (vLLM's ``benchmark_serving``), per request from
    its arrival (in a closed loop, when it was sent): TTFT (to its first token), TPOT (time per
    output token after the first: (last - first) / (n - 1)), ITL (between consecutive tokens),
    E2E (arrival to last token) and normalized latency (E2E per output token), each as mean and
    percentiles in ms; requests/s; and goodput, the requests per second that met every SLO
    given (TTFT and TPOT, in ms; none given: every request counts)."""
    done = [q for q in done if q.token_times]
    ttft = [q.token_times[0] - q.arrival for q in done]
    # per request; None for a request of one token (no time after its first)
    per_tpot = [(q.token_times[-1] - q.token_times[0]) / (len(q.token_times) - 1)
                if len(q.token_times) > 1 else None for q in done]
    e2e = [q.token_times[-1] - q.arrival for q in done]
    good = [1 for t, p in zip(ttft, per_tpot)
            if (not slo_ttft_ms or 1000 * t <= slo_ttft_ms)
            and (not slo_tpot_ms or p is None or 1000 * p <= slo_tpot_ms)]
    return {"ttft_ms": _percentiles(ttft),
            "tpot_ms": _percentiles([p for p in per_tpot if p is not None]),
            "itl_ms": _percentiles([b - a for q in done for a, b in zip(q.token_times, q.token_times[1:])]),
            "e2e_ms": _percentiles(e2e),
            "norm_latency_ms": _percentiles([e / len(q.token_times) for q, e in zip(done, e2e)]),
            "requests_per_s": len(done) / wall if wall > 0 else None,
            "goodput_requests_per_s": len(good) / wall if wall > 0 else None,
            "slo_attainment": len(good) / len(done) if done else None}


def run_side_by_side(entries: dict, requests: list[Request], cfg: ServeConfig,
                     interleave: bool = True, warm=None) -> dict:
    """Each entry ``key: (mode, batching, make_engine)`` (a ``Batching``; an executor factory
    taking a clock or None: the real ``Engine`` or the simulator's) serves ``requests`` on a
    fresh engine, timed by the engine's clock, after ``cfg.warmup_requests`` untimed ones on
    another; per key the mode's result (depths counted to ``cfg.max_depth``, goodput under its
    SLOs) and the requests served. With ``interleave`` the entries run side by side, one
    scheduler step (a core launch and what precedes it) at a time, each step going to the entry
    with the fewest tokens emitted so far, each engine on a ``TurnClock`` that runs only during
    its own steps: the entries start and finish together, so a drift in the machine's speed over
    the run hits all of them alike. Otherwise (the simulator; CUDA, where a launch outlives its
    step) one after another. ``warm()`` runs once
    the engines exist, before any timed step (``serving.engine.warm_memory``)."""
    def prepare(key):
        mode, batching, make = entries[key]
        if cfg.warmup_requests:  # first-call allocations and kernel selection stay out of the timing
            Scheduler(make(), mode, batching).run([q.fresh() for q in requests[: cfg.warmup_requests]])
        eng = make(TurnClock() if interleave else None)
        sched, reqs = Scheduler(eng, mode, batching), [q.fresh() for q in requests]
        return sched, reqs, sched.steps(reqs)

    def result(sched, reqs):   # the engine (and its KV store) is dropped after this
        done = sorted(reqs, key=lambda q: q.id)
        return mode_result(sched.mode, cfg, done, sched.engine, sched.now(), sched.width,
                           sched.t0, sched.preemptions), done

    out = {}
    total = len(entries) * sum(q.max_new_tokens for q in requests)
    with progress_bar(total, "serve", "tokens") as bar:   # outside every timed step
        if not interleave:   # one engine at a time: no more memory than the largest mode needs
            for key in entries:
                sched, reqs, steps = prepare(key)
                if warm:
                    warm()
                deque(steps, maxlen=0)   # run every step
                out[key] = result(sched, reqs)
                bar.update(sched.emitted)
            return out
        live = {key: prepare(key) for key in entries}
        if warm:
            warm()
        while live:
            key = min(live, key=lambda k: live[k][0].emitted)
            sched, reqs, steps = live[key]
            before = sched.emitted
            sched.clock.resume()
            try:
                next(steps)
            except StopIteration:
                del live[key]
                out[key] = result(sched, reqs)
            finally:
                sched.clock.pause()
            bar.update(sched.emitted - before)
    return {key: out[key] for key in entries}


def mode_result(mode: str, cfg: ServeConfig, done: list[Request], eng, wall: float,
                width: int, t0: float = 0.0, preemptions: int = 0) -> ModeResult:
    """One mode's row (``t0``: the engine clock's reading when the scheduler started, what
    the requests' token times count from; ``preemptions``: requests the scheduler preempted
    under paged KV and recomputed)."""
    n_tokens = sum(len(q.output) for q in done)
    decode_depths = [d for q in done for d in q.depths[1:]]  # the first token comes from prefill
    hist = np.bincount(decode_depths, minlength=cfg.max_depth + 1)[1:].tolist() if decode_depths else []
    st = eng.stats
    times = [t for q in done for t in q.token_times]
    recall = [q.output[: len(q.target)] == q.target for q in done if q.target]
    prefill_s = eng.prompt_seconds()
    blocks = getattr(eng, "blocks", None)   # paged KV (the simulator's)
    return ModeResult(
        mode=mode, wall_s=wall, output_tokens=n_tokens, tokens_per_s=n_tokens / wall,
        # decode alone: the first token of each request comes from the (full-depth) prefill
        prefill_s=prefill_s,
        decode_tokens_per_s=len(decode_depths) / max(wall - prefill_s, 1e-9),
        latency=latencies(done, wall, cfg.slo_ttft_ms, cfg.slo_tpot_ms),
        mean_depth=float(np.mean(decode_depths)) if decode_depths else float("nan"),
        depth_histogram=hist,
        core_launches=st.stage["core"].launches,
        rows_per_launch=st.core_rows / max(1, st.stage["core"].launches),
        padding_waste=1.0 - st.core_rows / max(1, st.stage["core"].launches * width),
        exact_match=float(np.mean(recall)) if recall else None,
        kv_cache_mb=eng.kv_nbytes / 2**20,
        # the pool's blocks, the most held at once, the requests preempted and recomputed
        kv_blocks=blocks.n_blocks if blocks else None,
        kv_peak_blocks=blocks.peak if blocks else None,
        preemptions=preemptions,
        # where the time went: engine launches by kind, the rest is scheduling
        time_split={k: st.stage[k].seconds / wall for k in STAGES},
        launches_per_token={k: st.stage[k].launches / max(1, n_tokens) for k in STAGES},
        host_syncs=st.syncs,
        **steady_state(times),
        records=eng.records)


def steady_state(times: list[float], trim: float = 0.1) -> dict:
    """Throughput over the steady-state window, the tokens emitted between the ``trim`` and
    ``1 - trim`` quantiles of emission time (fill and drain removed): a description of the run,
    not a ratio between modes (two modes' windows hold different shares of prefill work)."""
    if len(times) < 10:
        return {"steady_tokens_per_s": None, "steady_window_s": None}
    t = np.asarray(times)
    lo, hi = np.quantile(t, [trim, 1 - trim])
    n = int(((t > lo) & (t <= hi)).sum())
    return {"steady_tokens_per_s": n / (hi - lo) if hi > lo else None,
            "steady_window_s": float(hi - lo)}


def baseline_candidates(b: Batching, requests: int) -> dict[str, tuple[str, Batching]]:
    """Full-depth serving's knob sets, by ``Batching.label``: ``static`` at the comparison's
    knobs ``b`` (cdb's, resolved; first), at each device kind's defaults, with the coda every
    iteration, each with and without the comparison's chunked prefill, and ``static_lockstep``
    (no more rows than ``requests``)."""
    sets = [b]
    for dev in ("cpu", "cuda"):
        sets.append(replace(b, **{k: 0 for k in KNOBS[:4]}).resolved(dev, requests))
    sets.append(replace(b, min_coda_batch=1, coda_wait=1))
    sets += [replace(c, prefill_chunk=0) for c in sets if c.prefill_chunk]
    out = {c.label("static"): ("static", c) for c in sets}
    out[b.label("static_lockstep")] = ("static_lockstep", b)
    return out


def pick_baseline(candidates: dict, requests: list[Request], cfg: ServeConfig,
                  engines) -> tuple[str, dict, dict]:
    """The fastest candidate on ``engines(mode, batching)`` (priced executors: the simulator,
    on a given or fitted profile) over ``requests``, every candidate's tokens/s, and every
    candidate's run (``run_side_by_side``'s (result, requests served))."""
    cold = cfg.replace(warmup_requests=0)
    runs = {label: run_side_by_side({label: (mode, b, engines(mode, b))}, requests, cold,
                                    False)[label]
            for label, (mode, b) in candidates.items()}
    tps = {label: res.tokens_per_s for label, (res, _) in runs.items()}
    return max(tps, key=tps.get), tps, runs


def compare_modes(engines, mcfg, requests: list[Request], cfg: ServeConfig, batching: Batching,
                  seq_len_for_flops: int, costs, progress=None, interleave: bool = False,
                  priced=None, level: bool = False, warm=None) -> Comparison:
    """Every mode of ``cfg`` over the same requests at the knobs ``batching`` (resolved;
    ``engines(mode, batching)`` makes a fresh engine; ``interleave``: side by side, see
    ``run_side_by_side``), beside ``static`` at those knobs and full-depth serving at its best
    knobs (``baseline_candidates``, chosen on ``priced(mode, batching)``, the simulator on a
    profile, or on ``engines`` where those are priced already), with each mode's bound under
    ``costs`` (``bound.Costs``) and whether
    the adaptive modes agree. ``mcfg``: a model config or any looped model's shape. ``level``:
    fitted ``costs`` are leveled (``ProfileCosts.leveled``) on ``static``'s launches, which
    must then be recorded (``record=True``); ``warm``: see ``run_side_by_side``."""
    cands = baseline_candidates(batching, len(requests))
    best, tried, runs = pick_baseline(cands, requests, cfg, priced or engines)
    keys = {m: (m, batching) for m in cfg.modes}
    keys.setdefault("static", ("static", batching))
    if best != batching.label("static"):
        keys["full_depth"] = cands[best]
    # where the candidates ran on ``engines`` themselves (priced, so a rerun gives the same
    # run), static and the baseline are taken from there instead of run again
    kept = {} if priced else {"static": runs[batching.label("static")], "full_depth": runs[best]}
    kept = {k: v for k, v in kept.items() if k in keys}
    fresh = run_side_by_side({k: (m, b, engines(m, b)) for k, (m, b) in keys.items()
                              if k not in kept}, requests, cfg, interleave, warm)
    ran = {k: kept[k] if k in kept else fresh[k] for k in keys}
    if progress:
        progress(", ".join(keys))
    measured = {k: res for k, (res, _) in ran.items()}
    if level:   # the fitted costs' level, on the full-depth reference measured beside the modes
        costs = costs.leveled(measured["static"].records)
    measured["full_depth"] = replace(measured.get("full_depth", measured["static"]),
                                     mode="full_depth", baseline=best)
    done = {k: d for k, (_, d) in ran.items()}
    done.setdefault("full_depth", done["static"])
    n_max = (batching.width, max(b.pool for _, b in cands.values()),
             max(b.prefill_chunk for _, b in cands.values()))
    shape = shape_of(mcfg)
    fm = FlopModel.of_shape(shape, seq_len_for_flops)
    fm_params = FlopModel.of_shape(shape, 0)   # parameters only, the paper's convention
    results = {}
    for k, r in measured.items():
        ran_with = keys.get(k, keys["static"])[1]   # the knobs this mode ran with, resolved
        results[k] = replace(r, records=None, knobs=ran_with.knobs(), bounds=mode_bounds(
            r, done[k], measured["full_depth"], measured["static"], fm, fm_params, cfg.max_depth,
            costs, n_max))
    same = None
    adaptive = [m for m in cfg.modes if MODES[m].exits]
    if len(adaptive) > 1:
        ref = [q.output for q in done[adaptive[0]]]
        same = all([q.output for q in done[m]] == ref for m in adaptive[1:])
    return Comparison(
        config=cfg.replace(**batching.knobs()).to_dict(), exit=cfg.exit, results=list(results.values()),
        adaptive_modes_agree=same, f0=fm.f0, fr=fm.fr, baseline=best, baseline_candidates=tried,
        costs=getattr(costs, "source", ""),
        outputs={m: [q.output for q in d] for m, d in done.items()},
        depth_traces={m: {str(q.id): q.depths[1:] for q in d} for m, d in done.items()})
