"""What the scheduler talks to: the executor interface, the host state every executor keeps,
and the clocks. Torch-free, so the scheduler and the simulator import no model code.

The scheduler decides (which rows run, when the coda runs, which requests join, and each
token's exit depth where it is known when the token starts); an executor runs what it is told
and reports which rows exited. The torch engine (``serving.engine.Engine``) and the simulator's
priced engine (``serving.sim.SimEngine``) both implement ``Executor`` on top of ``HostState``.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np

from depthbench.serving.exits import ExitCriterion

STAGES = ("prefill", "start", "core", "finish")


class Clock(Protocol):
    def now(self) -> float: ...

    def wait_until(self, t: float) -> None: ...


class WallClock:
    """The real clock; the simulator substitutes a virtual one with the same two methods."""

    def now(self) -> float:
        return time.perf_counter()

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))


class TurnClock:
    """A wall clock that runs only while its engine has the machine: several modes measured side
    by side (``serving.compare.run_side_by_side``) each read the time of their own turns, so a
    change in the machine's speed hits all of them alike. Waiting for an arrival advances it
    without sleeping (an idle engine holds no machine time)."""

    def __init__(self):
        self.elapsed, self.since = 0.0, None

    def resume(self) -> None:
        self.since = time.perf_counter()

    def pause(self) -> None:
        self.elapsed += time.perf_counter() - self.since
        self.since = None

    def now(self) -> float:
        return self.elapsed + (0.0 if self.since is None else time.perf_counter() - self.since)

    def wait_until(self, t: float) -> None:
        self.elapsed += max(0.0, t - self.now())


class Executor(Protocol):
    """The launches a scheduler asks for, and what it may read back."""

    crit: ExitCriterion          # the exit criterion of tokens whose depth is not given at start
    max_depth: int
    n_rows: int                  # KV rows: the most requests resident at once
    clock: Clock
    stats: dict

    def prefill(self, rows: list[int], prompts: list[list[int]]) -> list[int]: ...

    def start(self, rows: list[int], tokens: list[int], depths: list[int] | None = None) -> None: ...

    def core(self, rows: list[int]) -> list[int]: ...

    def finish(self, rows: list[int]) -> tuple[list[int], list[int]]: ...


class HostState:
    """What an executor keeps on the host: per row its position, loop and (where given at
    start) exit depth; per stage launch counts, tokens and seconds; the clock."""

    def __init__(self, criterion: ExitCriterion, n_rows: int, record: bool = False,
                 clock: Clock | None = None):
        self.crit = criterion
        self.max_depth = criterion.max_depth
        self.n_rows = n_rows
        self.clock = clock or WallClock()
        self.pos_h = np.zeros(n_rows, dtype=np.int64)
        self.loop_h = np.zeros(n_rows, dtype=np.int64)
        self.target_h = np.zeros(n_rows, dtype=np.int64)   # exit depth, where given at start
        self.known_h = np.zeros(n_rows, dtype=bool)        # whether it was given
        self.stats = {"prefills": 0, "core_rows": 0, "syncs": 0}
        for s in STAGES:
            self.stats[f"{s}_launches"] = 0
            self.stats[f"{s}_s"] = 0.0
            self.stats[f"{s}_tokens"] = 0
        self.record = record
        # (stage, rows, tokens, context length, KV entries copied on exit, seconds)
        self.records: list[tuple[str, int, int, int, int, float]] = []

    def _log(self, stage: str, dt: float, rows: int, tokens: int, L: int, copies: int = 0) -> None:
        st = self.stats
        st[f"{stage}_launches"] += 1
        st[f"{stage}_s"] += dt
        st[f"{stage}_tokens"] += tokens
        if self.record:
            self.records.append((stage, rows, tokens, L, copies, dt))

    def _set_target(self, rows: list[int], depths: list[int] | None) -> None:
        assert depths is not None or not self.crit.known_in_advance, \
            f"exit {self.crit.kind}: the scheduler gives the depths known in advance"
        if depths is None:
            self.target_h[rows] = self.max_depth
            self.known_h[rows] = False
        else:
            self.target_h[rows] = np.clip(np.asarray(depths, dtype=np.int64), 1, self.max_depth)
            self.known_h[rows] = True
        self.loop_h[rows] = 0

    def depths_known(self, rows: list[int]) -> bool:
        """Whether every row's exit depth was given at start (no signal needs reading)."""
        return bool(self.known_h[rows].all())

    def _known_exits(self, rows: list[int]) -> list[int]:
        self.loop_h[rows] += 1
        return [r for r in rows if self.loop_h[r] >= self.target_h[r]]

    def context(self, rows: list[int]) -> int:
        """The attention length of a decode launch over ``rows`` (the longest row's)."""
        return int(self.pos_h[rows].max()) + 1
