"""The text dataset's cloze: items that only the context can answer.

An item is a held-out document's first 16 words (the context) and four 8-word choices: the
document's next 8 words and three 8-word runs of *other* held-out documents. The distractors
are chosen so that the shortcuts that read a choice without its context cannot tell them from
the truth (STYLE #19):

- each starts with the true continuation's first word, so the word pair across the boundary
  (the context's last word, the choice's first) is the same for every choice;
- each shares as many distinct words with the context as the true continuation does, so a
  word-overlap rule ties on every item (chance exactly);
- their summed unigram log probability (tokens, counted in the training split: the unigram
  rule's own score) and their word-bigram score (``bigram_scorer``, counted in the training
  documents) each place the truth at a seeded rank among the four, balanced over ranks, so a
  rule that picks by frequency or by word order, or by any rank of either, reads chance.

What is left to tell the truth from a distractor is whether it continues *this* context: topic,
names, syntax across the boundary. No item's context and continuation, and no distractor,
shares an 8-word run with a training document (n-gram decontamination: the answer could be
memorized, not predicted)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

CONTEXT, CONT, NGRAM = 16, 8, 8    # words of context, of each choice; decontamination n-gram
POOL_PER_ITEM = 400                # candidates scored per item at most (a seeded sample)
POOL_RUNS, RUNS_PER_DOC = 200_000, 512   # distractor runs kept in all, and from one document


def ngrams(words: list[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def unigram_logp(train_tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Log unigram probability of every token in the training split, add-one smoothed."""
    counts = np.bincount(np.asarray(train_tokens), minlength=vocab_size) + 1.0
    return np.log(counts / counts.sum())


def unigram_score(encode: Callable[[str], list[int]], logp: np.ndarray) -> Callable[[str], float]:
    """A choice's summed unigram log probability, rounded so equal token bags tie exactly."""
    return lambda text: round(float(logp[encode(text)].sum()), 9)


def bigram_scorer(docs: Iterable[str], only: set[tuple[str, str]] | None = None):
    """A rule without a model that reads word order: word bigrams counted in ``docs`` (add-one
    smoothed over the words seen), a choice scored by the summed log probability of its
    bigrams after the context's last word. With ``only``, just those bigrams (and their first
    words) are counted: the same scores for them, in memory bounded by ``only``."""
    big: Counter = Counter()
    uni: Counter = Counter()
    words: set[str] = set()
    firsts = {a for a, _ in only} if only is not None else None
    for doc in docs:
        w = doc.split()
        words.update(w)
        if only is None:
            uni.update(w)
            big.update(zip(w, w[1:]))
        else:
            uni.update(x for x in w if x in firsts)
            big.update(p for p in zip(w, w[1:]) if p in only)
    v = len(words) + 1

    def score(it: dict, c: str) -> float:
        w = it["context"].split()[-1:] + c.split()
        return round(sum(math.log((big[(a, b)] + 1) / (uni[a] + v)) for a, b in zip(w, w[1:])), 9)
    return score


def _scan_training(docs: list[list[str]], pool: list[tuple[str, ...]], training: Iterable[str],
                   bigrams: set[tuple[str, str]]):
    """One pass over the ``training`` documents: the item documents (index into ``docs``) whose
    first 24 words, and the pool runs, that share an 8-word run with one, and the bigram rule
    over the ``bigrams`` the cloze can score."""
    index: dict[tuple[str, ...], list[int]] = {}
    for i, w in enumerate(docs):
        for g in ngrams(w[:CONTEXT + CONT]):
            index.setdefault(g, []).append(i)
    runs = set(pool)
    bad_docs: set[int] = set()
    bad_runs: set[tuple[str, ...]] = set()

    def scanned():
        for doc in training:
            for g in ngrams(doc.split()):
                if g in index:
                    bad_docs.update(index[g])
                if g in runs:
                    bad_runs.add(g)
            yield doc
    bigram = bigram_scorer(scanned(), only=bigrams)
    return bad_docs, bad_runs, bigram


def _pick(truth: tuple[float, float], scored: list[tuple[tuple[float, float], tuple[str, ...]]],
          ranks: tuple[int, int], k: int) -> list[tuple[str, ...]] | None:
    """``k`` distractors placing ``truth`` at ``ranks`` (0: highest) under both rules' scores
    (unigram, bigram): so many above and below it on each (equal scores are neither), the
    nearest to it (distance in each score's spread over the candidates) within each of the four
    quadrants; None if the candidates cannot."""
    spread = [max(1e-9, float(np.std([x[i] for x, _ in scored]))) if scored else 1.0
              for i in (0, 1)]
    quads: dict[tuple[bool, bool], list] = {}
    for x, run in scored:
        if x[0] != truth[0] and x[1] != truth[1]:
            d = sum(abs(x[i] - truth[i]) / spread[i] for i in (0, 1))
            quads.setdefault((x[0] > truth[0], x[1] > truth[1]), []).append((d, run))
    ru, rb = ranks
    for both in range(max(0, ru + rb - k), min(ru, rb) + 1):
        need = {(True, True): both, (True, False): ru - both, (False, True): rb - both,
                (False, False): k - ru - rb + both}
        if all(len(quads.get(q, ())) >= c for q, c in need.items()):
            return [r for q, c in need.items() for _, r in sorted(quads.get(q, []))[:c]]
    return None


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
    pool = [(tuple(w[p:p + CONT]), d) for d, w in enumerate(texts)
            for p in range(min(RUNS_PER_DOC, len(w) - CONT + 1))][:POOL_RUNS]
    bad_docs, bad_runs, bigram = _scan_training(
        [texts[d] for d in docs], [r for r, _ in pool], training or (),
        {p for r, _ in pool for p in zip(r, r[1:])}
        | {p for d in docs for p in zip(texts[d][:CONTEXT + CONT], texts[d][1:CONTEXT + CONT])})
    by_first: dict[str, list[tuple[tuple[str, ...], int]]] = {}
    for r, d in pool:
        if r not in bad_runs:
            by_first.setdefault(r[0], []).append((r, d))
    rng = np.random.default_rng([seed, 7])
    used = np.zeros((2, choices), dtype=np.int64)   # items with the truth at each rank, per rule
    items = []
    for j, d in enumerate(docs):
        if len(items) == n:
            break
        if j in bad_docs:
            continue
        ctx, cont = texts[d][:CONTEXT], tuple(texts[d][CONTEXT:CONTEXT + CONT])
        shared = len(set(cont) & set(ctx))
        cands = sorted({r for r, e in by_first.get(cont[0], ()) if e != d and r != cont
                        and len(set(r) & set(ctx)) == shared})
        if len(cands) > POOL_PER_ITEM:
            cands = [cands[i] for i in sorted(rng.choice(len(cands), POOL_PER_ITEM, replace=False))]
        it = {"context": " ".join(ctx)}
        texts_of = [" " + " ".join(r) for r in (cont, *cands)]
        x = [(score(t), bigram(it, t)) for t in texts_of]
        truth, scored = x[0], list(zip(x[1:], cands))
        # the truth's ranks: the pair least used so far that the candidates allow (seeded
        # tie-break), so each rule's pick is the truth on about 1 item in ``choices``
        pairs = [(a, b) for a in range(choices) for b in range(choices)]
        tie = rng.permutation(len(pairs))
        for i in sorted(range(len(pairs)), key=lambda i: (used[0, pairs[i][0]]
                                                         + used[1, pairs[i][1]], tie[i])):
            if (picked := _pick(truth, scored, pairs[i], choices - 1)) is not None:
                used[0, pairs[i][0]] += 1
                used[1, pairs[i][1]] += 1
                break
        else:
            continue
        opts = [cont, *picked]
        order = rng.permutation(choices)
        items.append({**it, "choices": [" " + " ".join(opts[k]) for k in order],
                      "label": int(np.flatnonzero(order == 0)[0])})
    return items, len(bad_docs)
