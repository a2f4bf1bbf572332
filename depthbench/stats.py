"""Uncertainty over seeds: 95% t-intervals and paired differences between schedules.

A seed fixes the initialization and the data order of every schedule, so two schedules trained
on the same seed form a pair; the paired difference removes the seed's own luck, which on the
tiny task is larger than most effects between schedules. Torch-free: the report uses it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats


def t_interval(values, level: float = 0.95) -> tuple[float, float, int]:
    """(mean, half-width of the two-sided t-interval, n); the half-width is NaN below 2 values."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return float("nan"), float("nan"), 0
    if n == 1:
        return float(x[0]), float("nan"), 1
    half = stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean()), float(half), n


def mean_ci(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Per group of ``by``: mean, 95% CI half-width and lower/upper bounds of ``value``."""
    rows = []
    for key, g in df.groupby(by, sort=True):
        m, h, n = t_interval(g[value])
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), "mean": m, "ci95": h, "lo": m - h, "hi": m + h, "n": n})
    return pd.DataFrame(rows)


def paired_differences(df: pd.DataFrame, value: str, reference: str,
                       by: tuple[str, ...] = ("depth",)) -> pd.DataFrame:
    """Per schedule (other than ``reference``) and group ``by``: the per-seed difference
    ``value(schedule) - value(reference)`` on seeds both have, then its mean and 95% t-interval,
    and whether the interval excludes 0 (``sign`` = +1 / -1, 0 when it does not)."""
    by = list(by)
    ref = df[df["schedule"] == reference].set_index(by + ["seed"])[value]
    rows = []
    for s, g in df[df["schedule"] != reference].groupby("schedule", sort=True):
        cur = g.set_index(by + ["seed"])[value]
        both = cur.index.intersection(ref.index)
        diff = (cur.loc[both] - ref.loc[both]).reset_index()
        for key, d in diff.groupby(by, sort=True):
            m, h, n = t_interval(d[value])
            sign = 0 if not np.isfinite(h) or abs(m) <= h else int(np.sign(m))
            key = key if isinstance(key, tuple) else (key,)
            rows.append({"schedule": s, "reference": reference, **dict(zip(by, key)),
                         "diff": m, "ci95": h, "lo": m - h, "hi": m + h, "pairs": n,
                         "sign": sign})
    return pd.DataFrame(rows)


def describe_runs(depths: list[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` -> ``1-3, 5, 7-8``."""
    if not depths:
        return "none"
    depths = sorted(depths)
    parts, start, prev = [], depths[0], depths[0]
    for d in depths[1:] + [None]:
        if d is not None and d == prev + 1:
            prev = d
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if d is not None:
            start = prev = d
    return ", ".join(parts)
