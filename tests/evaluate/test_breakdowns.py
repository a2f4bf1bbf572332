"""Where a reading's nats and facts lie, against oracles written out naively: the row NLL by
token type (each position's type read off the row in Python, the parts summing to the row's
total), the asked fact per exposure tier (each tier read alone on its own rows), and the
structural shortcut (every fact's prediction counted by hand)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from depthbench.config import ModelConfig
from depthbench.data.generate import generate
from depthbench.data.synthetic import Dataset
from depthbench.data_gen import Attribute, GenConfig
from depthbench.evaluate.metrics import TOKEN_TYPES, EvalSums, FactIndex
from depthbench.evaluate.reference import NameBlind, StructureBlind, structure_blind
from depthbench.evaluate.sweep import row_token_types, sweep
from depthbench.models.looped import LoopedTransformer

SPLITS = ("eval_reordered", "eval_seen_order", "eval_unseen_people")


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """Three tiers of 16 people (1, 3 and 9 times as often), two-token values of one attribute."""
    attrs = (Attribute(name="a", n_values=16, value_tokens=1),
             Attribute(name="b", n_values=16, value_tokens=2),
             Attribute(name="c", n_values=16, value_tokens=1),
             Attribute(name="d", n_values=16, value_tokens=1))
    cfg = GenConfig(n_people=48, n_unseen_people=8, name_pool=8, value_pool=16,
                    orders_per_person=3, seed=3, attributes=attrs, exposure=(1, 3, 9))
    d = tmp_path_factory.mktemp("tiered") / "ds"
    generate(cfg, d)
    return Dataset(d)


def _model(ds: Dataset) -> LoopedTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(ds.vocab), d_model=32, n_heads=2, max_seq_len=ds.seq_len)
    return LoopedTransformer(cfg).eval()


def _naive_types(ds: Dataset, row_order) -> list[str]:
    """The type of each predicted token (positions 1..T-1) of one row, walked in Python."""
    types = ["name"] * ds.name_tokens
    for slot, a in enumerate(row_order):
        later = "later" if slot else "asked"
        types.append(f"{later}_key" + ("s" if slot else ""))
        types += [f"{later}_value" + ("s" if slot else "")] * int(ds.value_tokens[a])
    return types + ["end"] * (ds.seq_len - 1 - len(types))


def test_token_types_match_the_row_walked_by_hand(tiered):
    s = tiered.split("eval_reordered")
    order = np.asarray(s.order, dtype=np.int64)
    got = row_token_types(tiered, order)
    for i in range(len(order)):
        assert [TOKEN_TYPES[t] for t in got[i]] == _naive_types(tiered, order[i]), i


def test_row_nll_by_type_sums_to_the_row_and_its_asked_value_is_value_nll(tiered):
    model = _model(tiered)
    for split in SPLITS:
        r = sweep(model, tiered, split, [2], batch_size=7)[2].result(tiered.attributes)
        parts = [r[f"row_nll/{t}"] for t in TOKEN_TYPES]
        assert sum(parts) == pytest.approx(r["nll"] * (tiered.seq_len - 1), rel=1e-9)
        assert r["row_nll/asked_value"] == pytest.approx(r["value_nll"], rel=1e-6)  # float32 sums
        assert all(p > 0 for p in parts)


def _tier_alone(model, ds: Dataset, split: str, tier: int) -> dict:
    """The asked fact on one tier's rows only, summed without tiers (the naive reading)."""
    s = ds.split(split)
    keep = np.flatnonzero(ds.tier_of(s.person) == tier)
    sums = EvalSums(ds.n_values, ds.rows_per_person)
    tokens = torch.as_tensor(np.asarray(s.tokens, dtype=np.int64)[keep])
    order = np.asarray(s.order, dtype=np.int64)[keep]
    with torch.no_grad():
        sums.add(model(tokens[:, :-1], n_loops=2), tokens[:, 1:],
                 FactIndex(*ds.asked(order), ds.value_tokens))
    return sums.result(ds.attributes)


def test_each_tier_reads_as_its_rows_alone(tiered):
    model = _model(tiered)
    assert tiered.tiers == (1, 3, 9)
    for split in ("eval_reordered", "eval_seen_order"):
        r = sweep(model, tiered, split, [2], batch_size=5)[2].result(tiered.attributes)
        for t, e in enumerate(tiered.tiers):
            alone = _tier_alone(model, tiered, split, t)
            for k in ("exact_match", "value_nll", "bits_per_person"):
                assert r[f"{k}@x{e}"] == pytest.approx(alone[k], rel=1e-9), (split, e, k)
    ctrl = sweep(model, tiered, "eval_unseen_people", [2])[2].result(tiered.attributes)
    assert all(math.isnan(ctrl[f"exact_match@x{e}"]) for e in tiered.tiers)   # no tier's people


def test_eval_sums_cross_ranks_whole(tiered):
    """flat/load_flat (the all-reduce's payload) carry the types and tiers too."""
    model = _model(tiered)
    a = sweep(model, tiered, "eval_reordered", [1])[1]
    b = EvalSums(tiered.n_values, tiered.rows_per_person, tiered.tiers).load_flat(a.flat())
    b.typed = a.typed
    assert b.result(tiered.attributes) == pytest.approx(a.result(tiered.attributes), nan_ok=True)


def _naive_structure(ds: Dataset, split: str) -> tuple[float, float]:
    """The structural shortcut counted fact by fact: the asked attribute's values among the
    training records of each kind (the attribute opens one of the person's training orders, or
    never does), weighted by the split's share of that kind."""
    tr = ds.split("train")
    opens = {(int(p), int(o[0])) for p, o in zip(np.asarray(tr.person), np.asarray(tr.order))}
    value = {}
    for p, row, o in zip(np.asarray(tr.person), np.asarray(tr.tokens), np.asarray(tr.order)):
        key = ds.key_positions(o[None])[0]
        for slot, a in enumerate(o):
            value[int(p), int(a)] = tuple(row[key[slot] + 1:key[slot] + 1 + ds.value_tokens[a]])
    s, P = ds.split(split), ds.config.n_people
    bits = hits = 0.0
    asked = [(int(p), int(o[0]), tuple(r[1 + ds.name_tokens + 1:][:ds.value_tokens[o[0]]]))
             for p, o, r in zip(np.asarray(s.person), np.asarray(s.order), np.asarray(s.tokens))]
    for a in range(len(ds.attributes)):
        facts = [(p, v) for p, aa, v in asked if aa == a]
        kinds = Counter((p, a) in opens if p < P else None for p, _ in facts)
        mass = Counter()
        for kind, n in kinds.items():
            members = [q for q in range(P) if kind is None or ((q, a) in opens) == kind] or range(P)
            for q in members:
                mass[value[q, a]] += n / len(facts) / len(members)
        eps, M = 1 / (P + 1), int(ds.n_values[a])
        best = max(mass.values())
        top = min(v for v, m in mass.items() if m == best)   # greedy: ties to the smaller id
        for _, v in facts:
            bits += max(0.0, math.log2(M) + math.log2((1 - eps) * mass[v] + eps / M))
            hits += v == top
    return bits / (len(s) / ds.rows_per_person), hits / len(s)


def test_structural_shortcut_matches_the_naive_count(tiered):
    for split in SPLITS:
        got = structure_blind(tiered, split)
        bits, exact = _naive_structure(tiered, split)
        assert got["bits_per_person"] == pytest.approx(bits, rel=1e-9), split
        if split == "eval_unseen_people":        # no record of theirs: it reads the floor
            assert got["bits_per_person"] <= 0.05


def test_structural_shortcut_reads_above_the_name_blind_one_where_the_split_selects_a_kind(
        tiered):
    """The held-out split asks only attributes that never open an order: the shortcut knows
    that much and reads more than the name-blind completer, which cannot."""
    blind, shortcut = NameBlind(tiered), StructureBlind(tiered)
    for split in ("eval_reordered", "eval_seen_order"):
        assert shortcut.reading(split)["bits_per_person"] > blind.reading(split)["bits_per_person"]
    with pytest.raises(ValueError, match="name-only"):
        shortcut.reading("eval_reordered", slots="record")
