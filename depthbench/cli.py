"""The ``depthbench`` command line: a thin click layer over the library.

Every user error (bad path, spec, config value, mismatched files) ends as exit status 2 with
one line on stderr: ``depthbench: error: ...``, and no traceback.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time

import click

from depthbench.config import MAX_DEPTH
from depthbench.errors import UserError


def fail(message: str) -> None:
    raise UserError(message)


class _FiniteFloat(click.ParamType):
    """A float in [lo, hi]; unlike click.FloatRange it refuses nan and inf."""
    name = "float"

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (math.isfinite(v) and self.lo <= v <= self.hi):
            self.fail(f"{value!r} is not a finite number in [{self.lo:g}, {self.hi:g}]", param, ctx)
        return v


# every numeric option is bounded where it is parsed; the limits are far beyond real use
SEED = click.IntRange(0, 2**32 - 1)
STEPS = click.IntRange(1, 10**9)
BATCH = click.IntRange(1, 1 << 20)
COUNT = click.IntRange(1, 1 << 30)
DEPTH = click.IntRange(1, MAX_DEPTH)
WIDTH = click.IntRange(1, 1 << 16)


def _terminated(signum, frame):
    # unwinds like an interrupt, so every temporary output is removed on the way out
    raise SystemExit(128 + signum)


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None
        try:
            return self._main(args, prog_name, **extra)
        finally:
            if on_main_thread:
                signal.signal(signal.SIGTERM, previous)

    def _main(self, args, prog_name, **extra):
        try:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("depthbench: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"depthbench: error: {' '.join(e.format_message().split())}", err=True)
            sys.exit(2)
        except UserError as e:
            click.echo(f"depthbench: error: {' '.join(str(e).split())}", err=True)
            sys.exit(2)
        except OSError as e:  # a full disk, a read-only directory, a vanished file
            where = f" ({e.filename})" if e.filename else ""
            click.echo(f"depthbench: error: {e.strerror or e}{where}; fix the path or free space "
                       "and run again", err=True)
            sys.exit(2)


def emit_json(obj: dict) -> None:
    """The --json contract: one JSON object, the last line of stdout."""
    click.echo(json.dumps(obj, sort_keys=True, default=str))


def progress_bar(total: int, desc: str, unit: str = "it"):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, disable=not sys.stderr.isatty(),
                dynamic_ncols=True, leave=False)


def parse_sets(pairs: tuple[str, ...]) -> dict:
    from data_gen.config import parse_value
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            fail(f"--set {p!r} is not key=value (e.g. --set n_people=1000)")
        out[key.strip()] = parse_value(value.strip())
    return out


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="depthbench")
def main():
    """depthbench: benchmarks for looped (recurrent-depth) transformers.

    Generate a fictional-person knowledge dataset, train looped models under depth schedules,
    sweep serving depths, benchmark depth-adaptive serving, and draw reports.
    """


@main.command()
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Dataset directory to create.")
@click.option("--preset", default="tiny", show_default=True, help="tiny, small or paper.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML file whose keys replace the preset's.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override one config key (repeatable), e.g. --set n_people=1000000.")
@click.option("--seed", type=SEED, help="Random seed (replaces the config's).")
@click.option("--force", is_flag=True, help="Replace a non-empty --out directory.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def generate(out, preset, config_file, sets, seed, force, as_json):
    """Generate the synthetic fictional-person dataset.

    \b
    Examples:
      depthbench generate --out data/tiny
      depthbench generate --out data/paper --preset paper --set n_people=2000000
      depthbench generate --out data/x --set attributes=city:4096:2,employer:1024:1
    """
    from data_gen import generate as gen
    from data_gen import resolve_config

    try:
        cfg = resolve_config(preset, config_file, parse_sets(sets), seed)
    except (ValueError, TypeError) as e:
        fail(f"invalid dataset config: {e}")
    t0 = time.perf_counter()
    bar = progress_bar(cfg.n_people + cfg.n_unseen_people, "generate", "people")
    try:
        manifest = gen(cfg, out, force=force, progress=bar.update)
    except FileExistsError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the dataset to {out}: {e.strerror or e}")
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    c = manifest["counts"]
    facts = c["facts"]["eval_reordered"]
    click.echo(f"wrote {out}: {c['people']} people ({c['unseen_people']} unseen controls), "
               f"{c['attributes']} attributes, {facts} facts, {c['train_sequences']} training "
               f"sequences, {c['train_tokens']} training tokens, ceiling "
               f"{manifest['ceiling_bits']:.1f} bits/person, {seconds:.1f}s")
    if as_json:
        emit_json({"out": str(out), "dataset_hash": manifest["dataset_hash"],
                   "people": c["people"], "facts": facts, "train_tokens": c["train_tokens"],
                   "ceiling_bits": manifest["ceiling_bits"], "seconds": seconds})


def resolve_configs(preset: str, sets: tuple[str, ...], **train_overrides):
    from depthbench.config import model_preset, split_sets, train_preset
    m, t = split_sets(parse_sets(sets))
    t.update({k: v for k, v in train_overrides.items() if v is not None})
    return model_preset(preset).replace(**m), train_preset(preset).replace(**t)


@main.command()
@click.option("--data", required=True, type=click.Path(), help="Dataset directory.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory.")
@click.option("--preset", default="tiny", show_default=True,
              help="Model and training preset: tiny, small, paper-200m, paper-1b.")
@click.option("--schedule", default="uniform:1-16", show_default=True,
              help="Depth schedule, e.g. fixed:4, uniform:1-16, fixed-first:0.8:4:1-16.")
@click.option("--steps", type=STEPS, help="Training steps (replaces the preset's).")
@click.option("--match-flops", type=click.Path(), metavar="RUN",
              help="Train for as many steps as spend RUN's modeled FLOPs.")
@click.option("--seed", type=SEED, help="Seed of init, data order and depth draws.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a model or training config key, e.g. --set lr=1e-3 --set d_model=128.")
@click.option("--resume", is_flag=True,
              help="Continue the run in --out from its latest checkpoint (start it if there is none).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def train(data, out, preset, schedule, steps, match_flops, seed, sets, resume, as_json):
    """Train a looped transformer under a depth schedule.

    \b
    Examples:
      depthbench train --data data/tiny --out runs/uniform --schedule uniform:1-16
      depthbench train --data data/tiny --out runs/ff --schedule fixed-first:0.8:4:1-16
      depthbench train --data data/tiny --out runs/u-matched --schedule uniform:1-16 --match-flops runs/ff
      torchrun --nproc_per_node=2 -m depthbench train --data data/tiny --out runs/ddp
    """
    from depthbench.train import train as run_train

    if steps is not None and match_flops:
        fail("give either --steps or --match-flops, not both")
    from depthbench.schedules import parse_schedule
    parse_schedule(schedule)
    model_cfg, train_cfg = resolve_configs(preset, sets, steps=steps, seed=seed)
    if match_flops:
        from depthbench.train import matched_steps
        train_cfg = train_cfg.replace(steps=matched_steps(
            match_flops, schedule, data, model_cfg, train_cfg.batch_size, train_cfg.seed))
    summary = run_train(data, out, model_cfg, train_cfg, schedule, resume=resume,
                        log=click.echo)
    if as_json:
        emit_json(summary)


@main.command()
@click.argument("run", required=False, type=click.Path())
@click.option("--preset", help="Model preset (with the dataset preset of the same size).")
@click.option("--schedule", required=True, help="Depth schedule spec.")
@click.option("--steps", type=STEPS, help="Steps (default: the preset's or the run's).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def flops(run, preset, schedule, steps, seed, as_json):
    """Modeled training FLOPs of a schedule, and its fraction of uniform training.

    \b
    Examples:
      depthbench flops --preset tiny --schedule fixed-first:0.8:4:1-16
      depthbench flops --preset paper-200m --schedule fixed:4 --steps 20000
      depthbench flops runs/uniform --schedule fixed:4
    """
    from depthbench.config import model_preset, train_preset
    from depthbench.flops import FlopModel, schedule_flops
    from depthbench.schedules import parse_schedule

    sched = parse_schedule(schedule)
    if (run is None) == (preset is None):
        fail("give either a RUN directory or --preset")
    if run is not None:
        from depthbench.checkpoint import read_run
        rec = read_run(run)
        fm = FlopModel(**rec["flop_model"])
        n_steps, tps = steps or rec["train"]["steps"], rec["tokens_per_step"]
    else:
        from data_gen.config import PRESETS
        from data_gen.generate import build_vocab
        data_name = {"tiny": "tiny", "small": "small"}.get(preset, "paper")
        gen = PRESETS[data_name]()
        m = model_preset(preset)
        m = m.replace(vocab_size=m.vocab_size or len(build_vocab(gen)))
        fm = FlopModel.of(m, gen.seq_len - 1)
        t = train_preset(preset) if preset in ("tiny", "small", "paper-200m", "paper-1b") else None
        n_steps = steps or (t.steps if t else 1000)
        tps = (t.batch_size if t else 128) * (gen.seq_len - 1)
    total = schedule_flops(fm, sched, n_steps, seed, tps)
    hi = max(sched.max_depth, 16) if sched.kind != "fixed" else 16
    uni = schedule_flops(fm, parse_schedule(f"uniform:1-{hi}"), n_steps, seed, tps)
    depths = sched.depths(n_steps, seed)
    click.echo(f"{schedule}: {n_steps} steps, mean depth {depths.mean():.2f}, modeled training "
               f"FLOPs {total:.4e} = {100 * total / uni:.1f}% of uniform:1-{hi} ({uni:.4e})")
    click.echo(f"per token: forward F0 {fm.f0:.4e} + K x Fr {fm.fr:.4e}")
    if as_json:
        emit_json({"schedule": schedule, "steps": n_steps, "flops": total, "uniform_flops": uni,
                   "fraction_of_uniform": total / uni, "mean_depth": float(depths.mean()),
                   "f0": fm.f0, "fr": fm.fr})


@main.command("eval")
@click.argument("run", type=click.Path())
@click.option("--data", type=click.Path(), help="Dataset directory (default: the run's).")
@click.option("--depths", default="1-16", show_default=True, help="Serving depths, e.g. 1-16 or 1,4,16.")
@click.option("--split", "splits", multiple=True,
              help="Split(s) to evaluate (repeatable; default: all four eval splits).")
@click.option("--checkpoint", "step", type=click.IntRange(0, 10**9),
              help="Checkpoint step (default: the latest).")
@click.option("--batch-size", type=BATCH, default=256, show_default=True)
@click.option("--max-people", type=COUNT, help="Evaluate only the first N people of each split.")
@click.option("--out", type=click.Path(), help="Result file base (.csv and .jsonl are written).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--harness", type=click.Choice(["native", "lm-eval"]), default="native",
              show_default=True, help="lm-eval: run the sweep through lm_eval.simple_evaluate.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def eval_cmd(run, data, depths, splits, step, batch_size, max_people, out, device, harness,
             as_json):
    """Sweep serving depths: NLL, exact-match recall and recalled bits per person.

    \b
    Examples:
      depthbench eval runs/uniform --depths 1-16
      depthbench eval runs/ff --split eval_reordered --checkpoint 480 --out results/ff480
      torchrun --nproc_per_node=2 -m depthbench eval runs/uniform
    """
    from pathlib import Path

    from depthbench.checkpoint import load_model, read_run
    from depthbench.data import EVAL_SPLITS, Dataset
    from depthbench.evaluate import result_rows, sweep, write_rows
    from depthbench.runtime import setup, teardown
    from depthbench.schedules import parse_depths

    depth_list = parse_depths(depths)
    for s in splits:
        if s not in EVAL_SPLITS:
            fail(f"unknown split {s!r}; choose from {', '.join(EVAL_SPLITS)}")
    run_path = Path(run)
    meta = read_run(run_path) if (run_path / "run.json").is_file() else {}
    model, ck = load_model(run_path, step)
    data = data or meta.get("data")
    if data is None:
        fail(f"{run} records no dataset; pass --data")
    ds = Dataset(data)
    if ck.get("dataset_hash") != ds.hash:
        fail(f"checkpoint {ck['path']} was trained on dataset {str(ck.get('dataset_hash'))[:12]}, "
             f"but {data} is {ds.hash[:12]}; pass the --data it was trained on")
    if harness == "lm-eval":
        try:
            from depthbench.lm_eval_adapter import harness_sweep
        except ImportError:
            fail("--harness lm-eval needs lm-eval: pip install 'depthbench[lmeval]'")
        rows = harness_sweep(str(run_path), str(data), depth_list, list(splits or EVAL_SPLITS),
                             step, max_people and max_people * len(ds.attributes), batch_size)
    else:
        rt = setup(device)
        try:
            model.to(rt.device)
            rows = []
            for split in splits or EVAL_SPLITS:
                sums = sweep(model, ds, split, depth_list, rt, batch_size, max_people)
                rows += result_rows(ck, meta, run_path.name, ds, split, sums)
        finally:
            teardown(rt)
        if rt.rank != 0:
            return
    out = Path(out) if out else run_path / "eval" / f"step_{ck['step']:07d}"
    csv, jsonl = write_rows(rows, out)
    _print_eval_table(rows, ds.ceiling_bits)
    click.echo(f"wrote {csv} and {jsonl}")
    if as_json:
        best = max((r for r in rows if r["split"] == "eval_reordered"),
                   key=lambda r: r["bits_per_person"], default=None)
        emit_json({"csv": str(csv), "jsonl": str(jsonl), "rows": len(rows), "step": ck["step"],
                   "ceiling_bits": ds.ceiling_bits,
                   "best_depth": best and best["depth"],
                   "best_bits_per_person": best and best["bits_per_person"]})


def _print_eval_table(rows: list[dict], ceiling: float) -> None:
    import pandas as pd
    df = pd.DataFrame(rows)
    for split, g in df.groupby("split", sort=False):
        click.echo(f"\n{split} (ceiling {ceiling:.1f} bits/person)")
        t = g[["depth", "nll", "value_nll", "exact_match", "bits_per_person"]]
        click.echo(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


@main.command("serve-bench")
@click.argument("run", required=False, type=click.Path())
@click.option("--random", "random_preset", metavar="PRESET",
              help="Instead of RUN: a random-weight model of this preset (tiny, small, paper-200m, "
                   "paper-1b, ouro-like, huginn-like), e.g. with --exit trace:8.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a model config key of --random, e.g. --set d_model=512.")
@click.option("--data", type=click.Path(), help="Dataset for the workload (default: the run's).")
@click.option("--modes", default="static,no_refill,batch1,cdb", show_default=True)
@click.option("--exit", "exit_spec", default="latent:0.05", show_default=True,
              help="Exit criterion: fixed:K, latent:TAU, kl:TAU, entropy:TAU, argmax:N, gate:Q, "
                   "replay:FILE.json, trace:MEAN.")
@click.option("--kv-policy", default="depth_indexed", show_default=True,
              help="depth_indexed, single or first_then_shared.")
@click.option("--width", type=WIDTH, default=64, show_default=True, help="Rows per core launch at most.")
@click.option("--requests", "n_requests", type=click.IntRange(1, 1 << 20), default=256,
              show_default=True)
@click.option("--rate", type=_FiniteFloat(0.0, 1e9), default=0.0, show_default=True,
              help="Poisson arrival rate in requests/s (0: all requests at t=0).")
@click.option("--max-new-tokens", type=click.IntRange(0, 1 << 16), default=0, show_default=True,
              help="Tokens to generate per request (0: the rest of the dataset sequence; 32 for --random).")
@click.option("--prompt-len", type=click.IntRange(1, 1 << 16), default=8, show_default=True,
              help="Prompt length for --random.")
@click.option("--min-depth", type=DEPTH, default=1, show_default=True)
@click.option("--max-depth", type=DEPTH, default=16, show_default=True)
@click.option("--lookahead", is_flag=True, help="Take exit decisions one loop ahead.")
@click.option("--admit-min", type=click.IntRange(0, 1 << 16), default=0, show_default=True,
              help="cdb: free rows needed before new requests are admitted while busy "
                   "(0: width/8; 1: refill every freed row at once).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--out", type=click.Path(), help="Result file base (.json and .csv are written).")
@click.option("--save-trace", type=click.Path(dir_okay=False),
              help="Write the cdb mode's exit depths as a replay trace.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def serve_bench_cmd(run, random_preset, sets, data, modes, exit_spec, kv_policy, width, n_requests,
                    rate, max_new_tokens, prompt_len, min_depth, max_depth, lookahead, admit_min,
                    seed, device, out, save_trace, as_json):
    """Benchmark depth-adaptive serving under every batching mode on one workload.

    \b
    Examples:
      depthbench serve-bench runs/uniform --exit latent:0.05 --width 64
      depthbench serve-bench runs/uniform --modes static,cdb --exit kl:0.01 --kv-policy single
      depthbench serve-bench --random small --set d_model=512 --exit trace:8 --requests 128
      depthbench serve-bench --random huginn-like --exit trace:8 --device cuda
    """
    import json
    from pathlib import Path

    import pandas as pd
    import torch

    from depthbench.checkpoint import load_model, read_run
    from depthbench.config import model_preset
    from depthbench.data import Dataset
    from depthbench.fsio import atomic_write_text
    from depthbench.runtime import setup
    from depthbench.serving.bench import (
        BenchConfig,
        dataset_workload,
        random_workload,
        result_rows,
        serve_bench,
    )
    from depthbench.serving.kvcache import KV_POLICIES

    if (run is None) == (random_preset is None):
        fail("give either a RUN directory (or checkpoint) or --random PRESET")
    if kv_policy not in KV_POLICIES:
        fail(f"unknown --kv-policy {kv_policy!r}; choose one of {', '.join(KV_POLICIES)}")
    cfg = BenchConfig(modes=tuple(m.strip() for m in modes.split(",") if m.strip()), exit=exit_spec,
                      kv_policy=kv_policy, width=width, requests=n_requests, rate=rate,
                      max_new_tokens=max_new_tokens, min_depth=min_depth, max_depth=max_depth,
                      lookahead=lookahead, admit_min=admit_min, seed=seed)
    from depthbench.serving.exits import parse_exit
    parse_exit(exit_spec, min_depth, max_depth, lookahead, seed)
    rt = setup(device)
    if run is not None:
        model, ck = load_model(run, device=rt.device)
        meta = read_run(run) if (Path(run) / "run.json").is_file() else {}
        data = data or meta.get("data")
        if data is None:
            fail(f"{run} records no dataset; pass --data")
        ds = Dataset(data)
        if ck.get("dataset_hash") != ds.hash:
            fail(f"checkpoint {ck['path']} was not trained on {data}; pass the --data it was trained on")
        requests = dataset_workload(ds, n_requests, max_new_tokens, seed)
        seq_len = ds.seq_len - 1
        source = str(ck["path"])
    else:
        from depthbench.config import split_sets
        from depthbench.model import LoopedTransformer
        m_sets, _ = split_sets(parse_sets(sets))
        mcfg = model_preset(random_preset).replace(**m_sets)
        if mcfg.vocab_size == 0:
            mcfg = mcfg.replace(vocab_size=256)
        torch.manual_seed(seed)
        with torch.device(rt.device):
            model = LoopedTransformer(mcfg)
        if rt.autocast_dtype is not None:
            model = model.to(rt.autocast_dtype)
        requests = random_workload(mcfg.vocab_size, n_requests, prompt_len, max_new_tokens, seed)
        seq_len = prompt_len + (max_new_tokens or 32)
        source = f"random:{random_preset}"
    click.echo(f"device: {rt.reason}; model {source}: {model.num_params():,} parameters; "
               f"{n_requests} requests, exit {exit_spec}, kv {kv_policy}, width {width}")
    res = serve_bench(model, requests, cfg, seq_len,
                      progress=lambda m: click.echo(f"  {m} done", err=False))
    rows = result_rows(res, source=source, exit=exit_spec, kv_policy=kv_policy, width=width,
                       lookahead=lookahead, rate=rate)
    df = pd.DataFrame(rows)
    cols = [c for c in ("mode", "tokens_per_s", "speedup", "ceiling", "fraction_of_ceiling",
                        "mean_depth", "rows_per_launch", "padding_waste", "ttft_p50_ms",
                        "itl_p50_ms", "exact_match") if c in df.columns]
    click.echo(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if res["adaptive_modes_agree"] is not None:
        click.echo(f"adaptive modes produce identical tokens: {res['adaptive_modes_agree']}")
    if out:
        base = Path(out)
        base = base.with_suffix("") if base.suffix in (".json", ".csv") else base
        base.parent.mkdir(parents=True, exist_ok=True)
        record = {k: v for k, v in res.items() if k not in ("outputs", "depth_traces")}
        record["source"] = source
        atomic_write_text(base.with_name(base.name + ".json"), json.dumps(record, indent=2) + "\n")
        atomic_write_text(base.with_name(base.name + ".csv"), df.to_csv(index=False))
        click.echo(f"wrote {base}.json and {base}.csv")
    if save_trace:
        mode = "cdb" if "cdb" in res["depth_traces"] else next(iter(res["depth_traces"]))
        atomic_write_text(Path(save_trace), json.dumps(res["depth_traces"][mode]) + "\n")
    if as_json:
        emit_json({"results": res["results"], "adaptive_modes_agree": res["adaptive_modes_agree"],
                   "out": out})


@main.command("lm-eval", context_settings={"ignore_unknown_options": True,
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
    """
    try:
        from lm_eval.__main__ import cli_evaluate

        import depthbench.lm_eval_adapter  # noqa: F401  registers the model
    except ImportError:
        fail("lm-eval is not installed: pip install 'depthbench[lmeval]'")
    from depthbench.lm_eval_adapter import TASKS_DIR
    args = list(ctx.args)
    if args and args[0] not in ("-h", "--help") and "--include_path" not in args:
        args += ["--include_path", str(TASKS_DIR)]
    sys.argv = ["lm-eval", *args]
    cli_evaluate()


@main.command("probe-update")
@click.argument("run", type=click.Path())
@click.option("--step", type=click.IntRange(0, 10**9), help="Checkpoint step (default: the latest).")
@click.option("--depths-a", "depth_a", type=DEPTH, default=4, show_default=True)
@click.option("--depths-b", "depth_b", type=DEPTH, default=16, show_default=True)
@click.option("--depths", default="1-16", show_default=True, help="Serving depths to evaluate.")
@click.option("--batches", type=click.IntRange(2, 1 << 16), default=8, show_default=True,
              help="Batches to average over.")
@click.option("--max-people", type=COUNT, default=256, show_default=True)
@click.option("--out", type=click.Path(), help="Result file base (.csv and .jsonl).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def probe_update_cmd(run, step, depth_a, depth_b, depths, batches, max_people, out, as_json):
    """Update-benefit probe: NLL after one update at depth A minus after one at depth B.

    \b
    Examples:
      depthbench probe-update runs/ff --step 480 --depths-a 4 --depths-b 16
    """
    from pathlib import Path

    from depthbench.evaluate import probe_update, write_rows
    from depthbench.schedules import parse_depths

    if depth_a < 1 or depth_b < 1 or batches < 2:
        fail("--depths-a and --depths-b must be >= 1 and --batches >= 2")
    rows = probe_update(run, step, depth_a, depth_b, parse_depths(depths), batches, max_people)
    out = Path(out) if out else Path(run) / "probe" / f"step_{rows[0]['step']:07d}_{depth_a}_vs_{depth_b}"
    csv, jsonl = write_rows(rows, out)
    for r in rows:
        click.echo(f"depth {r['depth']:>3}: NLL(A={depth_a}) - NLL(B={depth_b}) = "
                   f"{r['nll_diff']:+.4f} +- {r['ci95']:.4f}")
    click.echo(f"wrote {csv} and {jsonl}")
    if as_json:
        emit_json({"csv": str(csv), "jsonl": str(jsonl), "rows": rows})


@main.command("run")
@click.argument("spec", required=False, type=click.Path())
@click.option("--out", type=click.Path(file_okay=False),
              help="Working directory of the experiment (default: runs/NAME).")
@click.option("--plan", is_flag=True, help="Print every stage's command instead of running it.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def run_cmd(spec, out, plan, as_json):
    """Run an experiment grid: generate, train, eval, probe, serve-bench, report.

    Without SPEC, runs the embedded quickstart (experiments/quickstart.toml). Finished stages
    are skipped on a rerun; an interrupted one continues.

    \b
    Examples:
      depthbench run
      depthbench run experiments/paper-200m.toml --plan
      depthbench run my_grid.toml --out /scratch/grid
    """
    from pathlib import Path

    from depthbench.pipeline import Pipeline, load_spec

    s = load_spec(spec)
    pipe = Pipeline(s, Path(out) if out else Path("runs") / s["name"], log=click.echo)
    summary = pipe.run(plan=plan)
    if not plan:
        click.echo(f"report: {summary['report']}/index.html ({summary['seconds']:.0f}s)")
    if as_json:
        emit_json(summary)


@main.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Report directory, e.g. reports/NAME.")
@click.option("--title", default="depthbench report", show_default=True)
@click.option("--reference", default=None,
              help="Schedule the others are compared with on paired seeds (default: the first "
                   "uniform schedule).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line.")
def report_cmd(results, out, title, reference, as_json):
    """Draw figures and tables from result rows into a self-contained report.

    \b
    Examples:
      depthbench report runs/quickstart/results --out reports/quickstart
      depthbench report runs/a/eval/step_0000800.jsonl runs/b/eval --out reports/ab
    """
    from pathlib import Path

    from depthbench.report import build_report

    files = build_report([Path(r) for r in results], out, title, reference)
    click.echo(f"wrote {len(files)} files to {out}")
    if as_json:
        emit_json({"out": str(out), "files": [str(f) for f in files]})
