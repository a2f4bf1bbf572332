"""Where a grid of tiny runs spends its time, and what each candidate fast path buys, measured
side by side in one process (ratios; this machine is shared and absolute times vary):

(a) one tiny training step (forward, backward, clipping, AdamW; the tiny preset's shape, batch
    64, sequences of 22 tokens) at K = 8: eager fp32 (today's path), per-block
    ``torch.compile``, bf16 autocast; and the share of the eager step spent in matmuls
    (``torch.profiler``) against the same-process matmul peak;
(b) stacking N members of a grid into one batched op (what a stacked model would do): per
    member, the time of the step's elementwise work (a multiply of the activation's shape) and
    of its largest matmul (``bmm`` over N members) at N = 1, 4, 12.

(c) the grid through ``depthbench run``, side by side: the quickstart grid (3 schedules x 8
    seeds, 200 steps, tiny, full backprop) with ``[run] share_prefixes = false`` (every run from
    step 0, the path before shared prefixes) against the default (fixed-first:0.8:4 starts from
    fixed:4's checkpoint at its switch); wall seconds, runs per minute, modeled training FLOPs
    per second against the cores' matmul peak, peak RSS of one process, at 2 workers of one
    thread (the pipeline's default on 2 cores) and 1 worker of 2 threads; the two grids' result
    rows are compared (clocks aside) and must be equal.

    python benchmarks/bench_grid.py [--threads 1 2] [--steps 10]     (a) and (b); with
        --json-out docs/benchmarks/step.json the step's profile is kept with its rows
    python benchmarks/bench_grid.py --grid [--grid-steps 200] [--grid-seeds 8] [--workers 2 1]
    python benchmarks/bench_grid.py --shared-work [SPEC ...]   the share of each packaged spec's
        training work (loop-steps) that shared prefixes train once (planned, nothing trained)
    python benchmarks/bench_grid.py --against 376558b [--grid-seeds 4]   (d) this code's grid
        against the same grid run by the code of an earlier commit (``git archive``), both
        through ``depthbench run``, alternating, in fresh processes: wall seconds and the ratio

Stacking pays where per-op overhead dominates; at this shape on a CPU the eager step's matmuls
already run near the machine's matmul peak, so the benchmark says how much is left to win.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_rows import Parser, add_args, count, from_kept, keep

from depthbench.config import tiny_model
from depthbench.models.looped import LoopedTransformer

B, T, V = 64, 22, 201


def _timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def step_fn(compile_blocks: bool = False, bf16: bool = False, K: int = 8):
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model().replace(vocab_size=V)).train()
    if compile_blocks:
        for b in model.core:
            b.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, V, (B, T + 1))

    def one():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x[:, :-1], n_loops=K)
            loss = F.cross_entropy(logits.float().reshape(-1, V), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return one


def step_profile(one, top: int = 12) -> tuple[float, dict]:
    """``torch.profiler`` of three steps: the matmuls' share of the step's self CPU time, and
    the ``top`` operators by self CPU time with their shares (the step profile kept with the
    benchmark's rows)."""
    from torch.profiler import profile
    with profile() as p:
        for _ in range(3):
            one()
    ev = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ev)
    mm = sum(e.self_cpu_time_total for e in ev if e.key in ("aten::mm", "aten::bmm", "aten::addmm"))
    return mm / total, {e.key: e.self_cpu_time_total / total for e in ev[:top]}


def _top_ops(profile: dict, n: int) -> str:
    """The first ``n`` operators of a step profile with their shares, as the output reads them."""
    return ", ".join(f"{k.removeprefix('aten::')} {100 * v:.0f}%" for k, v in list(profile.items())[:n])


def _stage_words(stages: dict) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(stages.items()))


def peak(n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n ** 3 / _timed(lambda: a @ b, 10)


def section_a(steps: int) -> dict:
    eager = step_fn()
    out = {"eager_ms": 1e3 * _timed(eager, steps)}
    out["compile_blocks_ms"] = 1e3 * _timed(step_fn(compile_blocks=True), steps)
    out["bf16_autocast_ms"] = 1e3 * _timed(step_fn(bf16=True), steps)
    out["matmul_share_of_eager"], out["eager_profile"] = step_profile(eager)
    d, ff, K = 64, 256, 8
    flops = 3 * K * 2 * B * T * d * (3 * d + d + 2 * ff) + 3 * 2 * B * T * d * V
    out["eager_matmul_gflops"] = flops / (out["eager_ms"] * 1e-3 * out["matmul_share_of_eager"]) / 1e9
    out["peak_gflops"] = peak() / 1e9
    return out


def section_b() -> dict:
    out = {}
    for n in (1, 4, 12):
        a, b = torch.randn(n * B * T, 64), torch.randn(n * B * T, 64)
        x, w = torch.randn(n, B * T, 64), torch.randn(n, 64, 768)
        out[n] = {"elementwise_us_per_member": 1e6 * _timed(lambda a=a, b=b: a * b, 200) / n,
                  "bmm_us_per_member": 1e6 * _timed(lambda x=x, w=w: torch.bmm(x, w), 50) / n}
    return out


def _toml(spec: dict) -> str:
    """A spec as TOML (its tables hold numbers, strings, booleans, lists and inline tables)."""
    def value(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)
    lines = [f"{k} = {value(v)}" for k, v in spec.items() if not isinstance(v, dict)]
    for name, table in spec.items():
        if isinstance(table, dict):
            lines += ["", f"[{name}]", *(f"{k} = {value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def _run_argv(spec: dict, d: Path) -> list[str]:
    """``depthbench run`` of ``spec`` in the emptied directory ``d`` (its spec file, dataset,
    runs and report all under ``d``), as a command line."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "spec.toml").write_text(_toml({**spec, "report": {"out": str(d / "report")}}))
    return [sys.executable, "-m", "depthbench", "run", str(d / "spec.toml"), "--out", str(d / "exp")]


def _grid_once(spec: dict, work: Path, tag: str) -> dict:
    """One ``depthbench run`` of ``spec`` in a fresh process: wall seconds, the largest RSS of
    any of its processes, and its result rows without the clocks."""
    d = work / tag
    argv = _run_argv(spec, d)
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(time.perf_counter() - t, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *argv], check=True,
                         capture_output=True, text=True).stdout.split()
    clocks = ("wall_clock", "cpu_clock", "wall_clock_s", "cpu_s", "train_cpu_s", "checkpoint")
    rows = {f.relative_to(d / "exp").as_posix(): [
        {k: v for k, v in json.loads(line).items() if k not in clocks}
        for line in f.read_text().splitlines()]
        for f in sorted((d / "exp" / "results").glob("*/*.jsonl"))}
    flops = sum(json.loads(f.read_text().splitlines()[-1])["modeled_train_flops"]
                for f in (d / "exp" / "results" / "runs").glob("*.jsonl"))
    return {"seconds": float(out[0]), "peak_rss_mb": int(out[1]) / 1024, "rows": rows,
            "runs": len(list((d / "exp" / "runs").iterdir())), "train_flops": flops}


def section_c(steps: int, seeds: int, workers: list[int], rounds: int) -> dict:
    import tomllib

    from depthbench.pipeline.spec import spec_path
    spec = tomllib.loads(Path(spec_path("quickstart")).read_text())
    spec["train"].update(steps=steps, seeds=list(range(seeds)))
    spec["serve"] = {"enabled": False}
    spec["report"] = {}
    res, peak2 = {}, 2 * peak()
    with tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            got = {"off": [], "on": []}
            for r in range(rounds):   # alternate the order, so that drift favours neither
                for share in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    s = {**spec, "run": {"workers": w, "share_prefixes": share == "on"}}
                    got[share].append(_grid_once(s, Path(tmp), f"w{w}-{share}-{r}"))
            same = all(a["rows"] == b["rows"] for a, b in zip(got["off"], got["on"]))
            out = {}
            for share, runs in got.items():
                sec = min(g["seconds"] for g in runs)
                out[share] = {"seconds": sec, "runs_per_minute": 60 * runs[0]["runs"] / sec,
                              "train_flops_per_s_of_peak": runs[0]["train_flops"] / sec / peak2,
                              "peak_rss_mb": max(g["peak_rss_mb"] for g in runs)}
            out["speedup"] = out["off"]["seconds"] / out["on"]["seconds"]
            out["rows_equal"] = same
            res[w] = out
            print(f"(c) {len(spec['train']['schedules'])} schedules x {seeds} seeds x {steps} "
                  f"steps, {w} worker(s) of {2 // w} thread(s), best of {rounds}: every run from "
                  f"step 0 {out['off']['seconds']:.1f} s ({out['off']['runs_per_minute']:.1f} "
                  f"runs/min), shared prefixes {out['on']['seconds']:.1f} s "
                  f"({out['on']['runs_per_minute']:.1f} runs/min): {out['speedup']:.2f}x; modeled "
                  f"training FLOPs/s {100 * out['off']['train_flops_per_s_of_peak']:.1f}% -> "
                  f"{100 * out['on']['train_flops_per_s_of_peak']:.1f}% of 2 cores' matmul peak; "
                  f"peak RSS {out['on']['peak_rss_mb']:.0f} MB; rows equal: {same}", flush=True)
    return res


# (d): settings the code at 376558b reads too (no keys it lacks), spelled out, so that both codes
# train the same model on the same task: the presets changed since (376558b's tiny model
# backpropagated through the last 4 loops only and injected by concatenation; its tiny task had
# 256 people and 5 attributes of 16,384 values, today's has 768 and 6 of 256), and a preset's
# defaults would compare two workloads, not two codes. What still differs is what each code
# measures: this code asks each person's held-out facts from the name alone (2 rows a person on
# this task where 376558b evaluated 1), so its eval and probe read twice the rows.
AGAINST_SPEC = {
    "name": "grid-bench",
    "data": {"preset": "tiny", "seed": 0, "set": {
        "n_people": 256, "attributes": ",".join(f"{a}:16384" for a in (
            "birth_city", "employer", "university", "major", "birth_date"))}},
    "train": {"preset": "tiny", "schedules": ["fixed:4", "fixed-first:0.8:4:1-16", "uniform:1-16"],
              "set": {"n_grad_loops": 0, "injection": "add"}},
    "eval": {"depths": "1-16", "splits": ["eval_reordered", "eval_seen_order",
                                          "eval_unseen_people"], "switch_checkpoints": [0]},
    "probe": {"enabled": True, "depth_a": 4, "depth_b": 16, "batches": 6, "max_people": 128},
    "serve": {"enabled": False},
    "run": {"workers": 2},
}


def _timed_grid(code: Path, spec: dict, work: Path) -> tuple[float, dict]:
    """Wall seconds of ``depthbench run`` of ``spec`` with the package at ``code`` first on the
    path, in a fresh process (its own dataset, runs and report under ``work``), and its stage
    seconds summed by command where its stage markers record them (376558b's do not)."""
    import os
    argv = _run_argv(spec, work)
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=work, env=env, stdout=subprocess.DEVNULL)
    wall, by = time.perf_counter() - t0, {}
    for f in (work / "exp" / "stages").glob("*.json"):
        rec = json.loads(f.read_text())
        if rec.get("seconds") is not None:
            by[rec["command"]] = by.get(rec["command"], 0.0) + rec["seconds"]
    return wall, by


# the tiny presets' task and recipe as they were at the commit compared against: a code whose
# presets moved on (the tiered task at Table 3's recipe) is given them back key by key, so both
# codes train the same model on the same task (an older code knows none of these keys)
EARLIER_PRESETS = {"data": {"exposure": 1},
                   "train": {"lr": 3e-3, "decay_frac": 0.2, "init_loops": 4}}


def spec_for(code: Path, spec: dict) -> dict:
    """``spec`` with the earlier presets pinned where ``code``'s own presets moved on."""
    cfg = (code / "data_gen" / "config.py").read_text()
    if "return GenConfig(n_people=256, exposure=" not in cfg:   # its presets are the earlier ones
        return spec
    out = json.loads(json.dumps(spec))
    for section, keys in EARLIER_PRESETS.items():
        out[section]["set"] = {**keys, **out[section].get("set", {})}
    return out


def _commit(text: str) -> str:
    """An argparse type: a commit of this checkout's history (``git archive`` reads it)."""
    import argparse
    root = Path(__file__).resolve().parents[1]
    got = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet",
                          f"{text}^{{commit}}"], capture_output=True, text=True)
    if got.returncode:
        raise argparse.ArgumentTypeError(f"{text} is not a commit of {root}'s history (a clone "
                                         "without it: git fetch --unshallow)")
    return text


def section_d(commit: str, steps: int, seeds: int, rounds: int) -> dict:
    """This checkout's grid against the code of ``commit``, side by side (best of ``rounds``,
    the order alternating so that drift favours neither)."""
    root = Path(__file__).resolve().parents[1]
    spec = json.loads(json.dumps(AGAINST_SPEC))
    spec["train"].update(steps=steps, seeds=list(range(seeds)))
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "code"
        old.mkdir()
        tar = subprocess.run(["git", "-C", str(root), "archive", commit], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
        got = {"then": [], "now": []}
        for r in range(rounds):
            for which in (("then", "now") if r % 2 == 0 else ("now", "then")):
                code = old if which == "then" else root
                got[which].append(_timed_grid(code, spec_for(code, spec), Path(tmp) / f"{which}-{r}"))
                print(f"(d) {which}: {got[which][-1][0]:.1f} s", flush=True)
    (then, _), (now, stages) = (min(got[w], key=lambda g: g[0]) for w in ("then", "now"))
    out = {"commit": commit, "steps": steps, "seeds": seeds, "schedules": 3, "rounds": rounds,
           "then_s": then, "now_s": now, "speedup": then / now, "now_stage_s": stages}
    print(f"(d) 3 schedules x {seeds} seeds x {steps} steps, 2 workers: the code at {commit} "
          f"{then:.1f} s, this code {now:.1f} s: {out['speedup']:.2f}x; this code's stage "
          f"seconds {_stage_words(stages)}", flush=True)
    return out


def shared_work(names: list[str]) -> dict:
    """Per spec: the loop-steps (steps x depth) of its training runs, and the share of them
    that lie in a shared prefix (``start_step``) and so are trained once, from the planned
    stages (a compute-matched run at the steps its match resolves to)."""
    from depthbench.config import TrainJob, resolve_presets
    from depthbench.data_gen import resolve_config
    from depthbench.pipeline.grid import Grid
    from depthbench.pipeline.spec import load_spec
    from depthbench.pipeline.steps import matched_steps_of
    from depthbench.schedules import parse_schedule
    out = {}
    for name in names:
        spec = load_spec(name)
        gen = resolve_config(spec.data.preset, overrides=spec.data.set, seed=spec.data.seed)
        trains, matched = Grid(spec, Path(tempfile.gettempdir()) / "plan").train_stages(gen)
        steps_of = matched_steps_of(gen, resolve_presets(spec.train.preset, spec.train.set)[0],
                                    trains)
        total = once = 0
        for st in trains + matched:
            job = TrainJob.from_dict(st.config)
            n = steps_of(job) if job.match_flops else job.train.steps
            k = parse_schedule(job.schedule).depths(n, job.train.seed)
            total, once = total + int(k.sum()), once + int(k[:job.start_step].sum())
        out[name] = {"loop_steps": total, "shared": once / total}
        print(f"{name}: {100 * once / total:.1f}% of {total} loop-steps lie in shared prefixes",
              flush=True)
    return out


SHARED_SPECS = ["quickstart", "table3", "matched", "budgets"]


def readme_cell(res: dict) -> str:
    """The README's figures of a ``--grid`` run (``bench_rows``): the grid at each worker count,
    and the shared-prefix shares of the packaged specs' training work; of an ``--against`` run,
    the two codes' seconds and their ratio; of the step sections, per thread count the eager
    step, its fast paths' ratios, its matmuls against the peak and its top operators."""
    if "step" in res:
        parts = []
        for th, r in res["step"].items():
            a = r["a"]
            top = _top_ops(a["eager_profile"], 6)
            parts.append(f"{th} thread{'s' if th != '1' else ''}: eager {a['eager_ms']:.1f} ms/step, "
                         f"compiled blocks {a['eager_ms'] / a['compile_blocks_ms']:.2f}x, bf16 "
                         f"{a['eager_ms'] / a['bf16_autocast_ms']:.2f}x; matmuls "
                         f"{100 * a['matmul_share_of_eager']:.0f}% of the step at "
                         f"{a['eager_matmul_gflops']:.0f} of a {a['peak_gflops']:.0f} GFLOP/s peak; "
                         f"self CPU time: {top}")
        return "; ".join(parts)
    if "against" in res:
        a = res["against"]
        stages = _stage_words(a.get("now_stage_s", {}))
        return (f"{a['schedules']} schedules x {a['seeds']} seeds x {a['steps']} steps on 2 workers: "
                f"{a['then_s']:.1f} s at {a['commit']}, {a['now_s']:.1f} s now, {a['speedup']:.2f}x"
                + (f" (this code's stage seconds: {stages})" if stages else ""))
    parts = []
    for w, r in res["grid"].items():
        w = int(w)
        off, on = r["off"], r["on"]
        head = (f"{w} worker{'s' if w > 1 else ''} of {2 // w} thread{'s' if 2 // w > 1 else ''}: "
                f"{off['seconds']:.1f} s against {on['seconds']:.1f} s, {r['speedup']:.2f}x")
        if not parts:   # the first worker count in full
            head += (f" ({off['runs_per_minute']:.1f} and {on['runs_per_minute']:.1f} runs/min; "
                     f"modeled training FLOPs {100 * off['train_flops_per_s_of_peak']:.1f}% and "
                     f"{100 * on['train_flops_per_s_of_peak']:.1f}% of the 2 cores' matmul peak; "
                     f"peak RSS {max(off['peak_rss_mb'], on['peak_rss_mb']) / 1024:.1f} GB)")
        parts.append(head)
    equal = all(r["rows_equal"] for r in res["grid"].values())
    parts.append("result rows equal" if equal else "result rows DIFFER")
    shares = ", ".join(f"{k} {100 * v['shared']:.1f}%" for k, v in res["shared_work"].items())
    return "; ".join(parts) + f"; {shares} of loop-steps in shared prefixes"


def main():
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=count(), nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=count(), default=10)
    ap.add_argument("--grid", action="store_true", help="(c): the grid through depthbench run")
    ap.add_argument("--grid-steps", type=count(), default=200)
    ap.add_argument("--grid-seeds", type=count(), default=8)
    ap.add_argument("--workers", type=count(), nargs="+", default=[2, 1])
    ap.add_argument("--rounds", type=count(), default=1)
    ap.add_argument("--against", metavar="COMMIT", type=_commit,
                    help="(d): the grid against the code of "
                    "COMMIT (with --grid-steps and --grid-seeds; default 4 seeds)")
    ap.add_argument("--shared-work", nargs="*", metavar="SPEC", help="the share of each spec's "
                    "training work in shared prefixes (default: the packaged CPU specs)")
    add_args(ap)
    args = ap.parse_args()
    if from_kept(args, readme_cell):
        return
    if args.shared_work is not None:
        from depthbench.pipeline.spec import SpecError, load_spec
        names = args.shared_work or ["quickstart", "table3", "matched", "budgets", "fixed-depths"]
        for name in names:
            try:
                load_spec(name)
            except SpecError as e:
                ap.error(f"--shared-work: {e}")
        shared_work(names)
        return
    if args.against:
        seeds = 4 if "--grid-seeds" not in sys.argv else args.grid_seeds
        keep(args, {"against": section_d(args.against, args.grid_steps, seeds, args.rounds)},
             readme_cell)
        return
    if args.grid:
        torch.set_num_threads(1)
        res = section_c(args.grid_steps, args.grid_seeds, args.workers, args.rounds)
        print(json.dumps({w: {k: v for k, v in r.items()} for w, r in res.items()}))
        keep(args, {"args": {k: str(v) for k, v in vars(args).items()},
                    "grid": {str(w): r for w, r in res.items()},
                    "shared_work": shared_work(SHARED_SPECS)}, readme_cell)
        return
    res = {}
    for th in args.threads:
        torch.set_num_threads(th)
        a, b = section_a(args.steps), section_b()
        res[th] = {"a": a, "b": b}
        print(f"threads {th}: (a) eager {a['eager_ms']:.1f} ms/step; per-block compile "
              f"{a['eager_ms'] / a['compile_blocks_ms']:.2f}x; bf16 autocast "
              f"{a['eager_ms'] / a['bf16_autocast_ms']:.2f}x; matmuls "
              f"{100 * a['matmul_share_of_eager']:.0f}% of the eager step at "
              f"{a['eager_matmul_gflops']:.0f} GFLOP/s against a {a['peak_gflops']:.0f} GFLOP/s "
              "peak", flush=True)
        print("  eager step by operator (self CPU): " + _top_ops(a["eager_profile"], 12))
        for n, r in b.items():
            print(f"  (b) {n:>2} members stacked: elementwise {r['elementwise_us_per_member']:.1f} "
                  f"us/member, matmul {r['bmm_us_per_member']:.0f} us/member", flush=True)
    print(json.dumps(res))
    keep(args, {"step": {str(th): r for th, r in res.items()}}, readme_cell)


if __name__ == "__main__":
    main()
