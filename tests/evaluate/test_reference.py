"""The brackets of every reading: the person-agnostic floor and the name-blind record completer
read about 0 on every preset's name-only splits (balanced values), the know-everything oracle
reads the ceiling, the name-blind completer reads most of the ceiling on record completion (the
shortcut the name-only reading closes), and on small configs both lower oracles equal a per-fact
computation written out naively."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from depthbench.data.generate import generate
from depthbench.data.synthetic import Dataset
from depthbench.data_gen.config import paper, resolve_config, small, tiny
from depthbench.data_gen.generate import balanced_values
from depthbench.evaluate.reference import NameBlind, know_everything, person_agnostic

SPLITS = ("eval_reordered", "eval_seen_order", "eval_unseen_people")


def _make(tmp_path, cfg, name):
    generate(cfg, tmp_path / name)
    return Dataset(tmp_path / name)


@pytest.mark.parametrize("preset", [
    "tiny", "small",
    # the paper preset at 131,072 people (2 per value) instead of 2^20: the same value sets
    pytest.param("paper", marks=pytest.mark.slow),
])
@pytest.mark.slow
def test_lower_oracles_read_about_zero_and_oracle_reads_ceiling_on_every_preset(tmp_path, preset):
    cfg = {"tiny": tiny, "small": small, "paper": paper}[preset]()
    if preset == "paper":
        cfg = resolve_config("paper", overrides={"n_people": 131072, "n_unseen_people": 2000,
                                                 "text_eval_people": 100})
    assert cfg.balanced_values
    ds = _make(tmp_path, cfg, preset)
    blind = NameBlind(ds)
    for split in SPLITS:
        for lower in (person_agnostic(ds, split), blind.reading(split)):
            assert lower["bits_per_person"] <= 0.5, (split, lower["bits_per_person"])
            assert lower["exact_match"] < 0.05
            assert abs(lower["unfloored_bits_per_person"]) <= 0.5
        oracle = know_everything(ds, split)
        if split == "eval_unseen_people":
            assert oracle["bits_per_person"] == 0.0 and oracle["exact_match"] == 0.0
        else:
            assert oracle["bits_per_person"] == pytest.approx(ds.ceiling_bits)
            assert oracle["exact_match"] == 1.0


def _rows(ds: Dataset, name: str):
    """(person, [(attribute, value tokens) in row order]) of every row of a split, in Python."""
    s = ds.split(name)
    for row, person, order in zip(np.asarray(s.tokens), np.asarray(s.person), np.asarray(s.order)):
        pos, facts = 1 + ds.name_tokens, []
        for a in order:
            L = int(ds.value_tokens[a])
            facts.append((int(a), tuple(int(t) for t in row[pos + 1:pos + 1 + L])))
            pos += 1 + L
        yield int(person), facts


def _naive_floor(ds: Dataset, split: str) -> float:
    """Per asked fact (the first of each row), in plain Python: the training frequency of the
    value, mixed with uniform; per person over its rows."""
    train = [f for _, facts in _rows(ds, "train") for f in facts]
    count = Counter(train)
    per_attr = Counter(a for a, _ in train)
    total = 0.0
    for _, facts in _rows(ds, split):
        a, v = facts[0]
        n, M = per_attr[a], int(ds.n_values[a])
        eps = 1 / (n + 1)
        p = (1 - eps) * count[(a, v)] / n + eps / M
        total += max(0.0, math.log2(M) + math.log2(p))
    return total / (len(ds.split(split)) / ds.rows_per_person)


def _naive_record_completion(ds: Dataset, split: str) -> tuple[float, float]:
    """The name-blind completer in plain Python on every fact after the first of each row:
    (bits per person, exact match), with exact match as "the true value is the unique most
    frequent one among the agreeing records" (ties make greedy decoding depend on tokens)."""
    records = {p: dict(facts) for p, facts in _rows(ds, "train")}
    n = len(records)
    bits, hits, count = 0.0, 0, 0
    for _, facts in _rows(ds, split):
        for j in range(1, len(facts)):
            a, v = facts[j]
            shown = facts[:j]
            cand = [r for r in records.values() if all(r[b] == w for b, w in shown)] \
                or list(records.values())
            c = Counter(r[a] for r in cand)
            M, eps = int(ds.n_values[a]), 1 / (n + 1)
            p = (1 - eps) * c[v] / len(cand) + eps / M
            bits += max(0.0, math.log2(M) + math.log2(p))
            top = c.most_common(2)
            hits += top[0][0] == v and (len(top) == 1 or top[1][1] < top[0][1])
            count += 1
    return bits / (len(ds.split(split)) / ds.rows_per_person), hits / count


def test_name_blind_record_completion_matches_the_naive_oracle_and_reads_most_of_the_ceiling(
        tmp_path):
    cfg = resolve_config("tiny", overrides={"exposure": 1, "n_people": 96, "n_unseen_people": 16,
                                            "attributes": "a:48,b:48,c:24:1,d:48"})
    ds = _make(tmp_path, cfg, "records")
    blind = NameBlind(ds)
    for split in SPLITS:
        got = blind.reading(split, slots="record")
        bits, exact = _naive_record_completion(ds, split)
        assert got["bits_per_person"] == pytest.approx(bits, rel=1e-9)
        if split != "eval_unseen_people":
            assert got["exact_match"] >= exact   # greedy also wins some ties
            # two people a value: one shown value narrows the record to two
            assert got["bits_per_person"] > 0.8 * got["ceiling_bits"]
        else:
            assert got["bits_per_person"] < 0.1 * got["ceiling_bits"]
        assert blind.reading(split)["bits_per_person"] <= 0.5


def test_floor_of_a_leaky_config_matches_the_naive_per_fact_sum(tmp_path):
    # 64 people drawing independently from 4096 values: the values used form a table
    cfg = resolve_config("tiny", overrides={"exposure": 1, "n_people": 64, "n_unseen_people": 32,
                                            "balanced_values": False,
                                            "attributes": "a:4096,b:4096,c:512:3"})
    ds = _make(tmp_path, cfg, "leaky")
    for split in SPLITS:
        got = person_agnostic(ds, split)["bits_per_person"]
        assert got == pytest.approx(_naive_floor(ds, split), rel=1e-9)
    # one asked fact per person (3 attributes): about log2(4096 / 64) = 6 bits for an attribute
    # of 4096 values, 3 for the 512
    assert person_agnostic(ds, "eval_reordered")["bits_per_person"] > 4
    assert person_agnostic(ds, "eval_unseen_people")["bits_per_person"] < 1.5


def test_balanced_values_use_every_value_equally_and_ignore_shard_boundaries():
    cfg = resolve_config("tiny", overrides={"exposure": 1, "n_people": 1000, "attributes": "a:256,b:300,c:7"})
    whole = balanced_values(cfg, 0, 1000)
    pieces = np.concatenate([balanced_values(cfg, lo, min(lo + 97, 1000))
                             for lo in range(0, 1000, 97)])
    np.testing.assert_array_equal(whole, pieces)
    for a, attr in enumerate(cfg.attributes):
        counts = np.bincount(whole[:, a], minlength=attr.n_values)
        assert counts.max() - counts.min() <= 1, attr
        block = whole[:attr.n_values, a]                 # the first block is a permutation
        assert sorted(block) == list(range(attr.n_values))
    # attributes are assigned independently of each other
    assert not np.array_equal(whole[:256, 0], whole[:256, 1] % 256)


def test_generated_training_values_are_balanced(tmp_path):
    ds = _make(tmp_path, tiny(), "tiny")
    floor = person_agnostic(ds, "eval_reordered")
    assert floor["bits_per_person"] == pytest.approx(0.0, abs=1e-9)
    assert floor["unfloored_bits_per_person"] < 1e-6
