"""The GPU default of chunked prefill, chosen on evidence across prompt lengths.

cdb at each ``--prefill-chunk`` (0: a prefill launch per admission; C > 0: at most C prompt tokens
ride in each core launch at full depth) against full-depth serving at its best knobs, simulated on
the H100 profile for two shapes (paper-200m, max depth 8, trace mean 4; huginn-like, max depth
16, mean 8), prompts of 8 to 2,048 tokens, 64 requests of about 32 new tokens. The rows go to
``docs/serving/chunk_default.json``; ``--table`` prints cdb's speedup per prompt length and chunk.

    python benchmarks/chunk_default.py                # about 3 minutes
    python benchmarks/chunk_default.py --table
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "serving" / "chunk_default.json"
SHAPES = (("paper-200m", 8, 4.0), ("huginn-like", 16, 8.0))
PROMPTS = (8, 64, 256, 1024, 2048)
CHUNKS = (0, 128, 512, 2048, 8192)


def measure() -> list[dict]:
    from depthbench.config import SimConfig
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    rows = []
    for shape, md, mean in SHAPES:
        for P in PROMPTS:
            for chunk in CHUNKS:
                cfg = SimConfig(random=shape, exit=f"trace:{mean:g}", max_depth=md, requests=64,
                                prompt_len=P, max_new_tokens=32, length_spread=0.5,
                                prefill_chunk=chunk, modes=("cdb",))
                by = {r.mode: r for r in simulate(cfg, load_profile("h100")).results}
                rows.append({"shape": shape, "prompt_len": P, "prefill_chunk": chunk,
                             "cdb_speedup": by["cdb"].bounds.speedup,
                             "baseline": by["full_depth"].baseline})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| shape | prompt tokens | " + " | ".join(f"chunk {c}" for c in CHUNKS) + " |",
             "|---|---|" + "---|" * len(CHUNKS)]
    for shape, _, _ in SHAPES:
        for P in PROMPTS:
            got = {r["prefill_chunk"]: r["cdb_speedup"] for r in rows
                   if r["shape"] == shape and r["prompt_len"] == P}
            lines.append(f"| {shape} | {P} | " + " | ".join(f"{got[c]:.2f}" for c in CHUNKS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="print the table of the kept rows")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(OUT.read_text())))
        return
    rows = measure()
    OUT.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
