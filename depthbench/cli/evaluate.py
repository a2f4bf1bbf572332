"""The evaluation commands: ``depthbench eval`` (a depth sweep, native or through lm-eval)
and ``depthbench lm-eval`` (lm-eval's own command line with the depthbench model and tasks
registered)."""

from __future__ import annotations

import contextlib
import io
import sys

import click

from depthbench.cli import support as cs
from depthbench.cli.support import build_config, default_of, emit_json, fail
from depthbench.config import EvalConfig
from depthbench.errors import UserError


@click.command("eval")
@click.argument("run", required=False, type=click.Path())
@click.option("--model", metavar="SPEC", help="Instead of RUN: ouro:DIR, huginn:DIR or hf:DIR (text --data).")
@click.option("--data", type=click.Path(), help="Dataset directory (default: the run's).")
@click.option("--depths", show_default=default_of(EvalConfig, "depths"), help="e.g. 1-16 or 1,4,16.")
@click.option("--split", "splits", multiple=True, help="Split to evaluate (repeatable; default: all).")
@click.option("--checkpoint", type=click.IntRange(0, 10**9), help="Checkpoint step (default: the latest).")
@click.option("--batch-size", type=cs.BATCH, show_default=default_of(EvalConfig, "batch_size"))
@click.option("--max-people", type=cs.COUNT,
              help="Evaluate only the first N people of each split (a text run: the first N windows).")
@click.option("--out", type=click.Path(), help="Result file base (.csv and .jsonl are written).")
@click.option("--device", show_default=default_of(EvalConfig, "device"), help="auto, cpu or cuda.")
@click.option("--harness", type=click.Choice(["native", "lm-eval"]), show_default="native",
              help="lm-eval: run the sweep through lm_eval.simple_evaluate.")
@click.option("--task", "tasks", multiple=True, help="A text run's lm-eval task (repeatable).")
@click.option("--task-path", help="Text run: a folder of further lm-eval task YAMLs.")
@cs.tracker_options
@cs.config_option
@cs.json_option
def eval_cmd(config_file, as_json, **given):
    """Sweep serving depths: NLL, recall and recalled bits per person (text: bits per byte).

    \b
    Examples:
      depthbench eval runs/uniform --depths 1-16
      depthbench eval runs/ff
      depthbench eval runs/ff --split eval_reordered --checkpoint 1200 --out results/ff1200
      (a checkpoint the run kept: train ... --set keep_steps=[1200])
      torchrun --nproc_per_node=2 -m depthbench eval runs/uniform
      depthbench eval --model ouro:ckpt/ouro --data data/ouro-text --out results/ouro
      (data/ouro-text: prepare-text CORPUS --tokenizer ckpt/ouro/tokenizer.json)
    """
    import pandas as pd

    from depthbench.evaluate.sweep import run_eval

    tracker = cs.pop_tracker(given)
    res = run_eval(build_config(EvalConfig, config_file, given))
    if "jsonl" not in res:  # another rank wrote the rows
        return
    cs.log_to_tracker(tracker, "eval", res["rows"], str(res["jsonl"]))
    if res["ceiling_bits"] is None:   # a text run
        return echo_text_eval(res, as_json)
    df = pd.DataFrame(res["rows"])
    for split, g in df.groupby("split", sort=False):
        click.echo(f"\n{split} (ceiling {res['ceiling_bits']:.1f} bits/person)")
        t = g[["depth", "nll", "value_nll", "exact_match", "bits_per_person"]]
        click.echo(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    click.echo(f"wrote {res['csv']} and {res['jsonl']}")
    if as_json:
        best = max((r for r in res["rows"] if r["split"] == "eval_reordered"),
                   key=lambda r: r["bits_per_person"], default=None)
        emit_json({"csv": str(res["csv"]), "jsonl": str(res["jsonl"]), "rows": len(res["rows"]),
                   "step": res["step"], "ceiling_bits": res["ceiling_bits"],
                   "best_depth": best and best["depth"],
                   "best_bits_per_person": best and best["bits_per_person"]})


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


@click.command("lm-eval", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True, "help_option_names": []})
@click.pass_context
def lm_eval_cmd(ctx):
    """lm-eval's own command line with the `depthbench` model and tasks registered.

    \b
    Examples:
      depthbench lm-eval run --model depthbench --model_args pretrained=runs/uniform,n_loops=4 \\
          --tasks depthbench --metadata '{"data": "data/tiny"}'
      depthbench lm-eval ls tasks
    The depthbench task folder is added to --include_path unless one is given.

    \b
    With --depths, the tasks run at every serving depth of the list (a fresh model per depth)
    and --rows FILE writes one `task` row per task and depth, for `depthbench report`:
      depthbench lm-eval run --model depthbench --model_args pretrained=runs/text-uniform \\
          --tasks depthbench_cloze,hellaswag --depths 1-16 --rows results/tasks
    It takes --model_args (no n_loops), --tasks, --limit, --batch_size, --metadata and
    --include_path.
    """
    try:
        from lm_eval.__main__ import cli_evaluate

        from depthbench.evaluate.harness import TASKS_DIR  # registers the model
    except ImportError:
        fail("lm-eval is not installed: pip install 'depthbench[lmeval]'")
    args = list(ctx.args)
    if any(a == "--depths" or a.startswith("--depths=") for a in args):
        return _lm_eval_depths(args)
    from depthbench.evaluate.harness import check_inputs
    try:
        check_inputs(args)
    except UserError as e:
        fail(str(e))
    if args and args[0] not in ("-h", "--help") and "--include_path" not in args:
        args += ["--include_path", str(TASKS_DIR)]
    sys.argv = ["lm-eval", *args]
    # lm-eval's log lines are held back until it succeeds: a bad model argument or dataset
    # ends as one error line, not a page of INFO lines and a traceback
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            cli_evaluate()
    except UserError as e:
        fail(str(e))
    except ValueError as e:
        if not str(e).startswith("Tasks not found"):
            sys.stderr.write(held.getvalue())
            raise
        fail(f"lm-eval knows no task among --tasks ({str(e).split('.')[0]}); see `depthbench "
             "lm-eval ls tasks`, or give the task's YAML folder with --include_path")
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    sys.stderr.write(held.getvalue())





def _lm_eval_depths(args: list[str]) -> None:
    """``depthbench lm-eval [run] --depths SPEC ...`` (see ``harness.run_depths``)."""
    from depthbench.evaluate.harness import run_depths

    held = io.StringIO()   # lm-eval's log lines, shown only when it fails unexpectedly
    try:
        with contextlib.redirect_stderr(held):
            rows, written = run_depths(args)
    except UserError:
        raise
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    for r in rows:
        scores = "  ".join(f"{k} {v:.4f}" for k, v in r.items()
                           if k.startswith(("acc", "exact_match")) and isinstance(v, float))
        click.echo(f"depth {r['depth']:>2}  {r['task']}  {scores}")
    for f in written:
        click.echo(f"wrote {f}")
