"""Evaluating a model on a text dataset: NLL and bits per byte over validation windows at
every serving depth in one pass, and the cloze (``data.cloze``) with its shortcut floors."""

from __future__ import annotations

import json
import math

import numpy as np

from depthbench.checkpoint import run_keys
from depthbench.data.cloze import (
    Counts,
    needed,
    needed_trigrams,
    overlap,
    unigram_logp,
    unigram_score,
)
from depthbench.data.text import FIX, TextDataError, TextDataset


# ---- evaluating ---------------------------------------------------------------------------------
def eval_windows(tokens: np.ndarray, T: int, max_windows: int | None = None) -> np.ndarray:
    """The validation split cut into consecutive windows of ``T`` tokens (inputs and targets:
    every token but the first of each window is predicted once; the tail that fills no window is
    left out)."""
    n = (len(tokens) - 1) // (T - 1)
    if max_windows:
        n = min(n, max_windows)
    idx = np.arange(n)[:, None] * (T - 1) + np.arange(T)[None, :]
    return np.asarray(tokens[idx], dtype=np.int64)


def text_sweep(model, ds: TextDataset, depths: list[int], rt=None, batch_size: int = 64,
               max_windows: int | None = None) -> dict[int, dict]:
    """NLL per token (nats) and bits per byte at every depth of ``depths`` on the validation
    split, from one forward of max(depths) loops per batch. Bits per byte spread the predicted
    tokens' total NLL over the UTF-8 bytes of text they stand for (``token_bytes``; for a
    tokenizer that is not byte-level, the split's mean bytes per token)."""
    import torch
    import torch.nn.functional as F

    from depthbench.runtime import shard_range
    model.eval()
    w = eval_windows(ds.tokens["validation"], ds.seq_len, max_windows)
    if not len(w):
        raise TextDataError(f"{ds.path}: the validation split's {len(ds.tokens['validation'])} "
                            f"tokens fill no window of {ds.seq_len - 1}; a reading over no "
                            f"token would read as a perfect model; {FIX} with a larger "
                            "--val-fraction or a shorter --seq-len")
    lo, hi = shard_range(len(w), rt.rank, rt.world) if rt else (0, len(w))
    device = rt.device if rt else torch.device("cpu")
    sums = {k: 0.0 for k in depths}
    n_tok, n_bytes = 0, 0.0
    per_token = ds.token_bytes()
    bpt = ds.manifest["bytes_per_token"]["validation"]
    ac = rt.autocast() if rt else torch.autocast("cpu", enabled=False)
    with torch.no_grad():
        for a in range(lo, hi, batch_size):
            x = torch.as_tensor(w[a:min(a + batch_size, hi)], device=device)
            inp, tgt = x[:, :-1], x[:, 1:]
            n_tok += tgt.numel()
            n_bytes += (float(per_token[w[a:a + len(x), 1:]].sum()) if per_token is not None
                        else tgt.numel() * bpt)
            with ac:
                for k, logits in model.readouts(inp, depths):
                    logits = logits.float()
                    sums[k] += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     tgt.reshape(-1), reduction="sum"))
    if rt is not None and rt.world > 1:
        total = rt.all_sum([sums[k] for k in depths] + [float(n_tok), n_bytes])
        sums, n_tok, n_bytes = dict(zip(depths, total[:-2])), int(total[-2]), total[-1]
    return {k: {"nll": sums[k] / max(1, n_tok), "tokens": n_tok, "bytes": n_bytes,
                "bits_per_byte": sums[k] / math.log(2) / max(1.0, n_bytes)}
            for k in depths}


def cloze_items(ds: TextDataset) -> list[dict]:
    return [json.loads(x) for x in (ds.path / "cloze.jsonl").read_text().splitlines() if x]


def rule_accuracy(items: list[dict], score) -> float:
    """The share of items a rule gets right, ``score(item, choice)`` higher being its pick; a
    tie among k choices that include the true one counts 1/k (a random tie-break's
    expectation), so a rule that cannot tell the choices apart reads chance exactly."""
    right = 0.0
    for it in items:
        s = [score(it, c) for c in it["choices"]]
        top = [i for i, v in enumerate(s) if v == max(s)]
        right += (it["label"] in top) / len(top)
    return right / len(items)


def training_documents(ds: TextDataset):
    """The training split's documents, decoded one by one (each ends at an end-of-text)."""
    tok, ids = ds.tokenizer(), np.asarray(ds.tokens["train"])
    cuts = np.flatnonzero(ids == ds.vocab.eos)
    return (tok.decode(ids[a:b].tolist()) for a, b in zip(np.r_[0, cuts[:-1] + 1], cuts))


RULES = ("cloze_overlap_rule", "cloze_unigram_rule", "cloze_word_unigram_rule",
         "cloze_bigram_rule", "cloze_idf_overlap_rule", "cloze_tfidf_rule")
# rules the construction does not balance: what local n-gram continuation reads without a model
NGRAM_RULES = ("cloze_trigram_rule", "cloze_trigram_pmi_rule")


def cloze_rules(ds: TextDataset) -> dict:
    """The cloze's shortcut floors (STYLE #19), from the dataset alone (no model), each the
    share of items it gets right (``rule_accuracy``; ``data.cloze`` defines the scores):
    ``cloze_overlap_rule``      the choice sharing the most distinct words with the context
                                (lowercased, punctuation stripped);
    ``cloze_unigram_rule``      the choice whose tokens are most frequent in the training split
                                (summed log unigram probability, add-one smoothed);
    ``cloze_word_unigram_rule`` the same over words of the decoded training documents;
    ``cloze_bigram_rule``       the choice whose word bigrams after the context's last word are
                                most frequent in the decoded training documents;
    ``cloze_idf_overlap_rule``  the choice whose shared words are rarest in them (summed IDF);
    ``cloze_tfidf_rule``        the choice whose TF-IDF vector is closest to the context's (cosine).
    A reading of the model is worth something only above all six, by more than its standard
    error over items (``cloze_items``). Beside them, two references the construction does not
    balance (``NGRAM_RULES``), which read what local n-gram continuation alone gets right:
    ``cloze_trigram_rule``      the choice whose first word most often follows the context's
                                last two words in training (one trigram lookup);
    ``cloze_trigram_pmi_rule``  the choice of highest word-trigram PMI with the context's last
                                two words (``Counts.trigram_pmi``).
    A model at or below them reads n-gram continuation, not the context's sense."""
    items = cloze_items(ds)
    if not items:
        return dict.fromkeys(RULES + NGRAM_RULES, float("nan"))
    tok = ds.tokenizer()
    unigram = unigram_score(lambda t: tok.encode(t).ids,
                            unigram_logp(ds.tokens["train"], ds.vocab.size))
    counts = Counts(training_documents(ds), needed(items), trigrams=needed_trigrams(items))
    return dict(zip(RULES + NGRAM_RULES, (rule_accuracy(items, f) for f in (
        overlap, lambda it, c: unigram(c), counts.word_unigram, counts.bigram,
        counts.idf_overlap, counts.tfidf_cosine, counts.trigram, counts.trigram_pmi))))


def cloze_accuracy(model, ds: TextDataset, depths: list[int], device=None) -> dict[int, dict]:
    """At every depth, two scores of the dataset's cloze items, each the share of items whose
    true continuation scores highest (chance: one over the number of choices):

    ``cloze_accuracy``     the continuation's summed loglikelihood after the context, as
                           lm-eval's multiple-choice ``acc``;
    ``cloze_accuracy_mi``  that loglikelihood minus the continuation's loglikelihood after
                           end-of-text alone (pointwise mutual information with the context,
                           lm-eval's ``acc_mutual_info``): how much the context, not the
                           continuation's own frequency, picks the answer.
    """
    import torch
    items = cloze_items(ds)
    if not items:
        return {k: {"cloze_accuracy": float("nan"), "cloze_accuracy_mi": float("nan")}
                for k in depths}
    tok = ds.tokenizer()
    limit = model.shape.max_seq_len
    eot = ds.vocab.eos
    n_items, n_choices = len(items), len(items[0]["choices"])
    labels = torch.tensor([it["label"] for it in items])
    dev = device or next(model.parameters()).device
    lls = {k: [] for k in depths}
    model.eval()
    # each choice after its context, then after end-of-text alone (padded apart: the second
    # group is a few tokens long)
    for with_context in (True, False):
        seqs, spans = [], []
        for it in items:
            ctx = tok.encode(it["context"]).ids if with_context else [eot]
            for choice in it["choices"]:
                cont = tok.encode(choice).ids
                ids = (ctx + cont)[-(limit + 1):]
                seqs.append(ids)
                spans.append((len(ids) - len(cont), len(ids)))
        T = max(len(x) for x in seqs)
        x = torch.full((len(seqs), T), eot, dtype=torch.long)
        for i, ids in enumerate(seqs):
            x[i, :len(ids)] = torch.tensor(ids)
        x = x.to(dev)
        mask = torch.zeros(len(seqs), T - 1, dtype=torch.bool, device=dev)
        for i, (a, b) in enumerate(spans):
            mask[i, max(a, 1) - 1:b - 1] = True   # target position j predicts token j + 1
        with torch.no_grad():
            for k, logits in model.readouts(x[:, :-1], depths):
                logp = torch.log_softmax(logits.float(), -1)
                ll = (logp.gather(-1, x[:, 1:, None])[..., 0] * mask).sum(-1)
                lls[k].append(ll.view(n_items, n_choices).cpu())
    out = {}
    for k, (cond, uncond) in lls.items():
        out[k] = {"cloze_accuracy": int((cond.argmax(-1) == labels).sum()) / n_items,
                  "cloze_accuracy_mi": int(((cond - uncond).argmax(-1) == labels).sum())
                  / n_items}
    return out


def item_rows(ds: TextDataset) -> list[dict]:
    """The dataset's cloze items as ``item`` rows, so a report carries the questions its cloze
    readings answered (choices as a JSON list)."""
    return [{"dataset_hash": ds.hash, "item": i, "context": it["context"],
             "choices": json.dumps(it["choices"]), "label": it["label"]}
            for i, it in enumerate(cloze_items(ds))]


def text_rows(ck: dict, meta: dict, run_name: str, ds: TextDataset, res: dict[int, dict],
              params: int, cloze: dict[int, dict] | None = None) -> list[dict]:
    """Eval rows of a text run, one per depth, split ``validation``, with the cloze scores at
    that depth where ``cloze`` gives them."""
    n_items = len(cloze_items(ds)) if cloze else 0
    rules = cloze_rules(ds) if cloze else {}
    return [{**run_keys(run_name, ck, meta), "depth": k, "split": "validation", "nll": r["nll"],
             "bits_per_byte": r["bits_per_byte"], "tokens": r["tokens"],
             **({**cloze[k], "cloze_items": n_items, **rules} if cloze else {}),
             "params": params,
             "n_grad_loops": int(ck.get("model_config", {}).get("n_grad_loops", 0)),
             "modeled_train_flops": ck.get("flops"), "wall_clock_s": ck.get("wall_clock"),
             "train_cpu_s": ck.get("cpu_clock"), "dataset_hash": ds.hash,
             "checkpoint": ck.get("path")}
            for k, r in sorted(res.items())]
