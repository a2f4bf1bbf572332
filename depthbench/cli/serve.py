"""The serving commands: ``depthbench serve-bench`` (a thin adapter over
``serving.bench.run_bench``) and ``serve-sim`` (over ``serving.sim.run_sim``)."""

from __future__ import annotations

import click

from depthbench.cli import support as cs
from depthbench.cli.support import build_config, default_of, emit_json, parse_sets
from depthbench.config import ServeConfig, SimConfig
from depthbench.errors import UserError


def _d(name: str) -> str:
    return default_of(ServeConfig, name)


def _workload(cls) -> list:
    def _d(name: str) -> str:
        return default_of(cls, name)

    return [
        click.option("--random", metavar="PRESET", help="A random-weight model of this preset (tiny, "
                     "small, paper-200m, paper-1b, ouro-like, huginn-like), e.g. with --exit trace:8."),
        click.option("--model", metavar="SPEC", help="A looped model of your own: ouro:DIR, "
                     "huginn:DIR or hf:DIR (a checkpoint folder; serve-sim reads its shape only)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override a model config key of --random, e.g. --set d_model=512."),
        click.option("--modes", show_default=_d("modes"), help="Comma-separated batching modes."),
        click.option("--exit", show_default=_d("exit"), help="Exit criterion: fixed:K, latent:TAU, "
                     "kl:TAU, entropy:TAU, argmax:N, gate:Q, qexit:Q, replay:FILE.json, trace:MEAN."),
        click.option("--kv-policy", show_default=_d("kv_policy"),
                     help="depth_indexed, last_exited, skip_exited, single or first_then_shared[:N]."),
        click.option("--width", type=cs.WIDTH, show_default=_d("width"),
                     help="Rows per core launch at most."),
        click.option("--requests", type=click.IntRange(1, 1 << 20), show_default=_d("requests")),
        click.option("--rate", type=cs.FiniteFloat(0.0, 1e9), show_default=_d("rate"),
                     help="Poisson arrival rate in requests/s (0: all requests at t=0)."),
        click.option("--concurrency", type=click.IntRange(0, 1 << 20), show_default=_d("concurrency"),
                     help="A closed loop: at most this many requests in flight, each sent when an "
                          "earlier one finishes (0: no cap)."),
        click.option("--slo-ttft-ms", type=cs.FiniteFloat(0.0, 1e9), show_default=_d("slo_ttft_ms"),
                     help="Goodput counts requests whose time to first token is within this (0: no SLO)."),
        click.option("--slo-tpot-ms", type=cs.FiniteFloat(0.0, 1e9), show_default=_d("slo_tpot_ms"),
                     help="... and whose time per output token is within this (0: no SLO)."),
        click.option("--max-new-tokens", type=click.IntRange(0, 1 << 16), show_default=_d("max_new_tokens"),
                     help="Tokens to generate per request (0: the rest of the dataset sequence; 32 "
                          "for --random)."),
        click.option("--prompt-len", type=click.IntRange(1, 1 << 16), show_default=_d("prompt_len"),
                     help="Prompt length for --random."),
        click.option("--length-spread", type=cs.FiniteFloat(0.0, 0.99), show_default=_d("length_spread"),
                     help="--random: tokens per request vary uniformly by +- this fraction."),
        click.option("--min-depth", type=cs.DEPTH, show_default=_d("min_depth")),
        click.option("--max-depth", type=cs.DEPTH, show_default=_d("max_depth")),
        click.option("--lookahead/--no-lookahead", default=None, help="Take exit decisions one loop ahead."),
        click.option("--admit-min", type=click.IntRange(0, 1 << 16), show_default=_d("admit_min"),
                     help="Free rows needed before new requests are admitted while busy "
                          "(0: width/8 on a GPU, 3 width/4 on a CPU; 1: refill every freed row at once)."),
        click.option("--min-coda-batch", type=click.IntRange(0, 1 << 16), show_default=_d("min_coda_batch"),
                     help="cdb: exited tokens that wait before the coda runs "
                          "(0: width/2 on a GPU, 3 width/2 on a CPU)."),
        click.option("--pool", type=click.IntRange(0, 1 << 16), show_default=_d("pool"),
                     help="cdb: requests resident at once, each with its KV rows; core launches take "
                          "at most --width of them (0: width + the coda batch; on a CPU at least 3 width)."),
        click.option("--coda-wait", type=click.IntRange(0, 1 << 16), show_default=_d("coda_wait"),
                     help="cdb: core launches an exited token waits for the coda at most "
                          "(0: 4 on a GPU, 16 on a CPU)."),
        click.option("--prefill-chunk", type=cs.AutoInt(0, 1 << 16), show_default="auto",
                     help="cdb, static: chunked prefill, prompt tokens riding in core launches "
                          "beside decode tokens, at most this many at once (0: a prefill launch "
                          "per admission; auto: 0, the fastest at prompts of 8 to 2,048 tokens on "
                          "the simulated H100: benchmarks/chunk_default.py)."),
        click.option("--seed", type=cs.SEED, show_default=_d("seed")),
        click.option("--interleave/--one-at-a-time", default=None,
                     help="Measure the modes side by side, one core launch of each in turn, so a "
                          "drift in the machine's speed hits all alike (default; CPU only)."),
        click.option("--out", type=click.Path(), help="Result file base (.csv and .jsonl are written)."),
    ]


def _workload_options(cls):
    def apply(f):
        for opt in reversed(_workload(cls)):
            f = opt(f)
        return f
    return apply


def _modes(given: dict, sets, modes) -> dict:
    from depthbench.config import split_sets
    model, train = split_sets(parse_sets(sets))
    if train:   # serving builds a model; a training key would be dropped without a word
        raise UserError(f"--set {next(iter(train))}: a training key; serving takes model keys "
                        "only (d_model, n_heads, n_core, ...)")
    given["model_set"] = model or None
    if modes is not None:
        names = tuple(m.strip() for m in modes.split(",") if m.strip())
        if not names:
            from depthbench.config import SERVE_MODES
            raise UserError(f"--modes {modes!r} names no mode; give one or more of "
                            f"{', '.join(SERVE_MODES)}, comma-separated")
        given["modes"] = names
    return given


def _show(res: dict) -> None:
    import pandas as pd
    df = pd.DataFrame(res["rows"])
    slo = "goodput_requests_per_s" if df.get("slo_attainment", pd.Series([1.0])).lt(1).any() else ""
    cols = [c for c in ("exit", "rate", "mode", "tokens_per_s", "speedup", "bound", "fraction",
                        "speedup_vs_static", "ceiling", "paper_bound", "mean_depth",
                        "rows_per_launch", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                        "e2e_p99_ms", slo, "exact_match", "preemptions")
            if c in df.columns]
    if "preemptions" in cols and not df["preemptions"].any():
        cols.remove("preemptions")
    for c in ("exit", "rate"):
        if c in cols and df[c].nunique(dropna=False) == 1:
            cols.remove(c)
    click.echo(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if "baseline" in df.columns:
        click.echo("speedup: over full_depth, full-depth serving at its best knobs ("
                   + ", ".join(sorted(set(df["baseline"].dropna()))) + "); fraction: of the ideal "
                   "time of the mode's work (bound = speedup / fraction)")
    if res.get("bound_note"):
        click.echo(f"bound and fraction {res['bound_note']}")


@click.command("serve-bench")
@click.argument("run", required=False, type=click.Path())
@_workload_options(ServeConfig)
@click.option("--data", type=click.Path(), help="Dataset for the workload (default: the run's).")
@click.option("--device", show_default=_d("device"), help="auto, cpu or cuda.")
@click.option("--save-trace", type=click.Path(dir_okay=False),
              help="Write the cdb mode's exit depths as a replay trace.")
@click.option("--stop-at-eos/--ignore-eos", default=None,
              help="A dataset or text workload's requests stop at end-of-sequence, so modes whose "
                   "exits change the tokens generate different counts (default: --ignore-eos, "
                   "every mode the same tokens per request, as vLLM's benchmark).")
@cs.tracker_options
@cs.config_option
@cs.json_option
def serve_bench_cmd(sets, modes, config_file, as_json, **given):
    """Benchmark depth-adaptive serving under every batching mode on one workload.

    \b
    Examples:
      depthbench serve-bench runs/uniform --exit latent:0.05 --width 64
      depthbench serve-bench runs/uniform --modes static,cdb --exit kl:0.01 --kv-policy single
      depthbench serve-bench --random small --set d_model=512 --exit trace:8 --requests 128
      depthbench serve-bench --random huginn-like --exit trace:8 --device cuda
      depthbench serve-bench --model huginn:ckpt/huginn --modes static,cdb --exit latent:0.3
    """
    from depthbench.serving.bench import run_bench

    tracker = cs.pop_tracker(given)
    res = run_bench(build_config(ServeConfig, config_file, _modes(given, sets, modes)), log=cs.say)
    _show(res)
    cs.log_to_tracker(tracker, "serve", res["rows"], res.get("jsonl") and str(res["jsonl"]))
    if res["adaptive_modes_agree"] is not None:
        click.echo(f"adaptive modes produce identical tokens: {res['adaptive_modes_agree']}")
    if "jsonl" in res:
        click.echo(f"wrote {res['csv']}, {res['jsonl']} and {res['record']}")
    else:
        click.echo("kept no rows: give --out FILE_BASE to write them (.csv, .jsonl and a record)")
    if as_json:
        emit_json({"results": [r.to_dict() for r in res["results"]],
                   "adaptive_modes_agree": res["adaptive_modes_agree"],
                   "baseline": res["baseline"], "out": given.get("out")})


@click.command("serve-sim")
@_workload_options(SimConfig)
@click.option("--profile", show_default=default_of(SimConfig, "profile"),
              help="Hardware profile: h100, h200, or a profile TOML (e.g. from --calibrate).")
@click.option("--means", help="Sweep these trace means (comma-separated) and plot speedup vs "
              "mean exit depth against the bound.")
@click.option("--rates", help="Sweep these request rates (comma-separated requests/s; 0: all at "
              "t=0) at one exit and plot latency against throughput per mode.")
@click.option("--plot", type=click.Path(dir_okay=False), help="The sweep's PNG (default: OUT.png).")
@click.option("--kv-block", type=click.IntRange(0, 1 << 16), show_default=default_of(SimConfig, "kv_block"),
              help="Paged KV: positions per block of the profile's memory; requests are admitted "
                   "while their blocks are free and preempted (then recomputed) when a token finds "
                   "none (0: each request reserved at its whole length, never preempted).")
@click.option("--calibrate", type=click.Path(dir_okay=False),
              help="Measure the real engine on this machine and write a fitted profile here.")
@click.option("--calibrate-widths", show_default=default_of(SimConfig, "calibrate_widths"),
              help="Comma-separated widths the calibration runs.")
@cs.tracker_options
@cs.config_option
@cs.json_option
def serve_sim_cmd(sets, modes, means, rates, calibrate_widths, config_file, as_json, **given):
    """Simulate serving: the real scheduler on a virtual clock, each launch priced by a profile.

    Exit depths must be known in advance (trace:MEAN, replay:FILE, fixed:K; default: the first
    --means, or a trace of mean (1 + max_depth) / 2). Rows as serve-bench's, source sim:PROFILE.

    \b
    Examples:
      depthbench serve-sim --random ouro-like --max-depth 4 --exit trace:2.5 --profile h100
      depthbench serve-sim --random huginn-like --means 2,4,8,12,16 --out results/sim/huginn
      depthbench serve-sim --random ouro-like --exit trace:2 --max-depth 4 --rates 50,200,800 --out sim/load
      depthbench serve-sim --random small --set d_model=512 --exit trace:8 --calibrate cpu.toml
      depthbench serve-sim --random small --set d_model=512 --exit trace:8 --profile cpu.toml
    """
    from depthbench.serving.sim import run_sim
    tracker = cs.pop_tracker(given)
    given = _modes(given, sets, modes)
    given["means"] = means and cs.float_list(means, "--means")
    given["rates"] = rates and cs.float_list(rates, "--rates")
    given["calibrate_widths"] = calibrate_widths and cs.int_list(calibrate_widths, "--calibrate-widths")
    res = run_sim(build_config(SimConfig, config_file, given), log=cs.say)
    if given.get("calibrate"):
        click.echo(f"wrote {res['profile']} (fit R^2: "
                   + ", ".join(f"{k} {v:.3f}" for k, v in res["r2"].items()) + ")")
    else:
        _show(res)
        cs.log_to_tracker(tracker, "serve", res.get("rows", []), res.get("jsonl") and str(res["jsonl"]))
        for k in ("csv", "jsonl", "plot"):
            if k in res:
                click.echo(f"wrote {res[k]}")
        if "csv" not in res:
            click.echo("kept no rows: give --out FILE_BASE to write them (.csv and .jsonl)")
    if as_json:
        emit_json({k: v for k, v in res.items() if k != "rows"})
