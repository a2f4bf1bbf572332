"""Batching modes side by side in one run: (a) a trained tiny model with a real exit criterion,
(b) a random-weight model with d_model=512 and a synthetic depth trace of mean 8 (max 16).

    python benchmarks/bench_serve.py [--run RUN] [--requests 128] [--width 64]

(a) uses RUN (default: the quickstart's uniform run; trained here if missing). For (b) batch1
serves a subsample of the requests (its throughput does not depend on how many there are; a
full pass would take minutes). Reported per mode: tokens/s, speedup over static, the FLOP
ceiling, fraction of ceiling, and the same for the decode phase alone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from depthbench.checkpoint import load_model, read_run
from depthbench.config import ModelConfig, ServeConfig
from depthbench.data import Dataset
from depthbench.model import LoopedTransformer
from depthbench.serving.bench import dataset_workload, random_workload, serve_bench

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
    from data_gen import generate, resolve_config
    from depthbench.config import tiny_model, train_preset
    from depthbench.train import train
    tmp = Path(tempfile.mkdtemp())
    generate(resolve_config("tiny"), tmp / "data")
    train(tmp / "data", tmp / "run", tiny_model(), train_preset("tiny"), "uniform:1-16",
          progress=False, log=lambda *a: None)
    return tmp / "run"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=DEFAULT_RUN)
    ap.add_argument("--exit", default="argmax:2")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {}

    run = trained_run(args.run)
    model, _ = load_model(run)
    ds = Dataset(read_run(run)["data"])
    cfg = ServeConfig(exit=args.exit, width=args.width, requests=args.requests)
    res = serve_bench(model, dataset_workload(ds, args.requests, 0, 0), cfg, ds.seq_len - 1)
    show(f"(a) trained tiny model {run}, exit {args.exit}, width {args.width}, "
         f"{args.requests} requests", res)
    out["trained"] = res["results"]
    ahead = serve_bench(model, dataset_workload(ds, args.requests, 0, 0),
                        ServeConfig(exit=args.exit, width=args.width, requests=args.requests,
                                    modes=("cdb",), lookahead=True), ds.seq_len - 1)["results"][0]
    now = next(r for r in res["results"] if r["mode"] == "cdb")
    print(f"lookahead (exit decided one loop early): recall {ahead['exact_match']:.3f} vs "
          f"{now['exact_match']:.3f}, mean depth {ahead['mean_depth']:.2f} vs {now['mean_depth']:.2f}, "
          f"tokens/s {ahead['tokens_per_s']:.0f} vs {now['tokens_per_s']:.0f}")
    out["lookahead"] = ahead

    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=256, d_model=args.d_model, n_heads=8, n_prelude=1, n_core=2,
                       n_coda=1, max_seq_len=128)
    model = LoopedTransformer(mcfg).eval()
    reqs = random_workload(256, args.requests, 4, args.new_tokens, 0)
    cfg = ServeConfig(exit="trace:8", width=args.width, requests=args.requests,
                      modes=("static", "no_refill", "cdb"))
    res = serve_bench(model, reqs, cfg, 4 + args.new_tokens)
    b1 = serve_bench(model, reqs[:8], ServeConfig(exit="trace:8", width=args.width, requests=8,
                                                   modes=("static", "batch1")), 4 + args.new_tokens)
    res["results"].append({**b1["results"][1], "note": "8-request subsample, speedup vs its own static"})
    show(f"(b) random-weight model d_model={args.d_model} (1 prelude, 2 core, 1 coda layers), "
         f"trace mean 8 of 16, width {args.width}, {args.requests} requests x {args.new_tokens} tokens",
         res)
    out["random"] = res["results"]
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
