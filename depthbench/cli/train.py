"""The training commands: ``depthbench train``, ``flops`` (a schedule's modeled FLOPs),
``export`` (a checkpoint as safetensors) and ``probe-update`` (the update-benefit probe)."""

from __future__ import annotations

import click

from depthbench.cli import support as cs
from depthbench.cli.support import build_config, default_of, emit_json, fail, parse_sets
from depthbench.config import ProbeConfig


@click.command("train")
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
def train_cmd(preset, steps, seed, sets, config_file, as_json, model_from, from_weights, **given):
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


@click.command("flops")
@click.argument("run", required=False, type=click.Path())
@click.option("--preset", help="Model preset (with the dataset preset of the same size).")
@click.option("--schedule", required=True, help="Depth schedule spec.")
@click.option("--steps", type=cs.FLOP_STEPS, help="Steps (default: the preset's or the run's).")
@click.option("--seed", type=cs.SEED, default=0, show_default=True)
@cs.json_option
def flops_cmd(run, preset, schedule, steps, seed, as_json):
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


@click.command("export")
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write (config.json, model.safetensors, vocabulary, README.md).")
@click.option("--step", type=click.IntRange(0, 10**9), help="Checkpoint step (default: the latest).")
@cs.json_option
def export_cmd(run, out, step, as_json):
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


@click.command("probe-update")
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
