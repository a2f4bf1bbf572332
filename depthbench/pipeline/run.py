"""``depthbench run SPEC``: an experiment grid from dataset to report, resumable: the grid's
stages (``pipeline.grid``), decided against the ledger of what has run (``pipeline.ledger``), run
by an executor (a local process pool here, or submitted jobs: ``pipeline.cluster``).

Stages: generate -> train (every schedule x seed) -> eval (every final checkpoint, plus
fixed-first checkpoints at the switch and after it) -> update-benefit probe (those fixed-first
checkpoints) -> serve-bench -> report. A stage is one (command, config) pair: run here it calls
the command's action with the config (``ACTIONS``); ``--plan`` writes the config to
``OUT/plan/ID.json`` and prints ``depthbench COMMAND --config OUT/plan/ID.json``, the same call
from a shell. So what is printed and what runs cannot differ.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from depthbench.config import RunConfig, resolve_presets, train_preset
from depthbench.errors import UserError
from depthbench.fsio import DirLock, atomic_write_text
from depthbench.pipeline.grid import Grid
from depthbench.pipeline.ledger import Ledger
from depthbench.pipeline.spec import ExperimentSpec, load_spec  # noqa: F401  (load_spec re-exported)
from depthbench.pipeline.stages import Stage, run_stage


def _clock(seconds: float) -> str:
    """12m03s, 1h02m."""
    m = int(round(seconds)) // 60
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{int(round(seconds)) % 60:02d}s"


class Pipeline:
    def __init__(self, spec: ExperimentSpec, out: Path, log=print, rerun=(), executor="local",
                 report_dir: Path | None = None):
        """``report_dir``: where the report goes when the spec does not say (report.out);
        default OUT/report, so that a run never writes over a committed report."""
        self.spec, self.out, self.log, self.executor = spec, Path(out), log, executor
        self.grid = Grid(spec, self.out, report_dir)
        self.report_dir, self.plan_dir = self.grid.report_dir, self.out / "plan"
        self.ledger = Ledger(self.out / "stages", self.grid.results, rerun, log, self.workers)

    def stages(self) -> list[list[Stage]]:
        """The grid's stages in groups (``Grid.stages``)."""
        return self.grid.stages()

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
        devices = {self.grid.device(), train_preset(self.spec.train.preset).device, base.device}
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
        self.ledger.check_rerun([st.id for group in self.stages() for st in group])
        if plan:
            return self._plan()
        self.preflight()
        with DirLock(self.out, "experiment directory"):
            t0, groups = time.perf_counter(), self.stages()
            for group in groups:
                if group[0].command == "report":
                    self.ledger.write_stage_rows([st for g in groups[:-1] for st in g])
                todo = [st for st in group if self.ledger.todo(st)]
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
        self.ledger.write_stage_rows([st for g in groups[:-1] for st in g])
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
            log_row_files(st.outputs, self.spec.run.tracker, self.grid.tracker_dir)

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
                self.ledger.start(st)
                self.ledger.mark(st, run_stage(st.command, st.config))
                self._done(st)
            return
        waiting, running = list(todo), {}
        with ProcessPoolExecutor(max_workers=workers) as pool:
            while waiting or running:
                # the first stages (in order) whose waits are over fill the free workers
                busy = {s.id for s in waiting} | {s.id for s in running.values()}
                for st in [s for s in waiting if not busy & set(s.waits)][:workers - len(running)]:
                    waiting.remove(st)
                    self.ledger.start(st)
                    running[pool.submit(run_stage, st.command, st.config, None, 1)] = st
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in [f for f in running if f in done]:
                    st = running.pop(fut)
                    self.ledger.mark(st, fut.result())
                    self._done(st)


def run_grid(cfg: RunConfig, log=print) -> dict:
    """``depthbench run``: the spec ``cfg.spec`` names, changed by ``cfg.sets``, run (or with
    ``cfg.plan`` only planned) under ``cfg.out`` (default runs/NAME), its report in OUT/report."""
    spec = load_spec(cfg.spec or None, cfg.sets)
    out = Path(cfg.out) if cfg.out else Path("runs") / spec.name
    return Pipeline(spec, out, log=log, rerun=cfg.rerun, executor=cfg.executor,
                    report_dir=out / "report").run(plan=cfg.plan)
