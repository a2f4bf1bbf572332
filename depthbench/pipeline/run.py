"""``depthbench run SPEC``: an experiment grid from dataset to report, resumable.

Stages: generate -> train (every schedule x seed) -> eval (every final checkpoint, plus
fixed-first checkpoints at the switch and after it) -> update-benefit probe (those fixed-first
checkpoints) -> serve-bench -> report. A stage is one (command, config) pair: run here it calls
the command's action with the config (``ACTIONS``); ``--plan`` writes the config to
``OUT/plan/ID.json`` and prints ``depthbench COMMAND --config OUT/plan/ID.json``, the same call
from a shell. So what is printed and what runs cannot differ.

A finished stage leaves ``OUT/stages/ID.json`` with its config; a rerun skips it while its
config, its inputs and its outputs are unchanged, resumes an interrupted training run, and
refuses (naming the fields that differ) to replace a finished stage whose settings changed
unless ``--rerun PATTERN`` names it. Stages run in a local process pool, or one job each
through submitit (SLURM, or submitit's local executor)."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from depthbench.config import (
    EvalConfig,
    ProbeConfig,
    ReportConfig,
    ServeConfig,
    TrainJob,
    resolve_presets,
    train_preset,
)
from depthbench.errors import UserError
from depthbench.fsio import DirLock, atomic_write_text
from depthbench.pipeline.spec import ExperimentSpec, budget_tag, length_tag, load_spec, lr_tag  # noqa: F401  (load_spec re-exported)
from depthbench.pipeline.stages import (
    Stage,
    differences,
    run_stage,
    semantic_config,
    slug,
    stage_hash,
)
from depthbench.pipeline.steps import budget_steps, length_steps, matched_steps_of, prefix_sharing
from depthbench.rows import items_base, row_paths, write_rows


def _folder_digest(folder: Path) -> str:
    """The content of a folder of task files (every file's relative path and bytes)."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _clock(seconds: float) -> str:
    """12m03s, 1h02m."""
    m = int(round(seconds)) // 60
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{int(round(seconds)) % 60:02d}s"


class Pipeline:
    def __init__(self, spec: ExperimentSpec, out: Path, log=print, rerun=(), executor="local",
                 report_dir: Path | None = None):
        """``report_dir``: where the report goes when the spec does not say (report.out);
        default OUT/report, so that a run never writes over a committed report."""
        self.spec, self.out, self.log = spec, Path(out), log
        self.rerun, self.executor = tuple(rerun), executor
        self.data, self.results = self.out / "data", self.out / "results"
        self.report_dir = Path(spec.report.out or report_dir or self.out / "report")
        self.stages_dir, self.plan_dir = self.out / "stages", self.out / "plan"
        self.tracker_dir = Path(spec.run.tracker_dir or self.out / "tracker")
        self.keys: dict[str, str] = {}  # stage id -> hash of its config and inputs
        self.started: dict[str, float] = {}  # stage id -> when this process started it

    # ---- the grid -------------------------------------------------------------------------------
    def stages(self) -> list[list[Stage]]:
        """The stages in groups; a group runs after the one before it has finished."""
        from depthbench.data_gen import resolve_config
        s = self.spec
        gen_cfg = resolve_config(s.data.preset, overrides=s.data.set, seed=s.data.seed)
        if s.data.text:   # the corpus's inputs, as given (paths relative to where it runs)
            d = s.data
            gen = Stage("generate", "prepare-text", {
                "out": str(self.data), "corpus": list(d.corpus), "vocab_size": d.vocab_size,
                "tokenizer": d.tokenizer, "val_fraction": d.val_fraction, "seed": d.seed,
                "seq_len": d.seq_len}, [self.data / "manifest.json"])
        else:
            gen = Stage("generate", "generate", {"out": str(self.data),
                                                 "dataset": gen_cfg.to_dict()},
                        [self.data / "manifest.json"])
        trains, matched = self._train_stages(gen_cfg)
        runs = trains + matched
        evals = [st for t in runs for st in self._eval_stages(t)]
        probes = [st for t in runs for st in self._probe_stages(t)] if s.probe.enabled else []
        serve = self._serve_stage(runs) if s.serve.enabled else []
        # the report reads exactly this grid's result files: rows a rerun left behind (an
        # earlier dataset's, or a step the runs no longer have) are never mixed in
        files = [str(o) for st in evals + probes + serve for o in st.outputs] + [
            str(self.results / kind / f"{Path(t.config['out']).name}.jsonl")
            for t in runs for kind in ("curves", "runs")] + [str(self.results / "stages.jsonl")]
        report = Stage("report", "report", ReportConfig(
            results=tuple(files), out=str(self.report_dir), title=s.name).to_dict(),
            [self.report_dir / "index.html"], [st.id for st in evals + probes + serve + runs])
        return [g for g in ([gen], trains, matched, evals + probes + serve, [report]) if g]

    def _tracker(self) -> dict:
        """A training job's tracker keys: its curve logged live (they change no stage's key)."""
        t = self.spec.run.tracker
        return {"tracker": t, "tracker_dir": str(self.tracker_dir)} if t else {}

    def _device(self) -> str:
        return self.spec.run.device or train_preset(self.spec.train.preset).device

    def _train_stages(self, gen_cfg) -> tuple[list[Stage], list[Stage]]:
        from depthbench.schedules import parse_schedule
        t = self.spec.train
        mcfg, base = resolve_presets(t.preset, t.set)
        base = base.replace(steps=t.steps) if t.steps else base
        gpus = 1 if base.device == "cuda" else 0
        keep = tuple(self.spec.eval.switch_checkpoints)

        def stage(schedule, seed, steps, tag="", match="", tags=None, after=(), arm="", lr=None):
            name = tag + slug(schedule, seed)
            m, tr = resolve_presets(t.preset, t.arm_overrides(arm or schedule,
                                                              (tags or {}).get("budget")))
            tr = tr.replace(steps=steps, seed=seed, **({} if lr is None else {"lr": lr}))
            job = TrainJob(data=str(self.data), out=str(self.out / "runs" / name), model=m,
                           train=tr, schedule=schedule, resume=True, match_flops=match,
                           keep_after_switch=keep, results=str(self.results), tags=tags or {},
                           **self._tracker())
            return Stage(f"train-{name}", "train", job.to_dict(),
                         [Path(job.out) / "checkpoints" / "latest"], ["generate", *after], gpus)

        # the most expensive runs (deepest mean depth) first, so the pool finishes together
        by_cost = sorted(t.schedules, key=lambda s: -parse_schedule(s).depths(base.steps, 0).mean())
        # the grid's axis: (run-name prefix, row tags, peak LR, steps) of each of its values
        sweep = ([(lr_tag(lr), {"lr_sweep": lr}, lr, base.steps) for lr in t.lrs]
                 or [(length_tag(x), {"length": x}, None, length_steps(x, base.steps))
                     for x in t.lengths] or [("", {}, None, base.steps)])
        if t.budgets:   # each budget, and at each budget every LR of a sweep
            steps_of = budget_steps(gen_cfg, mcfg, base, t.budget_schedule)
            lrs = [(lr_tag(lr), {"lr_sweep": lr}, lr) for lr in t.lrs] or [("", {}, None)]
            trains = [stage(s, seed, steps_of(s, b, seed), budget_tag(b) + tag,
                            tags={"budget": b, **tags}, lr=lr)
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

    def _checkpoints(self, train: Stage) -> list[int | None]:
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

    def _eval_stages(self, train: Stage) -> list[Stage]:
        e, name, out = self.spec.eval, Path(train.config["out"]).name, []
        steps = self._checkpoints(train)
        for step in steps:
            tag = "final" if step is None else f"{step:07d}"
            base = self.results / "eval" / f"{name}_step{tag}"
            # a corpus: its validation split; a checkpoint kept around the switch (read by no
            # figure; rows for a closer look) only the headline split, the final one every split
            splits = () if self.spec.data.text else e.splits if step == steps[-1] else \
                [sp for sp in e.splits if sp == "eval_reordered"] or e.splits
            cfg = EvalConfig(run=train.config["out"], depths=e.depths, splits=splits,
                             checkpoint=step, batch_size=e.batch_size, out=str(base),
                             device=self._device(), tags=train.config["tags"])
            items = [row_paths(items_base(base))[1]] if self.spec.data.text else []
            out.append(Stage(f"eval-{name}-{tag}", "eval", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl"), *items], [train.id]))
        if e.tasks:   # downstream tasks of a text run, at its final checkpoint
            base = self.results / "tasks" / name
            cfg = EvalConfig(run=train.config["out"], depths=e.depths, harness="lm-eval",
                             tasks=e.tasks, task_path=e.task_path, max_people=e.task_limit or None,
                             batch_size=min(e.batch_size, 64), out=str(base),
                             device=self._device(), tags=train.config["tags"])
            out.append(Stage(f"tasks-{name}", "eval", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl")], [train.id]))
        return out

    def _probe_stages(self, train: Stage) -> list[Stage]:
        from depthbench.schedules import parse_schedule
        p, name, out = self.spec.probe, Path(train.config["out"]).name, []
        if parse_schedule(train.config["schedule"]).kind != "fixed-first":
            return []
        steps = self._checkpoints(train)
        for step in steps[:-1]:  # the kept checkpoints around the switch, not the final one
            base = self.results / "probe" / f"{name}_step{step:07d}"
            cfg = ProbeConfig(run=train.config["out"], checkpoint=step, depth_a=p.depth_a,
                              depth_b=p.depth_b, depths=self.spec.eval.depths, batches=p.batches,
                              max_people=p.max_people, out=str(base), device=self._device(),
                              tags=train.config["tags"], lr=p.lr or None)
            out.append(Stage(f"probe-{name}-{step}", "probe-update", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl")], [train.id]))
        return out

    def _serve_stage(self, runs: list[Stage]) -> list[Stage]:
        sv, seed = self.spec.serve, self.spec.train.seeds[0]
        target = next(t for t in runs if t.config["schedule"] == sv.schedule
                      and t.config["train"]["seed"] == seed)
        base = self.results / "serve"
        cfg = ServeConfig(run=target.config["out"], modes=sv.modes, exit=sv.exit,
                          kv_policy=sv.kv_policy, width=sv.width, requests=sv.requests,
                          max_depth=sv.max_depth, device=self._device(), out=str(base))
        return [Stage("serve", "serve-bench", cfg.to_dict(), [base.with_name("serve.jsonl")],
                      [target.id])]

    # ---- bookkeeping -------------------------------------------------------------------------
    def _key(self, st: Stage) -> str:
        key = {"config": semantic_config(st.config), "after": [self.keys.get(a) for a in st.after]}
        if st.command == "prepare-text":   # a corpus edited in place is another input
            from depthbench.data.corpus import corpus_digest
            from depthbench.data.text import FORMAT_VERSION
            key["corpus"] = corpus_digest(list(st.config["corpus"]), st.config["tokenizer"] or None)
            key["format"] = FORMAT_VERSION   # a dataset this depthbench cannot read is rewritten
        if st.config.get("task_path"):      # task files edited in place are other questions
            key["task_path"] = _folder_digest(Path(st.config["task_path"]))
        return stage_hash(key)

    def _todo(self, st: Stage) -> bool:
        """Whether ``st`` must run: it has not finished, its inputs were rerun, or its settings
        changed and --rerun names it (then its old outputs are removed)."""
        self.keys[st.id] = self._key(st)
        marker = self.stages_dir / f"{st.id}.json"
        try:
            rec = json.loads(marker.read_text())
            diff = differences(semantic_config(rec["config"]), semantic_config(st.config))
        except (OSError, ValueError, KeyError, TypeError):
            rec, diff = None, self._unmarked_run(st)
        if not diff:
            if rec and rec.get("key") == self.keys[st.id]:
                return not all(Path(o).exists() for o in st.outputs)
            if rec and st.command == "train" and Path(st.config["out"]).exists():
                # same settings, but a stage it reads was rerun: its run cannot be resumed
                self.log(f"rerun {st.id}: its inputs were rerun")
                shutil.rmtree(st.config["out"])
            return True
        # the report is drawn from the rows alone: it follows its inputs without --rerun
        if st.command != "report" and not any(fnmatch.fnmatchcase(st.id, p) or p == "all"
                                              for p in self.rerun):
            raise UserError(f"stage {st.id} finished with other settings ({'; '.join(diff[:4])}"
                            f"{'; ...' if len(diff) > 4 else ''}); rerun it with --rerun "
                            f"'{st.id}' (patterns such as 'train-*' work), or give another --out")
        self.log(f"rerun {st.id}: {'; '.join(diff[:4])}")
        if st.command == "train" and Path(st.config["out"]).exists():
            shutil.rmtree(st.config["out"])
        marker.unlink(missing_ok=True)
        return True

    def _unmarked_run(self, st: Stage) -> list[str]:
        """A training run without a marker (interrupted): how the settings it was started with
        differ from this stage's (empty: nothing to compare, or the same run)."""
        if st.command != "train" or not (Path(st.config["out"]) / "run.json").is_file():
            return []
        from depthbench.checkpoint import read_run
        from depthbench.train.job import job_record
        keys = ("model", "train", "schedule", "dataset_hash")
        old, new = read_run(st.config["out"]), job_record(TrainJob.from_dict(st.config))
        return differences({k: old[k] for k in keys}, json.loads(json.dumps({k: new[k] for k in keys})))

    def _start(self, st: Stage) -> None:
        self.started[st.id] = time.time()
        self.log(f"run  {st.id}")

    def _mark(self, st: Stage, rss_mb: float | None = None) -> None:
        self.stages_dir.mkdir(parents=True, exist_ok=True)
        now, started = time.time(), self.started.get(st.id)
        atomic_write_text(self.stages_dir / f"{st.id}.json", json.dumps(
            {"key": self.keys[st.id], "config": st.config, "command": st.command,
             "outputs": [str(o) for o in st.outputs], "started": started, "finished": now,
             "seconds": None if started is None else now - started,
             "workers": self.workers, "peak_rss_mb": rss_mb}, indent=1) + "\n")

    def _write_stage_rows(self, stages: list[Stage]) -> None:
        """``results/stages``: when each finished stage of the grid started and ended (wall
        clock, seconds since the epoch; a submitted job's start is its submission), so that a
        report can say how long its grid took from its own rows."""
        rows = []
        for st in stages:
            try:
                rec = json.loads((self.stages_dir / f"{st.id}.json").read_text())
            except (OSError, ValueError):
                continue
            rows.append({"stage": st.id, "command": st.command, "started": rec.get("started"),
                         "finished": rec.get("finished"), "stage_s": rec.get("seconds"),
                         "workers": rec.get("workers"), "peak_rss_mb": rec.get("peak_rss_mb")})
        write_rows(rows, self.results / "stages", "stage")   # none: an empty file

    @property
    def workers(self) -> int | None:
        """The local pool's size (None: stages run as submitted jobs)."""
        return (self.spec.run.workers or os.cpu_count() or 1) if self.executor == "local" else None

    # ---- running -------------------------------------------------------------------------------
    def preflight(self) -> None:
        """What the spec already shows is wrong, refused before the first stage runs."""
        from depthbench.exits import parse_exit
        from depthbench.fsio import check_replaceable
        check_replaceable(self.report_dir, "report", "the report directory")
        r, o = self.report_dir.resolve(), self.out.resolve()
        parts = [o / n for n in ("data", "results", "runs", "stages", "plan", "logs",
                                 "submitit")]
        if r == o or r in o.parents or any(r == q or q in r.parents for q in parts):
            raise UserError(f"the report directory {self.report_dir} would replace the experiment "
                            f"directory {self.out} or a part of it; set report.out elsewhere")
        if self.spec.eval.tasks:   # an unknown task is refused now, not after training
            try:
                from depthbench.evaluate.harness import check_tasks
            except ImportError:
                raise UserError("eval.tasks needs lm-eval: pip install 'depthbench[lmeval]'") from None
            check_tasks(list(self.spec.eval.tasks), self.spec.eval.task_path)
        _, base = resolve_presets(self.spec.train.preset, self.spec.train.set)
        devices = {self._device(), train_preset(self.spec.train.preset).device, base.device}
        if "cuda" in devices:
            from depthbench import runtime
            if not runtime.cuda_available():
                raise UserError("the spec runs on device cuda (train preset "
                                f"{self.spec.train.preset!r}, train.set or run.device) but this machine has "
                                "no CUDA GPU; set run.device = \"cpu\" and train.set.device = "
                                "\"cpu\", or run it on a GPU machine")
        if self.executor == "slurm" and shutil.which("sbatch") is None:
            raise UserError("--executor slurm needs SLURM's sbatch on PATH, and this machine has "
                            "none; run on a SLURM login node, or use --executor local")
        sv = self.spec.serve
        if sv.enabled and parse_exit(sv.exit, 1, sv.max_depth).needs_gate:
            if not resolve_presets(self.spec.train.preset, self.spec.train.set)[0].exit_gate:
                raise UserError(f"serve.exit {sv.exit!r} reads the learned exit gate, but the "
                                "trained model has none; add exit_gate = true to train.set or "
                                "choose another exit")

    def run(self, plan: bool = False) -> dict:
        if plan:
            return self._plan()
        self.preflight()
        with DirLock(self.out, "experiment directory"):
            t0, groups = time.perf_counter(), self.stages()
            for group in groups:
                if group[0].command == "report":
                    self._write_stage_rows([st for g in groups[:-1] for st in g])
                todo = [st for st in group if self._todo(st)]
                for st in group:
                    if st not in todo:
                        self.log(f"skip {st.id} (done)")
                self._execute(todo)
            n_runs = sum(st.command == "train" for g in groups for st in g)
            return {"out": str(self.out), "report": str(self.report_dir),
                    "files": len(list(self.report_dir.iterdir())), "runs": n_runs,
                    "seconds": time.perf_counter() - t0}

    def _plan(self) -> dict:
        lines, groups = [], self.stages()
        # the report command reads the stage rows: those of stages finished here, if any
        self._write_stage_rows([st for g in groups[:-1] for st in g])
        for group in groups:
            for st in group:
                f = self.plan_dir / f"{st.id}.json"
                f.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(f, json.dumps(st.file_config(), indent=1) + "\n")
                lines.append(shlex.join(st.argv(f)))
        for line in lines:
            self.log(line)
        return {"plan": True, "commands": lines}

    def _done(self, st: Stage) -> None:
        """``done [k/N] STAGE (elapsed, ETA)``: the grid's progress, the ETA from the stages
        this invocation finished (their mean time, over the workers that run them)."""
        self.finished += 1
        k, n = self.finished, self.todo_count
        spent = time.time() - self.t_start
        eta = spent / k * (n - k) if k < n else 0.0
        self.log(f"done [{k}/{n}] {st.id} ({_clock(spent)} elapsed, ETA {_clock(eta)})")
        if self.spec.run.tracker and st.command in ("eval", "probe-update", "serve-bench"):
            from depthbench.trackers import log_row_files
            log_row_files(st.outputs, self.spec.run.tracker, self.tracker_dir)

    def _execute(self, todo: list[Stage]) -> None:
        if not todo:
            return
        self.finished, self.todo_count, self.t_start = 0, len(todo), time.time()
        if self.executor != "local":
            from depthbench.pipeline.cluster import submit
            return submit(self, todo)
        workers = min(self.workers, len(todo))
        if workers == 1:
            for st in todo:
                self._start(st)
                self._mark(st, run_stage(st.command, st.config))
                self._done(st)
            return
        waiting, running = list(todo), {}
        with ProcessPoolExecutor(max_workers=workers) as pool:
            while waiting or running:
                # the first stages (in order) whose waits are over fill the free workers
                busy = {s.id for s in waiting} | {s.id for s in running.values()}
                for st in [s for s in waiting if not busy & set(s.waits)][:workers - len(running)]:
                    waiting.remove(st)
                    self._start(st)
                    running[pool.submit(run_stage, st.command, st.config, None, 1)] = st
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in [f for f in running if f in done]:
                    st = running.pop(fut)
                    self._mark(st, fut.result())
                    self._done(st)
