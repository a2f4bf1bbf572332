"""One action per stage: the pipeline, its printed plan run in a shell, and submitit's local
executor produce the same rows; stages use the spec's device; changed settings are reported and
rerun only when asked; the module structure the refactor promised holds."""

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from test_pipeline import SMALL

from depthbench.cli.main import main
from depthbench.pipeline.run import Pipeline
from depthbench.pipeline.spec import load_spec

PKG = Path(__file__).resolve().parents[2] / "depthbench"

# columns that measure time or name a path: they differ between two runs of the same stages
VARYING = {"wall_clock", "wall_clock_s", "cpu_clock", "cpu_s", "train_cpu_s", "checkpoint", "source",
           "tokens_per_s", "speedup",
           "wall_s", "prefill_s", "decode_tokens_per_s", "decode_speedup", "fraction_of_ceiling",
           "fraction_of_gain", "decode_fraction_of_ceiling", "paper_fraction",
           # the steady-state window is cut by emission times
           "steady_tokens_per_s", "steady_window_s",
           # the bound is priced on a cost model fitted to this machine's timings, and the
           # baseline's knobs chosen on it
           "bound", "fraction", "ideal_s", "speedup_vs_static", "baseline",
           # latencies and rates are clocks too
           "requests_per_s", "goodput_requests_per_s", "slo_attainment", "bound_note",
           *(f"{m}_{s}_ms" for m in ("ttft", "itl", "tpot", "e2e", "norm_latency")
             for s in ("mean", "p50", "p90", "p99"))}


def rows_of(results: Path) -> dict[str, pd.DataFrame]:
    """Every result row under ``results`` by kind, time and path columns dropped, sorted."""
    files = sorted(results.rglob("*.jsonl"))
    df = pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True)
    out = {}
    for kind, g in df.groupby("kind"):
        if kind == "stage":   # when the grid's stages ran (bookkeeping; a plan run by hand has none)
            continue
        g = g.dropna(axis=1, how="all")
        g = g[[c for c in g.columns if c not in VARYING and not c.startswith(("ttft", "itl", "time_"))]]
        out[kind] = g.sort_values(list(g.columns)).reset_index(drop=True)
    return out


def assert_same_rows(a: Path, b: Path) -> None:
    ra, rb = rows_of(a), rows_of(b)
    assert set(ra) == set(rb) == {"eval", "probe", "serve", "curve", "run"}
    for kind in ra:
        pd.testing.assert_frame_equal(ra[kind], rb[kind], check_like=True, obj=kind)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """The small spec run by the pipeline (in this process, one stage at a time)."""
    root = tmp_path_factory.mktemp("grid")
    (root / "spec.toml").write_text(SMALL + f'[report]\nout = "{root / "report"}"\n')
    r = CliRunner().invoke(main, ["run", str(root / "spec.toml"), "--out", str(root / "exp")])
    assert r.exit_code == 0, r.output
    return root


@pytest.mark.slow
def test_the_printed_plan_run_in_a_shell_gives_the_pipelines_rows(grid, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["run", str(grid / "spec.toml"), "--out", "exp", "--plan"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("depthbench generate --config exp/plan/generate.json")
    assert all("--config exp/plan/" in line for line in lines)
    assert not (tmp_path / "exp" / "runs").exists()  # planned, not run
    py = shlex.quote(sys.executable)
    # one thread, as this test process runs the pipeline (conftest): at 2 threads the sums of
    # a few matmuls associate differently and eval metrics move in the 6th digit
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for line in lines:  # as a user would paste them (with this interpreter)
        cmd = line.replace("torchrun ", f"{py} -m torch.distributed.run ", 1)
        cmd = f"{py} -m {cmd}" if cmd.startswith("depthbench ") else cmd
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, (line, p.stderr[-2000:])
    assert_same_rows(grid / "exp" / "results", tmp_path / "exp" / "results")


@pytest.mark.slow
def test_submitit_local_executor_gives_the_pipelines_rows(grid, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["run", str(grid / "spec.toml"), "--out", "exp",
                                  "--executor", "submitit-local"])
    assert r.exit_code == 0, r.output
    assert "submitted train-uniform_1-4-s0" in r.stdout
    assert_same_rows(grid / "exp" / "results", tmp_path / "exp" / "results")


def test_rows_carry_their_kind_and_training_rows_are_separate(grid):
    res = grid / "exp" / "results"
    for sub, kind in (("eval", "eval"), ("probe", "probe"), ("curves", "curve"), ("runs", "run")):
        files = sorted((res / sub).glob("*.jsonl"))
        assert files, sub
        for f in files:
            assert set(pd.read_json(f, lines=True)["kind"]) == {kind}, f
    assert set(pd.read_json(res / "serve.jsonl", lines=True)["kind"]) == {"serve"}


TINY = """
name = "tiny"
[data]
set = { exposure = 1, n_people = 24, n_unseen_people = 4, name_pool = 8 }
[train]
schedules = ["uniform:1-3"]
steps = 8
set = { d_model = 16, n_heads = 2, batch_size = 8, warmup_steps = 1, log_every = 2 }
[eval]
depths = "1-3"
splits = ["eval_reordered"]
[probe]
enabled = false
[serve]
enabled = false
[run]
workers = 1
"""


@pytest.mark.slow
def test_changed_settings_are_reported_and_rerun_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec.toml"
    spec.write_text(TINY)
    assert CliRunner().invoke(main, ["run", str(spec), "--out", "exp"]).exit_code == 0
    ckpt = tmp_path / "exp" / "runs" / "uniform_1-3-s0" / "checkpoints" / "step_0000008.pt"
    assert ckpt.is_file()
    spec.write_text(TINY.replace("steps = 8", "steps = 6"))
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp"])
    assert r.exit_code == 2
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1 and "train-uniform_1-3-s0" in msg
    assert "train.steps: 8 -> 6" in msg and "--rerun" in msg
    assert ckpt.is_file(), "nothing is deleted without --rerun"
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp", "--rerun", "train-*"])
    assert r.exit_code == 0, r.output
    assert "rerun train-uniform_1-3-s0: train.steps: 8 -> 6" in r.stdout
    assert not ckpt.exists()
    runs = tmp_path / "exp" / "runs" / "uniform_1-3-s0" / "checkpoints"
    assert (runs / "step_0000006.pt").is_file()
    ev = pd.read_json(next((tmp_path / "exp" / "results" / "eval").glob("*6.jsonl")), lines=True)
    assert set(ev["step"]) == {6}  # the eval downstream of the rerun run reran too
    # a rerun dataset reruns the training that reads it (the old run cannot be resumed)
    spec.write_text(TINY.replace("steps = 8", "steps = 6").replace("n_people = 24", "n_people = 20"))
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp", "--rerun", "generate"])
    assert r.exit_code == 0, r.output
    assert "rerun train-uniform_1-3-s0: its inputs were rerun" in r.stdout
    # a run interrupted under other settings (no marker) is reported the same way
    (tmp_path / "exp" / "stages" / "train-uniform_1-3-s0.json").unlink()
    spec.write_text(TINY.replace("steps = 8", "steps = 6").replace("n_people = 24", "n_people = 20")
                    .replace("batch_size = 8", "batch_size = 4"))
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp"])
    assert r.exit_code == 2 and "train.batch_size: 8 -> 4" in r.stderr


DEVICE = """
[data]
set = { exposure = 1, n_people = 24, n_unseen_people = 4, name_pool = 8 }
[train]
schedules = ["fixed-first:0.5:1:1-3"]
steps = 8
set = { d_model = 16, n_heads = 2, batch_size = 8, warmup_steps = 1, log_every = 2 }
[eval]
depths = "1-3"
splits = ["eval_reordered"]
switch_checkpoints = [0]
[probe]
batches = 2
max_people = 8
depth_a = 1
depth_b = 3
[serve]
schedule = "fixed-first:0.5:1:1-3"
modes = ["static", "cdb"]
requests = 2
width = 2
max_depth = 3
exit = "argmax:1"
[run]
workers = 1
device = "cuda"
"""


@pytest.mark.slow
def test_stages_use_the_specs_device(tmp_path, monkeypatch):
    # paper grids: eval, probe and serve run on the GPU the training preset names
    pipe = Pipeline(load_spec("paper-200m"), tmp_path / "exp")
    devices = {st.command: st.config.get("device") for g in pipe.stages() for st in g}
    assert devices["eval"] == devices["probe-update"] == devices["serve-bench"] == "cuda"
    assert pipe.stages()[1][0].config["train"]["device"] == "cuda"
    # and the actions really ask the runtime for it: a fake "cuda" that runs on the CPU
    import depthbench.runtime
    import depthbench.train.probe
    asked = []
    real = depthbench.runtime.setup

    def fake_setup(device="auto", threads=0):
        asked.append(device)
        return real("cpu", threads)

    monkeypatch.setattr(depthbench.runtime, "setup", fake_setup)
    monkeypatch.setattr(depthbench.runtime, "cuda_available", lambda: True)
    monkeypatch.setattr(depthbench.train.probe, "setup", fake_setup)
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec.toml"
    spec.write_text(DEVICE)
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp"])
    assert r.exit_code == 0, r.output
    # the eval (2 checkpoints), probe and serve stages ask for the spec's device
    assert asked == ["cuda"] * 4, asked


def test_an_option_replaces_the_config_files_key(trained_run, tmp_path):
    cfg = tmp_path / "eval.json"
    cfg.write_text(json.dumps({"run": str(trained_run), "depths": "1-3", "out": str(tmp_path / "a"),
                               "splits": ["eval_reordered"], "max_people": 8}))
    r = CliRunner().invoke(main, ["eval", "--config", str(cfg), "--depths", "2", "--json"])
    assert r.exit_code == 0, r.output
    rows = pd.read_json(tmp_path / "a.jsonl", lines=True)
    assert list(rows["depth"]) == [2] and set(rows["kind"]) == {"eval"}
    cfg.write_text(json.dumps({"run": str(trained_run), "bogus": 1}))
    r = CliRunner().invoke(main, ["eval", "--config", str(cfg)])
    assert r.exit_code == 2 and "unknown EvalConfig key(s): bogus" in r.stderr
    r = CliRunner().invoke(main, ["eval"])
    assert r.exit_code == 2 and "give one model" in r.stderr


# ---- the shape of the code -------------------------------------------------------------------------
def _imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
    return out


def _module(p: Path) -> str:
    return ".".join(p.relative_to(PKG.parent).with_suffix("").parts)


def test_module_imports_have_no_cycle():
    mods = {_module(p): p for p in PKG.rglob("*.py") if "tasks" not in p.parts}
    # imports inside functions count too: a lazy import only hides a cycle
    graph = {m: {i for i in _imports(p, top_level_only=False) if i in mods and i != m}
             for m, p in mods.items()}
    state: dict[str, int] = {}

    def visit(m, path):
        if state.get(m) == 1:
            raise AssertionError(f"import cycle: {' -> '.join(path + [m])}")
        if state.get(m) == 2:
            return
        state[m] = 1
        for n in sorted(graph[m]):
            visit(n, path + [m])
        state[m] = 2

    for m in mods:
        visit(m, [])


# The house's floors, lowest first: a module imports only from its own floor or below. The
# ground floor is torch-free; cli and docs are the top.
FLOORS = [
    ("depthbench.errors", "depthbench.stats", "depthbench.vocab", "depthbench.version", "depthbench.axes",
     "depthbench.provenance", "depthbench.console"),
    ("depthbench.fsio", "depthbench.runtime", "depthbench.schedules", "depthbench.rows", "depthbench.runlog",
     "depthbench.exits"),
    ("depthbench.config",),
    ("depthbench.models.looped", "depthbench.flops", "depthbench.data", "depthbench.report",
     "depthbench.models.protocol", "depthbench.models.layers"),
    ("depthbench.checkpoint", "depthbench.evaluate.metrics", "depthbench.evaluate.reference",
     "depthbench.models", "depthbench.export"),
    ("depthbench.loading",),
    ("depthbench.serving",),
    ("depthbench.evaluate",),
    ("depthbench.train", "depthbench.trackers"),
    ("depthbench.pipeline",),
    ("depthbench.cli", "depthbench.docs", "depthbench.__main__"),
]


def _floor(mod: str) -> int:
    if mod in ("depthbench", "depthbench.__init__"):   # the package's own face: load_model
        return len(FLOORS) - 1
    best = max(((len(p), i) for i, ps in enumerate(FLOORS) for p in ps
                if mod == p or mod.startswith(p + ".")), default=None)
    assert best is not None, f"{mod} has no floor in FLOORS"
    return best[1]


def test_no_module_imports_from_a_floor_above_its_own():
    mods = {_module(p): p for p in PKG.rglob("*.py") if "tasks" not in p.parts}
    up = []
    for m, p in mods.items():
        mm = m.removesuffix(".__init__")
        for i in _imports(p, top_level_only=False):
            if i in mods and _floor(i) > _floor(mm):
                up.append(f"{m} -> {i}")
    assert not up, up
    # the generator stands alone: numpy only, nothing of depthbench
    for p in (PKG.parent / "data_gen").glob("*.py"):
        assert not any(i.startswith("depthbench") for i in _imports(p, False)), p.name


def test_no_module_is_longer_than_450_lines():
    long = [f"{p.relative_to(PKG)} ({n})" for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450]
    assert not long, long


def test_the_cli_imports_only_actions_and_configs():
    allowed = {"depthbench.cli",
               "depthbench.config", "depthbench.data.corpus.run_prepare_text",
               "depthbench.errors.UserError",
               "depthbench.train.job.run_train", "depthbench.train.job.arch_keys",
               "depthbench.export.export_run", "depthbench.trackers.replay",
               "depthbench.evaluate.sweep.run_eval",
               "depthbench.train.probe.run_probe", "depthbench.serving.bench.run_bench",
               "depthbench.serving.sim.run_sim",
               "depthbench.report.run_report", "depthbench.report.scale.build_scale_report",
               "depthbench.pipeline.run_grid",
               "depthbench.train.job.flop_summary",
               "depthbench.evaluate.harness.TASKS_DIR", "depthbench.evaluate.harness.run_depths",
               "depthbench.evaluate.harness.check_inputs",
               "depthbench.data.generate.generate", "depthbench.data_gen.resolve_config",
               "depthbench.docs.main"}
    # every command module (support.py is where the runtime helpers come in)
    for f in sorted(p.relative_to(PKG) for p in (PKG / "cli").glob("*.py") if p.name != "support.py"):
        used = {i for i in _imports(PKG / f, False) if i.startswith("depthbench.")}
        modules = {i for i in used if any(a.startswith(i + ".") for a in used)}
        extra = {i for i in used - modules if i not in allowed
                 and not any(i.startswith(a + ".") for a in allowed)}
        assert not extra, (f, extra)
    assert len((PKG / "cli" / "main.py").read_text().splitlines()) < 300


def test_no_function_is_longer_than_about_60_lines():
    long = []
    for p in PKG.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 62:
                long.append(f"{p.name}:{n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not long, long


def test_the_wheel_installs_nothing_at_the_top_level_but_depthbench():
    import tomllib
    cfg = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "depthbench" or p.startswith("depthbench.") for p in cfg["packages"]), cfg
    # data_gen stays at the repository's top level and reads the same under its installed name
    assert cfg["package-dir"]["depthbench.data_gen"] == "data_gen"
    import depthbench.data_gen as gen
    from depthbench.data_gen.config import GenConfig
    assert gen.GenConfig is GenConfig and Path(gen.__file__).parent == PKG.parent / "data_gen"


def test_a_checkout_run_without_installing_finds_data_gen_under_the_same_name(tmp_path):
    # no editable install on the path: only the checkout (as a grid clone runs with PYTHONPATH)
    code = ("import sys; sys.meta_path[:] = [m for m in sys.meta_path if 'editable' not in "
            "repr(m).lower()]; import depthbench.data_gen.format as f, depthbench.data_gen as g; "
            "assert g.__name__ == 'depthbench.data_gen' and f.SPLITS is g.SPLITS; print(g.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(PKG.parent), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(PKG.parent / "data_gen" / "__init__.py")
