"""Paged KV: admission by free blocks, preemption with recompute, and what the simulator reports.

Oracles: block arithmetic by hand; plain greedy generation (a preempted request recomputed at
full depth emits what it would have emitted unpreempted); the whole-length reservation where the
pool has room for everything (paging then changes nothing); the ideal time of the work (no mode
beats its bound, preempted or not)."""

from dataclasses import replace

import pytest
from click.testing import CliRunner
from test_serving import greedy, model_of, workload

from depthbench.cli.main import main
from depthbench.config import SimConfig
from depthbench.exits import parse_exit
from depthbench.serving.batching import Batching
from depthbench.serving.engine import Engine
from depthbench.serving.memory import BlockPool, kv_bytes, weight_bytes
from depthbench.serving.profile import kv_blocks_that_fit, load_profile
from depthbench.serving.scheduler import Scheduler
from depthbench.serving.sim import simulate


def test_a_block_pool_counts_blocks_by_hand_and_takes_nothing_it_cannot_hold():
    pool = BlockPool(10, 4, watermark=0.1)   # a watermark of 1 block
    assert [pool.blocks(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert pool.can_admit(40, alone=True) and not pool.can_admit(40, alone=False)
    assert pool.take(7, 9) and pool.free == 7 and pool.held == {7: 3}
    assert pool.take(7, 12) and pool.free == 7          # position 12 still in its third block
    assert pool.take(7, 13) and pool.free == 6
    assert not pool.take(8, 28) and pool.free == 6 and 8 not in pool.held   # 7 blocks: refused whole
    assert pool.can_admit(20, alone=False) and not pool.can_admit(21, alone=False)
    assert pool.take(8, 24) and pool.free == 0 and pool.peak == 10
    pool.release(7)
    assert pool.free == 4 and pool.held == {8: 6} and pool.peak == 10
    pool.release(7)   # twice: nothing more
    assert pool.free == 4


@pytest.mark.parametrize("mode", ["static", "static_lockstep", "no_refill", "cdb"])
def test_preempted_requests_recomputed_at_full_depth_emit_what_greedy_generation_does(mode):
    """A pool of 7 blocks of 4 positions holds two of these requests (prompts of 4-6 tokens, 6
    new) at once: the scheduler preempts, recomputes from prompt and output so far, and every
    request's tokens are still plain greedy generation's at max depth."""
    model = model_of(n_prelude=1, n_core=2, n_coda=1, init_state="random", injection="add")
    eng = Engine(model, parse_exit("fixed:4", max_depth=4), "depth_indexed", 6, 64)
    eng.blocks = BlockPool(7, 4, watermark=0.0)
    sched = Scheduler(eng, mode, Batching(3, admit_min=1, pool=6 if mode in ("static", "cdb") else 0))
    done = sched.run([q.fresh() for q in workload(n=6, new=6)])
    assert sched.preemptions > 0 and eng.blocks.peak <= 7 and eng.blocks.free == 7
    for q in done:
        assert len(q.output) == 6 and q.output == greedy(model, q.prompt, 6, 4), q.id
        assert set(q.depths) == {4}


def _small(memory: float):
    return replace(load_profile("h100"), memory=memory)


HUGE = SimConfig(random="huginn-like", exit="trace:8", max_depth=16, width=32, pool=256,
                 requests=96, prompt_len=512, max_new_tokens=64, length_spread=0.5,
                 modes=("static", "no_refill", "cdb", "static_lockstep"))


def test_paged_kv_under_pressure_preempts_serves_every_token_and_stays_under_its_bound():
    """On 40 GB, blocks of 16 positions of these 512-token prompts hold about 40 requests; the
    pool asks for 256. Every mode admits by blocks, preempts, recomputes and still generates
    every request's tokens; none holds more blocks than fit, and none beats the ideal time of
    its work."""
    shape, prof = HUGE.model_config(), _small(40e9)
    longest = 512 + 64 * 3 // 2 + 1
    n = kv_blocks_that_fit(shape, prof, HUGE.kv_policy, 16, 16, longest)
    per_block = kv_bytes(shape, HUGE.kv_policy, 16, 1, 16, 2)
    assert n == int((40e9 * 0.9 - weight_bytes(shape, 2)) // per_block)
    res = simulate(HUGE, prof)
    want = [len(o) for o in res.outputs["static_lockstep"]]
    by = {r.mode: r for r in res.results}
    for mode, r in by.items():
        assert r.kv_blocks == n and r.kv_peak_blocks <= n, mode
        assert r.kv_cache_mb * 2**20 == pytest.approx(r.kv_peak_blocks * per_block)
        assert [len(o) for o in res.outputs[mode]] == want, mode
        assert 0 < r.bounds.fraction <= 1.02, (mode, r.bounds.fraction)
    assert by["cdb"].preemptions > 0 and by["static"].preemptions > 0


def test_paged_kv_with_room_for_every_request_changes_nothing():
    """With room for every request's whole sequence, admission by blocks never waits and nothing
    is preempted: each mode's row is the whole-length reservation's, but for its KV fields."""
    cfg = HUGE.replace(requests=24, prompt_len=64, max_new_tokens=16, pool=0)
    paged, whole = simulate(cfg, load_profile("h100")), simulate(cfg.replace(kv_block=0),
                                                                load_profile("h100"))
    kv = ("kv_blocks", "kv_peak_blocks", "kv_cache_mb", "kv_rows_fit")
    for a, b in zip(paged.results, whole.results):
        assert a.preemptions == 0 and a.kv_blocks and b.kv_blocks is None
        a, b = a.to_dict(), b.to_dict()
        assert {k: v for k, v in a.items() if k not in kv} == {k: v for k, v in b.items() if k not in kv}


def test_serve_sim_reports_preemptions_and_refuses_a_bad_block_size():
    args = ["serve-sim", "--random", "huginn-like", "--exit", "trace:8", "--width", "32",
            "--pool", "256", "--requests", "96", "--prompt-len", "512", "--max-new-tokens", "64",
            "--modes", "cdb", "--profile"]
    r = CliRunner().invoke(main, args + ["h100"])
    assert r.exit_code == 0, r.output
    header = next(x for x in r.output.splitlines() if x.split()[:1] == ["mode"])
    assert "preemptions (recomputed): " in r.output and header.split()[-1] == "preemptions"
    r = CliRunner().invoke(main, args + ["h100", "--kv-block", "-3"])
    assert r.exit_code == 2 and "--kv-block" in r.stderr and r.stderr.count("\n") == 1
