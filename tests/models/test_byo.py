"""Bring your own looped model, end to end through the command line, on the golden Ouro and
Huginn checkpoints given a tokenizer: eval (NLL and bits per byte per depth against a plain
forward per depth), lm-eval at depths 1-4 (the cloze against depthbench's native cloze),
serve-bench (every adaptive mode the same tokens), serve-sim (the real shape's FLOPs); and bad
checkpoints: one line, exit 2, nothing written."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

import depthbench
from depthbench.cli.main import main
from depthbench.data.corpus import prepare_text
from depthbench.data.text import TextDataset
from depthbench.evaluate.text import cloze_accuracy, eval_windows
from depthbench.flops import FlopModel

GOLDEN = Path(__file__).parents[1] / "golden"
WORDS = ("the loop runs each block again so a token may think longer before it speaks while "
         "another exits early and the batch is formed anew between loops").split()


def _tokenizer(path: Path) -> None:
    """A character-level BPE of 100 tokens (the golden models read 128), with end-of-text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=100, special_tokens=["<|endoftext|>", "<unk>"])
    rng = np.random.default_rng(0)
    tok.train_from_iterator([" ".join(rng.choice(WORDS, 30)) for _ in range(200)], trainer)
    tok.save(str(path))


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    root = tmp_path_factory.mktemp("byo")
    for kind in ("ouro", "huginn"):
        shutil.copytree(GOLDEN / kind, root / kind)
        _tokenizer(root / kind / "tokenizer.json")
    rng = np.random.default_rng(1)
    (root / "corpus.txt").write_text("\n\n".join(" ".join(rng.choice(WORDS, int(rng.integers(30, 60))))
                                                 for _ in range(240)) + "\n")
    for kind in ("ouro", "huginn"):
        prepare_text([str(root / "corpus.txt")], root / f"text-{kind}", val_fraction=0.2, seq_len=32,
                     tokenizer=str(root / kind / "tokenizer.json"))
    return root


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ouro", "huginn"])
def test_eval_gives_nll_and_bits_per_byte_per_depth_as_a_plain_forward_does(ported, kind):
    out = ported / f"rows-{kind}"
    r = _invoke(["eval", "--model", f"{kind}:{ported / kind}", "--data", ported / f"text-{kind}",
                 "--depths", "1-4", "--out", out])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [x["depth"] for x in rows] == [1, 2, 3, 4]
    ds = TextDataset(ported / f"text-{kind}")
    m = depthbench.load_model(f"{kind}:{ported / kind}")
    w = torch.as_tensor(eval_windows(ds.tokens["validation"], ds.seq_len))
    native = cloze_accuracy(m, ds, [1, 4])
    for x in rows:
        with torch.no_grad():
            logits = m(w[:, :-1], n_loops=x["depth"])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()
        assert x["nll"] == pytest.approx(nll, rel=1e-5)
        bpt = ds.manifest["bytes_per_token"]["validation"]
        assert x["bits_per_byte"] == pytest.approx(x["nll"] / math.log(2) / bpt, rel=1e-5)
        assert x["run"] == f"{kind}:{ported / kind}" and x["checkpoint"] == x["run"]
        if x["depth"] in native:
            assert x["cloze_accuracy"] == native[x["depth"]]["cloze_accuracy"]


@pytest.mark.slow
def test_lm_eval_runs_a_task_at_depths_1_to_4_as_the_native_cloze(ported):
    spec = f"huginn:{ported / 'huginn'}"
    r = _invoke(["lm-eval", "run", "--model", "depthbench", "--model_args", f"pretrained={spec}",
                 "--tasks", "depthbench_cloze", "--depths", "1-4", "--metadata",
                 json.dumps({"data": str(ported / "text-huginn")}), "--rows", ported / "lm"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (ported / "lm.jsonl").read_text().splitlines()]
    assert [x["depth"] for x in rows] == [1, 2, 3, 4] and {x["run"] for x in rows} == {spec}
    native = cloze_accuracy(depthbench.load_model(spec), TextDataset(ported / "text-huginn"), [1, 2, 3, 4])
    for x in rows:
        assert x["acc"] == pytest.approx(native[x["depth"]]["cloze_accuracy"], abs=1e-9)


def test_serve_bench_on_a_port_serves_the_same_tokens_in_every_adaptive_mode(ported):
    r = _invoke(["serve-bench", "--model", f"huginn:{ported / 'huginn'}", "--modes",
                 "static,no_refill,cdb", "--exit", "latent:0.3", "--requests", "6",
                 "--max-new-tokens", "6", "--max-depth", "6", "--width", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["adaptive_modes_agree"] is True
    r = _invoke(["serve-bench", "--model", f"ouro:{ported / 'ouro'}", "--modes", "no_refill,cdb",
                 "--exit", "qexit:0.6", "--requests", "4", "--max-new-tokens", "4", "--max-depth", "4",
                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["adaptive_modes_agree"] is True
    # prompts from a text dataset tokenized the model's way
    r = _invoke(["serve-bench", "--model", f"huginn:{ported / 'huginn'}", "--data", ported / "text-huginn",
                 "--modes", "no_refill,cdb", "--exit", "latent:0.3", "--requests", "3", "--prompt-len", "8",
                 "--max-new-tokens", "4", "--max-depth", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["adaptive_modes_agree"] is True


def test_serve_sim_prices_the_ports_real_shape(ported, tmp_path):
    spec = f"ouro:{ported / 'ouro'}"
    r = _invoke(["serve-sim", "--model", spec, "--requests", "8", "--max-depth", "4",
                 "--out", tmp_path / "sim"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "sim.jsonl").read_text().splitlines()]
    assert {x["run"] for x in rows} == {spec}
    from depthbench.config import SimConfig
    from depthbench.serving.profile import load_profile
    from depthbench.serving.sim import simulate
    res = simulate(SimConfig(model=spec, requests=8, max_depth=4), load_profile("h100"))
    shape = depthbench.load_model(spec).shape
    fm = FlopModel.of_shape(shape, 8 + 32)
    assert (res.f0, res.fr) == (fm.f0, fm.fr)
    # SwiGLU (3 d ff) and the gate are counted: not what a plain GELU block of the width gives
    d, ff = 32, 64
    assert fm.fr == 2 * (2 * (4 * d * d + 3 * d * ff) + d) + 4 * 40 * d * 2


def _broken(root: Path, kind: str, how: str) -> Path:
    d = root / f"{kind}-{how}"
    shutil.copytree(GOLDEN / kind, d)
    from safetensors.torch import load_file, save_file
    w = load_file(str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    if how == "missing":
        w.pop(sorted(k for k in w if "layers" in k or "core_block" in k)[0])
    elif how == "unexpected":
        w["model.extra.weight"] = torch.zeros(2)
    elif how == "shape":
        k = next(k for k in w if k.endswith("norm.weight") or k.endswith("ln_f.weight"))
        w[k] = torch.zeros(7)
    elif how == "model_type":
        cfg["model_type"] = "llama"
    elif how == "truncated":
        (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000])
    elif how == "config_type":
        cfg["hidden_size" if kind == "ouro" else "n_embd"] = "32"
    elif how == "rope_scaling":
        cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    elif how == "no_config":
        (d / "config.json").unlink()
    if how not in ("truncated", "no_config"):
        save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
        (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("kind,how,says", [
    ("ouro", "missing", "lacks 1 tensor"), ("huginn", "missing", "lacks 1 tensor"),
    ("ouro", "unexpected", "model.extra.weight"), ("huginn", "shape", "shape (7,)"),
    ("ouro", "model_type", "'llama'"), ("huginn", "truncated", "not a readable safetensors"),
    ("huginn", "config_type", "n_embd"), ("ouro", "rope_scaling", "rope_scaling"),
    ("ouro", "no_config", "no config.json")])
@pytest.mark.slow
def test_bad_checkpoints_exit_2_with_one_line_and_write_nothing(ported, tmp_path, kind, how, says):
    d = _broken(tmp_path, kind, how)
    runs = [["serve-bench", "--model", f"{kind}:{d}", "--requests", "2", "--out", tmp_path / "o1"],
            ["eval", "--model", f"{kind}:{d}", "--data", ported / f"text-{kind}", "--out", tmp_path / "o2"]]
    if how in ("model_type", "config_type", "rope_scaling", "no_config"):   # serve-sim reads the config only
        runs.append(["serve-sim", "--model", f"{kind}:{d}", "--out", tmp_path / "o3"])
    for args in runs:
        r = _invoke(args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.output, r.output
    assert not list(tmp_path.glob("o[123]*"))


def test_a_missing_tokenizer_another_tokenizer_and_a_wrong_kind_are_refused(ported, small_data, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(GOLDEN / "ouro", bare)
    cases = [(["eval", "--model", f"ouro:{bare}", "--data", ported / "text-ouro"], "no tokenizer.json"),
             (["eval", "--model", f"huginn:{ported / 'ouro'}", "--data", ported / "text-ouro"],
              "load it as ouro:"),
             (["eval", "--model", f"ouro:{ported / 'ouro'}"], "needs --data"),
             (["eval", "--model", f"llama:{bare}", "--data", ported / "text-ouro"], "unknown model kind"),
             (["eval", "--model", f"ouro:{ported / 'ouro'}", "--data", ported / "text-ouro",
               "--out", ported / "ouro" / "rows"], "inside the checkpoint"),
             (["serve-bench", "--model", f"ouro:{ported / 'ouro'}", "--data", ported / "text-ouro",
               "--requests", "2", "--out", ported / "ouro" / "serve"], "inside the checkpoint"),
             (["serve-sim", "--model", f"ouro:{ported / 'ouro'}", "--out",
               ported / "ouro" / "sub" / "sim"], "inside the checkpoint"),
             (["serve-bench", "--model", f"huginn:{ported / 'huginn'}", "--exit", "gate:0.5"], "exit gate"),
             (["eval", "--model", f"ouro:{ported / 'ouro'}", "--data", ported / "text-ouro",
               "--checkpoint", "3"], "checkpoint"),
             (["eval", "--model", f"run:{ported / 'ouro'}", "--data", ported / "text-ouro"],
              "names a depthbench run"),
             (["serve-bench", "--random", "tiny", "--data", ported / "text-ouro"], "random tokens"),
             (["serve-bench", "--model", f"ouro:{ported / 'ouro'}", "--data", small_data], "synthetic"),
             (["eval", "--model", f"ouro:{ported / 'ouro'}", "--data", ported / "text-ouro",
               "--depths", "0-2"], "depth")]
    other = tmp_path / "other.json"
    _tokenizer(other)
    tok = json.loads(other.read_text())
    n = len(tok["model"]["vocab"])
    tok["model"]["vocab"] = {t: (i + 1) % n for t, i in tok["model"]["vocab"].items()}
    shutil.copytree(GOLDEN / "ouro", tmp_path / "other")
    (tmp_path / "other" / "tokenizer.json").write_text(json.dumps(tok))
    cases.append((["eval", "--model", f"ouro:{tmp_path / 'other'}", "--data", ported / "text-ouro"],
                  "another tokenizer"))
    for args, says in cases:
        out = ["--out", tmp_path / "rows"] if "--out" not in args and args[0] == "eval" else []
        r = _invoke([*args, *out])
        assert r.exit_code == 2 and says in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not list(tmp_path.glob("rows*")) and not list((ported / "ouro").glob("rows*"))
    assert not list((ported / "ouro").glob("serve*")) and not (ported / "ouro" / "sub").exists()


# ---- training a ported architecture under depthbench's schedules ---------------------------------
def test_a_port_config_shape_is_what_its_modules_hold():
    from depthbench.config import ModelConfig
    from depthbench.models.build import build_model, model_from, port_dict
    from depthbench.models.huginn import HuginnLM
    from depthbench.models.ouro import OuroLM
    for kind, cls in (("ouro", OuroLM), ("huginn", HuginnLM)):
        for extra in ({}, {"n_kv_heads": 2, "d_model": 64, "d_ff": 96}):
            cfg = ModelConfig(**{**model_from(f"{kind}:{GOLDEN / kind}"), "vocab_size": 50, **extra})
            mods = cls(port_dict(cfg)).shape
            assert cfg.shape == mods.__class__(**{**mods.__dict__, "exit_gate": False, "gate_params": 0})
        start = build_model(ModelConfig(**model_from(f"{kind}:{GOLDEN / kind}", weights=True)))
        ref, x = depthbench.load_model(f"{kind}:{GOLDEN / kind}"), torch.randint(0, 128, (2, 9))
        with torch.no_grad():
            assert torch.equal(start(x, n_loops=3), ref(x, n_loops=3))


def _losses(run: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()
            if "loss" in json.loads(x)]


@pytest.mark.parametrize("kind", ["ouro", "huginn"])
def test_training_a_ported_architecture_learns_resumes_exactly_and_evaluates(small_data, tmp_path, kind):
    base = ["train", "--data", small_data, "--model-from", f"{kind}:{GOLDEN / kind}", "--schedule",
            "uniform:1-3", "--set", "batch_size=8", "--set", "warmup_steps=2", "--set", "lr=3e-3",
            "--set", "log_every=1", "--set", "ckpt_every=10"]
    r = _invoke([*base, "--out", tmp_path / "a", "--steps", "20"])
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "a" / "run.json").read_text())
    assert rec["model"]["arch"] == kind and "init_from" not in rec["model"]
    losses = _losses(tmp_path / "a")
    assert len(losses) == 20 and np.mean(losses[-5:]) < np.mean(losses[:5])
    # resumed from step 10 as if it had died there: the same losses and weights
    from depthbench import checkpoint as ckpt
    from depthbench.config import ModelConfig, TrainConfig
    from depthbench.models.build import model_from
    from depthbench.train.loop import train
    mcfg = ModelConfig(**model_from(f"{kind}:{GOLDEN / kind}"))
    tcfg = TrainConfig(steps=12, batch_size=8, lr=3e-3, warmup_steps=2, log_every=1, ckpt_every=0,
                       keep_steps=(4,), seed=0)
    train(small_data, tmp_path / "r", mcfg, tcfg, "uniform:1-3", progress=False, log=lambda *a: None)
    reference, w_ref = _losses(tmp_path / "r"), ckpt.load(ckpt.latest(tmp_path / "r"))["model"]
    (tmp_path / "r" / "checkpoints" / ckpt.ckpt_name(12)).unlink()
    ckpt.atomic_write_text(tmp_path / "r" / "checkpoints" / "latest", ckpt.ckpt_name(4))
    train(small_data, tmp_path / "r", mcfg, tcfg, "uniform:1-3", resume=True, progress=False,
          log=lambda *a: None)
    assert _losses(tmp_path / "r") == reference
    w = ckpt.load(ckpt.latest(tmp_path / "r"))["model"]
    assert all(torch.equal(w[k], w_ref[k]) for k in w_ref)
    r = _invoke(["eval", tmp_path / "a", "--depths", "1-3", "--max-people", "8", "--out", tmp_path / "ev"])
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "ev.jsonl").read_text().splitlines()) >= 3


def test_training_from_a_checkpoints_weights_on_text_tokenized_its_way(ported, small_data, tmp_path):
    spec = f"huginn:{ported / 'huginn'}"
    args = ["train", "--model-from", spec, "--from-weights", "--steps", "3", "--set", "batch_size=4",
            "--schedule", "fixed:2"]
    r = _invoke([*args, "--data", ported / "text-huginn", "--out", tmp_path / "w"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "w" / "run.json").read_text())["model"]["init_from"].startswith("huginn:")
    r = _invoke([*args, "--data", small_data, "--out", tmp_path / "x"])
    assert r.exit_code == 2 and "synthetic people dataset" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    r = _invoke(["train", "--from-weights", "--data", small_data, "--out", tmp_path / "y"])
    assert r.exit_code == 2 and "--model-from" in r.output
    assert not (tmp_path / "y").exists()
