"""The cloze's floors without a model, on prepared text datasets: the six rules the eval rows
carry (balanced by the cloze's construction, so each reads chance), and variants the
construction does not balance (raw words, counts with repeats, length, the rarest word), each
with its distance from chance in standard errors over items (binomial at chance); and apart,
the n-gram references (word-trigram lookup and PMI), which read local continuation.

    python benchmarks/cloze_floors.py runs/text-table3/data [DATA ...]
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

from bench_rows import Parser


def variants(ds) -> dict:
    """Rules written apart from ``data.cloze``'s scores: a check that the construction did not
    only balance its own definitions."""
    from depthbench.evaluate.text import cloze_items, rule_accuracy, training_documents
    items = cloze_items(ds)
    docs = list(training_documents(ds))
    df, wc = Counter(), Counter()
    for d in docs:
        w = d.split()
        df.update(set(w))
        wc.update(w)
    total = sum(wc.values())

    def raw_idf(it, c):   # case and punctuation kept
        return round(sum(math.log((len(docs) + 1) / (df[w] + 1))
                         for w in set(c.split()) & set(it["context"].split())), 9)

    def raw_overlap(it, c):
        return len(set(c.split()) & set(it["context"].split()))

    def rarest(it, c):
        return min(wc[w] for w in c.split())
    rules = {"raw_overlap": raw_overlap, "raw_idf_overlap": raw_idf, "rarest_word": rarest,
             "commonest_word": lambda it, c: max(wc[w] / total for w in c.split()),
             "longest": lambda it, c: len(c), "shortest": lambda it, c: -len(c)}
    return {k: rule_accuracy(items, f) for k, f in rules.items()}


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
        se = (0.25 * 0.75 / n) ** 0.5 if n else float("nan")
        row = {"data": d, "items": n, "se_at_chance": se, "rows": cloze_rules(ds),
               "variants": variants(ds) if n else {}}
        from depthbench.evaluate.text import NGRAM_RULES
        row["ngram_references"] = {k: row["rows"].pop(k) for k in NGRAM_RULES}
        row["largest_distance_se"] = max((abs(v - 0.25) / se for part in ("rows", "variants")
                                          for v in row[part].values()), default=float("nan"))
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
