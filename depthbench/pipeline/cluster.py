"""Running a grid's stages as cluster jobs: one submitit job per stage (SLURM, or submitit's
local executor), submitted in waves so that a stage starts once the stages it waits for are done."""

from __future__ import annotations

import os
import time
from pathlib import Path

from depthbench.errors import UserError
from depthbench.pipeline.stages import Stage, run_stage


def submit(pipe, todo: list[Stage]) -> None:
    """One submitit job per stage (SLURM, or submitit's local executor); waits for all."""
    try:
        import submitit
    except ImportError:
        raise UserError("--executor slurm needs submitit: pip install submitit") from None
    folder = pipe.out / "submitit"
    level: dict[str, int] = {}   # a stage is submitted once the stages it waits for are done
    for st in todo:   # (todo lists a stage after those it waits for)
        level[st.id] = 1 + max((level[w] for w in st.waits if w in level), default=-1)
    for wave in range(max(level.values()) + 1):
        _submit_wave(pipe, [st for st in todo if level[st.id] == wave], submitit, folder)

def _submit_wave(pipe, todo: list[Stage], submitit, folder: Path) -> None:
    jobs = []
    for st in todo:
        # the executors directly: AutoExecutor's plugin lookup needs pkg_resources
        if pipe.executor == "slurm":
            ex = submitit.SlurmExecutor(folder=folder)
            params = {"time": 60 * 24, **pipe.spec.run.slurm}
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
            pipe.ledger.started[st.id] = time.time()
            jobs.append((ex.submit(run_stage, st.command, st.config, os.getcwd(), 1), st))
        except Exception as e:  # sbatch refused the job (a partition, a time limit...)
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"submitting stage {st.id} failed: {first[:200]}; check "
                            "[run] slurm in the spec") from None
        pipe.log(f"submitted {st.id} (job {jobs[-1][0].job_id})")
    for job, st in jobs:
        try:
            rss = job.result()
        except Exception as e:  # a failed job: its own log holds the traceback
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise UserError(f"stage {st.id} failed ({last[:200]}); see {job.paths.stderr}") from None
        pipe.ledger.mark(st, rss)
        pipe._done(st)
