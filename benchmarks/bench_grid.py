"""Where a grid of tiny runs spends its time, and what each candidate fast path buys, measured
side by side in one process (ratios; this machine is shared and absolute times vary):

(a) one tiny training step (forward, backward, clipping, AdamW; the tiny preset's shape, batch
    64, sequences of 22 tokens) at K = 8: eager fp32 (today's path), per-block
    ``torch.compile``, bf16 autocast; and the share of the eager step spent in matmuls
    (``torch.profiler``) against the same-process matmul peak;
(b) stacking N members of a grid into one batched op (what a stacked model would do): per
    member, the time of the step's elementwise work (a multiply of the activation's shape) and
    of its largest matmul (``bmm`` over N members) at N = 1, 4, 12.

    python benchmarks/bench_grid.py [--threads 1 2] [--steps 10]

Stacking pays where per-op overhead dominates; at this shape on a CPU the eager step's matmuls
already run near the machine's matmul peak, so the benchmark says how much is left to win.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from depthbench.config import tiny_model
from depthbench.model import LoopedTransformer

B, T, V = 64, 22, 201


def _timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def step_fn(compile_blocks: bool = False, bf16: bool = False, K: int = 8):
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model().replace(vocab_size=V)).train()
    if compile_blocks:
        for b in model.core:
            b.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, V, (B, T + 1))

    def one():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x[:, :-1], n_loops=K)
            loss = F.cross_entropy(logits.float().reshape(-1, V), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return one


def matmul_share(one) -> float:
    from torch.profiler import profile
    with profile() as p:
        for _ in range(3):
            one()
    ev = p.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    return sum(e.self_cpu_time_total for e in ev if e.key in ("aten::mm", "aten::bmm",
                                                               "aten::addmm")) / total


def peak(n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n ** 3 / _timed(lambda: a @ b, 10)


def section_a(steps: int) -> dict:
    eager = step_fn()
    out = {"eager_ms": 1e3 * _timed(eager, steps)}
    out["compile_blocks_ms"] = 1e3 * _timed(step_fn(compile_blocks=True), steps)
    out["bf16_autocast_ms"] = 1e3 * _timed(step_fn(bf16=True), steps)
    out["matmul_share_of_eager"] = matmul_share(eager)
    d, ff, K = 64, 256, 8
    flops = 3 * K * 2 * B * T * d * (3 * d + d + 2 * ff) + 3 * 2 * B * T * d * V
    out["eager_matmul_gflops"] = flops / (out["eager_ms"] * 1e-3 * out["matmul_share_of_eager"]) / 1e9
    out["peak_gflops"] = peak() / 1e9
    return out


def section_b() -> dict:
    out = {}
    for n in (1, 4, 12):
        a, b = torch.randn(n * B * T, 64), torch.randn(n * B * T, 64)
        x, w = torch.randn(n, B * T, 64), torch.randn(n, 64, 768)
        out[n] = {"elementwise_us_per_member": 1e6 * _timed(lambda a=a, b=b: a * b, 200) / n,
                  "bmm_us_per_member": 1e6 * _timed(lambda x=x, w=w: torch.bmm(x, w), 50) / n}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    res = {}
    for th in args.threads:
        torch.set_num_threads(th)
        a, b = section_a(args.steps), section_b()
        res[th] = {"a": a, "b": b}
        print(f"threads {th}: (a) eager {a['eager_ms']:.1f} ms/step; per-block compile "
              f"{a['eager_ms'] / a['compile_blocks_ms']:.2f}x; bf16 autocast "
              f"{a['eager_ms'] / a['bf16_autocast_ms']:.2f}x; matmuls "
              f"{100 * a['matmul_share_of_eager']:.0f}% of the eager step at "
              f"{a['eager_matmul_gflops']:.0f} GFLOP/s against a {a['peak_gflops']:.0f} GFLOP/s "
              "peak", flush=True)
        for n, r in b.items():
            print(f"  (b) {n:>2} members stacked: elementwise {r['elementwise_us_per_member']:.1f} "
                  f"us/member, matmul {r['bmm_us_per_member']:.0f} us/member", flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
