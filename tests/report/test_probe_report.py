"""The update-benefit probe's part of a report (the paper's Figure 4), against a hand count: each
seed's run is one observation of a probe point (its benefit averaged over serving depths), the
interval is a t-interval over seeds, and the person task reads the asked value's NLL."""

import math

import pandas as pd
import pytest
from scipy import stats

from depthbench.report.figures import FigureSet
from depthbench.report.probe import per_seed, probe_metric, probe_section


def _rows(with_value: bool = True) -> pd.DataFrame:
    rows = []
    for seed in range(3):
        for k in (0, 16):
            for depth in (1, 4, 8):
                v = 0.01 * (seed + 1) * (k + 1) + 0.001 * depth
                rows.append({"kind": "probe", "run": f"ff-s{seed}", "schedule": "fixed-first:0.8:4:1-16",
                             "seed": seed, "step": 1200 + k, "updates_after_switch": k,
                             "depth": depth, "depth_a": 4, "depth_b": 16, "nll_diff": 2 * v,
                             "ci95": 0.1, **({"value_nll_diff": v, "value_ci95": 0.05}
                                             if with_value else {})})
    return pd.DataFrame(rows)


def test_the_probe_table_is_a_t_interval_over_seeds_of_the_depth_means(tmp_path):
    pr = _rows()
    (title, table), notes = probe_section(FigureSet(tmp_path), pr)
    assert (tmp_path / "update_probe.png").stat().st_size > 0
    assert title.startswith("Update-benefit probe") and "asked value" in title
    for k, row in zip((0, 16), table.itertuples(index=False)):
        per = [sum(0.01 * (s + 1) * (k + 1) + 0.001 * d for d in (1, 4, 8)) / 3 for s in range(3)]
        mean = sum(per) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in per) / 2)
        half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
        assert float(row[3]) == pytest.approx(mean, abs=5e-5)
        lo, hi = (float(x) for x in row[4].strip("[]").split(","))
        assert lo == pytest.approx(mean - half, abs=5e-5) and hi == pytest.approx(mean + half, abs=5e-5)
        assert row[5] == "3 of 3" and row[2] == 3
        assert row[6].startswith(f"{2 * mean:+.4f}")      # the whole row's reading beside it
    assert len(notes) == 1 and "0 updates after the switch" in notes[0] and "3 seeds" in notes[0]


def test_rows_without_the_asked_value_read_the_whole_nll(tmp_path):
    pr = _rows(with_value=False)
    assert probe_metric(pr) == ("nll_diff", "NLL")
    assert probe_metric(_rows()) == ("value_nll_diff", "NLL of the asked value")
    seeds = per_seed(pr, "nll_diff")
    assert len(seeds) == 6 and seeds["nll_diff"].iloc[0] == pytest.approx(2 * (0.01 + 0.013 / 3))
    (title, table), _ = probe_section(FigureSet(tmp_path), pr)
    assert "asked value" not in title and "benefit on the whole row's NLL" not in table.columns
