"""The oracles that bracket every knowledge reading (STYLE #19), computed from the dataset's
files alone, with no model, and scored by one function (the definitions of DESIGN.md section 2).

- ``person_agnostic`` (the **floor**): what a model reads that knows every attribute's training
  distribution of values but no person. It predicts value ``v`` of attribute ``a`` with
  probability ``(1 - eps) c(v) / N + eps / M_a`` (``c(v)``: training rows holding ``v``, ``N``:
  training rows, ``eps = 1 / (N + 1)`` keeps unseen values finite), the chain rule's product of
  "each value token given the attribute and the value tokens before it" at their training
  frequencies; its greedy answer takes the most frequent token at each position in turn. With
  balanced values every ``c(v)`` is equal, the prediction is uniform and the floor reads 0 bits;
  with fewer people than values the few values used form a table that reads
  ``log2(M_a c(v) / N)`` bits per fact without knowing anyone.
- ``NameBlind`` (the **strongest shortcut**): a record completer that memorized every training
  record (which values go together) but never reads a name. Asked attribute ``a`` after the
  values shown before it in the row, it predicts the values of ``a`` among the records that
  agree with every shown value, mixed with uniform as above (all records when nothing is
  shown). On the name-only reading nothing is shown, so it can only read the floor; on record
  completion (every later fact of a row, teacher-forced after the earlier ones) one shown value
  narrows the person to a handful and it reads most of the ceiling.
- ``StructureBlind`` (the **structural shortcut**): name-blind too, but it knows each training
  record's structure, whether attribute ``a`` ever opens one of that person's training orders,
  and how often the asked facts of a split are of each kind (the held-out split asks only
  attributes that never open an order, the seen-order control only ones that do). Asked ``a``
  it predicts the values of ``a`` among the records of each kind, weighted by the split's
  share of that kind. With each value held once per tier the values of the records that hold
  ``a`` out are not uniform, so this reads about a bit per person on the tiered task without
  knowing anyone; every reading is bracketed by it as by the others. (The finer structure, the
  slot at which ``a`` sits in each order, names the asked people themselves: it would read the
  split's own answers, not a shortcut a model could take.)
- ``know_everything`` (the **ceiling** side): a model that memorized every training fact. It puts
  probability 1 on a trained person's value and ``1 / M_a`` on anything else, so it reads the
  ceiling on trained people and 0 on unseen ones.

Every split but ``train`` is read as the model is: one asked fact per row (``Dataset.asked``),
bits per person over ``rows_per_person`` rows; ``slots="record"`` reads every fact after the
first instead (record completion, never bits per person of the name-only reading).
"""

from __future__ import annotations

import math

import numpy as np

from depthbench.data.synthetic import Dataset

_CHUNK = 1 << 20  # rows read at a time: bounded memory at paper scale


def _facts(ds: Dataset, split: str, slots: str = "all") -> list[tuple[np.ndarray, np.ndarray]]:
    """Per attribute: (row ids (N,), value tokens (N, L_a)) of the facts of ``split`` in the
    given slots: ``all`` (every fact of every row), ``asked`` (the first, the name-only
    question) or ``record`` (every fact after the first)."""
    s = ds.split(split)
    A = len(ds.attributes)
    rows_of: list[list[np.ndarray]] = [[] for _ in range(A)]
    values: list[list[np.ndarray]] = [[] for _ in range(A)]
    lo_slot = {"all": 0, "asked": 0, "record": 1}[slots]
    hi_slot = 1 if slots == "asked" else A
    for lo in range(0, len(s), _CHUNK):
        hi = min(lo + _CHUNK, len(s))
        tokens = np.asarray(s.tokens[lo:hi], dtype=np.int64)              # (n, T)
        order = np.asarray(s.order[lo:hi], dtype=np.int64)                # (n, A)
        key = ds.key_positions(order)                                     # (n, A)
        ids = np.arange(lo, hi)
        for j in range(lo_slot, hi_slot):
            for a in range(A):
                m = order[:, j] == a
                cols = key[m, j][:, None] + 1 + np.arange(int(ds.value_tokens[a]))  # (n_a, L_a)
                values[a].append(tokens[m][np.arange(int(m.sum()))[:, None], cols])
                rows_of[a].append(ids[m])
    return [(np.concatenate(r), np.concatenate(v)) for r, v in zip(rows_of, values)]


def _people(ds: Dataset, split: str, facts) -> list[tuple[np.ndarray, np.ndarray]]:
    """``_facts`` with each row id replaced by its person id."""
    person = np.asarray(ds.split(split).person, dtype=np.int64)
    return [(person[r], v) for r, v in facts]


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


def _reading(ds: Dataset, split: str, nll_and_hit, slots: str = "asked") -> dict:
    """The metric columns for per-fact value NLLs (nats) and greedy hits, one attribute at a
    time: ``nll_and_hit(a, rows, values) -> (nll (N,), hit (N,) bool)`` over the facts of
    ``split`` in ``slots``; per person over ``rows_per_person`` rows, as the model is read."""
    facts = _facts(ds, split, slots)
    people = len(ds.split(split)) // ds.rows_per_person
    out = {"value_nll": 0.0, "exact_match": 0.0, "bits_per_person": 0.0,
           "unfloored_bits_per_person": 0.0, "ceiling_bits": 0.0, "people": people, "facts": 0}
    per = {}
    for a, (rows, values) in enumerate(facts):
        nll, hit = nll_and_hit(a, rows, values)
        unfloored = math.log2(ds.n_values[a]) - nll / math.log(2)
        bits = np.maximum(unfloored, 0.0)
        out["value_nll"] += float(nll.sum())
        out["exact_match"] += float(hit.sum())
        out["bits_per_person"] += float(bits.sum())
        out["unfloored_bits_per_person"] += float(unfloored.sum())
        out["ceiling_bits"] += len(nll) * math.log2(ds.n_values[a])
        out["facts"] += len(nll)
        per[f"bits/{ds.attributes[a]}"] = float(bits.mean()) if len(bits) else 0.0
        per[f"exact_match/{ds.attributes[a]}"] = float(hit.mean()) if len(hit) else 0.0
    facts_n = max(out["facts"], 1)
    out["value_nll"] /= facts_n
    out["exact_match"] /= facts_n
    for k in ("bits_per_person", "unfloored_bits_per_person", "ceiling_bits"):
        out[k] /= max(people, 1)
    return {**out, **per}


def _mixed_nll(count_true: np.ndarray, total: np.ndarray, n_train: int, M: int) -> np.ndarray:
    """-log of a frequency prediction mixed with uniform, eps = 1 / (N + 1) (see the module)."""
    eps = 1.0 / (n_train + 1)
    return -np.log((1 - eps) * count_true / total + eps / M)


class PersonAgnostic:
    """The floor: training value frequencies without names, tallied once from the training split
    and read on any split."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        self.tallies = [_tally(values) for _, values in _facts(ds, "train")]
        self.greedy = [_greedy(distinct, counts) for distinct, counts in self.tallies]

    def reading(self, split: str, slots: str = "asked") -> dict:
        def score(a, rows, values):
            distinct, counts = self.tallies[a]
            n = int(counts.sum())
            nll = _mixed_nll(_count_in(distinct, counts, values), n, n, int(self.ds.n_values[a]))
            hit = (values == self.greedy[a][None, :]).all(axis=1)
            return nll, hit
        return _reading(self.ds, split, score, slots)


def person_agnostic(ds: Dataset, split: str) -> dict:
    """The floor's reading on ``split``."""
    return PersonAgnostic(ds).reading(split)


class NameBlind:
    """The name-blind record completer: every training record (one per trained person, its
    values by attribute), no names. Tallied once, read on any split."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        A = len(ds.attributes)
        per_attr = _people(ds, "train", _facts(ds, "train"))
        self.n_people = ds.config.n_people
        self.records = np.zeros((self.n_people, A), dtype=np.int64)        # value code per attr
        self.tables = []                                                   # code -> value tokens
        for a, (people, values) in enumerate(per_attr):
            table, code = np.unique(values, axis=0, return_inverse=True)
            self.records[people, a] = code.reshape(-1)
            self.tables.append(table)
        self.by_value = [{} for _ in range(A)]                             # (a, code) -> records
        for a in range(A):
            order = np.argsort(self.records[:, a], kind="stable")
            codes, starts = np.unique(self.records[order, a], return_index=True)
            for c, chunk in zip(codes, np.split(order, starts[1:])):
                self.by_value[a][int(c)] = chunk

    def _lookup(self, a: int, values: np.ndarray) -> np.ndarray:
        """The codes of value rows (N, L_a) of attribute ``a`` (-1: no training record holds it)."""
        t = self.tables[a]
        d, q = _codes(t, values)
        order = np.argsort(d)
        at = np.minimum(np.searchsorted(d[order], q), len(d) - 1)
        return np.where(d[order][at] == q, order[at], -1)

    def _candidates(self, shown) -> np.ndarray:
        """The records that agree with every shown (attribute, code) (all when none agrees)."""
        b, c = shown[0]
        cand = self.by_value[b].get(c, np.zeros(0, dtype=np.int64))
        for b, c in shown[1:]:
            cand = cand[self.records[cand, b] == c]
        return cand if len(cand) else np.arange(self.n_people)

    def _predict(self, a: int, cand: np.ndarray):
        """(value codes, their counts among ``cand``, the greedy answer's tokens)."""
        codes, counts = np.unique(self.records[cand, a], return_counts=True)
        return codes, counts, _greedy(self.tables[a][codes], counts)

    def reading(self, split: str, slots: str = "asked") -> dict:
        s = self.ds.split(split)
        order = np.asarray(s.order, dtype=np.int64)                        # (N, A)
        row_codes = np.empty_like(order)                                   # code of a in row r
        for a, (rows, values) in enumerate(_facts(self.ds, split)):
            row_codes[rows, a] = self._lookup(a, values)
        slot_of = np.argsort(order, axis=1)                                # (N, A): slot of a

        def score(a, rows, values):
            M = int(self.ds.n_values[a])
            true = row_codes[rows, a]
            codes, counts, greedy = self._predict(a, np.arange(self.n_people))
            full = np.zeros(len(self.tables[a]) + 1, dtype=np.int64)       # index -1: unseen
            full[codes] = counts
            n_true, total = full[true], np.full(len(rows), counts.sum())
            hit = (values == greedy[None, :]).all(axis=1)
            for i in np.flatnonzero(slot_of[rows, a] > 0):                 # facts after others
                r = rows[i]
                shown = [(int(b), int(row_codes[r, b])) for b in order[r, :slot_of[r, a]]]
                codes, counts, greedy = self._predict(a, self._candidates(shown))
                n_true[i] = counts[codes == true[i]].sum()
                total[i] = counts.sum()
                hit[i] = (greedy == values[i]).all()
            return _mixed_nll(n_true, total, self.n_people, M), hit
        return _reading(self.ds, split, score, slots)


class StructureBlind(NameBlind):
    """The structural shortcut (see the module): the name-blind records, split by whether each
    attribute ever opens the person's training orders."""

    def __init__(self, ds: Dataset):
        super().__init__(ds)
        tr = ds.split("train")
        opens = np.zeros((self.n_people, len(ds.attributes)), dtype=bool)   # a opens an order
        opens[np.asarray(tr.person, dtype=np.int64), np.asarray(tr.order[:, 0], dtype=np.int64)] = True
        self.opens = opens

    def _weights(self, a: int, kinds: np.ndarray) -> np.ndarray:
        """Per training record, its weight in the prediction for attribute ``a``: the split's
        share of the asked facts of the record's kind (``kinds``: 1 opens, 0 never, -1 an
        unseen person, who falls back to every record alike), spread over that kind's records."""
        w = np.zeros(self.n_people)
        for kind, share in zip(*np.unique(kinds, return_counts=True)):
            on = np.ones(self.n_people, bool) if kind < 0 else self.opens[:, a] == bool(kind)
            if on.any():
                w[on] += share / len(kinds) / on.sum()
            else:
                w += share / len(kinds) / self.n_people
        return w

    def reading(self, split: str, slots: str = "asked") -> dict:
        if slots != "asked":
            raise ValueError("the structural shortcut reads the name-only question (slots='asked')")
        person = np.asarray(self.ds.split(split).person, dtype=np.int64)

        def score(a, rows, values):
            p = person[rows]
            trained = p < self.n_people
            kinds = np.where(trained, self.opens[np.minimum(p, self.n_people - 1), a], -1)
            w = self._weights(a, kinds.astype(np.int64))
            mass = np.bincount(self.records[:, a], weights=w, minlength=len(self.tables[a]))
            true = self._lookup(a, values)
            n_true = np.where(true >= 0, mass[np.maximum(true, 0)], 0.0)
            greedy = _greedy(self.tables[a], mass)
            nll = _mixed_nll(n_true, 1.0, self.n_people, int(self.ds.n_values[a]))
            return nll, (values == greedy[None, :]).all(axis=1)
        return _reading(self.ds, split, score, slots)


def structure_blind(ds: Dataset, split: str) -> dict:
    """The structural shortcut's reading on ``split``'s name-only questions."""
    return StructureBlind(ds).reading(split)


def name_blind(ds: Dataset, split: str, slots: str = "asked") -> dict:
    """The name-blind record completer's reading on ``split``."""
    return NameBlind(ds).reading(split, slots)


def know_everything(ds: Dataset, split: str) -> dict:
    """The ceiling side: the reading on ``split`` of a lookup table of every training fact."""
    known = [_tally(np.concatenate([people[:, None], values], axis=1))
             for people, values in _people(ds, "train", _facts(ds, "train"))]

    def score(a, rows, values):
        people = np.asarray(ds.split(split).person, dtype=np.int64)[rows]
        hit = _count_in(*known[a], np.concatenate([people[:, None], values], axis=1)) > 0
        nll = np.where(hit, 0.0, math.log(int(ds.n_values[a])))
        return nll, hit
    return _reading(ds, split, score)
