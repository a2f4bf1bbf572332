"""Step counts planned before any stage runs: FLOP-matched and budgeted runs' steps from the
generator config, and the shared prefixes of runs that train the same schedule."""

from __future__ import annotations

from depthbench.config import (
    TrainJob,
)
from depthbench.pipeline.spec import SpecError
from depthbench.pipeline.stages import Stage


def prefix_sharing(trains: list[Stage], matched: list[Stage] = (), matched_steps=None,
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
    from depthbench.train.job import resolved_train_config
    from depthbench.train.updates import shared_steps, update_profile
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
    from depthbench.data_gen import build_vocab
    from depthbench.flops import FlopModel
    return FlopModel.of(mcfg.replace(vocab_size=mcfg.vocab_size or len(build_vocab(gen_cfg))),
                        gen_cfg.seq_len - 1)


def matched_steps_of(gen_cfg, mcfg, trains: list[Stage]):
    """``steps(job)``: the steps a compute-matched job's ``match_flops`` resolves to once its
    reference run (one of ``trains``) exists (``train.matched_steps``), computed beforehand from
    the generator config and the reference's stage."""
    from depthbench.flops import matched_run_steps
    from depthbench.schedules import parse_schedule
    fm, seq = _flop_model(gen_cfg, mcfg), gen_cfg.seq_len
    refs = {t.config["out"]: TrainJob.from_dict(t.config) for t in trains}

    def steps(job: TrainJob) -> int:
        ref = refs[job.match_flops]
        return matched_run_steps(fm, parse_schedule(ref.schedule), ref.train.steps,
                                 ref.train.seed, ref.train.tokens_per_step(seq), fm,
                                 parse_schedule(job.schedule), job.train.seed,
                                 job.train.tokens_per_step(seq))
    return steps


def budget_steps(gen_cfg, mcfg, tcfg, budget_schedule: str):
    """``steps_of(schedule, fraction, seed)``: the steps at which ``schedule`` spends ``fraction``
    of the full budget, the modeled training FLOPs of ``budget_schedule`` over ``tcfg.steps``
    steps (its seed-0 draws). Computed from the generator config, so ``--plan`` needs no data."""
    from depthbench.flops import match_steps, schedule_flops
    from depthbench.schedules import parse_schedule
    fm, tps = _flop_model(gen_cfg, mcfg), tcfg.tokens_per_step(gen_cfg.seq_len)
    full = schedule_flops(fm, parse_schedule(budget_schedule), tcfg.steps, 0, tps)

    def steps_of(schedule: str, fraction: float, seed: int) -> int:
        sched = parse_schedule(schedule)
        n = match_steps(fm, sched, fraction * full, tcfg.steps, seed, tps)
        got = schedule_flops(fm, sched, n, seed, tps) / full
        if abs(got - fraction) > AXIS_TOLERANCE * fraction:
            raise SpecError(f"train.budgets: {fraction:g} of the FLOP budget is {n} step(s) of "
                            f"{schedule}, {got:.3g} of it, not {fraction:g}; give more "
                            "train.steps or larger budgets")
        return n
    return steps_of


# an axis value (a training length, a FLOP budget) is what its runs get to within this share,
# else the spec is refused: a report must not say "at 1% of the budget" of a run of 1 step
AXIS_TOLERANCE = 0.05


def length_steps(x: float, steps: int) -> int:
    """The steps of training length ``x`` (a multiple of ``steps``): a whole number of at least
    one step within AXIS_TOLERANCE of x * steps, else the spec is refused."""
    n = max(1, round(x * steps))
    if abs(n - x * steps) > AXIS_TOLERANCE * x * steps:
        raise SpecError(f"train.lengths: {x:g} x {steps} steps is {x * steps:g} steps, which "
                        f"would train {n}; give lengths that are whole numbers of steps "
                        "(or more train.steps)")
    return n
