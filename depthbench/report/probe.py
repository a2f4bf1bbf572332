"""The update-benefit probe's part of a report (the paper's Figure 4): does one update at the
full depth teach a fixed-first checkpoint more than one at its fixed depth, at the switch and
after N updates of the finishing phase? Each seed's run is one observation: a point's interval
is over seeds (a run's own interval over batches is not the uncertainty of the mean)."""

from __future__ import annotations

import pandas as pd

from depthbench.report.figures import PALETTE
from depthbench.stats import mean_ci


def probe_metric(pr: pd.DataFrame) -> tuple[str, str]:
    """(column, words) the benefit is read on: the asked value's NLL on the person task (the
    quantity its NLL verdicts are on); the whole NLL on text and rows from before it was read."""
    if "value_nll_diff" in pr.columns and pr["value_nll_diff"].notna().all():
        return "value_nll_diff", "NLL of the asked value"
    return "nll_diff", "NLL"


def _point(pr: pd.DataFrame) -> str:
    """The probe point's column: updates after the switch where every row knows it."""
    return "updates_after_switch" if "updates_after_switch" in pr.columns and \
        pr["updates_after_switch"].notna().all() else "step"


def per_seed(pr: pd.DataFrame, col: str) -> pd.DataFrame:
    """One value per (schedule, probe point, seed): the benefit averaged over serving depths."""
    pr = pr.assign(seed=pr["seed"].fillna(0)) if "seed" in pr.columns else pr.assign(seed=0)
    pr = pr.assign(schedule=pr["schedule"].fillna("")) if "schedule" in pr.columns \
        else pr.assign(schedule="")
    return pr.groupby(["schedule", _point(pr), "seed"], as_index=False)[col].mean()


def probe_section(figs, pr: pd.DataFrame) -> tuple[tuple[str, pd.DataFrame], list[str]]:
    """The figure, a table per arm and probe point (mean over seeds with its 95% interval, the
    seeds on which the full-depth update helped more; the whole row's reading beside the asked
    value's) and one descriptive sentence per arm."""
    _fig_probe(figs, pr)
    col, what = probe_metric(pr)
    key, a, b = _point(pr), int(pr["depth_a"].iloc[0]), int(pr["depth_b"].iloc[0])
    seeds = per_seed(pr, col)
    ci = mean_ci(seeds, ["schedule", key], col)
    pos = seeds.assign(pos=seeds[col] > 0).groupby(["schedule", key])["pos"].sum()
    table = pd.DataFrame({
        "arm": ci["schedule"], key.replace("_", " "): ci[key].astype(int),
        "seeds": ci["n"].astype(int),
        f"benefit on the {what} (mean over depths)": [f"{m:+.4f}" for m in ci["mean"]],
        "95% CI over seeds": [f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in zip(ci["lo"], ci["hi"])],
        f"seeds where depth {b} helped more": [f"{int(pos[(s, k)])} of {int(n)}" for s, k, n
                                                in zip(ci["schedule"], ci[key], ci["n"])]})
    if col != "nll_diff":
        whole = mean_ci(per_seed(pr, "nll_diff"), ["schedule", key], "nll_diff")
        table["benefit on the whole row's NLL"] = [f"{m:+.4f} ± {h:.4f}" for m, h
                                                   in zip(whole["mean"], whole["ci95"])]
    notes = []
    for arm, g in ci.groupby("schedule"):
        at = "{} updates after the switch" if key == "updates_after_switch" else "step {}"
        pts = "; ".join(f"{r.mean:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}] at "
                        + at.format(int(getattr(r, key))) for r in g.itertuples())
        notes.append(f"Update-benefit probe (described, not a verdict): one update of `{arm}` at "
                     f"depth {b} instead of {a} lowers the {what}, averaged over serving depths, "
                     f"by {pts} (negative: the depth-{a} update lowered it more; mean and 95% "
                     f"interval over {int(g['n'].max())} seeds).")
    title = (f"Update-benefit probe: one update at depth {b} minus one at depth {a} from the same "
             f"checkpoint and batch, read on the {what} averaged over serving depths, at each "
             f"probe point of each fixed-first arm (mean and 95% interval over seeds)")
    return (title, table), notes


def _fig_probe(figs, pr: pd.DataFrame) -> None:
    """The paper's Figure 4: left, the benefit of a depth-b over a depth-a update across serving
    depths at the first two probe points (0 and 16 updates after the switch) of the first arm;
    right, the benefit averaged over serving depths at every probe point, one line per arm."""
    a, b = int(pr["depth_a"].iloc[0]), int(pr["depth_b"].iloc[0])
    col, what = probe_metric(pr)
    key = _point(pr)
    pr = pr.assign(seed=pr["seed"].fillna(0)) if "seed" in pr.columns else pr.assign(seed=0)
    fig, (left, right) = figs.plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    fig.suptitle(f"Update-benefit probe: one update at depth {b} vs depth {a}", fontsize=11)
    points = sorted(pr[key].unique())
    first = pr[pr["schedule"] == pr["schedule"].dropna().iloc[0]] \
        if "schedule" in pr.columns and pr["schedule"].notna().any() else pr
    for i, k in enumerate(points[:2]):
        g = first[first[key] == k].groupby(["seed", "depth"], as_index=False)[col].mean()
        ci = mean_ci(g, ["depth"], col)
        left.errorbar(ci["depth"], ci["mean"], yerr=ci["ci95"].fillna(0), fmt="-o", ms=3,
                      color=PALETTE[i], capsize=2, label=f"{key.replace('_', ' ')} = {k:g}")
    left.set_xlabel("serving depth K")
    left.set_ylabel(f"{what}: update at {a} minus at {b}")
    avg = mean_ci(per_seed(pr, col), ["schedule", key], col)
    for i, (arm, g) in enumerate(avg.groupby("schedule")):
        right.errorbar(g[key], g["mean"], yerr=g["ci95"].fillna(0), fmt="-o", capsize=3,
                       color="k" if avg["schedule"].nunique() == 1 else PALETTE[i],
                       label=arm or None)
    right.set_xscale("symlog", linthresh=16)
    right.set_xticks(points, [f"{p:g}" for p in points])
    right.set_xlabel(key.replace("_", " "))
    right.set_ylabel("benefit averaged over serving depths")
    for ax in (left, right):
        ax.axhline(0, color="k", lw=1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    figs.save(fig, "update_probe.png", f"One optimizer update at depth {b} vs one at depth {a} "
              f"from the same checkpoint and batch, read on the {what} (positive: the depth-"
              f"{b} update lowered it more). Left: per serving depth at the first two probe "
              "points; right: averaged over serving depths at every probe point. Mean and 95% "
              "CI over seeds (each seed's run is one observation).")
