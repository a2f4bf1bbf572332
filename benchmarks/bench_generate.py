"""Generation throughput and peak memory of the vectorized generator, pinned to one core,
next to a plain per-person Python loop doing the same work on a subsample.

    python benchmarks/bench_generate.py                 # paper preset: 250k and 1M people
    python benchmarks/bench_generate.py --people 100000 # quicker

Each measurement runs in a fresh child process, so its peak RSS is its own. The ratio is
measured in the same run; absolute numbers vary on a shared machine.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_rows import Parser, add_args, count, from_kept, keep, people

ROOT = Path(__file__).resolve().parents[1]


def _tokens(cfg) -> int:
    """Tokens in the token arrays of every split the generator writes."""
    from depthbench.data_gen.format import split_rows
    return sum(split_rows(cfg).values()) * cfg.seq_len


def child_vectorized(n_people: int, out: str) -> dict:
    from depthbench.data.generate import generate
    from depthbench.data_gen import resolve_config
    cfg = resolve_config("paper", overrides={"n_people": n_people})
    t0 = time.perf_counter()
    generate(cfg, out)
    dt = time.perf_counter() - t0
    return {"people": n_people, "seconds": dt, "tokens": _tokens(cfg)}


def child_naive(n_people: int, out: str) -> dict:
    """The obvious implementation of the same rows: one person at a time, Python lists, a set of
    used names; per person its training orders (none starting with a held-out attribute), one
    name-only question per held-out attribute and the seen-order control's questions (token
    arrays only: no unseen people and no text facts, so its tokens/s flatters it)."""
    import numpy as np

    from depthbench.data_gen import resolve_config
    from depthbench.data_gen.format import build_vocab
    cfg = resolve_config("paper", overrides={"n_people": n_people})
    rnd = random.Random(cfg.seed)
    vocab = {t: i for i, t in enumerate(build_vocab(cfg))}
    A, h, r = cfg.n_attributes, cfg.n_held_out, cfg.orders_per_person
    tables = [[[rnd.randrange(cfg.value_pool) for _ in range(a.value_tokens)]
               for _ in range(a.n_values)] for a in cfg.attributes]
    used, rows = set(), {"train": [], "eval_reordered": [], "eval_seen_order": []}
    t0 = time.perf_counter()

    def render(name, values, order):
        seq = [vocab["<bos>"]] + [vocab[f"N{t}"] for t in name]
        for a in order:
            seq.append(vocab[f"[{cfg.attributes[a].name}]"])
            seq += [vocab[f"V{t}"] for t in tables[a][values[a]]]
        return seq + [vocab["<eos>"]]

    def order_from(first):
        rest = [a for a in range(A) if a != first]
        rnd.shuffle(rest)
        return (first, *rest)

    for _ in range(n_people):
        while True:
            name = tuple(rnd.randrange(cfg.name_pool) for _ in range(cfg.name_tokens))
            if name not in used:
                used.add(name)
                break
        values = [rnd.randrange(a.n_values) for a in cfg.attributes]
        perm = list(range(A))     # its first h attributes are held out
        rnd.shuffle(perm)
        orders = []
        for i in range(r):
            o = order_from(perm[h + i % (A - h)])
            while o in orders:    # a person's orders are distinct: a repeat is drawn again
                o = order_from(perm[h + i % (A - h)])
            orders.append(o)
        for o in orders:
            rows["train"].append(render(name, values, o))
        for j in range(h):
            rows["eval_reordered"].append(render(name, values, order_from(perm[j])))
            rows["eval_seen_order"].append(render(name, values, orders[j % r]))
    for split, r_ in rows.items():
        np.save(Path(out) / f"{split}.npy", np.array(r_, dtype=np.uint16))
    dt = time.perf_counter() - t0
    return {"people": n_people, "seconds": dt,
            "tokens": sum(len(r_) for r_ in rows.values()) * cfg.seq_len}


def measure(kind: str, n_people: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "d")
        if kind == "naive":
            os.makedirs(out)
        code = (f"import os, json, sys; os.sched_setaffinity(0, {{0}}); sys.path.insert(0, {str(ROOT)!r});"
                f"sys.path.insert(0, {str(Path(__file__).parent)!r});"
                f"import bench_generate as b, resource;"
                f"r = b.child_{kind}({n_people}, {out!r});"
                f"r['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024;"
                f"print(json.dumps(r))")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        if p.returncode:
            raise SystemExit(p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
    r["kind"] = kind
    r["tokens_per_s"] = r["tokens"] / r["seconds"]
    return r


def readme_cell(res: dict) -> str:
    """The README's figures of a run (``bench_rows``)."""
    small, big, naive = res["results"]
    return (f"{big['seconds']:.1f} s for {people(big['people'])} people "
            f"({big['tokens_per_s'] / 1e6:.1f} M tokens/s), "
            f"{big['tokens_per_s'] / naive['tokens_per_s']:.1f}x the loop's tokens/s; peak RSS "
            f"{small['peak_rss_mb']:.0f} MB at {people(small['people'])} and "
            f"{big['peak_rss_mb']:.0f} MB at {people(big['people'])} people")


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=count(), default=1_000_000)
    ap.add_argument("--naive-people", type=count(), default=20_000)
    add_args(ap)
    args = ap.parse_args()
    if from_kept(args, readme_cell):
        return
    results = [measure("vectorized", args.people // 4), measure("vectorized", args.people),
               measure("naive", args.naive_people)]
    for r in results:
        print(f"{r['kind']:>10} {r['people']:>9} people  {r['seconds']:7.2f} s  "
              f"{r['tokens_per_s'] / 1e6:7.2f} M tokens/s  peak RSS {r['peak_rss_mb']:7.1f} MB")
    big, naive = results[1], results[2]
    print(f"speedup over the per-person loop (tokens/s): {big['tokens_per_s'] / naive['tokens_per_s']:.1f}x")
    print(f"peak RSS growth from {results[0]['people']} to {big['people']} people: "
          f"{big['peak_rss_mb'] / results[0]['peak_rss_mb']:.2f}x")
    print(json.dumps({"results": results}))
    keep(args, {"results": results}, readme_cell)


if __name__ == "__main__":
    main()
