"""Loaders and metrics of the depthbench lm-eval tasks.

The dataset directory comes from lm-eval's ``--metadata '{"data": "DIR"}'`` (or the
TaskManager's metadata), else from the ``DEPTHBENCH_DATA`` environment variable; it is resolved
to an absolute path, so nothing depends on the working directory. Files are read locally: no
network.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

LN2 = math.log(2.0)


def _data_dir(kwargs: dict, text: bool) -> tuple[Path, dict]:
    """The dataset directory and its manifest, checked to be of the kind the task reads
    (``text``: a ``prepare-text`` dataset, whose task is the cloze; else a synthetic one)."""
    # a UserError: ``depthbench lm-eval`` shows it as one line (lm-eval itself, as a traceback)
    from depthbench.data.text import FORMAT as TEXT_FORMAT
    from depthbench.errors import UserError
    d = kwargs.get("data") or os.environ.get("DEPTHBENCH_DATA")
    if not d:
        raise UserError("depthbench tasks need the dataset directory: pass --metadata "
                        "'{\"data\": \"DIR\"}' or set DEPTHBENCH_DATA=DIR")
    p = Path(d).expanduser().resolve()
    if not (p / "manifest.json").is_file():
        raise UserError(f"{p} is not a depthbench dataset (no manifest.json); pass the "
                        "dataset directory in --metadata '{\"data\": \"DIR\"}'")
    try:
        manifest = json.loads((p / "manifest.json").read_text())
        is_text = isinstance(manifest, dict) and manifest.get("format") == TEXT_FORMAT
    except (OSError, ValueError):
        raise UserError(f"{p}/manifest.json is not readable JSON; regenerate the dataset") from None
    if is_text != text:
        raise UserError(
            f"{p} is a {'text' if is_text else 'synthetic'} dataset, but the task reads a "
            f"{'text' if text else 'synthetic'} one: "
            + ("depthbench_cloze is the task of a text dataset (depthbench prepare-text)" if text
               else "the depthbench recall and likelihood tasks ask about the synthetic people "
                    "(depthbench generate); a text dataset's task is depthbench_cloze"))
    return p, manifest


def load_cloze(**kwargs):
    """The held-out cloze task of a text dataset (``depthbench prepare-text``): context, four
    continuations, the index of the true one."""
    import datasets

    f = _data_dir(kwargs, text=True)[0] / "cloze.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines() if line]
    if not rows:
        from depthbench.errors import UserError
        raise UserError(f"{f} holds no cloze item (too few held-out documents); prepare the "
                        "corpus with a larger --val-fraction")
    return {"test": datasets.Dataset.from_list(rows)}


def _load(split: str, **kwargs):
    import datasets

    d, manifest = _data_dir(kwargs, text=False)
    n_values = {a["name"]: a["n_values"] for a in manifest["config"]["attributes"]}
    f = d / f"{split}.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines() if line]
    for r in rows:
        r["n_values"] = n_values[r["attribute"]]
    return {"test": datasets.Dataset.from_list(rows)}


def load_eval_reordered(**kwargs):
    return _load("eval_reordered", **kwargs)


def load_eval_seen_order(**kwargs):
    return _load("eval_seen_order", **kwargs)


def load_eval_unseen_people(**kwargs):
    return _load("eval_unseen_people", **kwargs)


def process_recall(doc: dict, results: list[str]) -> dict:
    """Greedy exact match of the value: the first L generated tokens against the L target
    tokens (as ``depthbench eval`` counts it)."""
    target = doc["target"].split()
    return {"exact_match": float(results[0].split()[: len(target)] == target)}


def process_likelihood(doc: dict, results: list) -> dict:
    ll, is_greedy = results[0]
    value_nll = -float(ll)
    return {"value_nll": value_nll,
            "recalled_bits": max(0.0, math.log2(doc["n_values"]) - value_nll / LN2),
            "acc": float(is_greedy)}
