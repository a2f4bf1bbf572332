"""The report's sections: evaluation, text, tasks, findings, summary tables, stage times and
serving, each returning its Markdown and figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from depthbench.axes import BUDGET, LENGTH
from depthbench.errors import UserError
from depthbench.report.breakdown import breakdown_section
from depthbench.report.compare import (
    EQUIVALENCE_MARGIN,
    NLL_BAND,
    PLATEAU_BAND,
    comparison_table,
    comparison_words,
    comparisons_of,
    nll_comparisons,
    nll_metric,
    nll_table,
    nll_words,
    paired_mean_em,
    paired_table,
    per_depth_words,
    plateau_table,
    plateau_words,
    plateaus_of,
    verdict_of,
)
from depthbench.report.figures import (
    bounds_table,
    ci_lines,
    fig_bits,
    fig_budgets,
    fig_by_group,
    fig_exact,
    fig_fixed,
    fig_nll_flops,
    fig_paired,
    floor_of,
    reference_of,
)
from depthbench.report.load import (
    TERMINAL_SHARE,
    Sections,
    final_rows,
    fmt_value,
    grid_clock,
    group_col,
    labelled,
)
from depthbench.report.spread import spread_section, spread_table, spread_words
from depthbench.stats import mean_ci, paired_differences, t_interval


def eval_sections(figs, ev: pd.DataFrame, color: dict, reference: str | None,
                   curves: pd.DataFrame | None = None) -> Sections:
    """Recall from the name alone: figures, comparisons, summary, brackets and the control."""
    tables, notes, files = [], [], {}
    fin = final_rows(ev)
    re = fin[fin["split"] == "eval_reordered"]
    if re.empty:
        raise UserError(f"the eval rows hold no eval_reordered split (only "
                        f"{', '.join(sorted(map(str, ev['split'].unique())))}); the report reads "
                        "recall on eval_reordered: evaluate with --split eval_reordered")
    if BUDGET.column in re.columns and re[BUDGET.column].notna().any():
        fig_budgets(figs, re, color)
    comparisons = comparisons_of(re, reference)
    if not comparisons.empty:
        notes += comparison_words(comparisons)
        tables.append(("Comparisons decided in advance: each schedule minus the reference on "
                       "exact match averaged over serving depths (the claim), and over depths "
                       "1-3 (described); paired 95% t-interval and exact sign-flip p over seeds, "
                       "Holm-corrected across this report's claims; equivalent where the "
                       f"interval lies within ±{EQUIVALENCE_MARGIN:g}",
                       comparison_table(comparisons)))
    nll_part, nll = _nll_section(re, reference)
    tables, notes = tables + nll_part.tables, notes + nll_part.notes
    fig_by_group(figs, comparisons, nll, color, NLL_BAND)
    axis, by_length = group_col(re), re
    if axis:   # the other figures: the full budget, the longest training
        re = re[re[axis] == re[axis].max()]
    ctrl_all = fin[fin["split"] == "eval_unseen_people"]
    fig_bits(figs, re, color, ctrl_all)
    fig_exact(figs, re, color, ctrl_all)
    ref = reference_of(re["schedule"], reference)
    if ref is not None and re["schedule"].nunique() > 1:
        d_bits = paired_differences(re, "bits_per_person", ref)
        d_nll = paired_differences(re, "nll", ref)
        if not d_bits.empty:
            fig_paired(figs, d_bits, d_nll, ref, color)
            tables.append((f"Bits per person minus {ref}: per seed, then mean and 95% CI over "
                           "seeds", paired_table(d_bits)))
            tables.append((f"Exact match minus {ref}: averaged over serving depths, per seed, then "
                           "mean and 95% CI over seeds", paired_mean_em(re, ref)))
    fig_fixed(figs, re, color)
    fig_nll_flops(figs, by_length if axis == LENGTH.column else re, color)
    tables += breakdown_section(figs, re, ref, color)
    tables[:0] = _summary_tables(re, ref, curves)
    tables[:0] = _brackets_table(fin)
    if "n_grad_loops" in fin.columns and (fin["n_grad_loops"].fillna(0) > 0).any():
        trunc = fin[fin["n_grad_loops"].fillna(0) > 0].groupby("schedule")["n_grad_loops"].first()
        notes.append("Truncated backprop: " + "; ".join(
            f"`{s}` trained with gradients through its last {int(g)} loops only"
            for s, g in trunc.items()) + " (the other runs: full backprop).")
    files["findings.md"] = _findings(re, ref)
    control = _control_table(fin)
    if control is not None:
        tables.append(control)
    spread = spread_section(fin)
    return Sections(tables + spread.tables, notes + spread.notes, files)


def _brackets_table(fin: pd.DataFrame) -> list:
    """The brackets' titled table (none for rows that predate them)."""
    brackets = bounds_table(fin)
    if brackets is None:
        return []
    col = "structure_blind_bits_per_person"
    shortcut = ("the structural shortcut (no name, but which attributes open each record's "
                "training orders, and the split's share of each kind: the strongest shortcut "
                "that does not read the name), " if col in fin.columns and fin[col].notna().any()
                else "")
    return [("Brackets: the person-agnostic floor (training value frequencies, no name, no "
             "model), the name-blind record completer (every training record, no name), "
             f"{shortcut}the task ceiling, and the task's size (trained people x ceiling bits "
             "per model parameter)", brackets)]


def _nll_section(re: pd.DataFrame, reference: str | None) -> tuple[Sections, pd.DataFrame]:
    """The paper's metric: the verdicts on mean serving NLL, a table and a sentence each, and
    the plateaus between training lengths; with the comparisons themselves."""
    tables, notes = [], []
    nll = nll_comparisons(re, reference)
    if not nll.empty:
        asked = nll["metric"].iloc[0] == "value_nll"
        notes += nll_words(nll)
        tables.append(("The paper's metric: each schedule against the reference on mean serving "
                       "NLL (each run's NLL " + ("of the asked value, the fact asked from the "
                                                 "name, " if asked else "")
                       + "averaged over every serving depth), as a paired "
                       "relative difference per seed; 95% t-interval, two one-sided tests (TOST) "
                       f"against the paper's ±{100 * NLL_BAND:g}%, the verdict (within the band "
                       "only where the 95% interval lies inside it, outside only where it "
                       "excludes it, else not resolved, with the precision reached) and whether "
                       "it holds with each seed left out in turn", nll_table(nll)))
        if asked:   # the whole row's NLL, described under its own name
            rec = nll_comparisons(re.assign(record_nll=re["nll"]), reference, "record_nll")
            tables.append(("Described, not a verdict: the same comparison on the whole record "
                           "row's NLL (names, key order and the values after the asked one are "
                           "most of its nats; a model that memorized more of its training orders "
                           "reads a worse row)", nll_table(rec)))
    plateau = plateaus_of(re)
    if not plateau.empty:
        notes += plateau_words(plateau)
        tables.append(("Plateaus (Figure 2 left's curve per schedule): between consecutive "
                       "training lengths, the paired relative change of each seed's mean serving "
                       "NLL (" + ("of the asked value, " if nll_metric(re) == "value_nll"
                                  else "") + "the verdict's metric) with its 95% "
                       "t-interval; on a plateau only where the interval lies "
                       f"within ±{100 * PLATEAU_BAND:g}%, still improving only where it lies below "
                       "it", plateau_table(plateau)))
    return Sections(tables, notes, {}), nll


def _control_table(fin: pd.DataFrame):
    """The unseen-people control's table (None without that split)."""
    ctrl = fin[fin["split"] == "eval_unseen_people"]
    if not ctrl.empty:
        cols = ["bits_per_person"] + [c for c in ("unfloored_bits_per_person", "exact_match")
                                      if c in ctrl.columns]
        control = ctrl.groupby("schedule")[cols].agg(["mean", "max"]).round(3)
        control.columns = [f"{c} {a}" for c, a in control.columns]
        return ("Control: unseen people, all depths (floored bits about 0 or a little above: "
                "the per-fact max(0, .) bias; the unfloored bits and exact match are unbiased)",
                control.reset_index())
    return None


def task_section(figs, tk: pd.DataFrame, color: dict) -> tuple[str, pd.DataFrame]:
    """Downstream tasks across serving depths (the paper's Figure 3, bottom): accuracy against
    depth per task and schedule, and its Table 4: per schedule and task the accuracy averaged
    over depths and at the deepest depth, mean ± SD over seeds."""
    tk = final_rows(tk).copy()
    # a task's accuracy (acc), else its exact match (generation tasks)
    score = pd.Series(np.nan, index=tk.index)
    for col in ("acc", "exact_match"):
        if col in tk.columns:
            score = score.combine_first(pd.to_numeric(tk[col], errors="coerce"))
    tk["acc"] = score
    tk = tk[tk["acc"].notna()]
    if tk.empty:
        raise UserError("the task rows hold neither acc nor exact_match; nothing to draw")
    tasks = sorted(tk["task"].unique())
    fig, axes = figs.plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), dpi=110,
                                  squeeze=False)
    for ax, t in zip(axes[0], tasks):
        ci_lines(ax, tk[tk["task"] == t], "acc", color)
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("serving depth K")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7)
    figs.save(fig, "task_accuracy_vs_depth.png", "Downstream task accuracy at every serving "
              "depth (lm-eval); lines: mean over seeds, bands: 95% t-interval over seeds.")
    deepest = int(tk["depth"].max())
    per = tk.groupby(["schedule", "task", "seed"]).apply(lambda g: pd.Series({
        "avg": g["acc"].mean(), "deep": g.loc[g["depth"].idxmax(), "acc"]}),
        include_groups=False).reset_index()
    table = per.groupby(["schedule", "task"]).apply(lambda g: pd.Series({
        "seeds": len(g), "depth-averaged accuracy": fmt_value(g["avg"].mean(), g["avg"].std()),
        f"accuracy at K={deepest}": fmt_value(g["deep"].mean(), g["deep"].std())}),
        include_groups=False).reset_index()
    return ("Table 4: downstream accuracy, depth-averaged and at the deepest depth (mean ± SD "
            "over seeds)", table)


def with_train_time(re: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows with a ``train_time`` column and what it is: the training process's CPU
    seconds (``train_cpu_s``, unaffected by other processes sharing the machine) where every
    row has them ("CPU"), else wall-clock seconds ("wall")."""
    if "train_cpu_s" in re.columns and re["train_cpu_s"].notna().all():
        return re.assign(train_time=re["train_cpu_s"]), "CPU"
    return re.assign(train_time=re["wall_clock_s"] if "wall_clock_s" in re.columns
                     else np.nan), "wall"


def _findings(re: pd.DataFrame, ref: str | None) -> str:
    """The README's findings table: bits per person at depths 1, 4 and the deepest, with 95%
    CIs over seeds, and each schedule's modeled FLOPs and training time per run (the training
    process's CPU seconds where the rows have them: a run's time, not its neighbours')."""
    deepest = int(re["depth"].max())
    depths = [d for d in (1, 4, deepest) if d in set(re["depth"])]
    re, clock = with_train_time(re)
    runs = re.groupby(["run", "schedule"]).agg(flops=("modeled_train_flops", "first"),
                                               wall=("train_time", "first")).reset_index()
    ref_flops = runs.loc[runs["schedule"] == ref, "flops"].mean() if ref else np.nan
    ceiling = float(re["ceiling_bits"].iloc[0])
    head = (["schedule", "seeds"] + [f"depth {d}: bits (EM)" for d in depths]
            + [f"modeled FLOPs (% of {ref})" if ref else "modeled FLOPs", f"train {clock} s/run"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    floor = floor_of(re, "floor_bits_per_person")
    if floor is not None:
        em = floor_of(re, "floor_exact_match")
        lines.append("| floor (no model) | - | " + " | ".join(
            f"{floor:.1f} ({100 * floor / ceiling:.0f}%), EM {em:.2f}" for _ in depths) + " | - | - |")
    for s, g in re.groupby("schedule"):
        cells = [f"`{s}`", str(g["seed"].nunique())]
        for d in depths:
            m, h, _ = t_interval(g.loc[g["depth"] == d, "bits_per_person"])
            ci = f" ± {h:.1f}" if np.isfinite(h) else ""
            em = g.loc[g["depth"] == d, "exact_match"].mean()
            cells.append(f"{m:.1f}{ci} ({100 * m / ceiling:.0f}%), EM {em:.2f}")
        r = runs[runs["schedule"] == s]
        cells.append(f"{100 * r['flops'].mean() / ref_flops:.0f}%" if ref else f"{r['flops'].mean():.2e}")
        cells.append(f"{r['wall'].mean():.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def terminal_nll_of(curves: pd.DataFrame | None) -> dict:
    """Per run: the mean logged training loss over its final 4% of updates."""
    if curves is None or curves.empty:
        return {}
    out = {}
    for run, g in curves.groupby("run"):
        last = g["step"].max()
        out[run] = float(g.loc[g["step"] > last * (1 - TERMINAL_SHARE), "loss"].mean())
    return out


def _summary_tables(re: pd.DataFrame, ref: str | None,
                    curves: pd.DataFrame | None = None) -> list[tuple[str, pd.DataFrame]]:
    re, clock = with_train_time(re)
    terminal = terminal_nll_of(curves)
    per_run = re.groupby(["run", "schedule"]).apply(lambda g: pd.Series({
        "mean_serving_nll": g["nll"].mean(),
        "exact_match": g.loc[g["depth"].idxmax(), "exact_match"],
        "mean_exact_match": g["exact_match"].mean(),
        "best_bits": g["bits_per_person"].max(),
        "best_unfloored": g["unfloored_bits_per_person"].max()
        if "unfloored_bits_per_person" in g.columns else np.nan,
        "flops": g["modeled_train_flops"].iloc[0],
        "wall": g["train_time"].iloc[0],
    }), include_groups=False).reset_index()
    per_run["terminal_nll"] = [terminal.get(r, np.nan) for r in per_run["run"]]
    base = per_run[per_run["schedule"] == ref] if ref is not None else per_run.iloc[:0]
    ref_flops = base["flops"].mean() if not base.empty else np.nan
    ref_wall = base["wall"].mean() if not base.empty else np.nan
    ref_name = ref or "reference"
    summary = []
    for s, g in per_run.groupby("schedule"):
        summary.append({
            "schedule": s, "seeds": len(g),
            f"terminal training NLL (final {100 * TERMINAL_SHARE:.0f}% of updates)":
                fmt_value(g["terminal_nll"].mean(), g["terminal_nll"].std()),
            "mean serving NLL": fmt_value(g["mean_serving_nll"].mean(), g["mean_serving_nll"].std()),
            f"modeled FLOPs (% of {ref_name})": fmt_value(100 * g["flops"].mean() / ref_flops,
                                                    100 * g["flops"].std() / ref_flops, 1),
            f"{clock} time reduction vs {ref_name} (%)":
                fmt_value(100 * (1 - g["wall"].mean() / ref_wall), 100 * g["wall"].std() / ref_wall, 1),
            "exact match at max depth": fmt_value(g["exact_match"].mean(), g["exact_match"].std()),
            "exact match, mean over depths": fmt_value(g["mean_exact_match"].mean(),
                                                  g["mean_exact_match"].std()),
            "best bits/person": fmt_value(g["best_bits"].mean(), g["best_bits"].std(), 1),
            "best unfloored bits/person": fmt_value(g["best_unfloored"].mean(),
                                               g["best_unfloored"].std(), 1),
        })
    def by_depth(value: str, digits: int) -> pd.DataFrame:
        ci = mean_ci(re, ["depth", "schedule"], value)
        ci["cell"] = [f"{m:.{digits}f} ± {h:.{digits}f}" if np.isfinite(h) else f"{m:.{digits}f}"
                      for m, h in zip(ci["mean"], ci["ci95"])]
        return ci.pivot_table(index="depth", columns="schedule", values="cell",
                              aggfunc="first").reset_index()
    return [("Schedules (mean ± SD over seeds, eval_reordered, final checkpoints)",
             pd.DataFrame(summary)),
            ("Recalled bits per person by serving depth (mean ± 95% CI half-width over seeds, "
             "t-interval)", by_depth("bits_per_person", 1)),
            ("Exact-match recall by serving depth (mean ± 95% CI half-width over seeds, "
             "t-interval)", by_depth("exact_match", 3))]


def stage_table(st: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    clock = grid_clock(st)
    rows = [{"stages": k, "count": n, "stage seconds (sum)": round(clock["stage_s"].get(k, 0), 1)}
            for k, n in sorted(clock["stages"].items())]
    wall = clock["wall_s"]
    rows.append({"stages": "whole grid (wall clock while a stage ran)",
                 "count": sum(clock["stages"].values()),
                 "stage seconds (sum)": "-" if wall != wall else
                 f"{round(wall, 1)} ({int(round(wall)) // 60} min {int(round(wall)) % 60} s)"})
    if clock["peak_rss_mb"]:
        rows.append({"stages": "peak resident memory of one stage process (MB)", "count": "-",
                     "stage seconds (sum)": f"{clock['peak_rss_mb']:.0f}"})
    who = f"{clock['workers']} local workers" if clock["workers"] else "submitted jobs"
    return (f"Time by stage ({who}; a stage's seconds run from its start, or submission, to its "
            "end; the report stage is not counted)", pd.DataFrame(rows))


def serve_section(figs, sv: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    for c in ("speedup", "ceiling"):
        if c in sv.columns and not np.isfinite(pd.to_numeric(sv[c], errors="coerce")).all():
            raise UserError(f"serve rows: column {c} must hold finite numbers; regenerate them "
                            "with depthbench")
    if not {"speedup", "ceiling"} <= set(sv.columns):   # no static baseline ran
        cols = [c for c in ("mode", "tokens_per_s", "mean_depth", "rows_per_launch", "padding_waste",
                            "ttft_p50_ms", "itl_p50_ms", "itl_p99_ms", "exact_match") if c in sv.columns]
        return ("Serving benchmark (no static baseline among the modes: tokens/s only)",
                sv[cols].round(3))
    bound = "bound" in sv.columns   # rows of this version (earlier ones: speedups over static)
    notes = sv["bound_note"].dropna().astype(str) if "bound_note" in sv.columns else pd.Series([], dtype=str)
    note = next((n for n in notes if n), "")   # the bound withheld, and why
    fig, ax = figs.new("Realized speedup vs its bound and the FLOP ceiling per batching mode",
                       "batching mode", "speedup over " + ("full-depth serving" if bound
                                                          else "static"))
    x = np.arange(len(sv))
    w = 0.27 if bound else 0.4
    ax.bar(x - w / 2 * (2 if bound else 1), sv["speedup"], w, label="realized", color="#1f77b4")
    if bound:
        ax.bar(x, sv["bound"], w, label="bound (the ideal time of its work)", color="#7fb3d5")
    ax.bar(x + w / 2 * (2 if bound else 1), sv["ceiling"], w, label="FLOP ceiling",
           color="#bbbbbb")
    ax.set_xticks(x, sv["mode"])
    ax.axhline(1, color="k", lw=1)
    # the legend in a row of its own above the tallest bar: it never covers one
    top = np.nanmax(sv[[c for c in ("speedup", "bound", "ceiling") if c in sv.columns]].to_numpy(float))
    ax.set_ylim(0, 1.2 * max(float(top), 1.0))
    ax.legend(fontsize=8, ncol=3, loc="upper center", frameon=False)
    base = "full-depth serving at its best knobs" if bound else "static"
    figs.save(fig, "serving_speedup.png", f"Tokens/s over {base} for each batching mode, whole "
              "runs, next to "
              + ("its bound (its tokens over the ideal time of its work under a per-stage cost "
                 "model fitted on this machine) and " if bound else "")
              + "the FLOP ceiling (F0 + K_max Fr) / (F0 + mean depth Fr).")
    cols = [c for c in ("mode", "tokens_per_s", "speedup", "bound", "fraction",
                        "speedup_vs_static", "ceiling", "fraction_of_ceiling", "paper_bound",
                        "mean_depth", "rows_per_launch", "padding_waste", "ttft_p50_ms",
                        "itl_p50_ms", "itl_p99_ms", "exact_match") if c in sv.columns]
    return ("Serving benchmark" + (f": bound and fraction {note}" if note else ""),
            sv[cols].round(3))


def _nll_summary(re: pd.DataFrame, reference: str | None) -> dict:
    """A report summary's verdicts on mean serving NLL (the paper's metric) and their
    sentences; none where the rows decide none."""
    nll = nll_comparisons(re, reference)
    if nll.empty:
        return {}
    return {"nll": [{"schedule": r["schedule"], "axis": r["axis"],
                     "group": None if pd.isna(r["group"]) else r["group"],
                     "verdict": r["verdict"]} for _, r in nll.iterrows()],
            "nll_sentences": nll_words(nll) + plateau_words(plateaus_of(re))}


def summarize(rows: dict[str, pd.DataFrame], reference: str | None = None) -> dict:
    """What the results pages say of one report, computed from its rows by the same functions
    that draw the report (``depthbench.docs``): its arms and seeds, the comparisons decided in
    advance with their verdicts, the best seed-mean reading as a share of the ceiling per split,
    the findings table and the grid's wall clock."""
    from depthbench.report.sweep import is_sweep, sweep_notes
    rows = labelled(rows)
    ev = rows.get("eval")
    out = {"kind": "none", "reading": "-", "arms": [], "seeds": 0, "comparisons": [], "sentences": [],
           "nll": [], "nll_sentences": [],
           "best_share": {}, "findings": "", "wall_s": None, "spread": ""}
    st = rows.get("stage")
    if st is not None and not st.empty:
        out["wall_s"] = grid_clock(st)["wall_s"]
    if ev is None or ev.empty:
        return out
    fin = final_rows(ev)
    out["arms"] = sorted(map(str, fin["schedule"].unique()))
    out["seeds"] = int(fin.groupby("schedule")["seed"].nunique().max())
    if is_sweep(ev):   # tuning rows: the LR each arm is run at, no comparison
        out.update(kind="sweep", reading="learning-rate sweep", sentences=sweep_notes(ev))
        return out
    if "bits_per_byte" in fin.columns and fin["bits_per_byte"].notna().any():
        out["kind"] = "text"
        out.update(_nll_summary(fin[fin["split"] == "validation"], reference))
        return out
    out["kind"] = "synthetic"
    # rows from before dataset format 4 scored every fact of a row, teacher-forced after the
    # person's earlier values; they carry no name-blind oracle
    out["reading"] = ("name only" if "name_blind_bits_per_person" in fin.columns
                      and fin["name_blind_bits_per_person"].notna().any()
                      else "record completion (before the name-only reading)")
    re = fin[fin["split"] == "eval_reordered"]
    c = comparisons_of(re, reference)
    if not c.empty:
        prim = c[c["summary"] == "primary"]
        out["comparisons"] = [{**{k: (None if isinstance(v, float) and np.isnan(v) else v)
                                  for k, v in r.items()}, "verdict": verdict_of(r)}
                              for _, r in prim.iterrows()]
        out["sentences"] = [f"{w} {per_depth_words(re, r)}" for w, (_, r) in
                            zip(comparison_words(c), prim.iterrows())]
    out.update(_nll_summary(re, reference))
    for split, g in fin.groupby("split"):
        if split == "eval_unseen_people":
            continue
        keys = ["schedule", "depth"] + ([group_col(g)] if group_col(g) else [])
        best = g.groupby(keys)["bits_per_person"].mean().max()   # a seed mean of one arm
        out["best_share"][split] = float(best / g["ceiling_bits"].mean())
    out["spread"] = spread_words(spread_table(fin))
    axis = group_col(re)
    full = re[re[axis] == re[axis].max()] if axis else re
    out["findings"] = _findings(full, reference_of(full["schedule"], reference))
    return out
