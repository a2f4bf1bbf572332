"""serve-sim: the real scheduler on a virtual clock. Oracles: with zero overheads and cost
proportional to parameter FLOPs the simulated speedup is the paper-convention bound; the
simulated engine makes the same launches and exit depths as the real one; a calibrated profile
reproduces the timings it was fitted to."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from depthbench.cli.main import main
from depthbench.config import ConfigError, ModelConfig, SimConfig
from depthbench.exits import parse_exit
from depthbench.model import LoopedTransformer
from depthbench.serving.compare import random_workload
from depthbench.serving.engine import Engine
from depthbench.serving.profile import Profile, calibrate, fit_records, load_profile, stage_work
from depthbench.serving.scheduler import Scheduler
from depthbench.serving.sim import SimEngine, simulate

IDEAL = Profile("ideal", peak_flops=1e12, mem_bw=1e30, attention=False)
SHAPE = dict(n_prelude=1, n_core=2, n_coda=1)


@pytest.mark.parametrize("width,mean", [(4, 2.0), (8, 2.5), (16, 3.5)])
@pytest.mark.parametrize("policy", ["depth_indexed", "single"])
def test_zero_overhead_flop_proportional_cost_reproduces_the_bound_exactly(width, mean, policy):
    # prompt_len 1: the prefill is exactly the first token at full depth, as the bound prices it
    cfg = SimConfig(random="tiny", model_set=SHAPE, exit=f"trace:{mean}", max_depth=4,
                    width=width, requests=40, prompt_len=1, max_new_tokens=12, kv_policy=policy,
                    length_spread=0.5, min_coda_batch=2)
    res = simulate(cfg, IDEAL)
    for r in res["results"][1:]:
        assert r["mode"] != "static"
        assert r["speedup"] == pytest.approx(r["paper_bound"], rel=1e-9), r["mode"]
    assert res["results"][0]["paper_bound"] > 1.05   # a bound with room to miss


def test_simulated_engine_makes_the_real_engines_launches_and_depths():
    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, max_seq_len=64, **SHAPE)
    model = LoopedTransformer(mcfg).eval()
    crit = parse_exit("trace:2.5", 1, 4, seed=3)
    reqs = random_workload(40, 9, 3, 6, 0, spread=0.5)
    for mode in ("static", "no_refill", "cdb"):
        real = Engine(model, crit, "depth_indexed", 3, 20, record=True)
        # priced as the CPU the real engine runs on: the scheduler picks the same defaults
        sim = SimEngine(mcfg, crit, "depth_indexed", 3, 20, replace(IDEAL, device="cpu"),
                        record=True)
        assert real.device_type == sim.device_type == "cpu"
        a = Scheduler(real, mode, 3, min_coda_batch=2).run([q.fresh() for q in reqs])
        b = Scheduler(sim, mode, 3, min_coda_batch=2).run([q.fresh() for q in reqs])
        assert [q.depths for q in a] == [q.depths for q in b]
        assert [r[:5] for r in real.records] == [r[:5] for r in sim.records]


def test_stage_work_counts_parameters_as_the_flop_model_does():
    from depthbench.flops import FlopModel
    cfg = ModelConfig(vocab_size=50, d_model=32, n_heads=4, injection="concat", **SHAPE)
    fm = FlopModel.of(cfg, 0)
    per_token = {s: stage_work(cfg, s, 1, 1, 1, 4, 2, attention=False)[0]
                 for s in ("start", "core", "finish")}
    assert per_token["start"] + per_token["finish"] == pytest.approx(fm.f0)
    assert per_token["core"] == pytest.approx(fm.fr)
    assert stage_work(cfg, "prefill", 1, 1, 1, 4, 2, attention=False)[0] == pytest.approx(fm.forward(4))


def test_a_fit_recovers_the_costs_it_was_given():
    cfg = ModelConfig(vocab_size=50, d_model=32, n_heads=4, **SHAPE)
    truth = {"prefill": [1e-3, 2e-11, 0.0], "start": [2e-4, 1e-11, 1e-10],
             "core": [3e-4, 3e-11, 2e-10], "finish": [1e-4, 1e-11, 3e-10]}
    recs = []
    for stage, (a, al, be) in truth.items():
        for rows in (1, 3, 8, 16, 40):
            for L in (5, 30):
                f, b = stage_work(cfg, stage, rows, rows * (4 if stage == "prefill" else 1), L, 4, 4)
                recs.append((stage, rows, rows * (4 if stage == "prefill" else 1), L, 0, a + al * f + be * b))
    fit = fit_records(cfg, recs, 4, 4)
    for stage in truth:
        assert fit["r2"][stage] > 0.999999
        assert fit["fit"][stage][0] == pytest.approx(truth[stage][0], rel=1e-3, abs=1e-7)


def test_calibration_writes_a_profile_that_predicts_its_own_runs(tmp_path):
    torch.set_num_threads(1)
    cfg = SimConfig(random="tiny", model_set=dict(d_model=64, **SHAPE), exit="trace:2.5",
                    max_depth=4, requests=24, prompt_len=3, max_new_tokens=8,
                    modes=("static", "cdb"), calibrate_widths=(4, 8), warmup_requests=2)
    prof, info = calibrate(cfg)
    path = tmp_path / "cpu.toml"
    path.write_text(prof.to_toml())
    again = load_profile(str(path))
    assert again == prof and again.kind == "fitted" and not again.paged
    assert again.device_type == "cpu"   # its runs used the CPU's scheduler defaults, as will its sims
    # the profile predicts the runs it was fitted to: simulated against measured throughput
    for width in cfg.calibrate_widths:
        res = simulate(cfg.replace(width=width), again)
        for r in res["results"]:
            measured = info["measured_tokens_per_s"][width, r["mode"]]
            assert r["tokens_per_s"] == pytest.approx(measured, rel=0.3), (width, r["mode"])


def test_gpu_profiles_load_and_name_their_sources():
    for name in ("h100", "h200"):
        p = load_profile(name)
        assert p.kind == "roofline" and "datasheet" in p.source and p.peak_flops == 989e12
        assert p.device_type == "cuda"
    assert load_profile("h200").mem_bw > load_profile("h100").mem_bw


def test_bad_profiles_and_exits_are_refused(tmp_path):
    from depthbench.errors import UserError
    bad = tmp_path / "bad.toml"
    for text in ("kind = 'roofline'\npeak_flops = 0\nmem_bw = 1e12\n", "peak_flops = 1e12\nmem_bw = -1\n",
                 "nonsense = 3\n", "kind = 'fitted'\n", "peak_flops = [\n",
                 "peak_flops = 1e12\nmem_bw = 1e12\ndevice = 'tpu'\n"):
        bad.write_text(text)
        with pytest.raises(UserError):
            load_profile(str(bad))
    with pytest.raises(UserError):
        load_profile("nope")
    with pytest.raises(ConfigError):
        SimConfig(random="tiny", exit="latent:0.1")


def test_serve_sim_command_writes_rows_and_the_sweep_plot(tmp_path):
    out = tmp_path / "sim" / "ouro"
    r = CliRunner().invoke(main, ["serve-sim", "--random", "tiny", "--max-depth", "4",
                                  "--means", "1.5,2.5,3.5", "--requests", "32", "--width", "8",
                                  "--modes", "static,no_refill,cdb", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rows) == 9 and {x["kind"] for x in rows} == {"serve"}
    assert out.with_suffix(".png").stat().st_size > 1000
    r = CliRunner().invoke(main, ["serve-sim", "--random", "tiny", "--profile", str(tmp_path / "x.toml")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_scheduler_and_simulator_run_without_torch():
    """The scheduler imports no engine and no torch; serve-sim simulates with torch made
    unimportable (a fresh interpreter in which ``import torch`` raises ImportError)."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "from depthbench.serving import scheduler\n"
        "assert not any(m.startswith('depthbench.serving.engine') or m == 'depthbench.model'\n"
        "               for m in sys.modules), 'the scheduler imported the engine'\n"
        "from depthbench.config import SimConfig\n"
        "from depthbench.serving.profile import load_profile\nfrom depthbench.serving.sim import simulate\n"
        "res = simulate(SimConfig(random='ouro-like', exit='trace:2', max_depth=4, requests=32),\n"
        "               load_profile('h100'))\n"
        "print(' '.join(sorted(r['mode'] for r in res['results'])))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["batch1", "cdb", "no_refill", "static"]


@pytest.mark.parametrize("prompt_len,mean", [(8, 2.0), (32, 3.0)])
@pytest.mark.parametrize("chunk", [0, 24])
def test_no_fraction_exceeds_the_achievable_bound_with_zero_overheads(prompt_len, mean, chunk):
    """With every overhead zero and cost proportional to FLOPs, time is the work done: each mode
    realizes exactly the achievable bound over the whole run (prefill of every prompt token at
    full depth is work every mode shares), the paper's bound (prompts priced as one token) is
    above what any mode can reach, and the steady-state window stays within its bound; with
    chunked prefill too (cdb and static), whose prompt tokens are priced at their launches'
    seconds per extra token."""
    cfg = SimConfig(random="tiny", model_set=SHAPE, exit=f"trace:{mean}", max_depth=4, width=8,
                    requests=48, prompt_len=prompt_len, max_new_tokens=12, length_spread=0.5,
                    min_coda_batch=4, modes=("static", "no_refill", "cdb", "static_lockstep"),
                    prefill_chunk=chunk)
    res = simulate(cfg, IDEAL)
    by = {r["mode"]: r for r in res["results"]}
    for m, r in by.items():
        # the static modes do the same work: speedup 1, a fraction of 1 / bound
        expect = 1.0 if m in ("no_refill", "cdb") else 1.0 / r["achievable_bound"]
        assert r["achievable_fraction"] == pytest.approx(expect, rel=1e-9), m
        assert r["steady_achievable_fraction"] <= 1.02, m
    assert by["cdb"]["achievable_bound"] > 1.03               # a bound with room to miss
    assert by["cdb"]["paper_bound"] > by["cdb"]["achievable_bound"]
    assert by["cdb"]["paper_fraction"] < 0.99


def test_static_differs_from_cdb_only_in_depth():
    """With every exit at max depth, cdb and the static baseline (cdb's pool and coda batching)
    take the same launches and emit the same tokens; static_lockstep (pool = width) does not."""
    torch.manual_seed(0)
    mcfg = ModelConfig(vocab_size=40, d_model=32, n_heads=4, max_seq_len=64, **SHAPE)
    model = LoopedTransformer(mcfg).eval()
    crit = parse_exit("fixed:4", 1, 4)
    reqs = random_workload(40, 12, 3, 6, 0, spread=0.5)
    runs = {}
    for mode in ("static", "cdb", "static_lockstep"):
        eng = Engine(model, crit, "depth_indexed", 6, 20, record=True)
        done = Scheduler(eng, mode, 4, min_coda_batch=2).run([q.fresh() for q in reqs])
        runs[mode] = ([r[:5] for r in eng.records], [q.output for q in done])
    assert runs["static"] == runs["cdb"]
    assert runs["static_lockstep"][1] == runs["cdb"][1]
    assert runs["static_lockstep"][0] != runs["cdb"][0]


def _bench_serve():
    import importlib.util
    import sys
    root = Path(__file__).resolve().parents[1]
    if str(root / "benchmarks") not in sys.path:   # the script imports its shared helper
        sys.path.insert(0, str(root / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_serve", root / "benchmarks" / "bench_serve.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench, root


# the grid's three cheapest workloads (about 16 s of its 80): the other three are the same code
# at 512 requests; ``benchmarks/bench_serve.py --grid-only`` simulates all six
GRID_CHECKED = ("256 x 32, prompt 8", "256 x 128, prompt 64", "2048 x 32, width 256")


def test_readme_serving_grid_is_the_simulation():
    """docs/benchmarks.md's workload grid (ouro-like on H100: cdb, cdb with chunked prefill, no_refill,
    bound) is what ``benchmarks/bench_serve.py --grid-only`` simulates; no whole-run fraction of
    the achievable bound there exceeds 1, and no fraction of any bound exceeds 1.02 (a steady
    window's edges are not priced exactly)."""
    bench, root = _bench_serve()
    page = (root / "docs" / "benchmarks.md").read_text()
    assert set(GRID_CHECKED) < set(bench.GRID)
    for name in GRID_CHECKED:
        e = bench.grid_entry("h100", "ouro-like", name)
        assert f"| {name} | {bench.grid_cells(e)} | " in page, f"docs/benchmarks.md grid row {name}: {e}"
        assert e["largest_fraction"] <= 1.02, name
        for k in ("cdb_whole", "cdb_chunked_whole", "no_refill_whole"):
            assert e[k] <= 1.0 + 1e-9, (name, k)


def test_the_trained_models_h100_line_is_the_simulation():
    """(a)'s H100 line in the committed serving run is what ``trained_sim`` simulates from the
    kept (a) rows: chunked prefill at least halves prefill's share of cdb's time there."""
    import json

    from depthbench.config import ModelConfig
    bench, root = _bench_serve()
    kept = json.loads((root / "docs" / "serving" / "bench_serve.json").read_text())
    t = dict(kept["trained_sim"])
    model = t.pop("model")
    cdb = next(r for r in kept["trained"] if r["mode"] == "cdb")
    again = bench.trained_sim(ModelConfig(**model), cdb, t["requests"], t["width"],
                              t["mean_prompt_len"])
    assert again.pop("model") == model
    assert again == pytest.approx(t, rel=1e-4)   # the kept run rounds its floats
    assert t["chunked_share"] <= t["separate_share"] / 2


def test_the_steady_fraction_prices_the_window_on_its_own_tokens():
    """Oracle by hand: a mode's fraction of the achievable bound is its tokens' ideal seconds over
    its measured seconds. Ideal: a prompt token at the cheapest per-token prefill any mode paid, a
    decoded token at the cheapest non-looped seconds any mode paid (here cdb's, whose coda
    launches were fuller) plus static's looped seconds per token scaled by depth. Over the
    steady window static's looped price is what the rest of its window cost per decoded token
    there, whatever mix of prompts and decoded tokens static's own window holds, and the shared
    work is at the least any mode paid in its own steady window."""
    from depthbench.flops import FlopModel
    from depthbench.serving.compare import add_all_bounds
    fm = FlopModel.of(ModelConfig(vocab_size=40, d_model=32, n_heads=4, **SHAPE), 0)

    def result(mode, wall, prefill_s, nonlooped, depths, prompts, steady, window_s):
        n = len(depths)
        return {"mode": mode, "wall_s": wall, "prefill_s": prefill_s, "tokens_per_s": n / wall,
                "decode_tokens_per_s": sum(1 for p in prompts if not p) / (wall - prefill_s),
                "mean_depth": 2.0, "steady_tokens_per_s": sum(steady) / window_s,
                "steady_window_s": window_s, "_steady": steady,
                "_nonlooped": dict(zip(("whole", "steady"), nonlooped)),
                "_tokens": {"depths": depths, "prompts": prompts}}
    prompts = [3, 0, 0, 0, 3, 0, 0, 0]
    # static: 2 s on 6 prompt tokens, 8 s on 6 decoded tokens of which 3 s outside the loop (0.5
    # s a token, in its steady window too)
    static = result("static", 10.0, 2.0, (0.5, 0.5), [4] * 8, prompts, [True, True, False, False] * 2,
                    4.0)
    depths = [4, 1, 2, 3, 4, 1, 1, 4]
    # cdb: 0.4 s a decoded token outside the loop (static 0.5 s), 0.35 s in its steady window
    cdb = result("cdb", 7.0, 2.0, (0.4, 0.35), depths, prompts,
                 [True, True, False, False, True, True, True, False], 4.0)
    add_all_bounds([static, cdb], fm, fm, 4)
    # looped seconds per token-loop: (8/6 - 0.5) / 4; cdb decodes 12 loops over 6 tokens
    whole = 6 * (1 / 3) + 6 * 0.4 + 12 * (8 / 6 - 0.5) / 4
    assert whole == pytest.approx(6.9)
    assert cdb["achievable_fraction"] == pytest.approx(whole / 7.0)
    assert cdb["achievable_bound"] == pytest.approx(10.0 / whole)
    # static's window: 2 prompts of 3 tokens (2 s at 1/3 s each) and 2 decoded tokens in the
    # other 2 s: 1 s each, 0.5 s of it looped; cdb's window: 2 prompts and 3 tokens at depth 1,
    # the shared work at the least any window paid (cdb's 0.35 s)
    steady = 6 * (1 / 3) + 3 * 0.35 + 3 * (1.0 - 0.5) / 4
    assert cdb["steady_achievable_fraction"] == pytest.approx(steady / 4.0)
    assert static["achievable_fraction"] == pytest.approx(1 / static["achievable_bound"])


# a launch costs its weight reads or its FLOPs, whichever is more, with no host overhead: a
# launch of few rows costs nearly what a full one does, so batching the non-looped stages pays
WEIGHT_BOUND = Profile("weight-bound", peak_flops=1e12, mem_bw=2e9, attention=False)


@pytest.mark.parametrize("knobs", [
    {},                                                               # the defaults
    {"min_coda_batch": 1},                                            # the coda every iteration
    {"admit_min": 6, "pool": 24, "min_coda_batch": 12, "coda_wait": 8},   # a larger pool
    {"prefill_chunk": 16},                                            # chunked prefill
])
def test_no_fraction_exceeds_the_bound_when_small_launches_cost_as_much_as_full_ones(knobs):
    """With zero host overheads time is the device's work, so no mode can beat what depth and the
    best batching of the shared work allow: every whole-run fraction of the achievable bound is at
    most 1 and every steady-state one within noise of it, at knobs where the modes batch their
    non-looped launches differently from static (a coda launch every iteration, a pool that lets
    cdb fill coda launches static's lockstep exits cannot, prompts riding in core launches)."""
    cfg = SimConfig(random="tiny", model_set=SHAPE, exit="trace:1.8", max_depth=4, width=8,
                    requests=64, prompt_len=6, max_new_tokens=24, length_spread=0.5,
                    modes=("static", "no_refill", "cdb", "static_lockstep"), **knobs)
    res = simulate(cfg, WEIGHT_BOUND)
    by = {r["mode"]: r for r in res["results"]}
    for m, r in by.items():
        assert r["achievable_fraction"] <= 1 + 1e-9, (m, r["achievable_fraction"])
        assert r["steady_achievable_fraction"] <= 1.02, (m, r["steady_achievable_fraction"])
    assert by["cdb"]["achievable_bound"] > 1.05        # a bound with room to miss
    assert by["cdb"]["achievable_fraction"] > 0.5      # and one a mode comes near


def test_the_record_names_the_width_and_pool_that_ran_for_a_short_workload():
    # 8 requests at width 64: no launch or pool holds more than 8 rows, and the record says so;
    # the recorded config, run again, gives the same rows (it is what ran)
    from depthbench.serving.compare import resolve_knobs
    cfg = SimConfig(random="tiny", model_set=SHAPE, exit="trace:2.5", max_depth=4, width=64,
                    requests=8, prompt_len=4, max_new_tokens=6)
    ran = resolve_knobs(cfg, IDEAL.device_type)
    assert (ran.width, ran.pool) == (8, 8) and ran.min_coda_batch > 0
    a, b = simulate(cfg, IDEAL), simulate(ran, IDEAL)
    drop = ("wall_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["results"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b["results"]]
