"""Round 5 of the boundaries: each class of input that broke the contract, fixed where it arises,
tested by the property it must keep (exit 2 and one line, nothing of the user's lost, no number
drawn that its rows cannot support)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from depthbench.cli.main import main
from depthbench.errors import UserError
from depthbench.report import load_rows
from depthbench.report.compare import nll_comparisons
from depthbench.report.load import fmt_value
from depthbench.stats import t_interval

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / "reports" / "text-table3-deep-lr3e-3" / "rows"
TABLE3 = ROOT / "reports" / "table3" / "rows"


def _cli(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_exit_2(r, needle: str):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert needle in lines[0], lines[0]


def _rows(tmp: Path, src: Path, edit=None, kinds=("eval",)) -> Path:
    """A copy of a committed report's rows (``kinds`` of them), ``edit`` applied to each."""
    d = tmp / "rows"
    d.mkdir(exist_ok=True)
    for k in kinds:
        df = pd.read_csv(src / f"{k}.csv")
        (d / f"{k}.csv").write_text((edit(df, k) if edit else df).to_csv(index=False))
    return d


# ---- class 7: reports draw only what their rows support ---------------------------------------

def test_one_seed_is_never_tabled_as_a_spread():
    assert fmt_value(3.1, float("nan")) == "3.100 (one seed)"
    assert fmt_value(3.1, 0.02) == "3.100 ± 0.020"


def test_identical_readings_give_no_interval_and_no_verdict():
    m, h, n = t_interval([0.01, 0.01, 0.01, 0.01])
    assert m == 0.01 and np.isnan(h) and n == 4
    ev = pd.read_csv(TEXT / "eval.csv")
    ev = ev[ev["split"] == "validation"]
    ref = ev[(ev["schedule"] == "uniform:1-16") & ev["matched_to"].isna()]
    copy = ref.assign(schedule="fixed:4", nll=ref["nll"] * 1.01, run=ref["run"] + "-copy")
    c = nll_comparisons(pd.concat([ref, copy]), "uniform:1-16", "nll")
    assert c["verdict"].iloc[0].startswith("not resolved (8 seeds, every one the same value")


@pytest.mark.parametrize("column,value,needle", [
    ("modeled_train_flops", np.inf, "not a finite number"),
    ("train_cpu_s", np.inf, "not a finite number"),
    ("floor_bits_per_person", np.nan, "is empty in 1 of"),
])
def test_infinite_or_missing_readings_are_refused(tmp_path, column, value, needle):
    def edit(df, _):
        df[column] = df[column].astype(float)
        df.loc[df.index[0], column] = value
        return df
    r = _cli(["report", _rows(tmp_path, TABLE3, edit), "--out", tmp_path / "out"])
    _one_line_exit_2(r, needle)
    assert not (tmp_path / "out").exists()


def test_a_mean_exit_depth_below_one_is_refused(tmp_path):
    src = ROOT / "reports" / "quickstart" / "rows"
    r = _cli(["report", _rows(tmp_path, src, lambda df, _: df.assign(mean_depth=-3.0),
                              ("serve",)), "--out", tmp_path / "out"])
    _one_line_exit_2(r, "mean_depth holds -3")


@pytest.mark.parametrize("edit,needle", [
    (lambda df: df.assign(label=7), "is not the index of one of its 4 choices"),
    (lambda df: df.assign(choices="a, b, c"), "not a JSON list"),
    (lambda df: df.assign(choices=json.dumps(["only one"])), "not a JSON list"),
])
def test_cloze_items_must_name_one_of_their_choices(tmp_path, edit, needle):
    d = _rows(tmp_path, TEXT, lambda df, k: edit(df) if k == "item" else df, ("eval", "item"))
    _one_line_exit_2(_cli(["report", d, "--out", tmp_path / "out"]), needle)


def test_the_item_count_is_the_item_rows(tmp_path):
    d = _rows(tmp_path, TEXT, lambda df, k: df.iloc[:100] if k == "item" else df,
              ("eval", "item"))
    _one_line_exit_2(_cli(["report", d, "--out", tmp_path / "out"]),
                     "say 256 cloze items but its item rows hold 100")
    # without item rows the report does not point at them
    (d / "item.csv").unlink()
    assert _cli(["report", d, "--out", tmp_path / "out"]).exit_code == 0
    md = (tmp_path / "out" / "README.md").read_text()
    assert "rows/item.csv" not in md and "256 items (their rows are not among these)" in md


def test_a_sweep_and_a_grid_are_not_reported_together(tmp_path):
    r = _cli(["report", TABLE3, ROOT / "reports" / "table3-lr" / "rows", "--out", tmp_path / "o"])
    _one_line_exit_2(r, "mix an LR sweep's runs")


def test_one_seed_given_twice_is_refused(tmp_path):
    def edit(df, _):
        extra = df[df["run"] == df["run"].iloc[0]].assign(run=lambda x: x["run"] + "-again")
        return pd.concat([df, extra])
    _one_line_exit_2(_cli(["report", _rows(tmp_path, TABLE3, edit), "--out", tmp_path / "o"]),
                     "would count one seed twice")


def test_a_run_read_before_its_end_is_refused(tmp_path):
    def edit(df, k):
        if k == "eval":   # the first run's rows from before its end
            first = df["run"] == df["run"].iloc[0]
            df.loc[first, "step"] = df.loc[first, "step"] // 2
        return df
    d = _rows(tmp_path, TABLE3, edit, ("eval", "run"))
    _one_line_exit_2(_cli(["report", d, "--out", tmp_path / "o"]), "before its end at step")


# ---- class 10: a killed run is not read as finished -------------------------------------------

def test_eval_refuses_a_run_that_stopped_early(trained_run, small_data, tmp_path):
    run = tmp_path / "killed"
    shutil.copytree(trained_run, run)
    for p in (run / "checkpoints").glob("*"):
        if not p.name.startswith("step_0000200.pt"):   # killed before step 400 was written
            p.unlink()
    r = _cli(["eval", run, "--data", small_data, "--depths", "1-2", "--out", tmp_path / "e"])
    _one_line_exit_2(r, "stopped at step 200 of 400")
    assert not list(tmp_path.glob("e*"))
    r = _cli(["eval", run / "checkpoints" / "step_0000200.pt", "--data", small_data,
              "--depths", "1-2", "--max-people", "8", "--out", tmp_path / "e"])
    assert r.exit_code == 0, r.output


# ---- rows that `eval --model` wrote are a report's rows ----------------------------------------

def test_a_loaded_models_rows_are_reported(tmp_path):
    rows = pd.read_csv(TEXT / "eval.csv")
    rows = rows[rows["run"] == rows["run"].iloc[0]].assign(
        run="ouro:ckpt", checkpoint="ouro:ckpt", schedule=np.nan, seed=np.nan, step=np.nan,
        modeled_train_flops=np.nan, wall_clock_s=np.nan, train_cpu_s=np.nan)
    f = tmp_path / "model.csv"
    rows.to_csv(f, index=False)
    ev = load_rows([f])["eval"]
    assert set(ev["schedule"]) == {"ouro:ckpt"} and (ev["seed"] == 0).all()
    r = _cli(["report", f, "--out", tmp_path / "out"])
    assert r.exit_code == 0, r.output
    assert "(one seed)" in (tmp_path / "out" / "README.md").read_text()


def test_the_refusals_name_no_traceback_from_the_console_script(tmp_path):
    r = subprocess.run([sys.executable, "-m", "depthbench", "report", str(TABLE3),
                        str(ROOT / "reports" / "table3-lr" / "rows"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    with pytest.raises(UserError):
        load_rows([TABLE3, ROOT / "reports" / "table3-lr" / "rows"])


# ---- class 4: outputs never replace a user's file ---------------------------------------------

def test_row_writers_replace_only_rows(tmp_path):
    from depthbench.rows import write_rows
    mine = tmp_path / "notes.jsonl"
    mine.write_text('{"my": "notes"}\n')
    row = {"run": "r", "schedule": "uniform:1-4", "switch_step": None, "step": 1, "K": 1,
           "loss": 1.0}
    with pytest.raises(UserError, match="not a file depthbench wrote"):
        write_rows([row], tmp_path / "notes", "curve")
    assert mine.read_text() == '{"my": "notes"}\n'
    assert not (tmp_path / "notes.csv").exists()
    # its own rows it replaces (a rerun)
    write_rows([row], tmp_path / "rows", "curve")
    write_rows([{**row, "step": 2}], tmp_path / "rows", "curve")
    assert json.loads((tmp_path / "rows.jsonl").read_text())["step"] == 2


def test_eval_and_serve_bench_refuse_to_replace_a_users_file(trained_run, small_data, tmp_path):
    (tmp_path / "mine.jsonl").write_text("my notes\n")
    r = _cli(["eval", trained_run, "--data", small_data, "--depths", "1", "--out",
              tmp_path / "mine"])
    _one_line_exit_2(r, "would replace")
    assert (tmp_path / "mine.jsonl").read_text() == "my notes\n"
    (tmp_path / "trace.txt").write_text("hello\n")
    r = _cli(["serve-bench", "--random", "tiny", "--requests", "2", "--max-new-tokens", "2",
              "--save-trace", tmp_path / "trace.txt"])
    _one_line_exit_2(r, "--save-trace would replace")
    assert (tmp_path / "trace.txt").read_text() == "hello\n"


# ---- class 12 (and 4): one writer of a dataset at a time ---------------------------------------

def test_a_second_writer_of_a_dataset_is_refused(tmp_path):
    import fcntl
    import os
    out = tmp_path / "ds"
    side = tmp_path / ".ds.lock"
    fd = os.open(side, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)     # another process writing ds
    try:
        (tmp_path / "c.txt").write_text("\n\n".join(f"doc {i} words here" for i in range(50)))
        r = _cli(["prepare-text", tmp_path / "c.txt", "--out", out, "--vocab-size", "300"])
        _one_line_exit_2(r, "is being written by another depthbench process")
        r = _cli(["generate", "--out", out, "--preset", "tiny"])
        _one_line_exit_2(r, "is being written by another depthbench process")
    finally:
        os.close(fd)
    assert not out.exists()


# ---- class 11: scripts check every option before they run -------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["serve_cpu.py", "--threads", "x"], "'x' is not an integer"),
    (["serve_cpu.py", "--threads", "1,x"], "'x' is not an integer"),
    (["calibrate.py", "--work", "{file}", "--seeds", "0"], "is a file"),
    (["calibrate_text.py", "--work", "{file}", "--seeds", "0"], "is a file"),
])
def test_benchmark_scripts_refuse_bad_options_first(tmp_path, args, needle):
    f = tmp_path / "afile"
    f.write_text("x")
    rows = ROOT / "docs" / "serving" / "cpu_runs.jsonl"
    before = rows.read_bytes() if rows.exists() else None
    script, *rest = args
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script),
                        *[a.format(file=f) for a in rest]], capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (rows.read_bytes() if rows.exists() else None) == before


# ---- classes 1, 2, 3, 5: model folders read as they are, or refused in one line ----------------

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The golden Ouro and Huginn folders with a tokenizer, and a text dataset in it."""
    from test_byo import WORDS, _tokenizer

    from depthbench.data.corpus import prepare_text
    root = tmp_path_factory.mktemp("r5")
    for kind in ("ouro", "huginn"):
        shutil.copytree(GOLDEN / kind, root / kind)
        _tokenizer(root / kind / "tokenizer.json")
    rng = np.random.default_rng(0)
    (root / "corpus.txt").write_text("\n\n".join(" ".join(rng.choice(WORDS, 40))
                                                 for _ in range(120)) + "\n")
    prepare_text([str(root / "corpus.txt")], root / "text", val_fraction=0.2, seq_len=32,
                 tokenizer=str(root / "ouro" / "tokenizer.json"))
    return root


def _edited(folders, kind: str, name: str, edit) -> Path:
    d = folders / name
    if not d.exists():
        shutil.copytree(folders / kind, d)
        c = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps(edit(c)))
    return d


@pytest.mark.parametrize("name,edit,needle", [
    ("yarn", lambda c: {**c, "rope_parameters": {"rope_type": "yarn", "factor": 4}},
     "rope_type='yarn'"),
    ("ropelist", lambda c: {**c, "rope_parameters": [1, 2]}, "must be a JSON object"),
    ("vocab40", lambda c: {**c, "vocab_size": 2 ** 40}, "vocab_size must be an integer in"),
    ("vocab23", lambda c: {**c, "vocab_size": 2 ** 23}, "does not describe these weights"),
    ("layers", lambda c: {**c, "num_hidden_layers": 100_000_000}, "num_hidden_layers must be"),
    ("negative", lambda c: {**c, "hidden_size": -64}, "hidden_size must be an integer"),
])
def test_a_config_the_port_cannot_read_faithfully_is_refused(folders, name, edit, needle):
    d = _edited(folders, "ouro", name, edit)
    for args in (["eval", "--model", f"ouro:{d}", "--data", folders / "text", "--depths", "1",
                  "--out", folders / f"out-{name}"], ["serve-sim", "--model", f"ouro:{d}"]):
        _one_line_exit_2(_cli(args), needle)
    assert not list(folders.glob(f"out-{name}*"))


def test_a_spec_naming_a_file_or_with_spaces_says_so(folders):
    _one_line_exit_2(_cli(["serve-sim", "--model", f"ouro:{folders / 'ouro' / 'config.json'}"]),
                     "is a file; give the checkpoint folder")
    assert _cli(["serve-sim", "--model", f"ouro: {folders / 'ouro'}", "--requests", "4"]
                ).exit_code == 0


def test_nan_weights_are_never_read_as_a_model(folders):
    from safetensors.torch import load_file, save_file
    d = folders / "nan"
    shutil.copytree(folders / "ouro", d)
    w = load_file(str(d / "model.safetensors"))
    k = sorted(w)[0]
    w[k] = w[k].clone()
    w[k].view(-1)[0] = float("nan")
    save_file(w, str(d / "model.safetensors"))
    for args in (["eval", "--model", f"ouro:{d}", "--data", folders / "text", "--out",
                  folders / "nan-out"],
                 ["serve-bench", "--model", f"ouro:{d}", "--data", folders / "text",
                  "--requests", "2", "--max-new-tokens", "2"]):
        _one_line_exit_2(_cli(args), "holds NaN or infinite values")


def test_a_dataset_of_other_merges_is_refused(folders):
    t = json.loads((folders / "ouro" / "tokenizer.json").read_text())
    t["model"]["merges"] = t["model"]["merges"][::-1]    # the same vocabulary, other merges
    (folders / "rev.json").write_text(json.dumps(t))
    from depthbench.data.corpus import prepare_text
    prepare_text([str(folders / "corpus.txt")], folders / "text-rev", val_fraction=0.2,
                 seq_len=32, tokenizer=str(folders / "rev.json"))
    _one_line_exit_2(_cli(["eval", "--model", f"ouro:{folders / 'ouro'}", "--data",
                           folders / "text-rev", "--out", folders / "rev-out"]),
                     "the same vocabulary")


def test_a_tokenizer_whose_ids_exceed_its_size_is_refused(folders):
    t = json.loads((folders / "ouro" / "tokenizer.json").read_text())
    t["model"]["vocab"][next(iter(t["model"]["vocab"]))] = 70_000
    (folders / "sparse.json").write_text(json.dumps(t))
    _one_line_exit_2(_cli(["prepare-text", folders / "corpus.txt", "--out", folders / "sp",
                           "--tokenizer", folders / "sparse.json"]), "gives ids up to 70000")
    assert not (folders / "sp").exists()


def test_from_weights_keeps_the_architecture_its_weights_were_trained_in(folders):
    import torch

    import depthbench
    from depthbench.config import ModelConfig
    from depthbench.models.build import build_model, model_from
    # Huginn's embedding scale travels with its weights: the starting model is the checkpoint
    keys = model_from(f"huginn:{folders / 'huginn'}", True)
    m = build_model(ModelConfig.from_dict({**ModelConfig().to_dict(), **keys}))
    src = depthbench.load_model(f"huginn:{folders / 'huginn'}")
    x = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        assert torch.equal(m(x, n_loops=3), src(x, n_loops=3))
    # the same refusal wherever the config comes from (a --config file's init_from)
    from depthbench.models.config import ModelSpecError
    with pytest.raises(ModelSpecError, match="tie_embeddings=False is not the checkpoint's"):
        build_model(ModelConfig.from_dict({**ModelConfig().to_dict(), **keys,
                                           "tie_embeddings": False}))
    for s in ("tie_embeddings=false", "d_model=64", "n_core=3", "vocab_size=200"):
        r = _cli(["train", "--data", folders / "text", "--out", folders / "tw", "--model-from",
                  f"huginn:{folders / 'huginn'}", "--from-weights", "--set", s, "--steps", "2"])
        _one_line_exit_2(r, f"--set {s.split('=')[0]}=")
        assert not (folders / "tw").exists()


@pytest.mark.parametrize("edit,needle", [
    ({"n_recurrent_loops": 0}, "n_recurrent_loops must be an integer"),
    ({"n_recurrent_layers": 5}, "must sum to num_hidden_layers"),
    ({"hidden_size": -32}, "hidden_size must be an integer"),
])
def test_dory_configs_name_the_field_that_is_wrong(tmp_path, edit, needle):
    pytest.importorskip("transformers")
    from depthbench.models.hf import tiny_dory
    d = tmp_path / "dory"
    tiny_dory().hf.save_pretrained(str(d))
    c = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**c, **edit}))
    _one_line_exit_2(_cli(["serve-sim", "--model", f"hf:{d}"]), needle)


# ---- class 6: a built-in corpus name never shadows the user's folder --------------------------

def test_a_builtin_name_that_is_also_a_folder_here_is_ambiguous(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kjv").mkdir()
    (tmp_path / "kjv" / "mine.txt").write_text("\n\n".join(f"my document {i} words" for i in
                                                           range(50)))
    _one_line_exit_2(_cli(["prepare-text", "kjv", "--out", "d", "--vocab-size", "300"]),
                     "give ./kjv for yours or builtin:kjv")
    _one_line_exit_2(_cli(["prepare-text", "builtin:nope", "--out", "d", "--vocab-size", "300"]),
                     "no built-in corpus is called 'nope'")
    from depthbench.data.corpus import input_files
    assert [Path(f).name for f in input_files(["./kjv"])] == ["mine.txt"]
    assert input_files(["builtin:python-docs"]) == ["python-docs"]


# ---- class 8: the docs generator says what is wrong and writes nothing -------------------------

def _tree(tmp: Path) -> Path:
    root = tmp / "tree"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text((ROOT / "README.md").read_text())
    shutil.copytree(ROOT / "reports", root / "reports",
                    ignore=shutil.ignore_patterns("*.png", "*.html"))
    return root


@pytest.mark.parametrize("break_it,needle", [
    (lambda r: shutil.rmtree(r / "reports" / "matched" / "rows"), "reports/matched/rows is missing"),
    (lambda r: (r / "reports" / "matched" / "rows" / "eval.csv").write_text("kind,run\neval,x\n"),
     "reports/matched:"),
    (lambda r: [p.unlink() for p in (r / "reports" / "matched" / "rows").iterdir()],
     "reports/matched: no result files"),
    (lambda r: (r / "README.md").unlink(), "has no README.md"),
    (lambda r: (r / "README.md").write_text("<!-- generated: nope -->\nx\n<!-- end -->\n"),
     "block 'nope' has no generator"),
])
@pytest.mark.slow
def test_the_docs_generator_refuses_in_one_line(tmp_path, break_it, needle):
    root = _tree(tmp_path)
    break_it(root)
    readme = (root / "README.md").read_text() if (root / "README.md").exists() else None
    r = subprocess.run([sys.executable, "-m", "depthbench.docs", "--root", str(root)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (root / "docs" / "results.md").exists()
    assert ((root / "README.md").read_text() if (root / "README.md").exists() else None) == readme


# ---- class 9: a spec axis that rounds to another value is refused ------------------------------

@pytest.mark.parametrize("axis,needle", [
    ("lengths = [0.01, 1]", "train.lengths: 0.01 x"),
    ("budgets = [0.01, 1.0]\nbudget_schedule = \"uniform:1-4\"", "train.budgets: 0.01 of the FLOP"),
])
def test_axes_that_round_to_nothing_are_refused(tmp_path, axis, needle):
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "ax"\n[data]\npreset = "tiny"\n[train]\npreset = "tiny"\nschedules = '
                    f'["uniform:1-4"]\nseeds = [0]\nsteps = 6\n{axis}\n[serve]\nenabled = false\n'
                    '[probe]\nenabled = false\n')
    _one_line_exit_2(_cli(["run", spec, "--plan", "--out", tmp_path / "o"]), needle)


# ---- serving: what a record names is what ran ----------------------------------------------------

def test_serving_refuses_knobs_that_cannot_run_and_records_those_that_did(tmp_path):
    _one_line_exit_2(_cli(["serve-bench", "--random", "tiny", "--rate", "0.000001"]),
                     "--rate 1e-06 requests/s spreads 256 requests")
    _one_line_exit_2(_cli(["serve-bench", "--random", "tiny", "--pool", "8", "--width", "64"]),
                     "at least width=64")
    r = _cli(["serve-bench", "--random", "tiny", "--requests", "6", "--max-new-tokens", "3",
              "--width", "64", "--out", tmp_path / "sb"])
    assert r.exit_code == 0, r.output
    rows = pd.read_csv(tmp_path / "sb.csv")
    assert (rows["width"] == 6).all() and (rows["pool"] <= 6).all()
    for knob in ("admit_min", "min_coda_batch", "coda_wait", "prefill_chunk"):
        assert rows[knob].notna().all(), knob
