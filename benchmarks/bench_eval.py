"""The one-pass depth sweep against per-depth passes, K = 1..16, side by side in one run, the
bound of that ratio at the model's shape, and the eval batch size.

    python benchmarks/bench_eval.py [--people 512] [--d-model 64] [--batch-size 64]

Times ``evaluate.sweep`` (one forward of 16 loops, reading out every depth) and
``evaluate.sweep_per_depth`` (a forward per depth: 1 + 2 + ... + 16 loops) on the tiny dataset
with a tiny-preset model, checks that they agree, and reports the ratio and eval tokens/s.

Both paths read out (final norm, head, metrics) at each of the 16 depths; only the loops differ.
So the ratio is bounded by (136 c + 16 r) / (16 c + 16 r), with c one loop's time and r one
readout's, both timed here on one batch: 8.5x only if reading out were free. The last part times
the one-pass sweep at several batch sizes for the tiny and small presets' shapes (the eval
default, ``EvalConfig.batch_size``, is the fastest of them on this CPU).
"""

from __future__ import annotations

import json
import tempfile
import time

import torch
from bench_rows import Parser, add_args, count, from_kept, keep

from depthbench.config import small_model, tiny_model
from depthbench.data.generate import generate
from depthbench.data.synthetic import Dataset
from depthbench.data_gen import resolve_config
from depthbench.evaluate.metrics import EvalSums
from depthbench.evaluate.sweep import eval_batches, sweep, sweep_per_depth
from depthbench.models.looped import LoopedTransformer

BATCHES = (32, 64, 128, 256)


def readme_cell(r: dict) -> str:
    """The README's figures of a run (``bench_rows``)."""
    same = ("identical metrics" if r["max_nll_difference"] == 0
            else f"metrics within {r['max_nll_difference']:.0e} NLL")
    b = r["batch_sizes"]
    ratios = ", ".join(f"{name} {b[name]['256'] / b[name][str(r['batch_size'])]:.2f}x"
                       for name in b)
    return (f"{r['speedup']:.1f}x faster of a bound of {r['bound']:.1f}x at this shape (a "
            f"readout costs {r['readout_per_loop']:.2f} of a loop), {same}; "
            f"{r['one_pass_tokens_per_s'] / 1e3:.0f}k eval tokens/s "
            f"({r['one_pass_depth_tokens_per_s'] / 1e3:.0f}k token-depths/s); batch "
            f"{r['batch_size']} against 256: {ratios}")


def _best(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


@torch.no_grad()
def loop_and_readout(model, ds: Dataset, split: str, batch_size: int) -> tuple[float, float]:
    """Seconds of one loop and of one readout (head and metrics) on one batch."""
    x, y, facts = next(eval_batches(ds, split, batch_size, None, None))
    pos = model.positions(x.shape[1], x.device)
    e = model.embed_prelude(x, pos, None, None)
    s = model.initial_state(e, pos)
    sums = EvalSums(ds.n_values, ds.rows_per_person)
    c = _best(lambda: model.core_step(s, e, pos, None, None))
    r = _best(lambda: sums.add(model.readout(s, pos, None, None), y, facts))
    return c, r


def batch_sizes(ds: Dataset, split: str, rounds: int = 3, rows: int = 768) -> dict:
    """One-pass sweep seconds over the split's first ``rows`` rows (best of ``rounds``,
    interleaved) per batch size and preset shape."""
    out = {}
    for name, mc in (("tiny", tiny_model()), ("small", small_model())):
        torch.manual_seed(0)
        model = LoopedTransformer(mc.replace(vocab_size=len(ds.vocab))).eval()
        times = {b: [] for b in BATCHES}
        for _ in range(rounds):
            for b in BATCHES:
                t0 = time.perf_counter()
                sweep(model, ds, split, list(range(1, 17)), batch_size=b, max_rows=rows)
                times[b].append(time.perf_counter() - t0)
        out[name] = {str(b): min(t) for b, t in times.items()}
    return out


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=count(), default=512)
    ap.add_argument("--d-model", type=count(), default=64)
    ap.add_argument("--threads", type=count(), default=1)
    ap.add_argument("--batch-size", type=count(), default=64)
    add_args(ap)
    args = ap.parse_args()
    if from_kept(args, readme_cell):
        return
    torch.set_num_threads(args.threads)
    depths, split, bs = list(range(1, 17)), "eval_reordered", args.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        generate(resolve_config("tiny", overrides={"n_people": args.people}), f"{tmp}/d")
        ds = Dataset(f"{tmp}/d")
        torch.manual_seed(0)
        model = LoopedTransformer(tiny_model().replace(vocab_size=len(ds.vocab),
                                                       d_model=args.d_model)).eval()
        tokens = len(ds.split(split)) * (ds.seq_len - 1)
        t0 = time.perf_counter()
        one = sweep(model, ds, split, depths, batch_size=bs)
        t_one = time.perf_counter() - t0
        t0 = time.perf_counter()
        naive = sweep_per_depth(model, ds, split, depths, batch_size=bs)
        t_naive = time.perf_counter() - t0
        c, r_ = loop_and_readout(model, ds, split, bs)
        sizes = batch_sizes(ds, split)
    worst = max(abs(one[k].result(ds.attributes)["nll"] - naive[k].result(ds.attributes)["nll"])
                for k in depths)
    loops = sum(depths)
    r = {"people": args.people, "depths": 16, "batch_size": bs, "one_pass_s": t_one,
         "per_depth_s": t_naive, "speedup": t_naive / t_one,
         "loop_s": c, "readout_s": r_, "readout_per_loop": r_ / c,
         "bound": (loops * c + 16 * r_) / (16 * c + 16 * r_),
         "one_pass_tokens_per_s": tokens / t_one,
         "one_pass_depth_tokens_per_s": 16 * tokens / t_one, "max_nll_difference": worst,
         "batch_sizes": sizes}
    print(f"one-pass sweep {t_one:.2f}s, per-depth passes {t_naive:.2f}s: {r['speedup']:.1f}x faster "
          f"(bound {r['bound']:.2f}x: a readout is {r['readout_per_loop']:.2f} of a loop); "
          f"{r['one_pass_tokens_per_s']:.0f} eval tokens/s; max |NLL difference| {worst:.1e}")
    for name, t in sizes.items():
        print(f"{name}: one-pass sweep s by batch size " + ", ".join(f"{b}: {v:.3f}" for b, v in t.items()))
    print(json.dumps(r))
    keep(args, r, readme_cell)


if __name__ == "__main__":
    main()
