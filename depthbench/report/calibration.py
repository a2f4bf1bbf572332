"""The calibration page (``docs/calibration.md``), generated from the calibration recipes' rows.

Each recipe is a packaged spec, ``depthbench/experiments/calibration/NAME.toml``, run as
``depthbench run calibration/NAME --out runs/calibration/NAME``; its report's eval and run rows
are kept in ``docs/calibration/rows/NAME/``. The page states each recipe as its spec gives it,
each arm's readings against the calibration's criteria (``report.spread``), and the findings,
every number of which is read here from those rows (``findings``).

A recipe whose pipeline rows are not kept yet reads the rows the calibration script wrote
before the recipes became specs (``docs/calibration/runs.jsonl``, one JSON object per run with
its readings at serving depths 1-16), reshaped here into eval rows; the page names which rows
each recipe reads. The rows of the earlier readings (``before-*.jsonl``) are kept as the record,
with the prose written from them then (``before-name-only.md``).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from depthbench.report.load import final_rows, labelled, load_rows
from depthbench.report.spread import (
    ABOVE_BRACKETS,
    MAX_SD,
    MAX_SHARE,
    WORST_OF_MEDIAN,
    above_brackets,
)
from depthbench.runtime import CPU_COMPILE_MIN_STEPS
from depthbench.stats import sign_flip_p, t_interval

SPECS = Path(__file__).resolve().parents[1] / "experiments" / "calibration"
SCRIPT_ROWS = "the calibration script's rows, runs.jsonl"
PIPELINE_ROWS = "depthbench run, rows/NAME"
TEXT = "text-"   # the text task's recipes (specs and rows folders): report.calibration_text


# ---- rows ---------------------------------------------------------------------------------------
def script_rows(path: Path) -> pd.DataFrame:
    """The calibration script's JSONL rows (one run each, its readings at depths 1-16) as the
    final-checkpoint eval rows of a report: one row per run, split and depth."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        arm, _, budget = r["schedule"].partition("@")
        for split, pre in (("eval_reordered", ""), ("eval_seen_order", "seen_")):
            if f"{pre}bits" not in r:
                continue
            for k, (bits, em) in enumerate(zip(r[f"{pre}bits"], r[f"{pre}exact_match"]), 1):
                out.append({
                    "recipe": r["recipe"],
                    "run": f"{r['recipe']}/{r['schedule']}-s{r['seed']}-t{r['threads']}",
                    "schedule": arm, "budget": float(budget) if budget else np.nan,
                    "seed": r["seed"], "threads": r["threads"], "step": r["steps"], "depth": k,
                    "split": split, "bits_per_person": bits, "exact_match": em,
                    "ceiling_bits": r[f"{pre}ceiling_bits"],
                    "floor_bits_per_person": r.get(f"{pre}floor_bits", np.nan),
                    "name_blind_bits_per_person": r.get(f"{pre}name_blind_bits", np.nan),
                    "train_s": r["train_s"], "final_loss": r["final_loss"],
                    "source": SCRIPT_ROWS})
    return pd.DataFrame(out)


def pipeline_rows(folder: Path, recipe: str) -> pd.DataFrame:
    """A recipe's kept report rows (``eval.csv``, ``run.csv``) as final-checkpoint eval rows,
    each arm labelled as its report labels it, with its run's training seconds and final loss."""
    rows = labelled(load_rows([folder]))
    ev = final_rows(rows["eval"]).copy()
    runs = rows["run"].set_index("run")
    ev["train_s"] = ev["run"].map(runs["wall_clock_s"])
    ev["final_loss"] = ev["run"].map(runs["final_loss"])
    if "budget" not in ev.columns:
        ev["budget"] = np.nan
    return ev.assign(recipe=recipe, source=PIPELINE_ROWS)


def calibration_rows(folder: Path) -> pd.DataFrame:
    """Every recipe's final eval rows: its pipeline rows where ``folder/rows/NAME`` holds them,
    else its rows in ``folder/runs.jsonl``."""
    kept = {p.name: p for p in sorted((folder / "rows").glob("*"))
            if p.is_dir() and not p.name.startswith(TEXT)}
    parts = [pipeline_rows(p, name) for name, p in kept.items()]
    if (folder / "runs.jsonl").is_file():
        old = script_rows(folder / "runs.jsonl")
        parts.append(old[~old["recipe"].isin(kept)])
    return pd.concat(parts, ignore_index=True)


# ---- readings -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Readings:
    """Final eval rows of many recipes, read by recipe, arm (a schedule, a matched arm's label)
    and budget (a fraction of the full budget, or None)."""
    rows: pd.DataFrame

    def of(self, recipe: str, arm: str, budget: float | None = None,
           split: str = "eval_reordered") -> pd.DataFrame:
        r = self.rows
        sel = (r["recipe"] == recipe) & (r["schedule"] == arm) & (r["split"] == split)
        sel &= r["budget"].isna() if budget is None else np.isclose(r["budget"], budget)
        g = r[sel]
        if g.empty:
            raise KeyError(f"no rows of {arm}" + (f" at {budget:.0%}" if budget else "")
                           + f" on {split} in calibration recipe {recipe}")
        return g

    def best(self, recipe: str, arm: str, budget: float | None = None,
             split: str = "eval_reordered") -> float:
        """The best seed-mean reading over the serving depths, in % of the ceiling."""
        g = self.of(recipe, arm, budget, split)
        return 100 * g.groupby("depth")["bits_per_person"].mean().max() / g["ceiling_bits"].mean()

    def em(self, recipe: str, arm: str, budget: float | None = None) -> float:
        """The depth-averaged exact match (mean over seeds) on the name-only reading."""
        return float(self.of(recipe, arm, budget)["exact_match"].mean())

    def arms(self, recipe: str) -> list[tuple[str, float | None]]:
        g = self.rows[self.rows["recipe"] == recipe]
        keys = g[["schedule", "budget"]].drop_duplicates()
        return [(s, None if pd.isna(b) else float(b)) for s, b in keys.itertuples(index=False)]

    def clears(self, recipe: str, arm: str, budget: float | None = None) -> bool:
        """Whether the arm reads between the brackets on both splits: its lowest judged
        seed-mean at least ABOVE_BRACKETS of the ceiling over every lower oracle the rows
        carry, and its best at most MAX_SHARE of the ceiling."""
        for split in ("eval_reordered", "eval_seen_order"):
            g = self.of(recipe, arm, budget, split)
            if above_brackets(g, arm) < ABOVE_BRACKETS * g["ceiling_bits"].mean() or \
                    self.best(recipe, arm, budget, split) > 100 * MAX_SHARE:
                return False
        return True

    def source(self, recipe: str) -> str:
        return str(self.rows.loc[self.rows["recipe"] == recipe, "source"].iloc[0])


def arm_name(arm: str, budget: float | None) -> str:
    return f"`{arm}`" + (f" at {budget:.0%}" if budget is not None else "")


def readings_table(r: Readings, recipe: str) -> pd.DataFrame:
    """One row per arm of a recipe: steps, bits at depths 1, 4 and 16, depth-averaged exact
    match, the best reading on each split and whether it reads between the brackets."""
    out = []
    for arm, budget in r.arms(recipe):
        g = r.of(recipe, arm, budget)
        bits = g.groupby("depth")["bits_per_person"].mean()
        seen = r.rows[(r.rows["recipe"] == recipe) & (r.rows["split"] == "eval_seen_order")]
        out.append({
            "arm": arm_name(arm, budget), "seeds": g["seed"].nunique(),
            "steps": int(g["step"].max()),
            **{f"bits d{k}": round(float(bits.get(k, np.nan)), 1) for k in (1, 4, 16)},
            "of": round(float(g["ceiling_bits"].mean()), 1),
            "EM": round(r.em(recipe, arm, budget), 3),
            "best % (held-out)": round(r.best(recipe, arm, budget), 1),
            "best % (seen)": round(r.best(recipe, arm, budget, "eval_seen_order"), 1)
            if not seen.empty else np.nan,
            "between the brackets": ("yes" if r.clears(recipe, arm, budget) else "no")
            if not seen.empty else "n/a",
            "train s": round(float(g["train_s"].mean())),
        })
    return pd.DataFrame(out)


def paired(r: Readings, recipe: str, a: str, b: str) -> dict | None:
    """``a`` minus ``b`` on depth-averaged exact match over the seeds both have (1 thread):
    mean, 95% t-interval, exact sign-flip p and the seeds where ``a`` is higher."""
    g = r.rows[(r.rows["recipe"] == recipe) & (r.rows["split"] == "eval_reordered")
               & (r.rows.get("threads", 1) == 1)]
    em = g.groupby(["schedule", "seed"])["exact_match"].mean()
    seeds = sorted(set(em[a].index) & set(em[b].index)) if a in em and b in em else []
    if len(seeds) < 2:
        return None
    d = [em[a][s] - em[b][s] for s in seeds]
    m, half, n = t_interval(d)
    return {"seeds": n, "mean": m, "lo": m - half, "hi": m + half, "p": sign_flip_p(d),
            "higher": sum(x > 0 for x in d)}


# ---- the recipes, from their specs --------------------------------------------------------------
def recipe_specs(folder: Path = SPECS) -> dict[str, dict]:
    """Each person-task calibration spec's TOML, by recipe name (``text-NAME`` is the text
    task's: ``report.calibration_text``)."""
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(folder.glob("*.toml"))
            if not p.stem.startswith(TEXT)}


def recipe_line(name: str, spec: dict) -> dict:
    """What a recipe trains, as its spec says: the task, the steps, the recipe's train.set, the
    arms and budgets."""
    data, train = spec.get("data", {}).get("set", {}), spec.get("train", {})
    attrs = [a.split(":") for a in str(data.get("attributes", "")).split(",") if a]
    values = sorted({int(v) for _, v in attrs})
    arms = list(train.get("schedules", []))
    if train.get("matched_uniform"):
        arms.append(f"{train.get('matched_schedule', 'uniform:1-16')}~{train['matched_uniform']}")
    sets = train.get("set", {})
    return {"recipe": f"`{name}`", "people": data.get("n_people", ""),
            "attributes x values": f"{len(attrs)} x {'/'.join(map(str, values))}",
            "exposure": str(data.get("exposure", "1")).replace(",", ":"),
            "steps": train.get("steps", ""),
            "train.set": ", ".join(f"{k}={v}" for k, v in sets.items()),
            "arms": ", ".join(f"`{a}`" for a in arms),
            "budgets": ", ".join(f"{b:.0%}" for b in train.get("budgets", [])) or "-"}


# ---- the findings, read from the rows -----------------------------------------------------------
def _pct(x: float) -> str:
    return f"{x:.0f}%"


def _between(r: Readings, recipe: str) -> str:
    """Which arms of a recipe read between the brackets on both splits, in words."""
    arms = r.arms(recipe)
    out = [arm_name(a, b) for a, b in arms if not r.clears(recipe, a, b)]
    if not out:
        return f"every arm ({len(arms)}) reads between the brackets on both splits"
    return (f"{len(arms) - len(out)} of {len(arms)} arms read between the brackets on both splits "
            f"(not {', '.join(out)})")


def _ends(r: Readings, recipes: list[str], top: str) -> str:
    """`uniform:1-16` at 15% held-out, then arm ``top`` at 100% on both splits, per recipe."""
    return "; ".join(
        f"`{rec}`: `uniform:1-16` at 15% {_pct(r.best(rec, 'uniform:1-16', 0.15))} held-out "
        f"({_pct(r.best(rec, 'uniform:1-16', 0.15, 'eval_seen_order'))} seen), `{top}` at 100% "
        f"{_pct(r.best(rec, top, 1.0))} held-out ({_pct(r.best(rec, top, 1.0, 'eval_seen_order'))}"
        " seen)" for rec in recipes)


FF8, U, SEEN = "fixed-first:0.8:4:1-16", "uniform:1-16", "eval_seen_order"


def _resized(r: Readings) -> str:
    return ("**The task was resized for the name-only reading** (`name-n512`, `name-n768`, "
            "`name-n1024`). Asked from the name alone, on 512 people `fixed:4` reads "
            f"{_pct(r.best('name-n512', 'fixed:4', None, SEEN))} of the ceiling on the seen-order "
            f"control at its best depth and `uniform:1-16` {_pct(r.best('name-n512', U, None, SEEN))}"
            f"; on 1024 people `fixed:4` reads {_pct(r.best('name-n1024', 'fixed:4'))} held-out. "
            f"On 768 people, the tiny task until the tiered one, {_between(r, 'name-n768')}.")


def _ranking(r: Readings) -> str:
    em = {a: r.em("name-n512", a) for a in (U, FF8, "fixed-first:0.67:4:1-16")}
    ranked = ", ".join(f"`{a}` {e:.3f}" for a, e in sorted(em.items(), key=lambda kv: -kv[1]))
    return ("**The ranking of schedules moves with the reading.** On the teacher-forced reading "
            "(the record below) both fixed-first arms read above uniform; asked from the name "
            f"alone, on 512 people the depth-averaged exact match ranks {ranked}. The 8-seed "
            "comparisons of the adopted task are the `table3` report's (docs/results.md).")


def _by_size(r: Readings) -> str:
    """``fixed:4`` at the full budget on the seen-order control against ``uniform:1-16`` at 15%
    held-out, on each task of people seen equally often."""
    sizes = [("name-n128", None, "name-n128-s226", None, "128 people"),
             ("budget-n192", 1.0, "budget-n192", 0.15, "192 people"),
             ("budget-n256", 1.0, "budget-n256", 0.15, "256 people"),
             ("budget-n128-d32", 1.0, "budget-n128-d32", 0.15, "128 people at d_model 32")]
    words = "; ".join(f"{what}: the seen-order control {_pct(r.best(top, 'fixed:4', b, SEEN))} "
                      f"at 100%, `uniform:1-16` {_pct(r.best(low, U, lb))} held-out at 15%"
                      for top, b, low, lb, what in sizes)
    steep = min(r.best(top, "fixed:4", b, SEEN) for top, b, *_ in sizes) > 100 * MAX_SHARE
    return ("**The budget figure's task cannot be sized by its number of people alone** "
            "(`budget-*` and `name-n128*`, each arm at the grid's own step counts, `fixed:4` at "
            f"the full budget against `uniform:1-16` at 15%). {words}. " + (
                "With every person seen equally often, the seen-order control is above "
                f"{MAX_SHARE:.0%} of the ceiling at the full budget on every size tried, so no "
                "task size puts both ends between the brackets." if steep else
                "On some size tried the seen-order control stays under "
                f"{MAX_SHARE:.0%} of the ceiling at the full budget: read the table below."))


def _exposure(r: Readings) -> str:
    tiers = ["budget-m64-x1-3-9", "budget-m64-x1-4-16", "budget-m64-x1-3-9-27",
             "budget-m64-x1-4-16-64"]
    saturated = sum(r.best(rec, FF8, 1.0, SEEN) > 100 * MAX_SHARE for rec in tiers)
    return ("**Unequal exposure: the 15% end against the seen-order control at the full budget** "
            "(three tiers of 64 people seen 1:3:9 or 1:4:16 times as often, then a fourth, rarer "
            "tier: 256 people, the least-seen tier 1/40 and 1/85 of the records): "
            f"{_ends(r, tiers, FF8)}. `{FF8}` at the full budget reads above {MAX_SHARE:.0%} of "
            f"the ceiling on the seen-order control in {saturated} of these {len(tiers)} tasks.")


def _adopted(r: Readings) -> list[str]:
    return [
        "**A smaller full budget moves the whole figure down its curve** (the figure's 100% = "
        "750 `uniform:1-16` steps): "
        f"{_ends(r, ['budget-m64-x1-3-9-27-s750', 'budget-m64-x1-4-16-64-s750'], 'fixed:4')}.",
        "**Tiers far apart flatten the curve: adopted for the budget figure** "
        "(`budget-m64-x1-8-64-512`: 256 people x 64 values, tiers seen 1, 8, 64 and 512 times "
        "as often): each tier is memorized at its own share of the budget. "
        f"{_ends(r, ['budget-m64-x1-8-64-512'], 'fixed:4')}; "
        f"{_between(r, 'budget-m64-x1-8-64-512')}. The packaged `budgets` spec and every "
        "packaged grid of the person task now use this task (the tiny presets)."]


def _quickstart(r: Readings) -> str:
    def on(rec, arm):   # held-out, then the seen-order control
        return _pct(r.best(rec, arm)), _pct(r.best(rec, arm, None, SEEN))
    (f4h, f4s), (ffh, ffs) = on("quick-n384-s750", "fixed:4"), on("quick-n384-s750", FF8)
    (g4h, g4s), (uh, us) = on("quick-n512-s750", "fixed:4"), on("quick-n512-s750", U)
    return ("**The quickstart within 10 minutes on 2 cores** (`quick-*`, fewer people and fewer "
            f"steps). At 384 people x 128 values and 750 steps `fixed:4` reads {f4s} of the "
            f"ceiling on the seen-order control ({f4h} held-out) and `{FF8}` {ffs} ({ffh}); at "
            f"512 people x 256 values and 750 steps `fixed:4` reads {g4h} held-out ({g4s} seen) "
            f"and `uniform:1-16` {uh} ({us}). The quickstart has since moved to the tiered task "
            "(`quickstart.toml`).")


ONE_SEED = ("**Each recipe here is one seed**: the packaged grids (Table 3's 8 seeds, the budget "
            "figure's, the quickstart's 4) are the multi-seed evidence, and each of their reports "
            "states its arms' seed spread against these criteria (`report.spread`); "
            "`tests/report/test_claims.py` holds every arm of the quickstart, `table3`, "
            "`matched`, `budgets` and `fixed-depths` to them.")


def findings(r: Readings) -> list[str]:
    """What the name-only rows show, one bullet each; every number is read from the rows."""
    return [_resized(r), _ranking(r), _by_size(r), _exposure(r), *_adopted(r), _quickstart(r),
            ONE_SEED]


# ---- the page -----------------------------------------------------------------------------------
def _intro() -> list[str]:
    return [
        "# Calibration of the CPU training recipe", "",
        "Generated by `depthbench docs` from the calibration recipes' rows. Each recipe is a "
        "packaged spec (`depthbench/experiments/calibration/NAME.toml`: the tiny presets as the "
        "calibration ran against them, a task and a number of steps, seed 0, and the CPU "
        "threads its rows were trained on), run as", "",
        "    depthbench run calibration/NAME --out runs/calibration/NAME", "",
        "and kept as its report's eval and run rows in `docs/calibration/rows/NAME/`. A recipe "
        "not rerun through the pipeline yet reads the rows the calibration script wrote before "
        "the recipes were specs (`docs/calibration/runs.jsonl`); the recipes table says which. "
        f"An arm of {CPU_COMPILE_MIN_STEPS} steps or more trains with compiled blocks on a CPU "
        "(`runtime.compiles`), which the script's rows predate: such an arm reads a little "
        "differently from the script's row of it, and reads as that row with "
        "`--set train.set.compile=false`.",
        "",
        f"Criteria (`depthbench.report.spread`): every seed's depth-averaged exact match at "
        f"least {WORST_OF_MEDIAN:.0%} of its arm's median; the seed SD of bits per person at "
        f"most {MAX_SD:.0%} of the ceiling at every judged depth (`fixed:K`: depth K; the "
        "others: depths 4-16); the lowest judged seed-mean at least "
        f"{ABOVE_BRACKETS:.0%} of the ceiling above every lower oracle the rows carry (the "
        "person-agnostic floor, the name-blind record completer); and no seed-mean reading "
        f"above {MAX_SHARE:.0%} of the ceiling on either split (a criterion that rewards "
        "stability alone rewards saturation). A recipe of one seed has no spread to judge: its "
        "arms are read against the brackets alone (`between the brackets`). A budget arm "
        "runs the steps that spend its share of the FLOPs of `uniform:1-16` over the recipe's "
        "steps (`train.budgets`).", ""]


def _table(df: pd.DataFrame) -> list[str]:
    return [df.to_markdown(index=False), ""]


def _record(folder: Path) -> list[str]:
    """The earlier readings' rows, with the prose written from them then."""
    before = folder / "before-name-only.jsonl"
    out = []
    if before.is_file():
        r = Readings(script_rows(before).assign(source=SCRIPT_ROWS))
        out += ["## Before the name-only reading (the record)", "",
                f"`docs/calibration/{before.name}`: {r.rows['run'].nunique()} runs read on the "
                "earlier `eval_reordered`, where every fact after the first was teacher-forced "
                "after the person's other true values (a record completer that never reads a "
                "name reads most of its ceiling). What was read from them then "
                "(`docs/calibration/before-name-only.md`, kept as written):", "",
                (folder / "before-name-only.md").read_text().rstrip("\n"), ""]
        for (recipe, threads), g in r.rows.groupby(["recipe", "threads"], sort=False):
            out += [f"`{recipe}`" + (f", {threads} CPU threads a run" if threads != 1 else "")
                    + ":", ""]
            out += _table(readings_table(Readings(g), recipe).drop(
                columns=["best % (seen)", "between the brackets"]))
        pairs = [(rec, a, b) for rec in r.rows["recipe"].unique() for a, b in PAIRS]
        found = [(rec, a, b, c) for rec, a, b in pairs if (c := paired(r, rec, a, b))]
        out += ["Paired comparisons (decided in advance): depth-averaged exact match, first arm "
                "minus second, over the seeds both have (1 thread): mean, 95% t-interval, exact "
                "sign-flip p, seeds where the first is higher.", "",
                "| recipe | comparison | seeds | difference | 95% CI | p | first higher |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| `{rec}` | `{a}` - `{b}` | {c['seeds']} | {c['mean']:+.4f} | [{c['lo']:+.4f}, "
                f"{c['hi']:+.4f}] | {c['p']:.4f} | {c['higher']} of {c['seeds']} |"
                for rec, a, b, c in found] + [""]
    return out + _balanced_record(folder / "before-balanced.jsonl")


PAIRS = (("uniform:1-16", "uniform:1-16~fixed-first:0.67:4:1-16"),
         ("fixed-first:0.67:4:1-16", "uniform:1-16~fixed-first:0.67:4:1-16"),
         ("fixed-first:0.8:4:1-16", "uniform:1-16"), ("fixed-first:0.67:4:1-16", "uniform:1-16"))


def _balanced_record(path: Path) -> list[str]:
    if not path.is_file():
        return []
    old = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    lines = ["## Before balanced values (the earlier presets, the record)", "",
             f"`docs/calibration/{path.name}`: {len(old)} runs on the earlier tiny task (256 "
             "people, 5 attributes of 16,384 values drawn independently, a 70-bit ceiling whose "
             "person-agnostic floor reads 30 bits), with the recipes named there. Truncated "
             "backprop through the last 4 loops was adopted then; it trains `uniform:1-16` "
             "through 4 of its up to 16 loops only, which the paper does not.", "",
             "| recipe | schedule | seeds | best bits per seed (of 70) |", "|---|---|---|---|"]
    groups: dict[tuple, list] = {}
    for r in old:
        groups.setdefault((r["recipe"], r["schedule"]), []).append(r)
    for (rec, sch), rs in sorted(groups.items()):
        best = " ".join(f"{max(r['bits']):.0f}" for r in sorted(rs, key=lambda r: r["seed"]))
        lines.append(f"| `{rec}` | `{sch}` | {len(rs)} | {best} |")
    return lines + [""]


def page(folder: Path, specs: Path = SPECS) -> str:
    """docs/calibration.md from ``folder`` (docs/calibration: ``rows/NAME/``, ``runs.jsonl``
    and the record) and the recipes' specs."""
    r = Readings(calibration_rows(folder))
    recipes = pd.DataFrame([{**recipe_line(name, spec), "rows": r.source(name)}
                            for name, spec in recipe_specs(specs).items()])
    lines = _intro() + ["## Recipes", ""] + _table(recipes)
    lines += ["## What the name-only rows show", ""] + [f"- {f}" for f in findings(r)] + [""]
    lines += ["## Readings: recall from the name alone", "",
              "Per recipe and arm, at the final checkpoint: bits per person recalled from the "
              "name alone at serving depths 1, 4 and 16 (of the ceiling `of`), the "
              "depth-averaged exact match, the best seed-mean reading in % of the ceiling on the "
              "held-out split and on the seen-order control, whether the arm reads between the "
              "brackets on both, and its training seconds.", ""]
    for name in recipe_specs(specs):
        lines += [f"### `{name}` ({r.source(name)})", ""] + _table(readings_table(r, name))
    return "\n".join(lines + _record(folder)).rstrip("\n") + "\n"
