"""lm-evaluation-harness integration, offline: the tasks over a generated dataset, the
`depthbench` model, agreement with `depthbench eval`, the wrapper command, bad arguments."""

import json
import subprocess
import sys

import pytest

lm_eval = pytest.importorskip("lm_eval", reason="the lmeval extra is not installed")

from click.testing import CliRunner  # noqa: E402

from depthbench.checkpoint import load_run  # noqa: E402
from depthbench.cli.main import main  # noqa: E402
from depthbench.data.synthetic import Dataset  # noqa: E402
from depthbench.errors import UserError  # noqa: E402
from depthbench.evaluate.harness import DepthbenchLM, harness_sweep  # noqa: E402
from depthbench.evaluate.sweep import sweep  # noqa: E402


@pytest.mark.slow
def test_harness_sweep_agrees_with_depthbench_eval(trained_run, small_data):
    ds = Dataset(small_data)
    model, _ = load_run(trained_run)
    rows = harness_sweep(str(trained_run), str(small_data), [1, 3], ["eval_reordered",
                                                                   "eval_unseen_people"])
    assert len(rows) == 4
    for row in rows:
        native = sweep(model, ds, row["split"], [row["depth"]])[row["depth"]].result(ds.attributes)
        assert row["exact_match"] == native["exact_match"]  # exactly: the same greedy tokens
        assert row["value_nll"] == pytest.approx(native["value_nll"], rel=1e-4)
        assert row["bits_per_person"] == pytest.approx(native["bits_per_person"], rel=1e-4, abs=1e-4)
        assert row["harness"] == "lm-eval" and row["step"] == 400


@pytest.mark.slow
def test_each_depth_gets_its_own_model_and_no_shared_cache(trained_run, small_data):
    # the harness' response cache keys only on request text; depthbench never enables it, and
    # two depths of the same checkpoint give different likelihoods
    rows = harness_sweep(str(trained_run), str(small_data), [1, 4], ["eval_reordered"])
    assert rows[0]["value_nll"] != rows[1]["value_nll"]
    lm = DepthbenchLM(pretrained=str(trained_run), n_loops=2)
    assert lm.get_model_info()["serving_depth"] == 2


def test_adaptive_exit_generation_runs_through_the_engine(trained_run, small_data):
    from lm_eval.api.instance import Instance
    lm = DepthbenchLM(pretrained=str(trained_run), exit="fixed:3", max_depth=3)
    fixed = DepthbenchLM(pretrained=str(trained_run), n_loops=3)
    doc = json.loads((small_data / "eval_reordered.jsonl").read_text().splitlines()[0])
    req = Instance("generate_until", doc, (doc["prompt"], {"until": ["["], "max_gen_toks": 4}), 0)
    assert lm.generate_until([req]) == fixed.generate_until([req])


@pytest.mark.parametrize("args,needle", [
    (dict(n_loops="x"), "n_loops"), (dict(n_loops=0), "n_loops"), (dict(bogus=1), "bogus"),
    (dict(exit="warp:2"), "exit spec"), (dict(batch_size="-3"), "batch_size"),
])
def test_bad_model_arguments(trained_run, args, needle):
    with pytest.raises(UserError, match=needle):
        DepthbenchLM(pretrained=str(trained_run), **args)
    with pytest.raises(UserError, match="pretrained"):
        DepthbenchLM()


@pytest.mark.slow
def test_lm_eval_wrapper_command(trained_run, small_data, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "depthbench", "lm-eval", "run", "--model", "depthbench",
         "--model_args", f"pretrained={trained_run},n_loops=2", "--tasks",
         "depthbench_recall_reordered", "--metadata", json.dumps({"data": str(small_data)}),
         "--limit", "9", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "depthbench_recall_reordered" in r.stdout
    results = list((tmp_path / "out").rglob("results_*.json"))
    assert results
    cfg = json.loads(results[0].read_text())["config"]
    assert cfg["serving_depth"] == 2


def test_eval_cli_harness_option(trained_run, tmp_path):
    r = CliRunner().invoke(main, ["eval", str(trained_run), "--harness", "lm-eval", "--depths", "2",
                                  "--split", "eval_reordered", "--out", str(tmp_path / "h"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows"] == 1
