"""Result rows: the one writer every stage uses (torch-free).

A result file is a list of flat dicts written twice, as ``BASE.csv`` and ``BASE.jsonl``, each
atomically. Every row carries a ``kind`` column naming what it is, and ``depthbench report``
dispatches on it:

    eval    one serving depth of one checkpoint on one split (evaluate.run_eval)
    probe   one serving depth of an update-benefit probe (probe.run_probe)
    serve   one batching mode of a serving benchmark (serving.bench.run_bench)
    curve   one logged training step (train.run_train)
    run     one training run's summary (train.run_train)
"""

from __future__ import annotations

import json
from pathlib import Path

from depthbench.fsio import atomic_write_text

KINDS = ("eval", "probe", "serve", "curve", "run")


def row_paths(out: str | Path) -> tuple[Path, Path]:
    """``(BASE.csv, BASE.jsonl)`` for ``out`` given with either suffix or none."""
    out = Path(out)
    base = out.with_suffix("") if out.suffix in (".csv", ".jsonl") else out
    return base.with_name(base.name + ".csv"), base.with_name(base.name + ".jsonl")


def write_rows(rows: list[dict], out: str | Path, kind: str) -> tuple[Path, Path]:
    """Stamp ``kind`` on every row and write CSV and JSONL side by side."""
    import pandas as pd

    if kind not in KINDS:
        raise ValueError(f"unknown row kind {kind!r}")
    rows = [{"kind": kind, **{k: v for k, v in r.items() if k != "kind"}} for r in rows]
    csv, jsonl = row_paths(out)
    csv.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(jsonl, "".join(json.dumps(r) + "\n" for r in rows))
    return csv, jsonl
