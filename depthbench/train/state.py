"""Where a training run stands: its counters and logged rows (``State``, what a checkpoint
restores besides the weights), its clocks with eval and checkpoint time left out (``Clock``),
and the progress line it prints."""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass
class State:
    """What a checkpoint restores besides the weights: the counters and the logged rows."""
    step: int = 0
    flops: float = 0.0
    wall: float = 0.0
    tokens: int = 0
    cpu: float = 0.0   # this process's CPU seconds (all its threads): not another run's share
    rows: list = dataclasses.field(default_factory=list)


class Clock:
    """A run's training clocks, wall and this process's CPU seconds, with eval and checkpoint
    time left out: ``tick`` adds the time since the last mark to the state, ``skip`` drops it."""

    def __init__(self, st: State):
        self.st = st
        self.skip()

    def skip(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def tick(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.st.wall += wall - self.wall
        self.st.cpu += cpu - self.cpu
        self.wall, self.cpu = wall, cpu


def _clock(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def step_line(st, steps: int, K: int, loss: float, lr: float) -> str:
    """One progress line as nanochat and torchtitan print them: step, share, loss, depth, LR,
    throughput, elapsed and ETA (from this run's mean seconds per step)."""
    per = st.wall / max(st.step, 1)
    return (f"step {st.step}/{steps} ({100 * st.step / steps:.0f}%) | loss {loss:.4f} | K {K} | "
            f"lr {lr:.2e} | {st.tokens / max(st.wall, 1e-9):,.0f} tok/s | elapsed "
            f"{_clock(st.wall)} | eta {_clock(per * (steps - st.step))}")
