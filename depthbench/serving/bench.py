"""serve-bench: every batching mode over the same workload, side by side, with the FLOP ceiling.

The torch side: the model, the dataset workload and the serve stage. What is measured per mode
and how the modes are compared (torch-free, shared with ``serve-sim``) is in
``serving.compare``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from depthbench.config import ServeConfig
from depthbench.errors import UserError
from depthbench.exits import ExitCriterion
from depthbench.models.looped import LoopedTransformer
from depthbench.rows import row_paths
from depthbench.runtime import hold_freed_memory
from depthbench.serving.batching import Batching
from depthbench.serving.bound import withheld_reason
from depthbench.serving.calibrate import machine_profile
from depthbench.serving.compare import compare_modes
from depthbench.serving.engine import Engine, warm_memory
from depthbench.serving.profile import ProfileCosts
from depthbench.serving.result import Comparison
from depthbench.serving.sim import SimEngine
from depthbench.serving.workload import Request


def serve_bench(model: LoopedTransformer, requests: list[Request], cfg: ServeConfig,
                seq_len_for_flops: int, progress=None) -> Comparison:
    model.eval()
    crit, full = cfg.criterion, ExitCriterion.fixed(cfg.max_depth)
    crit.check_model(model.shape)
    crit.check_covers([q.id for q in requests])
    b = Batching.of(cfg).resolved(next(model.parameters()).device.type, len(requests))
    max_len = max(len(q.prompt) + q.max_new_tokens for q in requests) + 1
    if max_len > model.shape.max_seq_len:
        raise UserError(f"prompts plus --max-new-tokens need {max_len} positions, more than the "
                        f"model's max_seq_len={model.shape.max_seq_len}; lower --max-new-tokens")
    side = cfg.interleave and next(model.parameters()).device.type == "cpu"
    hold_freed_memory()   # a launch's cost must not depend on what was allocated before it

    def warm():
        warm_memory(model, max((q.prompt for q in requests), key=len), b.pool, cfg.kv_policy)

    warm()
    profile, fit = machine_profile(model, requests, cfg, b.width, b.pool, max_len, progress)

    def engines(mode, c):   # launches recorded: the static reference levels the bound's costs
        return lambda clock=None: Engine(model, crit, cfg.kv_policy, c.rows(mode), max_len,
                                         clock=clock, n_prompt_slots=c.prompt_slots(mode),
                                         record=True)

    def priced(mode, c):   # full-depth candidates, priced on the fitted profile
        return lambda clock=None: SimEngine(model.shape, full, cfg.kv_policy, c.rows(mode),
                                            max_len, profile, clock=clock,
                                            n_prompt_slots=c.prompt_slots(mode))

    costs = ProfileCosts(model.shape, profile, cfg.max_depth,
                         float(np.mean([len(q.prompt) for q in requests])))
    res = compare_modes(engines, model.shape, requests, cfg, b, seq_len_for_flops, costs,
                        progress, side, priced, level=True, warm=warm)
    return replace(res, profile=profile.to_toml(), fit_r2=fit["r2"], fit_error=fit["rel_rmse"]
                   ).withheld(withheld_reason(fit, cfg.rate, b.concurrency, b.width))


# ---- the serve stage -------------------------------------------------------------------------------
def run_bench(cfg: ServeConfig, log=None) -> dict:
    """The serve stage: load the checkpoint (or build the random model) on ``cfg.device``, run
    every mode on one workload, write ``serve`` rows to ``cfg.out`` (``.csv``/``.jsonl``, with
    the full record as ``.json``) and the cdb mode's exit depths to ``cfg.save_trace``."""
    from depthbench.fsio import atomic_write_many
    from depthbench.rows import row_files, tag_rows
    from depthbench.runtime import setup
    from depthbench.serving.target import open_target

    if sum(map(bool, (cfg.run, cfg.random, cfg.model))) != 1:
        raise UserError("give one model: a RUN directory (or checkpoint), --random PRESET or "
                        "--model SPEC (ouro:DIR, huginn:DIR, hf:DIR)")
    if cfg.rate and cfg.requests / cfg.rate > MAX_ARRIVAL_S:
        raise UserError(f"--rate {cfg.rate:g} requests/s spreads {cfg.requests} requests over "
                        f"about {cfg.requests / cfg.rate:.3g} s of arrivals, which serve-bench "
                        f"waits through; give a rate of at least {cfg.requests / MAX_ARRIVAL_S:.3g}"
                        f" (arrivals within {MAX_ARRIVAL_S // 60} minutes) or fewer --requests")
    outs = ServeOutputs.of(cfg)
    rt = setup(cfg.device)
    target = open_target(cfg, rt, outs.paths)
    model = target.model
    outs.refuse_foreign()
    if log:
        log(f"device: {rt.reason}; model {target.source}: "
            f"{sum(p.numel() for p in model.parameters()):,} "
            "parameters; "
            f"{cfg.requests} requests, exit {cfg.exit}, kv {cfg.kv_policy}, width {cfg.width}")
    res = serve_bench(model, target.requests, cfg, target.seq_len,
                      progress=log and (lambda m: log(f"  {m} done")))
    rows = res.rows(source=target.source, run=target.run, schedule=target.schedule,
                    exit=cfg.exit, kv_policy=cfg.kv_policy, width=cfg.width,
                    lookahead=cfg.lookahead, rate=cfg.rate, stop_at_eos=cfg.stop_at_eos)
    rows = tag_rows(rows, cfg.tags)
    summary = {"rows": rows, "results": res.results, "baseline": res.baseline,
               "profile": res.profile, "adaptive_modes_agree": res.adaptive_modes_agree,
               "bound_note": res.bound_note}
    files = {}  # every output, written together
    if outs.rows:
        files = row_files(rows, outs.rows[1], "serve")
        summary["csv"], summary["jsonl"], summary["record"] = *outs.rows, outs.record
        files[outs.record] = json.dumps(res.record(source=target.source), indent=2,
                                        default=str) + "\n"
    if outs.trace:
        mode = "cdb" if "cdb" in res.depth_traces else next(iter(res.depth_traces))
        files[outs.trace] = json.dumps(res.depth_traces[mode]) + "\n"
    atomic_write_many(files)
    return summary


# serve-bench waits through its arrivals in real time: a rate that spreads them over more than
# this many seconds is refused (a typo such as 1e-6 would wait for days); serve-sim simulates
# its clock and takes any rate
MAX_ARRIVAL_S = 3600


def _is_record_or_trace(path: Path) -> bool:
    """A serve record (a JSON object with ``results``) or an exit trace (request id -> the
    depths of its tokens): the JSON files serve-bench writes."""
    from depthbench.fsio import head_text
    try:
        d = json.loads(head_text(path, 1 << 26))
    except ValueError:
        return False
    return isinstance(d, dict) and ("results" in d or all(
        isinstance(v, list) and all(isinstance(x, int) for x in v) for v in d.values()))


@dataclass(frozen=True)
class ServeOutputs:
    """Every file one serve-bench writes, named once: its rows (``BASE.csv``, ``BASE.jsonl``)
    and record (``BASE.json``) under ``--out``, the cdb mode's exit depths at ``--save-trace``."""
    rows: tuple[Path, ...] = ()
    record: Path | None = None
    trace: Path | None = None

    @classmethod
    def of(cls, cfg: ServeConfig) -> ServeOutputs:
        rows = row_paths(cfg.out) if cfg.out else ()
        out = cls(rows, rows[1].with_suffix(".json") if rows else None,
                  Path(cfg.save_trace) if cfg.save_trace else None)
        if len(set(map(Path.resolve, out.paths))) < len(out.paths):
            raise UserError("--save-trace names a file --out also writes; choose another path")
        return out

    @property
    def paths(self) -> list[Path]:
        return [*self.rows, *filter(None, (self.record, self.trace))]

    def refuse_foreign(self) -> None:
        """Before any work: serve-bench replaces only files it wrote (rows, its record, a
        trace)."""
        from depthbench.fsio import refuse_foreign
        from depthbench.rows import is_rows_file
        refuse_foreign(self.rows, is_rows_file)
        refuse_foreign(filter(None, [self.record]), _is_record_or_trace)
        refuse_foreign(filter(None, [self.trace]), _is_record_or_trace, "--save-trace")
