"""The train stage: a ``TrainJob`` resolved (matched step counts included) and run, and the
run's FLOP summary and job record."""

from __future__ import annotations

import os
from pathlib import Path

from depthbench import checkpoint as ckpt
from depthbench.config import ModelConfig, TrainConfig, TrainJob
from depthbench.data.synthetic import open_dataset
from depthbench.errors import UserError
from depthbench.flops import FlopModel
from depthbench.rows import tag_rows, write_rows
from depthbench.runlog import metrics_rows
from depthbench.schedules import Schedule, parse_schedule
from depthbench.train.loop import prepare_model_config, run_record, train


def matched_steps(ref_run: str | Path, schedule: str | Schedule, data: str | Path,
                  model_cfg: ModelConfig, batch_size: int, seed: int) -> int:
    """Steps for which ``schedule`` (a spec or parsed) spends the modeled training FLOPs of
    ``ref_run``."""
    from depthbench.flops import matched_run_steps
    ref = ckpt.read_run(ref_run)
    ds = open_dataset(data, verify=False)
    m = model_cfg.replace(vocab_size=model_cfg.vocab_size or len(ds.vocab))
    return matched_run_steps(FlopModel(**ref["flop_model"]), parse_schedule(ref["schedule"]),
                             ref["train"]["steps"], ref["seed"], ref["tokens_per_step"],
                             FlopModel.of(m, ds.seq_len - 1), parse_schedule(schedule), seed,
                             batch_size * (ds.seq_len - 1))


def flop_summary(schedule_spec: str, run: str | None = None, preset: str | None = None,
                 steps: int | None = None, seed: int = 0) -> dict:
    """Modeled training FLOPs of a schedule for a run's shape or a preset's (with the dataset
    preset of the same size), and its fraction of uniform training over the same steps."""
    from depthbench.flops import FlopModel, schedule_flops
    sched = parse_schedule(schedule_spec)
    if run is not None:
        rec = ckpt.read_run(run)
        fm = FlopModel(**rec["flop_model"])
        n_steps, tps = steps or rec["train"]["steps"], rec["tokens_per_step"]
    else:
        from depthbench.config import TRAIN_PRESETS, model_preset, train_preset
        from depthbench.data_gen.config import PRESETS
        from depthbench.data_gen.format import build_vocab
        gen = PRESETS[{"tiny": "tiny", "small": "small"}.get(preset, "paper")]()
        m = model_preset(preset)
        fm = FlopModel.of(m.replace(vocab_size=m.vocab_size or len(build_vocab(gen))), gen.seq_len - 1)
        t = train_preset(preset) if preset in TRAIN_PRESETS else None
        n_steps = steps or (t.steps if t else 1000)
        tps = (t or TrainConfig(batch_size=128)).tokens_per_step(gen.seq_len)
    total = schedule_flops(fm, sched, n_steps, seed, tps)
    hi = max(sched.max_depth, 16) if sched.kind != "fixed" else 16
    uni = schedule_flops(fm, parse_schedule(f"uniform:1-{hi}"), n_steps, seed, tps)
    return {"schedule": schedule_spec, "steps": n_steps, "flops": total, "uniform_flops": uni,
            "uniform": f"uniform:1-{hi}", "fraction_of_uniform": total / uni,
            "mean_depth": float(sched.depths(n_steps, seed).mean()), "f0": fm.f0, "fr": fm.fr}


# ---- the train stage ---------------------------------------------------------------------------
def resolved_train_config(job: TrainJob) -> TrainConfig:
    """The job's TrainConfig with ``match_flops`` and ``keep_after_switch`` applied."""
    cfg = job.train
    if job.match_flops:
        cfg = cfg.replace(steps=matched_steps(job.match_flops, job.depth_schedule, job.data,
                                              job.model, cfg.batch_size, cfg.seed))
    switch = job.depth_schedule.switch_step(cfg.steps)
    if job.keep_after_switch and switch is not None:
        extra = {switch + k for k in job.keep_after_switch if 0 < switch + k <= cfg.steps}
        cfg = cfg.replace(keep_steps=sorted({*cfg.keep_steps, *extra}))
    return cfg


def job_record(job: TrainJob) -> dict:
    """The run record ``run.json`` that ``job`` writes (to compare with an existing run)."""
    ds = open_dataset(job.data, verify=False)
    tcfg = resolved_train_config(job)
    mcfg = prepare_model_config(ds, job.model, tcfg)
    return run_record(mcfg, tcfg, job.depth_schedule, ds,
                       FlopModel.of(mcfg, ds.seq_len - 1), tcfg.tokens_per_step(ds.seq_len))


def run_train(job: TrainJob, log=print, progress: bool = True) -> dict:
    """The train stage: train (or resume) the run of ``job`` and, with ``job.results``, write
    its training curve (``curve`` rows) and summary (a ``run`` row) there."""
    from depthbench.fsio import refuse_over_inputs
    refuse_over_inputs([job.out], data=job.data, flag="--out")
    if job.results:
        name = Path(job.out).name
        refuse_over_inputs([Path(job.results) / k / f"{name}.jsonl" for k in ("curves", "runs")],
                           run=job.out, data=job.data, flag="--results")
    tcfg = resolved_train_config(job)
    live = None
    if job.tracker and int(os.environ.get("RANK", 0)) == 0:
        from depthbench.trackers import LiveCurve, tracker_dir
        live = LiveCurve(job.tracker, tracker_dir(job.tracker_dir, job.out), Path(job.out).name,
                         {"schedule": job.schedule, "model": job.model.to_dict(),
                          "train": tcfg.to_dict()})
    try:
        summary = train(job.data, job.out, job.model, tcfg, job.depth_schedule, resume=job.resume,
                        progress=progress, log=log,
                        start=(job.start_from, job.start_step) if job.start_from else None,
                        share_steps=job.share_steps, on_row=live and live.row)
    finally:
        if live is not None:
            live.close()
    if job.results and int(os.environ.get("RANK", 0)) == 0:
        name, rec = Path(job.out).name, ckpt.read_run(job.out)
        keys = {"run": name, "schedule": rec["schedule"], "seed": rec["seed"],
                "switch_step": rec["switch_step"], "dataset_hash": rec["dataset_hash"]}
        curve = tag_rows([{**keys, **r} for r in metrics_rows(job.out) if "loss" in r], job.tags)
        last = curve[-1]
        results = Path(job.results)
        write_rows(curve, results / "curves" / name, "curve")
        write_rows(tag_rows([{**keys, "steps": tcfg.steps, "final_loss": last["loss"],
                              "modeled_train_flops": last["flops"],
                              "wall_clock_s": last["wall_clock"],
                              "cpu_s": last.get("cpu_clock")}], job.tags),
                   results / "runs" / name, "run")
    return summary


def arch_keys(spec: str | None, weights: bool = False, sets: dict | None = None) -> dict:
    """``train --model-from SPEC [--from-weights]``: the model keys of SPEC's architecture,
    checked against the ``--set`` pairs that would change it under its weights."""
    if not spec:
        if weights:
            raise UserError("--from-weights needs --model-from ouro:DIR or huginn:DIR")
        return {}
    from depthbench.models.build import model_from
    arch = model_from(spec, weights)
    check_sets_fit_weights(arch, sets or {})
    return arch


def check_sets_fit_weights(arch: dict, sets: dict) -> None:
    """``--from-weights`` starts from a checkpoint's weights, so no ``--set`` may change the
    architecture they were trained in (a width, a layer count, tied embeddings, the vocabulary):
    refused in one line naming the key, before anything is written."""
    if not arch.get("init_from"):
        return
    from depthbench.config.train import split_sets
    model_sets, _ = split_sets(sets)
    for k, v in model_sets.items():
        if k in arch and k != "init_from" and v != arch[k]:
            raise UserError(f"--set {k}={v} changes the architecture whose weights --from-weights "
                            f"starts from ({arch['init_from']} has {k}={arch[k]}); drop --set "
                            f"{k}, or --from-weights to train that architecture from scratch")
