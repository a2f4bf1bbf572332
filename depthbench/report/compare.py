"""Paired comparisons between arms: per-seed differences, intervals, Holm-corrected sign-flip
p-values, the verdict, and the words that say only what the rows say."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from depthbench.axes import AXES, LENGTH
from depthbench.report.figures import reference_of
from depthbench.report.load import depth_spans, group_col
from depthbench.stats import holm, no_interval, paired_differences, sign_flip_p, t_interval

# Where a comparison's 95% interval lies inside +-this on depth-averaged exact match, the two
# schedules are called equivalent within it (decided before any run: 5 points of exact match).
EQUIVALENCE_MARGIN = 0.05


def _by_group(re: pd.DataFrame) -> list[tuple[str | None, float | None, pd.DataFrame]]:
    """The rows of each value of the grid's axis (a budget, a training length) with the axis'
    name, or all of them under (None, None)."""
    axis = group_col(re)
    values = sorted(re[axis].dropna().unique()) if axis else []
    return [(axis, v, re[re[axis] == v]) for v in values] or [(None, None, re)]


def _insert_group(t: pd.DataFrame, c: pd.DataFrame) -> pd.DataFrame:
    """The comparison table ``t`` with the axis value of each row ``c`` first, where it has one."""
    if c["group"].notna().any():
        t.insert(0, c["axis"].iloc[0], [AXES[a].short(v) for a, v in zip(c["axis"], c["group"])])
    return t


def _at(r) -> str:
    """"At 15% of the budget, " for a comparison row of a grid with an axis, else ""."""
    return f"At {AXES[r['axis']].words(r['group'])}, " if pd.notna(r["group"]) else ""


def comparisons_of(re: pd.DataFrame, reference: str | None,
                 value: str = "exact_match") -> pd.DataFrame:
    """The comparisons a report states, decided in advance: every schedule against the
    reference (within each budget, where there are budgets), on exact match averaged over all
    serving depths (the primary summary) and over depths 1-3 (described beside it). Each gets
    its paired t-interval and exact sign-flip p over seeds; the primary p-values are
    Holm-corrected across the report's comparisons."""
    rows = []
    for axis, b, g in _by_group(re):
        ref = reference_of(g["schedule"], reference)
        if ref is None:
            continue
        for lo, hi, part in ((1, int(g["depth"].max()), "primary"), (1, 3, "depths 1-3")):
            part_rows = g[(g["depth"] >= lo) & (g["depth"] <= hi)]
            per = part_rows.groupby(["schedule", "seed"])[value].mean()
            for s in sorted(set(g["schedule"]) - {ref}):
                if s not in per.index.get_level_values(0):
                    continue
                both = per[s].index.intersection(per[ref].index)
                d = (per[s].loc[both] - per[ref].loc[both]).to_numpy()
                m, h, n = t_interval(d)
                rows.append({"axis": axis, "group": b, "schedule": s, "reference": ref,
                             "summary": part,
                             "depths": f"{lo}-{hi}", "seeds": n, "diff": m, "lo": m - h,
                             "hi": m + h, "p": sign_flip_p(d), "higher": int((d > 0).sum())})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    primary = out["summary"] == "primary"
    out["p_holm"] = np.nan
    out.loc[primary, "p_holm"] = holm(out.loc[primary, "p"])
    out["family"] = int(primary.sum())   # Holm's family: every primary comparison of the report
    return out


def verdict_of(r) -> str:
    """What a comparison's numbers allow one to say, and no more."""
    if r["summary"] != "primary":
        return "described, not tested"
    if r["seeds"] == 0:
        return "not compared (the two share no seed, so nothing is paired)"
    if not np.isfinite(r["hi"]):
        return f"undecided ({no_interval(r['seeds'])})"
    if r["p_holm"] < 0.05 and (r["lo"] > 0 or r["hi"] < 0):
        return "higher" if r["diff"] > 0 else "lower"
    if -EQUIVALENCE_MARGIN < r["lo"] and r["hi"] < EQUIVALENCE_MARGIN:
        return f"equivalent within ±{EQUIVALENCE_MARGIN:g}"
    floor = 2 / 2 ** r["seeds"]
    if floor >= 0.05:
        return f"undecided ({r['seeds']} seeds: the smallest possible p is {floor:.3g})"
    m = int(r.get("family", 1))   # Holm multiplies the smallest p by the family's size
    if m * floor >= 0.05:
        return (f"undecided ({m} comparisons on {r['seeds']} seeds: the smallest possible "
                f"Holm-corrected p is {m * floor:.3g})")
    return "undecided"


def comparison_table(c: pd.DataFrame) -> pd.DataFrame:
    t = pd.DataFrame({
        "comparison": [f"{s} - {r}" for s, r in zip(c["schedule"], c["reference"])],
        "depths": c["depths"], "seeds": c["seeds"],
        "difference [95% CI]": [f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(hi)
                                else f"{m:+.4f}" for m, lo, hi in zip(c["diff"], c["lo"], c["hi"])],
        "sign-flip p": c["p"].round(4), "Holm p": c["p_holm"].round(4),
        "seeds higher": [f"{h} of {n}" for h, n in zip(c["higher"], c["seeds"])],
        "verdict": [verdict_of(r) for _, r in c.iterrows()]})
    none = (c["seeds"] == 0).to_numpy()     # nothing paired: no number to show
    if none.any():
        t = t.astype({k: object for k in ("difference [95% CI]", "sign-flip p", "Holm p")})
        t.loc[none, ["difference [95% CI]", "sign-flip p", "Holm p"]] = "-"
    return _insert_group(t, c)


def comparison_words(c: pd.DataFrame, value: str = "exact match",
                      more: tuple[str, str] = ("recalls more", "recalls less")) -> list[str]:
    """One sentence per primary comparison."""
    out = []
    for _, r in c[c["summary"] == "primary"].iterrows():
        at = _at(r)
        v = verdict_of(r)
        what = (f"`{r['schedule']}` {more[0] if v == 'higher' else more[1]} than "
                f"`{r['reference']}`" if v in ("higher", "lower") else
                f"`{r['schedule']}` and `{r['reference']}` are {v}" if v.startswith("equiv")
                else f"`{r['schedule']}` against `{r['reference']}` is {v}")
        if r["seeds"] == 0:
            out.append(f"{at}{what}.")
            continue
        ci = f"[{r['lo']:+.3f}, {r['hi']:+.3f}]" if np.isfinite(r["hi"]) else "(no interval)"
        out.append(f"{at}{what}: {value} averaged over depths {r['depths']} differs by "
                   f"{r['diff']:+.3f}, 95% CI {ci}, higher on {r['higher']} of {r['seeds']} "
                   f"seeds, sign-flip p {r['p']:.3g}, Holm-corrected {r['p_holm']:.3g}.")
    return out


def paired_mean_em(re: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Each schedule minus ``ref`` on exact match averaged over the serving depths, per seed."""
    per = re.groupby(["schedule", "seed"], as_index=False)["exact_match"].mean()
    d = paired_differences(per.assign(depth=0), "exact_match", ref)
    return pd.DataFrame({
        "schedule": d["schedule"], "paired seeds": d["pairs"],
        "difference [95% CI]": [f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(h) else f"{m:+.4f}"
                                for m, lo, hi, h in zip(d["diff"], d["lo"], d["hi"], d["ci95"])],
        "CI excludes 0": np.where(d["sign"] != 0, "yes", "no")})


def paired_table(d: pd.DataFrame) -> pd.DataFrame:
    t = d.copy()
    t["difference [95% CI]"] = [f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(h) else f"{m:+.2f}"
                                for m, lo, hi, h in zip(t["diff"], t["lo"], t["hi"], t["ci95"])]
    t["CI excludes 0"] = np.where(t["sign"] != 0, "yes", "no")
    return t.pivot_table(index="depth", columns="schedule", values="difference [95% CI]",
                         aggfunc="first").reset_index()


def per_depth_words(re: pd.DataFrame, r) -> str:
    """Where the per-depth paired interval on bits per person excludes 0 for one comparison
    (description beside its verdict, not a second test)."""
    g = re[re[r["axis"]] == r["group"]] if pd.notna(r["group"]) else re
    d = paired_differences(g[g["schedule"].isin([r["schedule"], r["reference"]])],
                           "bits_per_person", r["reference"])
    if d.empty:
        return ""
    up = sorted(int(x) for x in d.loc[d["sign"] > 0, "depth"])
    down = sorted(int(x) for x in d.loc[d["sign"] < 0, "depth"])
    def at(ds):
        return f"depth{'s' if len(ds) > 1 else ''} {depth_spans(ds)}"
    parts = ([f"above at {at(up)}"] if up else []) + ([f"below at {at(down)}"] if down else [])
    return ("Per depth, the paired interval on bits per person lies "
            + (" and ".join(parts) if parts else "across 0 at every depth") + ".")


# The paper's own claim is on mean serving NLL: a schedule "within 0.5%" of uniform (its Table
# 3). The band and the verdict words are fixed before any run.
NLL_BAND = 0.005
# the paper's 1B model's reading (0.8%): a second band, reported beside the verdict's
NLL_BAND_WIDE = 0.008


def nll_verdict(lo: float, hi: float, n: int, band_: float = NLL_BAND) -> str:
    """The verdict on the relative difference's 95% interval [lo, hi] against ±band_."""
    band = f"±{100 * band_:g}%"
    if n < 2 or not np.isfinite(hi):
        return f"not resolved ({no_interval(n)})"
    if -band_ < lo and hi < band_:
        return f"within {band}"
    if lo > band_ or hi < -band_:
        return f"outside {band} ({'higher' if lo > 0 else 'lower'} NLL)"
    return f"not resolved at this precision (95% interval ±{100 * (hi - lo) / 2:.1f}%)"


def _tost_p(d: np.ndarray, band: float = NLL_BAND) -> float:
    """Two one-sided t-tests of ``|mean(d)| < band``: the larger of the two p-values (small
    when the difference is shown to lie inside the band)."""
    if len(d) < 2 or d.std(ddof=1) == 0:
        return float("nan")
    se = d.std(ddof=1) / np.sqrt(len(d))
    lower = stats.t.sf((d.mean() + band) / se, len(d) - 1)    # H0: mean <= -band
    upper = stats.t.cdf((d.mean() - band) / se, len(d) - 1)   # H0: mean >= +band
    return float(max(lower, upper))


def nll_metric(re: pd.DataFrame) -> str:
    """The column a claim on NLL is decided on: on the person task the asked value's NLL
    (``value_nll``: the fact asked from the name), never the whole record row, whose names, key
    order and later values are most of its nats; on text the validation NLL per token."""
    if "value_nll" in re.columns and re["value_nll"].notna().all():
        return "value_nll"
    return "nll"


def nll_comparisons(re: pd.DataFrame, reference: str | None,
                     metric: str | None = None) -> pd.DataFrame:
    """The paper's metric: each schedule against the reference (within each budget) on mean
    serving NLL (``metric``, by default ``nll_metric``), each run's NLL averaged over every
    serving depth, as a paired relative difference per seed (NLL / the reference's NLL on that
    seed - 1): mean, 95% t-interval, TOST p against ±NLL_BAND, the verdict, and its robustness
    to one seed (the range of the mean and every verdict with each seed left out in turn)."""
    metric = metric or nll_metric(re)
    rows = []
    for axis, b, g in _by_group(re):
        ref = reference_of(g["schedule"], reference)
        if ref is None:
            continue
        per = g.groupby(["schedule", "seed"])[metric].mean()
        for s in sorted(set(g["schedule"]) - {ref}):
            both = per[s].index.intersection(per[ref].index)
            if len(both) == 0:
                continue
            d = (per[s].loc[both] / per[ref].loc[both] - 1).to_numpy()
            m, h, n = t_interval(d)
            verdict = nll_verdict(m - h, m + h, n)
            loo = [t_interval(np.delete(d, i)) for i in range(n)] if n > 2 else []
            loo_verdicts = {nll_verdict(mm - hh, mm + hh, nn).split(" (")[0] for mm, hh, nn in loo}
            rows.append({"axis": axis, "group": b, "schedule": s, "reference": ref, "seeds": n,
                         "metric": metric,
                         "reference_nll": per[ref].loc[both].mean(), "diff": m, "lo": m - h,
                         "hi": m + h, "tost_p": _tost_p(d), "verdict": verdict,
                         "tost_p_wide": _tost_p(d, NLL_BAND_WIDE),
                         "verdict_wide": nll_verdict(m - h, m + h, n, NLL_BAND_WIDE),
                         "loo_lo": min((x[0] for x in loo), default=np.nan),
                         "loo_hi": max((x[0] for x in loo), default=np.nan),
                         "loo_holds": loo_verdicts <= {verdict.split(" (")[0]} if loo else None})
    return pd.DataFrame(rows)


def nll_table(c: pd.DataFrame) -> pd.DataFrame:
    def pct(x):
        return f"{100 * x:+.2f}%"
    t = pd.DataFrame({
        "comparison": [f"{s} - {r}" for s, r in zip(c["schedule"], c["reference"])],
        "seeds": c["seeds"], "reference NLL": c["reference_nll"].round(4),
        "difference [95% CI]": [f"{pct(m)} [{pct(lo)}, {pct(hi)}]" if np.isfinite(hi) else pct(m)
                                for m, lo, hi in zip(c["diff"], c["lo"], c["hi"])],
        f"TOST p (±{100 * NLL_BAND:g}%)": c["tost_p"].round(4),
        "leave-one-seed-out mean": [f"{pct(lo)} to {pct(hi)}" if np.isfinite(hi) else "-"
                                    for lo, hi in zip(c["loo_lo"], c["loo_hi"])],
        "verdict": c["verdict"],
        "verdict without any one seed": ["-" if h is None else "holds" if h else "changes"
                                         for h in c["loo_holds"]],
        f"TOST p (±{100 * NLL_BAND_WIDE:g}%)": c["tost_p_wide"].round(4),
        f"verdict at ±{100 * NLL_BAND_WIDE:g}%": c["verdict_wide"]})
    return _insert_group(t, c)


METRIC_WORDS = {"nll": "(the paper's metric)",
                "value_nll": "of the asked value (the paper's metric on the fact asked)",
                "record_nll": "of the whole record row (described: names, keys and later values)"}


def nll_words(c: pd.DataFrame) -> list[str]:
    out = []
    for _, r in c.iterrows():
        at = _at(r)
        ci = (f", 95% CI [{100 * r['lo']:+.2f}%, {100 * r['hi']:+.2f}%]" if np.isfinite(r["hi"])
              else "")
        robust = ("" if r["loo_holds"] is None else "; the verdict holds without any one seed"
                  if r["loo_holds"] else "; the verdict changes when one seed is left out")
        what = (f"`{r['schedule']}` against `{r['reference']}` on mean serving NLL "
                f"{METRIC_WORDS[r['metric']]}: {100 * r['diff']:+.2f}%{ci}, {r['seeds']} seeds: "
                f"{r['verdict']}{robust}.")
        out.append(at + what if at else what[0].upper() + what[1:])
    return out


# A schedule is on a plateau between two training lengths where the paired 95% interval of
# its relative change in mean serving NLL lies inside ±this (fixed before the 2x and 4x runs).
PLATEAU_BAND = 0.01


def _plateau_verdict(lo: float, hi: float, n: int) -> str:
    band = f"±{100 * PLATEAU_BAND:g}%"
    if n < 2 or not np.isfinite(hi):
        return f"not resolved ({no_interval(n)})"
    if -PLATEAU_BAND < lo and hi < PLATEAU_BAND:
        return f"on a plateau (the change lies within {band})"
    if hi < -PLATEAU_BAND:
        return "still improving"
    if lo > PLATEAU_BAND:
        return "worse with more training"
    return f"not resolved at this precision (95% interval ±{100 * (hi - lo) / 2:.1f}%)"


def plateaus_of(re: pd.DataFrame) -> pd.DataFrame:
    """Figure 2 left's curve read per schedule: between each pair of consecutive training
    lengths, the paired relative change of each seed's mean serving NLL (``nll_metric``: on the
    person task the asked value's) (NLL at the longer
    length / NLL at the shorter - 1), its 95% t-interval and the plateau verdict. Empty unless
    the rows hold the training-length axis at two lengths or more."""
    if group_col(re) != LENGTH.column:
        return pd.DataFrame()
    per = re.groupby(["schedule", LENGTH.column, "seed"])[nll_metric(re)].mean()
    lengths = sorted(re[LENGTH.column].dropna().unique())
    rows = []
    for s in sorted(re["schedule"].unique()):
        for a, b in zip(lengths, lengths[1:]):
            if (s, a) not in per.index or (s, b) not in per.index:
                continue
            x, y = per.loc[(s, a)], per.loc[(s, b)]
            both = x.index.intersection(y.index)
            if len(both) == 0:
                continue
            d = (y.loc[both] / x.loc[both] - 1).to_numpy()
            m, h, n = t_interval(d)
            rows.append({"schedule": s, "from": a, "to": b, "seeds": n,
                         "nll_from": x.loc[both].mean(), "nll_to": y.loc[both].mean(),
                         "diff": m, "lo": m - h, "hi": m + h,
                         "verdict": _plateau_verdict(m - h, m + h, n)})
    return pd.DataFrame(rows)


def plateau_table(p: pd.DataFrame) -> pd.DataFrame:
    def pct(x):
        return f"{100 * x:+.2f}%"
    return pd.DataFrame({
        "schedule": p["schedule"],
        "lengths": [f"{LENGTH.short(a)} to {LENGTH.short(b)}"
                    for a, b in zip(p["from"], p["to"])],
        "seeds": p["seeds"], "mean serving NLL": [f"{a:.4f} to {b:.4f}"
                                                  for a, b in zip(p["nll_from"], p["nll_to"])],
        "change [95% CI]": [f"{pct(m)} [{pct(lo)}, {pct(hi)}]" if np.isfinite(hi) else pct(m)
                            for m, lo, hi in zip(p["diff"], p["lo"], p["hi"])],
        "verdict": p["verdict"]})


def plateau_words(p: pd.DataFrame) -> list[str]:
    return [f"`{r['schedule']}` from {LENGTH.words(r['from'])} to "
            f"{LENGTH.short(r['to'])}: mean serving NLL {r['nll_from']:.3f} to "
            f"{r['nll_to']:.3f}, {100 * r['diff']:+.2f}%"
            + (f" [{100 * r['lo']:+.2f}%, {100 * r['hi']:+.2f}%]" if np.isfinite(r["hi"]) else "")
            + f", {r['seeds']} seeds: {r['verdict']}." for _, r in p.iterrows()]
