"""The cloze's floors without a model, on prepared text datasets: the two the eval rows carry
(word overlap with the context, unigram frequency; the word-order cloze ties both at chance)
and a rule that reads word order (word bigrams from the training split), which the rows do not
carry yet.

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
    from depthbench.evaluate.text import cloze_bigram_rule, cloze_items, cloze_rules
    for d in a.data:
        if not is_text_dataset(d):
            ap.error(f"{d} is not a text dataset (run depthbench prepare-text)")
    for d in a.data:
        ds = TextDataset(Path(d))
        row = {"data": d, "items": len(cloze_items(ds)), **cloze_rules(ds),
               "cloze_bigram_rule": cloze_bigram_rule(ds)}
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
