"""Calibrating the natural-text task: which corpus, steps and batch make depth matter?

Each *recipe* names a built-in corpus (or corpus paths), ``prepare-text`` settings and overrides
of the tiny presets (``--set`` keys), applied to every schedule alike. For every recipe x schedule
x seed the script prepares the corpus (once per recipe), trains from scratch, reads validation
NLL and bits per byte at serving depths 1-16, and appends one row to
``docs/calibration/text-runs.jsonl``; rows already there are not trained again, so the table is
regenerated from the committed rows in seconds:

    python benchmarks/calibrate_text.py --table-only           # docs/calibration-text.md
    python benchmarks/calibrate_text.py --recipes kjv-s600,kjv-s1200 --seeds 0-7

The criterion (#67's): uniform:1-16's NLL falls from depth 4 to depth 16, and from depth 1 to
depth 4, each by at least 5 seed SDs of the per-seed gain, on 8 seeds: the loop is used past
depth 4, so mean serving NLL over depths 1-16 reads what deep loops learn. The same gains over
the larger of the two depths' seed SDs of the level (``ratio4``), and #42's older criterion
(depth 1 to 16, ``ratio``), are columns beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from bench_rows import Parser, count, ranges, work_dir

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "docs" / "calibration" / "text-runs.jsonl"
TABLE = ROOT / "docs" / "calibration-text.md"
DEPTHS = list(range(1, 17))
RATIO = 5.0      # the criterion: depth-1 minus depth-16 NLL >= RATIO seed SDs
DATA = {"vocab_size": 1024, "val_fraction": 0.1, "seq_len": 64, "seed": 0}
BASE = {"steps": 600, "batch_size": 16}      # the text-quickstart's recipe
PAPER = {"init_loops": 1, "decay_frac": 0.1}  # the person task's Table 3 recipe (favours no depth)
B32 = {**BASE, "batch_size": 32}

# name -> (what it is, {"corpus": [...], "data": prepare-text overrides, "sets": --set pairs})
RECIPES: dict[str, tuple[str, dict]] = {
    "pydocs-s600": ("the text-quickstart's recipe: python-docs, BPE 1024, windows of 64, tiny, "
                    "600 steps of batch 16", {"corpus": ["python-docs"], "sets": BASE}),
    "kjv-s600": ("pydocs-s600 on the kjv corpus", {"corpus": ["kjv"], "sets": BASE}),
    "pydocs-s1200": ("pydocs-s600 at 1200 steps",
                     {"corpus": ["python-docs"], "sets": {**BASE, "steps": 1200}}),
    "kjv-s1200": ("kjv-s600 at 1200 steps", {"corpus": ["kjv"], "sets": {**BASE, "steps": 1200}}),
    "kjv-s600-b32": ("kjv-s600 at batch 32",
                     {"corpus": ["kjv"], "sets": {**BASE, "batch_size": 32}}),
    "kjv-s600-d10": ("kjv-s600 with the decay from 90% (off the 0.8 arm's switch at 80%)",
                     {"corpus": ["kjv"], "sets": {**BASE, "decay_frac": 0.1}}),
    "kjv-s600-b32-d10": ("kjv-s600-b32 with the decay from 90%",
                         {"corpus": ["kjv"], "sets": {**BASE, "batch_size": 32, "decay_frac": 0.1}}),
    "kjv-s600-paper": ("kjv-s600 with the person task's Table 3 recipe (init_loops 1, decay "
                       "from 90%)", {"corpus": ["kjv"], "sets": {**BASE, **PAPER}}),
    "kjv-s1200-paper": ("kjv-s1200 with the person task's Table 3 recipe (init_loops 1, decay "
                        "from 90%)", {"corpus": ["kjv"], "sets": {**BASE, "steps": 1200, **PAPER}}),
    "pydocs-s1200-paper": ("pydocs-s1200 with the person task's Table 3 recipe",
                           {"corpus": ["python-docs"],
                            "sets": {**BASE, "steps": 1200, **PAPER}}),
    # the recurrence itself (#67): with ``add`` injection and pre-norm the state accumulates the
    # input once per loop, so the normalized input each loop sees settles within a few loops
    "kjv-b32-paper": ("kjv-s600-b32-d10 with each layer counted once in the init (Table 3's)",
                      {"corpus": ["kjv"], "sets": {**B32, **PAPER}}),
    "kjv-b32-concat": ("kjv-b32-paper with concat injection (a linear adapter on [state, input])",
                       {"corpus": ["kjv"], "sets": {**B32, **PAPER, "injection": "concat"}}),
    "kjv-b32-sandwich": ("kjv-b32-paper with sandwich norm (each sublayer's output normalized)",
                         {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "sandwich"}}),
    "kjv-b32-cs": ("kjv-b32-paper with concat injection and sandwich norm",
                   {"corpus": ["kjv"], "sets": {**B32, **PAPER, "injection": "concat",
                                                 "norm": "sandwich"}}),
    "kjv-b32-huginn": ("kjv-b32-cs from a random initial state (Huginn's recurrence)",
                       {"corpus": ["kjv"], "sets": {**B32, **PAPER, "injection": "concat",
                                                     "norm": "sandwich", "init_state": "random"}}),
    "kjv-b32-residual": ("kjv-b32-paper with the residual stream renormalized after each "
                         "sublayer (Huginn's core: the state keeps one scale over loops)",
                         {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "residual"}}),
    "kjv-b32-residual-concat": ("kjv-b32-residual with concat injection (Huginn's adapter)",
                                {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "residual",
                                                              "injection": "concat"}}),
    "kjv-b32-residual-s1200": ("kjv-b32-residual at 1200 steps (two epochs of kjv)",
                               {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "residual",
                                                             "steps": 1200}}),
    "kjv-b32-residual-random": ("kjv-b32-residual from a random initial state",
                                {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "residual",
                                                              "init_state": "random"}}),
    "kjv-b32-residual-c2": ("kjv-b32-residual with two core layers a loop",
                            {"corpus": ["kjv"], "sets": {**B32, **PAPER, "norm": "residual",
                                                          "n_core": 2}}),
    "kjv-b32-residual-small": ("kjv-b32-residual at the small preset's shape (d_model 128; 1 "
                               "prelude, 2 core, 1 coda layers)",
                               {"corpus": ["kjv"], "preset": "small",
                                "sets": {**B32, **PAPER, "norm": "residual"}}),
    # the adopted recurrence, read on 8 seeds (rows from here on carry their dataset's hash:
    # the rows above it were read on kjv's validation before 26 documents contained in
    # training were dropped from it)
    "kjv-deep": ("kjv-b32-residual-random: Huginn's recurrence (the stream renormalized, a random "
                 "initial state) with add injection", {"corpus": ["kjv"], "sets": {
                     **B32, **PAPER, "norm": "residual", "init_state": "random"}}),
    "kjv-deep-d32": ("kjv-deep at half the width (d_model 32)", {"corpus": ["kjv"], "sets": {
        **B32, **PAPER, "norm": "residual", "init_state": "random", "d_model": 32}}),
    "kjv-deep-d128": ("kjv-deep at twice the width (d_model 128)", {"corpus": ["kjv"], "sets": {
        **B32, **PAPER, "norm": "residual", "init_state": "random", "d_model": 128}}),
    "kjv-b32-random": ("kjv-b32-paper from a random initial state (pre-norm, add injection)",
                       {"corpus": ["kjv"], "sets": {**B32, **PAPER, "init_state": "random"}}),
    "kjv-b32-residual-random-s1200": ("kjv-b32-residual-random at 1200 steps (two epochs)",
                                      {"corpus": ["kjv"], "sets": {**B32, **PAPER,
                                                                    "norm": "residual",
                                                                    "init_state": "random",
                                                                    "steps": 1200}}),
}


def _dataset(recipe: str, work: Path) -> Path:
    from depthbench.data.corpus import prepare_text
    over = RECIPES[recipe][1]
    d = {**DATA, **over.get("data", {})}
    key = "-".join([*over["corpus"], *(f"{k}{v}" for k, v in sorted(d.items()))])
    path = work / f"text-{key}".replace("/", "_")
    m = path / "manifest.json"
    # a dataset prepared before held-out documents were filtered by containment is prepared again
    if not m.is_file() or "contained_in_training" not in json.loads(m.read_text()):
        prepare_text(over["corpus"], path, vocab_size=d["vocab_size"],
                     val_fraction=d["val_fraction"], seed=d["seed"], seq_len=d["seq_len"],
                     force=True)
    return path


def run_one(recipe: str, schedule: str, seed: int, threads: int, work: str) -> dict:
    """Train one run from scratch and read its validation NLL at every depth; the result row."""
    import torch
    torch.set_num_threads(threads)
    from depthbench.checkpoint import load_run
    from depthbench.config.train import resolve_presets
    from depthbench.data.text import TextDataset
    from depthbench.evaluate.text import text_sweep
    from depthbench.train.loop import train
    data = _dataset(recipe, Path(work))
    sets = {**RECIPES[recipe][1]["sets"], "seed": seed, "threads": threads, "ckpt_every": 0}
    mcfg, tcfg = resolve_presets(RECIPES[recipe][1].get("preset", "tiny"), sets)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        t0 = time.perf_counter()
        summary = train(data, Path(tmp) / "run", mcfg, tcfg, schedule, progress=False,
                        log=lambda *a, **k: None)
        wall = time.perf_counter() - t0
        model, _ = load_run(Path(tmp) / "run")
    res = text_sweep(model, TextDataset(data), DEPTHS)
    return {"recipe": recipe, "schedule": schedule, "seed": seed, "threads": threads,
            "dataset": TextDataset(data).manifest["dataset_hash"][:12],
            "steps": tcfg.steps, "final_loss": summary["final_loss"], "train_s": round(wall, 1),
            "params": summary["params"], "tokens": res[1]["tokens"],
            "nll": [round(res[k]["nll"], 5) for k in DEPTHS],
            "bits_per_byte": [round(res[k]["bits_per_byte"], 5) for k in DEPTHS]}


def load_rows() -> list[dict]:
    if not ROWS.is_file():
        return []
    return [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]


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
    for rec in RECIPES:
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
    return (f"`{s['recipe']}` {s['gap4']:+.4f} nats ({s['seeds']} seeds{sds}), NLL d16 "
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


def write_table(rows: list[dict], path: Path = TABLE) -> str:
    lines = ["# Calibration of the natural-text task", "",
             "Generated by `depthbench docs` (or `python benchmarks/calibrate_text.py "
             "--table-only`) from the rows in",
             "`docs/calibration/text-runs.jsonl` (one row per trained run: recipe, schedule, "
             "seed, threads, steps,", "training time, and validation NLL and bits per byte at "
             "serving depths 1-16).", "",
             "Criterion (`passes`): the NLL falls from depth 4 to depth 16, and from depth 1 "
             "to depth 4,", f"each by at least {RATIO:g} seed SDs of the per-seed gain (its "
             "mean over its SD across seeds), judged", "on 8 seeds: the loop is used past depth "
             "4. `d4-d16 SDs` is the same gain over the larger of the", "two depths' seed SDs "
             "of the level (a random initial state spreads the seeds' NLL levels, not their",
             "gains); `d1-d16 (SDs)` is #42's older criterion's gap and ratio; `lowest at` the",
             "depth of the lowest seed-mean NLL. `train s` is one run's training time on one "
             "CPU thread (the", "machine shared with other work; compare within a table).", "",
             "## Recipes", "", "| recipe | what it is |", "|---|---|"]
    lines += [f"| `{k}` | {'**adopted**: ' if k == ADOPTED else ''}{v[0]} |"
              for k, v in RECIPES.items()]
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
    text = "\n".join(lines) + "\n"
    if path is not None:
        path.write_text(text)
    return text


def main(argv=None) -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--recipes", default="kjv-s600")
    ap.add_argument("--schedules", default="uniform:1-16")
    ap.add_argument("--seeds", type=ranges(), default="0-3")
    ap.add_argument("--threads", type=count(), default=1, help="CPU threads per run")
    ap.add_argument("--workers", type=count(), default=os.cpu_count() or 1)
    ap.add_argument("--work", type=work_dir, default=None,
                    help="scratch directory (default: a temporary one)")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args(argv)
    if not a.table_only:
        from depthbench.schedules import ScheduleError, parse_schedule
        recipes, schedules = a.recipes.split(","), a.schedules.split(",")
        unknown = [r for r in recipes if r not in RECIPES]
        if unknown:
            ap.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
        for sch in schedules:
            try:
                parse_schedule(sch)
            except ScheduleError as e:
                ap.error(f"--schedules: {sch!r}: {e}")
        done = {(r["recipe"], r["schedule"], r["seed"], r["threads"]) for r in load_rows()}
        jobs = [(rec, sch, seed, a.threads) for seed in a.seeds for rec in recipes
                for sch in schedules if (rec, sch, seed, a.threads) not in done]
        work = Path(a.work or tempfile.mkdtemp(prefix="depthbench-calib-text-"))
        work.mkdir(parents=True, exist_ok=True)
        for rec in dict.fromkeys(r for r, *_ in jobs):   # each corpus once, before the workers
            _dataset(rec, work)
        print(f"{len(jobs)} runs to train with {a.workers} workers", flush=True)
        with ProcessPoolExecutor(max_workers=a.workers) as pool:
            futs = [pool.submit(run_one, *job, str(work)) for job in jobs]
            for fut in as_completed(futs):
                row = fut.result()
                with open(ROWS, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{row['recipe']:>20} {row['schedule']:>16} seed {row['seed']}: NLL d1 "
                      f"{row['nll'][0]:.4f} d16 {row['nll'][15]:.4f}, {row['train_s']:.0f}s",
                      flush=True)
    text = write_table(load_rows())
    print(text if a.table_only else f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
