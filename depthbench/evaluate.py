"""Depth sweeps: what a trained looped model knows at every serving depth.

The state after k loops is exactly the depth-k model's state, so ONE pass with K_max loops that
reads out the coda and head after each requested depth gives every depth's metrics (K_max core
passes instead of 1 + 2 + ... + K_max). ``sweep_per_depth`` runs a separate forward per depth:
it is the oracle the tests hold the one-pass sweep to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from depthbench.data import Dataset, shard_range
from depthbench.metrics import EvalSums, FactIndex
from depthbench.runtime import Runtime


def _batches(ds: Dataset, split: str, batch_size: int, rt: Runtime | None, max_rows: int | None):
    s = ds.split(split)
    n = len(s) if not max_rows else min(len(s), max_rows)
    lo, hi = shard_range(n, rt.rank, rt.world) if rt else (0, n)
    device = rt.device if rt else torch.device("cpu")
    for a in range(lo, hi, batch_size):
        b = min(a + batch_size, hi)
        tokens = torch.as_tensor(np.asarray(s.tokens[a:b], dtype=np.int64), device=device)
        order = np.asarray(s.order[a:b], dtype=np.int64)
        facts = FactIndex(ds.key_positions(order), order, ds.value_tokens, device=device)
        yield tokens[:, :-1], tokens[:, 1:], facts


def _reduce(sums: dict[int, EvalSums], rt: Runtime | None) -> dict[int, EvalSums]:
    if rt is None or rt.world == 1:
        return sums
    for s in sums.values():
        s.load_flat(rt.all_sum(s.flat()))
    return sums


@torch.no_grad()
def sweep(model, ds: Dataset, split: str, depths: list[int], rt: Runtime | None = None,
          batch_size: int = 256, max_rows: int | None = None) -> dict[int, EvalSums]:
    """Metrics at every depth in ``depths`` from one forward of max(depths) loops per batch."""
    model.eval()
    want = set(depths)
    sums = {k: EvalSums(ds.n_values) for k in depths}
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    for x, y, facts in _batches(ds, split, batch_size, rt, max_rows):
        with ac:
            pos = model.positions(x.shape[1], x.device)
            e = model.embed_prelude(x, pos)
            s = model.initial_state(e, pos)
            for k in range(1, max(depths) + 1):
                s = model.core_step(s, e, pos)
                if k in want:
                    sums[k].add(model.readout(s, pos), y, facts)
    return _reduce(sums, rt)


@torch.no_grad()
def sweep_per_depth(model, ds: Dataset, split: str, depths: list[int], rt: Runtime | None = None,
                    batch_size: int = 256, max_rows: int | None = None) -> dict[int, EvalSums]:
    """The naive oracle: a separate full forward for every depth."""
    model.eval()
    sums = {k: EvalSums(ds.n_values) for k in depths}
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    for x, y, facts in _batches(ds, split, batch_size, rt, max_rows):
        for k in depths:
            with ac:
                sums[k].add(model(x, n_loops=k), y, facts)
    return _reduce(sums, rt)


def result_rows(ck: dict, run_meta: dict, run_name: str, ds: Dataset, split: str,
                sums: dict[int, EvalSums]) -> list[dict]:
    """Tidy rows, one per depth, with the grouping keys of DESIGN.md section 2."""
    rows = []
    for depth, s in sorted(sums.items()):
        rows.append({
            "run": run_name, "schedule": ck.get("schedule"), "seed": run_meta.get("seed"),
            "step": ck["step"], "depth": depth, "split": split,
            **s.result(ds.attributes),
            "ceiling_bits": ds.ceiling_bits,
            "modeled_train_flops": ck.get("flops"), "wall_clock_s": ck.get("wall_clock"),
            "dataset_hash": ds.hash, "checkpoint": ck.get("path"),
        })
    return rows


def write_rows(rows: list[dict], out: str | Path) -> tuple[Path, Path]:
    """Write rows as CSV and JSONL side by side (``out`` with either suffix, or none)."""
    import json

    import pandas as pd

    from depthbench.fsio import atomic_write_text
    out = Path(out)
    base = out.with_suffix("") if out.suffix in (".csv", ".jsonl") else out
    base.parent.mkdir(parents=True, exist_ok=True)
    csv, jsonl = base.with_name(base.name + ".csv"), base.with_name(base.name + ".jsonl")
    atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(jsonl, "".join(json.dumps(r) + "\n" for r in rows))
    return csv, jsonl


def probe_update(run: str | Path, step: int | None, depth_a: int, depth_b: int,
                 eval_depths: list[int], n_batches: int = 8, eval_people: int = 256,
                 seed: int = 0, lr: float | None = None) -> list[dict]:
    """The update-benefit probe: from a checkpoint, take ONE optimizer update at depth A and,
    separately from the same state, one at depth B on the same batch; report, per serving
    depth, NLL(after A) - NLL(after B) on eval_reordered (positive: the depth-B update helped
    more), averaged over ``n_batches`` batches with a 95% confidence interval."""
    import copy
    import math

    from depthbench.checkpoint import load, load_model, read_run
    from depthbench.config import TrainConfig
    from depthbench.data import TrainBatches
    from depthbench.train import make_optimizer

    model, ck = load_model(run, step)
    meta = read_run(run)
    ds = Dataset(meta["data"])
    if ds.hash != ck.get("dataset_hash"):
        from depthbench.errors import UserError
        raise UserError(f"{meta['data']} no longer holds the dataset {run} was trained on")
    tcfg = TrainConfig.from_dict(ck["train_config"])
    state = ck["model"]
    opt_state = load(ck["path"])["optimizer"]
    batches = TrainBatches(ds.split("train"), tcfg.batch_size, seed + 7919)
    from depthbench.schedules import parse_schedule
    from depthbench.train import lr_at
    # the LR the run's next update would have used; at the end of a decayed run that is 0,
    # and a zero-LR update measures nothing, so the peak LR stands in
    if lr is None:
        lr = lr_at(ck["step"], tcfg, parse_schedule(ck["schedule"])) if ck["step"] < tcfg.steps else 0.0
        lr = lr if lr > 0 else tcfg.lr
    diffs = {k: [] for k in eval_depths}
    for b in range(n_batches):
        tok = torch.as_tensor(batches.batch(b))
        nll = {}
        for depth in (depth_a, depth_b):
            model.load_state_dict(state)
            model.zero_grad(set_to_none=True)  # load_state_dict restores weights, not .grad
            opt = make_optimizer(model, tcfg, torch.device("cpu"))
            # a copy: on CPU load_state_dict keeps the given moment tensors and AdamW updates
            # them in place, which would hand the second update the first one's moments
            opt.load_state_dict(copy.deepcopy(opt_state))
            for g in opt.param_groups:
                g["lr"] = lr
            model.train()
            logits = model(tok[:, :-1], n_loops=depth)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     tok[:, 1:].reshape(-1))
            loss.backward()
            if tcfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
            opt.step()
            res = sweep(model, ds, "eval_reordered", eval_depths, max_rows=eval_people)
            nll[depth] = {k: s.result(ds.attributes)["nll"] for k, s in res.items()}
        for k in eval_depths:
            diffs[k].append(nll[depth_a][k] - nll[depth_b][k])
    rows = []
    for k, d in diffs.items():
        d = np.asarray(d)
        half = 1.96 * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        rows.append({"run": Path(run).name, "schedule": ck.get("schedule"), "seed": meta.get("seed"),
                     "step": ck["step"], "depth": k, "depth_a": depth_a, "depth_b": depth_b,
                     "nll_diff": float(d.mean()), "ci95": float(half), "batches": len(d), "lr": lr})
    return rows
