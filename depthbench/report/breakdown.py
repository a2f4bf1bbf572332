"""Where a person-task reading lies: the asked fact per exposure tier (each arm on the people seen
1, 8, 64, ... times as often) and the whole row's NLL by token type (the name, the asked key and
value, the later keys and values), from the eval rows' ``@xE`` and ``row_nll/`` columns
(``evaluate/metrics.py``). Rows written before those columns existed draw neither."""

from __future__ import annotations

import re as regex

import numpy as np
import pandas as pd

from depthbench.report.load import fmt_value
from depthbench.rows import TOKEN_TYPES
from depthbench.stats import t_interval

_TIER = regex.compile(r"^exact_match@x(\d+)$")
READINGS = (("exact_match", "exact match"), ("value_nll", "asked-value NLL"),
            ("bits_per_person", "bits per person"))


def tiers(re: pd.DataFrame) -> list[int]:
    """The exposures of the tiers the rows read, in order (empty without tier columns)."""
    found = [int(m.group(1)) for c in re.columns if (m := _TIER.match(c))]
    return sorted(e for e in found if re[f"exact_match@x{e}"].notna().any())


def _per_seed(re: pd.DataFrame, col: str) -> pd.Series:
    """Each (schedule, seed)'s reading averaged over serving depths."""
    return re.groupby(["schedule", "seed"])[col].mean()


def tier_table(re: pd.DataFrame, ref: str | None) -> pd.DataFrame:
    """Per arm and tier: each reading averaged over depths (mean ± SD over seeds), and the
    paired difference in exact match to ``ref`` on the same seeds (mean, 95% t-interval)."""
    rows = []
    for e in tiers(re):
        per = {k: _per_seed(re, f"{k}@x{e}") for k, _ in READINGS}
        for s in sorted(re["schedule"].unique()):
            row = {"tier (times seen)": f"x{e}", "schedule": s,
                   "seeds": int(per["exact_match"][s].size)}
            for k, words in READINGS:
                v = per[k][s]
                row[f"{words} (mean ± SD over seeds)"] = fmt_value(v.mean(), v.std(),
                                                                    4 if k == "value_nll" else 3)
            row[f"exact match minus {ref} [95% CI]"] = _paired(per["exact_match"], s, ref)
            rows.append(row)
    return pd.DataFrame(rows)


def _paired(per: pd.Series, s: str, ref: str | None) -> str:
    if ref is None or s == ref:
        return "-"
    both = per[s].index.intersection(per[ref].index)
    m, h, n = t_interval((per[s].loc[both] - per[ref].loc[both]).to_numpy())
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]" if np.isfinite(h) else f"{m:+.3f}"


def token_table(re: pd.DataFrame, ref: str | None) -> pd.DataFrame:
    """Per arm: the row's nats per token type (mean over depths and seeds), each type's share of
    the row, and its part of the arm's row-NLL difference to ``ref``."""
    cols = [f"row_nll/{t}" for t in TOKEN_TYPES]
    arm = re.groupby("schedule")[cols].mean()
    out = []
    for s, v in arm.iterrows():
        total = float(v.sum())
        row = {"schedule": s, "row NLL (nats)": round(total, 3)}
        for t, c in zip(TOKEN_TYPES, cols):
            row[t.replace("_", " ")] = f"{v[c]:.3f} ({100 * v[c] / total:.0f}%)"
        if ref is not None and s != ref and ref in arm.index:
            d = v - arm.loc[ref]
            share = float(d["row_nll/asked_value"] / d.sum()) if d.sum() else np.nan
            row[f"asked value's share of the difference to {ref}"] = \
                f"{100 * share:.0f}%" if np.isfinite(share) else "-"
        elif ref is not None:
            row[f"asked value's share of the difference to {ref}"] = "-"
        out.append(row)
    return pd.DataFrame(out)


def fig_tiers(figs, re: pd.DataFrame, color: dict) -> None:
    """Exact match per tier per arm (mean over depths; 95% t-interval over seeds)."""
    es = tiers(re)
    fig, ax = figs.new("Exact match per exposure tier (name only, held-out order)",
                       "times each person's orders are seen (tier)", "exact match, mean over depths")
    for s in sorted(re["schedule"].unique()):
        m, h = [], []
        for e in es:
            mm, hh, _ = t_interval(_per_seed(re, f"exact_match@x{e}")[s].to_numpy())
            m.append(mm)
            h.append(hh if np.isfinite(hh) else 0.0)
        ax.errorbar(es, m, yerr=h, marker="o", ms=4, capsize=3, lw=1.2, color=color.get(s), label=s)
    ax.set_xscale("log", base=2)
    ax.set_xticks(es, [f"x{e}" for e in es])
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    figs.save(fig, "exact_match_by_tier.png", "Exact-match recall of the asked fact on the people "
              "of each exposure tier (seen 1, 8, 64, ... times as often), averaged over serving "
              "depths, eval_reordered, final checkpoints; mean over seeds with 95% t-intervals.")


def breakdown_section(figs, re: pd.DataFrame, ref: str | None, color: dict) -> list:
    """The titled tables (and the tier figure) of the breakdowns the rows carry."""
    tables = []
    if tiers(re):
        fig_tiers(figs, re, color)
        tables.append(("The asked fact per exposure tier: each arm on the people seen 1, 8, 64, "
                       "... times as often, averaged over serving depths (per seed), and its "
                       "paired difference in exact match to the reference", tier_table(re, ref)))
    if all(f"row_nll/{t}" in re.columns and re[f"row_nll/{t}"].notna().all() for t in TOKEN_TYPES):
        tables.append(("Where the whole row's NLL lies (described, not a verdict): nats per row "
                       "by the token predicted, averaged over depths and seeds, with each "
                       "type's share; only the asked value is the fact the reading asks",
                       token_table(re, ref)))
    return tables
