"""The brackets of every reading: the person-agnostic floor reads about 0 on every preset's
splits (balanced values), the know-everything oracle reads the ceiling, and on a leaky config
the floor equals a per-fact computation written out naively."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from data_gen import generate
from data_gen.config import paper, resolve_config, small, tiny
from data_gen.generate import balanced_values
from depthbench.data import Dataset
from depthbench.reference import know_everything, person_agnostic

SPLITS = ("eval_reordered", "eval_seen_order", "eval_unseen_people")


def _make(tmp_path, cfg, name):
    generate(cfg, tmp_path / name)
    return Dataset(tmp_path / name)


@pytest.mark.parametrize("preset", [
    "tiny", "small",
    # the paper preset at 131,072 people (2 per value) instead of 2^20: the same value sets
    pytest.param("paper", marks=pytest.mark.slow),
])
def test_floor_is_near_zero_and_oracle_reads_ceiling_on_every_preset(tmp_path, preset):
    cfg = {"tiny": tiny, "small": small, "paper": paper}[preset]()
    if preset == "paper":
        cfg = resolve_config("paper", overrides={"n_people": 131072, "n_unseen_people": 2000,
                                                 "text_eval_people": 100})
    assert cfg.balanced_values
    ds = _make(tmp_path, cfg, preset)
    for split in SPLITS:
        floor = person_agnostic(ds, split)
        assert floor["bits_per_person"] <= 0.5, (split, floor["bits_per_person"])
        assert floor["exact_match"] < 0.05
        oracle = know_everything(ds, split)
        if split == "eval_unseen_people":
            assert oracle["bits_per_person"] == 0.0 and oracle["exact_match"] == 0.0
        else:
            assert oracle["bits_per_person"] == pytest.approx(ds.ceiling_bits)
            assert oracle["exact_match"] == 1.0


def _naive_floor(ds: Dataset, split: str) -> float:
    """Per fact, in plain Python: the training frequency of the value, mixed with uniform."""
    def facts(name):
        s = ds.split(name)
        out = []
        for row, order in zip(np.asarray(s.tokens), np.asarray(s.order)):
            pos = 1 + ds.name_tokens
            for a in order:
                L = int(ds.value_tokens[a])
                out.append((int(a), tuple(int(t) for t in row[pos + 1:pos + 1 + L])))
                pos += 1 + L
        return out
    train = facts("train")
    count = Counter(train)
    per_attr = Counter(a for a, _ in train)
    total = 0.0
    for a, v in facts(split):
        n, M = per_attr[a], int(ds.n_values[a])
        eps = 1 / (n + 1)
        p = (1 - eps) * count[(a, v)] / n + eps / M
        total += max(0.0, math.log2(M) + math.log2(p))
    return total / len(ds.split(split))


def test_floor_of_a_leaky_config_matches_the_naive_per_fact_sum(tmp_path):
    # 64 people drawing independently from 4096 values: the values used form a table
    cfg = resolve_config("tiny", overrides={"n_people": 64, "n_unseen_people": 32,
                                            "balanced_values": False,
                                            "attributes": "a:4096,b:4096,c:512:3"})
    ds = _make(tmp_path, cfg, "leaky")
    for split in SPLITS:
        got = person_agnostic(ds, split)["bits_per_person"]
        assert got == pytest.approx(_naive_floor(ds, split), rel=1e-9)
    # about log2(4096 / 64) = 6 bits per attribute of 4096 values, 3 for the 512
    assert person_agnostic(ds, "eval_reordered")["bits_per_person"] > 12
    assert person_agnostic(ds, "eval_unseen_people")["bits_per_person"] < 1.5


def test_balanced_values_use_every_value_equally_and_ignore_shard_boundaries():
    cfg = resolve_config("tiny", overrides={"n_people": 1000, "attributes": "a:256,b:300,c:7"})
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
