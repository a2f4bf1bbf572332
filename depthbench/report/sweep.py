"""A learning-rate sweep's report (``train.lrs``): each arm's mean serving NLL at each peak LR on
its seeds, the LR it is run at (the lowest mean serving NLL on the metric the grid's NLL verdicts
are decided on, ``compare.nll_metric``: the asked value's NLL on the person task, the
validation NLL per token on text), a figure of NLL against LR, and ``lr_sweep.json`` with each
arm's chosen LR, which the spec that uses it names in ``train.arm_set``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from depthbench.axes import LR
from depthbench.report.compare import nll_metric
from depthbench.report.load import final_rows, fmt_value

SWEEP_SPLITS = ("eval_reordered", "validation")  # the split a sweep reads: person task, text


def is_sweep(ev: pd.DataFrame | None) -> bool:
    return ev is not None and LR.column in ev.columns and ev[LR.column].notna().any()


def sweep_runs(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per run of a sweep: its arm (``schedule`` without the LR), LR, seed, mean serving
    NLL (its ``nll_metric`` averaged over every serving depth, final checkpoint) and, on the
    person task, exact match averaged over depths. ``ev`` holds raw or labelled rows."""
    fin = final_rows(ev[ev[LR.column].notna()])
    split = next((s for s in SWEEP_SPLITS if (fin["split"] == s).any()), None)
    if split is None:
        return pd.DataFrame(columns=["arm", "lr", "seed", "nll", "exact_match"])
    fin = fin[fin["split"] == split]
    aggs = {"schedule": ("schedule", "first"), "lr": (LR.column, "first"),
            "seed": ("seed", "first"), "nll": (nll_metric(fin), "mean"),
            "depths": ("depth", "nunique")}
    if "exact_match" in fin.columns:
        aggs["exact_match"] = ("exact_match", "mean")
    per = fin.groupby("run").agg(**aggs).reset_index()
    if "exact_match" not in per.columns:
        per["exact_match"] = np.nan
    per["arm"] = [str(s).rsplit(" @ lr=", 1)[0] for s in per["schedule"]]  # arm (@ budget)
    return per[["arm", "lr", "seed", "nll", "exact_match", "depths"]]


def best_lrs(ev: pd.DataFrame) -> dict[str, float]:
    """Each arm's LR with the lowest mean serving NLL (the verdicts' metric), mean over its seeds
    (seeds every LR of the arm has, so the LRs are compared on the same seeds); none for an arm
    run at one LR so far (a sweep run in parts)."""
    per = sweep_runs(ev)
    out = {}
    for arm, g in per.groupby("arm"):
        seeds = set.intersection(*(set(x["seed"]) for _, x in g.groupby("lr")))
        m = g[g["seed"].isin(seeds)].groupby("lr")["nll"].mean()
        if len(m) > 1:
            out[arm] = float(m.idxmin())
    return out


def _arm_lr_means(ev: pd.DataFrame) -> pd.DataFrame:
    """Per arm and LR: seeds, mean serving NLL and exact match (mean and SD over seeds)."""
    return sweep_runs(ev).groupby(["arm", "lr"]).agg(
        seeds=("seed", "nunique"), nll=("nll", "mean"), nll_sd=("nll", "std"),
        em=("exact_match", "mean"), em_sd=("exact_match", "std")).reset_index()


def metric_words(ev: pd.DataFrame) -> str:
    """What a sweep's "mean serving NLL" is of, in words."""
    fin = final_rows(ev[ev[LR.column].notna()])
    return ("mean serving NLL of the asked value" if nll_metric(fin) == "value_nll"
            else "mean serving NLL")


def sweep_notes(ev: pd.DataFrame) -> list[str]:
    """One sentence per arm: its chosen LR and the NLL at the others, or the one LR it has run
    at so far (report and results page)."""
    g, best, words = _arm_lr_means(ev), best_lrs(ev), metric_words(ev)
    notes = []
    for arm, a in g.groupby("arm", sort=False):
        a = a.sort_values("nll")
        if arm not in best:   # a sweep run in parts, one LR so far: nothing chosen yet
            notes.append(f"Learning-rate sweep: `{arm}` has run at peak LR {a['lr'].iloc[0]:g} "
                         f"only ({words} {a['nll'].iloc[0]:.4f}, mean of "
                         f"{int(a['seeds'].iloc[0])} held-out seeds); no LR is chosen from one.")
            continue
        rest = "; ".join(f"{r.nll:.4f} at {r.lr:g}" for r in a.iloc[1:].itertuples())
        notes.append(f"Learning-rate sweep: `{arm}` has its lowest {words} at peak LR "
                     f"{best[arm]:g} ({a['nll'].iloc[0]:.4f}, mean of {int(a['seeds'].iloc[0])} "
                     f"held-out seeds; {rest}).")
    return notes


def sweep_section(figs, ev: pd.DataFrame, color: dict):
    """The sweep's (tables, sentences, files): its table, figure, ``lr_sweep.json`` and
    ``findings.md``."""
    best = best_lrs(ev)
    g = _arm_lr_means(ev)
    table = pd.DataFrame({
        "arm": g["arm"], "peak LR": [f"{x:g}" for x in g["lr"]], "seeds": g["seeds"],
        f"{metric_words(ev)} (mean ± SD over seeds)": [fmt_value(m, s, 4)
                                                        for m, s in zip(g["nll"], g["nll_sd"])],
        "exact match, mean over depths": [fmt_value(m, s) for m, s in zip(g["em"], g["em_sd"])],
        "chosen": ["yes" if best.get(a) == lr else "" for a, lr in zip(g["arm"], g["lr"])]})
    if g["em"].isna().all():
        table = table.drop(columns=["exact match, mean over depths"])
    words = metric_words(ev)
    _fig_sweep(figs, g, color, best, words)
    title = (f"Learning-rate sweep: each arm's {words} (averaged over every serving depth, final "
             "checkpoints) at each peak LR, on seeds the reported grid does not use; the chosen "
             f"LR is the lowest {words} (the metric the grid's NLL verdicts are decided on)")
    findings = f"{title}.\n\n{table.to_markdown(index=False)}\n"
    files = {"lr_sweep.json": json.dumps({"chosen_lr": best}, indent=2, sort_keys=True) + "\n",
             "findings.md": findings}
    return [(title, table)], sweep_notes(ev), files


def _fig_sweep(figs, g: pd.DataFrame, color: dict, best: dict, words: str) -> None:
    fig, ax = figs.new("Learning-rate sweep", "peak learning rate", f"{words} (nats)")
    palette = list(dict.fromkeys(color.values())) or ["k"]
    for i, (arm, a) in enumerate(g.groupby("arm")):
        a = a.sort_values("lr")
        c = palette[i % len(palette)]
        ax.errorbar(a["lr"], a["nll"], yerr=a["nll_sd"].fillna(0), color=c, marker="o", lw=1,
                    capsize=3, label=arm)
        if arm in best:
            ax.plot([best[arm]], [a.loc[a["lr"] == best[arm], "nll"].iloc[0]], marker="*",
                    color=c, ms=14, ls="none")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    figs.save(fig, "lr_sweep.png", f"{words.capitalize()} against peak learning rate per arm (mean "
              "and SD over the sweep's seeds); a star marks each arm's chosen LR.")
