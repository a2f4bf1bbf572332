"""Invariants of the generated dataset, over several seeds and small configs."""

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthbench.data.generate import generate
from depthbench.data.synthetic import Dataset, DatasetError, TrainBatches
from depthbench.data_gen import Attribute, GenConfig
from depthbench.data_gen.generate import NamePermutation


def small_config(seed=0, **kw):
    base = dict(n_people=40, n_unseen_people=12, name_pool=6, value_pool=20, orders_per_person=3,
                shard_people=16, seed=seed,
                attributes=(Attribute(name="city", n_values=20, value_tokens=2),
                            Attribute(name="job", n_values=7, value_tokens=1),
                            Attribute(name="pet", n_values=30, value_tokens=3)))
    base.update(kw)
    return GenConfig(**base)


def people_facts(ds, split):
    """{person: {attribute: value token tuple}} read back from a split's token rows."""
    s = ds.split(split)
    keys = ds.key_positions(np.asarray(s.order))
    out = {}
    for row, person, order, kpos in zip(np.asarray(s.tokens), s.person, s.order, keys):
        facts = {}
        for a, k in zip(order, kpos):
            assert row[k] == ds.vocab.index[f"[{ds.attributes[a]}]"]
            facts[int(a)] = tuple(row[k + 1:k + 1 + ds.value_tokens[a]])
        name = tuple(row[1:1 + ds.name_tokens])
        out.setdefault(int(person), []).append((name, facts, tuple(order)))
    return out


configs = st.builds(
    lambda seed, n, a, r, tok: small_config(
        seed=seed, n_people=n, orders_per_person=r,
        attributes=tuple(Attribute(name=f"a{i}", n_values=5 + 3 * i, value_tokens=tok[i % 2])
                         for i in range(a))),
    seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), a=st.integers(3, 5),
    r=st.integers(1, 4), tok=st.tuples(st.integers(1, 2), st.integers(1, 3)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=configs)
def test_dataset_invariants(cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds")
    manifest = generate(cfg, out / "d")
    ds = Dataset(out / "d")
    A = cfg.n_attributes
    h = cfg.n_held_out
    assert manifest["ceiling_bits"] == pytest.approx(
        h * sum(math.log2(a.n_values) for a in cfg.attributes) / A)
    train = people_facts(ds, "train")
    reordered = people_facts(ds, "eval_reordered")
    seen = people_facts(ds, "eval_seen_order")
    unseen = people_facts(ds, "eval_unseen_people")
    assert sorted(train) == sorted(reordered) == sorted(seen) == list(range(cfg.n_people))
    assert sorted(unseen) == list(range(cfg.n_people, cfg.n_people + cfg.n_unseen_people))
    assert all(len({o[0] for _, _, o in rows}) == h for rows in unseen.values())

    names = {}
    value_sets = [set() for _ in range(A)]
    for person, rows in train.items():
        assert len(rows) == cfg.orders_per_person
        name, facts, _ = rows[0]
        orders = [o for _, _, o in rows]
        assert len(set(orders)) == len(orders), "training orders are distinct"
        for n2, f2, o in rows:
            assert n2 == name and f2 == facts, "every rendering carries the same facts"
            assert sorted(o) == list(range(A)), "orders are permutations"
        asked = reordered[person]
        assert len(asked) == h and len({o[0] for _, _, o in asked}) == h, "h distinct questions"
        for ename, efacts, eorder in asked:
            assert ename == name and efacts == facts
            assert eorder[0] not in {o[0] for o in orders}, "an asked attribute is never first"
        assert len(seen[person]) == h
        for _, sfacts, sorder in seen[person]:
            assert sorder in orders and sfacts == facts, "the control asks a seen position"
        if cfg.orders_per_person >= h and A - h >= h:
            assert len({o[0] for _, _, o in seen[person]}) == h
        names[name] = person
        for a, v in facts.items():
            value_sets[a].add(v)
    assert len(names) == cfg.n_people, "names are unique"
    assert not {rows[0][0] for rows in unseen.values()} & set(names), "unseen names are new"
    for a, vs in enumerate(value_sets):
        assert len(vs) <= cfg.attributes[a].n_values
    for split in ("train", "eval_reordered", "eval_seen_order", "eval_unseen_people"):
        assert int(np.asarray(ds.split(split).tokens).max()) < len(ds.vocab)


def test_values_come_from_a_fixed_set_of_distinct_sequences(tmp_path):
    cfg = small_config(n_people=300, n_unseen_people=0, name_pool=10)
    generate(cfg, tmp_path / "d")
    ds = Dataset(tmp_path / "d")
    facts = people_facts(ds, "eval_reordered")
    for a, attr in enumerate(cfg.attributes):
        vals = {f[a] for rows in facts.values() for _, f, _ in rows}
        # 300 draws from n_values: every value appears, and never more than n_values of them
        assert len(vals) == attr.n_values


def test_text_form_round_trips_through_the_vocab(tmp_path):
    cfg = small_config()
    generate(cfg, tmp_path / "d")
    ds = Dataset(tmp_path / "d")
    toks = np.asarray(ds.split("eval_reordered").tokens)
    lines = (tmp_path / "d" / "eval_reordered.jsonl").read_text().splitlines()
    assert len(lines) == cfg.n_people * cfg.n_held_out == len(toks)
    for i, line in enumerate(lines):
        rec = json.loads(line)
        row = toks[i]
        ids = ds.vocab.encode(rec["prompt"] + " " + rec["target"])
        assert ids == list(row[1:1 + len(ids)]), "prompt + target is a prefix of the row"
        assert len(rec["prompt"].split()) == cfg.name_tokens + 1, "the name, then the key"
        assert ds.vocab.decode(ds.vocab.encode(rec["prompt"])) == rec["prompt"]
        assert rec["prompt"].split()[-1] == f"[{rec['attribute']}]"
        assert rec["split"] == "eval_reordered"


def test_same_seed_same_bytes_other_seed_other_data(tmp_path):
    cfg = small_config(seed=7)
    m1 = generate(cfg, tmp_path / "a")
    m2 = generate(cfg, tmp_path / "b")
    m3 = generate(small_config(seed=8), tmp_path / "c")
    assert m1["files"] == m2["files"] and m1["dataset_hash"] == m2["dataset_hash"]
    for f in m1["files"]:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert m3["files"]["train_tokens.npy"] != m1["files"]["train_tokens.npy"]


def test_name_permutation_is_a_bijection():
    for n in (1, 2, 5, 64, 1000, 4097):
        perm = NamePermutation(n, seed=3)
        out = perm(np.arange(n))
        assert sorted(out.tolist()) == list(range(n))


def test_corrupt_or_missing_files_are_detected(tmp_path):
    generate(small_config(), tmp_path / "d")
    d = tmp_path / "d"
    Dataset(d)
    f = d / "train_tokens.npy"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 1
    f.write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match="train_tokens.npy.*sha256"):
        Dataset(d)
    f.write_bytes(bytes(raw[:-5]))
    with pytest.raises(DatasetError, match="train_tokens.npy.*truncated"):
        Dataset(d)
    f.unlink()
    with pytest.raises(DatasetError, match="train_tokens.npy is missing"):
        Dataset(d)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(DatasetError, match="manifest.json: not valid JSON"):
        Dataset(d)
    with pytest.raises(DatasetError, match="does not exist"):
        Dataset(tmp_path / "nowhere")


def test_train_batches_cover_every_row_each_epoch_and_split_across_ranks(tmp_path):
    generate(small_config(), tmp_path / "d")
    split = Dataset(tmp_path / "d").split("train")
    N = len(split)  # 120 rows
    one = TrainBatches(split, batch_size=8, seed=5)
    rows = np.concatenate([one.batch(s) for s in range(N // 8)])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, np.asarray(split.tokens).tolist()))
    two = [TrainBatches(split, batch_size=8, seed=5, rank=r, world=2) for r in range(2)]
    for s in (0, 3, 20):
        np.testing.assert_array_equal(np.concatenate([t.batch(s) for t in two]), one.batch(s))
    assert not np.array_equal(TrainBatches(split, 8, seed=6).batch(0), one.batch(0))


# ---- exposure: some people seen more often than others ------------------------------------------
def _exposed(seed=0, exposure=(1, 3, 9), M=8):
    attrs = tuple(Attribute(name=n, n_values=M, value_tokens=1) for n in ("a", "b", "c", "d"))
    return GenConfig(n_people=3 * M * 2, n_unseen_people=4, name_pool=8,
                     value_pool=16, orders_per_person=3, shard_people=7, seed=seed,
                     attributes=attrs, exposure=exposure)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exposure_repeats_each_persons_orders_and_keeps_values_uniform(tmp_path, seed):
    cfg = _exposed(seed)
    generate(cfg, tmp_path / "d")
    ds = Dataset(tmp_path / "d")
    tr = ds.split("train")
    person, order = np.asarray(tr.person), np.asarray(tr.order)
    assert len(person) == cfg.train_rows
    for p in range(cfg.n_people):
        mine = order[person == p]
        want = cfg.exposure[(p // 8) % 3]
        assert len(mine) == 3 * want                          # r orders, each `want` times
        orders, counts = np.unique(mine, axis=0, return_counts=True)
        assert len(orders) == 3 and set(counts) == {want}
    # every value of every attribute is written equally often in training: the floor stays 0
    vals = np.take_along_axis(np.asarray(tr.tokens), ds.key_positions(order) + 1, axis=1)
    for a in range(order.shape[1]):
        col = vals[order == a]
        _, c = np.unique(col, return_counts=True)
        assert len(set(c)) == 1, (a, c)
    from depthbench.evaluate.reference import name_blind, person_agnostic
    for split in ("eval_reordered", "eval_seen_order"):
        assert person_agnostic(ds, split)["bits_per_person"] <= 0.5
        assert name_blind(ds, split)["bits_per_person"] <= 0.5
    # the evaluation splits do not depend on exposure: the same questions as without it
    flat = tmp_path / "flat"
    generate(_exposed(seed, exposure=(1,)), flat)
    for split in ("eval_reordered", "eval_seen_order", "eval_unseen_people"):
        a, b = Dataset(tmp_path / "d").split(split), Dataset(flat).split(split)
        assert np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens)), split


def test_a_default_exposure_leaves_the_manifest_as_before_and_bad_ones_are_refused(tmp_path):
    m = generate(small_config(), tmp_path / "d")
    assert "exposure" not in m["config"]                     # earlier datasets' hashes unchanged
    with pytest.raises(ValueError, match="multiple of 2"):
        small_config(exposure=(1, 2), orders_per_person=1,
                     attributes=(Attribute(name="x", n_values=7), Attribute(name="y", n_values=7)))
    with pytest.raises(ValueError, match="one value count"):
        small_config(exposure=(1, 2))
    for bad in ("0,2", "x", (), (1, 2.5)):
        with pytest.raises(ValueError, match="exposure"):
            small_config(exposure=bad)
    assert _exposed(exposure="1,3,9").exposure == (1, 3, 9)
    # one tier is every person alike: no block condition, and each order written that often
    two = small_config(exposure=(2, 2))
    assert two.exposure == (2,) and two.train_rows == 2 * two.n_people * two.orders_per_person


@pytest.mark.parametrize("shape,A,forced", [((7,), 2, False), ((300,), 6, False), ((50, 4), 8, True),
                                            ((9, 3), 13, True), ((0,), 5, True)])
def test_packed_order_draws_are_the_stable_argsort_of_the_same_doubles(shape, A, forced):
    """The generator's order draws against the plain definition: a stable argsort of
    ``rng.random`` keys, the forced first attribute's key set to -1; the generator is left in
    the same state."""
    from depthbench.data_gen.generate import random_orders
    first = np.random.default_rng(1).integers(0, A, shape) if forced else None
    plain_rng, packed_rng = np.random.default_rng(11), np.random.default_rng(11)
    keys = plain_rng.random(shape + (A,))
    if forced:
        np.put_along_axis(keys, first[..., None], -1.0, axis=-1)
    want = np.argsort(keys, axis=-1, kind="stable")
    got = random_orders(packed_rng, shape, A, first)
    assert got.shape == want.shape and (got == want).all()
    assert plain_rng.random(3).tolist() == packed_rng.random(3).tolist()


def test_the_tiered_task_is_the_dataset_the_committed_table3_rows_were_trained_on(tmp_path):
    """Generation is byte-stable: the packaged grids' tiered task hashes to the dataset hash
    recorded in table3's committed run rows."""
    import csv
    from pathlib import Path

    from depthbench.data_gen import resolve_config
    rows = Path(__file__).resolve().parents[2] / "reports" / "table3" / "rows" / "run.csv"
    with rows.open() as f:
        recorded = {r["dataset_hash"] for r in csv.DictReader(f)}
    cfg = resolve_config("tiny", overrides={
        "n_people": 256, "exposure": "1,8,64,512",
        "attributes": "birth_city:64,employer:64,university:64,major:64,birth_date:64,work_city:64"})
    assert recorded == {generate(cfg, tmp_path / "d")["dataset_hash"]}


@given(st.lists(st.from_regex(r"[a-z][a-z0-9_]*(:[0-9]+(-[0-9]+)?)?", fullmatch=True),
                min_size=1, max_size=5), st.sampled_from([", ", ",", " , "]))
def test_a_set_list_of_bare_words_reads_as_the_quoted_list(words, sep):
    """``--set key=[a, b]`` (a shell strips the quotes of ``["a", "b"]``) is the list the
    JSON spelling gives; JSON, numbers and a broken list read as before."""
    from depthbench.data_gen.config import parse_value
    words = [w for w in words if w not in ("true", "false", "null")] or ["x"]
    assert parse_value("[" + sep.join(words) + "]") == json.loads(json.dumps(words))
    assert parse_value('["a", 2]') == ["a", 2] and parse_value("[1, 2]") == [1, 2]
    assert parse_value("[1,") == "[1," and parse_value("[a,,b]") == "[a,,b]"
    assert parse_value("3") == 3 and parse_value("fixed:2") == "fixed:2"
