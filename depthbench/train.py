"""Training a looped model under a depth schedule: one readable function, labelled sections.

CPU and GPU run the same code path; ``torchrun --nproc_per_node=N -m depthbench train ...``
runs DDP (gloo on CPU, NCCL on GPU). Everything a step depends on (its depth, its batch, its
learning rate) is a pure function of the step index and the seed, and the checkpoint holds the
model, optimizer and RNG states, so a resumed run continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from depthbench import __version__
from depthbench import checkpoint as ckpt
from depthbench.config import ModelConfig, TrainConfig
from depthbench.data import Dataset, TrainBatches
from depthbench.errors import UserError
from depthbench.evaluate import sweep
from depthbench.flops import FlopModel
from depthbench.fsio import DirLock, atomic_write_text, is_empty_dir
from depthbench.model import LoopedTransformer
from depthbench.runtime import Runtime, setup, teardown
from depthbench.schedules import Schedule, parse_schedule


def lr_at(step: int, cfg: TrainConfig, schedule: Schedule) -> float:
    """Warmup, then cosine decay or warmup-stable-decay (linear decay over the last
    ``decay_frac`` of training, or from the schedule's switch with ``decay_at_switch``)."""
    total, floor = cfg.steps, cfg.lr * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "cosine":
        t = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
        return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))
    start = total - int(round(cfg.decay_frac * total))
    switch = schedule.switch_step(total)
    if cfg.decay_at_switch and switch is not None:
        start = switch
    if step < start:
        return cfg.lr
    t = (step - start + 1) / max(1, total - start)
    return floor + (cfg.lr - floor) * (1 - min(t, 1.0))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             fused=device.type == "cuda")


def _run_record(model_cfg, train_cfg, schedule, ds, fm, tokens_per_step) -> dict:
    return {
        "version": __version__,
        "model": model_cfg.to_dict(),
        "train": train_cfg.to_dict(),
        "schedule": schedule.spec,
        "seed": train_cfg.seed,
        "data": str(ds.path.resolve()),
        "dataset_hash": ds.hash,
        "seq_len": ds.seq_len - 1,
        "tokens_per_step": tokens_per_step,
        "flop_model": dataclasses.asdict(fm),
        "switch_step": schedule.switch_step(train_cfg.steps),
    }


def _same_run(old: dict, new: dict) -> list[str]:
    keys = ("model", "train", "schedule", "dataset_hash")
    same = [json.dumps(old.get(k), sort_keys=True) == json.dumps(new.get(k), sort_keys=True)
            for k in keys]
    return [k for k, ok in zip(keys, same) if not ok]


def _write_metrics(path: Path, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def train(data: str | Path, out: str | Path, model_cfg: ModelConfig, train_cfg: TrainConfig,
          schedule_spec: str, resume: bool = False, progress: bool = True,
          log=print) -> dict:
    schedule = parse_schedule(schedule_spec)
    out = Path(out)
    rt = setup(train_cfg.device, train_cfg.threads)
    fresh, existed = not (out / "run.json").is_file(), out.exists()
    lock = DirLock(out, "run directory") if rt.is_main else contextlib.nullcontext()
    try:
        with lock:
            try:
                return _train(Path(data), out, model_cfg, train_cfg, schedule, resume, progress,
                              log, rt)
            except BaseException:
                # a new run that failed before its first checkpoint leaves nothing behind
                if rt.is_main and fresh and (out / "run.json").is_file() and ckpt.latest(out) is None:
                    for p in out.iterdir():
                        if p.name != ".lock":
                            shutil.rmtree(p) if p.is_dir() else p.unlink()
                raise
    finally:
        if rt.is_main and fresh and not existed and out.is_dir() and is_empty_dir(out):
            shutil.rmtree(out, ignore_errors=True)
        teardown(rt)


def _train(data: Path, out: Path, model_cfg: ModelConfig, train_cfg: TrainConfig,
           schedule: Schedule, resume: bool, progress: bool, log, rt: Runtime) -> dict:
    say = log if rt.is_main else (lambda *a, **k: None)
    # ---- data, model, run record ----------------------------------------------------------------
    ds = Dataset(data)
    if model_cfg.vocab_size == 0:
        model_cfg = model_cfg.replace(vocab_size=len(ds.vocab))
    if model_cfg.vocab_size != len(ds.vocab):
        raise UserError(f"model vocab_size={model_cfg.vocab_size} does not match the dataset's "
                        f"{len(ds.vocab)} tokens; leave vocab_size unset (0)")
    if ds.seq_len - 1 > model_cfg.max_seq_len:
        raise UserError(f"dataset sequences have {ds.seq_len} tokens, more than max_seq_len="
                        f"{model_cfg.max_seq_len}; raise max_seq_len")
    fm = FlopModel.of(model_cfg, ds.seq_len - 1)
    tokens_per_step = train_cfg.batch_size * (ds.seq_len - 1)
    record = _run_record(model_cfg, train_cfg, schedule, ds, fm, tokens_per_step)
    run_json, metrics_path = out / "run.json", out / "metrics.jsonl"
    start_ckpt = None
    if resume and not run_json.is_file():
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out} is a file; choose a directory for the run")
        if out.is_dir() and not is_empty_dir(out):
            raise UserError(f"{out} is not a run directory (no run.json) and not empty; "
                            "choose another --out")
        resume = False  # nothing to resume yet: start the run
    if resume:
        old = ckpt.read_run(out)
        diff = _same_run(old, record)
        if diff:
            raise UserError(f"cannot resume {out}: its {', '.join(diff)} differ from this "
                            "command's; resume with the same settings or train into a new --out")
        start_ckpt = ckpt.latest(out)
    elif out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; choose a directory for the run")
    elif out.exists() and not is_empty_dir(out):
        raise UserError(f"{out} is not empty; pass --resume to continue that run or choose "
                        "another --out")

    torch.manual_seed(train_cfg.seed)
    model = LoopedTransformer(model_cfg).to(rt.device)
    opt = make_optimizer(model, train_cfg, rt.device)
    step, flops, wall, tokens, rows = 0, 0.0, 0.0, 0, []
    if start_ckpt is not None:
        ck = ckpt.load(start_ckpt)
        if ck.get("dataset_hash") != ds.hash:
            raise UserError(f"{start_ckpt} was trained on another dataset; use the same --data")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["rng"]["torch"])
        if rt.device.type == "cuda" and "cuda" in ck["rng"]:
            torch.cuda.set_rng_state(ck["rng"]["cuda"], rt.device)
        step, flops, wall, tokens = ck["step"], ck["flops"], ck["wall_clock"], ck["tokens"]
        rows = [r for r in _read_metrics(metrics_path) if r["step"] <= step]
        say(f"resuming {out} from step {step}")
    rt.barrier()  # every rank has checked --out before rank 0 writes to it
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temporaries(out / "checkpoints")
        atomic_write_text(run_json, json.dumps(record, indent=2) + "\n")
        _write_metrics(metrics_path, rows)
    rt.barrier()
    say(f"device: {rt.reason}; model: {model.num_params():,} parameters; schedule "
        f"{schedule.spec}; {train_cfg.steps} steps of {train_cfg.batch_size} sequences")

    for block in list(model.prelude) + list(model.core) + list(model.coda):
        if train_cfg.compile:
            block.compile()  # per block, so that a new depth K never triggers a recompile
    net = DDP(model, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None) \
        if rt.world > 1 else model
    batches = TrainBatches(ds.split("train"), train_cfg.batch_size, train_cfg.seed, rt.rank,
                           rt.world)
    keep = set(train_cfg.keep_steps)
    bar = None
    if progress and rt.is_main:
        from tqdm import tqdm
        bar = tqdm(total=train_cfg.steps, initial=step, desc="train", unit="step",
                   disable=not sys.stderr.isatty(), dynamic_ncols=True, leave=False)

    def save_checkpoint(at: int):
        if not rt.is_main:
            return
        state = {
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": {"torch": torch.get_rng_state(),
                    **({"cuda": torch.cuda.get_rng_state(rt.device)}
                       if rt.device.type == "cuda" else {})},
            "data_position": at, "schedule": schedule.spec, "schedule_position": at,
            "model_config": model_cfg.to_dict(), "train_config": train_cfg.to_dict(),
            "dataset_hash": ds.hash, "flops": flops, "wall_clock": wall, "tokens": tokens,
        }
        try:
            ckpt.save(out / "checkpoints", at, state)
        except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError
            why = getattr(e, "strerror", None) or str(e).strip().splitlines()[0][:100]
            raise UserError(f"cannot write a checkpoint to {out / 'checkpoints'} ({why}); free "
                            "space or fix the path, then run again with --resume; the previous "
                            "checkpoint is intact") from None
        # periodic checkpoints are superseded by the next one; kept steps stay
        for s, p in ckpt.list_checkpoints(out).items():
            if s != at and s not in keep:
                ckpt.remove(p)

    t_last = time.perf_counter()
    model.train()
    while step < train_cfg.steps:
        # ---- schedule: this step's depth and learning rate -------------------------------------
        K = schedule.depth(step, train_cfg.steps, train_cfg.seed)
        lr = lr_at(step, train_cfg, schedule)
        for g in opt.param_groups:
            g["lr"] = lr
        # ---- step --------------------------------------------------------------------------------
        tok = torch.as_tensor(batches.batch(step), device=rt.device)
        x, y = tok[:, :-1], tok[:, 1:]
        with rt.autocast():
            if model_cfg.exit_gate:
                logits, gates, preds = net(x, n_loops=K, return_gates=True)
                # the gate learns P(this loop's prediction already equals the final one)
                target = (preds == preds[-1]).float()
                gate_loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    gates.float(), target)
            else:
                logits = net(x, n_loops=K)
                gate_loss = 0.0
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        (loss + gate_loss).backward()
        if train_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_sum, n = rt.all_sum([loss.item() * y.numel(), float(y.numel())])
        loss_value = loss_sum / n
        if not math.isfinite(loss_value):
            last = ckpt.latest(out)
            raise UserError(f"the loss became {loss_value} at step {step + 1} (K={K}, lr={lr:.2e});"
                            f" lower the learning rate; the last good checkpoint "
                            f"{last.name if last else '(none)'} is kept")
        step += 1
        flops += fm.train_step(K) * tokens_per_step
        tokens += tokens_per_step
        now = time.perf_counter()
        wall += now - t_last
        t_last = now
        # ---- log ---------------------------------------------------------------------------------
        if step % train_cfg.log_every == 0 or step == train_cfg.steps:
            row = {"step": step, "K": K, "loss": loss_value, "lr": lr, "tokens": tokens,
                   "flops": flops, "wall_clock": wall}
            rows.append(row)
            if rt.is_main:
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", K=K)
        # ---- eval --------------------------------------------------------------------------------
        if train_cfg.eval_every and step % train_cfg.eval_every == 0:
            res = sweep(model, ds, "eval_reordered", list(train_cfg.eval_depths), rt,
                        max_rows=train_cfg.eval_people)
            model.train()
            if rt.is_main:
                row = {"step": step, "eval": {str(k): {"bits_per_person": s.result(ds.attributes)
                                                       ["bits_per_person"],
                                                       "nll": s.result(ds.attributes)["nll"]}
                                              for k, s in res.items()}}
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
            t_last = time.perf_counter()
        # ---- checkpoint --------------------------------------------------------------------------
        if (step == train_cfg.steps or step in keep
                or (train_cfg.ckpt_every and step % train_cfg.ckpt_every == 0)):
            save_checkpoint(step)
            rt.barrier()
            t_last = time.perf_counter()
    if bar is not None:
        bar.close()
    final = [r for r in rows if "loss" in r]
    summary = {"out": str(out), "steps": step, "final_loss": final[-1]["loss"] if final else None,
               "modeled_train_flops": flops, "wall_clock_s": wall, "tokens": tokens,
               "params": model.num_params(), "schedule": schedule.spec,
               "checkpoint": str(ckpt.latest(out))}
    say(f"done: {step} steps, final loss {summary['final_loss']:.4f}, "
        f"{flops:.3e} modeled FLOPs, {wall:.1f}s")
    return summary


def _read_metrics(path: Path) -> list[dict]:
    """Rows of metrics.jsonl; a last line cut short by a crash mid-write is dropped."""
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise UserError(f"{path} is corrupt at line {i + 1}; delete the run or restore "
                                "the file") from None
    return rows


def matched_steps(ref_run: str | Path, schedule_spec: str, data: str | Path,
                  model_cfg: ModelConfig, batch_size: int, seed: int) -> int:
    """Steps for which ``schedule_spec`` spends the modeled training FLOPs of ``ref_run``."""
    from depthbench.flops import match_steps, schedule_flops
    ref = ckpt.read_run(ref_run)
    target = schedule_flops(FlopModel(**ref["flop_model"]), parse_schedule(ref["schedule"]),
                            ref["train"]["steps"], ref["seed"], ref["tokens_per_step"])
    ds = Dataset(data, verify=False)
    m = model_cfg.replace(vocab_size=model_cfg.vocab_size or len(ds.vocab))
    return match_steps(FlopModel.of(m, ds.seq_len - 1), parse_schedule(schedule_spec), target,
                       ref["train"]["steps"], seed, batch_size * (ds.seq_len - 1))


def metrics_rows(run_dir: str | Path) -> list[dict]:
    return _read_metrics(Path(run_dir) / "metrics.jsonl")

