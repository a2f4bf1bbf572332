"""The scale axis (``depthbench scale-report``): each grid's gaps against a naive recomputation
from its rows, the trend rule on grids whose answer is known, and the refusals."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from depthbench.errors import UserError
from depthbench.report.scale import (
    DEPTH_SDS,
    build_scale_report,
    grid_point,
    paper_flops,
    role,
    scale_points,
    trend,
)

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "reports" / "text-table3-deep-lr3e-3" / "rows"
UNIFORM = "uniform:1-16"


def _eval() -> pd.DataFrame:
    return pd.read_csv(GRID / "eval.csv")


def _grid(tmp: Path, name: str, params: int, shift: float = 0.0, steps: int | None = None,
          seeds=None) -> Path:
    """A copy of the committed grid as another size: ``params`` parameters, every fixed-first
    run's NLL multiplied by (1 + shift) (so its relative difference moves by about ``shift``),
    optionally at another final step and on a subset of the seeds."""
    ev = _eval()
    ev["params"] = params
    ff = ev["schedule"].str.startswith("fixed-first")
    ev.loc[ff, "nll"] *= 1 + shift
    if steps is not None:
        ev["step"] = steps
    if seeds is not None:
        ev = ev[ev["seed"].isin(seeds)]
    d = tmp / name
    d.mkdir()
    ev.to_csv(d / "eval.csv", index=False)
    return d


def _naive_diff(ev: pd.DataFrame, schedule: str, matched_to=None) -> tuple[float, float]:
    """Each seed's mean NLL over its depths relative to uniform's, by loops; the mean and the
    95% t half-width."""
    from scipy import stats
    ev = ev[(ev["split"] == "validation")]
    def mean(s, m, seed):
        g = ev[(ev["schedule"] == s) & (ev["seed"] == seed)]
        g = g[g["matched_to"].isna()] if m is None else g[g["matched_to"] == m]
        g = g[g["step"] == g["step"].max()]
        return sum(g["nll"]) / len(g)
    ds = [mean(schedule, matched_to, seed) / mean(UNIFORM, None, seed) - 1
          for seed in sorted(ev["seed"].unique())]
    ds = np.array(ds)
    return ds.mean(), stats.t.ppf(0.975, len(ds) - 1) * ds.std(ddof=1) / np.sqrt(len(ds))


def test_a_grids_points_are_its_paired_relative_differences():
    pts = grid_point(GRID).set_index("role")
    ev = _eval()
    for r, (s, m) in {"fixed-first 67%": ("fixed-first:0.67:4:1-16", None),
                      "fixed-first 80%": ("fixed-first:0.8:4:1-16", None),
                      "uniform, FLOP-matched": (UNIFORM, "fixed-first:0.67:4:1-16")}.items():
        mean, half = _naive_diff(ev, s, m)
        assert pts.loc[r, "diff"] == pytest.approx(mean, rel=1e-9)
        assert pts.loc[r, "hi"] - pts.loc[r, "diff"] == pytest.approx(half, rel=1e-9)
        assert pts.loc[r, "params"] == ev["params"].iloc[0]
    # the depth criterion, read per seed by hand
    u = ev[(ev["schedule"] == UNIFORM) & ev["matched_to"].isna() & (ev["split"] == "validation")]
    g = np.array([u[(u.seed == s) & (u.depth == 4)]["nll"].iloc[0]
                  - u[(u.seed == s) & (u.depth == 16)]["nll"].iloc[0]
                  for s in sorted(u["seed"].unique())])
    assert pts["gain4_16"].iloc[0] == pytest.approx(g.mean())
    assert pts["gain4_16_sds"].iloc[0] == pytest.approx(g.mean() / g.std(ddof=1))
    assert pts["depth_used"].iloc[0] == bool(g.mean() / g.std(ddof=1) >= DEPTH_SDS
                                             and pts["gain1_4_sds"].iloc[0] >= DEPTH_SDS)


@pytest.mark.parametrize("shift,verdict", [(-0.02, "falls with size"), (0.02, "rises with size"),
                                           (0.0, "not resolved (the intervals overlap)")])
def test_the_trend_rule_reads_a_known_shift(tmp_path, shift, verdict):
    """The same grid as a larger size with its fixed-first NLL moved by a known share: the
    trend falls, rises, or stays unresolved, as built."""
    small = _grid(tmp_path, "small", 50_000)
    large = _grid(tmp_path, "large", 500_000, shift)
    tr = trend(scale_points([small, large])).set_index("arm")
    assert tr.loc["fixed-first 67%", "verdict"] == verdict
    assert tr.loc["fixed-first 67%", "span"] == pytest.approx(10)
    assert tr.loc["uniform, FLOP-matched", "verdict"] == "not resolved (the intervals overlap)"


def test_the_trend_is_read_at_the_length_most_grids_share(tmp_path):
    """A grid at another training length is drawn but not judged: here it alone would make the
    trend rise."""
    grids = [_grid(tmp_path, "a", 50_000), _grid(tmp_path, "b", 500_000),
             _grid(tmp_path, "c", 500_000, 0.05, steps=300, seeds=[0, 1, 2, 3])]
    pts = scale_points(grids)
    assert sorted(pts["steps"].unique()) == [300, 600]
    tr = trend(pts).set_index("arm")
    assert (tr["steps"] == 600).all()
    assert tr.loc["fixed-first 67%", "verdict"].startswith("not resolved")


@pytest.mark.slow
def test_the_report_is_written_and_refusals_are_one_line(tmp_path):
    small, large = _grid(tmp_path, "s", 50_000), _grid(tmp_path, "l", 500_000, -0.02)
    out = tmp_path / "report"
    files = build_scale_report([small, large], out)
    assert {"index.html", "README.md", "scale.csv", "gap_vs_params.png",
            "gap_vs_flops.png"} <= {f.name for f in files}
    md = (out / "README.md").read_text()
    assert "falls with size" in md and "depthbench scale-report" in md
    assert len(pd.read_csv(out / "scale.csv")) == 6
    with pytest.raises(UserError, match="share a model size"):
        scale_points([small, _grid(tmp_path, "again", 50_000)])
    r = subprocess.run([sys.executable, "-m", "depthbench", "scale-report",
                        str(ROOT / "reports" / "table3" / "rows"), "--out", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no text eval rows" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x").exists()
    r = subprocess.run([sys.executable, "-m", "depthbench", "scale-report", str(small), "--out",
                        str(out), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["out"] == str(out)


def test_roles_and_the_paper_point():
    assert role("fixed-first:0.67:4:1-16") == "fixed-first 67%"
    assert role("uniform:1-16~fixed-first:0.8:4:1-16") == "uniform, FLOP-matched"
    assert role(UNIFORM) is None
    # the paper-200m spec's uniform arm against 6 N D by hand: N the layers a token passes
    # through at uniform's mean depth (4 unlooped layers + 8.5 of 6 core layers, 12 d^2 each),
    # D = 20,000 steps of 512 x 512 tokens; the head and attention add a few % more
    d = 1280
    hand = 6 * (4 + 8.5 * 6) * 12 * d * d * 20_000 * 512 * 512
    assert 1.0 <= paper_flops() / hand <= 1.15


def test_the_committed_scale_report_is_rebuilt_from_the_committed_grids(tmp_path, monkeypatch):
    """reports/text-scale is what ``depthbench scale-report`` draws from the grids' committed
    rows (docs.SCALE): its tables and sentences, line for line, and its points file."""
    from depthbench.docs import SCALE
    committed = ROOT / "reports" / SCALE.name
    out = tmp_path / "rebuilt"
    monkeypatch.chdir(ROOT)   # the report names its grids as the command that drew it did
    build_scale_report([f"reports/{g}/rows" for g in SCALE.grids], out)
    assert (out / "README.md").read_text() == (committed / "README.md").read_text()
    assert (out / "scale.csv").read_text() == (committed / "scale.csv").read_text()
