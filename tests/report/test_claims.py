"""What the committed rows must support, stated over the rows (not over any page's wording).

Each claim below is one the results pages make; a rerun that breaks one fails here, whatever the
prose says. The pages' numbers themselves are generated (tests/report/test_docs.py)."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from depthbench.report import labelled, load_rows
from depthbench.report.load import final_rows, group_col

ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted(p.name for p in (ROOT / "reports").iterdir() if (p / "rows").is_dir())
COLUMNS = {n: set(pd.read_csv(ROOT / "reports" / n / "rows" / "eval.csv", nrows=1).columns)
           for n in REPORTS}
SWEEPS = [n for n in REPORTS if "lr_sweep" in COLUMNS[n]]   # tuning rows: no claim of their own
SYNTHETIC = [n for n in REPORTS if "bits_per_person" in COLUMNS[n] and n not in SWEEPS]
UNIFORM, MATCHED = "uniform:1-16", "uniform:1-16~fixed-first:0.67:4:1-16"


def final_eval(name: str) -> pd.DataFrame:
    return final_rows(labelled(load_rows([ROOT / "reports" / name / "rows"]))["eval"])


@pytest.mark.parametrize("name", SYNTHETIC)
def test_the_lower_oracles_read_about_nothing(name):
    """The floor and the name-blind record completer, the readings of no knowledge of people,
    are about 0 on every split of every committed report."""
    ev = final_eval(name)
    for col in ("floor_bits_per_person", "name_blind_bits_per_person"):
        if col in ev.columns:
            assert ev[col].max() <= 0.5, (name, col)


@pytest.fixture(scope="module")
def shortcuts(tmp_path_factory) -> dict:
    """The structural shortcut's reading per split on the task every person-task report ran
    on (table3's data section, regenerated: the same bytes, by its hash), with no model."""
    from depthbench.data.generate import generate
    from depthbench.data.synthetic import Dataset
    from depthbench.data_gen import resolve_config
    from depthbench.evaluate.reference import StructureBlind
    from depthbench.pipeline.spec import load_spec
    d = load_spec("table3").data
    out = tmp_path_factory.mktemp("task") / "ds"
    generate(resolve_config(d.preset, overrides=d.set, seed=d.seed), out)
    ds = Dataset(out)
    oracle = StructureBlind(ds)
    return {"hash": ds.hash, **{s: oracle.reading(s)["bits_per_person"]
                                for s in ("eval_reordered", "eval_seen_order")}}


@pytest.mark.parametrize("name", SYNTHETIC)
def test_every_arm_reads_above_the_structural_shortcut(name, shortcuts):
    """The strongest name-blind shortcut (which attributes open each record's training orders:
    about a bit per person on this task) lies below every arm's lowest judged seed-mean reading
    (depths 4-16, or K for fixed:K) by 10% of the ceiling on both name-only splits, as the
    calibration's criterion asks of the other lower oracles. Rows written before the oracle
    existed are read against it here, from their dataset regenerated."""
    from depthbench.report.spread import judged_depths
    ev = final_eval(name)
    if set(ev["dataset_hash"]) != {shortcuts["hash"]}:
        pytest.skip(f"reports/{name} ran on another task")
    for split in ("eval_reordered", "eval_seen_order"):
        sp = ev[ev["split"] == split]
        keys = ["schedule"] + ([group_col(sp)] if group_col(sp) else [])
        for key, g in sp.groupby(keys):
            judged = g[g["depth"].isin(judged_depths(str(g["schedule"].iloc[0]), g["depth"]))]
            lowest = judged.groupby("depth")["bits_per_person"].mean().min()
            assert lowest >= shortcuts[split] + 0.1 * g["ceiling_bits"].mean(), (name, split, key)
            if "structure_blind_bits_per_person" in g.columns:
                assert g["structure_blind_bits_per_person"].to_numpy() == \
                    pytest.approx(shortcuts[split], rel=1e-9)


# the probe grid reads only the headline split (its checkpoints are probed, not compared)
@pytest.mark.parametrize("name", [n for n in SYNTHETIC if n != "probes"])
def test_unseen_people_are_not_recalled(name):
    """The control: every model reads about nothing of people it never trained on: exact match
    at most 0.03, or within 4 binomial standard errors of the floor's (the value frequencies'
    guess) where that is higher (64 values an attribute: chance 0.016), bits about 0."""
    ev = final_eval(name)
    ctrl = ev[ev["split"] == "eval_unseen_people"]
    assert not ctrl.empty, f"reports/{name} has no unseen-people rows"
    p = max(ctrl["floor_exact_match"].max(), 1e-3)
    se = np.sqrt(p * (1 - p) / ctrl["facts"].min())
    bound = max(0.03, p + 4 * se)
    assert ctrl["exact_match"].max() <= bound, (name, ctrl["exact_match"].max(), bound)
    assert ctrl["bits_per_person"].max() <= 0.05 * ctrl["ceiling_bits"].max() + 0.5, name
    if "unfloored_bits_per_person" in ctrl.columns:
        assert ctrl["unfloored_bits_per_person"].mean() <= 0.5, name


@pytest.mark.parametrize("name", SYNTHETIC)
def test_every_arm_reads_between_the_floor_and_the_ceiling(name):
    """Each arm's best seed-mean reading on the held-out split lies above the floor (by 10% of
    the ceiling) and below the ceiling: the task is sized for the comparisons it exists for."""
    ev = final_eval(name)
    re = ev[ev["split"] == "eval_reordered"]
    keys = ["schedule"] + ([group_col(re)] if group_col(re) else [])
    for key, g in re.groupby(keys):
        best = g.groupby("depth")["bits_per_person"].mean().max()
        ceiling, floor = g["ceiling_bits"].mean(), g["floor_bits_per_person"].max()
        assert floor + 0.1 * ceiling < best < ceiling, (name, key, best, ceiling)


@pytest.mark.parametrize("name", [n for n in ("table3", "matched") if n in SYNTHETIC])
def test_uniform_at_fewer_flops_knows_less_on_every_seed(name):
    """The reading can fail: uniform trained for fixed-first 0.67's FLOPs is below full-budget
    uniform on every seed (exact match averaged over serving depths)."""
    re = final_eval(name)
    re = re[re["split"] == "eval_reordered"]
    axis = group_col(re)
    for _, g in re.groupby(axis) if axis else [(None, re)]:   # within each training length
        per = g.groupby(["schedule", "seed"])["exact_match"].mean()
        seeds = per[UNIFORM].index.intersection(per[MATCHED].index)
        assert len(seeds) >= 4
        assert (per[MATCHED].loc[seeds] < per[UNIFORM].loc[seeds]).all()


@pytest.mark.parametrize("name", SWEEPS)
def test_each_spec_runs_its_arms_at_the_lr_its_sweep_chose(name):
    """A sweep's chosen LR per arm (lowest mean serving NLL on its held-out seeds, of the asked
    value on the person task and per token on text: the verdicts' metric, recomputed here by
    hand from the committed rows) is the LR each spec that names the sweep gives the arm in
    train.arm_set; the sweep's seeds are not the reported grid's."""
    import tomllib
    ev = final_eval(name)
    ev = ev[ev["split"].isin(["eval_reordered", "validation"])]   # the person task, text
    metric = "value_nll" if "value_nll" in ev.columns and ev["value_nll"].notna().all() else "nll"
    runs = ev.groupby("run").agg(arm=("schedule", "first"), lr=("lr_sweep", "first"),
                                 seed=("seed", "first"), nll=(metric, "mean"))
    runs["arm"] = runs["arm"].str.rsplit(" @ lr=", n=1).str[0]   # an arm, at a budget: ARM @ 15%
    chosen = {a: g.groupby("lr")["nll"].mean().idxmin() for a, g in runs.groupby("arm")
              if g["lr"].nunique() > 1}
    assert json.loads((ROOT / "reports" / name / "lr_sweep.json").read_text())["chosen_lr"] == chosen
    specs = [*(ROOT / "depthbench" / "experiments").glob("*.toml"),
             *(ROOT / "docs" / "specs").glob("*.toml")]
    # "run table3-lr" names that sweep; "run table3-lr-x2" names another
    users = [p for p in specs if p.stem != name
             and (re.search(rf"run {re.escape(name)}(?![\w-])", p.read_text())
                  or f"{name}.toml" in p.read_text())]
    own = ROOT / "depthbench" / "experiments" / f"{name}.toml"
    planned = set(tomllib.loads(own.read_text())["train"]["lrs"]) if own.is_file() else set()
    missing = {a: sorted(planned - set(g["lr"])) for a, g in runs.groupby("arm")
               if not planned <= set(g["lr"])}
    if missing:   # a sweep run in parts, not yet whole: no spec takes its LRs
        assert not users, f"{[p.name for p in users]} take LRs from {name}, whose arms have " \
                          f"not run at {missing}"
        return
    assert users, f"no spec takes its LRs from {name}"
    for p in users:
        train = tomllib.loads(p.read_text())["train"]
        arms = train["arm_set"]   # an arm's LR at one budget (ARM @ 15%), else at every budget
        assert {k: (arms.get(k) or arms[k.split(" @ ")[0]])["lr"] for k in chosen} == chosen, p.name
        assert {a.split(" @ ")[0] for a in arms} == {k.split(" @ ")[0] for k in chosen}, p.name
        assert not set(train["seeds"]) & set(runs["seed"]), p.name


def test_fixed_depth_models_peak_at_their_training_depth_on_every_seed():
    """Figure 5: every seed of fixed:K peaks at K, or one loop past it by less than 1% of the
    ceiling (fixed:8 on the tiered task: 2 of 3 seeds, by 0.04 and 0.10 bits); the shallow
    models (K <= 4) peak at K exactly."""
    re = final_eval("fixed-depths")
    re = re[re["split"] == "eval_reordered"]
    for (s, seed), g in re.groupby(["schedule", "seed"]):
        k = int(str(s).split(":")[1])
        bits = g.set_index("depth")["bits_per_person"]
        peak = int(bits.idxmax())
        assert peak == k or (k > 4 and peak == k + 1
                             and bits[peak] - bits[k] < 0.01 * g["ceiling_bits"].mean()), (s, seed)


@pytest.mark.parametrize("name", ["budgets", "budgets-lr3e-3"])
def test_budgets_every_panel_between_floor_and_ceiling(name):
    """The paper's Figure 1: at every budget every arm's depths 4-16 read above the floor."""
    re = final_eval(name)
    re = re[(re["split"] == "eval_reordered") & (re["depth"] >= 4)]
    for (b, s), g in re.groupby(["budget", "schedule"]):
        m = g.groupby("depth")["bits_per_person"].mean()
        assert m.min() > g["floor_bits_per_person"].max(), (b, s)
        assert m.max() < g["ceiling_bits"].mean(), (b, s)


def _fractions(out: dict):
    """Every mode's fraction of its bound in the kept serving run: the CPU grids, the simulated
    grid (with and without chunked prefill) and the knob grid's largest per comparison."""
    for key, grid in out.items():
        if key.startswith("cpu_"):
            yield from ((f"{key} {w} {m}", e[m]) for w, e in grid.items() if not w.startswith("_")
                        for m in ("cdb", "no_refill", "static", "full_depth", "largest"))
    for w, e in out["sim"]["grid"].items():
        yield from ((f"sim {w} {k} {m}", x[m]) for k, x in e.items()
                    for m in ("cdb", "no_refill", "static", "full_depth", "largest"))
    yield from ((f"knobs {k}", v) for k, v in out["sim"]["knob_grid"].items())


def test_no_serving_fraction_exceeds_its_bound():
    """No committed serving measurement or simulation realizes more than 1.02 of the ideal time of
    its work (a fraction above 1 says the cost model is wrong; 2% is the measured cost model's
    error), and every mode of every run is measured against it."""
    out = json.loads((ROOT / "docs" / "serving" / "bench_serve.json").read_text())
    rows = [json.loads(x) for x in (ROOT / "docs" / "serving" / "cpu_runs.jsonl").read_text()
            .splitlines() if x.strip()]
    found = list(_fractions(out)) + [(f"cpu_runs {r['mode']}", r["fraction"]) for r in rows]
    assert len(found) > 100 and any(k.startswith("cpu_1threads") for k, _ in found)
    for k, v in found:
        assert 0 < v <= 1.02, (k, v)


@pytest.mark.parametrize("one_thread", ["budgets-lr3e-3", "text-table3"])
def test_the_figures_read_the_same_at_2_threads(one_thread):
    """docs/threads/NAME-2threads.toml reruns some of a figure's seeds (budgets: seeds 0 and 1
    at 15%; table3 and text-table3: seed 0, every arm) with every run on 2 CPU threads: its
    readings equal the 1-thread rows of the same runs (the figure does not depend on the thread
    count here)."""
    one = pd.read_csv(ROOT / "reports" / one_thread / "rows" / "eval.csv")
    two = pd.read_csv(ROOT / "reports" / f"{one_thread}-2threads" / "rows" / "eval.csv")
    m = two.merge(one, on=["run", "step", "split", "depth"], suffixes=("_2", "_1"))
    assert len(m) == len(two) > 0
    for col in ("nll", "bits_per_person", "exact_match", "bits_per_byte", "cloze_accuracy",
                "cloze_accuracy_mi"):
        if f"{col}_2" in m:   # the person task's readings, or the text task's
            assert (m[f"{col}_2"] - m[f"{col}_1"]).abs().max() <= 1e-9, col


def test_table3_at_2_threads_reaches_its_verdicts_but_the_smallest():
    """table3-rowlr's 8 seeds (table3 at the LRs its earlier sweep chose) rerun with every run
    on 2 CPU threads (docs/threads/table3-2threads.toml,
    on an AVX-512 CPU whose 2-thread kernels round differently from table3's 1-thread runs, so
    the readings drift apart over training): every mean-serving-NLL verdict and the two larger
    recall deficits (fixed-first 0.8 and matched uniform) are reached again; fixed-first 0.67's
    small deficit (about -0.02 exact match at 1 thread, decided there) keeps its sign and size
    but is not decided at 2 threads (one seed of 8 higher at both): that verdict depends on
    arithmetic that a thread count changes."""
    from depthbench.report import load_rows, summarize
    one, two = (summarize(load_rows([ROOT / "reports" / n / "rows"]))
                for n in ("table3-rowlr", "table3-2threads"))
    assert one["seeds"] == two["seeds"] == 8
    for key in ("comparisons", "nll"):
        a = {c["schedule"]: c for c in one[key]}
        b = {c["schedule"]: c for c in two[key]}
        assert sorted(a) == sorted(b) == sorted(["fixed-first:0.67:4:1-16", "fixed-first:0.8:4:1-16",
                                                  MATCHED])
        for arm in a:
            if key == "comparisons" and arm == "fixed-first:0.67:4:1-16":
                assert a[arm]["verdict"] == "lower" and b[arm]["verdict"] != "lower"
                assert b[arm]["diff"] < 0 and abs(b[arm]["diff"] - a[arm]["diff"]) < 0.01
            else:
                assert a[arm]["verdict"] == b[arm]["verdict"], (key, arm)


@pytest.mark.parametrize("name", ["text-table3", "text-quickstart", "text-table3-deep"])
def test_the_committed_cloze_is_read_against_floors_at_chance_on_items_it_carries(name):
    """#42's cloze, from the committed rows: every rule without a model the rows carry reads
    within 2 standard errors (binomial at chance, over items) of 0.25, and the report carries
    the items its rows were scored on (as many as the rows say, each with four distinct
    choices and a label)."""
    ev = pd.read_csv(ROOT / "reports" / name / "rows" / "eval.csv")
    items = pd.read_csv(ROOT / "reports" / name / "rows" / "item.csv")
    n = int(ev["cloze_items"].iloc[0])
    assert (ev["cloze_items"] == n).all() and len(items) == n >= 100
    assert items["item"].tolist() == list(range(n))
    assert all(len(set(json.loads(c))) == 4 for c in items["choices"])
    assert set(items["label"]) <= {0, 1, 2, 3}
    se = (0.25 * 0.75 / n) ** 0.5
    from depthbench.evaluate.text import RULES
    for rule in RULES:
        assert ev[rule].nunique() == 1 and abs(ev[rule].iloc[0] - 0.25) <= 2 * se, rule
    # and the models read above every floor by more than 2 standard errors (mutual information)
    if name == "text-table3":
        top = max(0.25, *(ev[r].iloc[0] for r in RULES))
        per_arm = ev.assign(arm=ev["run"].str.rsplit("-s", n=1).str[0]).groupby("arm")
        assert (per_arm["cloze_accuracy_mi"].mean() > top + 2 * se).all()


def test_text_table3_meets_the_older_depth_1_to_16_sizing_and_its_calibration_is_its_uniform():
    """#42's sizing, from the committed rows: in text-table3, uniform:1-16's seed-mean NLL at
    depth 16 lies below depth 1's by at least 5 seed SDs (the larger of the two depths'; its
    loop is inert past depth 4, which text-table3-deep's recurrence changes); the
    calibration's adopted recipe is that arm, run again by the calibration script in other
    processes, and reads the same NLL on every seed and depth (rows rounded to 5 decimals)."""
    ev = pd.read_csv(ROOT / "reports" / "text-table3" / "rows" / "eval.csv")
    u = ev[ev["run"].str.startswith("uniform")].pivot_table(index="seed", columns="depth",
                                                              values="nll")
    assert len(u) == 8
    gap = u[1].mean() - u[16].mean()
    assert gap >= 5 * max(u[1].std(), u[16].std()) > 0
    rows = [json.loads(x) for x in (ROOT / "docs" / "calibration" / "text-runs.jsonl")
            .read_text().splitlines() if x.strip()]
    text = (ROOT / "depthbench" / "experiments" / "text-table3.toml").read_text()
    adopted = [r for r in rows if r["recipe"] == "kjv-s600-b32-d10"]
    assert "kjv-s600-b32-d10" in text and sorted(r["seed"] for r in adopted) == list(range(8))
    for r in adopted:
        assert r["nll"] == pytest.approx([u.loc[r["seed"], d] for d in range(1, 17)],
                                         abs=5.1e-6)   # the calibration rounds to 5 decimals


@pytest.mark.parametrize("name", [n for n in ("quickstart", "presets", "table3", "table3-lengths",
                                              "table3-4x", "matched", "budgets-lr3e-3", "fixed-depths")
                                  if n in SYNTHETIC])
def test_every_arm_of_the_packaged_grids_passes_the_seed_spread_criteria(name):
    """The calibration's criteria (depthbench.report.spread, checked by hand in test_spread):
    every seed within 80% of its arm's median, seed SD at most 5% of the ceiling, the arm 10% of
    the ceiling above the floor and the name-blind completer, no seed-mean above 90%."""
    from depthbench.report.spread import spread_table
    t = spread_table(final_eval(name))
    assert not t.empty
    assert (t["criteria"] == "pass").all(), t[t["criteria"] != "pass"].to_dict("records")


@pytest.mark.parametrize("name", [n for n in ("table3", "table3-lengths", "table3-4x")
                                  if n in SYNTHETIC])
def test_table3_fixed_first_recalls_less_than_uniform_at_its_own_lr(name):
    """table3 on the tiered task, each arm at its swept LR, at every training length run: both
    fixed-first arms read below uniform:1-16 on exact match averaged over depths, the paired 95%
    t-interval over the 8 seeds below 0 (recomputed here with scipy, not the report's code)."""
    from scipy import stats
    re = final_eval(name)
    re = re[re["split"] == "eval_reordered"]
    axis = group_col(re)
    for length, g in re.groupby(axis) if axis else [(None, re)]:
        per = g.groupby(["schedule", "seed"])["exact_match"].mean()
        for arm in ("fixed-first:0.67:4:1-16", "fixed-first:0.8:4:1-16"):
            d = (per[arm] - per[UNIFORM]).dropna().to_numpy()
            assert len(d) == 8, (length, arm)
            hi = d.mean() + stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
            assert hi < 0, (length, arm, d.mean(), hi)


@pytest.mark.parametrize("name", [n for n in ("table3", "table3-lengths", "table3-4x", "table3-2threads")
                                  if n in SYNTHETIC])
def test_table3_fixed_first_reads_higher_serving_nll_than_uniform(name):
    """The NLL half of Table 3's verdicts, at every length and thread count run: each fixed-first
    arm's mean serving NLL of the asked value (eval_reordered, mean over depths) relative to
    uniform:1-16 on the same seed, paired 95% t-interval over the 8 seeds above +0.5% (scipy,
    not the report's code)."""
    from scipy import stats
    re = final_eval(name)
    re = re[re["split"] == "eval_reordered"]
    axis = group_col(re)
    for length, g in re.groupby(axis) if axis else [(None, re)]:
        per = g.groupby(["schedule", "seed"])["value_nll"].mean()
        for arm in ("fixed-first:0.67:4:1-16", "fixed-first:0.8:4:1-16"):
            r = (per[arm] / per[UNIFORM] - 1).dropna().to_numpy()
            assert len(r) == 8, (length, arm)
            lo = r.mean() - stats.t.ppf(0.975, len(r) - 1) * r.std(ddof=1) / np.sqrt(len(r))
            assert lo > 0.005, (length, arm, r.mean(), lo)


DEEP = "text-table3-deep-lr3e-3"   # Table 3 on text where the loop is used past depth 4


def _deep_nll(name: str = DEEP) -> dict[str, pd.DataFrame]:
    """(seed x depth) validation NLL of every arm of a text report: {arm: table}."""
    ev = final_eval(name)
    ev = ev[ev["split"] == "validation"]
    return {arm: g.pivot_table(index="seed", columns="depth", values="nll")
            for arm, g in ev.groupby("schedule")}


def test_at_the_swept_lr_uniform_diverges_on_some_seeds_and_the_band_is_not_decided():
    """text-table3-deep (every arm at the sweep's 0.006): uniform:1-16 reads a mean serving NLL
    more than 0.3 nats above the worst fixed-first seed on some seeds (diverged) and its seeds
    spread over ten times the fixed-first arms'; so the paired interval against uniform is far
    wider than the ±0.5% band and the verdict is not resolved."""
    from depthbench.report import summarize
    nll = {arm: t.mean(axis=1) for arm, t in _deep_nll("text-table3-deep").items()}
    worst_ff = max(nll["fixed-first:0.67:4:1-16"].max(), nll["fixed-first:0.8:4:1-16"].max())
    assert (nll[UNIFORM] > worst_ff + 0.3).sum() >= 2
    assert nll[UNIFORM].std() > 10 * nll["fixed-first:0.67:4:1-16"].std()
    said = {c["schedule"]: c["verdict"] for c in
            summarize(load_rows([ROOT / "reports" / "text-table3-deep" / "rows"]))["nll"]}
    assert said["fixed-first:0.67:4:1-16"].startswith("not resolved")


def test_the_trigram_references_read_the_cloze_as_n_gram_continuation():
    """#67's cloze against what beats it, from the committed rows of text-table3-deep: the word-
    trigram PMI reference reads more than 2 item-SEs above chance, so the report labels the cloze
    n-gram continuation; no arm's mutual-information accuracy (mean over depths and seeds) lies
    more than 2 item-SEs above that reference."""
    ev = final_eval("text-table3-deep")
    n = int(ev["cloze_items"].iloc[0])
    se = (0.25 * 0.75 / n) ** 0.5
    ref = ev["cloze_trigram_pmi_rule"].iloc[0]
    assert ev["cloze_trigram_pmi_rule"].nunique() == 1 and ref - 0.25 > 2 * se
    best = ev.groupby("schedule")["cloze_accuracy_mi"].mean().max()
    assert best - ref <= 2 * se, (best, ref, se)
    page = (ROOT / "reports" / "text-table3-deep" / "README.md").read_text()
    assert "so the cloze reads n-gram continuation" in page


def test_text_table3_deep_uses_its_loop_past_depth_4_on_every_seed():
    """#67's premise, from the committed rows of text-table3-deep-lr3e-3: uniform:1-16's NLL
    falls from depth 4 to depth 16, and from 1 to 4, on each of the 8 seeds, each mean gain at
    least 5 SDs of the per-seed gain; so mean serving NLL over depths 1-16 reads deep loops."""
    u = _deep_nll()[UNIFORM]
    assert len(u) == 8
    for a, b in ((4, 16), (1, 4)):
        g = u[a] - u[b]
        assert (g > 0).all(), (a, b, g.tolist())
        assert g.mean() >= 5 * g.std(), (a, b, g.mean(), g.std())


def test_text_table3_deep_nll_verdicts_are_decided_outside_the_band():
    """#67's Table 3 on text, recomputed with scipy from the committed rows of
    text-table3-deep-lr3e-3: each arm against uniform:1-16 on mean serving NLL (validation NLL
    averaged over depths 1-16) as a paired relative difference over the 8 seeds; each
    fixed-first arm's 95% interval has a half-width of at most 0.25%, so the ±0.5% band could be
    decided either way; the report's verdict is the one the interval gives: both fixed-first
    arms read lower NLL than uniform, outside the band, and matched uniform higher."""
    from scipy import stats

    from depthbench.report import summarize
    nll = {arm: t.mean(axis=1) for arm, t in _deep_nll().items()}
    said = {c["schedule"]: c["verdict"]
            for c in summarize(load_rows([ROOT / "reports" / DEEP / "rows"]))["nll"]}
    for arm in ("fixed-first:0.67:4:1-16", "fixed-first:0.8:4:1-16", MATCHED):
        d = (nll[arm] / nll[UNIFORM] - 1).dropna().to_numpy()
        assert len(d) == 8
        h = stats.t.ppf(0.975, 7) * d.std(ddof=1) / np.sqrt(8)
        assert arm == MATCHED or h <= 0.0025, (arm, d.mean(), h)
        lo, hi = d.mean() - h, d.mean() + h
        assert (hi < -0.005) if arm != MATCHED else (lo > 0.005), (arm, lo, hi)
        assert said[arm].startswith("outside"), (arm, said[arm])


def test_figure_2s_finishing_distribution_changes_little_at_the_table3_recipe():
    """table3-finish (8 paired seeds): fixed-first with a Poisson-lognormal finish reads like
    the same fixed phase with the uniform finish on exact match (paired 95% interval inside
    ±0.02 at both fixed phases), and like it recalls less than uniform:1-16 with a higher NLL
    of the asked value (intervals below 0 and above +0.5%; scipy, not the report's code)."""
    from scipy import stats
    re = final_eval("table3-finish")
    re = re[re["split"] == "eval_reordered"]
    per = re.groupby(["schedule", "seed"])[["exact_match", "value_nll"]].mean()

    def ci(x):
        h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        return x.mean() - h, x.mean() + h
    for phase in ("0.67", "0.8"):
        plog = per.loc[f"fixed-first:{phase}:4:poisson-lognormal:mean=8,max=16"]
        flat = per.loc[f"fixed-first:{phase}:4:1-16"]
        uni = per.loc[UNIFORM]
        assert len(plog) == len(flat) == 8
        lo, hi = ci((plog["exact_match"] - flat["exact_match"]).to_numpy())
        assert -0.02 < lo and hi < 0.02, (phase, lo, hi)
        assert ci((plog["exact_match"] - uni["exact_match"]).to_numpy())[1] < 0, phase
        assert ci((plog["value_nll"] / uni["value_nll"] - 1).to_numpy())[0] > 0.005, phase


def test_the_default_presets_are_the_by_hand_path_and_pass_on_six_seeds():
    """#65 item 8: the presets a user starts from (presets.toml overrides no preset key) read
    every arm of the README's by-hand path on 6 seeds within the calibration's criteria, on the
    task table3 runs (the same dataset)."""
    import tomllib

    from depthbench.report.spread import spread_table
    spec = tomllib.loads((ROOT / "depthbench" / "experiments" / "presets.toml").read_text())
    assert "set" not in spec["data"] and "set" not in spec["train"] and "arm_set" not in spec["train"]
    fin = final_eval("presets")
    t = spread_table(fin)
    assert len(t) == 3 and (t["seeds"] >= 6).all() and (t["criteria"] == "pass").all(), t
    assert set(fin["dataset_hash"]) == set(final_eval("table3")["dataset_hash"])



def test_at_matched_flops_fixed_first_recalls_more_than_uniform_at_every_budget():
    """Figure 1 at the tuned recipe (each arm at its swept LR, the decay after every switch):
    at 15%, 45% and 100% of the budget fixed-first 0.8 reads above uniform:1-16 on exact match
    averaged over depths and below it on the asked value's mean serving NLL, the paired 95%
    t-intervals over the 8 seeds excluding 0 and +-0.5% (scipy, not the report's code); fixed:4
    reads below uniform from 45% on."""
    from scipy import stats
    re = final_eval("budgets")
    re = re[re["split"] == "eval_reordered"]
    FF = "fixed-first:0.8:4:1-16"

    def interval(x):
        h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        return x.mean() - h, x.mean() + h

    for budget, g in re.groupby("budget"):
        em = g.groupby(["schedule", "seed"])["exact_match"].mean()
        nll = g.groupby(["schedule", "seed"])["value_nll"].mean()
        d = (em[FF] - em[UNIFORM]).dropna().to_numpy()
        r = (nll[FF] / nll[UNIFORM] - 1).dropna().to_numpy()
        assert len(d) == len(r) == 8, budget
        assert interval(d)[0] > 0 and interval(r)[1] < -0.005, (budget, d.mean(), r.mean())
        if budget >= 0.45:
            assert interval((em["fixed:4"] - em[UNIFORM]).dropna().to_numpy())[1] < 0, budget


def test_the_tuned_budgets_verdict_at_15_percent_holds_at_2_threads():
    """budgets-2threads reruns seeds 0 and 1 at 15% with every run on 2 CPU threads, on a CPU
    whose 2-thread kernels round differently (the readings move by up to 0.04 exact match at a
    depth): on each seed fixed-first 0.8 still recalls more than uniform (exact match over
    depths, by more than half its 1-thread difference) and reads a lower asked-value NLL."""
    one, two = (d[(d["split"] == "eval_reordered") & (d["budget"] == 0.15)]
                for d in (final_eval("budgets"), final_eval("budgets-2threads")))
    FF = "fixed-first:0.8:4:1-16"
    seeds = sorted(set(two["seed"]))
    assert seeds == [0, 1]
    em = {k: d.groupby(["schedule", "seed"])["exact_match"].mean() for k, d in (("1", one), ("2", two))}
    nll = {k: d.groupby(["schedule", "seed"])["value_nll"].mean() for k, d in (("1", one), ("2", two))}
    moved = (two.set_index(["run", "depth"])["exact_match"]
             - one.set_index(["run", "depth"])["exact_match"]).dropna()
    assert len(moved) == len(two) and moved.abs().max() > 0   # the arithmetic did change
    for s in seeds:
        d1, d2 = (em[k][FF][s] - em[k][UNIFORM][s] for k in ("1", "2"))
        assert d1 > 0 and d2 > 0.5 * d1, (s, d1, d2)
        assert nll["2"][FF][s] < nll["2"][UNIFORM][s], s

