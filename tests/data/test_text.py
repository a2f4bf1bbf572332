"""The natural-text half: prepare-text (determinism, round trip, bytes), training windows, and
the per-depth NLL and bits per byte of a text run against a per-depth forward."""

import gzip
import json
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from depthbench.cli.main import main
from depthbench.config import ModelConfig
from depthbench.data.corpus import documents, prepare_text
from depthbench.data.text import TextBatches, TextDataset
from depthbench.evaluate.text import text_sweep
from depthbench.models.looped import LoopedTransformer

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
         "matches near old river banks and every curious child reads long stories about "
         "distant mountains").split()


def corpus(tmp_path, n_docs=300, seed=0):
    """A small corpus in every input form: a directory of a .txt (blank-line documents), a
    .jsonl and a .jsonl.gz; returns the directory and the documents in reading order."""
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 60)))) + " é ok."
            for _ in range(n_docs)]
    d = tmp_path / "corpus"
    d.mkdir()
    a, b, c = docs[:100], docs[100:200], docs[200:]
    (d / "a.txt").write_text("\n\n".join(x.replace(" over ", " over\n") for x in a) + "\n")
    (d / "b.jsonl").write_text("".join(json.dumps({"text": x}) + "\n" for x in b))
    with gzip.open(d / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": x}) + "\n" for x in c)
    docs = [x.replace(" over ", " over\n") for x in a] + b + c
    return d, docs


def test_documents_are_read_in_order_from_every_form(tmp_path):
    d, docs = corpus(tmp_path)
    assert list(documents([str(d)])) == docs


@pytest.mark.slow
def test_prepare_text_is_deterministic_and_round_trips(tmp_path):
    d, docs = corpus(tmp_path)
    m1 = prepare_text([str(d)], tmp_path / "a", vocab_size=300, val_fraction=0.1, seq_len=16)
    m2 = prepare_text([str(d)], tmp_path / "b", vocab_size=300, val_fraction=0.1, seq_len=16)
    assert m1 == m2
    for f in ("train.bin", "validation.bin", "tokenizer.json", "cloze.jsonl", "manifest.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    ds = TextDataset(tmp_path / "a")
    tok = ds.tokenizer()
    split_docs = {}
    for s in ("train", "validation"):   # decode each split at its end-of-text tokens
        ids = np.asarray(ds.tokens[s]).tolist()
        assert ids[-1] == ds.vocab.eos
        cut = [i for i, t in enumerate(ids) if t == ds.vocab.eos]
        starts = [0] + [i + 1 for i in cut[:-1]]
        split_docs[s] = [tok.decode(ids[a:b]) for a, b in zip(starts, cut)]
        assert m1["splits"][s]["documents"] == len(split_docs[s])
        # bytes: the split's UTF-8 bytes, and the sum of its tokens' bytes
        assert m1["splits"][s]["bytes"] == sum(len(x.encode()) for x in split_docs[s])
        assert int(ds.token_bytes()[np.asarray(ds.tokens[s])].sum()) == m1["splits"][s]["bytes"]
    # every document lands in exactly one split, in corpus order within it
    assert sorted(split_docs["train"] + split_docs["validation"]) == sorted(docs)
    assert split_docs["train"] == [x for x in docs if x in set(split_docs["train"])]
    assert 0 < len(split_docs["validation"]) < len(docs) // 4
    cloze = [json.loads(x) for x in (tmp_path / "a" / "cloze.jsonl").read_text().splitlines()]
    assert cloze and all(len(c["choices"]) == 4 and 0 <= c["label"] < 4 for c in cloze)


@pytest.mark.slow
def test_a_given_tokenizer_is_used_as_is(tmp_path):
    d, _ = corpus(tmp_path)
    prepare_text([str(d)], tmp_path / "a", vocab_size=300, val_fraction=0.1, seq_len=16)
    m = prepare_text([str(d)], tmp_path / "b", tokenizer=str(tmp_path / "a" / "tokenizer.json"),
                     val_fraction=0.1, seq_len=16)
    assert (tmp_path / "a" / "train.bin").read_bytes() == (tmp_path / "b" / "train.bin").read_bytes()
    assert m["tokenizer_sha256"] == TextDataset(tmp_path / "a").manifest["tokenizer_sha256"]


def test_training_windows_are_seeded_and_split_across_ranks(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16)
    one = TextBatches(tokens, 17, 8, seed=3)
    b = one.batch(5)
    assert b.shape == (8, 17) and np.array_equal(b, one.batch(5))
    assert (np.diff(b, axis=1) == 1).all()   # windows of consecutive tokens
    ranks = [TextBatches(tokens, 17, 8, seed=3, rank=r, world=2).batch(5) for r in (0, 1)]
    assert np.array_equal(np.concatenate(ranks), b)
    assert not np.array_equal(one.batch(6), b)


@pytest.mark.slow
def test_text_sweep_matches_a_forward_per_depth(tmp_path):
    d, _ = corpus(tmp_path)
    prepare_text([str(d)], tmp_path / "ds", vocab_size=300, val_fraction=0.2, seq_len=16)
    ds = TextDataset(tmp_path / "ds")
    torch.manual_seed(0)
    model = LoopedTransformer(ModelConfig(vocab_size=len(ds.vocab), d_model=32, n_heads=4,
                                          n_prelude=1, n_core=1, n_coda=1, max_seq_len=32)).eval()
    res = text_sweep(model, ds, [1, 3], batch_size=5)
    from depthbench.evaluate.text import eval_windows
    w = torch.as_tensor(eval_windows(ds.tokens["validation"], ds.seq_len))
    nbytes = ds.token_bytes()[w[:, 1:].numpy()].sum()
    for k in (1, 3):
        with torch.no_grad():
            logits = model(w[:, :-1], n_loops=k)
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                w[:, 1:].reshape(-1), reduction="sum").item()
        assert res[k]["nll"] == pytest.approx(nll / w[:, 1:].numel(), rel=1e-5)
        assert res[k]["bits_per_byte"] == pytest.approx(nll / math.log(2) / nbytes, rel=1e-5)


@pytest.mark.slow
def test_train_and_eval_a_text_run_through_the_cli(tmp_path):
    d, _ = corpus(tmp_path)
    r = CliRunner().invoke(main, ["prepare-text", str(d), "--out", str(tmp_path / "ds"),
                                  "--vocab-size", "300", "--val-fraction", "0.2", "--seq-len", "16"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["train", "--data", str(tmp_path / "ds"), "--out",
                                  str(tmp_path / "run"), "--preset", "tiny", "--steps", "6",
                                  "--schedule", "uniform:1-4", "--set", "batch_size=4"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["eval", str(tmp_path / "run"), "--depths", "1-4", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in
            (tmp_path / "run" / "eval" / "step_0000006.jsonl").read_text().splitlines()]
    assert [x["depth"] for x in rows] == [1, 2, 3, 4]
    assert all(x["split"] == "validation" and x["bits_per_byte"] > 0 and x["kind"] == "eval"
               for x in rows)
    # a text run on a synthetic dataset, and a synthetic split asked of a text run
    r = CliRunner().invoke(main, ["generate", "--out", str(tmp_path / "syn")])
    r = CliRunner().invoke(main, ["eval", str(tmp_path / "run"), "--data", str(tmp_path / "syn")])
    assert r.exit_code == 2 and "trained on dataset" in r.output
    r = CliRunner().invoke(main, ["eval", str(tmp_path / "run"), "--split", "eval_reordered"])
    assert r.exit_code == 2 and "validation" in r.output


@pytest.mark.slow
def test_a_run_on_a_dataset_of_another_tokenizer_or_kind_exits_2(tmp_path):
    """A text run evaluated on a text dataset of another vocabulary, and a synthetic run on a
    text dataset: one line, exit 2, nothing written."""
    run, _ = _text_run(tmp_path)
    (tmp_path / "other").mkdir()
    d, _ = corpus(tmp_path / "other")
    prepare_text([str(d)], tmp_path / "ds512", vocab_size=512, val_fraction=0.2, seq_len=16)
    r = CliRunner().invoke(main, ["generate", "--out", str(tmp_path / "syn")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["train", "--data", str(tmp_path / "syn"), "--out",
                                  str(tmp_path / "synrun"), "--steps", "2", "--set",
                                  "batch_size=4"])
    assert r.exit_code == 0, r.output
    for args in ([str(run), "--data", str(tmp_path / "ds512")],
                 [str(tmp_path / "synrun"), "--data", str(tmp_path / "ds")],
                 [str(run), "--data", str(tmp_path / "ds512"), "--harness", "lm-eval",
                  "--task", "depthbench_cloze"]):
        r = CliRunner().invoke(main, ["eval", *args, "--out", str(tmp_path / "rows")])
        assert r.exit_code == 2, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
        assert not list(tmp_path.glob("rows*"))


@pytest.mark.parametrize("case", ["binary", "empty", "no-validation", "bad-tokenizer",
                                  "missing", "both", "pipe"])
def test_bad_corpora_exit_2_and_leave_nothing(tmp_path, case):
    d, _ = corpus(tmp_path, n_docs=8)
    args = [str(d), "--vocab-size", "300"]
    if case == "binary":
        (d / "x.txt").write_bytes(bytes(range(256)) * 4)
    elif case == "empty":
        e = tmp_path / "empty"
        e.mkdir()
        (e / "e.txt").write_text("\n\n  \n")
        args = [str(e), "--vocab-size", "300"]
    elif case == "no-validation":
        args += ["--val-fraction", "0.0001"]
    elif case == "bad-tokenizer":
        (tmp_path / "t.json").write_text("{not json")
        args = [str(d), "--tokenizer", str(tmp_path / "t.json")]
    elif case == "missing":
        args = [str(tmp_path / "nope.txt"), "--vocab-size", "300"]
    elif case == "pipe":   # named directly it is refused, not read (it would block)
        os.mkfifo(tmp_path / "pipe.txt")
        args = [str(tmp_path / "pipe.txt"), "--vocab-size", "300"]
    else:
        args += ["--tokenizer", str(tmp_path / "t.json")]
    r = CliRunner().invoke(main, ["prepare-text", *args, "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".db-")]


@pytest.mark.slow
def test_a_text_spec_runs_through_the_pipeline_to_a_report(tmp_path):
    """A corpus spec: prepare-text, training, validation NLL per depth and the text report."""
    d, _ = corpus(tmp_path)
    spec = tmp_path / "t.toml"
    spec.write_text(f'''name = "t"
[data]
corpus = ["{d}"]
vocab_size = 300
val_fraction = 0.2
seq_len = 16
[train]
preset = "tiny"
schedules = ["fixed:2", "uniform:1-4"]
seeds = [0, 1]
steps = 8
set = {{ batch_size = 4 }}
[eval]
depths = "1-4"
switch_checkpoints = []
[probe]
enabled = false
[serve]
enabled = false
[report]
out = "{tmp_path / 'report'}"
''')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "exp")])
    assert r.exit_code == 0, r.output
    rep = tmp_path / "report"
    for f in ("nll_vs_depth.png", "bpb_vs_depth.png", "cloze_vs_depth.png", "cloze_mi_vs_depth.png",
              "findings.md",
              "training_loss.png"):
        assert (rep / f).stat().st_size > 0, f
    text = (rep / "README.md").read_text()
    assert "Validation NLL by serving depth" in text and "validation NLL averaged" in text
    findings = (rep / "findings.md").read_text().splitlines()
    assert len(findings) == 4 and findings[2].startswith("| `fixed:2` | 2 |")
    # the report carries the questions its cloze readings answered, once, in order
    items = pd.read_csv(rep / "rows" / "item.csv")
    want = [json.loads(x) for x in (tmp_path / "exp" / "data" / "cloze.jsonl").read_text().split("\n")
            if x]
    assert len(want) > 0 and items["item"].tolist() == list(range(len(want)))
    assert [json.loads(c) for c in items["choices"]] == [w["choices"] for w in want]
    assert items["label"].tolist() == [w["label"] for w in want]
    assert f"same {len(want)} items (`rows/item.csv`)" in text
    # the spec's probe and serve stages are refused for a corpus
    bad = spec.read_text().replace("[probe]\nenabled = false", "[probe]\nenabled = true")
    spec.write_text(bad)
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "exp2")])
    assert r.exit_code == 2 and "probe.enabled" in r.output


def _text_run(tmp_path):
    d, _ = corpus(tmp_path)
    prepare_text([str(d)], tmp_path / "ds", vocab_size=300, val_fraction=0.2, seq_len=16)
    r = CliRunner().invoke(main, ["train", "--data", str(tmp_path / "ds"), "--out",
                                  str(tmp_path / "run"), "--preset", "tiny", "--steps", "4",
                                  "--schedule", "uniform:1-4", "--set", "batch_size=4"])
    assert r.exit_code == 0, r.output
    return tmp_path / "run", TextDataset(tmp_path / "ds")


@pytest.mark.slow
def test_lm_eval_loglikelihood_equals_the_native_nll_of_a_text_run(tmp_path):
    pytest.importorskip("lm_eval")
    from depthbench.checkpoint import open_run
    from depthbench.evaluate.harness import DepthbenchLM
    from depthbench.evaluate.text import eval_windows
    run, ds = _text_run(tmp_path)
    lm = DepthbenchLM(pretrained=str(run), n_loops=3, batch_size=2)
    assert lm.tok_encode("the quick fox") == ds.tokenizer().encode("the quick fox").ids
    w = eval_windows(ds.tokens["validation"], ds.seq_len, max_windows=3)
    lls = lm._loglikelihood_tokens([(None, [int(x[0])], x[1:].tolist()) for x in w])
    model = open_run(run)[0]
    native = text_sweep(model, ds, [3], max_windows=3)[3]
    assert -sum(ll for ll, _ in lls) / native["tokens"] == pytest.approx(native["nll"], rel=1e-5)


@pytest.mark.slow
def test_a_text_run_through_lm_eval_tasks_at_every_depth(tmp_path):
    pytest.importorskip("lm_eval")
    from depthbench.report import build_report
    run, _ = _text_run(tmp_path)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    items = [{"q": f"the {w} jumps", "options": [" over", " under", " away"], "gold": i % 3}
             for i, w in enumerate(WORDS[:9])]
    (tasks / "mc.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    (tasks / "mc.yaml").write_text(f'''task: mc_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {tasks / "mc.jsonl"}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: "{{{{options}}}}"
doc_to_target: gold
target_delimiter: ""
metric_list:
  - metric: acc
''')
    r = CliRunner().invoke(main, ["eval", str(run), "--harness", "lm-eval", "--depths", "1,2",
                                  "--task", "depthbench_cloze", "--task", "mc_local",
                                  "--task-path", str(tasks), "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert sorted((x["task"], x["depth"]) for x in rows) == [
        ("depthbench_cloze", 1), ("depthbench_cloze", 2), ("mc_local", 1), ("mc_local", 2)]
    assert all(x["kind"] == "task" and 0 <= x["acc"] <= 1 for x in rows)
    # the native cloze scores are lm-eval's acc and acc_mutual_info of the same items
    from depthbench.checkpoint import open_run
    from depthbench.evaluate.text import cloze_accuracy
    model, _, _, ds = open_run(run)
    native = cloze_accuracy(model, ds, [1, 2])
    for x in rows:
        if x["task"] == "depthbench_cloze":
            assert x["acc"] == pytest.approx(native[x["depth"]]["cloze_accuracy"], abs=1e-9)
            assert x["acc_mutual_info"] == pytest.approx(native[x["depth"]]["cloze_accuracy_mi"],
                                                         abs=1e-9)
    # `depthbench lm-eval --depths` writes the same rows as `depthbench eval --harness lm-eval`
    r = CliRunner().invoke(main, ["lm-eval", "run", "--model", "depthbench", "--model_args",
                                  f"pretrained={run}", "--tasks", "depthbench_cloze",
                                  "--depths", "1,2", "--rows", str(tmp_path / "lm")])
    assert r.exit_code == 0, r.output
    again = [json.loads(x) for x in (tmp_path / "lm.jsonl").read_text().splitlines()]
    assert again == [x for x in rows if x["task"] == "depthbench_cloze"]
    assert "depth  2  depthbench_cloze  acc " in r.output
    for bad, says in ((["--model_args", f"pretrained={run},n_loops=2"], "n_loops"),
                      (["--model_args", f"pretrained={run}", "--num_fewshot", "2"], "--num_fewshot"),
                      (["--model_args", f"pretrained={run}", "--depths", "0-2"], "depth"),
                      (["--model_args", f"pretrained={run}", "--limit", "x"], "--limit")):
        args = ["lm-eval", "run", "--tasks", "depthbench_cloze", "--depths", "1", *bad]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, r.output
    build_report([tmp_path / "t.jsonl"], tmp_path / "rep")
    assert (tmp_path / "rep" / "task_accuracy_vs_depth.png").stat().st_size > 0
    assert "Table 4" in (tmp_path / "rep" / "README.md").read_text()
    r = CliRunner().invoke(main, ["eval", str(run), "--harness", "lm-eval", "--task", "nope"])
    assert r.exit_code == 2 and "nope" in r.output


# ---- boundaries: documents by content, readings that cannot mean anything ---------------
def _split_docs(ds: TextDataset) -> dict[str, list[str]]:
    tok, out = ds.tokenizer(), {}
    for s in ("train", "validation"):
        ids = np.asarray(ds.tokens[s]).tolist()
        cut = [i for i, t in enumerate(ids) if t == ds.vocab.eos]
        out[s] = [tok.decode(ids[a:b]) for a, b in zip([0] + [i + 1 for i in cut[:-1]], cut)]
    return out


@pytest.mark.slow
def test_a_document_reached_by_any_route_is_one_document_on_one_side(tmp_path):
    """The same file named twice, a directory and a file inside it, a symlink, a copy under
    another name, a hidden .ipynb_checkpoints copy and a re-wrapped paragraph: each document is
    read once (the rest counted as removed duplicates), so no validation document is also in
    training, and the dataset equals the one prepared from the directory alone."""
    d, docs = corpus(tmp_path)
    alone = prepare_text([str(d)], tmp_path / "alone", vocab_size=300, val_fraction=0.2, seq_len=16)
    hidden = d / ".ipynb_checkpoints"
    hidden.mkdir()
    (hidden / "a-checkpoint.txt").write_bytes((d / "a.txt").read_bytes())
    other = tmp_path / "other"
    other.mkdir()
    (other / "copy.jsonl").write_bytes((d / "b.jsonl").read_bytes())
    (other / "link.txt").symlink_to(d / "a.txt")
    (other / "rewrapped.txt").write_text(docs[0].replace(" ", "\n", 3) + "\n")
    m = prepare_text([str(d), str(d / "a.txt"), str(d), str(other / "link.txt"), str(other)],
                     tmp_path / "many", vocab_size=300, val_fraction=0.2, seq_len=16)
    assert m["splits"] == alone["splits"]
    assert m["duplicates_removed"]["documents"] == 101   # copy.jsonl's 100 and the re-wrap
    for f in ("train.bin", "validation.bin"):
        assert (tmp_path / "many" / f).read_bytes() == (tmp_path / "alone" / f).read_bytes()
    split = _split_docs(TextDataset(tmp_path / "many"))
    assert split["validation"] and not set(split["validation"]) & set(split["train"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_duplicates_never_straddle_the_split(tmp_path, seed):
    """Property: a corpus where random documents repeat (in other files, re-spaced) gives
    splits that share no document's text, whatever the seed and fraction."""
    rng = np.random.default_rng(seed)
    base = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 40)))) for _ in range(120)]
    picks = rng.choice(len(base), size=80)
    (tmp_path / "a.txt").write_text("\n\n".join(base) + "\n")
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": "  " + base[i].replace(" ", "  ")})
                                              + "\n" for i in picks))
    prepare_text([str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl")], tmp_path / "ds",
                 vocab_size=300, val_fraction=float(rng.uniform(0.1, 0.5)), seq_len=8, seed=seed)
    split = _split_docs(TextDataset(tmp_path / "ds"))
    norm = {s: {" ".join(x.split()) for x in docs} for s, docs in split.items()}
    assert not norm["train"] & norm["validation"]
    assert len(split["train"]) + len(split["validation"]) == len(set(base))


def _near_copy(doc: str, rng) -> str:
    """A near copy: a word swapped for another, case and end punctuation changed."""
    w = doc.split()
    w[int(rng.integers(len(w)))] = str(rng.choice(WORDS))
    out = " ".join(w)
    return (out.upper() if rng.random() < 0.3 else out) + rng.choice(["!", "?", " ."])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_near_duplicates_are_dropped_so_none_straddles_the_split(tmp_path, seed):
    """Property, against the exact Jaccard similarity of word 5-gram sets (a naive all-pairs
    oracle): planted near copies (J >= 0.85 with their original) are dropped and counted, the
    unrelated documents are all kept, and no validation document has a training document at
    J >= 0.8."""
    from depthbench.data.dedup import jaccard
    rng = np.random.default_rng(seed)
    base = [" ".join(rng.choice(WORDS, size=int(rng.integers(100, 140)))) for _ in range(120)]
    near = []
    for i in rng.choice(len(base), size=60, replace=False):
        c = _near_copy(base[i], rng)
        if jaccard(c, base[i]) >= 0.85:
            near.append(c)
    (tmp_path / "a.txt").write_text("\n\n".join(base) + "\n")
    (tmp_path / "b.txt").write_text("\n\n".join(near) + "\n")
    m = prepare_text([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], tmp_path / "ds",
                     vocab_size=300, val_fraction=0.3, seq_len=8, seed=seed)
    assert len(near) >= 40
    assert m["near_duplicates_removed"]["documents"] == len(near)
    split = _split_docs(TextDataset(tmp_path / "ds"))
    assert len(split["train"]) + len(split["validation"]) == len(base)
    assert all(jaccard(v, t) < 0.8 for v in split["validation"] for t in split["train"])


def _normal_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The test's own reading of a text's word n-grams: lowercase runs of letters and digits."""
    import re
    w = re.findall(r"\w+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


@pytest.mark.parametrize("seed", [0, 1])
def test_a_held_out_document_contained_in_training_is_dropped(tmp_path, seed):
    """Property, against a naive oracle (every validation document's share of word 5-grams
    found in the whole decoded training split): boilerplate documents, each stitched from
    paragraphs of several training documents with one word edited (near no single one, so
    MinHash keeps them), never stay held out at half or more contained; no document is left
    out that the oracle does not find half contained, and the manifest counts what was
    dropped."""
    rng = np.random.default_rng(seed)
    base = [" ".join(rng.choice(WORDS, size=60)) for _ in range(150)]
    stitched = []
    for _ in range(150):
        parts = [base[i].split()[:30] for i in rng.choice(len(base), size=3, replace=False)]
        w = [x for p in parts for x in p]
        w[int(rng.integers(len(w)))] = "EDITED"
        stitched.append(" ".join(w))
    (tmp_path / "a.txt").write_text("\n\n".join(base + stitched) + "\n")
    m = prepare_text([str(tmp_path / "a.txt")], tmp_path / "ds", vocab_size=300,
                     val_fraction=0.3, seq_len=8, seed=seed)
    split = _split_docs(TextDataset(tmp_path / "ds"))
    train = set().union(*(_normal_ngrams(t, 5) for t in split["train"]))
    shares = [len(_normal_ngrams(v, 5) & train) / len(_normal_ngrams(v, 5))
              for v in split["validation"]]
    assert max(shares) < 0.5
    assert m["contained_in_training"]["documents"] >= 10
    kept = {" ".join(x.split()) for x in split["train"] + split["validation"]}
    for d in base + stitched:   # a document left out is one the oracle finds half contained
        g = _normal_ngrams(d, 5)
        assert " ".join(d.split()) in kept or len(g & train) / len(g) >= 0.5
    assert (m["splits"]["train"]["documents"] + m["splits"]["validation"]["documents"]
            + m["contained_in_training"]["documents"]
            + m["near_duplicates_removed"]["documents"]) == 300


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["NFD", "NFKC-ligature", "zero-width", "bom-inside"])
def test_another_unicode_form_of_a_document_is_the_same_document(tmp_path, variant):
    """A copy in decomposed Unicode, with a ligature for its letters, or with invisible format
    characters inside is one document with the original: dropped, never on the other side."""
    import unicodedata
    rng = np.random.default_rng(0)
    accented = ["café", "naïve", "résumé", "fine", "déjà", "office"] + list(WORDS)
    base = [" ".join(rng.choice(accented, size=30)) for _ in range(100)]
    change = {"NFD": lambda d: unicodedata.normalize("NFD", d),
              "NFKC-ligature": lambda d: d.replace("fi", "\ufb01"),
              "zero-width": lambda d: d.replace("e", "e\u200b"),
              "bom-inside": lambda d: d.replace(" ", " \ufeff", 3)}[variant]
    (tmp_path / "a.txt").write_text("\n\n".join(base) + "\n")
    (tmp_path / "b.txt").write_text("\n\n".join(change(d) for d in base) + "\n")
    m = prepare_text([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], tmp_path / "ds",
                     vocab_size=300, val_fraction=0.3, seq_len=8)
    assert m["duplicates_removed"]["documents"] + m["near_duplicates_removed"]["documents"] == 100
    assert m["splits"]["train"]["documents"] + m["splits"]["validation"]["documents"] == 100


def test_minhash_estimates_the_jaccard_similarity():
    """The signature's agreement tracks the exact shingle-set Jaccard (128 values: within 0.15,
    over 4 standard deviations)."""
    from depthbench.data.dedup import jaccard, signature, similarity
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = list(rng.choice(WORDS, size=80))
        b = a[:int(rng.integers(0, 80))] + list(rng.choice(WORDS, size=int(rng.integers(0, 40))))
        x, y = " ".join(a), " ".join(b) or "z"
        assert abs(similarity(signature(x), signature(y)) - jaccard(x, y)) <= 0.15


def test_a_bom_is_not_text_and_a_long_file_without_blank_lines_is_cut(tmp_path, monkeypatch):
    import depthbench.data.corpus as text
    (tmp_path / "bom.txt").write_text("hello world " * 5 + "\n", encoding="utf-8-sig")
    assert list(documents([str(tmp_path / "bom.txt")])) == ["hello world " * 5]
    monkeypatch.setattr(text, "MAX_DOC_CHARS", 100)
    lines = [" ".join(WORDS[i % len(WORDS)] for i in range(j, j + 7)) + "\n" for j in range(200)]
    (tmp_path / "long.txt").write_text("".join(lines))
    got = list(documents([str(tmp_path / "long.txt")]))
    assert len(got) > 10 and all(len(x) <= 100 + len(max(lines, key=len)) for x in got)
    assert " ".join(" ".join(got).split()) == " ".join("".join(lines).split())   # nothing lost
    (tmp_path / "one.txt").write_text("word " * 1000)   # one line, no newline at all
    got = list(documents([str(tmp_path / "one.txt")]))
    assert all(len(x) <= 100 for x in got) and " ".join(got).split() == ["word"] * 1000


def _narrow_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["the quick brown fox"] * 10, trainer=trainers.BpeTrainer(
        vocab_size=60, special_tokens=["<|endoftext|>"], show_progress=False))
    tok.save(str(path))
    return path


@pytest.mark.parametrize("case", ["surrogate", "narrow-tokenizer", "short-validation"])
def test_corpora_that_would_read_wrong_exit_2_and_leave_nothing(tmp_path, case):
    """A lone surrogate in JSONL, a tokenizer that would drop characters, a validation split
    shorter than one window (it would read NLL 0): one line, exit 2, nothing written."""
    d, _ = corpus(tmp_path, n_docs=40)
    args = [str(d), "--vocab-size", "300", "--val-fraction", "0.2"]
    if case == "surrogate":
        (d / "s.jsonl").write_text('{"text": "fine text \\ud800 then more"}\n')
    elif case == "narrow-tokenizer":
        args = [str(d), "--tokenizer", str(_narrow_tokenizer(tmp_path / "t.json"))]
    else:
        args = [str(d), "--vocab-size", "300", "--val-fraction", "0.02", "--seq-len", "4096"]
    r = CliRunner().invoke(main, ["prepare-text", *args, "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit", [
    {"vocab_size": "300"}, {"dtype": "float16"}, {"eot_id": 10 ** 6}, {"seq_len": 16.5},
    {"bytes_per_token": {"train": 99.0, "validation": 99.0}},
    {"splits": {"train": {"documents": 1, "tokens": "many", "bytes": 1},
                "validation": {"documents": 1, "tokens": 1, "bytes": 1}}},
])
@pytest.mark.slow
def test_a_text_manifest_edited_and_rehashed_is_refused_before_use(tmp_path, edit):
    from depthbench.data_gen import dataset_hash
    run, _ = _text_run(tmp_path)
    mpath = tmp_path / "ds" / "manifest.json"
    m = json.loads(mpath.read_text())
    m.update(edit)
    m["dataset_hash"] = dataset_hash(m)
    mpath.write_text(json.dumps(m))
    r = CliRunner().invoke(main, ["eval", str(run), "--out", str(tmp_path / "rows")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "manifest.json" in r.output
    assert not list(tmp_path.glob("rows*"))


@pytest.mark.slow
def test_probe_and_serve_bench_take_a_text_run(tmp_path):
    """The update probe reads a text run's validation windows, the serving benchmark prompts
    from them; both write their rows."""
    run, ds = _text_run(tmp_path)
    r = CliRunner().invoke(main, ["probe-update", str(run), "--step", "4", "--depths-a", "1",
                                  "--depths-b", "3", "--depths", "1-3", "--batches", "2",
                                  "--max-people", "4", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output.strip().splitlines()[-1])["rows"]
    assert [x["depth"] for x in rows] == [1, 2, 3]
    assert all(math.isfinite(x["nll_diff"]) and x["nll_diff"] != 0 for x in rows)
    r = CliRunner().invoke(main, ["serve-bench", str(run), "--requests", "3", "--modes",
                                  "static,cdb", "--max-depth", "3", "--max-new-tokens", "4",
                                  "--out", str(tmp_path / "serve"), "--json"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "serve.jsonl").is_file()


TEXT_SPEC = '''name = "t"
[data]
corpus = {corpus}
vocab_size = 300
val_fraction = 0.2
seq_len = 16
[train]
preset = "tiny"
schedules = ["fixed:2"]
seeds = [0]
steps = 4
set = {{ batch_size = 4 }}
[eval]
depths = "1-2"
switch_checkpoints = []
{eval_extra}
[probe]
enabled = false
[serve]
enabled = false
[report]
out = "{report}"
'''


@pytest.mark.slow
def test_a_corpus_edited_in_place_reruns_the_grid_and_bad_corpus_specs_are_refused_first(tmp_path):
    """The stage key covers the corpus's content: after an edit in place the dataset, the run
    and its rows are redone (a new dataset hash), with no --rerun; an empty corpus list and an
    unknown lm-eval task are refused before any stage."""
    d, _ = corpus(tmp_path)
    spec = tmp_path / "t.toml"
    spec.write_text(TEXT_SPEC.format(corpus=json.dumps([str(d)]), eval_extra="",
                                     report=tmp_path / "report"))
    exp = tmp_path / "exp"

    def hashes():
        return {json.loads(x)["dataset_hash"] for f in (exp / "results" / "eval").glob("*.jsonl")
                for x in f.read_text().splitlines()}
    assert CliRunner().invoke(main, ["run", str(spec), "--out", str(exp)]).exit_code == 0
    first = hashes()
    (d / "b.jsonl").write_text((d / "b.jsonl").read_text().replace("fox", "cat"))
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(exp)])
    assert r.exit_code == 0, r.output
    assert "skip generate" not in r.output and len(hashes()) == 1 and hashes() != first
    for text, needle in ((TEXT_SPEC.format(corpus="[]", eval_extra="", report=tmp_path / "r2"),
                          "corpus is empty"),
                         (TEXT_SPEC.format(corpus=json.dumps([str(d)]),
                                           eval_extra='tasks = ["no_such_task_anywhere"]',
                                           report=tmp_path / "r3"), "no_such_task_anywhere")):
        spec.write_text(text)
        r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "exp2")])
        assert r.exit_code == 2 and needle in r.output, r.output
        assert not (tmp_path / "exp2").exists()


@pytest.mark.slow
def test_the_cloze_holds_no_training_text_and_only_the_context_tells_the_truth(tmp_path):
    """Every item's true choice is its document's own continuation; each distractor is an
    8-word run of another held-out document that shares as many words with the context
    (distinct, and counted with repeats); no item's 24 words, no distractor and no choice read
    after the context shares an 8-word run with a training document, case and punctuation
    aside (oracle: the decoded splits)."""
    d, docs = corpus(tmp_path)
    # training documents that copy the start of some others, so the filter has work to do
    (d / "copies.txt").write_text("\n\n".join("prefix " + " ".join(x.split()[:24]) + " tail"
                                              for x in docs[::7]) + "\n")
    m = prepare_text([str(d)], tmp_path / "ds", vocab_size=300, val_fraction=0.3, seq_len=16)
    ds = TextDataset(tmp_path / "ds")
    items = [json.loads(x) for x in (tmp_path / "ds" / "cloze.jsonl").read_text().splitlines()]
    assert len(items) >= 20 and m["cloze"]["items"] == len(items)
    assert m["cloze"]["left_out_in_training"] > 0
    train_ngrams = set()
    for doc in _split_docs(ds)["train"]:
        w = doc.split()
        train_ngrams |= {tuple(w[i:i + 8]) for i in range(len(w) - 7)}
    train_normal = set().union(*(_normal_ngrams(t, 8) for t in _split_docs(ds)["train"]))
    val = [x.split() for x in _split_docs(ds)["validation"]]
    for it in items:
        ctx, choices = it["context"].split(), [c.split() for c in it["choices"]]
        truth = choices[it["label"]]
        assert len(set(it["choices"])) == 4 and all(len(c) == 8 for c in choices)
        own = [i for i, v in enumerate(val) if v[:24] == ctx + truth]
        assert own
        assert not {tuple((ctx + truth)[i:i + 8]) for i in range(17)} & train_ngrams
        def shared(words, ctx=ctx):   # the test corpus has no case or punctuation but "ok."
            n = [w.rstrip(".") for w in words if w.rstrip(".") in {x.rstrip(".") for x in ctx}]
            return len(set(n)), len(n)
        for k, c in enumerate(choices):
            # read after the context, no choice continues it as a training document does
            assert not _normal_ngrams(" ".join(ctx + c), 8) & train_normal
            assert shared(c) == shared(truth)
            if k != it["label"]:
                assert tuple(c) not in train_ngrams
                assert any(tuple(v[p:p + 8]) == tuple(c) for i, v in enumerate(val)
                           if i not in own for p in range(len(v) - 7))


@pytest.mark.slow
def test_the_cloze_floors_read_chance_and_a_rule_that_can_tell_reads_above(tmp_path):
    """The shortcut floors from the dataset alone: word overlap ties on every item (chance
    exactly); the unigram and bigram rules place the truth at each rank about equally often,
    counted from scores recomputed here (a naive unigram count over the training split), so
    each reads chance within a few items. The scorer itself is checked on items a word rule can
    solve (it reads 1.0) and a tie counts 1/k (a naive expectation over random tie-breaks)."""
    from depthbench.evaluate.text import cloze_items, cloze_rules, rule_accuracy
    d, _ = corpus(tmp_path)
    prepare_text([str(d)], tmp_path / "ds", vocab_size=300, val_fraction=0.3, seq_len=16)
    ds = TextDataset(tmp_path / "ds")
    rules, items = cloze_rules(ds), cloze_items(ds)
    n = len(items)
    assert rules["cloze_overlap_rule"] == 0.25
    tok = ds.tokenizer()
    counts = {}
    for t in ds.tokens["train"].tolist():
        counts[t] = counts.get(t, 0) + 1
    total = len(ds.tokens["train"]) + ds.vocab.size

    def unigram(c):
        return sum(np.log((counts.get(t, 0) + 1) / total) for t in tok.encode(c).ids)
    ranks = [sum(unigram(c) > unigram(it["choices"][it["label"]]) for c in it["choices"])
             for it in items]
    assert max(np.bincount(ranks, minlength=4)) - min(np.bincount(ranks, minlength=4)) <= 3
    assert rules["cloze_unigram_rule"] == pytest.approx(ranks.count(0) / n)
    from depthbench.evaluate.text import RULES
    for rule in RULES:   # the balanced floors (the n-gram references are not balanced)
        assert abs(rules[rule] - 0.25) <= 3 / n, (rule, rules[rule], n)

    def overlap(it, c):
        return len(set(c.split()) & set(it["context"].split()))
    easy = [{"context": "red fox", "choices": [" blue cat", " red fox", " green owl"], "label": 1}]
    assert rule_accuracy(easy, overlap) == 1.0
    tied = [{"context": "x", "choices": [" a", " b", " c", " d"], "label": 2}]
    rng = np.random.default_rng(0)
    naive = np.mean([rng.integers(4) == 2 for _ in range(20000)])
    assert rule_accuracy(tied, overlap) == 0.25 and abs(naive - 0.25) < 0.02


@pytest.mark.slow
def test_the_word_rules_score_as_counted_by_hand(tmp_path):
    """The word rules' scores (``data.cloze.Counts``). Oracle: scores recomputed by hand from
    the counts; items whose true order is the training order read 1.0 under the bigram rule,
    all-unseen orders tie (chance); counting only the bigrams asked about gives the same
    scores for them; on a prepared dataset the rules read the decoded training split."""
    import math

    from depthbench.data.cloze import Counts, needed, overlap
    from depthbench.evaluate.text import cloze_items, cloze_rules, rule_accuracy
    docs = ["a b c d", "a b c d", "d c", "The end."]
    counts = Counts(docs)
    it = {"context": "x a the", "choices": [" b c d", " c b d", " d b c", " b d c"], "label": 0}
    v = 7   # 6 words seen + 1
    by_hand = math.log(1 / (0 + v)) + math.log(3 / (2 + v)) + math.log(3 / (3 + v))
    assert counts.bigram(it, " b c d") == pytest.approx(by_hand)
    it["context"] = "x a"
    assert rule_accuracy([it], counts.bigram) == 1.0
    unseen = {"context": "q", "choices": [" x y", " y x", " x x", " y y"], "label": 1}
    assert rule_accuracy([unseen], counts.bigram) == 0.25
    assert counts.word_unigram(it, " b c") == pytest.approx(   # 12 words; b twice, c 3 times
        math.log(3 / (12 + v)) + math.log(4 / (12 + v)))
    # "The" and "end." normalize to words of the context "the end": shared, IDF log(5/2)
    ctx = {"context": "the end"}
    assert overlap(ctx, " The end. The") == (2, 3)
    assert counts.idf_overlap(ctx, " The end.") == pytest.approx(2 * math.log(5 / 2))
    assert counts.tfidf_cosine(ctx, " end. the") == pytest.approx(1.0)
    part = Counts(docs, bigrams={("b", "c"), ("c", "d"), ("a", "b"), ("x", "a")})
    for c in (" b c d", " a b", " b c"):
        assert part.bigram({"context": "x a"}, c) == counts.bigram({"context": "x a"}, c)
    d, _ = corpus(tmp_path)
    prepare_text([str(d)], tmp_path / "ds", vocab_size=300, val_fraction=0.3, seq_len=16)
    ds = TextDataset(tmp_path / "ds")
    items = cloze_items(ds)
    full = Counts(_split_docs(ds)["train"])
    assert cloze_rules(ds)["cloze_bigram_rule"] == rule_accuracy(items, full.bigram)
    assert cloze_rules(ds)["cloze_tfidf_rule"] == rule_accuracy(items, full.tfidf_cosine)
    assert Counts(_split_docs(ds)["train"], needed(items)).bigram(items[0], items[0]["choices"][1]) \
        == full.bigram(items[0], items[0]["choices"][1])


def test_item_rows_given_by_every_eval_are_read_once_and_conflicting_ones_refused(tmp_path):
    """Every eval of a grid writes its dataset's cloze items: identical rows from many files are
    one set; an item given twice with different text, or items of two datasets, are refused."""
    from depthbench.errors import UserError
    from depthbench.report.load import load_rows
    from depthbench.rows import write_rows
    items = [{"dataset_hash": "h" * 64, "item": i, "context": f"c{i}",
              "choices": json.dumps([" a", " b", " c", " d"]), "label": i % 4} for i in range(3)]
    for name in ("a", "b"):
        write_rows(items, tmp_path / "ok" / name, "item")
    got = load_rows([tmp_path / "ok"])["item"]
    assert got["item"].tolist() == [0, 1, 2] and got["context"].tolist() == ["c0", "c1", "c2"]
    write_rows(items, tmp_path / "bad" / "a", "item")
    write_rows([{**items[0], "label": 3}], tmp_path / "bad" / "b", "item")
    with pytest.raises(UserError, match="is given 2 times"):
        load_rows([tmp_path / "bad"])
    write_rows([{**items[0], "dataset_hash": "g" * 64}], tmp_path / "ok" / "c", "item")
    with pytest.raises(UserError, match="come from 2 datasets"):
        load_rows([tmp_path / "ok"])


@pytest.mark.slow
def test_a_huge_held_out_document_gives_the_cloze_a_bounded_pool(monkeypatch):
    """The distractor pool takes a long document's first runs only: a 200,000-word document
    costs no more than its first RUNS_PER_DOC runs (every distractor comes from there)."""
    from depthbench.data import cloze
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(40)])
    docs = [" ".join(rng.choice(words, 30)) for _ in range(300)]
    huge = " ".join(rng.choice(words, 200_000))
    monkeypatch.setattr(cloze, "POOL_PER_ITEM", 50)
    training = [" ".join(rng.choice(words, 30)) for _ in range(300)]
    items, _ = cloze.build(docs + [huge], 0, lambda t: float(sum(int(x[1:]) for x in t.split())),
                           training)
    head = huge.split()[:cloze.RUNS_PER_DOC + cloze.CONT - 1]
    head_runs = {" " + " ".join(head[p:p + 8]) for p in range(cloze.RUNS_PER_DOC)}
    small_runs = {" " + " ".join(w[p:p + 8]) for w in (d.split() for d in docs)
                  for p in range(len(w) - 7)}
    assert items
    for it in items:
        for k, c in enumerate(it["choices"]):
            assert k == it["label"] or c in head_runs or c in small_runs


def test_the_trigram_references_equal_a_naive_count_and_tell_a_trained_continuation():
    """The n-gram references against a naive recount of the documents' word trigrams, bigrams
    and unigrams: the lookup is the count of (last two context words, first choice word) and
    the PMI is log of the interpolated trigram probability over the add-one unigram; on items
    whose true continuation follows its context in training, both pick it."""
    import math
    from collections import Counter

    from depthbench.data.cloze import TRIGRAM_MIX, Counts, needed, needed_trigrams
    from depthbench.evaluate.text import rule_accuracy
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, size=40)) for _ in range(60)]
    items = []
    for d in docs[:20]:
        w = d.split()
        others = [" ".join(x.split()[20:28]) for x in docs[40:43]]
        items.append({"context": " ".join(w[:16]),
                      "choices": [" ".join(w[16:24]), *others], "label": 0})
    c = Counts(docs, needed(items), trigrams=needed_trigrams(items))
    tri, big, uni = Counter(), Counter(), Counter()
    for d in docs:
        w = d.split()
        tri.update(zip(w, w[1:], w[2:]))
        big.update(zip(w, w[1:]))
        uni.update(w)
    n, v = sum(uni.values()), len(uni) + 1
    for it in items:
        a, b = it["context"].split()[-2:]
        for ch in it["choices"]:
            x = ch.split()[0]
            assert c.trigram(it, ch) == tri[(a, b, x)]
            p1 = (uni[x] + 1) / (n + v)
            p2 = big[(b, x)] / uni[b]
            p3 = tri[(a, b, x)] / big[(a, b)] if big[(a, b)] else p2
            want = math.log(TRIGRAM_MIX[0] * p3 + TRIGRAM_MIX[1] * p2 + TRIGRAM_MIX[2] * p1) \
                - math.log(p1)
            assert c.trigram_pmi(it, ch) == pytest.approx(want, abs=1e-8)
    assert rule_accuracy(items, c.trigram) > 0.7
    assert rule_accuracy(items, c.trigram_pmi) > 0.7


class _Bar:
    """A recording progress bar (what ``console.progress_bar`` returns, without a terminal)."""
    made: list = []

    def __init__(self, total, desc, unit="it"):
        self.total, self.desc, self.n = total, desc, 0
        _Bar.made.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass


def test_prepare_text_counts_every_document_it_writes_on_its_progress_bar(tmp_path, monkeypatch):
    import depthbench.data.corpus as corpus_mod
    _Bar.made = []
    monkeypatch.setattr(corpus_mod, "progress_bar", _Bar)
    d, _ = corpus(tmp_path)
    m = prepare_text([str(d)], tmp_path / "a", vocab_size=300, val_fraction=0.1, seq_len=16)
    (bar,) = [b for b in _Bar.made if b.desc == "prepare-text"]
    assert bar.n == sum(m["splits"][s]["documents"] for s in m["splits"]) > 0


def test_a_corpus_whose_held_out_documents_all_repeat_training_text_says_so(tmp_path):
    """Documents that differ in one number only: every one drawn for validation is contained in
    training and dropped, so no validation is left; the refusal names that cause (more varied
    text), not the validation fraction, which no value of would mend."""
    from depthbench.data.text import TextDataError
    docs = [{"text": f"The quick brown fox {i} jumps over the lazy dog near the river bank, "
                     "and the old dog sleeps there all day long."} for i in range(200)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    with pytest.raises(TextDataError, match=r"every validation document \(\d+\) repeats text"):
        prepare_text([str(tmp_path / "a.jsonl")], tmp_path / "ds", vocab_size=300,
                     val_fraction=0.1, seq_len=8, seed=0)
    assert not (tmp_path / "ds").exists()


def test_a_corpus_of_one_document_is_refused_as_such(tmp_path):
    """A .txt of lines without a blank line between them is one document; no validation
    fraction can hold part of it out, so the refusal says what a document is."""
    from depthbench.data.text import TextDataError
    (tmp_path / "a.txt").write_text("".join(f"line {i} of the same document\n" for i in range(50)))
    with pytest.raises(TextDataError, match="holds one document"):
        prepare_text([str(tmp_path / "a.txt")], tmp_path / "ds", vocab_size=300, seq_len=8)
    assert not (tmp_path / "ds").exists()
