"""Training a looped model under a depth schedule: one readable function, labelled sections.

CPU and GPU run the same code path; ``torchrun --nproc_per_node=N -m depthbench train ...``
runs DDP (gloo on CPU, NCCL on GPU). Everything a step depends on (its depth, its batch, its
learning rate) is a pure function of the step index and the seed, and the checkpoint holds the
model, optimizer and RNG states, so a resumed run continues exactly."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from depthbench import checkpoint as ckpt
from depthbench.config import ModelConfig, TrainConfig
from depthbench.data.synthetic import open_dataset
from depthbench.errors import UserError
from depthbench.evaluate.sweep import sweep
from depthbench.flops import FlopModel
from depthbench.fsio import DirLock, atomic_write_text, is_empty_dir, remove_interrupted_writes
from depthbench.models.build import build_model
from depthbench.models.looped import LoopedTransformer
from depthbench.runlog import append_metrics, read_metrics, write_metrics
from depthbench.runtime import Runtime, compiles, setup, teardown
from depthbench.schedules import Schedule, parse_schedule
from depthbench.train.state import Clock, State, step_line
from depthbench.train.updates import lr_at, shared_steps
from depthbench.version import __version__


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             fused=device.type == "cuda")


def train_step(net: torch.nn.Module, model: LoopedTransformer, opt: torch.optim.Optimizer,
               x: torch.Tensor, y: torch.Tensor, K: int, lr: float, cfg: TrainConfig,
               rt: Runtime) -> torch.Tensor:
    """One optimizer update at depth ``K`` (``net`` is ``model`` or its DDP wrapper): forward
    under the runtime's autocast, the exit gate's loss where the model has a gate, backward,
    clipping, step. Returns the (detached) language-model loss."""
    for g in opt.param_groups:
        g["lr"] = lr
    with rt.autocast():
        if model.cfg.exit_gate:
            logits, gates, preds = net(x, n_loops=K, return_gates=True)
            # the gate learns P(this loop's prediction already equals the final one)
            target = (preds == preds[-1]).float()
            gate_loss = torch.nn.functional.binary_cross_entropy_with_logits(gates.float(), target)
        else:
            logits = net(x, n_loops=K)
            gate_loss = 0.0
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    (loss + gate_loss).backward()
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def run_record(model_cfg, train_cfg, schedule, ds, fm, tokens_per_step) -> dict:
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


@dataclasses.dataclass(frozen=True)
class Launch:
    """What one call of ``train`` asks for: the dataset and the run directory, the configs and
    the parsed schedule, and how the run begins (``resume``: its own latest checkpoint;
    ``start``: another run's at the end of their shared prefix; else step 0)."""
    data: Path
    out: Path
    model_cfg: ModelConfig
    train_cfg: TrainConfig
    schedule: Schedule
    resume: bool = False
    start: tuple[str, int] | None = None
    share_steps: tuple[int, ...] = ()


def train(data: str | Path, out: str | Path, model_cfg: ModelConfig, train_cfg: TrainConfig,
          schedule: str | Schedule, resume: bool = False, progress: bool = True,
          log=print, start: tuple[str, int] | None = None, share_steps=(), on_row=None) -> dict:
    """Train (or resume) one run under ``schedule`` (a spec or parsed). ``start`` = (RUN,
    STEP): a new run starts from RUN's checkpoint at STEP, which must hold this run's own state
    there (``shared_steps``: refused otherwise); where RUN kept no checkpoint at STEP it trains
    from step 0, to the same result.
    ``share_steps``: steps whose checkpoints this run also keeps, for runs that start there.
    ``on_row``: called with each row appended to metrics.jsonl (a tracker's live view)."""
    job = Launch(Path(data), Path(out), model_cfg, train_cfg, parse_schedule(schedule),
                 resume, start, tuple(share_steps))
    out = job.out
    rt = setup(train_cfg.device, train_cfg.threads)
    fresh, existed = not (out / "run.json").is_file(), out.exists()
    lock = DirLock(out, "run directory") if rt.is_main else contextlib.nullcontext()
    try:
        with lock:
            try:
                return _train(job, rt, progress, log, on_row)
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


def prepare_model_config(ds, model_cfg: ModelConfig, train_cfg: TrainConfig) -> ModelConfig:
    """The model config with the dataset's vocabulary, checked against the dataset."""
    if train_cfg.eval_every and ds.kind != "synthetic":
        raise UserError("eval_every evaluates recall during training, which needs a synthetic "
                        "dataset; leave it 0 for a text corpus and run `depthbench eval`")
    if model_cfg.init_from:   # a checkpoint's weights: text tokenized its way, its vocabulary
        from depthbench.loading import check_start_weights
        check_start_weights(model_cfg.init_from, ds)
        return model_cfg
    if model_cfg.vocab_size == 0:
        model_cfg = model_cfg.replace(vocab_size=len(ds.vocab))
    if model_cfg.vocab_size != len(ds.vocab):
        raise UserError(f"model vocab_size={model_cfg.vocab_size} does not match the dataset's "
                        f"{len(ds.vocab)} tokens; leave vocab_size unset (0)")
    if ds.seq_len - 1 > model_cfg.max_seq_len:
        raise UserError(f"dataset sequences have {ds.seq_len} tokens, more than max_seq_len="
                        f"{model_cfg.max_seq_len}; raise max_seq_len")
    return model_cfg


def _start_checkpoint(out: Path, resume: bool, record: dict) -> Path | None:
    """The checkpoint to continue from (None: a new run), after checking that ``out`` can hold
    this run: empty or absent for a new run, the same settings for a resumed one."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; choose a directory for the run")
    if resume and not (out / "run.json").is_file():
        remove_interrupted_writes(out)   # a run killed while writing its record (lock held)
        if out.is_dir() and not is_empty_dir(out):
            raise UserError(f"{out} is not a run directory (no run.json) and not empty; "
                            "choose another --out")
        return None  # nothing to resume yet: start the run
    if resume:
        diff = _same_run(ckpt.read_run(out), record)
        if diff:
            raise UserError(f"cannot resume {out}: its {', '.join(diff)} "
                            f"{'differ' if len(diff) > 1 else 'differs'} from this command's; "
                            "resume with the same settings or train into a new --out")
        return ckpt.latest(out)
    if out.exists() and not is_empty_dir(out):
        raise UserError(f"{out} is not empty; pass --resume to continue that run or choose "
                        "another --out")
    return None


def _restore(path: Path, model, opt, ds, rt: Runtime, metrics_path: Path) -> State:
    ck = ckpt.load(path)
    if ck.get("dataset_hash") != ds.hash:
        raise UserError(f"{path} was trained on another dataset; use the same --data")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    torch.set_rng_state(ck["rng"]["torch"])
    if rt.device.type == "cuda" and "cuda" in ck["rng"]:
        torch.cuda.set_rng_state(ck["rng"]["cuda"], rt.device)
    step = ck["step"]
    if step > 0 and not metrics_path.is_file():
        raise UserError(f"{metrics_path.parent} has a checkpoint at step {step} but its training "
                        f"log {metrics_path.name} is gone, so the run's curve cannot be "
                        "continued; restore the file, or train the run again into a new --out")
    return State(step=step, flops=ck["flops"], wall=ck["wall_clock"], tokens=ck["tokens"],
                  cpu=ck.get("cpu_clock", 0.0),
                  rows=[r for r in read_metrics(metrics_path) if r["step"] <= step])


def _fork(start: tuple[str, int], record: dict, model, opt, ds, rt: Runtime) -> State | None:
    """The state of a new run taken from another run's checkpoint at the step where their
    shared prefix ends (None: that run kept no checkpoint there)."""
    run, step = Path(start[0]), int(start[1])
    if not (run / "run.json").is_file():
        raise UserError(f"start_from {run} is not a run directory (no run.json); train the run "
                        "it starts from first, or leave start_from unset")
    other = ckpt.read_run(run)
    mine = (ModelConfig.from_dict(record["model"]), TrainConfig.from_dict(record["train"]),
            record["schedule"])
    theirs = (ModelConfig.from_dict(other["model"]), TrainConfig.from_dict(other["train"]),
              other["schedule"])
    if other.get("dataset_hash") != record["dataset_hash"] or shared_steps(mine, theirs) < step:
        raise UserError(f"cannot start from {run} at step {step}: its first {step} updates are "
                        "not this run's (another dataset, model, seed, recipe, or a depth or "
                        "learning rate that differs); leave start_from unset")
    path = ckpt.list_checkpoints(run).get(step)
    if path is None:
        return None
    return _restore(path, model, opt, ds, rt, run / "metrics.jsonl")


def _first_state(out: Path, start_ckpt: Path | None, start: tuple[str, int] | None,
                 record: dict, model, opt, ds, rt: Runtime, say) -> tuple[State, bool]:
    """Where training begins: the run's own latest checkpoint (resume), another run's at the
    end of their shared prefix (``start``; True: taken from it), or step 0."""
    if start_ckpt is not None:
        st = _restore(start_ckpt, model, opt, ds, rt, out / "metrics.jsonl")
        say(f"resuming {out} from step {st.step}")
        return st, False
    if start is not None:
        taken = _fork(start, record, model, opt, ds, rt)
        if taken is not None:
            say(f"starting from {start[0]} at step {taken.step}: its first {taken.step} updates "
                "are this run's")
            return taken, True
        say(f"{start[0]} kept no checkpoint at step {start[1]}: training from step 0")
    return State(), False


@dataclasses.dataclass
class _Run:
    """What the loop reads: the opened dataset, the resolved configs and schedule, the FLOP
    model, the model and its optimizer, where training stands (``st``) and the steps whose
    checkpoints stay (``keep``)."""
    out: Path
    ds: object
    model_cfg: ModelConfig
    train_cfg: TrainConfig
    schedule: Schedule
    fm: FlopModel
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    st: State
    keep: set
    rt: Runtime

    @property
    def metrics_path(self) -> Path:
        """The run's training log (metrics.jsonl): its curve, one row per logged step."""
        return self.out / "metrics.jsonl"

    def save(self) -> None:
        """A checkpoint at the current step (periodic ones superseded by the next one)."""
        at, st, rt = self.st.step, self.st, self.rt
        state = {
            "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "rng": {"torch": torch.get_rng_state(),
                    **({"cuda": torch.cuda.get_rng_state(rt.device)} if rt.device.type == "cuda"
                       else {})},
            "data_position": at, "schedule": self.schedule.spec, "schedule_position": at,
            "model_config": self.model_cfg.to_dict(), "train_config": self.train_cfg.to_dict(),
            "dataset_hash": self.ds.hash, "flops": st.flops, "wall_clock": st.wall,
            "tokens": st.tokens, "cpu_clock": st.cpu,
        }
        try:
            ckpt.save(self.out / "checkpoints", at, state)
        except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError
            why = getattr(e, "strerror", None) or str(e).strip().splitlines()[0][:100]
            raise UserError(f"cannot write a checkpoint to {self.out / 'checkpoints'} ({why}); "
                            "free space or fix the path, then run again with --resume; the "
                            "previous checkpoint is intact") from None
        for s, p in ckpt.list_checkpoints(self.out).items():
            if s != at and s not in self.keep:
                ckpt.remove(p)


def _eval_row(model, ds, cfg: TrainConfig, rt: Runtime, step: int) -> dict:
    res = sweep(model, ds, "eval_reordered", list(cfg.eval_depths), rt,
                max_rows=cfg.eval_people * ds.rows_per_person or None)
    model.train()
    return {"step": step, "eval": {str(k): {key: s.result(ds.attributes)[key]
                                             for key in ("bits_per_person", "nll")}
                                   for k, s in res.items()}}


def _wrap(model, cfg: TrainConfig, rt: Runtime):
    """Compiled blocks (per block, so that a new depth K never triggers a recompile; see
    ``compiles``) and the DDP wrapper where there are several ranks."""
    if compiles(cfg.compile, cfg.steps, rt.device.type)[0]:
        for block in list(model.prelude) + list(model.core) + list(model.coda):
            block.compile()
    if rt.world == 1:
        return model
    return DDP(model, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None)


def _bar(total: int, initial: int):
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc="train", unit="step",
                disable=not sys.stderr.isatty(), dynamic_ncols=True, leave=False)


def _begin(job: Launch, rt: Runtime, say) -> _Run:
    """Open the dataset, build the model and optimizer, start (fresh, resumed or forked) and
    write the run record: what the loop reads."""
    out, train_cfg, schedule = job.out, job.train_cfg, job.schedule
    ds = open_dataset(job.data)
    model_cfg = prepare_model_config(ds, job.model_cfg, train_cfg)
    fm = FlopModel.of(model_cfg, ds.seq_len - 1)
    tokens_per_step = train_cfg.tokens_per_step(ds.seq_len)
    record = run_record(model_cfg, train_cfg, schedule, ds, fm, tokens_per_step)
    start_ckpt = _start_checkpoint(out, job.resume, record)
    torch.manual_seed(train_cfg.seed)
    model = build_model(model_cfg).to(rt.device)
    opt = make_optimizer(model, train_cfg, rt.device)
    st, forked = _first_state(out, start_ckpt, job.start, record, model, opt, ds, rt, say)
    run = _Run(out, ds, model_cfg, train_cfg, schedule, fm, model, opt, st,
               set(train_cfg.keep_steps) | set(job.share_steps), rt)
    rt.barrier()  # every rank has checked --out before rank 0 writes to it
    if rt.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temporaries(out / "checkpoints")
        atomic_write_text(out / "run.json", json.dumps(record, indent=2) + "\n")
        write_metrics(run.metrics_path, st.rows)
    if forked and rt.is_main:   # this run's own checkpoint at the step it starts from: resumable
        run.save()
    rt.barrier()
    how = compiles(train_cfg.compile, train_cfg.steps, rt.device.type)[1]
    say(f"device: {rt.reason}, {how}; model: {n_params(model):,} parameters; schedule "
        f"{schedule.spec}; {train_cfg.steps} steps of {train_cfg.batch_size} sequences")
    return run


def _train(job: Launch, rt: Runtime, progress: bool, log, on_row=None) -> dict:
    # ---- begin: dataset, model, optimizer and where training stands (new, resumed, forked)
    say = log if rt.is_main else (lambda *a, **k: None)
    run = _begin(job, rt, say)
    out, train_cfg, schedule = run.out, run.train_cfg, run.schedule
    ds, fm, model, opt, st = run.ds, run.fm, run.model, run.opt, run.st
    tokens_per_step = train_cfg.tokens_per_step(ds.seq_len)

    def record(row: dict) -> None:   # the file first: it stays the truth
        append_metrics(run.metrics_path, row, rt)
        if on_row is not None and rt.is_main:
            on_row(row)

    # ---- the loop: the model wrapped (compiled blocks, DDP), its batches, a progress bar
    net = _wrap(model, train_cfg, rt)
    batches = ds.train_batches(train_cfg.batch_size, train_cfg.seed, rt.rank, rt.world)
    bar = _bar(train_cfg.steps, st.step) if progress and rt.is_main else None
    clock = Clock(st)
    model.train()
    while st.step < train_cfg.steps:
        # ---- one update: the step's depth, LR and batch are functions of the step and seed
        K = schedule.depth(st.step, train_cfg.steps, train_cfg.seed)
        lr = lr_at(st.step, train_cfg, schedule)
        tok = torch.as_tensor(batches.batch(st.step), device=rt.device)
        loss = train_step(net, model, opt, tok[:, :-1], tok[:, 1:], K, lr, train_cfg, rt)
        loss_sum, n = rt.all_sum([loss.item() * tok[:, 1:].numel(), float(tok[:, 1:].numel())])
        loss_value = loss_sum / n
        if not math.isfinite(loss_value):
            last = ckpt.latest(out)
            raise UserError(f"the loss became {loss_value} at step {st.step + 1} (K={K}, "
                            f"lr={lr:.2e}); lower the learning rate; the last good checkpoint "
                            f"{last.name if last else '(none)'} is kept")
        # ---- count: modeled FLOPs, tokens, wall and CPU clocks
        st.step += 1
        st.flops += fm.train_step(K) * tokens_per_step
        st.tokens += tokens_per_step
        clock.tick()
        # ---- log: a metrics row (and a progress line where no bar is live), an eval row
        if st.step % train_cfg.log_every == 0 or st.step == train_cfg.steps:
            st.rows.append({"step": st.step, "K": K, "loss": loss_value, "lr": lr,
                            "tokens": st.tokens, "flops": st.flops, "wall_clock": st.wall,
                            "cpu_clock": st.cpu})
            record(st.rows[-1])
            if bar is None or bar.disable:   # no live bar (a log file, nohup, Slurm): a line
                say(step_line(st, train_cfg.steps, K, loss_value, lr))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", K=K)
        if train_cfg.eval_every and st.step % train_cfg.eval_every == 0:
            record(_eval_row(model, ds, train_cfg, rt, st.step))
            clock.skip()
        # ---- checkpoint: the last step, the steps kept for others, every ckpt_every
        if (st.step == train_cfg.steps or st.step in run.keep
                or (train_cfg.ckpt_every and st.step % train_cfg.ckpt_every == 0)):
            if rt.is_main:
                run.save()
            rt.barrier()
            clock.skip()
    # ---- finish: the summary, said and returned
    if bar is not None:
        bar.close()
    return _finish(out, st, model, schedule, say)


def _finish(out: Path, st: State, model, schedule: Schedule, say) -> dict:
    """The run's summary, said and returned."""
    final = [r for r in st.rows if "loss" in r]
    summary = {"out": str(out), "steps": st.step, "final_loss": final[-1]["loss"] if final else None,
               "modeled_train_flops": st.flops, "wall_clock_s": st.wall, "tokens": st.tokens,
               "params": n_params(model), "schedule": schedule.spec,
               "checkpoint": str(ckpt.latest(out))}
    loss = "n/a" if summary["final_loss"] is None else f"{summary['final_loss']:.4f}"
    say(f"done: {st.step} steps, final loss {loss}, "
        f"{st.flops:.3e} modeled FLOPs, {st.wall:.1f}s")
    return summary
