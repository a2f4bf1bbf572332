"""The grid benchmark against an earlier commit compares two codes on one workload: the earlier
code and this one plan the same model, training recipe and task from its spec."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "benchmarks") not in sys.path:   # the scripts import their shared helper
    sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_grid import AGAINST_SPEC, _run_argv, spec_for  # noqa: E402

from depthbench.runtime import compiles  # noqa: E402

COMMIT = "376558b"


def _plan(code: Path, spec: dict, d: Path) -> dict:
    """The stage configs ``depthbench run --plan`` of ``spec`` writes with the package at
    ``code``, through the benchmark's own command line."""
    subprocess.run([*_run_argv(spec_for(code, spec), d), "--plan"], check=True, cwd=d, capture_output=True,
                   env={"PYTHONPATH": str(code), "PATH": "/usr/bin:/bin"})
    return {p.stem: json.loads(p.read_text()) for p in (d / "exp" / "plan").glob("*.json")}


@pytest.mark.slow
def test_the_against_grid_trains_the_same_model_on_the_same_task_in_both_codes(tmp_path):
    have = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{COMMIT}^{{commit}}"],
                          capture_output=True).returncode == 0
    if not have:
        # the earlier code comes from git history, which a shallow clone lacks
        pytest.skip(f"{COMMIT} is not in this clone's history (a shallow clone)")
    old = tmp_path / "old"
    old.mkdir()
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", COMMIT], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
    spec = json.loads(json.dumps(AGAINST_SPEC))
    spec["train"].update(steps=200, seeds=[0, 1])
    then, now = _plan(old, spec, tmp_path / "then"), _plan(ROOT, spec, tmp_path / "now")
    assert sorted(then) == sorted(now) and any(k.startswith("train-") for k in now)
    for stage in (k for k in now if k.startswith("train-")):
        a, b = then[stage], now[stage]
        assert b["model"]["n_grad_loops"] == 0                      # full backprop
        assert {k: v for k, v in b["model"].items() if k in a["model"]} == a["model"]
        assert {k: v for k, v in b["train"].items() if k in a["train"] and k != "compile"} == \
            {k: v for k, v in a["train"].items() if k != "compile"}
        assert b["schedule"] == a["schedule"]
        assert not compiles(b["train"]["compile"], b["train"]["steps"], "cpu")[0]   # eager, as then
    gen_then, gen_now = then["generate"], now["generate"]
    assert {k: v for k, v in gen_now.items() if k in gen_then} == gen_then   # the same task
