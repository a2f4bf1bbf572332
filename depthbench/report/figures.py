"""The report's figures, each drawn from rows with its brackets (floor, name-blind oracle,
ceiling, unseen-people control) as lines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from depthbench.axes import AXES, BUDGET
from depthbench.errors import UserError
from depthbench.report.load import group_col
from depthbench.stats import mean_ci

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def arm_colors(schedules) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(set(schedules)))}


class FigureSet:
    def __init__(self, out: Path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        self.plt, self.out, self.items = plt, out, []

    def new(self, title: str, xlabel: str, ylabel: str):
        fig, ax = self.plt.subplots(figsize=(6.4, 4.2), dpi=110)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        return fig, ax

    def save(self, fig, name: str, caption: str):
        fig.tight_layout()
        fig.savefig(self.out / name)
        self.plt.close(fig)
        self.items.append((name, caption))


def reference_of(schedules, reference: str | None) -> str | None:
    """The schedule others are compared with: the one asked for, else the first uniform one."""
    if reference is not None:
        if reference not in set(schedules):
            raise UserError(f"reference schedule {reference!r} has no eval rows; choose one of "
                            f"{', '.join(sorted(map(str, set(schedules))))}")
        return reference
    uni = sorted(s for s in set(schedules) if str(s).startswith("uniform"))
    return uni[0] if uni else None


def ci_lines(ax, df: pd.DataFrame, value: str, color: dict, label_n: bool = True) -> None:
    """Mean over seeds per schedule and depth, with its 95% t-interval as a band."""
    for s, g in df.groupby("schedule"):
        c = mean_ci(g, ["depth"], value)
        label = f"{s} (n={g['seed'].nunique()})" if label_n else s
        ax.plot(c["depth"], c["mean"], "-o", ms=3, color=color[s], label=label)
        ax.fill_between(c["depth"], c["lo"], c["hi"], color=color[s], alpha=0.18, lw=0)


def floor_of(re: pd.DataFrame, col: str) -> float | None:
    """The split's person-agnostic reading, when the rows carry it (older rows do not)."""
    if col not in re.columns or re[col].isna().all():
        return None
    return float(re[col].dropna().iloc[0])


def _floor_line(ax, re: pd.DataFrame, col: str) -> None:
    """The lower oracles of the split as lines: the person-agnostic floor (dotted) and the
    name-blind record completer (dash-dot) and the structural shortcut (red dots), where the
    rows carry them."""
    f = floor_of(re, col)
    if f is not None:
        ax.axhline(f, ls=":", color="k", lw=1.2, label=f"floor (person-agnostic, {f:.2g})")
    b = floor_of(re, col.replace("floor_", "name_blind_"))
    if b is not None:
        ax.axhline(b, ls="-.", color="0.4", lw=1.0, label=f"name-blind record completer ({b:.2g})")
    c = floor_of(re, col.replace("floor_", "structure_blind_"))
    if c is not None:
        ax.axhline(c, ls=(0, (1, 3)), color="tab:red", lw=1.2,
                   label=f"structural shortcut, name-blind ({c:.2g})")


def _shortcut_words(re: pd.DataFrame) -> str:
    """The caption's words for the structural shortcut's line, where the rows carry it."""
    if floor_of(re, "structure_blind_bits_per_person") is None:
        return ""
    return ("red dots: the structural shortcut (no name, but which attributes open each "
            "record's training orders); ")


def _control_line(ax, ctrl: pd.DataFrame | None, col: str) -> None:
    """The unseen-people control beside a reading: mean over every run at each depth."""
    if ctrl is not None and not ctrl.empty:
        c = ctrl.groupby("depth")[col].mean()
        ax.plot(c.index, c.values, ls="--", color="0.55", lw=1.0, label="unseen people (control)")


def fig_bits(figs, re: pd.DataFrame, color: dict, ctrl: pd.DataFrame | None = None) -> None:
    fig, ax = figs.new("Recalled bits per person vs serving depth (name only, held-out order)",
                       "serving depth K", "bits per person")
    ci_lines(ax, re, "bits_per_person", color)
    ax.axhline(float(re["ceiling_bits"].iloc[0]), ls="--", color="k", lw=1, label="task ceiling")
    _floor_line(ax, re, "floor_bits_per_person")
    _control_line(ax, ctrl, "bits_per_person")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    figs.save(fig, "bits_vs_depth.png", "Recalled bits per person at every serving depth, each "
              "fact asked from the name alone in a position never trained for that person "
              "(eval_reordered, final checkpoints). Lines: mean over seeds; bands: 95% confidence "
              "intervals over seeds (t-interval); dashed black: the task ceiling; dotted: the "
              "floor (every value's training frequency, no person); dash-dot: the name-blind "
              "record completer (every training record, no name); " + _shortcut_words(re)
              + "dashed grey: the same models on unseen people, the metric's bias.")


def fig_exact(figs, re: pd.DataFrame, color: dict, ctrl: pd.DataFrame | None = None) -> None:
    fig, ax = figs.new("Exact-match recall vs serving depth (name only, held-out order)",
                       "serving depth K", "exact match")
    ci_lines(ax, re, "exact_match", color)
    ax.axhline(1.0, ls="--", color="k", lw=1, label="every fact")
    _floor_line(ax, re, "floor_exact_match")
    _control_line(ax, ctrl, "exact_match")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    figs.save(fig, "exact_match_vs_depth.png", "Exact-match recall (greedy decoding of every "
              "value token) at every serving depth, eval_reordered, final checkpoints; mean over "
              "seeds with 95% confidence intervals (t-interval); dotted and dash-dot: the floor's "
              "and the name-blind completer's greedy answers; " + _shortcut_words(re) +
              "dashed grey: unseen people.")


def bounds_table(fin: pd.DataFrame) -> pd.DataFrame | None:
    """Floor, ceiling and the task's size per split: what every reading lies between."""
    if "floor_bits_per_person" not in fin.columns:
        return None
    out = []
    for split, g in fin.groupby("split"):
        row = {"split": split, "floor bits/person": round(float(g["floor_bits_per_person"].iloc[0]), 2),
               "floor exact match": round(float(g["floor_exact_match"].iloc[0]), 4)}
        if "name_blind_bits_per_person" in g.columns and g["name_blind_bits_per_person"].notna().any():
            row["name-blind bits/person"] = round(float(g["name_blind_bits_per_person"].dropna().iloc[0]), 2)
            row["name-blind exact match"] = round(float(g["name_blind_exact_match"].dropna().iloc[0]), 4)
        if "structure_blind_bits_per_person" in g.columns \
                and g["structure_blind_bits_per_person"].notna().any():
            row["structural shortcut bits/person"] = round(
                float(g["structure_blind_bits_per_person"].dropna().iloc[0]), 2)
            row["structural shortcut exact match"] = round(
                float(g["structure_blind_exact_match"].dropna().iloc[0]), 4)
        row["ceiling bits/person"] = round(float(g["ceiling_bits"].iloc[0]), 2)
        if split != "eval_unseen_people" and "params" in g.columns and g["params"].notna().any():
            bits = float(g["ceiling_bits"].iloc[0]) * float(g["people_trained"].iloc[0])
            row["task bits per parameter"] = round(bits / float(g["params"].dropna().iloc[0]), 3)
        out.append(row)
    return pd.DataFrame(out)


def fig_budgets(figs, re: pd.DataFrame, color: dict) -> None:
    """The paper's Figure 1: one panel per matched FLOP budget."""
    budgets = sorted(re[BUDGET.column].dropna().unique())
    fig, axes = figs.plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets), 4.0), dpi=110,
                                  sharey=True, squeeze=False)
    ceiling = float(re["ceiling_bits"].iloc[0])
    for ax, b in zip(axes[0], budgets):
        ci_lines(ax, re[re[BUDGET.column] == b], "bits_per_person", color)
        ax.axhline(ceiling, ls="--", color="k", lw=1, label="task ceiling")
        _floor_line(ax, re, "floor_bits_per_person")
        ax.set_title(f"{100 * b:.0f}% of the FLOP budget", fontsize=11)
        ax.set_xlabel("serving depth K")
        ax.set_ylim(0, ceiling * 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("bits per person")
    axes[0][-1].legend(fontsize=7)
    figs.save(fig, "bits_vs_depth_by_budget.png", "Recalled bits per person vs serving depth at "
              "each matched training budget (modeled FLOPs; each run's steps derived from its "
              "schedule's cost). Mean over seeds with 95% confidence intervals (t-interval); "
              "dashed: the task ceiling; dotted: the person-agnostic floor.")


def fig_paired(figs, pd_bits: pd.DataFrame, pd_nll: pd.DataFrame, ref: str, color: dict) -> None:
    fig, axes = figs.plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, squeeze=False)
    for ax, d, ylabel in ((axes[0][0], pd_bits, "bits/person - reference"),
                          (axes[0][1], pd_nll, "NLL - reference [nats/token]")):
        for s, g in d.groupby("schedule"):
            ax.plot(g["depth"], g["diff"], "-o", ms=3, color=color[s], label=s)
            ax.fill_between(g["depth"], g["lo"], g["hi"], color=color[s], alpha=0.18, lw=0)
        ax.axhline(0, color="k", lw=1)
        ax.set_xlabel("serving depth K")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_title(f"Paired difference to {ref}: bits", fontsize=11)
    axes[0][1].set_title(f"Paired difference to {ref}: NLL", fontsize=11)
    axes[0][0].legend(fontsize=8)
    figs.save(fig, "paired_difference.png", f"Per-seed difference of each schedule to {ref} "
              "(same seed: same initialization and data order), mean over seeds and 95% "
              "confidence interval (t-interval) at every serving depth. An interval that excludes "
              "0 is a difference the seeds agree on.")


def _fixed_fraction(arm: str) -> float | None:
    """The fixed phase of a fixed-first arm (None for any other arm, a matched run included)."""
    from depthbench.schedules import parse_schedule
    try:
        s = parse_schedule(str(arm))
    except UserError:  # a matched arm: schedule~reference
        return None
    return s.fraction if s.kind == "fixed-first" else None


def fig_nll_flops(figs, re: pd.DataFrame, color: dict) -> None:
    """The paper's Figure 2: mean serving NLL (over all serving depths) against modeled training
    FLOPs. One small marker per run and a large one per arm (mean over seeds, SD bars);
    fixed-first arms are circles, filled for the shortest fixed phase in the report and open
    for longer ones (the paper's 67% filled, 80% open); every other arm is a square."""
    axis = group_col(re)   # a lengths grid: one mean per arm and length, joined by a line
    runs = re.groupby(["run", "schedule"] + ([axis] if axis else [])).agg(
        nll=("nll", "mean"), flops=("modeled_train_flops", "first")).reset_index()
    fracs = {s: _fixed_fraction(s) for s in runs["schedule"].unique()}
    shortest = min((f for f in fracs.values() if f is not None), default=None)
    fig, ax = figs.new("Mean serving NLL vs modeled training FLOPs",
                       "modeled training FLOPs", "mean NLL over serving depths")
    for s, arm in runs.groupby("schedule"):
        f = fracs[s]
        marker = "s" if f is None else "o"
        face = "none" if f is not None and f != shortest else color[s]
        ax.scatter(arm["flops"], arm["nll"], s=10, marker=marker, facecolors=face,
                   edgecolors=color[s], alpha=0.45, lw=0.8)
        parts = list(arm.groupby(axis)) if axis else [(None, arm)]
        for i, (_, g) in enumerate(parts):
            ax.errorbar(g["flops"].mean(), g["nll"].mean(),
                        xerr=g["flops"].std(ddof=1) if len(g) > 1 else None,
                        yerr=g["nll"].std(ddof=1) if len(g) > 1 else None, fmt=marker, ms=9,
                        mfc=face, mec=color[s], ecolor=color[s], mew=1.6, capsize=3,
                        label=f"{s} (n={g['run'].nunique()})" if i == 0 else None)
        if len(parts) > 1:
            means = sorted((g["flops"].mean(), g["nll"].mean()) for _, g in parts)
            ax.plot(*zip(*means), color=color[s], lw=1)
    ax.set_xscale("log")
    ax.legend(fontsize=8)
    figs.save(fig, "nll_vs_flops.png", "The paper's Figure 2: mean NLL over all serving depths "
              "against modeled training FLOPs; small markers are runs, large ones the mean over "
              "seeds with SD bars (one per training length, joined by a line, in a lengths grid). "
              "Circles are fixed-first arms (filled: the shortest fixed phase in this report; "
              "open: longer ones), squares every other arm.")


def fig_fixed(figs, re: pd.DataFrame, color: dict) -> None:
    """The paper's Figure 5: recall of fixed-depth models normalized by each model's peak."""
    fixed = re[re["schedule"].astype(str).str.startswith("fixed:")]
    if fixed.empty:
        return
    fig, ax = figs.new("Exact-match recall of fixed-depth models, normalized by peak",
                       "serving depth K", "recall / peak recall")
    order = sorted(fixed["schedule"].unique(), key=lambda s: int(str(s).split(":")[1]))
    for s in order:
        m = fixed[fixed["schedule"] == s].groupby("depth")["exact_match"].mean()
        ax.plot(m.index, (m / max(m.max(), 1e-12)).values, "-o", ms=3, color=color[s],
                label=f"{s} (peak at {int(m.idxmax())})")
        ax.axvline(int(str(s).split(":")[1]), color=color[s], ls=":", lw=1)
    ax.legend(fontsize=8)
    figs.save(fig, "fixed_depth_recall.png", "Exact-match recall across serving depths for models "
              "trained at one fixed depth, mean over seeds, normalized by each model's peak "
              "(dotted: the training depth).")


def fig_curves(figs, cur: pd.DataFrame, color: dict) -> None:
    fig, ax = figs.new("Training loss", "step", "loss (nats/token)")
    for (s, run), g in cur.groupby(["schedule", "run"]):
        g = g.sort_values("step")
        smooth = g["loss"].rolling(max(1, len(g) // 40), min_periods=1).mean()
        ax.plot(g["step"], smooth, color=color.get(s, "k"), lw=1, alpha=0.8,
                label=s if run == cur[cur["schedule"] == s]["run"].iloc[0] else None)
        sw = g["switch_step"].dropna()
        if len(sw):
            ax.axvline(float(sw.iloc[0]), color=color.get(s, "k"), ls=":", lw=1)
    ax.legend(fontsize=8)
    figs.save(fig, "training_loss.png", "Training loss (smoothed) per run; dotted lines mark the "
              "switch from the fixed phase to the finishing phase. Before the switch a "
              "fixed-first run is the fixed-depth run of the same seed (same init, data order "
              "and depth), so their curves coincide there.")


def fig_by_group(figs, em: pd.DataFrame, nll: pd.DataFrame, color: dict, band: float) -> None:
    """Each comparison against the grid's axis (the paper's Figure 2 left, as differences): the
    primary exact-match difference and the mean-serving-NLL relative difference to the
    reference at each budget or training length, with paired 95% intervals."""
    if em.empty or "group" not in em.columns or em["group"].isna().all():
        return
    axis = em["axis"].iloc[0]
    em = em[em["summary"] == "primary"]
    fig, axes = figs.plt.subplots(1, 2, figsize=(10.5, 4.0), dpi=110, squeeze=False)
    panels = ((em, 1.0, "exact match difference (mean over depths)", None),
              (nll, 100.0, "mean serving NLL difference (%)", 100 * band))
    for ax, (c, scale, ylabel, pct) in zip(axes[0], panels):
        for s, g in c.groupby("schedule") if not c.empty else ():
            g = g.sort_values("group")
            x = g["group"] * AXES[axis].scale
            lo, hi = (g["diff"] - g["lo"]) * scale, (g["hi"] - g["diff"]) * scale
            ax.errorbar(x, g["diff"] * scale, yerr=[lo.fillna(0), hi.fillna(0)], marker="o",
                        capsize=3, color=color.get(s, "k"), label=f"{s} - {g['reference'].iloc[0]}")
        ax.axhline(0, color="k", lw=0.8)
        if pct:
            ax.axhspan(-pct, pct, color="0.85", zorder=0, label=f"±{pct:g}% (the paper's band)")
        if AXES[axis].log2:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(AXES[axis].label)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][1].legend(fontsize=7)
    figs.save(fig, f"comparisons_by_{axis}.png", "Each arm minus the reference at every "
              f"{AXES[axis].noun}: left, exact match averaged "
              "over serving depths; right, mean serving NLL as a relative difference (the paper's "
              f"metric; shaded: its ±{100 * band:g}% band). Paired 95% t-intervals over seeds.")
