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
through submitit (SLURM, or submitit's local executor).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
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
from depthbench.rows import write_rows
from depthbench.pipeline.spec import ExperimentSpec, budget_tag, load_spec  # noqa: F401  (load_spec re-exported)

CONFIGS = {"train": TrainJob, "eval": EvalConfig, "probe-update": ProbeConfig,
           "serve-bench": ServeConfig, "report": ReportConfig}


def _generate(cfg: dict) -> None:
    from data_gen import GenConfig, generate
    generate(GenConfig.from_dict(cfg["dataset"]), cfg["out"], force=True)


def _prepare_text(cfg: dict) -> None:
    from depthbench.data.corpus import prepare_text
    prepare_text(list(cfg["corpus"]), cfg["out"], cfg["vocab_size"], cfg["tokenizer"] or None,
                 cfg["val_fraction"], cfg["seed"], cfg["seq_len"], force=True)


def _train(job: TrainJob) -> None:
    from depthbench.train.loop import run_train
    log_dir = Path(job.out).parent.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"train-{Path(job.out).name}.log", "a") as f:
        run_train(job, progress=False, log=lambda m: print(m, file=f, flush=True))


def _eval(cfg):
    from depthbench.evaluate.sweep import run_eval
    run_eval(cfg)


def _probe(cfg):
    from depthbench.train.probe import run_probe
    run_probe(cfg)


def _serve(cfg):
    from depthbench.serving.bench import run_bench
    run_bench(cfg)


def _report(cfg):
    from depthbench.report import run_report
    run_report(cfg)


ACTIONS = {"generate": _generate, "prepare-text": _prepare_text, "train": _train, "eval": _eval,
           "probe-update": _probe,
           "serve-bench": _serve, "report": _report}


def run_stage(command: str, config: dict, cwd: str | None = None, threads: int = 0) -> float:
    """Run one stage from its plain config (in this process, a pool worker or a submitit job);
    returns the process's peak resident memory so far in MB (a pool worker's whole life, not
    this stage alone)."""
    if cwd:
        os.chdir(cwd)
    if threads:
        import torch
        torch.set_num_threads(threads)
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        import submitit  # several tasks: torchrun's environment from SLURM's
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    cls = CONFIGS.get(command)
    ACTIONS[command](cls.from_dict(config) if cls else config)
    return peak_rss_mb()


def peak_rss_mb() -> float:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(old: dict, new: dict) -> list[str]:
    """``key: old -> new`` for every (dotted) key whose value differs."""
    a, b = _flat(old), _flat(new)
    return [f"{k}: {json.dumps(a.get(k))} -> {json.dumps(b.get(k))}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


# a training stage's keys that say where its shared prefix comes from, not what it computes
_PREFIX_KEYS = ("start_from", "start_step", "share_steps")


def _semantic(config: dict) -> dict:
    """A stage's config without the shared-prefix keys (what its key and its reruns compare)."""
    return {k: v for k, v in config.items() if k not in _PREFIX_KEYS}


def slug(schedule: str, seed: int) -> str:
    return schedule.replace(":", "_").replace(".", "p").replace(",", "_").replace("=", "") + f"-s{seed}"


@dataclass
class Stage:
    id: str
    command: str
    config: dict                   # the plain config of the command's action
    outputs: list[Path]
    after: list[str] = field(default_factory=list)  # stages whose outputs it reads
    gpus: int = 0                  # SLURM: GPUs (torchrun-style tasks) of a training stage
    # stages that must finish first without being inputs (a run a shared prefix starts from):
    # they order the stages and change neither the stage's key nor what it computes
    waits: list[str] = field(default_factory=list)

    def __post_init__(self):  # plain JSON values, as the marker and the plan file hold them
        self.config = json.loads(json.dumps(self.config))

    def argv(self, config_file: Path) -> list[str]:
        if self.command == "generate":
            return ["depthbench", "generate", "--config", str(config_file), "--out",
                    self.config["out"], "--force"]
        if self.command == "prepare-text":
            c = self.config
            return ["depthbench", "prepare-text", *c["corpus"], "--out", c["out"],
                    *(["--vocab-size", str(c["vocab_size"])] if c["vocab_size"] else
                      ["--tokenizer", c["tokenizer"]]),
                    "--val-fraction", str(c["val_fraction"]), "--seq-len", str(c["seq_len"]),
                    "--seed", str(c["seed"]), "--force"]
        head = ["depthbench"]
        if self.command == "train":
            head = ["torchrun", "--standalone", f"--nproc_per_node={max(1, self.gpus)}", "-m",
                    "depthbench"]
        return [*head, self.command, "--config", str(config_file)]

    def file_config(self) -> dict:
        return self.config["dataset"] if self.command == "generate" else self.config


class Pipeline:
    def __init__(self, spec: ExperimentSpec, out: Path, log=print, rerun=(), executor="local",
                 report_dir: Path | None = None):
        """``report_dir``: where the report goes when the spec does not say (report.out);
        default reports/NAME."""
        self.spec, self.out, self.log = spec, Path(out), log
        self.rerun, self.executor = tuple(rerun), executor
        self.data, self.results = self.out / "data", self.out / "results"
        self.report_dir = Path(spec.report.out or report_dir
                               or Path("reports") / (spec.report.name or spec.name))
        self.stages_dir, self.plan_dir = self.out / "stages", self.out / "plan"
        self.keys: dict[str, str] = {}  # stage id -> hash of its config and inputs
        self.started: dict[str, float] = {}  # stage id -> when this process started it

    # ---- the grid -------------------------------------------------------------------------------
    def stages(self) -> list[list[Stage]]:
        """The stages in groups; a group runs after the one before it has finished."""
        from data_gen import resolve_config
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

    def _device(self) -> str:
        return self.spec.run.device or train_preset(self.spec.train.preset).device

    def _train_stages(self, gen_cfg) -> tuple[list[Stage], list[Stage]]:
        from depthbench.schedules import parse_schedule
        t = self.spec.train
        mcfg, base = resolve_presets(t.preset, t.set)
        base = base.replace(steps=t.steps) if t.steps else base
        gpus = 1 if base.device == "cuda" else 0
        keep = tuple(self.spec.eval.switch_checkpoints)

        def stage(schedule, seed, steps, tag="", match="", tags=None, after=()):
            name = tag + slug(schedule, seed)
            job = TrainJob(data=str(self.data), out=str(self.out / "runs" / name), model=mcfg,
                           train=base.replace(steps=steps, seed=seed), schedule=schedule,
                           resume=True, match_flops=match, keep_after_switch=keep,
                           results=str(self.results), tags=tags or {})
            return Stage(f"train-{name}", "train", job.to_dict(),
                         [Path(job.out) / "checkpoints" / "latest"], ["generate", *after], gpus)

        # the most expensive runs (deepest mean depth) first, so the pool finishes together
        by_cost = sorted(t.schedules, key=lambda s: -parse_schedule(s).depths(base.steps, 0).mean())
        if t.budgets:
            steps_of = budget_steps(gen_cfg, mcfg, base, t.budget_schedule)
            trains = [stage(s, seed, steps_of(s, b, seed), budget_tag(b), tags={"budget": b})
                      for b in sorted(t.budgets, reverse=True) for s in by_cost for seed in t.seeds]
        else:
            trains = [stage(s, seed, base.steps) for s in by_cost for seed in t.seeds]
        matched = []
        if t.matched_uniform:
            for seed in t.seeds:
                ref = next(st for st in trains if st.id == f"train-{slug(t.matched_uniform, seed)}")
                matched.append(stage(t.matched_schedule, seed, base.steps, "matched-",
                                     match=ref.config["out"], after=[ref.id],
                                     tags={"matched_to": t.matched_uniform}))
        if self.spec.run.share_prefixes:
            trains = _share_prefixes(trains, matched, matched_steps_of(gen_cfg, mcfg, trains))
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
            out.append(Stage(f"eval-{name}-{tag}", "eval", cfg.to_dict(),
                             [base.with_name(base.name + ".jsonl")], [train.id]))
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
                              tags=train.config["tags"])
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
        key = {"config": _semantic(st.config), "after": [self.keys.get(a) for a in st.after]}
        if st.command == "prepare-text":   # a corpus edited in place is another input
            from depthbench.data.corpus import corpus_digest
            key["corpus"] = corpus_digest(list(st.config["corpus"]), st.config["tokenizer"] or None)
        return _hash(key)

    def _todo(self, st: Stage) -> bool:
        """Whether ``st`` must run: it has not finished, its inputs were rerun, or its settings
        changed and --rerun names it (then its old outputs are removed)."""
        self.keys[st.id] = self._key(st)
        marker = self.stages_dir / f"{st.id}.json"
        try:
            rec = json.loads(marker.read_text())
            diff = differences(_semantic(rec["config"]), _semantic(st.config))
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
        from depthbench.train.loop import job_record
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
        from depthbench.fsio import check_replaceable
        from depthbench.serving.exits import parse_exit
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

    def _execute(self, todo: list[Stage]) -> None:
        if not todo:
            return
        if self.executor != "local":
            return self._submit(todo)
        workers = min(self.workers, len(todo))
        if workers == 1:
            for st in todo:
                self._start(st)
                self._mark(st, run_stage(st.command, st.config))
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
                    self.log(f"done {st.id}")

    def _submit(self, todo: list[Stage]) -> None:
        """One submitit job per stage (SLURM, or submitit's local executor); waits for all."""
        try:
            import submitit
        except ImportError:
            raise UserError("--executor slurm needs submitit: pip install submitit") from None
        folder = self.out / "submitit"
        level: dict[str, int] = {}   # a stage is submitted once the stages it waits for are done
        for st in todo:   # (todo lists a stage after those it waits for)
            level[st.id] = 1 + max((level[w] for w in st.waits if w in level), default=-1)
        for wave in range(max(level.values()) + 1):
            self._submit_wave([st for st in todo if level[st.id] == wave], submitit, folder)

    def _submit_wave(self, todo: list[Stage], submitit, folder: Path) -> None:
        jobs = []
        for st in todo:
            # the executors directly: AutoExecutor's plugin lookup needs pkg_resources
            if self.executor == "slurm":
                ex = submitit.SlurmExecutor(folder=folder)
                params = {"time": 60 * 24, **self.spec.run.slurm}
                if st.gpus:
                    params.update(gpus_per_node=st.gpus, ntasks_per_node=st.gpus)
                try:
                    ex.update_parameters(job_name=f"depthbench-{st.id}", **params)
                except (ValueError, TypeError) as e:
                    raise UserError(f"[run] slurm: {str(e).splitlines()[0][:200]}") from None
            else:
                ex = submitit.LocalExecutor(folder=folder)
                ex.update_parameters(timeout_min=60 * 24)
            try:
                self.started[st.id] = time.time()
                jobs.append((ex.submit(run_stage, st.command, st.config, os.getcwd(), 1), st))
            except Exception as e:  # sbatch refused the job (a partition, a time limit...)
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise UserError(f"submitting stage {st.id} failed: {first[:200]}; check "
                                "[run] slurm in the spec") from None
            self.log(f"submitted {st.id} (job {jobs[-1][0].job_id})")
        for job, st in jobs:
            try:
                rss = job.result()
            except Exception as e:  # a failed job: its own log holds the traceback
                last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                raise UserError(f"stage {st.id} failed ({last[:200]}); see {job.paths.stderr}") from None
            self._mark(st, rss)
            self.log(f"done {st.id}")


def _share_prefixes(trains: list[Stage], matched: list[Stage] = (), matched_steps=None,
                    least: float = 0.1) -> list[Stage]:
    """Runs that make the same first updates as another run of the grid start from its
    checkpoint where they part (``train.shared_steps``) instead of repeating them; a run that
    would share less than ``least`` of its steps trains alone. The cheapest runs (lowest mean
    depth) are placed first and each later one starts from the placed run it shares most with
    (the shallowest such run on a tie), so fixed:4 carries fixed-first:0.8:4:... and a long run
    carries the same schedule's shorter ones. A compute-matched run (a later group) starts from
    a run of the grid, at the steps ``matched_steps(job)`` that its match resolves to. Returns
    the training stages with every run after the run it starts from."""
    from depthbench.schedules import parse_schedule
    from depthbench.train.loop import resolved_train_config, shared_steps, update_profile
    jobs = [TrainJob.from_dict(t.config) for t in trains]
    runs = [(j.model, j.train, j.schedule) for j in jobs]
    prof = [update_profile(j.train, parse_schedule(j.schedule)) for j in jobs]
    level: dict[int, int] = {}

    def attach(stage: Stage, run: tuple, kept: list[int]) -> int | None:
        """Let ``stage`` (its model, recipe and schedule ``run``) start from the placed run it
        shares most with; the index of that run, or None."""
        p = update_profile(run[1], parse_schedule(run[2]))
        best = max(((min([shared_steps(run, runs[t], (p, prof[t])), *kept]), -level[t], t)
                    for t in level), default=None)
        if best is None or best[0] < max(1, least * run[1].steps):
            return None
        n, t = best[0], best[2]
        stage.config.update(start_from=jobs[t].out, start_step=n)
        trains[t].config["share_steps"] = sorted({*trains[t].config.get("share_steps", []), n})
        stage.waits = [trains[t].id]
        return t

    for c in sorted(range(len(jobs)), key=lambda i: (prof[i][0].mean(), -jobs[i].train.steps, i)):
        kept = [k for k in resolved_train_config(jobs[c]).keep_steps if k >= 1]
        t = attach(trains[c], runs[c], kept)
        level[c] = 0 if t is None else level[t] + 1
    for m in matched:
        job = TrainJob.from_dict(m.config)
        attach(m, (job.model, job.train.replace(steps=matched_steps(job)), job.schedule),
               list(job.train.keep_steps))
    return [trains[i] for i in sorted(range(len(trains)), key=lambda i: (level[i], i))]


def _flop_model(gen_cfg, mcfg):
    """The FLOP model of ``mcfg`` on the dataset ``gen_cfg`` generates (before it exists)."""
    from data_gen import build_vocab
    from depthbench.flops import FlopModel
    return FlopModel.of(mcfg.replace(vocab_size=mcfg.vocab_size or len(build_vocab(gen_cfg))),
                        gen_cfg.seq_len - 1)


def matched_steps_of(gen_cfg, mcfg, trains: list[Stage]):
    """``steps(job)``: the steps a compute-matched job's ``match_flops`` resolves to once its
    reference run (one of ``trains``) exists (``train.matched_steps``), computed beforehand from
    the generator config and the reference's stage."""
    from depthbench.flops import matched_run_steps
    from depthbench.schedules import parse_schedule
    fm, seq = _flop_model(gen_cfg, mcfg), gen_cfg.seq_len - 1
    refs = {t.config["out"]: TrainJob.from_dict(t.config) for t in trains}

    def steps(job: TrainJob) -> int:
        ref = refs[job.match_flops]
        return matched_run_steps(fm, parse_schedule(ref.schedule), ref.train.steps,
                                 ref.train.seed, ref.train.batch_size * seq, fm,
                                 parse_schedule(job.schedule), job.train.seed,
                                 job.train.batch_size * seq)
    return steps


def budget_steps(gen_cfg, mcfg, tcfg, budget_schedule: str):
    """``steps_of(schedule, fraction, seed)``: the steps at which ``schedule`` spends ``fraction``
    of the full budget, the modeled training FLOPs of ``budget_schedule`` over ``tcfg.steps``
    steps (its seed-0 draws). Computed from the generator config, so ``--plan`` needs no data."""
    from depthbench.flops import match_steps, schedule_flops
    from depthbench.schedules import parse_schedule
    fm, tps = _flop_model(gen_cfg, mcfg), tcfg.batch_size * (gen_cfg.seq_len - 1)
    full = schedule_flops(fm, parse_schedule(budget_schedule), tcfg.steps, 0, tps)

    def steps_of(schedule: str, fraction: float, seed: int) -> int:
        return match_steps(fm, parse_schedule(schedule), fraction * full, tcfg.steps, seed, tps)
    return steps_of
