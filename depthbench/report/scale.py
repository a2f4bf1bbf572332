"""The scale axis of Table 3 (``depthbench scale-report``): several text grids, one per model
size or training length, each read on its own paired seeds, and the fixed-first gap on mean
serving NLL drawn against parameters and against modeled training FLOPs, beside the paper's
published gaps.

Each grid is one point per arm: its relative difference against uniform:1-16 on mean serving
NLL (``compare.nll_comparisons``: paired per seed, 95% t-interval, TOST against ±0.5%), and
beside it whether the grid's uniform model uses its depth (the calibration's criterion, read per
seed: the NLL gain from serving depth 4 to 16, and from 1 to 4, each at least ``DEPTH_SDS``
SDs of its per-seed values). The trend is decided by a rule fixed before the grids ran
(``TREND_RULE``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from depthbench.errors import UserError
from depthbench.report.calibration_text import RATIO as DEPTH_SDS  # the calibration's criterion
from depthbench.report.compare import NLL_BAND, NLL_BAND_WIDE, nll_comparisons
from depthbench.report.figures import reference_of
from depthbench.report.load import final_rows, labelled, load_rows

ROLES = {"fixed-first:0.67:4:1-16": "fixed-first 67%", "fixed-first:0.8:4:1-16": "fixed-first 80%"}
MATCHED = "uniform, FLOP-matched"

# The paper's Table 3 (200M parameters, 3 seeds): each arm's mean serving NLL against uniform.
# Its FLOPs are not in that table; its points are drawn at the modeled training FLOPs of
# depthbench's paper-200m spec's uniform arm (PAPER_FLOPS_NOTE), an assumption said beside them.
PAPER_PARAMS = 200e6
PAPER_GAPS = {"fixed-first 67%": 0.0009, "fixed-first 80%": 0.0052, MATCHED: 0.0511}
PAPER_FLOPS_NOTE = ("the paper's points are drawn at the modeled training FLOPs of depthbench's "
                    "paper-200m spec (uniform:1-16, 20,000 steps of 512 sequences of 512 "
                    "tokens): the paper's Table 3 does not give its runs' FLOPs")

TREND_RULE = ("decided before the grids ran: at the training length most grids share, an arm's "
              "difference from uniform **falls with size** where its 95% interval at the largest "
              "size lies wholly below its interval at the smallest, **rises with size** where it "
              "lies wholly above, and is **not resolved** where the two intervals overlap")


def role(schedule: str) -> str | None:
    """The arm a schedule plays on the scale axis: fixed-first 67%/80%, the FLOP-matched uniform
    run, or None (the reference, or a schedule the axis does not draw)."""
    if "~" in schedule:
        return MATCHED
    return ROLES.get(schedule)


def paper_flops() -> float:
    """The modeled training FLOPs of the paper-200m spec's uniform:1-16 arm (PAPER_FLOPS_NOTE)."""
    from depthbench.config.model import model_preset
    from depthbench.flops import FlopModel, schedule_flops
    from depthbench.schedules import parse_schedule
    seq, batch, steps = 512, 512, 20000
    return schedule_flops(FlopModel.of(model_preset("paper-200m"), seq),
                          parse_schedule("uniform:1-16"), steps, 0, batch * seq)


def depth_use(va: pd.DataFrame, ref: str) -> dict:
    """Whether the reference arm uses its depth: per seed, NLL at serving depth 4 minus depth 16
    and depth 1 minus depth 4; each gain's mean and its mean over its per-seed SD."""
    u = va[va["schedule"] == ref].pivot_table(index="seed", columns="depth", values="nll")
    out = {}
    for name, a, b in (("gain4_16", 4, 16), ("gain1_4", 1, 4)):
        if a not in u.columns or b not in u.columns:
            raise UserError(f"the grid's {ref} rows hold no serving depth {a} or {b}; the scale "
                            "axis reads depths 1, 4 and 16 (eval depths '1-16')")
        g = (u[a] - u[b]).to_numpy()
        sd = g.std(ddof=1) if len(g) > 1 else np.nan
        out[name], out[name + "_sds"] = float(g.mean()), float(g.mean() / sd) if sd > 0 else np.nan
    out["depth_used"] = bool(out["gain4_16_sds"] >= DEPTH_SDS and out["gain1_4_sds"] >= DEPTH_SDS)
    out["best_depth"] = int(u.mean().idxmin())
    return out


def grid_point(path) -> pd.DataFrame:
    """One grid's rows on the scale axis: one row per compared arm."""
    rows = labelled(load_rows([path]))
    ev = rows.get("eval")
    if ev is None or "bits_per_byte" not in ev.columns:
        raise UserError(f"{path} holds no text eval rows; the scale axis reads text grids "
                        "(a report's rows/ or a run's results/)")
    va = final_rows(ev)
    va = va[va["split"] == "validation"]
    params = va["params"].unique()
    if len(params) != 1:
        raise UserError(f"{path} holds models of {len(params)} sizes; give one grid per size")
    ref = reference_of(va["schedule"], None)
    if ref is None:
        raise UserError(f"{path} holds no uniform arm to compare with")
    c = nll_comparisons(va, ref, "nll")
    c = c[[role(s) is not None for s in c["schedule"]]].copy()
    if c.empty:
        raise UserError(f"{path} holds no fixed-first or FLOP-matched arm beside {ref}")
    flops = va.groupby("schedule")["modeled_train_flops"].mean()
    steps = va.groupby("schedule")["step"].max()
    c["role"] = [role(s) for s in c["schedule"]]
    c["params"] = int(params[0])
    c["steps"] = int(steps[ref])
    c["flops"] = [float(flops[s]) for s in c["schedule"]]
    c["reference_flops"] = float(flops[ref])
    c["source"] = str(path)
    for k, v in depth_use(va, ref).items():
        c[k] = v
    return c


def scale_points(paths) -> pd.DataFrame:
    """Every grid's points; two grids of the same size and length are refused (a seed is never
    counted twice)."""
    pts = pd.concat([grid_point(p) for p in paths], ignore_index=True)
    dup = pts.drop_duplicates(["source"]).duplicated(["params", "steps"])
    if dup.any():
        raise UserError("two grids share a model size and training length; give each once")
    return pts.sort_values(["steps", "params", "role"]).reset_index(drop=True)


def trend(pts: pd.DataFrame) -> pd.DataFrame:
    """TREND_RULE per arm, at the training length most grids share."""
    length = pts.drop_duplicates("source")["steps"].mode().max()
    at = pts[pts["steps"] == length]
    rows = []
    for r, g in at.groupby("role", sort=False):
        g = g.sort_values("params")
        small, large = g.iloc[0], g.iloc[-1]
        if len(g) < 2 or not (np.isfinite(small["hi"]) and np.isfinite(large["hi"])):
            verdict = "not resolved (fewer than two sizes with an interval)"
        elif large["hi"] < small["lo"]:
            verdict = "falls with size"
        elif large["lo"] > small["hi"]:
            verdict = "rises with size"
        else:
            verdict = "not resolved (the intervals overlap)"
        rows.append({"arm": r, "steps": int(length), "sizes": len(g),
                     "smallest": int(small["params"]), "largest": int(large["params"]),
                     "span": round(large["params"] / small["params"], 1),
                     "at smallest": _pct(small), "at largest": _pct(large), "verdict": verdict})
    return pd.DataFrame(rows)


def _pct(r) -> str:
    ci = f" [{100 * r['lo']:+.2f}, {100 * r['hi']:+.2f}]" if np.isfinite(r["hi"]) else ""
    return f"{100 * r['diff']:+.2f}%{ci}"


def points_table(pts: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "parameters": pts["params"], "steps": pts["steps"], "arm": pts["role"],
        "seeds": pts["seeds"], "modeled train FLOPs": [f"{f:.3g}" for f in pts["flops"]],
        "uniform NLL": pts["reference_nll"].round(4),
        "difference from uniform [95% CI]": [_pct(r) for _, r in pts.iterrows()],
        f"TOST p (±{100 * NLL_BAND:g}%)": pts["tost_p"].round(4), "verdict": pts["verdict"],
        f"verdict at ±{100 * NLL_BAND_WIDE:g}%": pts["verdict_wide"]})


def depth_table(pts: pd.DataFrame) -> pd.DataFrame:
    g = pts.drop_duplicates("source")
    return pd.DataFrame({
        "parameters": g["params"], "steps": g["steps"], "seeds": g["seeds"],
        "uniform's lowest-NLL depth": g["best_depth"],
        "NLL gain, depth 4 -> 16 (nats)": g["gain4_16"].round(4),
        "per-seed SDs": g["gain4_16_sds"].round(1),
        "NLL gain, depth 1 -> 4 (nats)": g["gain1_4"].round(4),
        "per-seed SDs (1 -> 4)": g["gain1_4_sds"].round(1),
        f"depth used ({DEPTH_SDS:g} SDs each)": ["yes" if u else "no" for u in g["depth_used"]],
        "grid": g["source"]})


ROLE_COLORS = {"fixed-first 67%": "#1f77b4", "fixed-first 80%": "#d62728", MATCHED: "#7f7f7f"}


def _fig_gap(figs, pts: pd.DataFrame, paper_x: float, x: str, xlabel: str, name: str,
             caption: str) -> None:
    """Each arm's difference from uniform (%, 95% interval) against ``x``, one line per arm and
    training length; the paper's gaps as open stars at ``paper_x``; the ±0.5% band shaded."""
    fig, ax = figs.new(f"Difference from uniform:1-16 on mean serving NLL vs {xlabel}", xlabel,
                       "mean serving NLL vs uniform (%)")
    ax.axhspan(-100 * NLL_BAND, 100 * NLL_BAND, color="#2ca02c", alpha=0.12,
               label=f"±{100 * NLL_BAND:g}% (the paper's band)")
    ax.axhline(0, color="black", lw=0.6)
    lengths = sorted(pts["steps"].unique())
    for r, g in pts.groupby("role", sort=False):
        for steps, h in g.groupby("steps"):
            h = h.sort_values(x)
            style = "-o" if steps == max(lengths) else "--s"
            ax.errorbar(h[x], 100 * h["diff"], yerr=[100 * (h["diff"] - h["lo"]),
                                                      100 * (h["hi"] - h["diff"])],
                        fmt=style, ms=5, capsize=3, color=ROLE_COLORS[r],
                        label=f"{r}, {steps} steps (n={int(h['seeds'].min())}-"
                              f"{int(h['seeds'].max())} seeds)")
        ax.plot([paper_x], [100 * PAPER_GAPS[r]], "*", ms=13, mfc="none", mec=ROLE_COLORS[r],
                mew=1.4, label=f"{r}, the paper (200M, 3 seeds)")
    ax.set_xscale("log")
    ax.legend(fontsize=7, loc="best")
    figs.save(fig, name, caption)


def scale_words(pts: pd.DataFrame, tr: pd.DataFrame) -> list[str]:
    """One sentence per arm's trend and one per grid on whether its model uses its depth."""
    out = [f"`{r['arm']}` at {r['steps']} steps, {r['sizes']} sizes from {r['smallest']:,} to "
           f"{r['largest']:,} parameters ({r['span']:.1f}x): {r['at smallest']} at the smallest, "
           f"{r['at largest']} at the largest: **{r['verdict']}**." for _, r in tr.iterrows()]
    for _, g in pts.drop_duplicates("source").iterrows():
        used = "uses its depth" if g["depth_used"] else "does **not** pass the depth criterion"
        out.append(f"At {g['params']:,} parameters and {g['steps']} steps uniform's model {used}: "
                   f"NLL falls {g['gain4_16']:+.4f} nats from serving depth 4 to 16 "
                   f"({g['gain4_16_sds']:.1f} per-seed SDs) and {g['gain1_4']:+.4f} from 1 to 4 "
                   f"({g['gain1_4_sds']:.1f}), {g['seeds']} seeds.")
    return out


def build_scale_report(paths, out, title: str = "Table 3 across model sizes") -> list:
    """``depthbench scale-report``: the points, the trend, the figures, into ``out``."""
    from pathlib import Path

    from depthbench.fsio import check_replaceable, replaced_dir
    from depthbench.report.build import write_page
    from depthbench.report.figures import FigureSet
    out = Path(out)
    pts = scale_points([Path(p) for p in paths])
    tr = trend(pts)
    check_replaceable(out, "report")
    with replaced_dir(out, "report") as tmp:
        figs = FigureSet(tmp)
        what = ("Each arm's paired difference from uniform:1-16 on mean serving NLL (95% "
                "t-interval over seeds) against {}; the paper's Table 3 gaps as open stars{}; "
                "dashed lines are the grids at other training lengths.")
        _fig_gap(figs, pts, PAPER_PARAMS, "params", "parameters", "gap_vs_params.png",
                 what.format("the model's parameters", " at 200M"))
        _fig_gap(figs, pts, paper_flops(), "flops", "modeled training FLOPs",
                 "gap_vs_flops.png", what.format("the arm's modeled training FLOPs",
                                                  " (" + PAPER_FLOPS_NOTE + ")"))
        tables = [("The trend, " + TREND_RULE, tr),
                  ("Every grid's arms against uniform:1-16 on mean serving NLL (paired relative "
                   f"difference; TOST against ±{100 * NLL_BAND:g}%)", points_table(pts)),
                  ("Whether each grid's uniform model uses its depth (per-seed NLL gains, "
                   f"judged at {DEPTH_SDS:g} per-seed SDs each)", depth_table(pts))]
        files = {"scale.csv": pts.drop(columns=["axis", "group"], errors="ignore")
                 .to_csv(index=False)}
        names = write_page(tmp, title, figs.items, tables, [str(p) for p in paths],
                       scale_words(pts, tr), files, "depthbench scale-report")
    return [out / n for n in names]
