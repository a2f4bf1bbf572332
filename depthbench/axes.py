"""A grid's axes, declared once: the value each run of a grid carries besides its arm and seed (a
matched FLOP budget, a training length, a peak learning rate), with the row tag that carries it,
the run-name prefix the pipeline gives its runs, and how a report writes it. The pipeline
(``pipeline.spec``, ``pipeline.grid``) and the report (``report.load``, its figures and
comparisons) read these, so that a value is spelled one way wherever it appears."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Axis:
    column: str                        # the row tag that carries a run's value (and its spec key)
    prefix: Callable[[float], str]     # the run-name prefix of a value's runs
    short: Callable[[float], str]      # the value as a table cell
    words: Callable[[float], str]      # the value in a sentence
    noun: str                          # what one value is called
    label: str                         # a figure's x axis
    scale: float = 1.0                 # a value on that axis (100: a fraction drawn in %)
    log2: bool = False                 # the axis drawn on a log2 scale


BUDGET = Axis("budget", lambda b: f"b{round(100 * b):03d}-", lambda b: f"{100 * b:.0f}%",
              lambda b: f"{100 * b:.0f}% of the budget", "budget", "% of the FLOP budget", 100.0)
LENGTH = Axis("length", lambda x: f"x{x:.4g}-", lambda x: f"{x:g}x",
              lambda x: f"{x:g}x the spec's steps", "training length",
              "training length (x the spec's steps)", log2=True)
LR = Axis("lr_sweep", lambda lr: f"lr{lr:.6g}-", lambda lr: f"lr={lr:g}",
          lambda lr: f"peak LR {lr:g}", "peak LR", "peak learning rate", log2=True)

AXES = {a.column: a for a in (BUDGET, LENGTH, LR)}
# the axes whose arms a report compares within each value (a sweep's LRs are chosen among instead)
GROUPS = (BUDGET.column, LENGTH.column)
