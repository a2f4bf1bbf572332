"""Serving benchmark: every mode against the workload's bound (``depthbench.serving.bound``),
measured on this CPU and simulated on GPU profiles.

(cpu) The workload grid on this CPU: the CLI's default model and workload (``--random small --set
      d_model=512 --exit trace:8 --width 64 --requests 256``: prompts of 8, 32 tokens per
      request) and one change of it per row, ``static``, ``no_refill`` and ``cdb`` side by side
      beside full-depth serving at its best knobs. Per workload: the bound, each mode's fraction
      of the ideal time of its work, and ``cdb`` over ``no_refill`` in whole-run tokens/s.
(sim) A workload grid simulated on the H100 profile, ouro-like (max depth 4, trace mean 2) and
      huginn-like (max depth 16, mean 8), with prefill launches and with chunked prefill; and a
      knob grid (defaults, a larger pool and coda batch, the coda every iteration, chunked
      prefill) over two of its workloads on the H100 and H200 profiles and on the CPU profile
      the first workload of (cpu) fitted: the largest fraction any mode reports in each.
(kv)  The KV gather: ``SlotView.extend`` through one flat index over (slot, row, position)
      against the indexing of the 5-D store it replaced (kept here as ``extend_5d``), the same
      ``cdb`` run timed with each in turn, and the gather alone at the default shape.

    python benchmarks/bench_serve.py --cpu [--threads 1]   # (cpu), about 15 minutes at 1 thread
    python benchmarks/bench_serve.py --sim                 # (sim), about 8 minutes
    python benchmarks/bench_serve.py --kv                  # (kv), about 3 minutes

``--json-out docs/serving/bench_serve.json`` keeps the section's rows beside the others kept
there; ``--readme docs/serving/bench_serve.json`` prints the tables docs/benchmarks.md quotes.
"""

from __future__ import annotations

import json
import time

from bench_rows import Parser, add_args, count, from_kept, keep

from depthbench.config import ServeConfig, SimConfig

# name -> changes to the CLI's default workload
CPU_GRID = {
    "256 x 32, prompt 8 (the CLI's)": {},
    "256 x 32, prompt 64": {"prompt_len": 64},
    "256 x 32, prompt 8, shallow exits": {"exit": "trace:4.5"},
    "256 x 32, prompt 8, deep exits": {"exit": "trace:11.5"},
}
SIM_GRID = {
    "256 x 32, prompt 8": {},
    "512 x 256 +-50%, prompt 16": {"requests": 512, "max_new_tokens": 256, "length_spread": 0.5,
                                   "prompt_len": 16},
    "256 x 128, prompt 64": {"max_new_tokens": 128, "prompt_len": 64},
    "2048 x 32, width 256": {"requests": 2048, "width": 256},
}
KNOB_WORKLOADS = ("256 x 32, prompt 8", "256 x 128, prompt 64")
SHAPES = {"ouro-like": (4, 2.0), "huginn-like": (16, 8.0)}   # max depth, trace mean
KNOB_GRID = {
    "defaults": {},
    "larger pool and coda batch": {"admit_min": 48, "pool": 192, "min_coda_batch": 96,
                                   "coda_wait": 16},
    "coda every iteration": {"min_coda_batch": 1, "coda_wait": 1},
    "chunked prefill": {"prefill_chunk": 128},
}
MODES = ("static", "no_refill", "cdb")


def summary(results: list, baseline: str) -> dict:
    """What the tables quote of one comparison (its per-mode results and chosen baseline)."""
    by = {r.mode: r for r in results}
    c, n = by["cdb"], by["no_refill"]
    return {"mean_depth": c.mean_depth, "bound": c.bounds.bound, "cdb": c.bounds.fraction,
            "no_refill": n.bounds.fraction, "static": by["static"].bounds.fraction,
            "full_depth": by["full_depth"].bounds.fraction,
            "cdb_over_no_refill": c.tokens_per_s / n.tokens_per_s,
            "cdb_tokens_per_s": c.tokens_per_s, "baseline": baseline,
            "prefill_share": c.time_split["prefill"],
            "launches_per_token": c.launches_per_token,
            "largest": max(r.bounds.fraction for r in results)}


def summarize(res) -> dict:
    """``summary`` of a simulated comparison (``serving.result.Comparison``)."""
    return summary(res.results, res.baseline)


# ---- (cpu) ----------------------------------------------------------------------------------------
def cpu_section(args) -> dict:
    from depthbench.serving.bench import run_bench
    out = {}
    for name, change in CPU_GRID.items():
        cfg = ServeConfig(**{**dict(random="small", model_set={"d_model": 512}, exit="trace:8",
                                    width=64, requests=256, modes=MODES), **change})
        t = time.perf_counter()
        res = run_bench(cfg, log=print)
        out[name] = {**summary(res["results"], res["baseline"]), "seconds": time.perf_counter() - t}
        if not out.get("_profile"):
            out["_profile"] = res["profile"]   # the fitted CPU profile the knob grid prices
        print(name, json.dumps(out[name]))
    return out


# ---- (sim) ----------------------------------------------------------------------------------------
def sim_cfg(profile: str, shape: str, change: dict, **knobs) -> SimConfig:
    md, mean = SHAPES[shape]
    return SimConfig(random=shape, profile=profile, max_depth=md, exit=f"trace:{mean:g}",
                     modes=MODES, **{**change, **knobs})


def sim_section(cpu_profile: str | None) -> dict:
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    grid = {}
    for prof in ("h100",):
        for shape in SHAPES:
            for name, change in SIM_GRID.items():
                sep = summarize(simulate(sim_cfg(prof, shape, change), load_profile(prof)))
                w = change.get("width", 64)
                ch = summarize(simulate(sim_cfg(prof, shape, change, prefill_chunk=2 * w),
                                      load_profile(prof)))
                grid[f"{prof} | {shape} | {name}"] = {"separate": sep, "chunked": ch}
    knobs = {}
    profiles = [("h100", None), ("h200", None)] + ([("cpu", cpu_profile)] if cpu_profile else [])
    for prof, text in profiles:
        p = load_profile(prof) if text is None else _profile_from(text)
        for shape in SHAPES if text is None else ("cpu-default",):
            for kname, kn in KNOB_GRID.items():
                for wname in KNOB_WORKLOADS:
                    change = SIM_GRID[wname]
                    cfg = (sim_cfg(prof, shape, change, **kn) if text is None else
                           SimConfig(random="small", model_set={"d_model": 512}, exit="trace:8",
                                     modes=MODES, **kn, **change))
                    s = summarize(simulate(cfg, p))
                    knobs[f"{prof} | {shape} | {kname} | {wname}"] = s["largest"]
    return {"grid": grid, "knob_grid": knobs}


def _profile_from(text: str):
    """The fitted profile kept as TOML text in (cpu)'s rows."""
    import tomllib

    from depthbench.serving.profile import Profile
    return Profile(**tomllib.loads(text))


# ---- (kv) -----------------------------------------------------------------------------------------
def extend_5d(self, k, v):
    """``SlotView.extend`` before the flat gather: the store indexed in three of its five
    dimensions per read (the reference this benchmark times against)."""
    st = self.store
    T = k.shape[2]
    k, v = k.transpose(1, 2), v.transpose(1, 2)
    if T == 1:
        st.k[self.slots, self.rows, self.pos] = k[:, 0]
        st.v[self.slots, self.rows, self.pos] = v[:, 0]
    else:
        st.k[self.slots, self.rows, :T] = k
        st.v[self.slots, self.rows, :T] = v
    L = self.length
    if self.read_slots is None:
        ks, vs = st.k[self.slots, self.rows, :L], st.v[self.slots, self.rows, :L]
    else:
        r, p = self.rows[:, None], st.positions[None, :L]
        ks, vs = st.k[self.read_slots, r, p], st.v[self.read_slots, r, p]
    return ks.transpose(1, 2), vs.transpose(1, 2)


def kv_section(args) -> dict:
    """The same cdb run (the CLI's default workload at 128 requests) with each gather, in turn,
    ``args.rounds`` times; outputs checked equal."""
    import torch

    from depthbench.config import model_preset
    from depthbench.exits import parse_exit
    from depthbench.models.looped import LoopedTransformer
    from depthbench.serving.batching import Batching
    from depthbench.serving.engine import Engine
    from depthbench.serving.kvcache import SlotView
    from depthbench.serving.scheduler import Scheduler
    from depthbench.serving.workload import random_workload
    flat = SlotView.extend
    torch.manual_seed(0)
    model = LoopedTransformer(model_preset("small").replace(d_model=512, vocab_size=256)).eval()
    cfg = ServeConfig(random="small", exit="trace:8", requests=128)
    b = Batching.of(cfg).resolved("cpu", cfg.requests)
    crit = parse_exit(cfg.exit, 1, 16, seed=0)
    reqs = random_workload(256, cfg.requests, 8, 32, 0)
    secs, outs = {"flat": [], "5d": []}, {}
    for _ in range(args.rounds):
        for name, fn in (("5d", extend_5d), ("flat", flat)):
            SlotView.extend = fn
            eng = Engine(model, crit, "depth_indexed", b.pool, 41)
            sched = Scheduler(eng, "cdb", b)
            t = time.perf_counter()
            done = sched.run([q.fresh() for q in reqs])
            secs[name].append(time.perf_counter() - t)
            outs[name] = [q.output for q in done]
    SlotView.extend = flat
    assert outs["flat"] == outs["5d"], "the two gathers disagree"
    return {"rounds": args.rounds, "seconds": secs,
            "speedup": min(secs["5d"]) / min(secs["flat"])}


# ---- the tables -----------------------------------------------------------------------------------
def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cpu_lines(out: dict) -> list[str]:
    lines = []
    for threads in (1, 2):
        g = out.get(f"cpu_{threads}threads")
        if not g:
            continue
        lines += [f"At {threads} thread{'s' if threads > 1 else ''}:", "",
                  "| workload (trace exits, 16 loops) | mean depth | bound | cdb: fraction | "
                  "no_refill | static | full depth | cdb / no_refill, tokens/s | prefill share "
                  "of cdb's time |", "|---|---|---|---|---|---|---|---|---|"]
        for name in CPU_GRID:
            e = g[name]
            lines.append(f"| {name} | {e['mean_depth']:.2f} | {e['bound']:.2f}x | {_f(e['cdb'])} | "
                         f"{_f(e['no_refill'])} | {_f(e['static'])} | {_f(e['full_depth'])} | "
                         f"{e['cdb_over_no_refill']:.3f} | {e['prefill_share']:.2f} |")
        es = [g[n] for n in CPU_GRID]
        lines += ["", f"`cdb` reads {min(e['cdb'] for e in es):.3f}-{max(e['cdb'] for e in es):.3f} "
                  f"of its bound and is faster than `no_refill` over the whole run at "
                  f"{sum(e['cdb_over_no_refill'] > 1 for e in es)} of {len(es)} workloads; the "
                  f"largest fraction any mode reports is {max(e['largest'] for e in es):.3f}.", ""]
    return lines


def sim_lines(out: dict) -> list[str]:
    s = out.get("sim")
    if not s:
        return []
    lines = ["| profile | shape | workload | bound | cdb: fraction (chunked prefill) | no_refill | "
             "cdb / no_refill, tokens/s | chunked / separate cdb, tokens/s |",
             "|---|---|---|---|---|---|---|---|"]
    for key, e in s["grid"].items():
        a, c = e["separate"], e["chunked"]
        lines.append(f"| {key} | {a['bound']:.2f}x | {a['cdb']:.3f} ({c['cdb']:.3f}) | "
                     f"{a['no_refill']:.3f} | {a['cdb_over_no_refill']:.3f} | "
                     f"{c['cdb_tokens_per_s'] / a['cdb_tokens_per_s']:.3f} |")
    every = [v for e in s["grid"].values() for x in e.values() for v in
             (x["cdb"], x["no_refill"], x["static"], x["full_depth"])]
    knobs = s["knob_grid"]
    lines += ["", f"The largest fraction any mode reports is {max(every):.3f} in the grid and "
              f"{max(knobs.values()):.3f} in the knob grid ({len(knobs)} comparisons on "
              f"{', '.join(sorted({k.split(' | ')[0] for k in knobs}))})."]
    return lines


def kv_lines(out: dict) -> list[str]:
    k = out.get("kv")
    if not k:
        return []
    return [f"The flat KV gather: the same `cdb` run in {min(k['seconds']['flat']):.1f} s against "
            f"{min(k['seconds']['5d']):.1f} s with the 5-D indexing it replaced, "
            f"{k['speedup']:.2f}x (best of {k['rounds']} rounds each, in turn; outputs equal)."]


def readme_lines(out: dict) -> list[str]:
    return cpu_lines(out) + sim_lines(out) + kv_lines(out)


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="(cpu): the grid measured on this CPU")
    ap.add_argument("--sim", action="store_true", help="(sim): the simulated grid and knob grid")
    ap.add_argument("--kv", action="store_true", help="(kv): the KV gather, flat against 5-D")
    ap.add_argument("--threads", type=count(1, 64), default=1)
    ap.add_argument("--rounds", type=count(1, 20), default=3, help="(kv): runs of each gather")
    add_args(ap)
    args = ap.parse_args()
    if from_kept(args, lambda kept: "\n".join(readme_lines(kept))):
        return
    import torch
    torch.set_num_threads(args.threads)
    kept = (json.loads(args.json_out.read_text())
            if args.json_out and args.json_out.exists() else {})
    out = dict(kept)
    if args.cpu:
        out[f"cpu_{args.threads}threads"] = cpu_section(args)
    if args.sim:
        cpu = out.get("cpu_1threads", {}).get("_profile")
        out["sim"] = sim_section(cpu)
    if args.kv:
        out["kv"] = kv_section(args)
    if not (args.cpu or args.sim or args.kv):
        ap.error("name a section: --cpu, --sim or --kv")
    keep(args, out, lambda res: "\n".join(readme_lines(res)))


if __name__ == "__main__":
    main()
