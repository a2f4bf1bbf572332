"""Calibrating the CPU training recipe: which settings make every schedule train on every seed?

Each *recipe* is a set of overrides of the tiny dataset, model and training presets, applied to
every schedule alike (no per-schedule tuning). For every recipe x schedule x seed (x CPU threads)
the script trains from scratch, sweeps serving depths 1-16 on ``eval_reordered`` and appends one
row to ``docs/calibration/runs.jsonl``; rows already there are not trained again, so the table is
regenerated from the committed rows in seconds:

    python benchmarks/calibrate.py --table-only                # docs/calibration.md from the rows
    python benchmarks/calibrate.py --recipes base,sandwich --schedules uniform:1-16 --seeds 0-3
    python benchmarks/calibrate.py --recipes p256-b64-tbptt4 --seeds 0-7

Workers run one training each with ``--threads`` CPU threads; jobs are ordered seed-major, so
an interrupted grid still has every recipe's first seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "docs" / "calibration" / "runs.jsonl"
TABLE = ROOT / "docs" / "calibration.md"
SCHEDULES = ["fixed:4", "fixed-first:0.8:4:1-16", "uniform:1-16"]
DEPTHS = list(range(1, 17))

# The presets before calibration, which the screening recipes below start from: 512 people,
# batch 128, 800 steps. The calibrated presets are `p256-b64-tbptt4`.
OLD = {"data": {"n_people": 512}, "model": {"n_grad_loops": 0},
       "train": {"batch_size": 128, "steps": 800}}


def _on_old(**over) -> dict:
    return {k: {**OLD.get(k, {}), **over.get(k, {})} for k in ("data", "model", "train")}


# name -> (what it changes, {"data": GenConfig overrides, "model": ..., "train": ...})
RECIPES: dict[str, tuple[str, dict]] = {
    "base": ("the tiny presets before calibration (512 people, pre-norm, lr 3e-3, batch 128, "
             "800 steps, no weight decay)", _on_old()),
    "sandwich": ("base + sandwich norm (as in Huginn)", _on_old(model={"norm": "sandwich"})),
    "qknorm": ("base + QK-norm", _on_old(model={"qk_norm": True})),
    "sandwich-qknorm": ("base + sandwich norm + QK-norm",
                        _on_old(model={"norm": "sandwich", "qk_norm": True})),
    "people256": ("base with 256 people", _on_old(data={"n_people": 256})),
    "sandwich-people256": ("base + sandwich norm, 256 people",
                           _on_old(model={"norm": "sandwich"}, data={"n_people": 256})),
    "b64": ("base with batch 64, 1200 steps (0.75x the FLOPs, 1.5x the updates)",
            _on_old(train={"batch_size": 64, "steps": 1200})),
    "b64-people256": ("base with batch 64, 1200 steps, 256 people",
                      _on_old(train={"batch_size": 64, "steps": 1200}, data={"n_people": 256})),
    "b32-people256": ("base with batch 32, 2400 steps, 256 people",
                      _on_old(train={"batch_size": 32, "steps": 2400}, data={"n_people": 256})),
    "p256-b64-tbptt4": ("**adopted** (the tiny presets now): 256 people, batch 64, 1000 steps, "
                        "truncated backprop through the last 4 loops",
                        {"model": {"n_grad_loops": 4}, "data": {"n_people": 256},
                         "train": {"batch_size": 64, "steps": 1000}}),
    "p256-b32": ("256 people, batch 32, 2000 steps (the FLOPs of batch 64 x 1000)",
                 {"data": {"n_people": 256}, "model": {"n_grad_loops": 0},
                  "train": {"batch_size": 32, "steps": 2000}}),
}


def _parse_ints(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def _dataset(data_over: dict, root: Path) -> Path:
    from data_gen import GenConfig, generate
    from data_gen.config import tiny
    cfg = GenConfig.from_dict({**tiny().to_dict(), **data_over})
    key = hashlib.sha256(json.dumps(data_over, sort_keys=True).encode()).hexdigest()[:12]
    path = root / f"data-{key}"
    if not (path / "manifest.json").is_file():
        generate(cfg, path, force=True)
    return path


def run_one(recipe: str, schedule: str, seed: int, threads: int, work: str) -> dict:
    """Train one run from scratch and sweep its serving depths; returns the result row."""
    import torch
    torch.set_num_threads(threads)
    from depthbench.config import model_preset, train_preset
    from depthbench.data import Dataset
    from depthbench.evaluate import sweep
    from depthbench.train import train

    over = RECIPES[recipe][1]
    data = _dataset(over.get("data", {}), Path(work))
    mcfg = model_preset("tiny").replace(**over.get("model", {}))
    tcfg = train_preset("tiny").replace(**{**over.get("train", {}), "seed": seed,
                                           "threads": threads, "ckpt_every": 0})
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        t0 = time.perf_counter()
        summary = train(data, Path(tmp) / "run", mcfg, tcfg, schedule, progress=False,
                        log=lambda *a, **k: None)
        wall = time.perf_counter() - t0
        from depthbench.checkpoint import load_model
        from depthbench.train import metrics_rows
        model, _ = load_model(Path(tmp) / "run")
        curve = [round(r["loss"], 3) for r in metrics_rows(Path(tmp) / "run")
                 if "loss" in r and r["step"] % 50 == 0]
    ds = Dataset(data)
    res = sweep(model, ds, "eval_reordered", DEPTHS)
    by_depth = {k: s.result(ds.attributes) for k, s in res.items()}
    return {"recipe": recipe, "schedule": schedule, "seed": seed, "threads": threads,
            "steps": tcfg.steps, "final_loss": summary["final_loss"], "train_s": round(wall, 1),
            "ceiling_bits": ds.ceiling_bits,
            "bits": [round(by_depth[k]["bits_per_person"], 3) for k in DEPTHS],
            "exact_match": [round(by_depth[k]["exact_match"], 4) for k in DEPTHS],
            "loss_every_50": curve}


def _key(r: dict) -> tuple:
    return r["recipe"], r["schedule"], r["seed"], r["threads"]


def load_rows() -> list[dict]:
    if not ROWS.is_file():
        return []
    return [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]


# ---- the table --------------------------------------------------------------------------------
def _judged_depths(schedule: str) -> list[int]:
    """Where the issue's stability criterion looks: depth K for fixed:K, else 4..16."""
    if schedule.startswith("fixed:"):
        return [int(schedule.split(":")[1])]
    return list(range(4, 17))


def summarize(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["recipe"], r["schedule"], r["threads"]), []).append(r)
    out = []
    for (recipe, schedule, threads), rs in sorted(groups.items(),
                                                  key=lambda kv: (list(RECIPES).index(kv[0][0])
                                                                  if kv[0][0] in RECIPES else 99,
                                                                  kv[0][1], kv[0][2])):
        rs = sorted(rs, key=lambda r: r["seed"])
        ceiling = rs[0]["ceiling_bits"]
        best = [max(r["bits"]) for r in rs]
        med = statistics.median(best)
        judged = _judged_depths(schedule)
        sds = [statistics.stdev([r["bits"][k - 1] for r in rs]) if len(rs) > 1 else float("nan")
               for k in judged]
        means = [statistics.mean(r["bits"][k - 1] for r in rs) for k in judged]
        out.append({
            "recipe": recipe, "schedule": schedule, "threads": threads, "seeds": len(rs),
            "mean_bits": min(means), "worst_seed_best": min(best) / med if med > 0 else 0.0,
            "max_sd_pct": 100 * max(sds) / ceiling, "ceiling": ceiling,
            "final_loss": [r["final_loss"] for r in rs],
            "train_s": statistics.mean(r["train_s"] for r in rs),
            "ok": len(rs) >= 2 and min(best) >= 0.8 * med and max(sds) <= 0.05 * ceiling,
        })
    return out


def write_table(rows: list[dict]) -> str:
    lines = [
        "# Calibration of the CPU training recipe",
        "",
        "Generated by `python benchmarks/calibrate.py --table-only` from the rows in",
        "`docs/calibration/runs.jsonl` (one row per trained run: recipe, schedule, seed, CPU",
        "threads, final loss, bits per person and exact match at serving depths 1-16 on",
        "`eval_reordered`). Every recipe applies to all schedules alike.",
        "",
        "Criterion (issue: a trustworthy instrument): every seed's best-depth recall is at least",
        "80% of the schedule's median, and the seed SD of bits per person is at most 5% of the",
        "ceiling at every judged depth (`fixed:K`: depth K; the others: depths 4-16).",
        "`min bits` is the lowest seed-mean over the judged depths; `worst/median` the worst",
        "seed's best-depth recall over the median seed's; `max SD` the largest seed SD over the",
        "judged depths, in % of the ceiling.",
        "",
        "## What the rows show",
        "",
        "- The failure is a memorization plateau: a failed run ends near the loss of a model",
        "  that has learned the format but no fact (about 3.0-3.6 nats), and recalls almost",
        "  nothing at any depth. It hits `uniform:1-16` (gradients through up to 16 loops of one",
        "  shared layer); `fixed:4` and the fixed phase of `fixed-first` are not affected.",
        "- Norms that damp the recurrent state make it worse: sandwich norm, QK-norm and both",
        "  together each failed on seed 0, where the base recipe learned.",
        "- A smaller memorization load (256 people) and more updates per FLOP (batch 64 or 32)",
        "  raise the success rate but do not remove the plateau (seed 3 at batch 64 and seed 4",
        "  at batch 32 failed).",
        "- Truncated backprop through the last 4 loops (as Huginn trains, through its last 8)",
        "  passes on all 8 seeds of all three schedules and is the cheapest recipe. `fixed:4`",
        "  (K <= 4) is unchanged by it. It is the tiny preset now.",
        "",
        "## Recipes",
        "",
        "| recipe | what it changes |",
        "|---|---|",
    ]
    lines += [f"| `{n}` | {desc} |" for n, (desc, _) in RECIPES.items()]
    lines += ["", "## Results", "",
              "| recipe | schedule | threads | seeds | min bits | worst/median | max SD (% ceiling) "
              "| final losses | s/run | criterion |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summarize(rows):
        losses = " ".join(f"{x:.2f}" for x in s["final_loss"])
        lines.append(
            f"| `{s['recipe']}` | `{s['schedule']}` | {s['threads']} | {s['seeds']} | "
            f"{s['mean_bits']:.1f} / {s['ceiling']:.0f} | {s['worst_seed_best']:.2f} | "
            f"{s['max_sd_pct']:.1f} | {losses} | {s['train_s']:.0f} | "
            f"{'pass' if s['ok'] else 'FAIL'} |")
    lines += ["", "## Per seed: bits per person at depths 1, 2, 4, 8, 12, 16", "",
              "| recipe | schedule | threads | seed | d1 | d2 | d4 | d8 | d12 | d16 |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["recipe"], r["schedule"], r["threads"], r["seed"])):
        b = r["bits"]
        lines.append(f"| `{r['recipe']}` | `{r['schedule']}` | {r['threads']} | {r['seed']} | "
                     + " | ".join(f"{b[k - 1]:.1f}" for k in (1, 2, 4, 8, 12, 16)) + " |")
    text = "\n".join(lines) + "\n"
    TABLE.write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--recipes", default="base")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--seeds", default="0-3")
    ap.add_argument("--threads", default="1", help="CPU threads per run, e.g. 1 or 1,2")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--table-only", action="store_true")
    a = ap.parse_args(argv)
    if not a.table_only:
        recipes = a.recipes.split(",")
        unknown = [r for r in recipes if r not in RECIPES]
        if unknown:
            ap.error(f"unknown recipe(s) {unknown}; known: {', '.join(RECIPES)}")
        done = {_key(r) for r in load_rows()}
        jobs = [(rec, sch, seed, th) for seed in _parse_ints(a.seeds) for th in _parse_ints(a.threads)
                for rec in recipes for sch in a.schedules.split(",")
                if (rec, sch, seed, th) not in done]
        ROWS.parent.mkdir(parents=True, exist_ok=True)
        work = a.work or tempfile.mkdtemp(prefix="depthbench-calib-")
        Path(work).mkdir(parents=True, exist_ok=True)
        for rec in {r for r, *_ in jobs}:  # each dataset once, before the workers need it
            _dataset(RECIPES[rec][1].get("data", {}), Path(work))
        print(f"{len(jobs)} runs to train with {a.workers} workers", flush=True)
        with ProcessPoolExecutor(max_workers=a.workers) as pool:
            futs = [pool.submit(run_one, *job, work) for job in jobs]
            for fut in as_completed(futs):
                row = fut.result()
                with open(ROWS, "a") as f:
                    f.write(json.dumps(row) + "\n")
                best = max(row["bits"])
                print(f"{row['recipe']:>20} {row['schedule']:>24} seed {row['seed']} "
                      f"threads {row['threads']}: loss {row['final_loss']:.3f}, best "
                      f"{best:.1f} bits, d4 {row['bits'][3]:.1f}, d16 {row['bits'][15]:.1f}, "
                      f"{row['train_s']:.0f}s", flush=True)
    text = write_table(load_rows())
    print(text if a.table_only else f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
