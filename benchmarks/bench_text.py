"""prepare-text against HF tokenizers' own batch encoding of the same text, measured side by
side in one run, and prepare-text's peak memory on a generated corpus (flat in its size).

    python benchmarks/bench_text.py [--mb 1024] [--vocab-size 4096]

A corpus of ``--mb`` MB of jsonl documents (seeded random words, 50-500 per document) is
written to a temporary directory; a byte-level BPE is trained on its first 8 MB; then, each in
a fresh process (so that its peak RSS is its own): ``depthbench prepare-text --tokenizer`` on
the whole corpus (read, encode, split, write, hash), and the same documents through
``Tokenizer.encode_batch`` in batches of 512 with nothing written (the encoding alone). Printed:
MB/s of each, their ratio, and each process's peak RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_rows import Parser, count

WORDS = ("time person year way day thing man world life hand part child eye woman place work "
         "week case point government company number group problem fact be have do say get make "
         "go know take see come think look want give use find tell ask seem feel try leave call "
         "good new first last long great little own other old right big high different small "
         "large next early young important few public bad same able").split()


def write_corpus(path: Path, mb: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    written = 0
    with open(path, "w") as f:
        while written < mb * 2**20:
            lines = []
            for n in rng.integers(50, 500, size=1000):
                lines.append(json.dumps({"text": " ".join(words[rng.integers(0, len(words), n)])}))
            block = "\n".join(lines) + "\n"
            f.write(block)
            written += len(block)
    return written


CHILD_ENCODE = """
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
t0, n, batch = time.perf_counter(), 0, []
with open(sys.argv[2]) as f:
    for line in f:
        batch.append(json.loads(line)["text"])
        if len(batch) == 512:
            n += sum(len(e.ids) for e in tok.encode_batch(batch)); batch = []
if batch:
    n += sum(len(e.ids) for e in tok.encode_batch(batch))
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": n}))
"""


RSS = """
import resource, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__") if not sys.argv[0].endswith(".py") else \
        runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    if e.code:
        raise
print("peak_rss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child(args: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in MB) of one fresh process running ``args`` (a module and its
    arguments, or a script file and its arguments), the RSS read inside it."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", RSS, *args], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    seconds = time.perf_counter() - t0
    kb = int(next(line for line in out.splitlines() if line.startswith("peak_rss_kb")).split()[1])
    return seconds, kb // 1024


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=count(), default=1024)
    ap.add_argument("--vocab-size", type=count(260), default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus.jsonl"
        size = write_corpus(corpus, args.mb)
        sample = tmp / "sample.jsonl"
        with open(corpus) as f, open(sample, "w") as g:
            for i, line in enumerate(f):
                g.write(line)
                if i > 4000:
                    break
        subprocess.run([sys.executable, "-m", "depthbench", "prepare-text", str(sample), "--out",
                        str(tmp / "tok"), "--vocab-size", str(args.vocab_size)], check=True,
                       stdout=subprocess.PIPE)
        tok = tmp / "tok" / "tokenizer.json"
        # one process each, in turn; the encoding alone first, then the whole preparation
        script = tmp / "encode.py"
        script.write_text(CHILD_ENCODE)
        enc_s, enc_rss = child([str(script), str(tok), str(corpus)])
        prep_s, prep_rss = child(["depthbench", "prepare-text", str(corpus), "--out",
                                  str(tmp / "ds"), "--tokenizer", str(tok)])
        mb = size / 2**20
        print(f"corpus {mb:.0f} MB: prepare-text {mb / prep_s:.1f} MB/s (peak RSS {prep_rss} MB), "
              f"encode_batch alone {mb / enc_s:.1f} MB/s (peak RSS {enc_rss} MB); prepare-text takes "
              f"{prep_s / enc_s:.2f}x the encoding's time")
        print(json.dumps({"mb": mb, "prepare_text_s": prep_s, "prepare_text_peak_rss_mb": prep_rss,
                          "encode_batch_s": enc_s, "ratio": prep_s / enc_s}))


if __name__ == "__main__":
    main()
