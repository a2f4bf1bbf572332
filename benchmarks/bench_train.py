"""Training throughput and model-FLOPs utilization (MFU), measured side by side in one run.

    python benchmarks/bench_train.py            # tiny preset and a d_model=256 shape
    python benchmarks/bench_train.py --quick

For each shape: steps/s and tokens/s of real training steps (forward, backward, AdamW) of the
looped model at depth K, the same network unrolled without weight sharing (n_core=K layers run
once: equal effective depth and FLOPs), and the modeled training FLOPs per second as a fraction
of a matmul peak measured in the same process (a large fp32 matmul). Threads: 1 and 2.
"""

from __future__ import annotations

import json
import time

import torch
from bench_rows import Parser, add_args, from_kept, keep

from depthbench.config import ModelConfig, tiny_model
from depthbench.flops import FlopModel
from depthbench.model import LoopedTransformer


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


def readme_cell(res: dict) -> str:
    """The README's figures of a run (``bench_rows``)."""
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
    add_args(ap)
    args = ap.parse_args()
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
