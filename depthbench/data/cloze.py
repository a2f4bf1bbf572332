"""The text dataset's cloze: items that only the context can answer.

An item is a held-out document's first 16 words (the context) and four 8-word choices: the
document's next 8 words and three 8-word runs of *other* held-out documents. The distractors
are chosen so that the rules that read words without a model cannot tell them from the truth
(STYLE #19):

- each shares as many words with the context as the true continuation does, distinct and
  counted with repeats (words compared lowercased, punctuation stripped), so the word-overlap
  rule ties on every item (chance exactly);
- under each of five scores the truth lies at a rank among the four that is balanced over the
  items (``SCORES``): the choice's summed unigram log probability over tokens (counted in the
  training split) and over words, its word-bigram score after the context's last word
  (``Counts.bigram``), the IDF-weighted overlap of its words with the context's (rare shared
  words, names, count more) and the cosine of their TF-IDF vectors. A rule that picks by any
  of them, or by any rank of one, reads chance.

What is left to tell the truth from a distractor is whether it continues *this* context beyond
shared words and word pairs: syntax across the boundary, sense, who does what. No item's
context and continuation, no distractor, and no distractor read after the context (across the
join) shares an 8-word run with a training document, words compared as ``dedup.words`` reads
them, case and punctuation aside (n-gram decontamination: the answer could be memorized, not
predicted)."""

from __future__ import annotations

import itertools
import math
import string
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from depthbench.data.dedup import Contained

CONTEXT, CONT, NGRAM = 16, 8, 8    # words of context, of each choice; decontamination n-gram
POOL_PER_ITEM = 400                # candidates scored per item at most (a seeded sample)
POOL_RUNS, RUNS_PER_DOC = 200_000, 512   # distractor runs kept in all, and from one document
_STRIP = string.punctuation + "\u2018\u2019\u201c\u201d"
# the scores whose rank of the truth is balanced: the unigram rule's (given to ``build``),
# then ``Counts``' methods
SCORES = ("unigram", "word_unigram", "bigram", "idf_overlap", "tfidf_cosine")
TRIGRAM_MIX = (0.9, 0.09, 0.01)      # the trigram model's weights: trigram, bigram, unigram


def normalized(words: Iterable[str]) -> list[str]:
    """``words`` lowercased, leading and trailing punctuation stripped (none left: dropped)."""
    return [x for x in (w.lower().strip(_STRIP) for w in words) if x]


def norm_words(text: str) -> set[str]:
    """The distinct ``normalized`` words of ``text``."""
    return set(normalized(text.split()))


def unigram_logp(train_tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Log unigram probability of every token in the training split, add-one smoothed."""
    counts = np.bincount(np.asarray(train_tokens), minlength=vocab_size) + 1.0
    return np.log(counts / counts.sum())


def unigram_score(encode: Callable[[str], list[int]], logp: np.ndarray) -> Callable[[str], float]:
    """A choice's summed unigram log probability, rounded so equal token bags tie exactly."""
    return lambda text: round(float(logp[encode(text)].sum()), 9)


def overlap(it: dict, c: str) -> tuple[int, int]:
    """The word-overlap rule's score: the choice's words that occur in the context
    (``norm_words``), distinct first, then counted with repeats."""
    return _shared(c.split(), norm_words(it["context"]))


class Counts:
    """One pass over training documents, counting what the word rules read: word bigrams (only
    ``bigrams``, and those whose first word is in ``lead``, where given, so memory is bounded by
    what will be scored) and the documents each normalized word occurs in."""

    def __init__(self, docs: Iterable[str], bigrams: set | None = None, lead: set | None = None,
                 trigrams: set | None = None):
        self.big: Counter = Counter()
        self.tri: Counter = Counter()     # only ``trigrams`` (the n-gram references' needs)
        self.uni: Counter = Counter()     # every word (the vocabulary's size in memory)
        self.df: Counter = Counter()
        self.docs = self.words = 0
        lead = lead or set()
        for doc in docs:
            w = doc.split()
            self.docs += 1
            self.words += len(w)
            self.uni.update(w)
            if bigrams is None:
                self.big.update(zip(w, w[1:]))
            else:
                self.big.update(p for p in zip(w, w[1:]) if p in bigrams or p[0] in lead)
            if trigrams:
                self.tri.update(t for t in zip(w, w[1:], w[2:]) if t in trigrams)
            self.df.update(norm_words(doc))
        self.v = len(self.uni) + 1

    def bigram(self, it: dict, c: str) -> float:
        """Summed log probability of the choice's word bigrams after the context's last word
        (add-one smoothed over the words seen)."""
        w = it["context"].split()[-1:] + c.split()
        return round(sum(math.log((self.big[(a, b)] + 1) / (self.uni[a] + self.v))
                         for a, b in zip(w, w[1:])), 9)

    def trigram(self, it: dict, c: str) -> float:
        """How often the choice's first word follows the context's last two in training (one
        trigram lookup)."""
        return float(self.tri[(*it["context"].split()[-2:], c.split()[0])])

    def trigram_pmi(self, it: dict, c: str) -> float:
        """The pointwise mutual information of the choice's first word and the context's last
        two under a word-trigram model: log p(word | two before) - log p(word), p interpolating
        the trigram, bigram and add-one unigram frequencies (weights ``TRIGRAM_MIX``). Read on
        into the choice, the PMI mostly scores the choice's own coherence, which a distractor
        (real text too) shares: on kjv's cloze the first word alone reads highest (0.71 against
        0.69 for the whole trigram model's PMI of the choice)."""
        a, b = it["context"].split()[-2:]
        x = c.split()[0]
        p1 = (self.uni[x] + 1) / (self.words + self.v)
        p2 = self.big[(b, x)] / self.uni[b] if self.uni[b] else p1
        p3 = self.tri[(a, b, x)] / self.big[(a, b)] if self.big[(a, b)] else p2
        l3, l2, l1 = TRIGRAM_MIX
        return round(math.log(l3 * p3 + l2 * p2 + l1 * p1) - math.log(p1), 9)

    def word_unigram(self, it: dict, c: str) -> float:
        """Summed log frequency of the choice's words (add-one smoothed)."""
        return round(sum(math.log((self.uni[w] + 1) / (self.words + self.v)) for w in c.split()), 9)

    def idf(self, w: str) -> float:
        return math.log((self.docs + 1) / (self.df[w] + 1))

    def tfidf_cosine(self, it: dict, c: str) -> float:
        """The cosine of the choice's and the context's TF-IDF vectors (normalized words)."""
        a, b = (Counter(normalized(t.split())) for t in (it["context"], c))
        dot = sum(a[w] * b[w] * self.idf(w) ** 2 for w in a.keys() & b.keys())
        na, nb = (math.sqrt(sum((v * self.idf(w)) ** 2 for w, v in x.items())) for x in (a, b))
        return round(dot / (na * nb), 9) if na and nb else 0.0

    def idf_overlap(self, it: dict, c: str) -> float:
        """The shared words' summed inverse document frequency, log((N + 1) / (df + 1))."""
        return round(sum(self.idf(x) for x in norm_words(c) & norm_words(it["context"])), 9)


def needed(items: list[dict]) -> set[tuple[str, str]]:
    """The word bigrams that ``Counts`` must count to score ``items`` (the bigram rule's, and
    the trigram model's histories)."""
    bigrams = set()
    for it in items:
        last = it["context"].split()[-2:]
        for c in it["choices"]:
            w = last + c.split()
            bigrams.update(zip(w, w[1:]))
    return bigrams


def needed_trigrams(items: list[dict]) -> set[tuple[str, str, str]]:
    """The word trigrams that ``Counts`` must count for the trigram rules on ``items``: the
    context's last two words and each choice's first."""
    return {(*it["context"].split()[-2:], c.split()[0]) for it in items for c in it["choices"]}


def _cells(truth: tuple, scored: list[tuple[tuple, tuple[str, ...]]]) -> dict:
    """The candidates by cell (above the truth or not, on each score; a candidate that ties the
    truth on any score is in none), each with its distance to the truth (in each score's spread
    over the candidates), nearest first."""
    m = len(truth)
    spread = [max(1e-9, float(np.std([x[i] for x, _ in scored]))) for i in range(m)]
    cells: dict[tuple[bool, ...], list] = {}
    for x, run in scored:
        if all(x[i] != truth[i] for i in range(m)):
            d = sum(abs(x[i] - truth[i]) / spread[i] for i in range(m))
            cells.setdefault(tuple(x[i] > truth[i] for i in range(m)), []).append((d, run))
    return {c: [r for _, r in sorted(v)] for c, v in cells.items()}


def _options(cells: dict, k: int) -> dict[tuple[int, ...], list[tuple[str, ...]]]:
    """For every rank vector the cells allow, ``k`` distractors placing the truth at those
    ranks (0: highest) under every score: cells whose counts above the truth add up to the
    ranks, each filled with its nearest candidates (the first such set of cells, in order)."""
    out: dict[tuple[int, ...], list] = {}
    for combo in itertools.combinations_with_replacement(sorted(cells), k):
        need = Counter(combo)
        ranks = tuple(int(sum(c[i] for c in combo)) for i in range(len(combo[0])))
        if ranks not in out and all(len(cells[c]) >= n for c, n in need.items()):
            out[ranks] = [r for c, n in sorted(need.items()) for r in cells[c][:n]]
    return out


def _scan_training(training: Iterable[str], bigrams: set, lead: set):
    """One pass over the ``training`` documents: their word 8-grams (``dedup.Contained``, words
    as dedup reads them: case and punctuation aside) and the word rules' ``Counts``."""
    seen = Contained(NGRAM)

    def scanned():
        for doc in training:
            seen.add(doc)
            yield doc
    counts = Counts(scanned(), bigrams, lead)
    return seen, counts


def _shared(words: Iterable[str], ctx: set[str]) -> tuple[int, int]:
    """(distinct, all) of the words (normalized) that occur in ``ctx``."""
    n = [x for x in normalized(words) if x in ctx]
    return len(set(n)), len(n)


def _candidates(pool, runs, by_word, ctx: list[str], cont: tuple, d: int, rng) -> list:
    """The pool's runs from other documents that share as many normalized words with ``ctx``
    as ``cont`` does, distinct and counted with repeats (found through the word -> runs
    index), a seeded sample of at most POOL_PER_ITEM."""
    want = norm_words(" ".join(ctx))
    shared = _shared(cont, want)
    hits = [by_word[w] for w in want if w in by_word]
    count = np.bincount(np.concatenate(hits), minlength=len(pool)) if hits else \
        np.zeros(len(pool), dtype=np.int64)
    idx = [i for i in np.flatnonzero(count == shared[0]) if runs[i][1] != d and pool[i] != cont
           and _shared(pool[i], want) == shared]
    if len(idx) > POOL_PER_ITEM:
        idx = [idx[i] for i in sorted(rng.choice(len(idx), POOL_PER_ITEM, replace=False))]
    return sorted({pool[i] for i in idx})


def build(held_out: list[str], seed: int, score: Callable[[str], float],
          training: Iterable[str] | None = None, n: int = 256,
          choices: int = 4) -> tuple[list[dict], int]:
    """Up to ``n`` items from ``held_out`` (see the module docstring), ``score`` being the
    unigram rule's score of a choice's text. Returns the items and how many candidate documents
    were left out for sharing an 8-word run with ``training``."""
    texts = [d.split() for d in held_out]
    docs = [i for i, w in enumerate(texts) if len(w) >= CONTEXT + CONT][: 4 * n]
    # the 8-word runs of the held-out documents (memory bounded: a long document gives its
    # first RUNS_PER_DOC, and the pool stops at POOL_RUNS)
    runs = [(tuple(w[p:p + CONT]), d) for d, w in enumerate(texts)
            for p in range(min(RUNS_PER_DOC, len(w) - CONT + 1))][:POOL_RUNS]
    # a distractor's first word after the context's last: every bigram led by a last word
    seen, counts = _scan_training(
        training or (), {p for r, _ in runs for p in zip(r, r[1:])}
        | {p for d in docs for p in zip(texts[d][:CONTEXT + CONT], texts[d][1:CONTEXT + CONT])},
        {texts[d][CONTEXT - 1] for d in docs})
    bad_docs = {j for j, d in enumerate(docs) if seen.any(" ".join(texts[d][:CONTEXT + CONT]))}
    runs = [(r, d) for r, d in runs if not seen.any(" ".join(r))]
    pool = [r for r, _ in runs]
    by_word: dict[str, list[int]] = {}
    for i, r in enumerate(pool):
        for x in norm_words(" ".join(r)):
            by_word.setdefault(x, []).append(i)
    by_word = {x: np.asarray(v) for x, v in by_word.items()}
    rng = np.random.default_rng([seed, 7])
    used = np.zeros((len(SCORES), choices), dtype=np.int64)   # items with the truth at each rank
    items = []
    for j, d in enumerate(docs):
        if len(items) == n:
            break
        if j in bad_docs:
            continue
        ctx, cont = texts[d][:CONTEXT], tuple(texts[d][CONTEXT:CONTEXT + CONT])
        cands = [r for r in _candidates(pool, runs, by_word, ctx, cont, d, rng)
                 if not seen.any(" ".join(ctx[-(NGRAM - 1):] + list(r)))]
        it = {"context": " ".join(ctx)}

        def scores(r, it=it):
            t = " " + " ".join(r)
            return (score(t), *(getattr(counts, f)(it, t) for f in SCORES[1:]))
        options = _options(_cells(scores(cont), [(scores(r), r) for r in cands]),
                           choices - 1) if cands else {}
        if not options:
            continue
        # the truth's ranks: the ones least used so far that the candidates allow (seeded
        # tie-break), so each rule's pick is the truth on about 1 item in ``choices``
        allowed = sorted(options)
        tie = rng.permutation(len(allowed))
        best = min(range(len(allowed)), key=lambda i: (
            sum(used[q, allowed[i][q]] for q in range(len(SCORES))), tie[i]))
        ranks = allowed[best]
        for q in range(len(SCORES)):
            used[q, ranks[q]] += 1
        picked = options[ranks]
        opts = [cont, *picked]
        order = rng.permutation(choices)
        items.append({**it, "choices": [" " + " ".join(opts[k]) for k in order],
                      "label": int(np.flatnonzero(order == 0)[0])})
    return items, len(bad_docs)
