"""The cloze's floors without a model, on prepared text datasets, as the eval rows carry them:
word overlap with the context, unigram frequency and word bigrams from the training split,
each with its standard error over items (binomial at chance).

    python benchmarks/cloze_floors.py runs/text-table3/data [DATA ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench_rows import Parser


def main(argv=None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="+", help="text datasets written by depthbench prepare-text")
    a = ap.parse_args(argv)
    from depthbench.data.text import TextDataset, is_text_dataset
    from depthbench.evaluate.text import cloze_items, cloze_rules
    for d in a.data:
        if not is_text_dataset(d):
            ap.error(f"{d} is not a text dataset (run depthbench prepare-text)")
    for d in a.data:
        ds = TextDataset(Path(d))
        n = len(cloze_items(ds))
        row = {"data": d, "items": n, **cloze_rules(ds),
               "se_at_chance": (0.25 * 0.75 / n) ** 0.5 if n else float("nan")}
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
