"""Calibration on this machine: the real engine run with launch timers on, and a profile fitted
to what it measured (per stage ``a + alpha FLOPs + beta bytes`` by non-negative least squares,
then the scheduler's seconds per core launch and per emitted token): ``serve-sim --calibrate``,
and the cost model of ``serve-bench``'s bound on the CPU."""

from __future__ import annotations

import platform
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from depthbench.config import MODES, ModelConfig, ServeConfig, SimConfig
from depthbench.errors import UserError
from depthbench.serving.executor import STAGES
from depthbench.serving.profile import Profile, stage_work


def machine() -> str:
    import torch
    return f"{platform.machine()} {platform.processor() or platform.system()}, " \
           f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


# ---- calibration on this machine -----------------------------------------------------------------
def fit_records(cfg: ModelConfig, records, max_depth: int, bytes_per_value: int) -> dict:
    """Per stage [a, alpha, beta] by non-negative least squares of launch seconds on
    (1, FLOPs, bytes), the fit's R^2 and its residuals' RMS over the mean launch time (a stage
    of launches that all cost the same is predicted well with an R^2 near 0)."""
    from scipy.optimize import nnls
    fit, r2, rel = {}, {}, {}
    for stage in STAGES:
        rec = [r for r in records if r[0] == stage]
        if len(rec) < 3:
            raise UserError(f"calibration saw {len(rec)} {stage} launches; raise --requests")
        X = np.array([[1.0, *stage_work(cfg, stage, rows, tok, L, max_depth, bytes_per_value, cp)]
                      for _, rows, tok, L, cp, _ in rec])
        y = np.array([r[-1] for r in rec])
        scale = X.max(axis=0)
        scale[scale == 0] = 1.0
        coef, _ = nnls(X / scale, y)
        coef = coef / scale
        fit[stage] = [float(c) for c in coef]
        resid = y - X @ coef
        r2[stage] = float(1 - (resid ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-30))
        rel[stage] = float(np.sqrt((resid ** 2).mean()) / max(abs(y.mean()), 1e-30))
    return {"fit": fit, "r2": r2, "rel_rmse": rel}


def calibrate(cfg: SimConfig, log=None) -> tuple[Profile, dict]:
    """Run the real engine on this machine (the random model of ``cfg``'s shape, every mode at
    each of ``cfg.calibrate_widths``) with launch timers on; fit a profile to the timings."""
    import torch

    from depthbench.models.looped import LoopedTransformer

    mcfg = cfg.model_config()
    torch.manual_seed(cfg.seed)
    model = LoopedTransformer(mcfg).eval()
    runs, measured = [], {}
    for (width, mode), run in measure(model, cfg, widths=cfg.calibrate_widths).items():
        runs.append(run)
        measured[width, mode] = run[0].tokens_per_s
        if log:
            log(f"  width {width} {mode}: {run[0].tokens_per_s:.1f} tokens/s")
    p = next(model.parameters())
    prof, info = fit_profile(mcfg, runs, cfg, p.element_size(), p.device.type)
    return prof, {**info, "measured_tokens_per_s": measured}


def measure(model, cfg: SimConfig, modes=(), widths=()) -> dict[tuple[int, str], tuple]:
    """The modes of ``cfg`` (or ``modes``) at each of ``widths`` (default: ``cfg.width``) on the
    real engine with launch records, all side by side unless ``cfg.interleave`` is off: per
    (width, mode) its (result, records, engine stats). batch1 runs on its own over a sixteenth
    of the requests (at least 8): its rate does not depend on how many there are."""
    from depthbench.runtime import hold_freed_memory
    from depthbench.serving.batching import Batching
    from depthbench.serving.compare import run_side_by_side
    from depthbench.serving.engine import Engine
    from depthbench.serving.workload import workload

    hold_freed_memory()
    dev = next(model.parameters()).device.type
    crit = cfg.criterion
    reqs = workload(cfg.replace(rate=0), vocab_size=model.cfg.vocab_size)   # saturated
    max_len = max(len(q.prompt) + q.max_new_tokens for q in reqs) + 1
    engs: dict[tuple[int, str], Engine] = {}

    def entry(width, mode):
        c = replace(Batching.of(cfg), width=width).resolved(dev, cfg.requests)

        def make(clock=None):
            engs[width, mode] = Engine(model, crit, cfg.kv_policy, c.rows(mode), max_len,
                                       record=True, clock=clock,
                                       n_prompt_slots=c.prompt_slots(mode))
            return engs[width, mode]
        return mode, c, make

    keys = [(w, m) for w in widths or (cfg.width,) for m in modes or cfg.modes]
    ran = run_side_by_side({k: entry(*k) for k in keys if not MODES[k[1]].one_row}, reqs, cfg,
                           cfg.interleave)
    for k in keys:
        if MODES[k[1]].one_row:
            ran |= run_side_by_side({k: entry(*k)}, reqs[: max(8, cfg.requests // 16)], cfg,
                                    False)
    out = {}
    for k in keys:
        res, done = ran[k]
        out[k] = (res, engs[k].records, engs[k].stats)
    return out


def fit_profile(mcfg: ModelConfig, runs, cfg: SimConfig, bytes_per_value: int,
                device: str = "cpu", source: str = "") -> tuple[Profile, dict]:
    """A fitted profile from measured runs ``(result, records, stats)`` (a result: its
    ``wall_s`` and ``output_tokens``, a ``ModeResult`` or ``bound.Served``): launch costs per stage,
    then the scheduler's time between launches per core launch and per emitted token.
    ``source``: what was measured (default: ``cfg``'s calibration)."""
    from scipy.optimize import nnls
    records = [r for _, recs, _ in runs for r in recs]
    fitted = fit_records(mcfg, records, cfg.max_depth, bytes_per_value)
    A = np.array([[st.stage["core"].launches, res.output_tokens] for res, _, st in runs],
                 dtype=float)
    y = np.array([res.wall_s - sum(r[-1] for r in recs) for res, recs, _ in runs])
    (iteration, token), _ = nnls(A, np.maximum(y, 0.0))
    if not source:
        shape = ", ".join(f"{k}={v}" for k, v in mcfg.to_dict().items()
                          if k in ("d_model", "n_heads", "n_prelude", "n_core", "n_coda", "vocab_size"))
        source = (f"serve-sim --calibrate on {machine()}: {cfg.random} ({shape}), exit {cfg.exit}, "
                  f"widths {list(cfg.calibrate_widths)}, {cfg.requests} requests")
    prof = Profile(name="calibrated", kind="fitted", bytes_per_value=bytes_per_value, paged=False,
                   overlap=False, device=device,
                   source=f"{source}; fit R^2 " + ", ".join(f"{k} {v:.3f}" for k, v in fitted["r2"].items()),
                   token=float(token), iteration=float(iteration), fit=fitted["fit"])
    return prof, {"r2": fitted["r2"], "rel_rmse": fitted["rel_rmse"], "launch_records": len(records)}


# ---- serve-bench's cost model: a width sweep of full-depth serving, fitted ---------------------
class Served(NamedTuple):
    """A sweep batch's whole-run reading (the fields of ``result.ModeResult`` a fit needs)."""
    wall_s: float
    output_tokens: int


def width_sweep(make_engine, requests, width: int, pool: int, log=None) -> list[tuple]:
    """A width sweep of full-depth serving: ``static_lockstep`` batches (every token at full
    depth; batches of one width start and end together) at widths 1, width/4, the width and the
    pool (at most the requests), on engines from ``make_engine(width)`` (``record=True``), after
    one unrecorded warm-up batch. The width's batch serves its requests whole; the others at most
    8 new tokens each, in three batches below the width (prefill launches enough to fit even for
    a handful of requests). Per width (``fit_profile``'s runs): (``Served``, launch records,
    engine stats)."""
    from depthbench.serving.batching import Batching
    from depthbench.serving.scheduler import Scheduler
    from depthbench.serving.workload import Request
    runs, n = [], len(requests)
    widths = sorted({min(max(1, w), n) for w in (1, width // 4, width, pool)})
    for i, w in enumerate([widths[0], *widths]):
        cap, batches = (1 << 30, 1) if w == min(width, n) else (8, 3 if w < width else 1)
        reqs = [Request(j, list(q.prompt), min(q.max_new_tokens, cap))
                for j, q in enumerate(requests[k % n] for k in range(w * batches))]
        eng = make_engine(w)
        sched = Scheduler(eng, "static_lockstep", Batching(w))
        t0 = eng.clock.now()
        sched.run(reqs)
        res = Served(eng.clock.now() - t0, sum(len(q.output) for q in reqs))
        if i:
            runs.append((res, eng.records, eng.stats))
            if log:
                log(f"cost sweep at width {w} ({len(eng.records)} launches)")
    return runs


def machine_profile(model, requests, cfg: ServeConfig, width: int, pool: int, max_len: int,
                    log=None) -> tuple[Profile, dict]:
    """This machine's launch costs for serve-bench's bound: ``width_sweep`` of full-depth
    serving on the real engine up to ``width`` and ``pool``, fitted (``fit_profile``) whatever
    modes are compared; and how well the fit explains them (``fit_profile``'s info: per stage
    R^2 and relative error)."""
    from depthbench.exits import ExitCriterion
    from depthbench.serving.engine import Engine
    full = ExitCriterion.fixed(cfg.max_depth)
    dev = next(model.parameters())
    runs = width_sweep(lambda w: Engine(model, full, cfg.kv_policy, w, max_len, record=True),
                       requests, width, pool, log)
    return fit_profile(model.shape, runs, cfg, dev.element_size(), dev.device.type,
                       source=f"the width sweep of full-depth serving on {machine()}")
