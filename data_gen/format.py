"""The dataset format's one home: its version, splits and special tokens, the vocabulary of a
config, the token dtype, each split's rows and array specs, the manifest's fields and the
hashes that identify a dataset. The generator writes it and depthbench reads it through
these definitions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .config import GenConfig

FORMAT_VERSION = 4  # 2: dataset_hash covers the whole manifest; 3: balanced value assignment;


#                    4: name-only evaluation rows (h per person, only the first fact scored)
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


SPLITS = ("train", "eval_reordered", "eval_seen_order", "eval_unseen_people")


def build_vocab(cfg: GenConfig) -> list[str]:
    return (list(SPECIAL_TOKENS) + [f"[{a.name}]" for a in cfg.attributes]
            + [f"N{i}" for i in range(cfg.name_pool)] + [f"V{i}" for i in range(cfg.value_pool)])


def token_dtype(vocab_size: int) -> np.dtype:
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    raise ValueError(f"vocab of {vocab_size} tokens does not fit in uint32")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def dataset_hash(manifest: dict) -> str:
    """Identity of a dataset: every manifest field but the hash itself (config, derived sizes,
    ceiling, and the sha256 of every file), so no field can be edited unnoticed."""
    ident = {k: v for k, v in manifest.items() if k != "dataset_hash"}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def split_rows(cfg: GenConfig) -> dict[str, int]:
    """Rows per split: r training orders per person (times its exposure); h name-only
    questions per person."""
    h = cfg.n_held_out
    return {"train": cfg.train_rows, "eval_reordered": cfg.n_people * h,
            "eval_seen_order": cfg.n_people * h, "eval_unseen_people": cfg.n_unseen_people * h}


def array_specs(cfg: GenConfig) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """file name -> (dtype, shape) of every token array a dataset of ``cfg`` holds."""
    dtype = token_dtype(len(build_vocab(cfg)))
    out = {}
    for name, n in split_rows(cfg).items():
        out[f"{name}_tokens.npy"] = (dtype, (n, cfg.seq_len))
        out[f"{name}_person.npy"] = (np.dtype(np.uint32), (n,))
        out[f"{name}_order.npy"] = (np.dtype(np.uint8), (n, cfg.n_attributes))
    return out


def expected_files(cfg: GenConfig) -> set[str]:
    return set(array_specs(cfg)) | {f"{s}.jsonl" for s in SPLITS[1:]} | {"vocab.json"}


def manifest_fields(cfg: GenConfig) -> dict:
    """Every manifest field that follows from the generator config (all but the file hashes)."""
    A, vocab = cfg.n_attributes, build_vocab(cfg)
    rows, h = split_rows(cfg), cfg.n_held_out
    n_text = {s: rows[s] if not cfg.text_eval_people else min(rows[s], cfg.text_eval_people * h)
              for s in SPLITS[1:]}
    return {
        "format_version": FORMAT_VERSION,
        "generator": "data_gen",
        "config": json.loads(json.dumps(cfg.to_dict())),
        "seed": cfg.seed,
        "vocab_size": len(vocab),
        "token_dtype": token_dtype(len(vocab)).name,
        "seq_len": cfg.seq_len,
        "counts": {
            "people": cfg.n_people,
            "unseen_people": cfg.n_unseen_people,
            "attributes": A,
            "held_out_attributes": h,
            "train_sequences": rows["train"],
            "train_tokens": rows["train"] * cfg.seq_len,
            "facts": {s: rows[s] for s in SPLITS[1:]},
            "text_facts": n_text,
        },
        "ceiling_bits_per_attribute": {a.name: a.bits for a in cfg.attributes},
        "ceiling_bits": cfg.ceiling_bits,
    }
