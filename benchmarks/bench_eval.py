"""The one-pass depth sweep against per-depth passes, K = 1..16, side by side in one run.

    python benchmarks/bench_eval.py [--people 512] [--d-model 64]

Times ``evaluate.sweep`` (one forward of 16 loops, reading out every depth) and
``evaluate.sweep_per_depth`` (a forward per depth: 1 + 2 + ... + 16 loops) on the tiny dataset
with a tiny-preset model, checks that they agree, and reports the ratio and eval tokens/s.
"""

from __future__ import annotations

import json
import tempfile
import time

import torch
from bench_rows import Parser, add_args, count, from_kept, keep

from data_gen import resolve_config
from depthbench.config import tiny_model
from depthbench.data.generate import generate
from depthbench.data.synthetic import Dataset
from depthbench.evaluate.sweep import sweep, sweep_per_depth
from depthbench.model import LoopedTransformer


def readme_cell(r: dict) -> str:
    """The README's figures of a run (``bench_rows``)."""
    same = ("identical metrics" if r["max_nll_difference"] == 0
            else f"metrics within {r['max_nll_difference']:.0e} NLL")
    return (f"{r['speedup']:.1f}x faster, {same}; {r['one_pass_tokens_per_s'] / 1e3:.0f}k eval "
            f"tokens/s ({r['one_pass_depth_tokens_per_s'] / 1e3:.0f}k token-depths/s)")


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=count(), default=512)
    ap.add_argument("--d-model", type=count(), default=64)
    ap.add_argument("--threads", type=count(), default=1)
    add_args(ap)
    args = ap.parse_args()
    if from_kept(args, readme_cell):
        return
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        generate(resolve_config("tiny", overrides={"n_people": args.people}), f"{tmp}/d")
        ds = Dataset(f"{tmp}/d")
        torch.manual_seed(0)
        model = LoopedTransformer(tiny_model().replace(vocab_size=len(ds.vocab),
                                                       d_model=args.d_model)).eval()
        depths = list(range(1, 17))
        split = "eval_reordered"
        tokens = len(ds.split(split)) * (ds.seq_len - 1)
        t0 = time.perf_counter()
        one = sweep(model, ds, split, depths)
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        naive = sweep_per_depth(model, ds, split, depths)
        t_naive = time.perf_counter() - t0
    worst = max(abs(one[k].result(ds.attributes)["nll"] - naive[k].result(ds.attributes)["nll"])
                for k in depths)
    r = {"people": args.people, "depths": 16, "one_pass_s": t_one, "per_depth_s": t_naive,
         "speedup": t_naive / t_one, "one_pass_tokens_per_s": tokens / t_one,
         "one_pass_depth_tokens_per_s": 16 * tokens / t_one, "max_nll_difference": worst}
    print(f"one-pass sweep {t_one:.2f}s, per-depth passes {t_naive:.2f}s: {r['speedup']:.1f}x faster; "
          f"{r['one_pass_tokens_per_s']:.0f} eval tokens/s ({r['one_pass_depth_tokens_per_s']:.0f} "
          f"token-depths/s); max |NLL difference| {worst:.1e}")
    print(json.dumps(r))
    keep(args, r, readme_cell)


if __name__ == "__main__":
    main()
