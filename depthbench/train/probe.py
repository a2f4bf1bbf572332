"""The update-benefit probe: does one update at depth B teach more than one at depth A?

From a checkpoint, take ONE optimizer update at depth A and, separately from the same state,
one at depth B on the same batch (the trainer's own ``train_step``: autocast, gate loss,
clipping); report, per serving depth, NLL(after A) - NLL(after B) on eval_reordered (a text run:
on the first ``max_people`` validation windows; positive: the depth-B update helped more),
averaged over ``batches`` batches with a 95% t-interval. On the person task the difference is
read twice: ``value_nll_diff`` on the asked value alone (the quantity the task's NLL verdicts
are on) and ``nll_diff`` on the whole row.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from depthbench.checkpoint import open_run, run_dir_of, run_keys, run_name
from depthbench.config import ProbeConfig, TrainConfig
from depthbench.console import progress_bar
from depthbench.data.synthetic import TrainBatches
from depthbench.evaluate.sweep import sweep
from depthbench.evaluate.text import text_sweep
from depthbench.fsio import refuse_over_inputs
from depthbench.rows import row_paths, tag_rows, write_rows
from depthbench.runtime import setup, teardown
from depthbench.schedules import parse_depths, parse_schedule
from depthbench.stats import t_interval
from depthbench.train.loop import make_optimizer, train_step
from depthbench.train.updates import lr_at


def probe_lr(ck: dict, tcfg: TrainConfig) -> float:
    """The LR the run's next update would have used; at the end of a decayed run that is 0,
    and a zero-LR update measures nothing, so the peak LR stands in."""
    lr = lr_at(ck["step"], tcfg, parse_schedule(ck["schedule"])) if ck["step"] < tcfg.steps else 0.0
    return lr if lr > 0 else tcfg.lr


def nll_differences(model, ck: dict, ds, cfg: ProbeConfig, rt) -> dict[str, dict[int, list[float]]]:
    """Per metric (``nll``; on the person task also ``value_nll``) and serving depth, one
    NLL(after A) - NLL(after B) per batch."""
    tcfg = TrainConfig.from_dict(ck["train_config"])
    state, opt_state = ck["model"], ck["optimizer"]
    text = ds.kind == "text"
    batches = ds.train_batches(tcfg.batch_size, cfg.seed + 7919) if text else \
        TrainBatches(ds.split("train"), tcfg.batch_size, cfg.seed + 7919)
    lr = cfg.lr or probe_lr(ck, tcfg)
    depths = parse_depths(cfg.depths)
    metrics = ("nll",) if text else ("nll", "value_nll")
    diffs = {m: {k: [] for k in depths} for m in metrics}
    bar = progress_bar(cfg.batches, "probe", "batches")
    for b in range(cfg.batches):
        tok = torch.as_tensor(batches.batch(b), device=rt.device)
        nll = {}
        for depth in (cfg.depth_a, cfg.depth_b):
            model.load_state_dict(state)
            model.zero_grad(set_to_none=True)  # load_state_dict restores weights, not .grad
            opt = make_optimizer(model, tcfg, rt.device)
            # a copy: on CPU load_state_dict keeps the given moment tensors and AdamW updates
            # them in place, which would hand the second update the first one's moments
            opt.load_state_dict(copy.deepcopy(opt_state))
            model.train()
            train_step(model, model, opt, tok[:, :-1], tok[:, 1:], depth, lr, tcfg, rt)
            if text:   # a text run: NLL per token on the first max_people validation windows
                res = text_sweep(model, ds, depths, rt, max_windows=cfg.max_people)
                nll[depth] = {k: {"nll": r["nll"]} for k, r in res.items()}
            else:
                res = sweep(model, ds, "eval_reordered", depths, rt,
                            max_rows=cfg.max_people * ds.rows_per_person)
                nll[depth] = {k: s.result(ds.attributes) for k, s in res.items()}
        for m in metrics:
            for k in depths:
                diffs[m][k].append(nll[cfg.depth_a][k][m] - nll[cfg.depth_b][k][m])
        bar.update(1)
    bar.close()
    return diffs


def run_probe(cfg: ProbeConfig) -> dict:
    """The probe stage: the NLL differences of a checkpoint as ``probe`` rows, written to
    ``cfg.out`` (default ``RUN/probe/step_N_A_vs_B``)."""
    rt = setup(cfg.device)
    try:
        model, ck, meta, ds = open_run(cfg.run, cfg.checkpoint, None, rt.device)
        run_dir = run_dir_of(cfg.run)
        out = cfg.out or Path(run_dir or Path(cfg.run).parent) / "probe" / \
            f"step_{ck['step']:07d}_{cfg.depth_a}_vs_{cfg.depth_b}"
        refuse_over_inputs(row_paths(out), run_dir, ds.path, [cfg.run])
        diffs = nll_differences(model, ck, ds, cfg, rt)
    finally:
        teardown(rt)
    tcfg = TrainConfig.from_dict(ck["train_config"])
    switch = meta.get("switch_step")
    rows = []
    for k, d in diffs["nll"].items():
        mean, half, _ = t_interval(d)
        asked = {}
        if "value_nll" in diffs:
            v_mean, v_half, _ = t_interval(diffs["value_nll"][k])
            asked = {"value_nll_diff": v_mean, "value_ci95": v_half}
        rows.append({**run_keys(run_name(cfg.run), ck, meta), "depth": k,
                     "depth_a": cfg.depth_a, "depth_b": cfg.depth_b,
                     "nll_diff": mean, "ci95": half, "batches": len(d),
                     "lr": cfg.lr or probe_lr(ck, tcfg),
                     "updates_after_switch": None if switch is None else ck["step"] - switch,
                     "dataset_hash": ds.hash, **asked})
    rows = tag_rows(rows, cfg.tags)
    csv, jsonl = write_rows(rows, out, "probe")
    return {"rows": rows, "csv": csv, "jsonl": jsonl, "step": ck["step"]}
