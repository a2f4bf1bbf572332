"""The seed-spread criteria read from a report's rows (depthbench.report.spread), against the
criteria computed by hand on made-up rows and on a committed report."""

from pathlib import Path
from statistics import median, stdev

import numpy as np
import pandas as pd
import pytest

from depthbench.report import labelled, load_rows
from depthbench.report.load import final_rows
from depthbench.report.spread import spread_table, spread_words

ROOT = Path(__file__).resolve().parents[2]
CEILING = 24.0


def rows(arms: dict[str, list[list[float]]], seen_scale: float = 1.0) -> pd.DataFrame:
    """Final eval rows: arms[schedule][seed] = bits per person at depths 1..len; exact match is
    bits / ceiling; the seen-order control reads seen_scale times the held-out split."""
    out = []
    for schedule, seeds in arms.items():
        for seed, bits in enumerate(seeds):
            for d, b in enumerate(bits, start=1):
                for split, scale in (("eval_reordered", 1.0), ("eval_seen_order", seen_scale)):
                    out.append({"run": f"{schedule}-s{seed}", "schedule": schedule, "seed": seed,
                                "step": 100, "depth": d, "split": split,
                                "bits_per_person": b * scale, "exact_match": b * scale / CEILING,
                                "ceiling_bits": CEILING, "floor_bits_per_person": 0.0,
                                "name_blind_bits_per_person": 0.1})
    return pd.DataFrame(out)


def steady(level: float, seeds: int = 4, jitter: float = 0.2) -> list[list[float]]:
    return [[level + jitter * s] * 16 for s in range(seeds)]


def test_a_steady_arm_between_the_brackets_passes():
    t = spread_table(rows({"uniform:1-16": steady(10.0)}))
    assert list(t["criteria"]) == ["pass"]
    assert spread_words(t) == "Seed spread: every arm (1) passes the calibration's criteria."


@pytest.mark.parametrize("arm, seen_scale, failure", [
    # one slow seed: 4 of 10 bits, median 10 -> 0.4 of the median, SD 3 bits (12.5%)
    ([[10.0] * 16, [10.0] * 16, [10.1] * 16, [4.0] * 16], 1.0, "worst seed, seed SD"),
    # steady but barely above the name-blind completer (0.1 + 10% of 24 = 2.5)
    (steady(2.0), 1.0, "near the brackets"),
    # steady and between the brackets on the held-out split, saturated on the seen-order control
    (steady(15.0), 1.5, "over 90%"),
    # one seed only
    (steady(10.0, seeds=1), 1.0, "one seed, seed SD"),
])
def test_each_criterion_fails_where_it_should(arm, seen_scale, failure):
    t = spread_table(rows({"uniform:1-16": arm}, seen_scale))
    assert t["criteria"].iloc[0] == f"fail: {failure}"
    assert "0 of 1 arms pass" in spread_words(t) and failure in spread_words(t)


def test_a_fixed_depth_arm_is_judged_at_its_depth_only():
    """fixed:4 reads 12 bits at depth 4 and noise elsewhere: its SD is judged at depth 4."""
    rng = np.random.default_rng(0)
    seeds = []
    for s in range(4):
        bits = list(rng.uniform(0, 12, 16))
        bits[3] = 12.0 + 0.1 * s
        seeds.append(bits)
    t = spread_table(rows({"fixed:4": seeds}))
    assert t["max seed SD (% ceiling)"].iloc[0] == pytest.approx(
        100 * stdev([12.0, 12.1, 12.2, 12.3]) / CEILING, abs=0.05)


def _by_hand(fin: pd.DataFrame, schedule: str, budget: float) -> dict:
    """The criteria's quantities with plain Python over one arm's rows."""
    re = fin[(fin["split"] == "eval_reordered") & (fin["schedule"] == schedule)
             & (fin["budget"] == budget)]
    seeds = sorted(set(re["seed"]))
    em = [re.loc[re["seed"] == s, "exact_match"].mean() for s in seeds]
    judged = [4] if schedule == "fixed:4" else list(range(4, 17))
    sds = [stdev(list(re.loc[re["depth"] == d, "bits_per_person"])) for d in judged]
    means = [sum(re.loc[re["depth"] == d, "bits_per_person"]) / len(seeds) for d in range(1, 17)]
    lowest = min(means[d - 1] for d in judged)
    bracket = max(re["floor_bits_per_person"].max(), re["name_blind_bits_per_person"].max())
    ceiling = re["ceiling_bits"].iloc[0]
    return {"worst": min(em) / median(em), "sd": 100 * max(sds) / ceiling,
            "above": 100 * (lowest - bracket) / ceiling, "best": 100 * max(means) / ceiling}


def test_the_committed_budgets_grid_reads_as_by_hand():
    fin = final_rows(labelled(load_rows([ROOT / "reports" / "budgets-lr3e-3" / "rows"]))["eval"])
    t = spread_table(fin)
    assert len(t) == 9
    for _, r in t.iterrows():
        h = _by_hand(fin, r["schedule"], float(r["budget"].rstrip("%")) / 100)
        assert r["worst/median EM"] == pytest.approx(h["worst"], abs=0.006)
        assert r["max seed SD (% ceiling)"] == pytest.approx(h["sd"], abs=0.06)
        assert r["lowest judged bits above brackets (% ceiling)"] == pytest.approx(h["above"], abs=0.06)
        assert r["best, % of ceiling (held-out)"] == pytest.approx(h["best"], abs=0.06)
