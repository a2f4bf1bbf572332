"""Confidence intervals and paired differences, checked against direct computations."""

import math

import numpy as np
import pandas as pd
import pytest

from depthbench.stats import holm, mean_ci, paired_differences, sign_flip_p, t_interval

# two-sided 95% t quantiles from a printed table (df: value)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 7: 2.365, 30: 2.042}


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 31])
def test_t_interval_matches_the_textbook_formula(n):
    x = np.random.default_rng(n).normal(3.0, 2.0, n)
    m, h, k = t_interval(x)
    sd = math.sqrt(sum((v - x.mean()) ** 2 for v in x) / (n - 1))
    assert k == n and m == pytest.approx(x.mean())
    assert h == pytest.approx(T975[n - 1] * sd / math.sqrt(n), rel=1e-3)


def test_t_interval_of_fewer_than_two_values_has_no_width():
    assert math.isnan(t_interval([1.0])[1]) and t_interval([1.0])[0] == 1.0
    assert t_interval([])[2] == 0
    assert t_interval([2.0, float("nan"), 4.0])[2] == 2  # non-finite values are dropped


def _rows(effect, noise_sd=0.0, seeds=range(6), depths=range(1, 5)):
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        luck = rng.normal(0, 10)  # a seed's own luck, shared by both schedules
        for d in depths:
            base = 20 + d + luck
            rows.append({"schedule": "uniform", "seed": seed, "depth": d, "bits": base})
            rows.append({"schedule": "ff", "seed": seed, "depth": d,
                         "bits": base + effect(d) + rng.normal(0, noise_sd)})
    return pd.DataFrame(rows)


def test_paired_difference_removes_the_seed_luck():
    # a constant effect per depth: every paired difference is exact, whatever the seed's luck
    d = paired_differences(_rows(lambda k: k - 2.5), "bits", "uniform")
    assert list(d["depth"]) == [1, 2, 3, 4] and set(d["pairs"]) == {6}
    assert np.allclose(d["diff"], [-1.5, -0.5, 0.5, 1.5])
    # identical differences on every seed: no spread to bound, so no interval (never a 0-wide one)
    assert d["ci95"].isna().all() and list(d["sign"]) == [0, 0, 0, 0]
    # unpaired, the same effect drowns in the seed luck: the per-schedule CIs are wide
    per = mean_ci(_rows(lambda k: k - 2.5), ["schedule", "depth"], "bits")
    assert (per["ci95"] > 3).all()  # wider than the largest effect (1.5)


def test_paired_difference_of_pure_noise_mostly_spans_zero():
    d = paired_differences(_rows(lambda k: 0.0, noise_sd=1.0, depths=range(1, 41)), "bits",
                           "uniform")
    # a 95% interval excludes 0 for about 5% of depths when there is no effect
    assert (d["sign"] == 0).mean() >= 0.8


def test_paired_difference_uses_only_seeds_both_schedules_have():
    df = _rows(lambda k: 1.0)
    df = df[~((df["schedule"] == "ff") & (df["seed"] == 0))]
    d = paired_differences(df, "bits", "uniform")
    assert set(d["pairs"]) == {5} and np.allclose(d["diff"], 1.0)


def test_sign_flip_p_is_the_exact_permutation_p():
    import itertools
    rng = np.random.default_rng(3)
    for n in range(2, 9):
        d = rng.normal(0.2, 1.0, n).round(1)  # rounding makes ties
        naive = np.mean([abs(np.mean(d * s)) >= abs(d.mean()) - 1e-12
                         for s in itertools.product((1, -1), repeat=n)])
        assert sign_flip_p(d) == pytest.approx(naive)
    assert sign_flip_p([0.3] * 4) == pytest.approx(0.125)   # the smallest p 4 seeds can give
    assert sign_flip_p([0.3] * 8) == pytest.approx(2 / 256)
    assert sign_flip_p([0.5]) == 1.0 and sign_flip_p([0, 0, 0]) == 1.0


def test_holm_matches_its_step_down_definition():
    rng = np.random.default_rng(4)
    for _ in range(50):
        p = rng.uniform(0, 0.2, rng.integers(1, 7))
        adj = np.array(holm(p))
        for alpha in (0.01, 0.05, 0.1):
            # step-down: reject the k smallest while p_(k) <= alpha / (m - k + 1)
            order, rejected = np.argsort(p), set()
            for k, i in enumerate(order):
                if p[i] > alpha / (len(p) - k):
                    break
                rejected.add(int(i))
            assert {int(i) for i in np.flatnonzero(adj <= alpha)} == rejected
    assert np.isnan(holm([0.01, float("nan")])[1])


def test_sign_flip_p_agrees_with_scipy_and_does_not_depend_on_order():
    """Away from ties it equals scipy's exact permutation test; with ties (rounded differences,
    as exact-match readings are) it is the same for any order of the pairs, which float sums
    alone do not guarantee."""
    from scipy import stats
    rng = np.random.default_rng(5)
    for n in range(2, 11):
        d = rng.normal(0.1, 1.0, n)
        ref = stats.permutation_test((d,), np.mean, permutation_type="samples", vectorized=True,
                                     n_resamples=np.inf).pvalue
        assert sign_flip_p(d) == pytest.approx(min(1.0, ref))
    for _ in range(50):
        d = rng.integers(-40, 41, size=8) / 1152   # exact-match differences of 1,152 questions
        ps = {sign_flip_p(rng.permutation(d)) for _ in range(6)}
        assert len(ps) == 1


def test_an_exact_match_verdict_says_when_holm_s_family_outgrows_its_seeds():
    """With 8 seeds the exact sign-flip p is at least 2/256; Holm over 9 comparisons makes the
    smallest corrected p 9 x 2/256 = 0.0703, so no comparison can be decided, and the verdict
    says why (one on every seed's side with a clear interval still reads undecided)."""
    import pandas as pd

    from depthbench.report.compare import comparisons_of, verdict_of
    rows = [{"schedule": s, "seed": seed, "depth": d, "exact_match": base + 0.1 * i + 0.01 * seed}
            for i, s in enumerate(["uniform:1-16", "a", "b", "c"]) for seed in range(8)
            for d, base in ((1, 0.2), (2, 0.4))]
    one = pd.DataFrame(rows)
    three = pd.concat([one.assign(length=k) for k in (1, 2, 4)])   # the arms at three lengths
    for m, re in ((3, one), (9, three)):
        c = comparisons_of(re, "uniform:1-16")
        prim = c[c["summary"] == "primary"]
        assert len(prim) == m and (prim["family"] == m).all()
        assert prim["p"].tolist() == pytest.approx([2 / 256] * m)
        assert prim["p_holm"].tolist() == pytest.approx([min(1, m * 2 / 256)] * m)
        verdicts = {verdict_of(r) for _, r in prim.iterrows()}
        assert verdicts == ({"higher"} if m == 3 else
                            {"undecided (9 comparisons on 8 seeds: the smallest possible "
                             "Holm-corrected p is 0.0703)"})


# ---- the paper's metric: mean serving NLL against its ±0.5% band -------------------------------

def _nll_rows(ratios: dict[str, list[float]], ref_nll: list[float], depths=(1, 2, 3)):
    """eval rows whose per-run mean NLL over depths is ref_nll[seed] x ratio (the reference's
    ratio is 1), spread over depths so only the mean is fixed."""
    import pandas as pd
    rows = []
    for s, rs in {"uniform:1-16": [1.0] * len(ref_nll), **ratios}.items():
        for seed, (r, base) in enumerate(zip(rs, ref_nll)):
            for j, d in enumerate(depths):
                tilt = 0.1 * (j - (len(depths) - 1) / 2)     # averages to 0 over depths
                rows.append({"schedule": s, "seed": seed, "depth": d, "nll": base * r + tilt})
    return pd.DataFrame(rows)


def test_nll_verdicts_follow_the_interval_against_the_band():
    from depthbench.report.compare import NLL_BAND, nll_verdict
    assert NLL_BAND == 0.005
    assert nll_verdict(-0.004, 0.004, 8) == "within ±0.5%"
    assert nll_verdict(0.006, 0.02, 8) == "outside ±0.5% (higher NLL)"
    assert nll_verdict(-0.02, -0.0051, 8) == "outside ±0.5% (lower NLL)"
    assert nll_verdict(-0.004, 0.006, 8).startswith("not resolved at this precision (95% interval ±0.5%")
    assert nll_verdict(0.0, float("nan"), 1) == "not resolved (one seed)"


def test_nll_comparison_against_a_by_hand_oracle():
    from scipy import stats as st

    from depthbench.report.compare import NLL_BAND, nll_comparisons
    rng = np.random.default_rng(0)
    ref = list(1.5 + 0.2 * rng.random(8))
    tight = list(1 + 0.001 * rng.standard_normal(8))           # inside the band
    wide = list(1 + 0.03 * rng.standard_normal(8))             # straddles it
    c = nll_comparisons(_nll_rows({"a": tight, "b": wide}, ref), None).set_index("schedule")
    for s, r in (("a", tight), ("b", wide)):
        d = np.array(r) - 1                                      # per-seed relative difference
        half = st.t.ppf(0.975, 7) * d.std(ddof=1) / np.sqrt(8)
        assert c.loc[s, "diff"] == pytest.approx(d.mean(), abs=1e-12)
        assert c.loc[s, "hi"] - c.loc[s, "lo"] == pytest.approx(2 * half, rel=1e-9)
        tost = max(st.ttest_1samp(d, -NLL_BAND, alternative="greater").pvalue,
                   st.ttest_1samp(d, NLL_BAND, alternative="less").pvalue)
        assert c.loc[s, "tost_p"] == pytest.approx(tost, rel=1e-9)
        loo = [np.delete(d, i).mean() for i in range(8)]
        assert (c.loc[s, "loo_lo"], c.loc[s, "loo_hi"]) == pytest.approx((min(loo), max(loo)))
    assert c.loc["a", "verdict"] == "within ±0.5%" and c.loc["a", "loo_holds"]
    assert c.loc["b", "verdict"].startswith("not resolved at this precision")
    assert c.loc["a", "reference_nll"] == pytest.approx(np.mean(ref))


def test_nll_verdict_that_rests_on_one_seed_says_so():
    from depthbench.report.compare import nll_comparisons
    ratios = [1.02, 1.021, 1.019, 1.02, 1.022, 1.018, 1.02, 0.90]   # outside the band but for seed 7
    c = nll_comparisons(_nll_rows({"x": ratios}, [1.6] * 8), None).iloc[0]
    assert c["verdict"].startswith("not resolved")
    assert not c["loo_holds"]                    # without seed 7: outside (higher NLL)
