"""Serving benchmark, measured and simulated side by side, in one run:

(a) a trained tiny model with a real exit criterion (all four modes, and lookahead);
(b) a random-weight model with d_model=512 (1 prelude, 2 core, 1 coda layers), a synthetic depth
    trace of mean 8 of 16, width 64: static, no_refill and cdb measured side by side (a core
    launch of each in turn: this machine's speed drifts by 10-20% over minutes, and so hits all
    modes alike) in ``--rounds`` rounds, with whole-run and steady-state speedups against the
    paper-convention bound, and beside each figure the same workload simulated on a profile
    calibrated from the first round's own launch timers (widths 16 and 64, run beside it);
(c) the simulator's prediction against measurement at held-out widths 32 and 48 (measured in
    the first round too);
(d) the documented H100 and H200 profiles on ouro-like and huginn-like shapes;
(e) the workload grid, simulated on H100 and H200: output length, prompt length, width and mean
    exit depth, each mode's steady-state fraction of the achievable bound (``--grid-plot`` draws
    it against the workload);
(f) the workload grid measured on this CPU: the CLI's default model and workload (``--random
    small --set d_model=512 --exit trace:8 --width 64 --requests 256``) and one change of it
    per row (output length, prompt length, width, mean exit depth), the three modes side by
    side at the CPU's scheduler defaults (``--grid-plot`` draws it beside (e)).

    python benchmarks/bench_serve.py [--skip-trained] [--rounds 3] [--requests 256] [--width 64]
    python benchmarks/bench_serve.py --grid-only [--grid-plot serve_grid.png]
    python benchmarks/bench_serve.py --cpu-grid-only [--grid-plot serve_grid.png]

(a) uses RUN (default: the quickstart's uniform run; trained here if missing).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from bench_rows import Parser, add_args, count, from_kept, keep

from depthbench.checkpoint import load_model, read_run
from depthbench.config import ServeConfig, SimConfig
from depthbench.data.synthetic import Dataset
from depthbench.model import LoopedTransformer
from depthbench.serving.bench import dataset_workload, serve_bench
from depthbench.serving.profile import sim_model

DEFAULT_RUN = Path("runs/quickstart/runs/uniform_1-16-s0")


def show(title: str, res: dict) -> None:
    print(f"\n{title}  (adaptive modes agree: {res['adaptive_modes_agree']})")
    print(f"{'mode':>10} {'tok/s':>9} {'speedup':>8} {'ceiling':>8} {'frac':>6} {'decode x':>9} "
          f"{'dec frac':>9} {'depth':>6} {'rows/launch':>12} {'pad':>6} {'recall':>7}")
    for r in res["results"]:
        em = "" if r["exact_match"] is None else f"{r['exact_match']:.3f}"
        print(f"{r['mode']:>10} {r['tokens_per_s']:9.1f} {r['speedup']:8.3f} {r['ceiling']:8.3f} "
              f"{r['fraction_of_ceiling']:6.3f} {r['decode_speedup']:9.3f} "
              f"{r['decode_fraction_of_ceiling']:9.3f} {r['mean_depth']:6.2f} "
              f"{r['rows_per_launch']:12.1f} {r['padding_waste']:6.3f} {em:>7}")
    for r in res["results"]:
        ts = r["time_split"]
        print(f"{r['mode']:>10} time: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in ts.items())
              + f", scheduler {100 * (1 - sum(ts.values())):.0f}%")
    by = {r["mode"]: r for r in res["results"]}
    if "cdb" in by and "no_refill" in by:
        c, n = by["cdb"], by["no_refill"]
        print(f"cdb / no_refill throughput: {c['tokens_per_s'] / n['tokens_per_s']:.2f}x"
              f" (decode: {c['decode_tokens_per_s'] / n['decode_tokens_per_s']:.2f}x)")


def trained_run(path: Path | None) -> Path:
    if path is not None and path.exists():
        return path
    from data_gen import resolve_config
    from depthbench.config import tiny_model, train_preset
    from depthbench.data.generate import generate
    from depthbench.train.loop import train
    tmp = Path(tempfile.mkdtemp())
    generate(resolve_config("tiny"), tmp / "data")
    train(tmp / "data", tmp / "run", tiny_model(), train_preset("tiny"), "uniform:1-16",
          progress=False, log=lambda *a: None)
    return tmp / "run"


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=DEFAULT_RUN)
    ap.add_argument("--exit", default="argmax:2")
    ap.add_argument("--requests", type=count(), default=256, help="(b) and (c)")
    ap.add_argument("--trained-requests", type=count(), default=1024,
                    help="(a): dataset requests (more than the pool holds several times over, "
                         "so fill and drain are a small part of the run)")
    ap.add_argument("--width", type=count(), default=64)
    ap.add_argument("--new-tokens", type=count(), default=32)
    ap.add_argument("--d-model", type=count(), default=512)
    ap.add_argument("--threads", type=count(), default=1)
    ap.add_argument("--seed", type=count(0), default=0, help="workload and depth trace of (b) and (c)")
    ap.add_argument("--skip-gpu", action="store_true", help="leave out (d)")
    ap.add_argument("--measure-only", action="store_true",
                    help="(b)'s rounds at --width alone: no calibration, simulation or (c)")
    ap.add_argument("--rounds", type=count(), default=3, help="interleaved repetitions of (b)")
    ap.add_argument("--skip-trained", action="store_true", help="only (b)-(e)")
    ap.add_argument("--grid-only", action="store_true", help="only (e), the simulated grid")
    ap.add_argument("--cpu-grid-only", action="store_true",
                    help="only (f), the grid measured on this CPU")
    ap.add_argument("--grid-plot", type=Path, default=None, help="draw (e) into this PNG")
    ap.add_argument("--prefill-chunk", type=count(0), default=0,
                    help="(b): chunked prefill in cdb and static, prompt tokens in flight in "
                         "core launches at once (0: a prefill launch per admission); the grid "
                         "(e) runs both, chunked at 2 x width")
    add_args(ap)   # --json-out (docs/serving/bench_serve.json is the committed run), --readme
    args = ap.parse_args()
    if from_kept(args, lambda kept: "\n".join(readme_lines(kept))):
        return
    torch.set_num_threads(args.threads)
    out = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.grid_only or args.cpu_grid_only:   # with --json-out, (e) or (f) replaces its
        key = "grid" if args.grid_only else cpu_grid_key(args.threads)   # part of the run kept there
        kept = (json.loads(args.json_out.read_text())
                if args.json_out and args.json_out.exists() else {})
        if args.grid_only:
            out["grid"] = grid_section(args, cpu_grids(kept))
        else:
            out[key] = cpu_grid_section(args)
            if args.grid_plot and "grid" in kept:
                _grid_png(kept["grid"], cpu_grids({**kept, key: out[key]}), args.grid_plot)
        print(json.dumps(out, default=str))
        if args.json_out:
            keep(args, _compact({**kept, key: out[key]}),
                 lambda res: "\n".join(grid_lines(res["grid"]) if key == "grid"
                                       else cpu_grid_lines(cpu_grids(res))))
        return

    if not args.skip_trained:
        trained_section(args, out)
    out["random"] = random_model_section(args)
    if not args.skip_gpu:
        out["gpu_sim"] = gpu_section(args)
    out[cpu_grid_key(args.threads)] = cpu_grid_section(args)
    if not args.skip_gpu:
        out["grid"] = grid_section(args, cpu_grids(out))
    print(json.dumps(out, default=str))
    keep(args, _compact(out), lambda res: "\n".join(readme_lines(res)))


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def readme_lines(out: dict) -> list[str]:
    """The README's measured serving figures, (a)-(d), from one run's ``--json-out`` file (the
    committed one is docs/serving/bench_serve.json; a test checks the README against it)."""
    lines = []
    if "trained" in out:
        by = {r["mode"]: r for r in out["trained"]}
        c, ahead = by["cdb"], out["lookahead"]
        ch = next(r for r in out["trained_chunked"] if r["mode"] == "cdb")
        lines += ["| mode | tokens/s | speedup over static | decode only | mean depth | prefill "
                  "share of its time | exact match |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {m} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f}x | "
                  f"{r['decode_speedup']:.2f}x | {r['mean_depth']:.2f} | "
                  f"{r['prefill_s'] / r['wall_s']:.2f} | {_f(r['exact_match'])} |"
                  for m, r in by.items()]
        lines += ["", f"Ceiling {c['ceiling']:.2f}x; `cdb` realizes {c['achievable_fraction']:.3f} "
                  f"of the achievable bound over the whole run ({c['achievable_bound']:.2f}x) and "
                  f"{_f(c['steady_achievable_fraction'])} in its steady state. Lookahead exits "
                  f"(decided one loop early) cost a loop per token: mean depth "
                  f"{ahead['mean_depth']:.2f} instead of {c['mean_depth']:.2f}, exact match "
                  f"{ahead['exact_match']:.3f} instead of {c['exact_match']:.3f}. With chunked "
                  f"prefill (`--prefill-chunk {2 * int(out['args']['width'])}`"
                  f") `cdb` gives {ch['tokens_per_s']:.0f} tokens/s against "
                  f"{c['tokens_per_s']:.0f}, and prefill's share of its time is "
                  f"{ch['prefill_s'] / ch['wall_s']:.2f} against {c['prefill_s'] / c['wall_s']:.2f}."]
        if "prompt_us_per_loop" in out:
            us = out["prompt_us_per_loop"]
            lines[-1] += (f" A prompt token costs {us['prefill_launch']:.2f} microseconds per loop "
                          f"in its own prefill launch and {us['chunked']:.2f} riding in core "
                          "launches beside decode tokens.")
        if "trained_sim" in out:
            t = out["trained_sim"]
            lines += ["", f"Simulated on H100 with this model's shape (prompts of "
                          f"{t['prompt_len']} tokens, {t['new_tokens']} generated, a trace of "
                          f"mean {t['trace_mean']:.2f}), prefill's share of `cdb`'s time is "
                          f"{t['separate_share']:.3f} with separate prefill launches and "
                          f"{t['chunked_share']:.3f} with chunked prefill, at "
                          f"{t['chunked_tokens_per_s']:.2f}x the tokens/s."]
    rounds = out["random"]["rounds"]
    lines += ["", "| round | cdb: steady fraction of the achievable bound (whole run) | no_refill "
              "(whole run) | cdb: steady fraction of the paper-convention bound | no_refill | "
              "cdb / no_refill, steady tokens/s |", "|---|---|---|---|---|---|"]
    for i, t in enumerate(rounds):
        by = {r["mode"]: r for r in t}
        c, n = by["cdb"], by["no_refill"]
        lines.append(f"| {i + 1} | {_f(c['steady_achievable_fraction'])} "
                     f"({c['achievable_fraction']:.3f}) | {_f(n['steady_achievable_fraction'])} "
                     f"({n['achievable_fraction']:.3f}) | {_f(c['steady_fraction'])} | "
                     f"{_f(n['steady_fraction'])} | "
                     f"{c['steady_tokens_per_s'] / n['steady_tokens_per_s']:.2f}x |")
    fr = [{r["mode"]: r for r in t} for t in rounds]
    above = sum(t["cdb"]["steady_tokens_per_s"] > t["no_refill"]["steady_tokens_per_s"] for t in fr)
    ss = [t["cdb"]["steady_achievable_fraction"] for t in fr]
    lines += ["", f"`cdb` is above `no_refill` in {above} of {len(fr)} rounds; its steady "
              f"fractions of the achievable bound span {min(ss):.3f}-{max(ss):.3f}."]
    if "simulated" in out["random"]:
        lines += ["", "| mode | tokens/s, measured | simulated | steady-state speedup, measured | "
                  "simulated | steady fraction of the achievable bound, measured | simulated |",
                  "|---|---|---|---|---|---|---|"]
        for r, q in zip(rounds[0], out["random"]["simulated"]):
            lines.append(f"| {r['mode']} | {r['tokens_per_s']:.1f} | {q['tokens_per_s']:.1f} | "
                         f"{_f(r['steady_speedup'])} | {_f(q['steady_speedup'])} | "
                         f"{_f(r['steady_achievable_fraction'])} | "
                         f"{_f(q['steady_achievable_fraction'])} |")
        held = out["random"]["held_out"]
        lines += ["", "Held-out widths, simulated against measured tokens/s: " + "; ".join(
            f"width {w} " + ", ".join(f"{m} {100 * (b / a - 1):+.1f}%" for m, (a, b) in by.items())
            for w, by in held.items()) + "."]
    if "gpu_sim" in out:
        lines += ["", "| profile | shape | coda | cdb: steady fraction of the achievable bound "
                  "(whole run) | no_refill | cdb / no_refill, steady tokens/s |",
                  "|---|---|---|---|---|---|"]
        for key, by in out["gpu_sim"].items():
            prof, shape, mcb = key.split("/")
            c, n = by["cdb"], by["no_refill"]
            coda = "every iteration" if mcb.endswith("=1") else "width/2 batch"
            lines.append(f"| {prof} | {shape} | {coda} | {_f(c['steady_achievable_fraction'])} "
                         f"({c['achievable_fraction']:.3f}) | "
                         f"{_f(n['steady_achievable_fraction'])} | "
                         f"{c['steady_tokens_per_s'] / n['steady_tokens_per_s']:.2f}x |")
    if "grid" in out:
        lines += ["", *grid_lines(out["grid"])]
    if cpu_grids(out):
        lines += ["", *cpu_grid_lines(cpu_grids(out))]
    return lines


def grid_lines(grid: dict) -> list[str]:
    """(e), the README's workload grid table, from ``grid_section``'s entries."""
    head = ["workload"]
    for shape in GRID_SHAPES:
        head += [f"{shape} H100: cdb (whole run)", "cdb, chunked prefill", "no_refill", "bound"]
    head += [f"{shape} H200: cdb, chunked" for shape in GRID_SHAPES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in GRID:
        cells = [grid_cells(grid[f"h100/{shape}/{name}"]) for shape in GRID_SHAPES]
        cells += [f"{e['cdb_steady']:.3f}, {e['cdb_chunked_steady']:.3f}"
                  for e in (grid[f"h200/{shape}/{name}"] for shape in GRID_SHAPES)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + ["", grid_prose(grid)]


def grid_prose(grid: dict) -> str:
    """The README's sentence on (e): the largest fraction of any bound, and the span of cdb's
    steady fractions per shape, with and without chunked prefill, on both profiles."""
    def span(key: str, shape: str, names=GRID) -> str:
        v = [grid[f"{p}/{shape}/{n}"][key] for p in ("h100", "h200") for n in names]
        return f"{min(v):.3f}-{max(v):.3f}"
    top = max(e["largest_fraction"] for e in grid.values())
    lock = max(e["lockstep_speedup"] for e in grid.values())
    long = [n for n in GRID if GRID[n][1] >= 256]
    short = [n for n in GRID if GRID[n][1] <= 32 and GRID[n][4] == 64]
    return (f"The largest fraction of any bound in the grid is {top:.3f}; `static_lockstep` runs "
            f"up to {lock:.3f}x `static`. `cdb`'s steady fractions on both GPUs with separate "
            f"prefill launches: at 256 tokens per request ouro-like "
            f"{span('cdb_steady', 'ouro-like', long)} and huginn-like "
            f"{span('cdb_steady', 'huginn-like', long)}; at 32 tokens per request (width 64) "
            f"{span('cdb_steady', 'ouro-like', short)} and "
            f"{span('cdb_steady', 'huginn-like', short)}; with chunked prefill at every workload "
            f"ouro-like {span('cdb_chunked_steady', 'ouro-like')} and huginn-like "
            f"{span('cdb_chunked_steady', 'huginn-like')}.")


def _compact(x):
    """The results without the per-depth histograms (what the README does not quote)."""
    if isinstance(x, dict):
        return {k: _compact(v) for k, v in x.items() if k != "depth_histogram"}
    if isinstance(x, list):
        return [_compact(v) for v in x]
    return round(x, 5) if isinstance(x, float) else x


def trained_section(args, out: dict) -> None:
    run = trained_run(args.run)
    model, _ = load_model(run)
    ds = Dataset(read_run(run)["data"])
    n = args.trained_requests

    def bench(**kw):
        cfg = ServeConfig(exit=args.exit, width=args.width, requests=n, **kw)
        return serve_bench(model, dataset_workload(ds, n, 0, 0), cfg, ds.seq_len - 1)

    res = bench()
    show(f"(a) trained tiny model {run}, exit {args.exit}, width {args.width}, {n} requests", res)
    out["trained"] = res["results"]
    ahead = bench(modes=("cdb",), lookahead=True)["results"][0]
    now = next(r for r in res["results"] if r["mode"] == "cdb")
    print(f"lookahead (exit decided one loop early): recall {ahead['exact_match']:.3f} vs "
          f"{now['exact_match']:.3f}, mean depth {ahead['mean_depth']:.2f} vs {now['mean_depth']:.2f}, "
          f"tokens/s {ahead['tokens_per_s']:.0f} vs {now['tokens_per_s']:.0f}")
    out["lookahead"] = ahead
    chunked = bench(modes=("static", "cdb"), prefill_chunk=2 * args.width)["results"]
    c = next(r for r in chunked if r["mode"] == "cdb")
    # what one prompt token costs per loop: in its own prefill launch, or riding in core
    # launches beside decode tokens (what it added to them, ``HostState.prompt_seconds``)
    prompt_tokens = sum(len(q.prompt) for q in dataset_workload(ds, n, 0, 0))
    loops = prompt_tokens * res["config"]["max_depth"]
    out["prompt_us_per_loop"] = {"prefill_launch": 1e6 * now["prefill_s"] / loops,
                                 "chunked": 1e6 * c["prefill_s"] / loops}
    print(f"chunked prefill ({2 * args.width} prompt tokens at once): cdb {c['tokens_per_s']:.0f} "
          f"tokens/s against {now['tokens_per_s']:.0f}; prefill's share of its time "
          f"{c['prefill_s'] / c['wall_s']:.2f} against {now['prefill_s'] / now['wall_s']:.2f}; "
          "a prompt token's microseconds per loop: " + ", ".join(
              f"{k} {v:.2f}" for k, v in out["prompt_us_per_loop"].items()))
    out["trained_chunked"] = chunked
    out["trained_sim"] = trained_sim(model.cfg, now, n, args.width, prompt_tokens / n)


def trained_sim(mcfg, cdb: dict, n: int, width: int, prompt_len: float) -> dict:
    """(a) on a GPU, simulated (H100): the trained model's shape, a trace of cdb's measured mean
    depth, prompts and generations of the workload's mean lengths; prefill's share of cdb's time
    with separate prefill launches and with chunked prefill (2 x width prompt tokens at once)."""
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    cfg = SimConfig(random="tiny", model_set=mcfg.to_dict(), max_depth=16, width=width,
                    exit=f"trace:{cdb['mean_depth']:.2f}", requests=n,
                    prompt_len=round(prompt_len), max_new_tokens=round(cdb["output_tokens"] / n),
                    modes=MODES)
    h100 = load_profile("h100")
    sep, ch = (next(r for r in simulate(c, h100)["results"] if r["mode"] == "cdb")
               for c in (cfg, cfg.replace(prefill_chunk=2 * width)))
    res = {"model": mcfg.to_dict(), "requests": n, "width": width, "mean_prompt_len": prompt_len,
           "trace_mean": round(cdb["mean_depth"], 2), "prompt_len": cfg.prompt_len,
           "new_tokens": cfg.max_new_tokens, "separate_share": sep["prefill_s"] / sep["wall_s"],
           "chunked_share": ch["prefill_s"] / ch["wall_s"],
           "chunked_tokens_per_s": ch["tokens_per_s"] / sep["tokens_per_s"]}
    print(f"simulated on H100 (prompts of {res['prompt_len']}, {res['new_tokens']} tokens, trace "
          f"mean {res['trace_mean']}): prefill's share of cdb's time {res['separate_share']:.3f} "
          f"with separate prefill launches, {res['chunked_share']:.3f} chunked, at "
          f"{res['chunked_tokens_per_s']:.2f}x the tokens/s")
    return res


# ---- (b) measured and simulated side by side; (c) held-out widths; (d) GPU profiles -------------
MODES = ("static", "no_refill", "cdb")


def _cfg(args, **kw) -> SimConfig:
    return SimConfig(random="small", model_set=dict(d_model=args.d_model, n_heads=8, n_prelude=1,
                                                    n_core=2, n_coda=1, max_seq_len=128),
                     exit="trace:8", max_depth=16, requests=args.requests, prompt_len=4,
                     max_new_tokens=args.new_tokens, length_spread=0.5, modes=MODES,
                     seed=args.seed, prefill_chunk=args.prefill_chunk, **kw)


def _with_bounds(results: list[dict], cfg: SimConfig) -> list[dict]:
    """Bounds and speedups over static for results measured one mode at a time."""
    from depthbench.flops import FlopModel
    from depthbench.serving.compare import add_all_bounds
    mcfg = sim_model(cfg)
    add_all_bounds(results, FlopModel.of(mcfg, cfg.prompt_len + (cfg.max_new_tokens or 32)),
                   FlopModel.of(mcfg, 0), cfg.max_depth)
    return results


def random_model_section(args) -> dict:
    """(b) the random d_model=512 model, trace mean 8 of 16, width 64: the modes measured side by
    side (a core launch of each in turn) in ``--rounds`` rounds, the first with widths 16, 32
    and 48 beside 64 (all twelve runs interleaved, so they share the machine's speed); the
    calibrated simulator beside it; (c) the profile fitted to that round's widths 16 and 64
    predicts its held-out widths 32 and 48."""
    from depthbench.serving.profile import fit_profile, measure
    from depthbench.serving.sim import simulate
    cfg = _cfg(args, width=args.width, calibrate_widths=(16, args.width))
    torch.manual_seed(0)
    model = LoopedTransformer(sim_model(cfg)).eval()
    widths = (args.width,) if args.measure_only else (16, 32, 48, args.width)
    first = measure(model, cfg, widths=widths)
    rounds = [{m: first[args.width, m] for m in MODES}]
    rounds += [{m: run for (_, m), run in measure(model, cfg).items()} for _ in range(args.rounds - 1)]
    tables = [_with_bounds([dict(rd[m][0]) for m in MODES], cfg) for rd in rounds]
    print("\n(b) every round (modes side by side), steady-state fraction of the bound:")
    for i, t in enumerate(tables):
        by = {r["mode"]: r for r in t}
        c = by["cdb"]
        print(f"  round {i + 1}: cdb {c['steady_speedup']:.3f}x of {c['steady_bound']:.3f} "
              f"({100 * c['steady_fraction']:.1f}%; whole run {100 * c['paper_fraction']:.1f}%), "
              f"no_refill {by['no_refill']['steady_speedup']:.3f}x "
              f"({100 * by['no_refill']['steady_fraction']:.1f}%)")
    fr = sorted(next(r for r in t if r["mode"] == "cdb")["steady_fraction"] for t in tables)
    print(f"  cdb steady-state fraction: median {100 * fr[len(fr) // 2]:.1f}%, "
          f"min {100 * fr[0]:.1f}%, max {100 * fr[-1]:.1f}%")
    if args.measure_only:
        return {"rounds": tables}
    runs = [first[w, m] for w in (16, args.width) for m in MODES]
    prof, info = fit_profile(sim_model(cfg), runs, cfg, 4)
    simulated = simulate(cfg, prof)["results"]
    _side_by_side(f"(b) random d_model={args.d_model} model, trace mean 8 of 16, width {args.width}, "
                  f"{args.requests} requests x {args.new_tokens}+-50% tokens, round 1; simulated on "
                  f"the profile calibrated from round 1 (widths 16 and {args.width}), fit R^2 "
                  f"{', '.join(f'{k} {v:.2f}' for k, v in info['r2'].items())}", tables[0], simulated)
    held = {}
    for w in (32, 48):
        sim = simulate(cfg.replace(width=w), prof)["results"]
        held[w] = {q["mode"]: (first[w, q["mode"]][0]["tokens_per_s"], q["tokens_per_s"]) for q in sim}
    print("\n(c) held-out widths, measured in round 1 beside the calibration runs vs simulated "
          "tokens/s")
    for w, by in held.items():
        print(f"  width {w}: " + ", ".join(f"{k} {a:.1f} vs {b:.1f} ({100 * (b / a - 1):+.1f}%)"
                                          for k, (a, b) in by.items()))
    return {"rounds": tables, "simulated": simulated, "held_out": held, "profile": prof.to_toml()}


def _side_by_side(title: str, measured: list[dict], simulated: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'mode':>10} {'tok/s':>8} {'sim':>8} {'speedup':>8} {'sim':>6} {'steady x':>9} {'sim':>6} "
          f"{'bound':>6} {'steady frac':>11} {'sim':>6} {'rows/launch':>11}")
    for r, q in zip(measured, simulated):
        print(f"{r['mode']:>10} {r['tokens_per_s']:8.1f} {q['tokens_per_s']:8.1f} "
              f"{r['speedup']:8.3f} {q['speedup']:6.3f} {r['steady_speedup']:9.3f} "
              f"{q['steady_speedup']:6.3f} {r['steady_bound']:6.3f} {r['steady_fraction']:11.3f} "
              f"{q['steady_fraction']:6.3f} {r['rows_per_launch']:11.1f}")
    by = {r["mode"]: r for r in measured}
    c, n = by["cdb"], by["no_refill"]
    print(f"cdb / no_refill steady-state throughput: "
          f"{c['steady_tokens_per_s'] / n['steady_tokens_per_s']:.2f}x")


def gpu_section(args) -> dict:
    """(d) the documented GPU profiles: ouro-like (max depth 4, trace mean 2) and huginn-like
    (max depth 16, trace mean 8), 512 requests x 256+-50% tokens, prompts of 16, width 64; the
    coda run once width/2 exited tokens wait (the default) and every iteration."""
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    out = {}
    print("\n(d) simulated GPU profiles (steady state; cdb pool: width + min_coda_batch)")
    for prof in ("h100", "h200"):
        p = load_profile(prof)
        for shape, md, mean, mcb in (("ouro-like", 4, 2.0, 0), ("ouro-like", 4, 2.0, 1),
                                     ("huginn-like", 16, 8.0, 0), ("huginn-like", 16, 8.0, 1)):
            cfg = SimConfig(random=shape, max_depth=md, exit=f"trace:{mean:g}", requests=512,
                            max_new_tokens=256, prompt_len=16, width=64, length_spread=0.5,
                            modes=MODES, min_coda_batch=mcb, coda_wait=8)
            by = {r["mode"]: r for r in simulate(cfg, p)["results"]}
            c, n = by["cdb"], by["no_refill"]
            out[f"{prof}/{shape}/min_coda_batch={mcb}"] = by
            print(f"  {prof} {shape:>11} min_coda_batch {mcb or 'width/2':>7}: "
                  f"cdb {c['steady_speedup']:.3f}x of bound "
                  f"{c['steady_bound']:.3f} ({100 * c['steady_fraction']:.1f}%; whole run "
                  f"{100 * c['paper_fraction']:.1f}%), no_refill {n['steady_speedup']:.3f}x, "
                  f"cdb/no_refill {c['steady_tokens_per_s'] / n['steady_tokens_per_s']:.2f}x")
    return out


# (e): name -> (requests, new tokens, spread, prompt length, width, loops beyond the first as a
# multiple of the shape's mean: ouro-like trace mean 2 of 4, huginn-like 8 of 16); the first four
# are the workloads the README's table names
GRID = {
    "256 x 32, prompt 8": (256, 32, 0.0, 8, 64, 1.0),
    "512 x 256 +-50%, prompt 16": (512, 256, 0.5, 16, 64, 1.0),
    "256 x 128, prompt 64": (256, 128, 0.0, 64, 64, 1.0),
    "2048 x 32, width 256": (2048, 32, 0.0, 8, 256, 1.0),
    "512 x 256 +-50%, prompt 16, shallow exits": (512, 256, 0.5, 16, 64, 0.5),
    "512 x 256 +-50%, prompt 16, deep exits": (512, 256, 0.5, 16, 64, 1.5),
}
GRID_SHAPES = {"ouro-like": (4, 2.0), "huginn-like": (16, 8.0)}   # (max depth, trace mean)


def grid_entry(prof: str, shape: str, name: str) -> dict:
    """One workload of ``GRID`` on one profile and shape (``GRID_SHAPES``), simulated: per mode
    the steady-state and whole-run fractions of the achievable bound, cdb's with chunked prefill
    (2 x width prompt tokens at once, cdb and its static baseline, no_refill beside them as in
    the comparison without it), static_lockstep's speedup
    over static, and the largest fraction of any bound."""
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    modes = ("static", "no_refill", "cdb", "static_lockstep")
    p = load_profile(prof)
    md, base = GRID_SHAPES[shape]
    n, new, spread, prompt, width, scale = GRID[name]
    mean = 1 + scale * (base - 1)
    cfg = SimConfig(random=shape, max_depth=md, exit=f"trace:{mean:g}", requests=n,
                    max_new_tokens=new, prompt_len=prompt, width=width, length_spread=spread,
                    modes=modes)
    by = {r["mode"]: r for r in simulate(cfg, p)["results"]}
    # no_refill beside them too: the bound prices the shared work at the cheapest any mode of
    # the comparison paid, so both comparisons hold the same modes
    ch = {r["mode"]: r for r in simulate(cfg.replace(modes=("static", "no_refill", "cdb"),
                                                     prefill_chunk=2 * width), p)["results"]}
    # every fraction of a bound (static_lockstep's speedup over static is printed on its own:
    # its "fraction of the ceiling" divides by static's ceiling, 1)
    fractions = [v for r in (*by.values(), *ch.values()) for k, v in r.items()
                 if isinstance(v, float) and (k.endswith("fraction") or (
                     k.endswith("fraction_of_ceiling") and r["mode"] != "static_lockstep"))]
    return {"mean_depth": mean, "bound": by["cdb"]["steady_achievable_bound"],
            **{f"{m}_steady": by[m]["steady_achievable_fraction"] for m in modes[1:3]},
            **{f"{m}_whole": by[m]["achievable_fraction"] for m in modes[1:3]},
            "cdb_chunked_steady": ch["cdb"]["steady_achievable_fraction"],
            "cdb_chunked_whole": ch["cdb"]["achievable_fraction"],
            "lockstep_speedup": by["static_lockstep"]["speedup"],
            "largest_fraction": max(fractions)}


def grid_cells(e: dict) -> str:
    """The README table's cells of one grid entry for one profile and shape."""
    return (f"{e['cdb_steady']:.3f} ({e['cdb_whole']:.3f}) | {e['cdb_chunked_steady']:.3f} "
            f"({e['cdb_chunked_whole']:.3f}) | {e['no_refill_steady']:.3f} | {e['bound']:.2f}x")


def grid_section(args, cpu: dict[int, dict] | None = None) -> dict:
    """(e) every workload of ``GRID`` simulated on the H100 and H200 profiles for ouro-like
    and huginn-like (``GRID_SHAPES``), ``grid_entry`` each."""
    out = {}
    print("\n(e) workload grid, simulated (steady-state fraction of the achievable bound)")
    for prof in ("h100", "h200"):
        for shape in GRID_SHAPES:
            for name in GRID:
                e = out[f"{prof}/{shape}/{name}"] = grid_entry(prof, shape, name)
                print(f"  {prof} {shape:>11} {name:>42}: cdb {e['cdb_steady']:.3f} (whole "
                      f"{e['cdb_whole']:.3f}), chunked prefill {e['cdb_chunked_steady']:.3f} "
                      f"(whole {e['cdb_chunked_whole']:.3f}), no_refill "
                      f"{e['no_refill_steady']:.3f}, bound {e['bound']:.2f}x; static_lockstep "
                      f"{e['lockstep_speedup']:.3f}x static; largest fraction "
                      f"{e['largest_fraction']:.3f}")
    if args.grid_plot:
        _grid_png(out, cpu, args.grid_plot)
        print(f"  plot: {args.grid_plot}")
    return out


# (f): name -> (requests, new tokens, spread, prompt length, width, trace mean of 16 loops): the
# CLI's default workload, then one change of it per row
CPU_GRID = {
    "256 x 32, prompt 8 (the CLI's)": (256, 32, 0.0, 8, 64, 8.0),
    "256 x 96 +-50%, prompt 8": (256, 96, 0.5, 8, 64, 8.0),
    "256 x 32, prompt 64": (256, 32, 0.0, 64, 64, 8.0),
    "512 x 32, width 128": (512, 32, 0.0, 8, 128, 8.0),
    "256 x 32, prompt 8, shallow exits": (256, 32, 0.0, 8, 64, 4.5),
    "256 x 32, prompt 8, deep exits": (256, 32, 0.0, 8, 64, 11.5),
}


def cpu_grid_section(args) -> dict:
    """(f) every workload of ``CPU_GRID`` measured on the CLI's default model (``--random small
    --set d_model=512``), static, no_refill and cdb side by side at the CPU's scheduler
    defaults: per mode the steady-state and whole-run fractions of the achievable bound, and
    the largest fraction of any bound."""
    from depthbench.serving.profile import measure
    out = {}
    print(f"\n(f) workload grid measured on this CPU ({args.threads} thread(s); steady-state "
          "fraction of the achievable bound)")
    base = SimConfig(random="small", model_set={"d_model": args.d_model}, max_depth=16,
                     modes=MODES, seed=args.seed)
    torch.manual_seed(0)
    model = LoopedTransformer(sim_model(base)).eval()
    for name, (n, new, spread, prompt, width, mean) in CPU_GRID.items():
        cfg = base.replace(exit=f"trace:{mean:g}", requests=n, max_new_tokens=new,
                           length_spread=spread, prompt_len=prompt, width=width)
        ran = measure(model, cfg)
        by = {r["mode"]: r for r in _with_bounds([dict(ran[width, m][0]) for m in MODES], cfg)}
        e = out[name] = {
            "mean_depth": by["cdb"]["mean_depth"], "bound": by["cdb"]["steady_achievable_bound"],
            **{f"{m}_steady": by[m]["steady_achievable_fraction"] for m in MODES[1:]},
            **{f"{m}_whole": by[m]["achievable_fraction"] for m in MODES[1:]},
            "cdb_over_no_refill": (by["cdb"]["steady_tokens_per_s"]
                                   / by["no_refill"]["steady_tokens_per_s"]),
            "prefill_share_cdb": by["cdb"]["prefill_s"] / by["cdb"]["wall_s"],
            "largest_fraction": max(v for r in by.values() for k, v in r.items()
                                    if isinstance(v, float) and k.endswith("fraction")),
            "wall_s": max(r["wall_s"] for r in by.values())}
        print(f"  {name:>34}: cdb {e['cdb_steady']:.3f} (whole {e['cdb_whole']:.3f}), no_refill "
              f"{e['no_refill_steady']:.3f} (whole {e['no_refill_whole']:.3f}), bound "
              f"{e['bound']:.2f}x, cdb/no_refill {e['cdb_over_no_refill']:.2f}x, largest "
              f"fraction {e['largest_fraction']:.3f}", flush=True)
    return out


def cpu_grid_key(threads: int) -> str:
    """Where (f) at ``threads`` threads is kept in the run's JSON."""
    return "cpu_grid" if threads == 1 else f"cpu_grid_{threads}threads"


def cpu_grids(out: dict) -> dict[int, dict]:
    """(f) of a kept run per thread count."""
    return {t: out[cpu_grid_key(t)] for t in range(1, 65) if cpu_grid_key(t) in out}


def cpu_grid_lines(grids: dict[int, dict]) -> list[str]:
    """(f), the README's measured CPU grid table (a column group per thread count) and its
    sentence."""
    head = ["workload (trace exits, 16 loops)", "mean depth", "bound"]
    for t in grids:
        head += [f"{t} thread{'s' * (t > 1)}: cdb, steady fraction of the achievable bound "
                 "(whole run)", "no_refill (whole run)", "cdb / no_refill, steady tokens/s",
                 "prefill share of cdb's time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = next(iter(grids.values()))
    for name, e in first.items():
        cells = [name, f"{e['mean_depth']:.2f}", f"{e['bound']:.2f}x"]
        for g in grids.values():
            x = g[name]
            cells += [f"{x['cdb_steady']:.3f} ({x['cdb_whole']:.3f})",
                      f"{x['no_refill_steady']:.3f} ({x['no_refill_whole']:.3f})",
                      f"{x['cdb_over_no_refill']:.2f}x", f"{x['prefill_share_cdb']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    parts = []
    for t, g in grids.items():
        c = [e["cdb_steady"] for e in g.values()]
        above = sum(e["cdb_steady"] > e["no_refill_steady"] for e in g.values())
        parts.append(f"at {t} thread{'s' * (t > 1)} {min(c):.3f}-{max(c):.3f}, above `no_refill` "
                     f"at {above} of {len(g)} workloads")
    top = max(e["largest_fraction"] for g in grids.values() for e in g.values())
    return lines + ["", "Measured on this CPU, `cdb`'s steady fractions span " + "; ".join(parts)
                    + f". The largest fraction of any bound any mode reports is {top:.3f}."]


def _grid_png(grid: dict, cpu: dict[int, dict] | None, path: Path) -> None:
    """(e) per shape, simulated on both GPU profiles, and (f), measured on this CPU at each
    thread count kept, beside it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(GRID)
    panels = 3 if cpu else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2), sharey=True)
    for ax, shape in zip(axes, ("ouro-like", "huginn-like")):
        for prof, ls in (("h100", "-"), ("h200", "--")):
            for mode, color in (("cdb", "#1f77b4"), ("cdb_chunked", "#2ca02c"),
                                ("no_refill", "#ff7f0e")):
                ys = [grid[f"{prof}/{shape}/{n}"][f"{mode}_steady"] for n in names]
                ax.plot(range(len(names)), ys, ls, marker="o", color=color, label=f"{mode} {prof}")
        ax.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=6)
        ax.set_title(f"{shape}, simulated")
    if cpu:
        ax = axes[2]
        for (t, g), ls in zip(cpu.items(), (":", "-.", "--")):
            for mode, color in (("cdb", "#1f77b4"), ("no_refill", "#ff7f0e")):
                ax.plot(range(len(g)), [e[f"{mode}_steady"] for e in g.values()], ls,
                        marker="s", color=color, label=f"{mode}, {t} thread{'s' * (t > 1)}")
        g = next(iter(cpu.values()))
        ax.set_xticks(range(len(g)), [n.replace(", ", "\n") for n in g], fontsize=6)
        ax.set_title("the CLI's default model and workload, measured on this CPU")
        ax.legend(fontsize=7)
    for ax in axes:
        ax.axhline(1.0, color="k", lw=1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("steady-state fraction of the achievable bound")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
