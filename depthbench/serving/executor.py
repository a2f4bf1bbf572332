"""What the scheduler talks to: the executor interface, the host state every executor keeps,
and the clocks. Torch-free, so the scheduler and the simulator import no model code.

The scheduler decides (which rows run, when the coda runs, which requests join, and each
token's exit depth where it is known when the token starts); an executor runs what it is told
and reports which rows exited. The torch engine (``serving.engine.Engine``) and the simulator's
priced engine (``serving.sim.SimEngine``) both implement ``Executor`` on top of ``HostState``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from depthbench.exits import ExitCriterion
from depthbench.serving.memory import BlockPool

STAGES = ("prefill", "start", "core", "finish")


@dataclass
class StageStats:
    """One stage's launches: how many, their seconds, the tokens they ran, and of those the
    prompt tokens riding beside decode tokens (chunked prefill)."""
    launches: int = 0
    seconds: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0


@dataclass
class EngineStats:
    """What an executor counted: requests prefilled, decode rows in core launches, host syncs
    (device-to-host reads), and per stage its launches (``stage``)."""
    prefills: int = 0
    core_rows: int = 0
    syncs: int = 0
    stage: dict[str, StageStats] = field(default_factory=lambda: {s: StageStats() for s in STAGES})


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
    stats: EngineStats

    n_prompt_slots: int          # work items beyond the rows: prompt tokens in core launches
    device_type: str             # "cpu" or "cuda": the device kind the scheduler's defaults suit
    blocks: BlockPool | None     # paged KV the scheduler admits and preempts by (None: every
                                 # row holds its whole sequence)

    def prefill(self, rows: list[int], prompts: list[list[int]]) -> list[int]: ...

    # chunked prefill: a newcomer's rows are admitted without a launch, and its prompt tokens
    # become work items (ids n_rows.. n_rows + n_prompt_slots - 1), each placed at its row and
    # position, that start, loop and finish beside decode tokens (whose item id is their row)
    def admit(self, rows: list[int], prompt_lens: list[int]) -> None: ...

    def place(self, items: list[int], rows: list[int], positions: list[int]) -> None: ...

    def start(self, items: list[int], tokens: list[int],
              depths: list[int | None] | None = None) -> None: ...

    def core(self, items: list[int]) -> list[int]: ...

    def finish(self, items: list[int]) -> tuple[list[int], list[int]]: ...


class HostState:
    """What an executor keeps on the host: per work item its row, position, loop and (where
    given at start) exit depth; per stage launch counts, tokens and seconds; the clock.

    Item ``r < n_rows`` is row r's decode token; items ``n_rows..`` are prompt tokens (chunked
    prefill), each ``place``d at a row and position before it starts."""

    device_type = "cuda"          # what the executor runs on (or prices): "cpu" or "cuda"
    blocks: BlockPool | None = None

    def __init__(self, criterion: ExitCriterion, n_rows: int, record: bool = False,
                 clock: Clock | None = None, n_prompt_slots: int = 0):
        self.crit = criterion
        self.max_depth = criterion.max_depth
        self.n_rows = n_rows
        self.n_prompt_slots = n_prompt_slots
        n = n_rows + n_prompt_slots
        self.clock = clock or WallClock()
        self.row_h = np.arange(n, dtype=np.int64)
        self.pos_h = np.zeros(n, dtype=np.int64)
        self.loop_h = np.zeros(n, dtype=np.int64)
        self.target_h = np.zeros(n, dtype=np.int64)   # exit depth, where given at start
        self.known_h = np.zeros(n, dtype=bool)        # whether it was given
        self.stats = EngineStats()
        # per stage, sums over launches of (1, tokens, seconds, tokens^2, tokens x seconds): the
        # least-squares seconds per extra token of a launch (``prompt_seconds``)
        self._fit = {s: np.zeros(5) for s in STAGES}
        self.record = record
        # (stage, rows, tokens, context length, KV entries copied on exit, seconds)
        self.records: list[tuple[str, int, int, int, int, float]] = []

    def _log(self, stage: str, dt: float, rows: int, tokens: int, L: int, copies: int = 0,
             prompt_tokens: int = 0) -> None:
        st = self.stats.stage[stage]
        st.launches += 1
        st.seconds += dt
        st.tokens += tokens
        st.prompt_tokens += prompt_tokens
        self._fit[stage] += (1.0, tokens, dt, tokens * tokens, tokens * dt)
        if self.record:
            self.records.append((stage, rows, tokens, L, copies, dt))

    def prompt_seconds(self) -> float:
        """Seconds spent on prompt tokens: the prefill launches, and what the prompt tokens
        riding in launches beside decode tokens (chunked prefill) added to them
        (``prompt_seconds_by_stage``)."""
        return float(sum(self.prompt_seconds_by_stage().values()))

    def _prompt_price(self, stage: str) -> float:
        """Seconds per prompt token riding in a ``stage`` launch beside decode tokens (chunked
        prefill): the least-squares seconds per extra token of that stage's launches, within
        [0, the average per token] (the marginal cost: on a device where a launch costs its
        weight reads, a token that rides along costs little; an average share would charge it a
        whole row of the launch)."""
        n, sx, sy, sxx, sxy = self._fit[stage]
        if not sx:
            return 0.0
        var = n * sxx - sx * sx
        slope = (n * sxy - sx * sy) / var if var > 1e-9 * max(sx * sx, 1.0) else sy / sx
        return float(min(max(slope, 0.0), sy / sx))

    def prompt_seconds_by_stage(self) -> dict[str, float]:
        """Per stage, the seconds spent on prompt tokens: all of the prefill launches', and for
        prompt tokens riding in launches beside decode tokens what they added
        (``_prompt_price``)."""
        st = self.stats.stage
        out = {"prefill": float(st["prefill"].seconds)}
        for s in STAGES[1:]:
            n_p = st[s].prompt_tokens
            out[s] = n_p * self._prompt_price(s) if n_p else 0.0
        return out

    def n_prompt(self, items) -> int:
        """How many of ``items`` are prompt tokens."""
        return int((np.asarray(items) >= self.n_rows).sum())

    def admit(self, rows: list[int], prompt_lens: list[int]) -> None:
        """Rows taken by new requests whose prompts go through core launches: each row's next
        decode token sits after its prompt."""
        self.pos_h[rows] = prompt_lens

    def place(self, items: list[int], rows: list[int], positions: list[int]) -> None:
        """Prompt-token items at their rows and positions, before they start."""
        assert min(items) >= self.n_rows, "only prompt items are placed"
        self.row_h[items] = rows
        self.pos_h[items] = positions

    def _set_target(self, items: list[int], depths: list[int | None] | None) -> None:
        """Each item's exit depth, where given (None, or a None entry: the criterion decides)."""
        depths = [None] * len(items) if depths is None else list(depths)
        known = np.array([d is not None for d in depths], dtype=bool)
        assert known.all() or not self.crit.known_in_advance, \
            f"exit {self.crit.kind}: the scheduler gives the depths known in advance"
        d = np.array([self.max_depth if x is None else x for x in depths], dtype=np.int64)
        self.target_h[items] = np.clip(d, 1, self.max_depth)
        self.known_h[items] = known
        self.loop_h[items] = 0

    def depths_known(self, items: list[int]) -> bool:
        """Whether every item's exit depth was given at start (no signal needs reading)."""
        return bool(self.known_h[items].all())

    def _known_exits(self, items: list[int]) -> list[int]:
        self.loop_h[items] += 1
        return [r for r in items if self.loop_h[r] >= self.target_h[r]]

    def context(self, items: list[int]) -> int:
        """The attention length of a launch over ``items`` (the longest item's)."""
        return int(self.pos_h[items].max()) + 1

    def advance(self, items: list[int]) -> None:
        """After a finish: the decode items' rows move to their next position (a prompt item's
        row does not: its next decode position was set at admission)."""
        dec = [r for r in items if r < self.n_rows]
        self.pos_h[dec] += 1
