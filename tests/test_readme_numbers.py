"""The README's prose numbers, rebuilt from the committed rows they were read from.

The tables are checked beside the reports (tests/test_pipeline.py); this module checks the
sentences: each phrase below is computed from `reports/*/rows` or `docs/calibration/runs.jsonl`
and must appear in the README as written (whitespace aside). A rerun that moves a number
fails here until the README says what the rows say."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from depthbench.report import _comparisons, _final, arm_label
from depthbench.stats import paired_differences, t_interval

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
UNIFORM, FF8, FF67, FIXED4 = ("uniform:1-16", "fixed-first:0.8:4:1-16",
                              "fixed-first:0.67:4:1-16", "fixed:4")
MATCHED = "uniform:1-16~fixed-first:0.67:4:1-16"
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def readme() -> str:
    return " ".join((ROOT / "README.md").read_text().split())


def quoted(*phrases: str) -> None:
    text = readme()
    for p in phrases:
        p = " ".join(p.split())
        assert p in text, f"the README should say: {p}"


def final_eval(name: str, split: str = "eval_reordered") -> pd.DataFrame:
    ev = pd.read_csv(REPORTS / name / "rows" / "eval.csv")
    if "matched_to" in ev.columns:
        ev["schedule"] = [arm_label(s, m) for s, m in zip(ev["schedule"], ev["matched_to"])]
    ev = _final(ev)
    return ev[ev["split"] == split]


def runs(name: str) -> pd.DataFrame:
    r = pd.read_csv(REPORTS / name / "rows" / "run.csv")
    if "matched_to" in r.columns:
        r["schedule"] = [arm_label(s, m) for s, m in zip(r["schedule"], r["matched_to"])]
    return r


def primary(ev: pd.DataFrame) -> dict:
    """Each primary comparison decided in advance, by (budget, schedule)."""
    c = _comparisons(ev, None)
    return {(r["budget"] if pd.notna(r["budget"]) else None, r["schedule"]): r
            for _, r in c[c["summary"] == "primary"].iterrows()}


def ci(r, digits: int = 3) -> str:
    return f"{r['diff']:+.{digits}f} [{r['lo']:+.{digits}f}, {r['hi']:+.{digits}f}]"


def spans(depths) -> str:
    """[4, 5, 6] -> '4 to 6', [1] -> '1': the README names one contiguous run of depths."""
    depths = sorted(depths)
    assert depths == list(range(depths[0], depths[-1] + 1)), depths
    return f"{depths[0]} to {depths[-1]}" if len(depths) > 1 else f"{depths[0]}"


def test_quickstart_prose():
    ev = final_eval("quickstart")
    mean = ev.groupby(["schedule", "depth"])[["bits_per_person", "exact_match"]].mean()
    bits = mean["bits_per_person"].unstack(0)
    best = mean["bits_per_person"].idxmax()
    ceiling = ev["ceiling_bits"].iloc[0]
    n = ev["seed"].nunique()
    flops = ev.groupby("schedule")["modeled_train_flops"].mean()
    d = paired_differences(ev, "bits_per_person", UNIFORM)
    d = d[d["schedule"] == FF8]
    r = runs("quickstart")
    ff = r[r["schedule"] == FF8]
    t3 = primary(final_eval("table3"))[(None, FF8)]
    m = final_eval("matched")
    m4 = m[m["depth"] == 4].groupby("schedule")["bits_per_person"].mean()
    msteps = runs("matched").query("schedule == @MATCHED")["steps"].mean()
    quoted(
        f"the best reading is {100 * mean['bits_per_person'].max() / ceiling:.0f}% of the ceiling "
        f"(`{best[0]}` at its training depth {best[1]})",
        f"is {ev['floor_bits_per_person'].iloc[0]:.1f} bits (EM "
        f"{ev['floor_exact_match'].iloc[0]:.3f}, chance)",
        f"`fixed-first:0.8` reads about what `uniform:1-16` reads at "
        f"{100 * flops[FF8] / flops[UNIFORM]:.0f}% of its modeled FLOPs",
        f"the exact-match difference averaged over depths 1-16 is {ci(t3)}, higher on "
        f"{t3['higher']} of {t3['seeds']}",
        f"Per depth it is above uniform from depth {spans(d.loc[d['sign'] > 0, 'depth'])} and "
        f"below at depth {spans(d.loc[d['sign'] < 0, 'depth'])} ({bits.loc[1, FF8]:.1f} against "
        f"{bits.loc[1, UNIFORM]:.1f} bits, {n} seeds)",
        f"the finishing phase of {int((ff['steps'] - ff['switch_step']).iloc[0])} steps",
        f"`fixed:4` recalls the most at its training depth ({bits.loc[4, FIXED4]:.1f} bits) and "
        f"collapses away from it ({bits.loc[1, FIXED4]:.1f} bits at depth 1, "
        f"{bits.loc[16, FIXED4]:.1f} at depth 16",
        f"(about {round(msteps, -1):.0f} steps) reads {m4[MATCHED]:.0f} bits at depth 4 against "
        f"full-budget uniform's {m4[UNIFORM]:.0f}")


def test_table3_and_matched_prose():
    ev = final_eval("table3")
    c = primary(ev)
    per = ev.groupby(["schedule", "seed"])[["nll", "modeled_train_flops"]].mean()
    arm = per.groupby("schedule").mean()
    nll = 100 * (arm["nll"] / arm.loc[UNIFORM, "nll"] - 1)
    flops = 100 * arm["modeled_train_flops"] / arm.loc[UNIFORM, "modeled_train_flops"]
    r = runs("table3")
    cpu = r.groupby("schedule")["cpu_s"].mean()
    cut = 100 * (1 - cpu / cpu[UNIFORM])
    steps = r.loc[r["schedule"] == MATCHED, "steps"]
    mt, f67, f8 = c[(None, MATCHED)], c[(None, FF67)], c[(None, FF8)]
    assert mt["higher"] == 0 and f67["higher"] == f67["seeds"]
    quoted(
        f"{steps.min()}-{steps.max()} steps by seed",
        f"On every seed, by {-mt['diff']:.2f} exact match; its mean serving NLL is "
        f"{nll[MATCHED]:.0f}% above uniform's, against the paper's 5.1%",
        f"(mean serving NLL {nll[FF67]:+.1f}%, exact match {f67['diff']:+.3f} on "
        f"{f67['higher']} of {f67['seeds']} seeds, Holm p {f67['p_holm']:.3f})",
        f"The 80% schedule's NLL is {nll[FF8]:.1f}% above uniform's, and its exact-match "
        f"difference, {ci(f8)}, is undecided",
        f"{flops[FF67]:.1f}% and {flops[FF8]:.1f}% of uniform's modeled FLOPs against the paper's "
        "68.7% and 62.4%",
        f"CPU time falls by {cut[FF67]:.0f}% and {cut[FF8]:.0f}%",
        # the matched experiment's paragraph quotes Table 3's 8 seeds
        f"the matched run is below full-budget uniform by {-mt['diff']:.3f} exact match averaged "
        f"over depths 1-16, on {mt['seeds'] - mt['higher']} of {mt['seeds']} seeds, and "
        f"`fixed-first:0.67`, at the matched run's FLOPs, is above it by {f67['diff']:.3f} "
        f"({f67['higher']} of {f67['seeds']})")


def test_budget_prose():
    ev = final_eval("budgets")
    c = primary(ev)
    holm = {round(r["p_holm"], 3) for r in c.values()}
    assert len(holm) == 1
    per = ev[ev["depth"] >= 4].groupby(["budget", "schedule", "seed"])["bits_per_person"].mean()
    mean = per.groupby(["budget", "schedule"]).mean()
    r = runs("budgets")
    steps = r.groupby(["budget", "schedule"])["steps"]
    low = r[(r["budget"] == 0.15) & (r["schedule"] != UNIFORM)]["steps"]
    u15 = steps.get_group((0.15, UNIFORM))
    ceiling = ev["ceiling_bits"].iloc[0]
    best = mean.loc[1.0].max()

    def rng(s):
        x = per.loc[(0.15, s)]
        return f"{x.min():.1f}-{x.max():.1f}"
    ff = [c[(b, FF8)] for b in (0.15, 0.45, 1.0)]
    quoted(
        f"steps) reads {rng(UNIFORM)} bits at depths 4-16 by seed, `fixed:4` {rng(FIXED4)} and "
        f"`fixed-first` {rng(FF8)} ({low.min()}-{low.max()} steps for the two); at the full budget "
        f"the best arm reads {best:.1f} of {ceiling:.0f} ({100 * best / ceiling:.0f}%)",
        f"At 15% `uniform:1-16` ({u15.min()}-{u15.max()} steps)",
        f"on {ff[0]['seeds']} paired seeds (exact match averaged over depths 1-16, Holm-corrected "
        f"p {holm.pop():.3f} for each of the {NUMBER_WORDS[len(c)]})",
        f"(+{ff[0]['diff']:.3f} at 15%, +{ff[1]['diff']:.3f} at 45%, +{ff[2]['diff']:.3f} at "
        f"100%; higher on {ff[0]['higher']}, {ff[1]['higher']} and {ff[2]['higher']} of "
        f"{ff[0]['seeds']} seeds)",
        f"`fixed:4` more at 15% (+{c[(0.15, FIXED4)]['diff']:.3f}) but less at 45% and at the full "
        f"budget ({c[(0.45, FIXED4)]['diff']:.3f}, {c[(1.0, FIXED4)]['diff']:.3f})",
        f"`fixed-first` reads {mean[(0.15, FF8)]:.1f} bits at depths 4-16 against uniform's "
        f"{mean[(0.15, UNIFORM)]:.1f} at 15%, {mean[(0.45, FF8)]:.1f} to {mean[(0.45, UNIFORM)]:.1f} "
        f"at 45%, and {mean[(1.0, FF8)]:.1f} to {mean[(1.0, UNIFORM)]:.1f} at the full budget "
        f"(about {round(steps.mean()[(1.0, FF8)], -2):.0f} steps for uniform's "
        f"{round(steps.mean()[(1.0, UNIFORM)], -2):.0f})",
        f"at the full budget the two are {mean[(1.0, FF8)] - mean[(1.0, UNIFORM)]:.1f} bits apart",
        f"depths 4-16 stays near {round(mean.xs(FIXED4, level='schedule').mean()):.0f} bits")
    # every panel between the floor and the ceiling, on every seed
    floor = ev["floor_bits_per_person"].max()
    assert per.min() > floor and per.max() < ceiling
    assert all(r["p_holm"] < 0.05 for r in c.values())


def test_budget_thread_prose():
    """The budget grid's seeds 0 and 1 at 2 threads (reports/budgets-2threads) against the
    same seeds at 1 thread: each comparison's per-seed difference to uniform:1-16."""
    def diffs(name):
        ev = final_eval(name)
        per = ev[ev["seed"].isin([0, 1])].groupby(["budget", "schedule", "seed"])[
            "exact_match"].mean()
        uni = per.xs(UNIFORM, level="schedule")
        return {k: v - uni[(k[0], k[2])] for k, v in per.items() if k[1] != UNIFORM}
    one, two = diffs("budgets"), diffs("budgets-2threads")
    assert set(one) == set(two)
    kept = sum(np.sign(one[k]) == np.sign(two[k]) for k in one)
    moved = max(abs(one[k] - two[k]) for k in one)
    ff = [(0.45, FF8, s) for s in (0, 1)]
    quoted(f"each of the {NUMBER_WORDS[len(one) // 2]} differences keeps its sign on both seeds "
           f"({kept} of {len(one)}), within {moved:.3f} exact match of its 1-thread value (for "
           f"example fixed-first minus uniform at 45%: {two[ff[0]]:+.3f} and {two[ff[1]]:+.3f} "
           f"against {one[ff[0]]:+.3f} and {one[ff[1]]:+.3f})")


def _bench(name: str):
    if str(ROOT / "benchmarks") not in sys.path:   # the scripts import their shared helper
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_shared_prefix_shares():
    """Planned, nothing trained: the share of each packaged spec's loop-steps that the
    pipeline trains once."""
    grid = _bench("bench_grid")
    w = grid.shared_work(grid.SHARED_SPECS)
    kept = json.loads((ROOT / "docs" / "benchmarks" / "grid.json").read_text())["shared_work"]
    assert kept == w, "docs/benchmarks/grid.json's shares are not the packaged specs' (rerun it)"
    pct = {k: f"{100 * v['shared']:.1f}%" for k, v in w.items()}
    quoted(f"this trains once {pct['quickstart']} of `quickstart`'s, {pct['table3']} of "
           f"`table3`'s, {pct['matched']} of `matched`'s and {pct['budgets']} of `budgets`'",
           f"{round(100 * w['budgets']['shared']):.0f}% of the grid's training work")


def calibration_rows() -> list[dict]:
    return [json.loads(x) for x in (ROOT / "docs" / "calibration" / "runs.jsonl").read_text()
            .splitlines() if x.strip()]


def test_calibration_table_is_its_rows():
    cal = _bench("calibrate")
    assert cal.write_table(calibration_rows(), path=None) == cal.TABLE.read_text(), \
        "run python benchmarks/calibrate.py --table-only"


def test_calibration_prose():
    cal = _bench("calibrate")
    rows = calibration_rows()
    s = {(x["recipe"], x["schedule"], x["threads"]): x for x in cal.summarize(rows)}
    old, new = "p512-add", "p512-add-s1500"
    quick = [s[(new, k, 1)] for k in (FIXED4, FF8, FF67, UNIFORM)]
    m = s[(new, MATCHED, 1)]
    quoted(
        f"(`uniform:1-16`'s slowest seed at {100 * s[(old, UNIFORM, 1)]['worst_em']:.0f}% of the "
        "median's depth-averaged exact match, criterion 80%; `fixed:4`'s seed SD "
        f"{s[(old, FIXED4, 1)]['max_sd_pct']:.1f}% of the ceiling, criterion 5%)",
        f"(worst seeds {min(q['worst_em'] for q in quick):.2f}-"
        f"{max(q['worst_em'] for q in quick):.2f} of the median, SD "
        f"{min(q['max_sd_pct'] for q in quick):.1f}-{max(q['max_sd_pct'] for q in quick):.1f}%)",
        f"(worst seed {m['worst_em']:.2f}, SD {m['max_sd_pct']:.1f}%)")
    assert all(q["ok"] for q in quick) and not m["ok"]
    assert not s[(old, UNIFORM, 1)]["ok"] and not s[(old, FIXED4, 1)]["ok"]


def test_budget_floor_calibration_prose():
    """What the calibration rows say of uniform:1-16 at 15% of the budget (depths 4-16)."""
    cal = _bench("calibrate")
    s = {x["recipe"]: x for x in cal.summarize(calibration_rows()) if x["schedule"] == UNIFORM}
    b = {k: f"{s[k]['mean_bits']:.1f}" for k in s if k.startswith("add-s")}
    tried = ("add-s226", "add-s226-lr6e-3", "add-s226-lr1.5e-3", "add-s226-warmup10",
             "add-s226-n256", "add-s226-d128", "add-s226-orders8")
    assert {b[k] for k in tried} == {"0.0"}, b
    ceiling = {s[k]["ceiling"] for k in ("add-s226-n128", "add-s1500-n128")}
    assert ceiling == {42.0}
    quoted(f"and {b['add-s452-batch32']} at the same FLOPs in batches of 32; 452 steps (15% of "
           f"twice the budget) read {b['add-s452']} bits, 678 steps (three times) {b['add-s678']}",
           f"On 128 people it reads {b['add-s226-n128']} bits at 226 steps and "
           f"{b['add-s1500-n128']} of 42 at 1500")


def test_thread_prose():
    """1 against 2 threads per run, seeds 0 and 1 of the adopted recipe."""
    cal = _bench("calibrate")
    rows = [r for r in calibration_rows() if r["recipe"] == "p512-add-s1500" and r["seed"] in (0, 1)]
    by = {(r["schedule"], r["seed"], r["threads"]): r for r in rows}
    moved = {}
    for (sch, seed, th), r in by.items():
        if th == 2:
            one = by[(sch, seed, 1)]
            moved.setdefault(sch, []).append((
                max(abs(a - b) for a, b in zip(r["bits"][3:], one["bits"][3:])),
                abs(cal._mean_em(r) - cal._mean_em(one))))
    worst = {s: max(b for b, _ in v) for s, v in moved.items()}
    top = max(worst, key=worst.get)

    def diff(a, b, seed, th):
        return cal._mean_em(by[(a, seed, th)]) - cal._mean_em(by[(b, seed, th)])
    um = [f"{diff(UNIFORM, MATCHED, s, t):+.3f}" for t in (2, 1) for s in (0, 1)]
    fu = [f"{diff(FF67, UNIFORM, s, t):+.3f}" for t in (2, 1) for s in (0, 1)]
    f8 = {(s, t): f"{diff(FF8, UNIFORM, s, t):+.3f}" for s in (0, 1) for t in (1, 2)}
    rest = max(v for k, v in worst.items() if k != top)
    quoted(
        f"moved by at most {worst[top]:.1f} bits (`{top}`; the other arms at most {rest:.1f}) and "
        f"depth-averaged exact match by at most {max(e for v in moved.values() for _, e in v):.3f}",
        f"(2 threads: {um[0]} and {um[1]}; 1 thread: {um[2]} and {um[3]})",
        f"(+{fu[0].lstrip('+')}, {fu[1]}; 1 thread: {fu[2]}, {fu[3]})",
        f"on seed 0 it is {f8[(0, 1)]} at 1 thread and {f8[(0, 2)]} at 2 (seed 1: {f8[(1, 1)]} and "
        f"{f8[(1, 2)]})",
        f"the 80% difference flips sign on seed 0 ({f8[(0, 1)]} at 1 thread, {f8[(0, 2)]} at 2)")


def test_text_quickstart_prose():
    ev = final_eval("text-quickstart", "validation")
    mean = ev.groupby(["schedule", "depth"])["nll"].mean().unstack(0)
    u = mean[UNIFORM]
    low = sorted(u.index[u.round(4) == u.round(4).min()])
    assert all(g.loc[g["nll"].idxmin(), "depth"] == 4
               for _, g in ev[ev["schedule"] == FIXED4].groupby("seed"))
    per = ev.groupby(["schedule", "seed"])["nll"].mean()
    d = (per[FF8] - per[UNIFORM]).to_numpy()
    m, h, n = t_interval(d)
    mi = ev.groupby(["schedule", "seed"])["cloze_accuracy_mi"].mean()
    arm = mi.groupby("schedule").mean()
    acc = ev.groupby("schedule")["cloze_accuracy"].mean()
    quoted(
        f"its NLL at depth 16 ({u[16]:.3f}) is below its NLL at depth 1 ({u[1]:.3f}), and it is "
        f"lowest at depths {low[0]}-{low[-1]} ({u.min():.3f})",
        f"(mean serving NLL {m:+.3f}, 95% CI [{m - h:+.3f}, {m + h:+.3f}], {n} seeds: undecided",
        f"every schedule reads {arm.min():.2f}-{arm.max():.2f} averaged over depths (chance 0.25",
        f"per seed {mi.min():.2f}-{mi.max():.2f}, {n} seeds",
        f"By summed loglikelihood it reads {acc.mean():.2f}")
    assert np.isclose(acc.round(2), round(acc.mean(), 2), atol=0.005).all()


def test_readme_serving_measurements_are_the_committed_run():
    """The serving figures (a)-(f) are `bench_serve.py --readme` of the committed
    `--json-out` file, line for line."""
    bench = _bench("bench_serve")
    out = json.loads((ROOT / "docs" / "serving" / "bench_serve.json").read_text())
    lines = (ROOT / "README.md").read_text().splitlines()
    for line in bench.readme_lines(out):
        assert line in lines, f"the README should read: {line}"
    every = {k.split("/")[1]: v for k, v in out["gpu_sim"].items()
             if k.startswith("h100/") and k.endswith("=1")}
    quoted(f"On huginn-like the coda every iteration costs `cdb` "
           f"{every['huginn-like']['cdb']['steady_achievable_fraction']:.2f} of the bound",
           f"`no_refill` on huginn-like: "
           f"{every['huginn-like']['no_refill']['paper_fraction']:.2f} of the paper's bound")
    assert (every["huginn-like"]["cdb"]["steady_tokens_per_s"]
            < every["huginn-like"]["no_refill"]["steady_tokens_per_s"]), "below `no_refill`"


def test_readme_cpu_serving_table_is_the_committed_rows():
    bench = _bench("serve_cpu")
    rows = bench.load_rows()
    assert rows, "run python benchmarks/serve_cpu.py"
    lines = (ROOT / "README.md").read_text().splitlines()
    for line in bench.table_lines(rows):
        assert line in lines, f"the README should read: {line}"


def test_readme_cpu_serving_prose():
    rows = _bench("serve_cpu").load_rows()

    def above(setting):
        by = {}
        for r in rows:
            if r["setting"] == setting and r["mode"] in ("cdb", "no_refill"):
                by.setdefault(r["mode"], []).append(r["steady_achievable_fraction"])
        return sum(a > b for a, b in zip(by["cdb"], by["no_refill"])), len(by["cdb"])
    g = above("gpu-defaults")
    quoted(f"With the GPU's defaults `cdb` does not beat `no_refill` ({g[0]} of {g[1]} runs)")
    lines = (ROOT / "README.md").read_text().splitlines()
    for line in _bench("serve_cpu").summary_lines(rows):
        assert line in lines, f"the README should read: {line}"
    day = max(r.get("batch", "")[:10] for r in rows)   # the latest day's runs, as summary_lines
    latest = [r for r in rows if r.get("batch", "").startswith(day) and r["setting"] == "defaults"]
    by = {m: [r["steady_achievable_fraction"] for r in latest if r["mode"] == m]
          for m in ("cdb", "no_refill")}
    quoted(f"at 2 threads, where the process shares a core with one of the serving threads, "
           f"{by['cdb'][-1]:.3f} against {by['no_refill'][-1]:.3f}")
    assert max(r[k] for r in rows for k in r if k.endswith("fraction")) < 1


def test_readme_huginn_larger_pool_stays_within_the_bound():
    """The simulated case where cdb's larger coda batches beat the bound as it was priced
    before (at static's rate), why, and that it stays within the bound priced at the cheapest."""
    import subprocess
    cmd = ["depthbench", "serve-sim", "--random", "huginn-like", "--max-depth", "16", "--exit",
           "trace:4.5", "--profile", "h100", "--requests", "512", "--max-new-tokens", "256",
           "--length-spread", "0.5", "--prompt-len", "16", "--width", "64", "--admit-min", "48",
           "--pool", "192", "--min-coda-batch", "96", "--coda-wait", "8", "--modes",
           "static,cdb", "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True)
                     .stdout.strip().splitlines()[-1])
    by = {r["mode"]: r for r in out["results"]}
    c = by["cdb"]
    rows = {m: 1 / by[m]["launches_per_token"]["finish"] for m in by}
    quoted(f"steady state {c['steady_achievable_fraction']:.3f}, whole run "
           f"{c['achievable_fraction']:.3f})",
           f"its coda launches hold {rows['static']:.0f} rows whatever `--min-coda-batch` says, "
           f"while `cdb`'s exits trickle in and fill coda launches of {rows['cdb']:.0f} rows")
    assert c["achievable_fraction"] <= 1.0 and c["steady_achievable_fraction"] <= 1.02


BENCHMARKS = {   # the README's Benchmarks row -> (script, its committed rows)
    "`python benchmarks/bench_generate.py`": ("bench_generate", "generate.json"),
    "`python benchmarks/bench_train.py`": ("bench_train", "train.json"),
    "`python benchmarks/bench_eval.py`": ("bench_eval", "eval.json"),
    "`python benchmarks/bench_grid.py --grid`": ("bench_grid", "grid.json"),
}


def test_benchmarks_table_is_its_rows():
    """Each figure in the README's Benchmarks table is its script's ``--readme`` of the rows
    committed in docs/benchmarks/ (``--json-out``)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    for row, (script, kept) in BENCHMARKS.items():
        got = [line for line in lines if line.startswith(f"| {row} |")]
        assert len(got) == 1, f"the README's Benchmarks table should have one row {row}"
        cell = got[0].rstrip().rstrip("|").rsplit(" | ", 1)[1].strip()
        res = json.loads((ROOT / "docs" / "benchmarks" / kept).read_text())
        assert cell == _bench(script).readme_cell(res), (
            f"README {row}: rerun `python benchmarks/{script}.py --readme docs/benchmarks/{kept}`")


def clock(name: str) -> dict:
    from depthbench.report import grid_clock
    return grid_clock(pd.read_csv(REPORTS / name / "rows" / "stage.csv"))


def grid_time(name: str) -> str:
    """How long a committed report's grid took, from its stage rows: 'M minutes S seconds'."""
    w = round(clock(name)["wall_s"])
    return f"{w // 60} minutes {w % 60} seconds"


def test_grid_times_are_the_committed_stage_rows():
    quoted(f"8 paired seeds; {grid_time('budgets')} on 2 CPU cores from the first stage's start "
           "to the last one's end",
           f"run on both cores, one at a time; {grid_time('budgets-2threads')} by its stage rows",
           f"report; {grid_time('quickstart')} on 2 CPU cores from the first stage's start to the "
           "last one's end, by the report's stage rows",
           f"8 paired seeds; {grid_time('table3')} on 2 CPU cores by its stage rows",
           f"[`reports/fixed-depths/`](reports/fixed-depths/README.md); {grid_time('fixed-depths')} "
           "on 2 CPU cores by its stage rows",
           f"[`reports/text-quickstart/`](reports/text-quickstart/README.md); "
           f"{grid_time('text-quickstart')} on 2 CPU cores by its stage rows, peak resident memory "
           f"of one stage process {peak_gb('text-quickstart')}",
           f"beside both full runs, 4 paired seeds; {grid_time('matched')} on 2 CPU cores by its "
           "stage rows")


def peak_gb(name: str) -> str:
    return f"{clock(name)['peak_rss_mb'] / 1024:.1f} GB"


def test_quickstart_task_numbers():
    """The quickstart's task and model sizes, from its eval rows."""
    ev = final_eval("quickstart")
    people, ceiling = int(ev["people"].max()), float(ev["ceiling_bits"].iloc[0])
    params = int(ev["params"].iloc[0])
    attrs = int(ev["facts"].max()) // people
    floor = ev["floor_bits_per_person"].max()
    steps = runs("quickstart")["steps"]
    assert steps.nunique() == 1 and ev["people_trained"].max() == people
    quoted(f"tiny dataset: {people} people, {attrs} attributes of {round(2 ** (ceiling / attrs))} "
           f"balanced values, a {ceiling:.0f}-bit ceiling and a floor of {floor:.1f} bits",
           f"about {round(params / 1000)}k parameters, {people * ceiling / params:.2f} task bits per "
           f"parameter; {steps.iloc[0]} steps of batch 64")
