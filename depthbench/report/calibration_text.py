"""The natural-text calibration page (``docs/calibration-text.md``): which corpus, steps, batch
and recurrence make depth matter, generated from the recipes' rows.

Each recipe is a packaged spec, ``depthbench/experiments/calibration/text-NAME.toml``: a corpus
with its ``prepare-text`` settings, the tiny presets and the recipe's overrides, ``uniform:1-16``
on its seeds. ``depthbench run calibration/text-NAME --out runs/calibration/text-NAME`` prepares
the corpus, trains every seed from scratch (one CPU thread each) and reads validation NLL and
bits per byte at serving depths 1-16; its report's eval and run rows are kept in
``docs/calibration/rows/text-NAME/``. A recipe whose pipeline rows are not kept yet reads the
rows the calibration script wrote before the recipes became specs
(``docs/calibration/text-runs.jsonl``, one JSON object per run); the page names which rows each
recipe reads.

The criterion (#67's): uniform:1-16's NLL falls from depth 4 to depth 16, and from depth 1 to
depth 4, each by at least 5 seed SDs of the per-seed gain, on 8 seeds: the loop is used past
depth 4, so mean serving NLL over depths 1-16 reads what deep loops learn. The same gains over
the larger of the two depths' seed SDs of the level (``ratio4``), and #42's older criterion
(depth 1 to 16, ``ratio``), are columns beside it.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from pathlib import Path

import pandas as pd

from depthbench.report.calibration import SPECS
from depthbench.report.calibration import TEXT as PREFIX  # a text recipe's spec and rows: text-NAME
from depthbench.report.load import final_rows, labelled, load_rows

DEPTHS = list(range(1, 17))
RATIO = 5.0      # the criterion: each gain >= RATIO seed SDs of the per-seed gain
SCRIPT_ROWS = "the calibration script's rows, text-runs.jsonl"
PIPELINE_ROWS = "depthbench run, rows/text-NAME"


# ---- the recipes, from their specs --------------------------------------------------------------
def recipe_specs(folder: Path = SPECS) -> dict[str, Path]:
    """Each text recipe's spec file, by recipe name (``text-NAME.toml`` is recipe ``NAME``)."""
    found = {p.stem[len(PREFIX):]: p for p in folder.glob(f"{PREFIX}*.toml")}
    return dict(sorted(found.items()))


def about(path: Path) -> str:
    """What a recipe is, in the words of its spec's first comment paragraph (after the
    recipe's name)."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("# "):
            break
        words.append(line[2:].strip())
    text = " ".join(words)
    return text.split(": ", 1)[1].rstrip(".") if ": " in text else text


def trains(spec: dict) -> str:
    """What a recipe trains, as its spec says: corpus, preset, steps and its train.set (but
    ``threads``: every recipe trains on one thread, as the page says)."""
    train = spec["train"]
    sets = ", ".join(f"{k}={v}" for k, v in train.get("set", {}).items() if k != "threads")
    return (f"{'+'.join(spec['data']['corpus'])}, {train.get('preset', 'tiny')}, "
            f"{train['steps']} steps, {sets}")


# ---- rows: one dict per trained run -------------------------------------------------------------
def script_rows(path: Path) -> list[dict]:
    """The calibration script's rows (one JSON object per run, its readings at depths 1-16)."""
    if not path.is_file():
        return []
    return [{**json.loads(line), "source": SCRIPT_ROWS}
            for line in path.read_text().splitlines() if line.strip()]


def pipeline_rows(folder: Path, recipe: str) -> list[dict]:
    """A recipe's kept report rows (``eval.csv``, ``run.csv``) as one dict per run, shaped as the
    script's: validation NLL and bits per byte at depths 1-16 of the final checkpoint, training
    CPU seconds, thread count and final loss; each arm named as its report names it (a matched arm is not its
    schedule)."""
    rows = labelled(load_rows([folder]))
    ev = final_rows(rows["eval"])
    runs = rows["run"].set_index("run")
    out = []
    for run, g in ev[ev["split"] == "validation"].groupby("run", sort=False):
        g = g.set_index("depth").loc[DEPTHS]
        out.append({"recipe": recipe, "schedule": str(g["schedule"].iloc[0]),
                    "seed": int(g["seed"].iloc[0]), "threads": _threads(runs, run),
                    "dataset": str(g["dataset_hash"].iloc[0])[:12],
                    "steps": int(g["step"].iloc[0]),
                    "final_loss": float(runs.loc[run, "final_loss"]),
                    # CPU seconds: two runs on two cores read alike, as their wall clocks
                    # do not where other work shares the machine
                    "train_s": round(float(runs.loc[run, "cpu_s"]), 1),
                    "params": int(g["params"].iloc[0]), "tokens": int(g["tokens"].iloc[0]),
                    "nll": [round(float(x), 5) for x in g["nll"]],
                    "bits_per_byte": [round(float(x), 5) for x in g["bits_per_byte"]],
                    "source": PIPELINE_ROWS})
    return sorted(out, key=lambda r: (r["schedule"], r["seed"]))


def _threads(runs: pd.DataFrame, run: str) -> int | None:
    """The thread count a run trained on, as its run row was stamped (None: rows written before
    rows carried it)."""
    if "threads" not in runs.columns or pd.isna(runs.loc[run, "threads"]):
        return None
    return int(runs.loc[run, "threads"])


def load_calibration(folder: Path) -> list[dict]:
    """Every recipe's runs: its pipeline rows where ``folder/rows/text-NAME`` holds them, else
    its rows in ``folder/text-runs.jsonl``."""
    kept = {p.name[len(PREFIX):]: p for p in sorted((folder / "rows").glob(f"{PREFIX}*"))
            if p.is_dir()}
    out = [r for name, p in kept.items() for r in pipeline_rows(p, name)]
    return out + [r for r in script_rows(folder / "text-runs.jsonl") if r["recipe"] not in kept]


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else float("nan")


def _paired(a: list[float], b: list[float]) -> float:
    d = [x - y for x, y in zip(a, b)]
    sd = _sd(d)
    return statistics.fmean(d) / sd if sd > 0 else float("nan")


def _gain(at: dict[int, list[float]], a: int, b: int) -> tuple[float, float]:
    """The seed-mean NLL at depth ``a`` minus depth ``b``, and that over the larger seed SD."""
    sd = max(_sd(at[a]), _sd(at[b]))
    gap = statistics.fmean(at[a]) - statistics.fmean(at[b])
    return gap, gap / sd if sd > 0 else float("nan")


def summarize(rows: list[dict]) -> list[dict]:
    """One line per recipe x schedule: seed means at depths 1, 4 and 16, the depth where the
    mean is lowest, and two gains, each over its seed SD (the larger of its two depths' seed
    SDs; needs 2 seeds or more): depth 1 to 16 (#42's criterion, ``ratio``) and depth 4 to 16
    (#67's: whether the loop is used past depth 4, ``ratio4``), and each gain read per seed
    (``paired4``, ``paired14``: the per-seed gains' mean over their SD). ``passes``: 8 seeds or
    more with the per-seed gains from depth 4 to 16 and from 1 to 4 each at ``RATIO`` SDs or
    more. Per seed, because the claim is about each model's use of its depth, and the Table 3
    verdicts it serves are paired by seed: the level's seed SD (a random initial state spreads
    the seeds' NLL) measures how seeds differ, not whether a deeper loop helps each of them."""
    out = []
    for rec in sorted({r["recipe"] for r in rows}):
        for sch in sorted({r["schedule"] for r in rows if r["recipe"] == rec}):
            g = sorted((r for r in rows if r["recipe"] == rec and r["schedule"] == sch),
                       key=lambda r: r["seed"])
            at = {k: [r["nll"][k - 1] for r in g] for k in DEPTHS}
            mean = {k: statistics.fmean(v) for k, v in at.items()}

            (gap, r1), (gap4, r4), (_, r14) = (_gain(at, a, b) for a, b in ((1, 16), (4, 16),
                                                                            (1, 4)))
            out.append({"recipe": rec, "schedule": sch, "seeds": len(g),
                        "nll1": mean[1], "nll4": mean[4], "nll16": mean[16],
                        "best_depth": min(DEPTHS, key=mean.get), "gap": gap,
                        "sd": max(_sd(at[1]), _sd(at[16])), "ratio": r1, "gap4": gap4,
                        "ratio4": r4, "ratio14": r14,
                        # the same gain read per seed: its mean over its own seed SD
                        "paired4": _paired(at[4], at[16]), "paired14": _paired(at[1], at[4]),
                        "bpb16": statistics.fmean(r["bits_per_byte"][15] for r in g),
                        "train_s": statistics.fmean(r["train_s"] for r in g),
                        "passes": len(g) >= 8 and _paired(at[4], at[16]) >= RATIO
                        and _paired(at[1], at[4]) >= RATIO})
    return out


ADOPTED = "kjv-s600-b32-d10"   # text-quickstart's and text-table3's recipe


def _say(s: dict) -> str:
    return (f"`{s['recipe']}` {s['gap']:.3f} nats, {s['ratio']:.1f} seed SDs (SD {s['sd']:.4f}, "
            f"{s['seeds']} seeds)")


def _say_deep(s: dict) -> str:
    sds = (f", {s['ratio4']:.1f} seed SDs of the level, {s['paired4']:.1f} of the per-seed gain"
           if s["seeds"] > 1 else "")
    seeds = f"{s['seeds']} seed" + ("s" if s["seeds"] > 1 else "")
    return (f"`{s['recipe']}` {s['gap4']:+.4f} nats ({seeds}{sds}), NLL d16 "
            f"{s['nll16']:.3f}, lowest at {s['best_depth']}")


def _on_common_seeds(rows: list[dict], a: str, b: str) -> tuple[dict, dict] | None:
    """uniform:1-16's summaries of recipes ``a`` and ``b`` over the seeds both ran."""
    seeds = [{r["seed"] for r in rows if r["recipe"] == k and r["schedule"] == "uniform:1-16"}
             for k in (a, b)]
    both = seeds[0] & seeds[1]
    if len(both) < 2:
        return None
    sub = [r for r in rows if r["seed"] in both and r["schedule"] == "uniform:1-16"]
    by = {s["recipe"]: s for s in summarize(sub)}
    return by[a], by[b]


def findings(rows: list[dict]) -> list[str]:
    """What the rows show, each line's numbers from the rows (a recipe not run is not said);
    two recipes are compared on the seeds both ran."""
    by = {s["recipe"]: s for s in summarize(rows) if s["schedule"] == "uniform:1-16"}
    out = []
    if {"pydocs-s600", "kjv-s600"} <= set(by):
        out.append(f"- **Corpus** (the text-quickstart's old recipe): depth 1 minus depth 16 is "
                   f"{_say(by['pydocs-s600'])} on python-docs, {_say(by['kjv-s600'])} on kjv.")
    for base, paper in (("kjv-s600", "kjv-s600-paper"), ("kjv-s1200", "kjv-s1200-paper")):
        pair = _on_common_seeds(rows, base, paper)
        if pair:
            out.append(f"- **Init** ({pair[0]['seeds']} common seeds): the person task's Table 3 "
                       f"recipe (each layer counted once in the init, decay from 90%) makes "
                       f"uniform's seed SD {pair[1]['sd'] / pair[0]['sd']:.1f} times `{base}`'s: "
                       f"{_say(pair[1])}, against {_say(pair[0])}.")
    if {"kjv-s600", "kjv-s600-d10"} <= set(by):
        out.append(f"- **Decay off the 0.8 arm's switch** (from 90% instead of 80%): "
                   f"{_say(by['kjv-s600-d10'])}, against {_say(by['kjv-s600'])}.")
    for k in ("kjv-s1200", "kjv-s600-b32", "kjv-s600-b32-d10"):
        pair = _on_common_seeds(rows, "kjv-s600", k)
        if pair:
            out.append(f"- **Twice the tokens** (`{k}`, {pair[0]['seeds']} common seeds, "
                       f"{pair[1]['train_s'] / pair[0]['train_s']:.1f}x the training time): "
                       f"{_say(pair[1])}, against {_say(pair[0])}.")
    tried = [s for k, s in by.items() if k.startswith(("kjv-b32", "kjv-deep")) or k == ADOPTED]
    if tried:
        out.append("- **Past depth 4** (#67: the loop used by deep serving depths): uniform:1-16's "
                   "NLL from depth 4 to 16, and the depth of its lowest NLL, per recipe: " +
                   "; ".join(_say_deep(s) for s in tried) + ".")
    if ADOPTED in by:
        s = by[ADOPTED]
        out.append(f"- **Adopted: `{ADOPTED}`** for text-quickstart and text-table3: "
                   f"{_say(s)}: {'passes' if s['passes'] else 'does not pass'} the criterion.")
    return out


def page(folder: Path, specs: Path = SPECS) -> str:
    """docs/calibration-text.md from ``folder`` (docs/calibration: ``rows/text-NAME/`` and
    ``text-runs.jsonl``) and the recipes' specs."""
    rows = load_calibration(folder)
    source = {r["recipe"]: r["source"] + ("" if r.get("dataset") else ", *unfiltered*")
              for r in rows}
    lines = ["# Calibration of the natural-text task", "",
             "Generated by `depthbench docs` from the recipes' rows: each recipe is a packaged "
             "spec,", "`depthbench/experiments/calibration/text-NAME.toml`, run as `depthbench "
             "run calibration/text-NAME", "--out runs/calibration/text-NAME`, whose report rows "
             "are kept in `docs/calibration/rows/text-NAME/`.", "A recipe not run that way yet "
             "reads the calibration script's rows in `docs/calibration/text-runs.jsonl`;",
             "`rows` says which. Each run is one seed of `uniform:1-16` trained from scratch "
             "on one CPU thread,", "read at the final checkpoint: validation NLL and bits per "
             "byte at serving depths 1-16.", "Script rows marked *unfiltered* were read before "
             "the validation documents contained in", "training were dropped from the split (26 "
             "of kjv's): a rerun of such a recipe trains the same", "model and reads its NLL on "
             "the filtered split.", "",
             "Criterion (`passes`): the NLL falls from depth 4 to depth 16, and from depth 1 "
             "to depth 4,", f"each by at least {RATIO:g} seed SDs of the per-seed gain (its "
             "mean over its SD across seeds), judged", "on 8 seeds: the loop is used past depth "
             "4. `d4-d16 SDs` is the same gain over the larger of the", "two depths' seed SDs "
             "of the level (a random initial state spreads the seeds' NLL levels, not their",
             "gains); `d1-d16 (SDs)` is #42's older criterion's gap and ratio; `lowest at` the",
             "depth of the lowest seed-mean NLL. `train s` is one run's training CPU time on "
             "one thread", "(the script's rows: its wall clock). The machine was shared with other "
             "work, so recipes run on", "different days read times up to 1.5x apart: a time "
             "ratio between recipes is a rough one.", "",
             "## Recipes", "", "| recipe | what it is | what it trains | rows |",
             "|---|---|---|---|"]
    for k, path in recipe_specs(specs).items():
        lines.append(f"| `{k}` | {'**adopted**: ' if k == ADOPTED else ''}{about(path)} | "
                     f"{trains(tomllib.loads(path.read_text()))} | {source.get(k, 'not run')} |")
    lines += ["", "## What the rows show", ""] + findings(rows)
    lines += ["", "## Results", "",
              "| recipe | schedule | seeds | NLL d1 | NLL d4 | NLL d16 | lowest at | d1-d16 "
              "(SDs) | d4-d16 | d4-d16 SDs | d4-d16 per-seed SDs | bits/byte d16 | train s | "
              "passes |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summarize(rows):
        lines.append(f"| `{s['recipe']}` | `{s['schedule']}` | {s['seeds']} | {s['nll1']:.4f} | "
                     f"{s['nll4']:.4f} | {s['nll16']:.4f} | {s['best_depth']} | "
                     f"{s['gap']:.4f} ({s['ratio']:.1f}) | {s['gap4']:+.4f} | "
                     f"{s['ratio4']:.1f} | {s['paired4']:.1f} | {s['bpb16']:.4f} | "
                     f"{s['train_s']:.0f} | "
                     f"{'yes' if s['passes'] else ('no' if s['seeds'] >= 8 else '-')} |")
    return "\n".join(lines) + "\n"
