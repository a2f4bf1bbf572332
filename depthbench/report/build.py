"""``depthbench report``: result rows -> a self-contained ``reports/NAME/`` (index.html,
README.md, PNG figures). Reads result files only and never loads a model.

Every row names its kind in a ``kind`` column (``depthbench.rows``); the report dispatches on
it and checks each kind's required columns (SCHEMA). Rows written before the column existed
are told apart by their columns.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from depthbench.config import ReportConfig
from depthbench.errors import UserError
from depthbench.fsio import atomic_write_text, check_replaceable, replaced_dir
from depthbench.schedules import parse_schedule
from depthbench.stats import holm, mean_ci, paired_differences, sign_flip_p, t_interval

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def _read(path: Path) -> pd.DataFrame:
    try:
        if path.suffix == ".jsonl":
            return pd.read_json(path, lines=True)
        return pd.read_csv(path)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read result file {path}: {str(e)[:100]}") from None


def load_rows(paths: list[Path]) -> dict[str, pd.DataFrame]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.jsonl"))
            # a CSV next to a JSONL of the same name is the same rows
            found += [c for c in sorted(p.rglob("*.csv")) if not c.with_suffix(".jsonl").exists()]
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"result path {p} does not exist")
    if not files:
        raise UserError(f"no result files (.jsonl or .csv) under {', '.join(map(str, paths))}")
    # a file named twice (a directory and a file in it, or a path spelled two ways) is read once
    files = list({f.resolve(): f for f in files}.values())
    kinds: dict[str, list[pd.DataFrame]] = {k: [] for k in SCHEMA}
    for f in files:
        df = _read(f)
        df["_file"] = str(f)
        if df.empty:
            continue
        if "kind" in df.columns:
            unknown = sorted(set(df["kind"].astype(str)) - set(SCHEMA))
            if unknown:
                raise UserError(f"result file {f} has rows of unknown kind {unknown[0]!r}; "
                                f"known kinds: {', '.join(SCHEMA)}")
            for kind, part in df.groupby("kind", sort=False):
                kinds[kind].append(_checked(part.reset_index(drop=True), kind, f))
            continue
        kind = _kind(set(df.columns))
        if kind is not None:
            kinds[kind].append(_checked(df, kind, f))
    out = {k: pd.concat(v, ignore_index=True) for k, v in kinds.items() if v}
    if not out:
        raise UserError("none of the given files holds depthbench result rows")
    for kind, df in out.items():
        _refuse_duplicates(df, kind)
    _refuse_mixed_datasets(out)
    if "eval" in out:
        _refuse_incomparable(out["eval"])
    return {k: df.drop(columns="_file") for k, df in out.items()}


def _refuse_incomparable(ev: pd.DataFrame) -> None:
    """Runs compared on paired seeds must be read alike: at their final checkpoints every run of
    a split covers the same serving depths and, on text, the same number of tokens."""
    fin = _final(ev)
    for split, g in fin.groupby("split"):
        depths = g.groupby("run")["depth"].apply(lambda d: tuple(sorted(set(d))))
        if depths.nunique() > 1:
            (r1, d1), (r2, d2) = list(depths.items())[0], next(
                (r, d) for r, d in depths.items() if d != depths.iloc[0])
            raise UserError(f"{split}: run {r1} is read at depths {_span(d1)} and run {r2} at "
                            f"{_span(d2)}; paired comparisons need every run at the same depths: "
                            "evaluate them with the same --depths")
        if "tokens" in g.columns and g["tokens"].notna().any():
            tokens = g.groupby("run")["tokens"].agg(lambda t: tuple(sorted(set(t))))
            if tokens.nunique() > 1:
                (r1, t1), (r2, t2) = list(tokens.items())[0], next(
                    (r, t) for r, t in tokens.items() if t != tokens.iloc[0])
                raise UserError(f"{split}: run {r1} is read over {t1[0]} tokens and run {r2} "
                                f"over {t2[0]}; runs compared must be read over the same "
                                "validation windows (the same dataset and --max-people)")


def _span(depths: tuple) -> str:
    d = list(depths)
    return f"{d[0]}-{d[-1]}" if d == list(range(d[0], d[-1] + 1)) else ",".join(map(str, d))


# kind -> the columns that name one row; two rows with the same key are the same measurement
# given twice (or two runs of one name), which would count as two seeds
ROW_KEYS = {"eval": ["run", "step", "split", "depth"], "probe": ["run", "step", "depth",
                                                                "depth_a", "depth_b"],
            "curve": ["run", "step"], "run": ["run"], "serve": None,
            "task": ["run", "step", "task", "depth"], "stage": ["stage"]}


def _refuse_duplicates(df: pd.DataFrame, kind: str) -> None:
    named = ROW_KEYS[kind]
    # serve: repeated benchmarks are separate rows unless every value repeats (a copied file)
    key = [c for c in (named or df.columns) if c in df.columns and c != "_file"]
    key += ["budget"] if "budget" in df.columns and "budget" not in key else []
    dup = df.duplicated(key, keep=False)
    if not dup.any():
        return
    first = df[dup].iloc[0]
    same = df[dup & (df[key].astype(str) == first[key].astype(str)).all(axis=1)]
    where = sorted(set(same["_file"]))
    what = ", ".join(f"{c} {first[c]}" for c in key) if named else "every column"
    raise UserError(f"the {kind} row ({what}) is given {len(same)} times (in "
                    f"{' and '.join(where[:2])}); give each run's rows once, and runs of "
                    "different experiments under different names")


def _refuse_mixed_datasets(rows: dict) -> None:
    hashes: dict[str, str] = {}
    for kind in ("eval", "run", "curve", "probe", "task"):
        df = rows.get(kind)
        if df is None or "dataset_hash" not in df.columns:
            continue
        for h, f in df.dropna(subset=["dataset_hash"]).groupby("dataset_hash")["_file"].first().items():
            hashes.setdefault(str(h), f)
    if len(hashes) > 1:
        (h1, f1), (h2, f2) = sorted(hashes.items())[:2]
        raise UserError(f"the rows come from {len(hashes)} datasets ({h1[:12]} in {f1}, "
                        f"{h2[:12]} in {f2}); runs trained on different datasets cannot be "
                        "compared as paired seeds: report one dataset's rows at a time")


# kind -> (the columns that identify it, the columns it must have, which of those are numbers)
SCHEMA = {
    "probe": ({"nll_diff", "depth"}, ["run", "step", "depth", "depth_a", "depth_b", "nll_diff",
                                       "ci95"], ["step", "depth", "depth_a", "depth_b", "nll_diff"]),
    # a comparison without the static baseline has no speedup: its rows are tabled, not drawn
    "serve": ({"mode", "tokens_per_s"}, ["mode", "tokens_per_s"], ["tokens_per_s"]),
    "eval": ({"depth", "split", "bits_per_person"},
             ["run", "schedule", "seed", "step", "depth", "split", "nll", "bits_per_person",
              "exact_match", "ceiling_bits", "modeled_train_flops"],
             ["seed", "step", "depth", "nll", "bits_per_person", "exact_match", "ceiling_bits"]),
    "curve": ({"loss", "step", "K"}, ["run", "schedule", "step", "K", "loss", "switch_step"],
               ["step", "K", "loss"]),
    "run": ({"final_loss", "modeled_train_flops"}, ["run", "schedule", "seed", "final_loss",
                                                     "modeled_train_flops"], ["seed", "final_loss"]),
    "task": ({"task", "depth", "harness"}, ["run", "schedule", "seed", "step", "depth", "task"],
             ["seed", "step", "depth"]),
    "stage": ({"stage", "finished"}, ["stage", "command", "finished"], ["finished"]),
}


# the eval rows of a text run: (required, numeric) columns in place of the synthetic ones
TEXT_EVAL = (["run", "schedule", "seed", "step", "depth", "split", "nll", "bits_per_byte",
              "modeled_train_flops"], ["seed", "step", "depth", "nll", "bits_per_byte"])


def _kind(cols: set) -> str | None:
    if {"depth", "split", "bits_per_byte"} <= cols:
        return "eval"
    for kind, (ident, _, _) in SCHEMA.items():
        if ident <= cols:
            return kind
    return None


def _checked(df: pd.DataFrame, kind: str, path: Path) -> pd.DataFrame:
    _, required, numeric = SCHEMA[kind]
    if kind == "eval" and "bits_per_byte" in df.columns:   # a text run's eval rows
        required, numeric = TEXT_EVAL
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(f"result file {path} looks like {kind} rows but lacks the column(s) "
                        f"{', '.join(missing)}; regenerate it with depthbench")
    for c in numeric:
        if not pd.api.types.is_numeric_dtype(df[c]) or not np.isfinite(df[c].astype(float)).all():
            raise UserError(f"result file {path}: column {c} must hold finite numbers; "
                            "regenerate it with depthbench")
    _check_ranges(df, kind, path)
    if "schedule" in df.columns:
        _check_schedules(df["schedule"], kind, path)
    return df


# kind -> column -> (least, greatest) a reading can be; a column named here is checked where the
# rows hold it (None: unbounded on that side). Bits are bounded by the row's own ceiling below.
RANGES = {
    "eval": {"nll": (0, None), "value_nll": (0, None), "exact_match": (0, 1), "bits_per_person": (0, None),
             "ceiling_bits": (0, None), "floor_bits_per_person": (0, None),
             "name_blind_bits_per_person": (0, None), "floor_exact_match": (0, 1),
             "name_blind_exact_match": (0, 1), "depth": (1, None), "step": (0, None),
             "bits_per_byte": (0, None), "tokens": (1, None), "cloze_accuracy": (0, 1),
             "cloze_accuracy_mi": (0, 1), "modeled_train_flops": (0, None)},
    "probe": {"depth": (1, None), "depth_a": (1, None), "depth_b": (1, None), "ci95": (0, None),
              "step": (0, None), "batches": (1, None)},
    "curve": {"loss": (0, None), "K": (1, None), "step": (0, None)},
    "run": {"final_loss": (0, None), "modeled_train_flops": (0, None)},
    "serve": {"tokens_per_s": (0, None), "speedup": (0, None), "ceiling": (0, None)},
    "task": {"depth": (1, None), "acc": (0, 1), "acc_norm": (0, 1), "acc_mutual_info": (0, 1)},
    "stage": {"stage_s": (0, None), "started": (0, None), "finished": (0, None),
              "workers": (1, None), "peak_rss_mb": (0, None)},
}


def _check_ranges(df: pd.DataFrame, kind: str, path: Path) -> None:
    """A reading that cannot be (a negative NLL, an exact match above 1, bits above the row's
    ceiling, a stage that ends before it starts) is refused, not drawn."""
    def refuse(what: str):
        raise UserError(f"result file {path}: {what}, which no {kind} row can hold; "
                        "regenerate it with depthbench")
    for c, (lo, hi) in RANGES.get(kind, {}).items():
        if c not in df.columns:
            continue
        v = pd.to_numeric(df[c], errors="coerce").dropna()
        if lo is not None and (v < lo).any():
            refuse(f"column {c} holds {v[v < lo].iloc[0]!r} (below {lo})")
        if hi is not None and (v > hi).any():
            refuse(f"column {c} holds {v[v > hi].iloc[0]!r} (above {hi})")
    if kind == "eval" and "ceiling_bits" in df.columns:
        ceiling = pd.to_numeric(df["ceiling_bits"], errors="coerce")
        for c in ("bits_per_person", "unfloored_bits_per_person", "floor_bits_per_person",
                  "name_blind_bits_per_person"):
            if c in df.columns:
                over = pd.to_numeric(df[c], errors="coerce") > ceiling * (1 + 1e-9) + 1e-9
                if over.any():
                    refuse(f"column {c} holds {df.loc[over, c].iloc[0]!r}, above the row's "
                           f"ceiling of {ceiling[over].iloc[0]!r} bits")
    if kind == "stage" and {"started", "finished"} <= set(df.columns):
        a, b = (pd.to_numeric(df[c], errors="coerce") for c in ("started", "finished"))
        if (b < a).any():
            refuse(f"stage {df.loc[b < a, 'stage'].iloc[0]} ends before it starts")


def _check_schedules(col: pd.Series, kind: str, path: Path) -> None:
    """A schedule column holds schedule specs (a serve row of a random model: none)."""
    for v in col.unique():
        if v is None or (isinstance(v, float) and np.isnan(v)):
            if kind == "serve":
                continue
            raise UserError(f"result file {path}: a {kind} row has no schedule; regenerate it "
                            "with depthbench")
        try:
            parse_schedule(v)
        except UserError:
            raise UserError(f"result file {path}: schedule {v!r} is not a schedule spec; "
                            "regenerate it with depthbench") from None


def _colors(schedules) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(set(schedules)))}


def _final(ev: pd.DataFrame) -> pd.DataFrame:
    """Rows of each run's final (latest) checkpoint."""
    last = ev.groupby("run")["step"].transform("max")
    return ev[ev["step"] == last]


def _fmt(mean: float, sd: float, digits: int = 3) -> str:
    if pd.isna(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {0.0 if pd.isna(sd) else sd:.{digits}f}"


class _Figures:
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


def _reference(schedules, reference: str | None) -> str | None:
    """The schedule others are compared with: the one asked for, else the first uniform one."""
    if reference is not None:
        if reference not in set(schedules):
            raise UserError(f"reference schedule {reference!r} has no eval rows; choose one of "
                            f"{', '.join(sorted(map(str, set(schedules))))}")
        return reference
    uni = sorted(s for s in set(schedules) if str(s).startswith("uniform"))
    return uni[0] if uni else None


def _ci_lines(ax, df: pd.DataFrame, value: str, color: dict, label_n: bool = True) -> None:
    """Mean over seeds per schedule and depth, with its 95% t-interval as a band."""
    for s, g in df.groupby("schedule"):
        c = mean_ci(g, ["depth"], value)
        label = f"{s} (n={g['seed'].nunique()})" if label_n else s
        ax.plot(c["depth"], c["mean"], "-o", ms=3, color=color[s], label=label)
        ax.fill_between(c["depth"], c["lo"], c["hi"], color=color[s], alpha=0.18, lw=0)


def _floor(re: pd.DataFrame, col: str) -> float | None:
    """The split's person-agnostic reading, when the rows carry it (older rows do not)."""
    if col not in re.columns or re[col].isna().all():
        return None
    return float(re[col].dropna().iloc[0])


def _floor_line(ax, re: pd.DataFrame, col: str) -> None:
    """The lower oracles of the split as lines: the person-agnostic floor (dotted) and the
    name-blind record completer (dash-dot), where the rows carry them."""
    f = _floor(re, col)
    if f is not None:
        ax.axhline(f, ls=":", color="k", lw=1.2, label=f"floor (person-agnostic, {f:.2g})")
    b = _floor(re, col.replace("floor_", "name_blind_"))
    if b is not None:
        ax.axhline(b, ls="-.", color="0.4", lw=1.0, label=f"name-blind record completer ({b:.2g})")


def _control_line(ax, ctrl: pd.DataFrame | None, col: str) -> None:
    """The unseen-people control beside a reading: mean over every run at each depth."""
    if ctrl is not None and not ctrl.empty:
        c = ctrl.groupby("depth")[col].mean()
        ax.plot(c.index, c.values, ls="--", color="0.55", lw=1.0, label="unseen people (control)")


def _fig_bits(figs, re: pd.DataFrame, color: dict, ctrl: pd.DataFrame | None = None) -> None:
    fig, ax = figs.new("Recalled bits per person vs serving depth (name only, held-out order)",
                       "serving depth K", "bits per person")
    _ci_lines(ax, re, "bits_per_person", color)
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
              "record completer (every training record, no name); dashed grey: the same models "
              "on unseen people, the metric's bias.")


def _fig_exact(figs, re: pd.DataFrame, color: dict, ctrl: pd.DataFrame | None = None) -> None:
    fig, ax = figs.new("Exact-match recall vs serving depth (name only, held-out order)",
                       "serving depth K", "exact match")
    _ci_lines(ax, re, "exact_match", color)
    ax.axhline(1.0, ls="--", color="k", lw=1, label="every fact")
    _floor_line(ax, re, "floor_exact_match")
    _control_line(ax, ctrl, "exact_match")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    figs.save(fig, "exact_match_vs_depth.png", "Exact-match recall (greedy decoding of every "
              "value token) at every serving depth, eval_reordered, final checkpoints; mean over "
              "seeds with 95% confidence intervals (t-interval); dotted and dash-dot: the floor's "
              "and the name-blind completer's greedy answers; dashed grey: unseen people.")


def _brackets(fin: pd.DataFrame) -> pd.DataFrame | None:
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
        row["ceiling bits/person"] = round(float(g["ceiling_bits"].iloc[0]), 2)
        if split != "eval_unseen_people" and "params" in g.columns and g["params"].notna().any():
            bits = float(g["ceiling_bits"].iloc[0]) * float(g["people_trained"].iloc[0])
            row["task bits per parameter"] = round(bits / float(g["params"].dropna().iloc[0]), 3)
        out.append(row)
    return pd.DataFrame(out)


def _fig_budgets(figs, re: pd.DataFrame, color: dict) -> None:
    """The paper's Figure 1: one panel per matched FLOP budget."""
    budgets = sorted(re["budget"].dropna().unique())
    fig, axes = figs.plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets), 4.0), dpi=110,
                                  sharey=True, squeeze=False)
    ceiling = float(re["ceiling_bits"].iloc[0])
    for ax, b in zip(axes[0], budgets):
        _ci_lines(ax, re[re["budget"] == b], "bits_per_person", color)
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


def _fig_paired(figs, pd_bits: pd.DataFrame, pd_nll: pd.DataFrame, ref: str, color: dict) -> None:
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


# Where a comparison's 95% interval lies inside +-this on depth-averaged exact match, the two
# schedules are called equivalent within it (decided before any run: 5 points of exact match).
EQUIVALENCE_MARGIN = 0.05


def _comparisons(re: pd.DataFrame, reference: str | None,
                 value: str = "exact_match") -> pd.DataFrame:
    """The comparisons a report states, decided in advance: every schedule against the
    reference (within each budget, where there are budgets), on exact match averaged over all
    serving depths (the primary summary) and over depths 1-3 (described beside it). Each gets
    its paired t-interval and exact sign-flip p over seeds; the primary p-values are
    Holm-corrected across the report's comparisons."""
    rows = []
    budgets = sorted(re["budget"].dropna().unique()) if "budget" in re.columns else []
    groups = [(b, re[re["budget"] == b]) for b in budgets] or [(None, re)]
    for b, g in groups:
        ref = _reference(g["schedule"], reference)
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
                rows.append({"budget": b, "schedule": s, "reference": ref, "summary": part,
                             "depths": f"{lo}-{hi}", "seeds": n, "diff": m, "lo": m - h,
                             "hi": m + h, "p": sign_flip_p(d), "higher": int((d > 0).sum())})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    primary = out["summary"] == "primary"
    out["p_holm"] = np.nan
    out.loc[primary, "p_holm"] = holm(out.loc[primary, "p"])
    return out


def _verdict(r) -> str:
    """What a comparison's numbers allow one to say, and no more."""
    if r["summary"] != "primary":
        return "described, not tested"
    if not np.isfinite(r["hi"]):
        return "undecided (one seed)"
    if r["p_holm"] < 0.05 and (r["lo"] > 0 or r["hi"] < 0):
        return "higher" if r["diff"] > 0 else "lower"
    if -EQUIVALENCE_MARGIN < r["lo"] and r["hi"] < EQUIVALENCE_MARGIN:
        return f"equivalent within ±{EQUIVALENCE_MARGIN:g}"
    floor = 2 / 2 ** r["seeds"]
    return ("undecided" + (f" ({r['seeds']} seeds: the smallest possible p is {floor:.3g})"
                           if floor >= 0.05 else ""))


def _comparison_table(c: pd.DataFrame) -> pd.DataFrame:
    t = pd.DataFrame({
        "comparison": [f"{s} - {r}" for s, r in zip(c["schedule"], c["reference"])],
        "depths": c["depths"], "seeds": c["seeds"],
        "difference [95% CI]": [f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(hi)
                                else f"{m:+.4f}" for m, lo, hi in zip(c["diff"], c["lo"], c["hi"])],
        "sign-flip p": c["p"].round(4), "Holm p": c["p_holm"].round(4),
        "seeds higher": [f"{h} of {n}" for h, n in zip(c["higher"], c["seeds"])],
        "verdict": [_verdict(r) for _, r in c.iterrows()]})
    if c["budget"].notna().any():
        t.insert(0, "budget", [f"{100 * b:.0f}%" for b in c["budget"]])
    return t


def _comparison_words(c: pd.DataFrame, value: str = "exact match",
                      more: tuple[str, str] = ("recalls more", "recalls less")) -> list[str]:
    """One sentence per primary comparison."""
    out = []
    for _, r in c[c["summary"] == "primary"].iterrows():
        at = f"At {100 * r['budget']:.0f}% of the budget, " if pd.notna(r["budget"]) else ""
        v = _verdict(r)
        what = (f"`{r['schedule']}` {more[0] if v == 'higher' else more[1]} than "
                f"`{r['reference']}`" if v in ("higher", "lower") else
                f"`{r['schedule']}` and `{r['reference']}` are {v}" if v.startswith("equiv")
                else f"`{r['schedule']}` against `{r['reference']}` is {v}")
        ci = f"[{r['lo']:+.3f}, {r['hi']:+.3f}]" if np.isfinite(r["hi"]) else "(no interval)"
        out.append(f"{at}{what}: {value} averaged over depths {r['depths']} differs by "
                   f"{r['diff']:+.3f}, 95% CI {ci}, higher on {r['higher']} of {r['seeds']} "
                   f"seeds, sign-flip p {r['p']:.3g}, Holm-corrected {r['p_holm']:.3g}.")
    return out


def _paired_mean_em(re: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Each schedule minus ``ref`` on exact match averaged over the serving depths, per seed."""
    per = re.groupby(["schedule", "seed"], as_index=False)["exact_match"].mean()
    d = paired_differences(per.assign(depth=0), "exact_match", ref)
    return pd.DataFrame({
        "schedule": d["schedule"], "paired seeds": d["pairs"],
        "difference [95% CI]": [f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(h) else f"{m:+.4f}"
                                for m, lo, hi, h in zip(d["diff"], d["lo"], d["hi"], d["ci95"])],
        "CI excludes 0": np.where(d["sign"] != 0, "yes", "no")})


def _paired_table(d: pd.DataFrame) -> pd.DataFrame:
    t = d.copy()
    t["difference [95% CI]"] = [f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(h) else f"{m:+.2f}"
                                for m, lo, hi, h in zip(t["diff"], t["lo"], t["hi"], t["ci95"])]
    t["CI excludes 0"] = np.where(t["sign"] != 0, "yes", "no")
    return t.pivot_table(index="depth", columns="schedule", values="difference [95% CI]",
                         aggfunc="first").reset_index()


def _eval_sections(figs, ev: pd.DataFrame, color: dict, reference: str | None, tables, notes,
                   files: dict[str, str], curves: pd.DataFrame | None = None):
    fin = _final(ev)
    re = fin[fin["split"] == "eval_reordered"]
    if re.empty:
        raise UserError(f"the eval rows hold no eval_reordered split (only "
                        f"{', '.join(sorted(map(str, ev['split'].unique())))}); the report reads "
                        "recall on eval_reordered: evaluate with --split eval_reordered")
    if "budget" in re.columns and re["budget"].notna().any():
        _fig_budgets(figs, re, color)
    comparisons = _comparisons(re, reference)
    if not comparisons.empty:
        notes += _comparison_words(comparisons)
        tables.append(("Comparisons decided in advance: each schedule minus the reference on "
                       "exact match averaged over serving depths (the claim), and over depths "
                       "1-3 (described); paired 95% t-interval and exact sign-flip p over seeds, "
                       "Holm-corrected across this report's claims; equivalent where the "
                       f"interval lies within ±{EQUIVALENCE_MARGIN:g}",
                       _comparison_table(comparisons)))
    if "budget" in re.columns and re["budget"].notna().any():
        re = re[re["budget"] == re["budget"].max()]  # the other figures: the full budget
    ctrl_all = fin[fin["split"] == "eval_unseen_people"]
    _fig_bits(figs, re, color, ctrl_all)
    _fig_exact(figs, re, color, ctrl_all)
    ref = _reference(re["schedule"], reference)
    if ref is not None and re["schedule"].nunique() > 1:
        d_bits = paired_differences(re, "bits_per_person", ref)
        d_nll = paired_differences(re, "nll", ref)
        if not d_bits.empty:
            _fig_paired(figs, d_bits, d_nll, ref, color)
            tables.append((f"Paired difference to {ref}: bits per person (per seed, then mean and "
                           "95% CI over seeds)", _paired_table(d_bits)))
            tables.append((f"Paired difference to {ref}: exact match averaged over serving depths "
                           "(per seed, then mean and 95% CI over seeds)", _paired_mean_em(re, ref)))
    _fig_fixed(figs, re, color)
    _fig_nll_flops(figs, re, color)
    tables[:0] = _summary_tables(re, ref, curves)
    brackets = _brackets(fin)
    if brackets is not None:
        tables.insert(0, ("Brackets: the person-agnostic floor (training value frequencies, no "
                          "name, no model), the name-blind record completer (every training "
                          "record, no name: the strongest shortcut that does not read the "
                          "name), the task ceiling, and the task's size (trained people x "
                          "ceiling bits per model parameter)", brackets))
    if "n_grad_loops" in fin.columns and (fin["n_grad_loops"].fillna(0) > 0).any():
        trunc = fin[fin["n_grad_loops"].fillna(0) > 0].groupby("schedule")["n_grad_loops"].first()
        notes.append("Truncated backprop: " + "; ".join(
            f"`{s}` trained with gradients through its last {int(g)} loops only"
            for s, g in trunc.items()) + " (the other runs: full backprop).")
    files["findings.md"] = _findings(re, ref)
    ctrl = fin[fin["split"] == "eval_unseen_people"]
    if not ctrl.empty:
        cols = ["bits_per_person"] + [c for c in ("unfloored_bits_per_person", "exact_match")
                                      if c in ctrl.columns]
        control = ctrl.groupby("schedule")[cols].agg(["mean", "max"]).round(3)
        control.columns = [f"{c} {a}" for c, a in control.columns]
        tables.append(("Control: unseen people, all depths (floored bits about 0 or a little "
                       "above: the per-fact max(0, .) bias; the unfloored bits and exact match "
                       "are unbiased)", control.reset_index()))


def _fixed_fraction(arm: str) -> float | None:
    """The fixed phase of a fixed-first arm (None for any other arm, a matched run included)."""
    from depthbench.schedules import parse_schedule
    try:
        s = parse_schedule(str(arm))
    except UserError:  # a matched arm: schedule~reference
        return None
    return s.fraction if s.kind == "fixed-first" else None


def _fig_nll_flops(figs, re: pd.DataFrame, color: dict) -> None:
    """The paper's Figure 2: mean serving NLL (over all serving depths) against modeled training
    FLOPs. One small marker per run and a large one per arm (mean over seeds, SD bars);
    fixed-first arms are circles, filled for the shortest fixed phase in the report and open
    for longer ones (the paper's 67% filled, 80% open); every other arm is a square."""
    runs = re.groupby(["run", "schedule"]).agg(
        nll=("nll", "mean"), flops=("modeled_train_flops", "first")).reset_index()
    fracs = {s: _fixed_fraction(s) for s in runs["schedule"].unique()}
    shortest = min((f for f in fracs.values() if f is not None), default=None)
    fig, ax = figs.new("Mean serving NLL vs modeled training FLOPs",
                       "modeled training FLOPs", "mean NLL over serving depths")
    for s, g in runs.groupby("schedule"):
        f = fracs[s]
        marker = "s" if f is None else "o"
        face = "none" if f is not None and f != shortest else color[s]
        ax.scatter(g["flops"], g["nll"], s=10, marker=marker, facecolors=face,
                   edgecolors=color[s], alpha=0.45, lw=0.8)
        ax.errorbar(g["flops"].mean(), g["nll"].mean(), xerr=g["flops"].std(ddof=1) if len(g) > 1 else None,
                    yerr=g["nll"].std(ddof=1) if len(g) > 1 else None, fmt=marker, ms=9,
                    mfc=face, mec=color[s], ecolor=color[s], mew=1.6, capsize=3,
                    label=f"{s} (n={g['run'].nunique()})")
    ax.set_xscale("log")
    ax.legend(fontsize=8)
    figs.save(fig, "nll_vs_flops.png", "The paper's Figure 2: mean NLL over all serving depths "
              "against modeled training FLOPs; small markers are runs, large ones the mean over "
              "seeds with SD bars. Circles are fixed-first arms (filled: the shortest fixed phase "
              "in this report; open: longer ones), squares every other arm.")


def _text_sections(figs, ev: pd.DataFrame, color: dict, reference: str | None, tables, notes,
                   files: dict[str, str], curves: pd.DataFrame | None = None) -> None:
    """A text corpus's report: validation NLL and bits per byte against serving depth per
    schedule (the paper's Figure 8 style), the schedules' summary, the comparisons decided in
    advance on NLL averaged over serving depths, and the findings table."""
    va = _final(ev)
    va = va[va["split"] == "validation"]
    if va.empty:
        raise UserError("the text eval rows hold no validation split; evaluate the runs with "
                        "`depthbench eval`")
    cloze = "cloze_accuracy" in va.columns and va["cloze_accuracy"].notna().all()
    mi = cloze and "cloze_accuracy_mi" in va.columns and va["cloze_accuracy_mi"].notna().all()
    for value, label, name in (("nll", "validation NLL (nats/token)", "nll_vs_depth.png"),
                               ("bits_per_byte", "bits per byte", "bpb_vs_depth.png"),
                               *((("cloze_accuracy", "cloze accuracy (4 choices)",
                                   "cloze_vs_depth.png"),) if cloze else ()),
                               *((("cloze_accuracy_mi", "cloze accuracy, mutual information "
                                   "(4 choices)", "cloze_mi_vs_depth.png"),) if mi else ())):
        fig, ax = figs.new(f"{label} vs serving depth", "serving depth K", label)
        _ci_lines(ax, va, value, color)
        ax.legend(fontsize=8)
        figs.save(fig, name, f"{label} on the validation split at every serving depth, final "
                  "checkpoints; lines: mean over seeds, bands: 95% t-interval over seeds.")
    ref = _reference(va["schedule"], reference)
    re, clock = _with_train_time(va)
    term = _terminal_nll(curves)
    deepest = int(re["depth"].max())
    per = re.groupby(["run", "schedule"]).apply(lambda g: pd.Series({
        "mean_nll": g["nll"].mean(), "deep_nll": g.loc[g["depth"].idxmax(), "nll"],
        "best_depth": g.loc[g["nll"].idxmin(), "depth"], "bpb": g["bits_per_byte"].mean(),
        "cloze": g["cloze_accuracy"].mean() if cloze else np.nan,
        "cloze_mi": g["cloze_accuracy_mi"].mean() if mi else np.nan,
        "flops": g["modeled_train_flops"].iloc[0], "time": g["train_time"].iloc[0]}),
        include_groups=False).reset_index()
    per["terminal"] = [term.get(r, np.nan) for r in per["run"]]
    ref_flops = per.loc[per["schedule"] == ref, "flops"].mean() if ref else np.nan
    summary = pd.DataFrame([{
        "schedule": sch, "seeds": len(g),
        f"terminal training NLL (final {100 * TERMINAL_SHARE:.0f}% of updates)":
            _fmt(g["terminal"].mean(), g["terminal"].std()),
        "mean serving NLL": _fmt(g["mean_nll"].mean(), g["mean_nll"].std()),
        f"NLL at depth {deepest}": _fmt(g["deep_nll"].mean(), g["deep_nll"].std()),
        "bits per byte, mean over depths": _fmt(g["bpb"].mean(), g["bpb"].std()),
        "depth of lowest NLL (per seed)": ", ".join(str(int(d)) for d in g["best_depth"]),
        **({"cloze accuracy, mean over depths (chance 0.25)": _fmt(g["cloze"].mean(),
                                                                   g["cloze"].std())}
           if cloze else {}),
        **({"cloze accuracy by mutual information, mean over depths (chance 0.25)":
            _fmt(g["cloze_mi"].mean(), g["cloze_mi"].std())} if mi else {}),
        f"modeled FLOPs (% of {ref or 'reference'})": _fmt(100 * g["flops"].mean() / ref_flops,
                                                           100 * g["flops"].std() / ref_flops, 1),
        f"train {clock} s/run": f"{g['time'].mean():.0f}"} for sch, g in per.groupby("schedule")])
    tables.append(("Schedules on the validation split (mean ± SD over seeds, final checkpoints)",
                   summary))
    ci = mean_ci(re, ["depth", "schedule"], "nll")
    ci["cell"] = [f"{m:.3f} ± {h:.3f}" if np.isfinite(h) else f"{m:.3f}"
                  for m, h in zip(ci["mean"], ci["ci95"])]
    tables.append(("Validation NLL by serving depth (mean ± 95% CI half-width over seeds)",
                   ci.pivot_table(index="depth", columns="schedule", values="cell",
                                  aggfunc="first").reset_index()))
    comparisons = _comparisons(re, reference, "nll")
    if not comparisons.empty:
        notes += _comparison_words(comparisons, "validation NLL",
                                   ("has higher NLL", "has lower NLL"))
        tables.append(("Comparisons decided in advance: each schedule minus the reference on "
                       "validation NLL averaged over serving depths (the claim), and over depths "
                       "1-3 (described); paired 95% t-interval and exact sign-flip p over seeds, "
                       f"Holm-corrected; equivalent within ±{EQUIVALENCE_MARGIN:g} nats",
                       _comparison_table(comparisons)))
    files["findings.md"] = _text_findings(re, per, deepest, mi)


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


def _task_section(figs, tk: pd.DataFrame, color: dict) -> tuple[str, pd.DataFrame]:
    """Downstream tasks across serving depths (the paper's Figure 3, bottom): accuracy against
    depth per task and schedule, and its Table 4: per schedule and task the accuracy averaged
    over depths and at the deepest depth, mean ± SD over seeds."""
    tk = _final(tk).copy()
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
        _ci_lines(ax, tk[tk["task"] == t], "acc", color)
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
        "seeds": len(g), "depth-averaged accuracy": _fmt(g["avg"].mean(), g["avg"].std()),
        f"accuracy at K={deepest}": _fmt(g["deep"].mean(), g["deep"].std())}),
        include_groups=False).reset_index()
    return ("Table 4: downstream accuracy, depth-averaged and at the deepest depth (mean ± SD "
            "over seeds)", table)


def _fig_fixed(figs, re: pd.DataFrame, color: dict) -> None:
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


def _with_train_time(re: pd.DataFrame) -> tuple[pd.DataFrame, str]:
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
    re, clock = _with_train_time(re)
    runs = re.groupby(["run", "schedule"]).agg(flops=("modeled_train_flops", "first"),
                                               wall=("train_time", "first")).reset_index()
    ref_flops = runs.loc[runs["schedule"] == ref, "flops"].mean() if ref else np.nan
    ceiling = float(re["ceiling_bits"].iloc[0])
    head = (["schedule", "seeds"] + [f"depth {d}: bits (EM)" for d in depths]
            + [f"modeled FLOPs (% of {ref})" if ref else "modeled FLOPs", f"train {clock} s/run"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    floor = _floor(re, "floor_bits_per_person")
    if floor is not None:
        em = _floor(re, "floor_exact_match")
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


# the paper's terminal NLL: training NLL over the final 200 of about 4,800 updates
TERMINAL_SHARE = 0.04


def _terminal_nll(curves: pd.DataFrame | None) -> dict:
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
    re, clock = _with_train_time(re)
    terminal = _terminal_nll(curves)
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
                _fmt(g["terminal_nll"].mean(), g["terminal_nll"].std()),
            "mean serving NLL": _fmt(g["mean_serving_nll"].mean(), g["mean_serving_nll"].std()),
            f"modeled FLOPs (% of {ref_name})": _fmt(100 * g["flops"].mean() / ref_flops,
                                                    100 * g["flops"].std() / ref_flops, 1),
            f"{clock} time reduction vs {ref_name} (%)":
                _fmt(100 * (1 - g["wall"].mean() / ref_wall), 100 * g["wall"].std() / ref_wall, 1),
            "exact match at max depth": _fmt(g["exact_match"].mean(), g["exact_match"].std()),
            "exact match, mean over depths": _fmt(g["mean_exact_match"].mean(),
                                                  g["mean_exact_match"].std()),
            "best bits/person": _fmt(g["best_bits"].mean(), g["best_bits"].std(), 1),
            "best unfloored bits/person": _fmt(g["best_unfloored"].mean(),
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


def run_report(cfg: ReportConfig) -> list[Path]:
    """The report stage."""
    return build_report([Path(r) for r in cfg.results], cfg.out, cfg.title, cfg.reference or None)


def build_report(paths: list[Path], out: str | Path, title: str = "depthbench report",
                 reference: str | None = None) -> list[Path]:
    out = Path(out)
    for p in map(Path, paths):
        if p.exists() and (out.resolve() == p.resolve() or out.resolve() in p.resolve().parents):
            raise UserError(f"--out {out} would replace the result rows {p}; choose another --out")
    check_replaceable(out, "report")
    rows = load_rows(paths)
    with replaced_dir(out, "report") as tmp:
        names = _build(rows, tmp, title, reference, paths)
    return [out / n for n in names]


def arm_label(schedule: str, matched_to) -> str:
    """A FLOP-matched run's arm, told apart from its schedule's full-budget runs:
    ``uniform:1-16~fixed-first:0.67:4:1-16`` is uniform:1-16 at the FLOPs of the schedule
    after "~" (the paper's "Uniform, matched")."""
    return f"{schedule}~{matched_to}" if isinstance(matched_to, str) and matched_to else schedule


CURVE_POINTS = 100  # a committed training curve keeps about this many points per run


def _row_files(rows: dict) -> dict[str, str]:
    """The rows a report is drawn from, as ``rows/KIND.csv`` beside it, so that every number
    in it can be recomputed (``depthbench report REPORT/rows``): every row, except that a
    training curve keeps about CURVE_POINTS points per run and all of its final updates (the
    terminal NLL's window)."""
    out = {}
    for kind, df in rows.items():
        if kind == "curve":
            keep = []
            for _, g in df.groupby("run", sort=False):
                g = g.sort_values("step")
                last = g["step"].max()
                stride = max(1, len(g) // CURVE_POINTS)
                final = (g["step"] > last * (1 - 2 * TERMINAL_SHARE)).to_numpy()
                mask = (np.arange(len(g)) % stride == 0) | final
                keep.append(g[mask])
            df = pd.concat(keep, ignore_index=True)
        out[f"rows/{kind}.csv"] = df.to_csv(index=False)
    return out


def labelled(rows: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The rows with each matched run's schedule named as its arm (``arm_label``); a new dict,
    the caller's is left as it was."""
    out = {}
    for kind, df in rows.items():
        if "matched_to" in df.columns and "schedule" in df.columns:
            df = df.assign(schedule=[arm_label(s, m) for s, m in
                                     zip(df["schedule"], df["matched_to"])])
        out[kind] = df
    return out


def _build(rows: dict, out: Path, title: str, reference: str | None, paths) -> list[str]:
    committed = _row_files(rows)
    rows = labelled(rows)
    figs = _Figures(out)
    schedules = set()
    for df in rows.values():
        if "schedule" in df.columns:
            schedules |= set(df["schedule"].dropna())
    color = _colors(schedules)
    tables: list[tuple[str, pd.DataFrame]] = []
    notes: list[str] = []
    files: dict[str, str] = dict(committed)  # extra text files: name -> content
    if rows.get("eval") is not None and "bits_per_byte" in rows["eval"].columns:
        _text_sections(figs, rows["eval"], color, reference, tables, notes, files,
                       rows.get("curve"))
    elif rows.get("eval") is not None:
        _eval_sections(figs, rows["eval"], color, reference, tables, notes, files,
                       rows.get("curve"))
    if rows.get("curve") is not None:
        _fig_curves(figs, rows["curve"], color)
    if rows.get("probe") is not None:
        _fig_probe(figs, rows["probe"])
    if rows.get("task") is not None:
        tables.append(_task_section(figs, rows["task"], color))
    if rows.get("serve") is not None:
        tables.append(_serve_section(figs, rows["serve"]))
    if rows.get("stage") is not None:
        tables.append(_stage_table(rows["stage"]))
    return _write(out, title, figs.items, tables, paths, notes, files)


def busy_seconds(started: pd.Series, finished: pd.Series) -> float:
    """Wall seconds during which at least one stage ran: the union of the stages' intervals, so
    that the idle time between two invocations of a resumed grid is not counted (nan if the
    rows hold no interval)."""
    spans = sorted((float(a), float(b)) for a, b in zip(started, finished) if a == a and b == b)
    if not spans:
        return float("nan")
    total, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            total, lo = total + hi - lo, a
        hi = max(hi, b)
    return total + hi - lo


def grid_clock(st: pd.DataFrame) -> dict:
    """How long a ``depthbench run`` grid took, from its stage rows: wall seconds while a stage
    ran (``busy_seconds``; the report stage aside), the pool's workers,
    the seconds its stages ran, summed per command, and the largest peak resident memory of
    a process that ran them (MB; None where the rows do not say)."""
    def col(name):
        return (pd.to_numeric(st[name], errors="coerce") if name in st
                else pd.Series(float("nan"), index=st.index))
    workers, rss = col("workers").dropna().unique(), col("peak_rss_mb").max()
    return {"wall_s": busy_seconds(col("started"), col("finished")),
            "workers": int(workers[0]) if len(workers) == 1 else None,
            "peak_rss_mb": None if pd.isna(rss) else float(rss),
            "stage_s": {c: float(v) for c, v in col("stage_s").groupby(st["command"]).sum().items()},
            "stages": {c: int(v) for c, v in st["command"].value_counts().items()}}


def _stage_table(st: pd.DataFrame) -> tuple[str, pd.DataFrame]:
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


def _fig_curves(figs, cur: pd.DataFrame, color: dict) -> None:
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


def _fig_probe(figs, pr: pd.DataFrame) -> None:
    """The paper's Figure 4: left, the benefit of a depth-b over a depth-a update across serving
    depths at the first two probe points (0 and 16 updates after the switch); right, the benefit
    averaged over serving depths at every probe point, mean and 95% CI over seeds (each seed's
    own run is one observation: its interval over batches is not the uncertainty of the mean)."""
    a, b = int(pr["depth_a"].iloc[0]), int(pr["depth_b"].iloc[0])
    key = "updates_after_switch" if "updates_after_switch" in pr.columns and \
        pr["updates_after_switch"].notna().all() else "step"
    fig, (left, right) = figs.plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    fig.suptitle(f"Update-benefit probe: one update at depth {b} vs depth {a}", fontsize=11)
    points = sorted(pr[key].unique())
    for i, k in enumerate(points[:2]):
        g = pr[pr[key] == k]
        ci = mean_ci(g.groupby(["seed", "depth"], as_index=False)["nll_diff"].mean()
                     if "seed" in g.columns and g["seed"].notna().all() else g.assign(seed=0),
                     ["depth"], "nll_diff")
        left.errorbar(ci["depth"], ci["mean"], yerr=ci["ci95"].fillna(0), fmt="-o", ms=3,
                      color=PALETTE[i], capsize=2, label=f"{key.replace('_', ' ')} = {k:g}")
    left.set_xlabel("serving depth K")
    left.set_ylabel(f"NLL(update at {a}) - NLL(update at {b})")
    per_seed = pr.groupby([key, "seed"] if "seed" in pr.columns else [key])["nll_diff"].mean()
    avg = mean_ci(per_seed.reset_index(), [key], "nll_diff")
    right.errorbar(avg[key], avg["mean"], yerr=avg["ci95"].fillna(0), fmt="-o", color="k",
                   capsize=3)
    right.set_xscale("symlog", linthresh=16)
    right.set_xticks(points, [f"{p:g}" for p in points])
    right.set_xlabel(key.replace("_", " "))
    right.set_ylabel("benefit averaged over serving depths")
    for ax in (left, right):
        ax.axhline(0, color="k", lw=1)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    figs.save(fig, "update_probe.png", f"One optimizer update at depth {b} vs one at depth {a} "
              "from the same checkpoint and batch (positive: the depth-"
              f"{b} update lowered the NLL more). Left: per serving depth at the first two probe "
              "points; right: averaged over serving depths at every probe point. Mean and 95% "
              "CI over seeds.")


def _serve_section(figs, sv: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    for c in ("speedup", "ceiling"):
        if c in sv.columns and not np.isfinite(pd.to_numeric(sv[c], errors="coerce")).all():
            raise UserError(f"serve rows: column {c} must hold finite numbers; regenerate them "
                            "with depthbench")
    if not {"speedup", "ceiling"} <= set(sv.columns):   # no static baseline ran
        cols = [c for c in ("mode", "tokens_per_s", "mean_depth", "rows_per_launch", "padding_waste",
                            "ttft_p50_ms", "itl_p50_ms", "itl_p99_ms", "exact_match") if c in sv.columns]
        return ("Serving benchmark (no static baseline among the modes: tokens/s only)",
                sv[cols].round(3))
    fig, ax = figs.new("Realized speedup vs FLOP ceiling per batching mode", "batching mode",
                       "speedup over static")
    x = np.arange(len(sv))
    achievable = "achievable_bound" in sv.columns
    w = 0.27 if achievable else 0.4
    ax.bar(x - w / 2 * (2 if achievable else 1), sv["speedup"], w, label="realized", color="#1f77b4")
    if achievable:
        ax.bar(x, sv["achievable_bound"], w, label="achievable bound", color="#7fb3d5")
    ax.bar(x + w / 2 * (2 if achievable else 1), sv["ceiling"], w, label="FLOP ceiling",
           color="#bbbbbb")
    ax.set_xticks(x, sv["mode"])
    ax.axhline(1, color="k", lw=1)
    ax.legend(fontsize=8)
    figs.save(fig, "serving_speedup.png", "Tokens/s over the static baseline for each batching "
              "mode, next to " + ("the achievable bound (prefill of every prompt token at full "
                                  "depth and each token's prelude, coda and head are shared "
                                  "work) and " if achievable else "")
              + "the FLOP ceiling (F0 + K_max Fr) / (F0 + mean depth Fr).")
    cols = [c for c in ("mode", "tokens_per_s", "speedup", "achievable_bound",
                        "achievable_fraction", "steady_achievable_fraction", "ceiling",
                        "fraction_of_ceiling", "fraction_of_gain", "mean_depth",
                        "rows_per_launch", "padding_waste", "ttft_p50_ms", "itl_p50_ms",
                        "itl_p99_ms", "exact_match") if c in sv.columns]
    return ("Serving benchmark", sv[cols].round(3))


def _write(out: Path, title: str, figures, tables, sources, notes=(), files=None) -> list[str]:
    files = files or {}
    for name, text in files.items():
        atomic_write_text(out / name, text)
    sources = [str(x) for x in sources]
    where = ", ".join(f"`{x}`" for x in sources) if len(sources) <= 3 else \
        f"{len(sources)} result files under `{os.path.commonpath(sources)}`"
    md = [f"# {title}", "", f"Generated by `depthbench report` from result rows: {where}.", ""]
    body = [f"<h1>{html.escape(title)}</h1>"]
    if notes:
        md += ["## Paired comparisons", ""] + [f"- {n}" for n in notes] + [""]
        body += ["<h2>Paired comparisons</h2><ul>"] + [f"<li>{html.escape(n)}</li>" for n in notes] \
            + ["</ul>"]
    for name, df in tables:
        md += [f"## {name}", "", df.to_markdown(index=False), ""]
        body += [f"<h2>{html.escape(name)}</h2>", df.to_html(index=False, border=0, classes="t")]
    md.append("## Figures")
    body.append("<h2>Figures</h2>")
    for name, caption in figures:
        md += ["", f"![{caption}]({name})", "", f"*{caption}*"]
        body += [f'<figure><img src="{name}" alt="{html.escape(caption)}">'
                 f"<figcaption>{html.escape(caption)}</figcaption></figure>"]
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(title)
            + "</title><style>body{font-family:sans-serif;max-width:960px;margin:2em auto}"
            "table.t{border-collapse:collapse;font-size:13px;margin-bottom:1.5em}"
            "table.t td,table.t th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}"
            "figure{margin:1.5em 0}img{max-width:100%}figcaption{font-size:13px;color:#444}"
            "</style></head><body>" + "\n".join(body) + "</body></html>\n")
    atomic_write_text(out / "index.html", page)
    atomic_write_text(out / "README.md", "\n".join(md) + "\n")
    atomic_write_text(out / "report.json", json.dumps(
        {"title": title, "figures": [f for f, _ in figures], "tables": [t for t, _ in tables],
         "paired_comparisons": list(notes), "files": sorted(files)},
        indent=2) + "\n")
    return ["index.html", "README.md"] + list(files) + [f for f, _ in figures]


def _spans(depths: list[int]) -> str:
    """[1, 2, 5, 6, 7] -> '1-2, 5-7'."""
    out, start = [], None
    for i, d in enumerate(depths):
        if start is None:
            start = d
        if i + 1 == len(depths) or depths[i + 1] != d + 1:
            out.append(f"{start}-{d}" if d != start else f"{d}")
            start = None
    return ", ".join(out)


def _per_depth_words(re: pd.DataFrame, r) -> str:
    """Where the per-depth paired interval on bits per person excludes 0 for one comparison
    (description beside its verdict, not a second test)."""
    g = re[re["budget"] == r["budget"]] if pd.notna(r["budget"]) else re
    d = paired_differences(g[g["schedule"].isin([r["schedule"], r["reference"]])],
                           "bits_per_person", r["reference"])
    if d.empty:
        return ""
    up = sorted(int(x) for x in d.loc[d["sign"] > 0, "depth"])
    down = sorted(int(x) for x in d.loc[d["sign"] < 0, "depth"])
    def at(ds):
        return f"depth{'s' if len(ds) > 1 else ''} {_spans(ds)}"
    parts = ([f"above at {at(up)}"] if up else []) + ([f"below at {at(down)}"] if down else [])
    return ("Per depth, the paired interval on bits per person lies "
            + (" and ".join(parts) if parts else "across 0 at every depth") + ".")


def summarize(rows: dict[str, pd.DataFrame], reference: str | None = None) -> dict:
    """What the results pages say of one report, computed from its rows by the same functions
    that draw the report (``depthbench.docs``): its arms and seeds, the comparisons decided in
    advance with their verdicts, the best seed-mean reading as a share of the ceiling per split,
    the findings table and the grid's wall clock."""
    rows = labelled(rows)
    ev = rows.get("eval")
    out = {"kind": "none", "reading": "-", "arms": [], "seeds": 0, "comparisons": [], "sentences": [],
           "best_share": {}, "findings": "", "wall_s": None}
    st = rows.get("stage")
    if st is not None and not st.empty:
        out["wall_s"] = grid_clock(st)["wall_s"]
    if ev is None or ev.empty:
        return out
    fin = _final(ev)
    out["arms"] = sorted(map(str, fin["schedule"].unique()))
    out["seeds"] = int(fin.groupby("schedule")["seed"].nunique().max())
    if "bits_per_byte" in fin.columns and fin["bits_per_byte"].notna().any():
        out["kind"] = "text"
        return out
    out["kind"] = "synthetic"
    # rows from before dataset format 4 scored every fact of a row, teacher-forced after the
    # person's earlier values; they carry no name-blind oracle
    out["reading"] = ("name only" if "name_blind_bits_per_person" in fin.columns
                      and fin["name_blind_bits_per_person"].notna().any()
                      else "record completion (before the name-only reading)")
    re = fin[fin["split"] == "eval_reordered"]
    c = _comparisons(re, reference)
    if not c.empty:
        prim = c[c["summary"] == "primary"]
        out["comparisons"] = [{**{k: (None if isinstance(v, float) and np.isnan(v) else v)
                                  for k, v in r.items()}, "verdict": _verdict(r)}
                              for _, r in prim.iterrows()]
        out["sentences"] = [f"{w} {_per_depth_words(re, r)}" for w, (_, r) in
                            zip(_comparison_words(c), prim.iterrows())]
    for split, g in fin.groupby("split"):
        if split == "eval_unseen_people":
            continue
        keys = ["schedule", "depth"] + (["budget"] if "budget" in g.columns and
                                        g["budget"].notna().any() else [])
        best = g.groupby(keys)["bits_per_person"].mean().max()   # a seed mean of one arm
        out["best_share"][split] = float(best / g["ceiling_bits"].mean())
    full = re[re["budget"] == re["budget"].max()] if "budget" in re.columns and \
        re["budget"].notna().any() else re
    out["findings"] = _findings(full, _reference(full["schedule"], reference))
    return out
