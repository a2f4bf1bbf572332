"""The seed spread of a grid, judged by the calibration's criteria (docs/calibration.md).

Per arm on the name-only reading (``eval_reordered``, final checkpoints), with every seed the rows
hold:

- every seed's exact match averaged over serving depths is at least 80% of the arm's median seed;
- the seed SD of bits per person is at most 5% of the ceiling at every judged depth (``fixed:K``:
  depth K; every other schedule: depths 4-16);
- the lowest seed-mean bits over the judged depths lies at least 10% of the ceiling above every
  lower oracle the rows carry: the person-agnostic floor, the name-blind record completer and
  the structural shortcut;
- no seed-mean reading, at any depth, exceeds 90% of the ceiling, on the held-out split or on the
  seen-order control (a criterion that rewards stability alone rewards saturation).

Here they are read from a report's rows, so every committed grid states whether it passes them;
``report.calibration`` reads the calibration recipes' rows against them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from depthbench.axes import AXES, GROUPS
from depthbench.report.load import Sections, group_col

WORST_OF_MEDIAN = 0.8    # the worst seed's depth-averaged exact match over the median seed's
MAX_SD = 0.05            # seed SD of bits per person at a judged depth, share of the ceiling
ABOVE_BRACKETS = 0.10    # lowest judged seed-mean above the lower oracles, share of ceiling
# the readings of no knowledge of people a reading must clear: the floor, the name-blind record
# completer and the structural shortcut (evaluate/reference.py), where the rows carry them
LOWER_ORACLES = ("floor_bits_per_person", "name_blind_bits_per_person",
                 "structure_blind_bits_per_person")
MAX_SHARE = 0.90         # no seed-mean reading above this share of the ceiling


def _oracle_words(fin: pd.DataFrame) -> str:
    words = {"floor_bits_per_person": "floor", "name_blind_bits_per_person": "name-blind completer",
             "structure_blind_bits_per_person": "structural shortcut"}
    return ", ".join(w for c, w in words.items() if c in fin.columns and fin[c].notna().any())


def judged_depths(schedule: str, depths) -> list[int]:
    """Where the criteria look: depth K for ``fixed:K``, else 4-16 (those the rows hold)."""
    if schedule.startswith("fixed:"):
        return [int(schedule.split(":")[1])]
    return [d for d in sorted(set(depths)) if 4 <= d <= 16]


def above_brackets(rows: pd.DataFrame, schedule: str) -> float:
    """How far one arm's lowest judged seed-mean lies above the highest lower oracle its rows
    carry, in bits (NaN without judged depths): the criterion wants ABOVE_BRACKETS of the
    ceiling."""
    judged = rows[rows["depth"].isin(judged_depths(schedule, rows["depth"]))]
    lowest = float(judged.groupby("depth")["bits_per_person"].mean().min()) \
        if not judged.empty else np.nan
    brackets = [rows[c].max() for c in LOWER_ORACLES if c in rows.columns and rows[c].notna().any()]
    return lowest - (float(max(brackets)) if brackets else 0.0)


def _arm(re: pd.DataFrame, seen: pd.DataFrame) -> dict:
    schedule = str(re["schedule"].iloc[0])
    ceiling = float(re["ceiling_bits"].mean())
    em = re.groupby("seed")["exact_match"].mean()
    judged = re[re["depth"].isin(judged_depths(schedule, re["depth"]))]
    by_depth = judged.groupby("depth")["bits_per_person"]
    sd = float(by_depth.std().max()) if em.size > 1 else np.nan
    above = above_brackets(re, schedule)
    best = float(re.groupby("depth")["bits_per_person"].mean().max()) / ceiling
    best_seen = (float(seen.groupby("depth")["bits_per_person"].mean().max())
                 / float(seen["ceiling_bits"].mean()) if not seen.empty else np.nan)
    worst = float(em.min() / em.median()) if em.median() > 0 else 0.0
    failed = []
    if em.size < 2:
        failed.append("one seed")
    if worst < WORST_OF_MEDIAN:
        failed.append("worst seed")
    if not sd <= MAX_SD * ceiling:
        failed.append("seed SD")
    if not above >= ABOVE_BRACKETS * ceiling:
        failed.append("near the brackets")
    if best > MAX_SHARE or (best_seen == best_seen and best_seen > MAX_SHARE):
        failed.append("over 90%")
    return {"seeds": int(em.size), "worst/median EM": round(worst, 2),
            "max seed SD (% ceiling)": round(100 * sd / ceiling, 1),
            "lowest judged bits above brackets (% ceiling)": round(100 * above / ceiling, 1),
            "best, % of ceiling (held-out)": round(100 * best, 1),
            "best, % of ceiling (seen)": round(100 * best_seen, 1),
            "criteria": "pass" if not failed else "fail: " + ", ".join(failed)}


def spread_table(fin: pd.DataFrame) -> pd.DataFrame:
    """One row per arm (and budget or length) of final-checkpoint eval rows: the criteria's
    quantities and which criteria the arm fails; empty without ``eval_reordered`` rows."""
    re = fin[fin["split"] == "eval_reordered"]
    seen_all = fin[fin["split"] == "eval_seen_order"]
    axis = group_col(re)
    keys = ([axis] if axis else []) + ["schedule"]
    rows = []
    for key, g in re.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        sel = np.ones(len(seen_all), bool)
        for k, v in zip(keys, key):
            sel &= (seen_all[k] == v).to_numpy()
        head = {"schedule": key[-1]}
        if axis:
            head = {axis: AXES[axis].short(key[0]), **head}
        rows.append({**head, **_arm(g, seen_all[sel])})
    return pd.DataFrame(rows)


def spread_words(table: pd.DataFrame) -> str:
    """One sentence: every arm passes, or which arms fail which criterion."""
    if table.empty:
        return ""
    bad = table[table["criteria"] != "pass"]
    if bad.empty:
        return f"Seed spread: every arm ({len(table)}) passes the calibration's criteria."
    axis = next((c for c in GROUPS if c in table.columns), None)
    named = [f"`{r['schedule']}`" + (f" at {r[axis]}" if axis else "") + f" ({r['criteria'][6:]})"
             for _, r in bad.iterrows()]
    return (f"Seed spread: {len(table) - len(bad)} of {len(table)} arms pass the calibration's "
            "criteria; " + "; ".join(named) + ".")


def spread_section(fin: pd.DataFrame) -> Sections:
    """The report's seed-spread table and sentence (none where the rows have no arms)."""
    spread = spread_table(fin)
    if spread.empty:
        return Sections([], [], {})
    return Sections([("Seed spread against the calibration's criteria (docs/calibration.md): "
                      "worst seed's depth-averaged exact match over the median's "
                      f"(>= {WORST_OF_MEDIAN:g}), largest seed SD at a judged depth "
                      f"(<= {MAX_SD:.0%}), lowest judged seed-mean above the lower oracles the "
                      f"rows carry ({_oracle_words(fin)}; >= {ABOVE_BRACKETS:.0%}), "
                      f"best seed-mean (<= {MAX_SHARE:.0%})", spread)],
                    [spread_words(spread)], {})
