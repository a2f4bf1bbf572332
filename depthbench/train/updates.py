"""What each training step computes, as a pure function of the step index and the recipe: its
learning rate (``lr_at``), the whole run's (depth, LR) profile (``update_profile``), and how many
leading updates two runs make identically (``shared_steps``), so that a grid trains a shared
prefix once and a later run starts from the earlier one's checkpoint."""

from __future__ import annotations

import math

from depthbench.config import TrainConfig
from depthbench.runtime import compiles
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


# the settings that decide what a run's first updates compute: everything but its length and
# which checkpoints it writes (the length enters through the depth and LR of each step)
_NOT_IN_UPDATES = ("steps", "keep_steps", "ckpt_every")


def update_profile(train_cfg: TrainConfig, schedule: Schedule) -> tuple:
    """Every step's (depth, learning rate): with the model, data and the rest of the recipe, what
    decides the run's updates."""
    import numpy as np
    n = train_cfg.steps
    return (schedule.depths(n, train_cfg.seed),
            np.array([lr_at(i, train_cfg, schedule) for i in range(n)]))


def shared_steps(a: tuple, b: tuple, profiles: tuple | None = None) -> int:
    """How many leading updates two runs make identically. ``a`` and ``b`` are (ModelConfig,
    TrainConfig, schedule spec) of runs on the same dataset: with the same model, seed (init and
    data order) and recipe, and at each step the same depth and learning rate, both hold the same
    weights, optimizer and RNG state after that many steps, so one can start from the other's
    checkpoint there. 0 where they differ from the start. ``profiles``: their
    ``update_profile``s, where the caller has them."""
    (ma, ta, sa), (mb, tb, sb) = a, b
    da = {k: v for k, v in ta.to_dict().items() if k not in _NOT_IN_UPDATES}
    db = {k: v for k, v in tb.to_dict().items() if k not in _NOT_IN_UPDATES}
    if ma.to_dict() != mb.to_dict() or da != db:
        return 0
    if compiles(ta.compile, ta.steps, "cpu")[0] != compiles(tb.compile, tb.steps, "cpu")[0]:
        return 0   # compiled kernels round differently from eager ones
    (ka, la), (kb, lb) = profiles or (update_profile(ta, parse_schedule(sa)),
                                      update_profile(tb, parse_schedule(sb)))
    n = min(len(ka), len(kb))
    differ = ((ka[:n] != kb[:n]) | (la[:n] != lb[:n])).nonzero()[0]
    return int(differ[0]) if len(differ) else n
