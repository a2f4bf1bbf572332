"""The two oracles that bracket every knowledge reading (STYLE #19), computed from the dataset's
files alone, with no model.

- ``person_agnostic`` (the **floor**): what a model reads that knows every attribute's training
  distribution of values but no person. It predicts value ``v`` of attribute ``a`` with
  probability ``(1 - eps) c(v) / N + eps / M_a`` (``c(v)``: training rows holding ``v``, ``N``:
  training rows, ``eps = 1 / (N + 1)`` keeps unseen values finite), the chain rule's product of
  "each value token given the attribute and the value tokens before it" at their training
  frequencies; its greedy answer takes the most frequent token at each position in turn. With
  balanced values every ``c(v)`` is equal, the prediction is uniform and the floor reads 0 bits;
  with fewer people than values the few values used form a table that reads
  ``log2(M_a c(v) / N)`` bits per fact without knowing anyone.
- ``know_everything`` (the **ceiling** side): a model that memorized every training fact. It puts
  probability 1 on a trained person's value and ``1 / M_a`` on anything else, so it reads the
  ceiling on trained people and 0 on unseen ones.

Both go through one scoring function, the definitions of DESIGN.md section 2, so a test of the
two brackets is a test of the metric itself.
"""

from __future__ import annotations

import math

import numpy as np

from depthbench.data import Dataset

_CHUNK = 1 << 20  # rows read at a time: bounded memory at paper scale


def _facts(ds: Dataset, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per attribute: (person ids (N,), value tokens (N, L_a)) of every row of ``split``."""
    s = ds.split(split)
    A = len(ds.attributes)
    people: list[list[np.ndarray]] = [[] for _ in range(A)]
    values: list[list[np.ndarray]] = [[] for _ in range(A)]
    for lo in range(0, len(s), _CHUNK):
        hi = min(lo + _CHUNK, len(s))
        tokens = np.asarray(s.tokens[lo:hi], dtype=np.int64)              # (n, T)
        order = np.asarray(s.order[lo:hi], dtype=np.int64)                # (n, A)
        key = ds.key_positions(order)                                     # (n, A)
        slot = np.argsort(order, axis=1)                                  # (n, A): slot of a
        rows = np.arange(hi - lo)
        for a in range(A):
            k = key[rows, slot[:, a]]                                     # (n,)
            cols = k[:, None] + 1 + np.arange(int(ds.value_tokens[a]))    # (n, L_a)
            values[a].append(tokens[rows[:, None], cols])
            people[a].append(np.asarray(s.person[lo:hi], dtype=np.int64))
    return [(np.concatenate(p), np.concatenate(v)) for p, v in zip(people, values)]


def _codes(*arrays: np.ndarray) -> list[np.ndarray]:
    """One int64 code per row, equal for equal rows across all ``arrays`` (each (N_i, L) of
    non-negative ints): positional arithmetic when it fits in 62 bits, else a joint unique."""
    base = int(max(int(a.max()) if a.size else 0 for a in arrays)) + 1
    width = arrays[0].shape[1]
    if width * math.log2(base) < 62:
        weights = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
        return [a.astype(np.int64) @ weights for a in arrays]
    _, inv = np.unique(np.concatenate(arrays), axis=0, return_inverse=True)
    cuts = np.cumsum([len(a) for a in arrays])[:-1]
    return np.split(inv.reshape(-1).astype(np.int64), cuts)


def _tally(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``rows`` (N, L) and how often each occurs."""
    (codes,) = _codes(rows)
    _, first, counts = np.unique(codes, return_index=True, return_counts=True)
    return rows[first], counts


def _count_in(distinct: np.ndarray, counts: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The count of each row of ``queries`` in a tally (0 for a row it does not hold)."""
    if not len(distinct):
        return np.zeros(len(queries), dtype=np.int64)
    d, q = _codes(distinct, queries)
    order = np.argsort(d)
    d, counts = d[order], counts[order]
    at = np.minimum(np.searchsorted(d, q), len(d) - 1)
    return np.where(d[at] == q, counts[at], 0)


def _greedy(table: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The value a frequency model decodes greedily: at each position the token with the most
    mass among the values that agree with the tokens chosen so far (ties: the smaller id)."""
    keep = np.ones(len(table), dtype=bool)
    out = []
    for l in range(table.shape[1]):
        toks, inv = np.unique(table[keep, l], return_inverse=True)
        mass = np.bincount(inv.reshape(-1), weights=counts[keep])
        out.append(int(toks[int(np.argmax(mass))]))
        keep &= table[:, l] == out[-1]
    return np.array(out)


def _reading(ds: Dataset, split: str, nll_and_hit) -> dict:
    """The metric columns for per-fact value NLLs (nats) and greedy hits, one attribute at a
    time: ``nll_and_hit(a, people, values) -> (nll (N,), hit (N,) bool)``."""
    facts = _facts(ds, split)
    rows = len(ds.split(split))
    out = {"value_nll": 0.0, "exact_match": 0.0, "bits_per_person": 0.0,
           "unfloored_bits_per_person": 0.0, "people": rows, "facts": 0}
    per = {}
    for a, (people, values) in enumerate(facts):
        nll, hit = nll_and_hit(a, people, values)
        unfloored = math.log2(ds.n_values[a]) - nll / math.log(2)
        bits = np.maximum(unfloored, 0.0)
        out["value_nll"] += float(nll.sum())
        out["exact_match"] += float(hit.sum())
        out["bits_per_person"] += float(bits.sum())
        out["unfloored_bits_per_person"] += float(unfloored.sum())
        out["facts"] += len(nll)
        per[f"bits/{ds.attributes[a]}"] = float(bits.mean()) if len(bits) else 0.0
        per[f"exact_match/{ds.attributes[a]}"] = float(hit.mean()) if len(hit) else 0.0
    facts_n = max(out["facts"], 1)
    out["value_nll"] /= facts_n
    out["exact_match"] /= facts_n
    out["bits_per_person"] /= max(rows, 1)
    out["unfloored_bits_per_person"] /= max(rows, 1)
    return {**out, **per}


class PersonAgnostic:
    """The floor: training value frequencies without names, tallied once from the training split
    and read on any split."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        self.tallies = [_tally(values) for _, values in _facts(ds, "train")]
        self.greedy = [_greedy(distinct, counts) for distinct, counts in self.tallies]

    def reading(self, split: str) -> dict:
        def score(a, people, values):
            distinct, counts = self.tallies[a]
            n, M = counts.sum(), int(self.ds.n_values[a])
            eps = 1.0 / (n + 1)
            p = (1 - eps) * _count_in(distinct, counts, values) / n + eps / M
            hit = (values == self.greedy[a][None, :]).all(axis=1)
            return -np.log(p), hit
        return _reading(self.ds, split, score)


def person_agnostic(ds: Dataset, split: str) -> dict:
    """The floor's reading on ``split``."""
    return PersonAgnostic(ds).reading(split)


def know_everything(ds: Dataset, split: str) -> dict:
    """The ceiling side: the reading on ``split`` of a lookup table of every training fact."""
    known = [_tally(np.concatenate([people[:, None], values], axis=1))
             for people, values in _facts(ds, "train")]

    def score(a, people, values):
        hit = _count_in(*known[a], np.concatenate([people[:, None], values], axis=1)) > 0
        nll = np.where(hit, 0.0, math.log(int(ds.n_values[a])))
        return nll, hit
    return _reading(ds, split, score)
