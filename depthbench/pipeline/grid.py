"""A spec's grid: the stages ``depthbench run`` runs, each one (command, config) pair, in groups
that run one after another (generate; the training runs; the FLOP-matched runs; every eval,
probe and serve stage; the report), every path under the experiment directory."""

from __future__ import annotations

from pathlib import Path

from depthbench.axes import BUDGET, LENGTH, LR
from depthbench.config import (
    GenerateJob,
    ReportConfig,
    TrainJob,
    resolve_presets,
    train_preset,
)
from depthbench.pipeline.spec import ExperimentSpec
from depthbench.pipeline.stages import Stage, slug
from depthbench.pipeline.steps import budget_steps, length_steps, matched_steps_of, prefix_sharing
from depthbench.rows import items_base, row_paths


class Grid:
    def __init__(self, spec: ExperimentSpec, out: Path, report_dir: Path | None = None):
        """``report_dir``: where the report goes when the spec does not say (report.out);
        default OUT/report, so that a run never writes over a committed report."""
        self.spec, self.out = spec, Path(out)
        self.data, self.results = self.out / "data", self.out / "results"
        self.report_dir = Path(spec.report.out or report_dir or self.out / "report")
        self.tracker_dir = Path(spec.run.tracker_dir or self.out / "tracker")

    def stages(self) -> list[list[Stage]]:
        """The stages in groups; a group runs after the one before it has finished."""
        s = self.spec
        gen_cfg = s.data.dataset()
        if s.data.text:
            gen = Stage("generate", "prepare-text", s.data.prepare_text(str(self.data)).to_dict(),
                        [self.data / "manifest.json"])
        else:
            gen = Stage("generate", "generate", GenerateJob(
                out=str(self.data), dataset=gen_cfg).to_dict(),
                [self.data / "manifest.json"])
        trains, matched = self.train_stages(gen_cfg)
        runs = trains + matched
        evals = [st for t in runs for st in self.eval_stages(t)]
        probes = [st for t in runs for st in self.probe_stages(t)] if s.probe.enabled else []
        serve = self.serve_stage(runs) if s.serve.enabled else []
        # the report reads exactly this grid's result files: rows a rerun left behind (an
        # earlier dataset's, or a step the runs no longer have) are never mixed in
        files = [str(o) for st in evals + probes + serve for o in st.outputs] + [
            str(self.results / kind / f"{Path(t.config['out']).name}.jsonl")
            for t in runs for kind in ("curves", "runs")] + [str(self.results / "stages.jsonl")]
        report = Stage("report", "report", ReportConfig(
            results=tuple(files), out=str(self.report_dir), title=s.name).to_dict(),
            [self.report_dir / "index.html"], [st.id for st in evals + probes + serve + runs])
        return [g for g in ([gen], trains, matched, evals + probes + serve, [report]) if g]

    def tracker_keys(self) -> dict:
        """A training job's tracker keys: its curve logged live (they change no stage's key)."""
        t = self.spec.run.tracker
        return {"tracker": t, "tracker_dir": str(self.tracker_dir)} if t else {}

    def device(self) -> str:
        return self.spec.run.device or train_preset(self.spec.train.preset).device

    def train_stages(self, gen_cfg) -> tuple[list[Stage], list[Stage]]:
        from depthbench.schedules import parse_schedule
        t = self.spec.train
        mcfg, base = resolve_presets(t.preset, t.set)
        base = base.replace(steps=t.steps) if t.steps else base
        gpus = 1 if base.device == "cuda" else 0
        keep = tuple(self.spec.eval.switch_checkpoints)

        def stage(schedule, seed, steps, tag="", match="", tags=None, after=(), arm="", lr=None):
            name = tag + slug(schedule, seed)
            m, tr = resolve_presets(t.preset, t.arm_overrides(arm or schedule,
                                                              (tags or {}).get(BUDGET.column)))
            tr = tr.replace(steps=steps, seed=seed, **({} if lr is None else {"lr": lr}))
            job = TrainJob(data=str(self.data), out=str(self.out / "runs" / name), model=m,
                           train=tr, schedule=schedule, resume=True, match_flops=match,
                           keep_after_switch=keep, results=str(self.results), tags=tags or {},
                           **self.tracker_keys())
            return Stage(f"train-{name}", "train", job.to_dict(),
                         [Path(job.out) / "checkpoints" / "latest"], ["generate", *after], gpus)

        # the most expensive runs (deepest mean depth) first, so the pool finishes together
        by_cost = sorted(t.schedules, key=lambda s: -parse_schedule(s).depths(base.steps, 0).mean())
        # the grid's axis: (run-name prefix, row tags, peak LR, steps) of each of its values
        sweep = ([(LR.prefix(lr), {LR.column: lr}, lr, base.steps) for lr in t.lrs]
                 or [(LENGTH.prefix(x), {LENGTH.column: x}, None, length_steps(x, base.steps))
                     for x in t.lengths] or [("", {}, None, base.steps)])
        if t.budgets:   # each budget, and at each budget every LR of a sweep
            steps_of = budget_steps(gen_cfg, mcfg, base, t.budget_schedule)
            lrs = [(LR.prefix(lr), {LR.column: lr}, lr) for lr in t.lrs] or [("", {}, None)]
            trains = [stage(s, seed, steps_of(s, b, seed), BUDGET.prefix(b) + tag,
                            tags={BUDGET.column: b, **tags}, lr=lr)
                      for b in sorted(t.budgets, reverse=True) for tag, tags, lr in lrs
                      for s in by_cost for seed in t.seeds]
        else:
            trains = [stage(s, seed, steps, tag, tags=dict(tags), lr=lr)
                      for tag, tags, lr, steps in sweep for s in by_cost for seed in t.seeds]
        matched = []
        if t.matched_uniform:
            arm = t.arms[-1]
            for tag, tags, lr, steps in sweep:
                for seed in t.seeds:
                    ref = next(st for st in trains
                               if st.id == f"train-{tag}{slug(t.matched_uniform, seed)}")
                    matched.append(stage(t.matched_schedule, seed, steps, tag + "matched-",
                                         match=ref.config["out"], after=[ref.id], arm=arm, lr=lr,
                                         tags={"matched_to": t.matched_uniform, **tags}))
        if self.spec.run.share_prefixes:
            trains = prefix_sharing(trains, matched, matched_steps_of(gen_cfg, mcfg, trains))
        return trains, matched

    def checkpoints(self, train: Stage) -> list[int | None]:
        """Steps to evaluate: the final one, and switch + k of a fixed-first run whose steps
        are known before it runs (a FLOP-matched run's are not: only its final checkpoint)."""
        from depthbench.schedules import parse_schedule
        job = train.config
        if job["match_flops"]:
            return [None]
        steps = job["train"]["steps"]
        switch = parse_schedule(job["schedule"]).switch_step(steps)
        keep = {switch + k for k in job["keep_after_switch"] if 0 < switch + k <= steps} \
            if switch is not None else set()
        return sorted(keep | {steps})

    def eval_stages(self, train: Stage) -> list[Stage]:
        e, name, out = self.spec.eval, Path(train.config["out"]).name, []
        steps = self.checkpoints(train)
        for step in steps:
            tag = "final" if step is None else f"{step:07d}"
            base = self.results / "eval" / f"{name}_step{tag}"
            # a corpus: its validation split; a checkpoint kept around the switch (read by no
            # figure; rows for a closer look) only the headline split, the final one every split
            splits = () if self.spec.data.text else e.splits if step == steps[-1] else \
                [sp for sp in e.splits if sp == "eval_reordered"] or e.splits
            cfg = e.config(run=train.config["out"], splits=splits, checkpoint=step, out=str(base),
                           device=self.device(), tags=train.config["tags"])
            items = [row_paths(items_base(base))[1]] if self.spec.data.text else []
            out.append(Stage(f"eval-{name}-{tag}", "eval", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl"), *items], [train.id]))
        if e.tasks:   # downstream tasks of a text run, at its final checkpoint
            base = self.results / "tasks" / name
            cfg = e.config(run=train.config["out"], splits=(), harness="lm-eval", tasks=e.tasks,
                           task_path=e.task_path, max_people=e.task_limit or None,
                           batch_size=min(e.batch_size, 64), out=str(base),
                           device=self.device(), tags=train.config["tags"])
            out.append(Stage(f"tasks-{name}", "eval", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl")], [train.id]))
        return out

    def probe_stages(self, train: Stage) -> list[Stage]:
        from depthbench.schedules import parse_schedule
        p, name, out = self.spec.probe, Path(train.config["out"]).name, []
        if parse_schedule(train.config["schedule"]).kind != "fixed-first":
            return []
        steps = self.checkpoints(train)
        for step in steps[:-1]:  # the kept checkpoints around the switch, not the final one
            base = self.results / "probe" / f"{name}_step{step:07d}"
            cfg = p.config(run=train.config["out"], checkpoint=step, depths=self.spec.eval.depths,
                           out=str(base), device=self.device(), tags=train.config["tags"])
            out.append(Stage(f"probe-{name}-{step}", "probe-update", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl")], [train.id]))
        return out

    def serve_stage(self, runs: list[Stage]) -> list[Stage]:
        sv, seed = self.spec.serve, self.spec.train.seeds[0]
        target = next(t for t in runs if t.config["schedule"] == sv.schedule
                      and t.config["train"]["seed"] == seed)
        base = self.results / "serve"
        cfg = sv.config(run=target.config["out"], device=self.device(), out=str(base))
        return [Stage("serve", "serve-bench", cfg.to_dict(), [base.with_name("serve.jsonl")],
                      [target.id])]
