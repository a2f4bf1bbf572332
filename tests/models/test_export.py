"""``depthbench export``: a run's checkpoint as safetensors with a config that documents it,
read back by ``load_model('depthbench:DIR')`` to the same logits at every depth (the round trip
is the oracle), a tied head stored once, and bad targets refused in one line."""

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from depthbench.checkpoint import load_run
from depthbench.cli.main import main
from depthbench.config import ModelConfig, TrainConfig
from depthbench.loading import load_model
from depthbench.train.loop import train


def _logits_equal(a, b, vocab: int) -> None:
    x = torch.randint(0, vocab, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for k in (1, 2, 5):
            assert torch.equal(a(x, n_loops=k), b(x, n_loops=k)), k
        for (ka, la), (kb, lb) in zip(a.readouts(x, [1, 3]), b.readouts(x, [1, 3])):
            assert ka == kb and torch.equal(la, lb)


def test_an_exported_run_reloads_to_the_same_logits_and_documents_itself(trained_run, tmp_path):
    r = CliRunner().invoke(main, ["export", str(trained_run), "--out", str(tmp_path / "x"),
                                  "--json"])
    assert r.exit_code == 0, r.output
    run_model, ck = load_run(trained_run)
    back = load_model(f"depthbench:{tmp_path / 'x'}")
    _logits_equal(run_model, back, run_model.cfg.vocab_size)
    cfg = json.loads((tmp_path / "x" / "config.json").read_text())
    arch = cfg["architecture"]
    assert cfg["model_type"] == "depthbench_looped"
    assert arch["parameters"]["total"] == sum(p.numel() for p in run_model.parameters())
    parts = ("embedding", "prelude", "core", "coda", "head", "other")
    assert sum(arch["parameters"][p] for p in parts) == arch["parameters"]["total"]
    assert cfg["origin"]["step"] == ck["step"] and cfg["origin"]["schedule"] == "uniform:1-4"
    out = tmp_path / "x"
    assert (out / "vocab.json").is_file() and "looped" in (out / "README.md").read_text()
    with safe_open(str(tmp_path / "x" / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(run_model.state_dict())
    # an earlier checkpoint by --step
    r = CliRunner().invoke(main, ["export", str(trained_run), "--step", "200", "--out",
                                  str(tmp_path / "x200")])
    assert r.exit_code == 0, r.output
    early, _ = load_run(trained_run, 200)
    # an export given where a run goes: named as a model folder, with the spec that loads it
    r = CliRunner().invoke(main, ["eval", str(out), "--depths", "1", "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and f"--model depthbench:{out}" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("e.*"))
    _logits_equal(early, load_model(f"depthbench:{tmp_path / 'x200'}"), early.cfg.vocab_size)


def test_a_tied_head_is_stored_once_and_restored(small_data, tmp_path):
    run = tmp_path / "tied"
    train(small_data, run, ModelConfig(d_model=32, n_heads=4, tie_embeddings=True),
          TrainConfig(steps=6, batch_size=8, warmup_steps=1, ckpt_every=0, seed=1),
          "uniform:1-3", progress=False, log=lambda *a: None)
    CliRunner().invoke(main, ["export", str(run), "--out", str(tmp_path / "x")])
    with safe_open(str(tmp_path / "x" / "model.safetensors"), "pt") as f:
        assert "head.weight" not in f.keys() and "embed.weight" in f.keys()
    model, _ = load_run(run)
    back = load_model(f"depthbench:{tmp_path / 'x'}")
    assert back.head.weight.data_ptr() == back.embed.weight.data_ptr()
    _logits_equal(model, back, model.cfg.vocab_size)


def test_a_folder_of_another_model_is_not_read_as_an_export(tmp_path):
    from depthbench.models.config import ModelSpecError
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelSpecError, match="not a depthbench export"):
        load_model(f"depthbench:{tmp_path}")


@pytest.mark.parametrize("case", ["inside the run", "not empty"])
def test_bad_exports_are_refused_in_one_line(trained_run, tmp_path, case):
    if case == "inside the run":
        args, says = ["export", str(trained_run), "--out", str(trained_run / "x")], "inside the run"
    else:
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("keep")
        args, says = ["export", str(trained_run), "--out", str(tmp_path / "mine")], "not empty"
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    if case == "not empty":
        assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
