"""Training throughput and model-FLOPs utilization (MFU), measured side by side in one run.

    python benchmarks/bench_train.py            # tiny preset and a d_model=256 shape
    python benchmarks/bench_train.py --quick
    python benchmarks/bench_train.py --compile --json-out docs/benchmarks/compile.json

``--compile``: what compiling the blocks costs and saves per preset (tiny, small) at 1 thread,
the trainer's own step (``train_step``: clipping, AdamW) at the preset's batch and sequence
length: the first compiled step's seconds in a fresh process with an empty inductor cache
(cold) and again from that cache (warm: what every later process of a grid pays), eager and
compiled ms/step at K = 1, 4, 16 interleaved step by step (medians), and the steps after which
compiling has paid for itself at K = 4 and 8 (``runtime.CPU_COMPILE_MIN_STEPS``).

For each shape: steps/s and tokens/s of real training steps (forward, backward, AdamW) of the
looped model at depth K, the same network unrolled without weight sharing (n_core=K layers run
once: equal effective depth and FLOPs), and the modeled training FLOPs per second as a fraction
of a matmul peak measured in the same process (a large fp32 matmul). Threads: 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from bench_rows import Parser, add_args, from_kept, keep

from depthbench.config import ModelConfig, tiny_model
from depthbench.flops import FlopModel
from depthbench.models.looped import LoopedTransformer


def matmul_peak(n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def step_time(cfg: ModelConfig, K: int, B: int, T: int, steps: int) -> float:
    torch.manual_seed(0)
    model = LoopedTransformer(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab_size, (B, T + 1))

    def one():
        logits = model(x[:, :-1], n_loops=K)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        one()
    t0 = time.perf_counter()
    for _ in range(steps):
        one()
    return (time.perf_counter() - t0) / steps


def compile_child(preset: str) -> dict:
    """One process: the first compiled step's seconds, then eager against compiled step times."""
    import statistics

    from depthbench.config import model_preset, train_preset
    from depthbench.runtime import setup
    from depthbench.train.loop import make_optimizer, train_step
    rt = setup("cpu", 1)
    from depthbench.data_gen import resolve_config
    seq = resolve_config(preset).seq_len - 1       # the preset dataset's sequence length
    tcfg = train_preset(preset)
    cfg = model_preset(preset).replace(vocab_size=201, max_seq_len=64)
    x = torch.randint(0, 201, (tcfg.batch_size, seq + 1), generator=torch.Generator().manual_seed(0))
    nets = {}
    for kind in ("eager", "compiled"):
        torch.manual_seed(0)
        m = LoopedTransformer(cfg).train()
        if kind == "compiled":
            for b in list(m.prelude) + list(m.core) + list(m.coda):
                b.compile()
        nets[kind] = (m, make_optimizer(m, tcfg, rt.device))

    def step(kind, K):
        m, opt = nets[kind]
        t0 = time.perf_counter()
        train_step(m, m, opt, x[:, :-1], x[:, 1:], K, 1e-3, tcfg, rt)
        return time.perf_counter() - t0

    first = step("compiled", 4)
    out = {"preset": preset, "batch": tcfg.batch_size, "seq": seq, "first_compiled_step_s": first}
    for K in (1, 4, 16):
        step("eager", K), step("compiled", K)
        t = {"eager": [], "compiled": []}
        for _ in range(7):
            for kind in t:
                t[kind].append(step(kind, K))
        out[f"eager_ms_K{K}"] = 1e3 * statistics.median(t["eager"])
        out[f"compiled_ms_K{K}"] = 1e3 * statistics.median(t["compiled"])
    return out


def compile_section() -> list[dict]:
    import os
    import subprocess
    import sys
    import tempfile
    rows = []
    for preset in ("tiny", "small"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            runs = [json.loads(subprocess.run(
                [sys.executable, __file__, "--compile-child", preset], env=env, check=True,
                capture_output=True, text=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
        cold, warm = runs
        r = {**warm, "cold_first_step_s": cold["first_compiled_step_s"],
             "warm_first_step_s": warm["first_compiled_step_s"]}
        for K in (4, 8):
            lo, hi = (4, 4) if K == 4 else (4, 16)   # K = 8: between the K = 4 and 16 readings
            e = (r[f"eager_ms_K{lo}"] + r[f"eager_ms_K{hi}"]) / 2
            c = (r[f"compiled_ms_K{lo}"] + r[f"compiled_ms_K{hi}"]) / 2
            saved = (e - c) / 1e3
            r[f"speedup_K{K}"] = e / c
            r[f"break_even_steps_warm_K{K}"] = r["warm_first_step_s"] / saved if saved > 0 else None
            r[f"break_even_steps_cold_K{K}"] = r["cold_first_step_s"] / saved if saved > 0 else None
        del r["first_compiled_step_s"]
        rows.append(r)
        print(f"{preset}: compile {r['cold_first_step_s']:.1f}s cold, {r['warm_first_step_s']:.1f}s "
              f"warm; " + ", ".join(f"K={K} {r[f'eager_ms_K{K}']:.0f} -> {r[f'compiled_ms_K{K}']:.0f} "
                                    f"ms" for K in (1, 4, 16))
              + f"; repaid after {r['break_even_steps_warm_K8'] or float('nan'):.0f} steps warm, "
              f"{r['break_even_steps_cold_K8'] or float('nan'):.0f} cold (K=8)", flush=True)
    return rows


def compile_cell(res: dict) -> str:
    """The figures of a ``--compile`` run."""
    return "; ".join(
        f"{r['preset']}: compiled {r['speedup_K4']:.2f}x at K=4, {r['speedup_K8']:.2f}x at K=8, "
        f"compile {r['cold_first_step_s']:.0f}s cold / {r['warm_first_step_s']:.0f}s warm"
        for r in res["compile"])


def readme_cell(res: dict) -> str:
    """The README's figures of a run (``bench_rows``)."""
    if "compile" in res:
        return compile_cell(res)
    by = {(r["shape"], r["threads"]): r for r in res["results"]}
    big1, big2 = by[("d=256", 1)], by[("d=256", 2)]
    tiny1, tiny2 = by[("tiny (d=64)", 1)], by[("tiny (d=64)", 2)]
    ratios = [r["looped_over_unrolled_speed"] for r in res["results"]]
    return (f"d_model=256: {100 * big1['mfu']:.1f}% MFU (1 thread), {100 * big2['mfu']:.1f}% "
            f"(2 threads); tiny: {100 * tiny1['mfu']:.0f}% (1 thread, "
            f"{1e3 * tiny1['step_s']:.0f} ms/step) and {1e3 * tiny2['step_s']:.0f} ms/step on 2 "
            f"threads; looped/unrolled speed {min(ratios):.2f}-{max(ratios):.2f}x")


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compile", action="store_true", help="compile cost and savings per preset")
    ap.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    add_args(ap)
    args = ap.parse_args()
    if args.compile_child:
        print(json.dumps(compile_child(args.compile_child)))
        return
    if args.compile:
        rows = compile_section()
        print(json.dumps(rows))
        keep(args, {"compile": rows}, readme_cell)
        return
    if from_kept(args, readme_cell):
        return
    steps = 5 if args.quick else 20
    shapes = {
        "tiny (d=64)": (tiny_model().replace(vocab_size=200, max_seq_len=64), 4, 128, 19),
        "d=256": (ModelConfig(vocab_size=1547, d_model=256, n_heads=4, n_prelude=1, n_core=1,
                              n_coda=1, max_seq_len=64), 4, 64, 63),
    }
    out = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        peak = matmul_peak()
        for name, (cfg, K, B, T) in shapes.items():
            fm = FlopModel.of(cfg, T)
            flops = fm.train_step(K) * B * T
            looped = step_time(cfg, K, B, T, steps)
            unrolled_cfg = cfg.replace(n_core=cfg.n_core * K)
            unrolled = step_time(unrolled_cfg, 1, B, T, steps)
            r = {"threads": threads, "shape": name, "K": K, "batch": B, "seq": T,
                 "params": LoopedTransformer(cfg).num_params(),
                 "step_s": looped, "tokens_per_s": B * T / looped,
                 "model_flops_per_s": flops / looped, "peak_flops_per_s": peak,
                 "mfu": flops / looped / peak, "unrolled_step_s": unrolled,
                 "looped_over_unrolled_speed": unrolled / looped}
            out.append(r)
            print(f"threads={threads} {name:12s} K={K}: {looped * 1e3:7.1f} ms/step "
                  f"{r['tokens_per_s']:9.0f} tok/s  MFU {100 * r['mfu']:5.1f}% of "
                  f"{peak / 1e9:.0f} GFLOP/s matmul peak; unrolled (no sharing) "
                  f"{unrolled * 1e3:7.1f} ms/step -> looped/unrolled speed "
                  f"{r['looped_over_unrolled_speed']:.2f}x")
    print(json.dumps(out))
    keep(args, {"results": out}, readme_cell)


if __name__ == "__main__":
    main()
