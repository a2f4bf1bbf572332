"""A text corpus's report: validation NLL, bits per byte and cloze accuracy against serving
depth, the schedules' summary, the comparisons on NLL and the findings."""

from __future__ import annotations

import numpy as np
import pandas as pd

from depthbench.errors import UserError
from depthbench.report.compare import (
    EQUIVALENCE_MARGIN,
    NLL_BAND,
    comparison_table,
    comparison_words,
    comparisons_of,
    nll_comparisons,
    nll_table,
    nll_words,
)
from depthbench.report.figures import (
    ci_lines,
    fig_nll_flops,
    reference_of,
)
from depthbench.report.load import TERMINAL_SHARE, Sections, final_rows, fmt_value
from depthbench.report.sections import terminal_nll_of, with_train_time
from depthbench.stats import mean_ci, paired_differences, t_interval


def text_sections(figs, ev: pd.DataFrame, color: dict, reference: str | None,
                   curves: pd.DataFrame | None = None, items: pd.DataFrame | None = None
                   ) -> Sections:
    """A text corpus's report: validation NLL and bits per byte against serving depth per
    schedule (the paper's Figure 8 style), the schedules' summary, the comparisons decided in
    advance on NLL averaged over serving depths, and the findings table."""
    tables, notes, files = [], [], {}
    va = final_rows(ev)
    va = va[va["split"] == "validation"]
    if va.empty:
        raise UserError("the text eval rows hold no validation split; evaluate the runs with "
                        "`depthbench eval`")
    cloze = "cloze_accuracy" in va.columns and va["cloze_accuracy"].notna().all()
    mi = cloze and "cloze_accuracy_mi" in va.columns and va["cloze_accuracy_mi"].notna().all()
    _text_figures(figs, va, color, cloze, mi)
    ref = reference_of(va["schedule"], reference)
    re, clock = with_train_time(va)
    deepest = int(re["depth"].max())
    per = _per_run(re, curves, cloze, mi)
    ref_flops = per.loc[per["schedule"] == ref, "flops"].mean() if ref else np.nan
    summary = _text_summary(per, ref, ref_flops, deepest, clock, cloze, mi)
    tables.append(("Schedules on the validation split (mean ± SD over seeds, final checkpoints)",
                   summary))
    ci = mean_ci(re, ["depth", "schedule"], "nll")
    ci["cell"] = [f"{m:.3f} ± {h:.3f}" if np.isfinite(h) else f"{m:.3f}"
                  for m, h in zip(ci["mean"], ci["ci95"])]
    tables.append(("Validation NLL by serving depth (mean ± 95% CI half-width over seeds)",
                   ci.pivot_table(index="depth", columns="schedule", values="cell",
                                  aggfunc="first").reset_index()))
    comparisons = comparisons_of(re, reference, "nll")
    if not comparisons.empty:
        notes += comparison_words(comparisons, "validation NLL",
                                   ("has higher NLL", "has lower NLL"))
        tables.append(("Comparisons decided in advance: each schedule minus the reference on "
                       "validation NLL averaged over serving depths (the claim), and over depths "
                       "1-3 (described); paired 95% t-interval and exact sign-flip p over seeds, "
                       f"Holm-corrected; equivalent within ±{EQUIVALENCE_MARGIN:g} nats",
                       comparison_table(comparisons)))
    nll = nll_comparisons(re, reference)
    if not nll.empty:
        notes += nll_words(nll)
        tables.append(("The paper's metric (its Table 3): each schedule against the reference on "
                       "mean serving NLL as a paired relative difference per seed; 95% "
                       f"t-interval, TOST against ±{100 * NLL_BAND:g}%, the verdict (within "
                       "only where the interval lies inside the band, outside only where it "
                       "excludes it, else not resolved, with the precision reached) and whether "
                       "it holds with each seed left out", nll_table(nll)))
    if ref is not None and re["schedule"].nunique() > 1:
        _fig_nll_minus_ref(figs, paired_differences(re, "nll", ref), ref, color)
        fig_nll_flops(figs, re, color)
    if cloze:
        notes += _cloze_floor_words(va, per, items is not None)
    files["findings.md"] = _text_findings(re, per, deepest, mi)
    return Sections(tables, notes, files)


def _per_run(re: pd.DataFrame, curves: pd.DataFrame | None, cloze: bool, mi: bool
             ) -> pd.DataFrame:
    """One row per run: its mean serving NLL, NLL at the deepest depth, lowest-NLL depth, bits
    per byte, cloze accuracies, modeled FLOPs, training time and terminal training NLL."""
    term = terminal_nll_of(curves)
    per = re.groupby(["run", "schedule"]).apply(lambda g: pd.Series({
        "mean_nll": g["nll"].mean(), "deep_nll": g.loc[g["depth"].idxmax(), "nll"],
        "best_depth": g.loc[g["nll"].idxmin(), "depth"], "bpb": g["bits_per_byte"].mean(),
        "cloze": g["cloze_accuracy"].mean() if cloze else np.nan,
        "cloze_mi": g["cloze_accuracy_mi"].mean() if mi else np.nan,
        "flops": g["modeled_train_flops"].iloc[0], "time": g["train_time"].iloc[0]}),
        include_groups=False).reset_index()
    per["terminal"] = [term.get(r, np.nan) for r in per["run"]]
    return per


RULES = (("cloze_overlap_rule", "word overlap with the context"),
         ("cloze_idf_overlap_rule", "IDF-weighted word overlap"),
         ("cloze_tfidf_rule", "TF-IDF cosine"),
         ("cloze_unigram_rule", "token frequency"), ("cloze_word_unigram_rule", "word frequency"),
         ("cloze_bigram_rule", "word bigrams"))


def _cloze_floor_words(va: pd.DataFrame, per: pd.DataFrame, listed: bool = True) -> list[str]:
    """Where each schedule's cloze lies against the shortcut floors (rules with no model, from
    the dataset alone) and the standard error over the items every seed scores alike."""
    rules = [(c, words) for c, words in RULES if c in va.columns]
    if len(rules) < 2 or "cloze_items" not in va.columns:
        return []
    counts = sorted(va["cloze_items"].dropna().astype(int).unique())
    if len(counts) != 1 or not counts[0]:
        return []   # runs that scored different item sets share no standard error
    n = counts[0]
    se = float(np.sqrt(0.25 * 0.75 / n))
    top = max(0.25, *(va[c].iloc[0] for c, _ in rules))
    floors = ", ".join(f"{words} {va[c].iloc[0]:.3f}" for c, words in rules)
    def against(g, col, name):
        m = g[col].mean()
        return f"{name} {m:.3f} ({(m - top) / se:+.1f} SE from the highest floor)" if m == m else ""
    where = "; ".join(f"`{sch}` " + ", ".join(x for x in (
        against(g, "cloze", "summed loglikelihood"),
        against(g, "cloze_mi", "mutual information")) if x) for sch, g in per.groupby("schedule"))
    return [f"Cloze floors without a model (from the dataset alone): {floors}; chance 0.25. "
            f"Every seed scores the same {n} items"
            f"{' (`rows/item.csv`)' if listed else ' (their rows are not among these)'}, so a "
            "reading's standard "
            f"error is over items: {se:.3f} (binomial at chance), not the spread of seeds. "
            f"Mean over depths and seeds: {where}."] + _ngram_words(va, per, se)


NGRAM_RULES = (("cloze_trigram_rule", "one word-trigram lookup"),
               ("cloze_trigram_pmi_rule", "word-trigram PMI"))


def _ngram_words(va: pd.DataFrame, per: pd.DataFrame, se: float) -> list[str]:
    """The n-gram references the cloze's construction does not balance, and what the cloze
    measures where they read above chance: local n-gram continuation, not the context's sense
    (unless a model reads above the strongest of them)."""
    rules = [(c, words) for c, words in NGRAM_RULES if c in va.columns]
    if not rules:
        return []
    top = max(va[c].iloc[0] for c, _ in rules)
    refs = ", ".join(f"{words} {va[c].iloc[0]:.3f}" for c, words in rules)
    if top - 0.25 <= 2 * se:
        return [f"N-gram references (rules the construction does not balance): {refs}; each "
                "within 2 SE of chance, so the cloze is not read by local n-gram continuation."]
    best = per.groupby("schedule")["cloze_mi"].mean().max() if "cloze_mi" in per else np.nan
    if best == best and best - top > 2 * se:
        verdict = ("a model reads above the strongest reference, so that excess is read from "
                   "the context beyond its last two words")
    else:
        verdict = ("no model reads above the strongest reference, so the cloze reads n-gram "
                   "continuation, not knowledge of the context")
    return [f"N-gram references (rules the construction does not balance): {refs}, "
            f"{(top - 0.25) / se:.1f} SE above chance. This cloze measures local n-gram "
            f"continuation: best model (mutual information, mean over depths and seeds) "
            f"{best:.3f}, {(best - top) / se:+.1f} SE from the strongest reference; {verdict}."]


def _text_figures(figs, va: pd.DataFrame, color: dict, cloze: bool, mi: bool) -> None:
    """NLL, bits per byte and (where read) cloze accuracy against serving depth."""
    for value, label, name in (("nll", "validation NLL (nats/token)", "nll_vs_depth.png"),
                               ("bits_per_byte", "bits per byte", "bpb_vs_depth.png"),
                               *((("cloze_accuracy", "cloze accuracy (4 choices)",
                                   "cloze_vs_depth.png"),) if cloze else ()),
                               *((("cloze_accuracy_mi", "cloze accuracy, mutual information "
                                   "(4 choices)", "cloze_mi_vs_depth.png"),) if mi else ())):
        fig, ax = figs.new(f"{label} vs serving depth", "serving depth K", label)
        ci_lines(ax, va, value, color)
        ax.legend(fontsize=8)
        figs.save(fig, name, f"{label} on the validation split at every serving depth, final "
                  "checkpoints; lines: mean over seeds, bands: 95% t-interval over seeds.")


def _fig_nll_minus_ref(figs, d: pd.DataFrame, ref: str, color: dict) -> None:
    """The paper's Figure 2 (right): each schedule's validation NLL minus the reference's at
    every serving depth, paired per seed, with its 95% interval."""
    if d.empty:
        return
    fig, ax = figs.new(f"Validation NLL minus {ref} by serving depth", "serving depth K",
                       "NLL - reference [nats/token]")
    for sch, g in d.groupby("schedule"):
        ax.plot(g["depth"], g["diff"], "-o", ms=3, color=color[sch], label=sch)
        ax.fill_between(g["depth"], g["lo"], g["hi"], color=color[sch], alpha=0.18, lw=0)
    ax.axhline(0, color="k", lw=1)
    ax.legend(fontsize=8)
    figs.save(fig, "nll_minus_reference.png", f"Per-seed validation NLL of each schedule minus "
              f"{ref}'s (same seed: same initialization and data order), mean and 95% "
              "t-interval over seeds at every serving depth.")


def _text_summary(per: pd.DataFrame, ref, ref_flops: float, deepest: int, clock: str,
                  cloze: bool, mi: bool) -> pd.DataFrame:
    """One row per schedule: NLL, bits per byte, cloze, FLOPs and time over its seeds."""
    return pd.DataFrame([{
        "schedule": sch, "seeds": len(g),
        f"terminal training NLL (final {100 * TERMINAL_SHARE:.0f}% of updates)":
            fmt_value(g["terminal"].mean(), g["terminal"].std()),
        "mean serving NLL": fmt_value(g["mean_nll"].mean(), g["mean_nll"].std()),
        f"NLL at depth {deepest}": fmt_value(g["deep_nll"].mean(), g["deep_nll"].std()),
        "bits per byte, mean over depths": fmt_value(g["bpb"].mean(), g["bpb"].std()),
        "depth of lowest NLL (per seed)": ", ".join(str(int(d)) for d in g["best_depth"]),
        **({"cloze accuracy, mean over depths (chance 0.25)": fmt_value(g["cloze"].mean(),
                                                                   g["cloze"].std())}
           if cloze else {}),
        **({"cloze accuracy by mutual information, mean over depths (chance 0.25)":
            fmt_value(g["cloze_mi"].mean(), g["cloze_mi"].std())} if mi else {}),
        f"modeled FLOPs (% of {ref or 'reference'})": fmt_value(100 * g["flops"].mean() / ref_flops,
                                                           100 * g["flops"].std() / ref_flops, 1),
        f"train {clock} s/run": f"{g['time'].mean():.0f}"} for sch, g in per.groupby("schedule")])


def _text_findings(re: pd.DataFrame, per: pd.DataFrame, deepest: int, mi: bool) -> str:
    """The README's text findings table: validation NLL (bits per byte) at depths 1, 4 and
    the deepest, with 95% t-intervals over seeds, and the cloze accuracies over depths."""
    depths = [d for d in (1, 4, deepest) if d in set(re["depth"])]
    head = (["schedule", "seeds"] + [f"depth {d}: NLL (bits/byte)" for d in depths]
            + (["cloze accuracy over depths 1-16: summed LL (mutual information); chance 0.25"]
               if mi else []))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sch, g in re.groupby("schedule"):
        cells = [f"`{sch}`", str(g["seed"].nunique())]
        for d in depths:
            m, h, _ = t_interval(g.loc[g["depth"] == d, "nll"])
            cells.append(f"{m:.3f}{f' ± {h:.3f}' if np.isfinite(h) else ''} "
                         f"({g.loc[g['depth'] == d, 'bits_per_byte'].mean():.3f})")
        if mi:
            a = per.loc[per["schedule"] == sch]
            m, h, _ = t_interval(a["cloze"])
            m2, h2, _ = t_interval(a["cloze_mi"])
            cells.append(f"{m:.3f} ± {h:.3f} ({m2:.3f} ± {h2:.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
