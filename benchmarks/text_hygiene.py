"""Is a prepared text dataset's validation free of its training text? A check written apart
from ``prepare-text``'s own filters, on the decoded splits (naive sets of word n-grams, words
as lowercase runs of letters and digits):

- validation documents with half or more of their word 5-grams anywhere in training;
- cloze items whose context read on into any of its choices (the truth or a distractor) holds
  a word 8-gram of training.

``--licenses DIR`` first writes a corpus no one here chose, full of shared boilerplate: this
machine's license texts and its packages' copyright files, one document per paragraph, with a
copy of every third document carrying one word edited (a near copy that a similarity filter
over whole documents can miss when the document is short or shared). Then the dataset is
prepared from it with the text recipe's settings and checked:

    python benchmarks/text_hygiene.py --licenses /tmp/licenses      # prepare and check
    python benchmarks/text_hygiene.py DATA [DATA ...]                # check prepared datasets

Prints one JSON row per dataset; ``--json-out`` keeps them (``docs/benchmarks/hygiene.json``;
``hygiene-6d38e54.json``: the same check of the code before containment was filtered).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
from bench_rows import Parser, add_args, from_kept, keep

WORD = re.compile(r"\w+")
SOURCES = (Path("/usr/share/common-licenses"), Path("/usr/share/doc"))


def grams(text: str, n: int) -> set[tuple[str, ...]]:
    w = WORD.findall(text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def license_corpus(out: Path, seed: int = 0) -> int:
    """Write the license corpus to ``out/licenses.txt``; the number of documents."""
    files = sorted(p for p in SOURCES[0].glob("*") if p.is_file())
    files += sorted(SOURCES[1].glob("*/copyright"))
    paras = []
    for f in files:
        text = f.read_text(errors="replace")
        paras += [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 12]
    rng = np.random.default_rng(seed)
    docs = list(paras)
    for p in paras[::3]:
        w = p.split()
        w[int(rng.integers(len(w)))] = "edited"
        docs.append(" ".join(w))
    out.mkdir(parents=True, exist_ok=True)
    (out / "licenses.txt").write_text("\n\n".join(docs) + "\n")
    return len(docs)


def check(data: Path) -> dict:
    from depthbench.data.text import TextDataset
    from depthbench.evaluate.text import cloze_items
    ds = TextDataset(data)
    tok = ds.tokenizer()
    split = {}
    for s in ("train", "validation"):
        ids = np.asarray(ds.tokens[s])
        cuts = np.flatnonzero(ids == ds.vocab.eos)
        split[s] = [tok.decode(ids[a:b].tolist()) for a, b in zip(np.r_[0, cuts[:-1] + 1], cuts)]
    train5 = set().union(*(grams(d, 5) for d in split["train"]))
    train8 = set().union(*(grams(d, 8) for d in split["train"]))
    contained = 0
    for d in split["validation"]:
        g = grams(d, 5)
        contained += bool(g) and len(g & train5) / len(g) >= 0.5
    items = cloze_items(ds)
    joined = sum(any(grams(it["context"] + c, 8) & train8 for c in it["choices"]) for it in items)
    m = ds.manifest
    return {"data": str(data), "validation_documents": len(split["validation"]),
            "validation_half_contained": contained, "cloze_items": len(items),
            "cloze_items_with_training_8gram": joined,
            "dropped_contained": m.get("contained_in_training", {}).get("documents"),
            "dropped_near": m["near_duplicates_removed"]["documents"],
            "dropped_exact": m["duplicates_removed"]["documents"]}


def readme_cell(res: dict) -> str:
    """The benchmarks page's cell: for each dataset checked, what stays in validation."""
    return "; ".join(
        f"{r['data']}: {r['validation_half_contained']} of {r['validation_documents']} "
        f"validation documents half contained in training ({r['dropped_contained']} dropped as "
        f"contained, {r['dropped_near']} near and {r['dropped_exact']} exact copies), "
        f"{r['cloze_items_with_training_8gram']} of {r['cloze_items']} cloze items with a "
        f"training 8-gram across the join" for r in res["rows"])


def main(argv=None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="*", help="text datasets written by depthbench prepare-text")
    ap.add_argument("--licenses", help="write the license corpus here, prepare it and check it")
    add_args(ap)
    a = ap.parse_args(argv)
    if from_kept(a, readme_cell):
        return 0
    if not a.data and not a.licenses:
        ap.error("give prepared datasets or --licenses DIR")
    from depthbench.data.text import is_text_dataset
    for d in a.data:
        if not is_text_dataset(d):
            ap.error(f"{d} is not a text dataset (run depthbench prepare-text)")
    data = [Path(d) for d in a.data]
    rows, corpus_docs = [], {}
    if a.licenses:
        from depthbench.data.corpus import prepare_text
        out = Path(a.licenses)
        n = license_corpus(out)
        ds = Path(tempfile.mkdtemp(prefix="hygiene-")) / "licenses"
        prepare_text([str(out / "licenses.txt")], ds, vocab_size=1024, val_fraction=0.1,
                     seed=0, seq_len=64)
        data.insert(0, ds)
        corpus_docs[ds] = n
    for d in data:
        row = check(d)
        if d in corpus_docs:   # the dataset lies in a temporary directory: name its corpus
            row.update(data="licenses of this machine", corpus_documents=corpus_docs[d])
        rows.append(row)
        print(json.dumps(row), flush=True)
    keep(a, {"rows": rows}, readme_cell)
    return 0


if __name__ == "__main__":
    sys.exit(main())
