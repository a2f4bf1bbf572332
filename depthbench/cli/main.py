"""The ``depthbench`` command line: each command parses its options into the stage's config
(``depthbench.config``), calls the stage's action, and prints. ``--config FILE`` supplies the
same config from a file (what ``depthbench run --plan`` writes); options given replace its keys.
A user error (bad path, spec, config value, mismatched files) ends as exit status 2 with one
line on stderr: ``depthbench: error: ...``, and no traceback."""

from __future__ import annotations

import json
import time

import click

from depthbench.cli import support as cs
from depthbench.cli.grid import report_cmd, run_cmd, track_cmd
from depthbench.cli.serve import lm_eval_cmd, serve_bench_cmd, serve_sim_cmd
from depthbench.cli.support import build_config, default_of, emit_json, fail, parse_sets
from depthbench.cli.text import echo_text_eval, prepare_text_cmd, scale_report_cmd
from depthbench.config import EvalConfig, ProbeConfig

__all__ = ["main", "parse_sets"]


@click.group(cls=cs.Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="depthbench")
@click.option("-q", "--quiet", is_flag=True, help="Results and errors only: no progress lines or bars.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also the resolved config of each command that builds one (generate, train, "
                   "eval, probe-update, serve-bench, serve-sim).")
def main(quiet, verbose):
    """depthbench: benchmarks for looped (recurrent-depth) transformers.

    Generate a fictional-person knowledge dataset, train looped models under depth schedules,
    sweep serving depths, benchmark depth-adaptive serving, and draw reports.
    Progress goes through logging: -q hides it, -v adds detail (depthbench -q run smoke).
    """
    if quiet and verbose:
        raise click.UsageError("give -q or -v, not both")
    cs.set_verbosity(-1 if quiet else 1 if verbose else 0)


@main.command()
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Dataset directory to create.")
@click.option("--preset", default="tiny", show_default=True, help="tiny, small or paper.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML/JSON dataset keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override one config key (repeatable), e.g. --set n_people=1000000.")
@click.option("--seed", type=cs.SEED, help="Random seed (replaces the config's).")
@click.option("--force", is_flag=True, help="Replace a dataset already at --out.")
@cs.json_option
def generate(out, preset, config_file, sets, seed, force, as_json):
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


@main.command()
@click.option("--data", type=click.Path(), help="Dataset directory.")
@click.option("--out", type=click.Path(file_okay=False), help="Run directory.")
@click.option("--preset", help="Model and training preset: tiny (default), small, paper-200m, paper-1b.")
@click.option("--schedule", help="Depth schedule, e.g. fixed:4, uniform:1-16 (default), "
                                 "fixed-first:0.8:4:1-16.")
@click.option("--steps", type=cs.STEPS, help="Training steps (replaces the preset's).")
@click.option("--match-flops", metavar="RUN", help="Train for as many steps as spend RUN's modeled FLOPs.")
@click.option("--seed", type=cs.SEED, help="Seed of init, data order and depth draws.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="A model or train key.")
@click.option("--resume/--no-resume", default=None, help="Continue the run in --out (or start it).")
@click.option("--results", type=click.Path(file_okay=False), help="Also write result rows here.")
@click.option("--start-from", metavar="RUN", help="Start from RUN's checkpoint at --start-step, "
              "where RUN made this run's first updates (same recipe, depths, LRs; checked).")
@click.option("--start-step", type=cs.STEPS, help="The step of RUN's checkpoint (--start-from).")
@click.option("--model-from", metavar="SPEC", help="Train ouro:DIR's or huginn:DIR's architecture.")
@click.option("--from-weights", is_flag=True, help="--model-from: start from its weights, not random.")
@cs.tracker_options
@cs.config_option
@cs.json_option
def train(preset, steps, seed, sets, config_file, as_json, model_from, from_weights, **given):
    """Train a looped transformer under a depth schedule.

    \b
    Examples:
      depthbench train --data data/tiny --out runs/uniform --schedule uniform:1-16
      depthbench train --data data/tiny --out runs/ff --schedule fixed-first:0.8:4:1-16 \\
          --set keep_steps=[1200]
      depthbench train --data data/tiny --out runs/u-matched --schedule uniform:1-16 --match-flops runs/ff
      depthbench train --data data/tiny --out runs/ouro-arch --model-from ouro:ckpt/ouro --set d_model=64
      depthbench train --data data/tiny --out runs/u --tracker tensorboard   (logs under runs/tracker)
      torchrun --nproc_per_node=2 -m depthbench train --data data/tiny --out runs/ddp
    """
    from depthbench.config import TrainJob, read_config_file, resolve_presets
    from depthbench.train.job import arch_keys, run_train
    if steps is not None and given["match_flops"]:
        fail("give either --steps or --match-flops, not both")
    file = read_config_file(config_file, ("model", "train")) if config_file else {}
    given_sets = {**arch_keys(model_from, from_weights, parse_sets(sets)), **parse_sets(sets),
                  **{f"train.{k}": v for k, v in (("steps", steps), ("seed", seed)) if v is not None}}
    mcfg, tcfg = resolve_presets(preset or "tiny", given_sets, file.get("model"), file.get("train"))
    base = {"model": mcfg.to_dict(), "train": tcfg.to_dict()}
    job = build_config(TrainJob, config_file, given, base)
    summary = run_train(job, log=cs.say)
    if as_json:
        emit_json(summary)


@main.command()
@click.argument("run", required=False, type=click.Path())
@click.option("--preset", help="Model preset (with the dataset preset of the same size).")
@click.option("--schedule", required=True, help="Depth schedule spec.")
@click.option("--steps", type=cs.FLOP_STEPS, help="Steps (default: the preset's or the run's).")
@click.option("--seed", type=cs.SEED, default=0, show_default=True)
@cs.json_option
def flops(run, preset, schedule, steps, seed, as_json):
    """Modeled training FLOPs of a schedule, and its fraction of uniform training.

    \b
    Examples:
      depthbench flops --preset tiny --schedule fixed-first:0.8:4:1-16
    """
    from depthbench.train.job import flop_summary
    if (run is None) == (preset is None):
        fail("give either a RUN directory or --preset")
    s = flop_summary(schedule, run, preset, steps, seed)
    click.echo(f"{schedule}: {s['steps']} steps, mean depth {s['mean_depth']:.2f}, modeled training "
               f"FLOPs {s['flops']:.4e} = {100 * s['fraction_of_uniform']:.1f}% of {s['uniform']} "
               f"({s['uniform_flops']:.4e})")
    click.echo(f"per token: forward F0 {s['f0']:.4e} + K x Fr {s['fr']:.4e}")
    if as_json:
        emit_json({k: v for k, v in s.items() if k != "uniform"})


@main.command()
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write (config.json, model.safetensors, vocabulary, README.md).")
@click.option("--step", type=click.IntRange(0, 10**9), help="Checkpoint step (default: the latest).")
@cs.json_option
def export(run, out, step, as_json):
    """Export a run's checkpoint as safetensors weights with a config.json that documents the
    architecture; load_model('depthbench:DIR') reads it back to the same logits.

    \b
    Examples:
      depthbench export runs/u --out exports/u
      python -c "import depthbench; print(depthbench.load_model('depthbench:exports/u'))"
    """
    from depthbench.export import export_run
    cfg = export_run(run, out, step)
    o = cfg["origin"]
    click.echo(f"exported {o['run']} (step {o['step']}, {o['schedule']}) to {out}: "
               f"{cfg['architecture']['parameters']['total']:,} parameters")
    if as_json:
        emit_json({"out": str(out), **cfg})


@main.command("eval")
@click.argument("run", required=False, type=click.Path())
@click.option("--model", metavar="SPEC", help="Instead of RUN: ouro:DIR, huginn:DIR or hf:DIR (text --data).")
@click.option("--data", type=click.Path(), help="Dataset directory (default: the run's).")
@click.option("--depths", show_default=default_of(EvalConfig, "depths"), help="e.g. 1-16 or 1,4,16.")
@click.option("--split", "splits", multiple=True, help="Split to evaluate (repeatable; default: all).")
@click.option("--checkpoint", type=click.IntRange(0, 10**9), help="Checkpoint step (default: the latest).")
@click.option("--batch-size", type=cs.BATCH, show_default=default_of(EvalConfig, "batch_size"))
@click.option("--max-people", type=cs.COUNT, help="Evaluate only the first N people of each split.")
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


@main.command("probe-update")
@click.argument("run", required=False, type=click.Path())
@click.option("--step", "checkpoint", type=click.IntRange(0, 10**9), help="Checkpoint (default: latest).")
@click.option("--depths-a", "depth_a", type=cs.DEPTH, show_default=default_of(ProbeConfig, "depth_a"))
@click.option("--depths-b", "depth_b", type=cs.DEPTH, show_default=default_of(ProbeConfig, "depth_b"))
@click.option("--depths", show_default=default_of(ProbeConfig, "depths"), help="Serving depths to evaluate.")
@click.option("--batches", type=click.IntRange(2, 1 << 16), show_default=default_of(ProbeConfig, "batches"),
              help="Batches to average over.")
@click.option("--max-people", type=cs.COUNT, show_default=default_of(ProbeConfig, "max_people"))
@click.option("--device", show_default=default_of(ProbeConfig, "device"), help="auto, cpu or cuda.")
@click.option("--out", type=click.Path(), help="Result file base (.csv and .jsonl).")
@cs.tracker_options
@cs.config_option
@cs.json_option
def probe_update_cmd(config_file, as_json, **given):
    """Update-benefit probe: NLL after one update at depth A minus after one at depth B.

    \b
    Examples:
      depthbench probe-update runs/ff --step 1200 --depths-a 4 --depths-b 16
      (runs/ff as train's example keeps it: --set keep_steps=[1200], the switch)
    """
    from depthbench.train.probe import run_probe

    tracker = cs.pop_tracker(given)
    cfg = build_config(ProbeConfig, config_file, given)
    res = run_probe(cfg)
    cs.log_to_tracker(tracker, "probe", res["rows"], str(res["jsonl"]))
    for r in res["rows"]:
        asked = (f"; asked value {r['value_nll_diff']:+.4f} +- {r['value_ci95']:.4f}"
                 if "value_nll_diff" in r else "")
        click.echo(f"depth {r['depth']:>3}: NLL(A={cfg.depth_a}) - NLL(B={cfg.depth_b}) = "
                   f"{r['nll_diff']:+.4f} +- {r['ci95']:.4f} (whole row){asked}")
    click.echo(f"wrote {res['csv']} and {res['jsonl']}")
    if as_json:
        emit_json({"csv": str(res["csv"]), "jsonl": str(res["jsonl"]), "rows": res["rows"]})


for _cmd in (run_cmd, report_cmd, track_cmd, serve_bench_cmd, serve_sim_cmd, lm_eval_cmd, prepare_text_cmd,
             scale_report_cmd):
    main.add_command(_cmd)
