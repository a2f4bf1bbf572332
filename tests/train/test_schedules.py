"""Depth schedules: distributions, switch points, per-step determinism, spec parsing."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from depthbench.schedules import ScheduleError, parse_depths, parse_schedule


def test_fixed_is_constant():
    assert set(parse_schedule("fixed:4").depths(100, seed=1)) == {4}


def test_uniform_covers_its_range_evenly():
    d = parse_schedule("uniform:1-16").depths(8000, seed=3)
    counts = np.bincount(d, minlength=17)[1:]
    assert d.min() == 1 and d.max() == 16
    # 500 expected per depth; 5 sigma is about 110
    assert np.all(np.abs(counts - 500) < 110), counts


def test_fixed_first_switches_at_its_fraction():
    s = parse_schedule("fixed-first:0.8:4:1-16")
    d = s.depths(1000, seed=0)
    assert s.switch_step(1000) == 800
    assert set(d[:800]) == {4}
    assert len(set(d[800:])) > 10 and d[800:].min() >= 1 and d[800:].max() <= 16


def test_fixed_first_finishing_distribution():
    """The finishing phase draws from the named distribution, step for step as that
    distribution's own schedule does; the fixed phase is unchanged; uniform is the range form."""
    total, seed = 1000, 5
    plain = parse_schedule("fixed-first:0.67:4:1-16")
    spelled = parse_schedule("fixed-first:0.67:4:uniform:1-16")
    assert spelled.canonical == plain.canonical == "fixed-first:0.67:4:1-16"
    np.testing.assert_array_equal(spelled.depths(total, seed), plain.depths(total, seed))
    pl = parse_schedule("fixed-first:0.67:4:poisson-lognormal:mean=8,max=16")
    assert pl.canonical == "fixed-first:0.67:4:poisson-lognormal:mean=8,max=16"
    assert pl.max_depth == 16 and pl.switch_step(total) == 670
    d, own = pl.depths(total, seed), parse_schedule("poisson-lognormal:mean=8,max=16").depths(total, seed)
    assert set(d[:670]) == {4}
    np.testing.assert_array_equal(d[670:], own[670:])
    np.testing.assert_array_equal(pl.depths(total, seed, start=700), d[700:])  # resumable
    assert set(parse_schedule("fixed-first:0.5:2:fixed:16").depths(10, 0)[5:]) == {16}


@pytest.mark.parametrize("spec", ["fixed-first:0.8:4:curriculum:1-16:0.5",
                                  "fixed-first:0.8:4:fixed-first:0.5:2:1-4",
                                  "fixed-first:0.8:4:poisson-lognormal:mean=20,max=16",
                                  "fixed-first:0.8:4:uniform:9-2", "fixed-first:0.8:4:"])
def test_bad_finishing_distributions_are_refused(spec):
    with pytest.raises(ScheduleError):
        parse_schedule(spec)


def test_draws_are_per_step_pure_functions():
    s = parse_schedule("uniform:1-16")
    full = s.depths(300, seed=9)
    resumed = s.depths(300, seed=9, start=137)
    np.testing.assert_array_equal(full[137:], resumed)
    assert not np.array_equal(full, s.depths(300, seed=10))


def test_poisson_lognormal_mean_and_cap():
    d = parse_schedule("poisson-lognormal:mean=8,max=16").depths(6000, seed=0)
    assert d.max() <= 16 and d.min() >= 1
    assert 7.0 < d.mean() < 8.5  # the cap at 16 pulls the mean of 8 down slightly


def test_curriculum_ramps_the_top_depth():
    d = parse_schedule("curriculum:1-16:0.5").depths(2000, seed=0)
    assert d[:100].max() <= 2
    assert d[1000:].max() == 16
    assert d[:500].mean() < d[1000:].mean()


@pytest.mark.parametrize("spec", ["", "fixed", "fixed:0", "fixed:x", "uniform:5-2", "uniform:3",
                                  "fixed-first:1.2:4:1-16", "fixed-first:0.5:4", "nope:3",
                                  "poisson-lognormal:mean=8", "poisson-lognormal:mean=20,max=16",
                                  "curriculum:1-16:0", "uniform:1-16:2"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(ScheduleError):
        parse_schedule(spec)


@given(st.text(max_size=30))
def test_any_text_parses_or_is_refused_cleanly(text):
    try:
        s = parse_schedule(text)
    except ScheduleError:
        return
    assert 1 <= s.depth(0, 10, 0) <= max(s.max_depth, 1)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=6))
def test_depth_lists_round_trip(depths):
    assert parse_depths(",".join(map(str, depths))) == sorted(set(depths))


def test_depth_ranges():
    assert parse_depths("1-4,8,16") == [1, 2, 3, 4, 8, 16]
    for bad in ("", "0", "4-1", "a", "1-"):
        with pytest.raises(ScheduleError):
            parse_depths(bad)
