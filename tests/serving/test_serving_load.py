"""Load and latency as serving benchmarks read them: latencies per request against a hand count,
a closed loop that never holds more requests in flight than its clients, and a rate sweep that
writes one row set per rate and the latency-throughput figure."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from depthbench.cli.main import main
from depthbench.config import SimConfig
from depthbench.serving.compare import latencies
from depthbench.serving.profile import load_profile
from depthbench.serving.scheduler import Request
from depthbench.serving.sim import simulate


def _req(i, arrival, times):
    q = Request(i, [1, 2], len(times), arrival)
    q.token_times = list(times)
    return q


def test_latencies_by_hand():
    done = [_req(0, 0.0, [0.010, 0.014, 0.020]), _req(1, 0.005, [0.030, 0.031]),
            _req(2, 0.008, [0.012, 0.022, 0.023, 0.026])]
    got = latencies(done, wall=0.05, slo_ttft_ms=9.0, slo_tpot_ms=6.0)
    ttft = [10.0, 25.0, 4.0]
    tpot = [10.0 / 2, 1.0, 14.0 / 3]
    e2e = [20.0, 26.0, 18.0]
    itl = [4.0, 6.0, 1.0, 10.0, 1.0, 3.0]
    for key, want in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e), ("itl_ms", itl),
                      ("norm_latency_ms", [20.0 / 3, 13.0, 4.5])):
        assert got[key]["mean"] == pytest.approx(np.mean(want)), key
        for p in (50, 90, 99):
            assert got[key][f"p{p}"] == pytest.approx(np.percentile(want, p)), (key, p)
    assert got["requests_per_s"] == pytest.approx(3 / 0.05)
    # request 0: TTFT 10 ms > 9; request 1: TTFT 25 ms; request 2: TTFT 4, TPOT 4.67: the only one
    assert got["goodput_requests_per_s"] == pytest.approx(1 / 0.05)
    assert got["slo_attainment"] == pytest.approx(1 / 3)
    assert latencies(done, 0.05)["slo_attainment"] == 1.0    # no SLO: every request counts


def _most_in_flight(reqs) -> int:
    events = sorted([(q.arrival, 1) for q in reqs] + [(q.token_times[-1], -1) for q in reqs],
                    key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


@pytest.mark.parametrize("cap", [3, 8])
def test_a_closed_loop_never_holds_more_requests_than_its_clients(cap):
    from depthbench.exits import parse_exit
    from depthbench.serving.batching import Batching
    from depthbench.serving.scheduler import Scheduler
    from depthbench.serving.sim import SimEngine
    cfg = SimConfig(random="ouro-like", exit="trace:2", max_depth=4, width=16, requests=40,
                    max_new_tokens=6, length_spread=0.5, concurrency=cap)
    b = Batching.of(cfg).resolved("cuda", cfg.requests)
    shape = cfg.model_config()
    from depthbench.serving.workload import random_workload
    for mode in ("cdb", "static", "no_refill"):
        reqs = random_workload(shape.vocab_size, 40, 8, 6, 0, 0.5)
        eng = SimEngine(shape, parse_exit("trace:2", 1, 4), "depth_indexed", b.rows(mode),
                        64, load_profile("h100"), n_prompt_slots=b.prompt_slots(mode))
        done = Scheduler(eng, mode, b).run([q.fresh() for q in reqs])
        assert all(len(q.output) == q.max_new_tokens for q in done)
        assert _most_in_flight(done) <= cap, mode
        # the first `cap` are sent at once; every later one when an earlier one finished
        sent = sorted(q.arrival for q in done)
        finished = sorted(q.token_times[-1] for q in done)
        assert sent[:cap] == [0.0] * cap
        assert all(any(abs(s - f) < 1e-12 for f in finished) for s in sent[cap:])


def test_a_rate_sweep_writes_each_rate_and_the_latency_figure(tmp_path):
    out = tmp_path / "load"
    r = CliRunner().invoke(main, ["serve-sim", "--random", "ouro-like", "--max-depth", "4",
                                  "--exit", "trace:2", "--requests", "32", "--modes", "static,cdb",
                                  "--rates", "0,400,1600", "--slo-ttft-ms", "20", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "load.jsonl").read_text().splitlines()]
    assert sorted({x["rate"] for x in rows}) == [0.0, 400.0, 1600.0]
    for x in rows:
        for k in ("ttft_p99_ms", "tpot_p50_ms", "e2e_mean_ms", "norm_latency_p90_ms",
                  "requests_per_s", "goodput_requests_per_s"):
            assert x[k] is not None and x[k] >= 0, k
        assert x["goodput_requests_per_s"] <= x["requests_per_s"] + 1e-9
        # the bound only where every request waits from the start
        assert (x["fraction"] is None) == (x["rate"] > 0), x
    assert (tmp_path / "load.png").stat().st_size > 0
    r = CliRunner().invoke(main, ["serve-sim", "--random", "ouro-like", "--rates", "0,x"])
    assert r.exit_code == 2 and "--rates" in r.stderr


def test_kv_that_exceeds_the_profiles_memory_admits_fewer_requests_never_more():
    """Without paging (``kv_block`` 0), the weights plus each resident request's KV (reserved at
    its whole length) must fit in memory_util of the profile's memory: a pool the memory cannot
    hold is capped to what fits,
    every mode's run holds no more requests at once, and the KV it reports is what fits."""
    from dataclasses import replace

    from depthbench.serving.memory import kv_bytes, weight_bytes
    from depthbench.serving.profile import kv_rows_that_fit
    cfg = SimConfig(random="huginn-like", exit="trace:8", max_depth=16, width=32, pool=256,
                    requests=96, prompt_len=512, max_new_tokens=8, modes=("static", "cdb"),
                    kv_block=0)
    shape, h100 = cfg.model_config(), load_profile("h100")
    small = replace(h100, memory=40e9)
    max_len = 512 + 8 + 1
    fit = kv_rows_that_fit(shape, small, cfg.kv_policy, 16, max_len)
    per_row = kv_bytes(shape, cfg.kv_policy, 16, 1, max_len, 2)
    assert fit == int((40e9 * 0.9 - weight_bytes(shape, 2)) // per_row) and 1 <= fit < 96
    res = simulate(cfg, small)
    for r in res.results:
        assert r.kv_rows_fit == fit
        assert r.kv_cache_mb * 2**20 <= fit * per_row + 1e-6
    roomy = simulate(cfg, replace(h100, memory=0.0))
    assert roomy.kv_rows_fit is None
    assert max(r.kv_cache_mb for r in roomy.results) > fit * per_row / 2**20
    # fewer resident requests cannot serve faster than the same knobs with room for all
    by = {r.mode: r.tokens_per_s for r in res.results}
    assert by["cdb"] <= max(r.tokens_per_s for r in roomy.results if r.mode == "cdb") * 1.001


def test_a_model_whose_weights_and_one_request_overflow_the_memory_is_refused_in_one_line():
    r = CliRunner().invoke(main, ["serve-sim", "--random", "paper-1b", "--exit", "trace:8",
                                  "--requests", "8", "--prompt-len", "60000", "--max-new-tokens",
                                  "4", "--modes", "cdb", "--profile", "h100"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "do not fit" in r.stderr


def test_cdb_at_the_shipped_gpu_defaults_is_not_slower_than_full_depth_at_long_prompts():
    """At 1,024-token prompts (where chunked prefill at 2 width read 0.12x) cdb at the GPU
    defaults serves faster than full-depth serving at its best knobs, on both profiles."""
    for profile in ("h100", "h200"):
        cfg = SimConfig(random="paper-200m", exit="trace:4", max_depth=8, requests=64,
                        prompt_len=1024, max_new_tokens=32, length_spread=0.5, modes=("cdb",))
        by = {r.mode: r for r in simulate(cfg, load_profile(profile)).results}
        assert by["cdb"].knobs["prefill_chunk"] == 0 and by["cdb"].bounds.speedup > 1.0, \
            (profile, by["cdb"])


def test_lookahead_costs_a_simulated_trace_the_loop_it_costs_the_engine():
    """With lookahead the stop after loop t is read from loop t-1's signal, so a token runs one
    loop past where its signal fires (capped at max depth): a synthetic trace's draws are where
    the signal fires, and with lookahead every simulated token runs that extra loop; replayed
    exits and fixed:K are kept as they are."""
    from depthbench.exits import parse_exit
    plain = parse_exit("trace:2.5", 1, 4, False, 0)
    ahead = parse_exit("trace:2.5", 1, 4, True, 0)
    pairs = [(plain.start_depth(i, t), ahead.start_depth(i, t)) for i in range(50) for t in range(20)]
    assert all(b == min(a + 1, 4) for a, b in pairs)
    assert parse_exit("fixed:3", 1, 4, True).start_depth(0, 0) == 3
    cfg = SimConfig(random="ouro-like", exit="trace:2.5", max_depth=4, requests=32,
                    modes=("cdb",))
    off = {r.mode: r for r in simulate(cfg, load_profile("h100")).results}["cdb"]
    on = {r.mode: r for r in simulate(cfg.replace(lookahead=True), load_profile("h100")).results}["cdb"]
    assert on.mean_depth > off.mean_depth + 0.5 and on.tokens_per_s < off.tokens_per_s


@pytest.mark.parametrize("command", [
    ["serve-sim", "--random", "ouro-like", "--max-depth", "4", "--exit", "trace:2",
     "--requests", "24", "--modes", "static,cdb", "--profile", "h100"],
    ["serve-bench", "--random", "ouro-like", "--set", "d_model=32", "--set", "n_heads=4",
     "--max-depth", "4", "--exit", "argmax:2", "--requests", "12", "--width", "4",
     "--modes", "static,cdb"]])
@pytest.mark.slow
def test_serving_counts_every_token_it_emits_on_its_progress_bar(command, tmp_path, monkeypatch):
    # interleaved on the real engine, one mode after another in the simulator: each bar (one per
    # side-by-side run, the baseline's knob search included) ends at its total, every token of
    # its requests (the default ignores EOS), and the reported modes' tokens are among them
    import depthbench.serving.compare as compare
    made = []

    class Bar:
        def __init__(self, total, desc, unit="it"):
            self.total, self.n = total, 0
            made.append(self)

        def update(self, n=1):
            self.n += n

        def __enter__(self):
            return self

        def __exit__(self, *a):
            pass

    monkeypatch.setattr(compare, "progress_bar", Bar)
    r = CliRunner().invoke(main, command + ["--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert made and all(b.n == b.total > 0 for b in made)
    assert sum(b.n for b in made) >= sum(x["output_tokens"] for x in rows) > 0
