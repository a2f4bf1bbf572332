"""Uncertainty over seeds: 95% t-intervals, paired differences between schedules, exact paired
permutation (sign-flip) p-values and Holm's correction across the comparisons of one report.

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
    """(mean, half-width of the two-sided t-interval, n); the half-width is NaN below 2 values
    and where every value is the same (``no_interval`` says why)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return float("nan"), float("nan"), 0
    if n == 1 or np.ptp(x) == 0:   # one value, or identical ones (copies): no spread to bound
        return float(x.mean()), float("nan"), n
    half = stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean()), float(half), n


def no_interval(n: int) -> str:
    """Why ``t_interval`` of ``n`` values gave no interval."""
    return "one seed" if n < 2 else f"{n} seeds, every one the same value: no spread to bound"


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


def sign_flip_p(diffs) -> float:
    """The exact two-sided paired permutation p of ``mean(diffs) = 0``: under the null each
    paired difference is as likely negated, so every one of the 2^n sign assignments is drawn
    (scipy's permutation test with one sample flips signs). The smallest p that n pairs can
    give is 2 / 2^n (0.125 at 4 seeds, 0.0078 at 8). The 2^n assignments are enumerated
    (``tests/report/test_stats.py`` holds it to scipy's ``permutation_test`` where no tie is near)."""
    x = np.asarray(diffs, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return float("nan")
    if len(x) < 2 or not x.any():
        return 1.0  # one pair: both signs give the same |mean|
    n, obs = len(x), abs(x.mean())
    # an assignment as extreme as the observed one counts, ties included: a relative tolerance
    # makes a tie a tie whatever the summation order (scipy's permutation_test decides ties
    # differently across versions, so the same rows gave different p)
    tol = 1e-9 * max(obs, float(np.abs(x).max()))
    if n > 20:  # 2^n assignments too many: a seeded sample of them
        signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(100_000, n))
        return float(np.mean(np.abs((signs * x).mean(1)) >= obs - tol))
    hits = 0
    for start in range(0, 2 ** n, 1 << 16):   # every assignment, in chunks of 65,536
        idx = np.arange(start, min(2 ** n, start + (1 << 16)))
        signs = 1.0 - 2.0 * ((idx[:, None] >> np.arange(n)) & 1)
        hits += int((np.abs(signs @ x) / n >= obs - tol).sum())
    return hits / 2 ** n


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error across the given comparisons):
    the k-th smallest p times (m - k + 1), kept monotone, at most 1; NaN stays NaN."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()
