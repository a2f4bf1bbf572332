"""``depthbench report``: result rows -> a self-contained ``reports/NAME/`` (index.html,
README.md, PNG figures). Reads result files only and never loads a model.

Row kinds are told apart by their columns:
    eval        run, schedule, seed, step, depth, split, nll, bits_per_person, exact_match, ...
    probe       ..., depth, nll_diff, ci95, updates_after_switch
    serve       mode, tokens_per_s, speedup, ceiling, ...
    curves      run, schedule, seed, step, K, loss, switch_step
    runs        run, schedule, seed, final_loss, modeled_train_flops, wall_clock_s
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from depthbench.checkpoint import atomic_write_text
from depthbench.errors import UserError

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
    kinds: dict[str, list[pd.DataFrame]] = {k: [] for k in ("eval", "probe", "serve", "curves", "runs")}
    for f in files:
        df = _read(f)
        if df.empty:
            continue
        cols = set(df.columns)
        if {"nll_diff", "depth"} <= cols:
            kinds["probe"].append(df)
        elif {"mode", "tokens_per_s"} <= cols:
            kinds["serve"].append(df)
        elif {"depth", "split", "bits_per_person"} <= cols:
            kinds["eval"].append(df)
        elif {"loss", "step", "K"} <= cols:
            kinds["curves"].append(df)
        elif {"final_loss", "modeled_train_flops"} <= cols:
            kinds["runs"].append(df)
    out = {k: pd.concat(v, ignore_index=True) for k, v in kinds.items() if v}
    if not out:
        raise UserError("none of the given files holds depthbench result rows")
    return out


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


def build_report(paths: list[Path], out: str | Path, title: str = "depthbench report") -> list[Path]:
    rows = load_rows(paths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figs = _Figures(out)
    ev = rows.get("eval")
    schedules = set()
    for df in rows.values():
        if "schedule" in df.columns:
            schedules |= set(df["schedule"].dropna())
    color = _colors(schedules)
    tables: list[tuple[str, pd.DataFrame]] = []

    if ev is not None:
        fin = _final(ev)
        re = fin[fin["split"] == "eval_reordered"]
        if not re.empty:
            # ---- bits per person vs serving depth ----------------------------------------------
            fig, ax = figs.new("Recalled bits per person vs serving depth (held-out order)",
                               "serving depth K", "bits per person")
            for s, g in re.groupby("schedule"):
                by = g.groupby("depth")["bits_per_person"]
                m, lo, hi = by.mean(), by.min(), by.max()
                ax.plot(m.index, m.values, "-o", ms=3, color=color[s], label=f"{s} (n={g['run'].nunique()})")
                ax.fill_between(m.index, lo.values, hi.values, color=color[s], alpha=0.18)
            ax.axhline(float(re["ceiling_bits"].iloc[0]), ls="--", color="k", lw=1, label="task ceiling")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
            figs.save(fig, "bits_vs_depth.png", "Recalled bits per person at every serving depth "
                      "(eval_reordered, final checkpoints). Lines: mean over seeds; bands: min-max "
                      "over seeds; dashed: the task ceiling.")
            # ---- NLL minus uniform -----------------------------------------------------------
            uni = [s for s in re["schedule"].unique() if str(s).startswith("uniform")]
            if uni:
                base = re[re["schedule"] == uni[0]].groupby("depth")["nll"].mean()
                fig, ax = figs.new(f"NLL difference from {uni[0]} per serving depth",
                                   "serving depth K", "NLL - NLL(uniform) [nats/token]")
                for s, g in re.groupby("schedule"):
                    if s == uni[0]:
                        continue
                    m = g.groupby("depth")["nll"].mean()
                    ax.plot(m.index, (m - base.reindex(m.index)).values, "-o", ms=3, color=color[s], label=s)
                ax.axhline(0, color="k", lw=1)
                ax.legend(fontsize=8)
                figs.save(fig, "nll_minus_uniform.png", f"Next-token NLL minus that of {uni[0]} at "
                          "each serving depth (mean over seeds; below 0 is better than uniform).")
            # ---- normalized recall of fixed-depth models ---------------------------------------
            fixed = re[re["schedule"].astype(str).str.startswith("fixed:")]
            if not fixed.empty:
                fig, ax = figs.new("Exact-match recall of fixed-depth models, normalized by peak",
                                   "serving depth K", "recall / peak recall")
                for s, g in fixed.groupby("schedule"):
                    m = g.groupby("depth")["exact_match"].mean()
                    ax.plot(m.index, (m / max(m.max(), 1e-12)).values, "-o", ms=3, color=color[s], label=s)
                    ax.axvline(int(str(s).split(":")[1]), color=color[s], ls=":", lw=1)
                ax.legend(fontsize=8)
                figs.save(fig, "fixed_depth_recall.png", "Exact-match recall across serving depths "
                          "for models trained at one fixed depth (dotted: the training depth).")
        # ---- NLL vs modeled FLOPs ------------------------------------------------------------
        mean_nll = fin[fin["split"] == "eval_reordered"].groupby(["run", "schedule"]).agg(
            nll=("nll", "mean"), flops=("modeled_train_flops", "first")).reset_index()
        if not mean_nll.empty:
            fig, ax = figs.new("Mean serving-depth NLL vs modeled training FLOPs",
                               "modeled training FLOPs", "mean NLL over serving depths")
            for s, g in mean_nll.groupby("schedule"):
                ax.scatter(g["flops"], g["nll"], color=color[s], label=s, s=30)
            ax.set_xscale("log")
            ax.legend(fontsize=8)
            figs.save(fig, "nll_vs_flops.png", "Each marker is one run: mean NLL over all serving "
                      "depths against the run's modeled training FLOPs.")

    cur = rows.get("curves")
    if cur is not None:
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

    pr = rows.get("probe")
    if pr is not None:
        a, b = int(pr["depth_a"].iloc[0]), int(pr["depth_b"].iloc[0])
        fig, ax = figs.new(f"Update-benefit probe: one update at depth {a} vs depth {b}",
                           "serving depth K", f"NLL(update at {a}) - NLL(update at {b})")
        key = "updates_after_switch" if "updates_after_switch" in pr.columns else "step"
        for i, (k, g) in enumerate(pr.groupby(key)):
            m = g.groupby("depth").agg(d=("nll_diff", "mean"), ci=("ci95", "mean"))
            c = PALETTE[i % len(PALETTE)]
            ax.errorbar(m.index, m["d"], yerr=m["ci"], fmt="-o", ms=3, color=c, capsize=2,
                        label=f"{key.replace('_', ' ')} = {k}")
        ax.axhline(0, color="k", lw=1)
        ax.legend(fontsize=8)
        figs.save(fig, "update_probe.png", f"One optimizer update at depth {a} vs one at depth {b} "
                  "from the same checkpoint and batch: NLL difference per serving depth (positive: "
                  f"the depth-{b} update helped more), mean and 95% CI over batches.")

    sv = rows.get("serve")
    if sv is not None:
        fig, ax = figs.new("Realized speedup vs FLOP ceiling per batching mode", "batching mode",
                           "speedup over static")
        x = np.arange(len(sv))
        ax.bar(x - 0.2, sv["speedup"], 0.4, label="realized", color="#1f77b4")
        ax.bar(x + 0.2, sv["ceiling"], 0.4, label="FLOP ceiling", color="#bbbbbb")
        ax.set_xticks(x, sv["mode"])
        ax.axhline(1, color="k", lw=1)
        ax.legend(fontsize=8)
        figs.save(fig, "serving_speedup.png", "Tokens/s over the static baseline for each batching "
                  "mode, next to the FLOP ceiling (F0 + K_max Fr) / (F0 + mean depth Fr).")
        cols = [c for c in ("mode", "tokens_per_s", "speedup", "ceiling", "fraction_of_ceiling",
                            "fraction_of_gain", "mean_depth", "rows_per_launch", "padding_waste",
                            "ttft_p50_ms", "itl_p50_ms", "itl_p99_ms", "exact_match") if c in sv.columns]
        tables.append(("Serving benchmark", sv[cols].round(3)))

    # ---- the summary table over seeds ------------------------------------------------------------
    if ev is not None:
        fin = _final(ev)
        re = fin[fin["split"] == "eval_reordered"]
        per_run = re.groupby(["run", "schedule"]).apply(lambda g: pd.Series({
            "terminal_nll": g.loc[g["depth"].idxmax(), "nll"],
            "mean_serving_nll": g["nll"].mean(),
            "exact_match": g.loc[g["depth"].idxmax(), "exact_match"],
            "best_bits": g["bits_per_person"].max(),
            "flops": g["modeled_train_flops"].iloc[0],
            "wall": g["wall_clock_s"].iloc[0] if "wall_clock_s" in g else np.nan,
        }), include_groups=False).reset_index()
        uni = per_run[per_run["schedule"].astype(str).str.startswith("uniform")]
        uni_flops = uni["flops"].mean() if not uni.empty else np.nan
        uni_wall = uni["wall"].mean() if not uni.empty else np.nan
        summary = []
        for s, g in per_run.groupby("schedule"):
            summary.append({
                "schedule": s, "seeds": len(g),
                "terminal NLL": _fmt(g["terminal_nll"].mean(), g["terminal_nll"].std()),
                "mean serving NLL": _fmt(g["mean_serving_nll"].mean(), g["mean_serving_nll"].std()),
                "modeled FLOPs (% of uniform)": _fmt(100 * g["flops"].mean() / uni_flops,
                                                     100 * g["flops"].std() / uni_flops, 1),
                "wall-clock reduction vs uniform (%)": _fmt(100 * (1 - g["wall"].mean() / uni_wall),
                                                            100 * g["wall"].std() / uni_wall, 1),
                "exact match at max depth": _fmt(g["exact_match"].mean(), g["exact_match"].std()),
                "best bits/person": _fmt(g["best_bits"].mean(), g["best_bits"].std(), 1),
            })
        tables.insert(0, ("Schedules (mean ± SD over seeds, eval_reordered, final checkpoints)",
                          pd.DataFrame(summary)))
        depth_tab = re.pivot_table(index="depth", columns="schedule", values="bits_per_person",
                                   aggfunc="mean").round(1)
        tables.insert(1, ("Recalled bits per person by serving depth (mean over seeds)",
                          depth_tab.reset_index()))
        ctrl = fin[fin["split"] == "eval_unseen_people"]
        if not ctrl.empty:
            tables.append(("Control: unseen people (recalled bits must be about 0)",
                           ctrl.groupby("schedule")["bits_per_person"].agg(["mean", "max"]).round(2)
                           .reset_index()))

    files = _write(out, title, figs.items, tables, paths)
    return files


def _write(out: Path, title: str, figures, tables, sources) -> list[Path]:
    md = [f"# {title}", "", "Generated by `depthbench report` from result rows: "
          + ", ".join(f"`{s}`" for s in sources) + ".", ""]
    body = [f"<h1>{html.escape(title)}</h1>"]
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
        {"title": title, "figures": [f for f, _ in figures], "tables": [t for t, _ in tables]},
        indent=2) + "\n")
    return [out / "index.html", out / "README.md"] + [out / f for f, _ in figures]
