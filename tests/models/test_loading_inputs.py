"""Loading a model of your own (Ouro, Huginn, HF folders): a config the port cannot read
faithfully, NaN weights, a tokenizer of other merges or ids, an ambiguous builtin name, are
refused in one line; from_weights keeps the architecture its weights were trained in."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from refusals import cli, one_line_exit_2

GOLDEN = Path(__file__).parents[1] / "golden"


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
        one_line_exit_2(cli(args), needle)
    assert not list(folders.glob(f"out-{name}*"))


def test_a_spec_naming_a_file_or_with_spaces_says_so(folders):
    one_line_exit_2(cli(["serve-sim", "--model", f"ouro:{folders / 'ouro' / 'config.json'}"]),
                     "is a file; give the checkpoint folder")
    assert cli(["serve-sim", "--model", f"ouro: {folders / 'ouro'}", "--requests", "4"]
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
        one_line_exit_2(cli(args), "holds NaN or infinite values")


def test_a_dataset_of_other_merges_is_refused(folders):
    t = json.loads((folders / "ouro" / "tokenizer.json").read_text())
    t["model"]["merges"] = t["model"]["merges"][::-1]    # the same vocabulary, other merges
    (folders / "rev.json").write_text(json.dumps(t))
    from depthbench.data.corpus import prepare_text
    prepare_text([str(folders / "corpus.txt")], folders / "text-rev", val_fraction=0.2,
                 seq_len=32, tokenizer=str(folders / "rev.json"))
    one_line_exit_2(cli(["eval", "--model", f"ouro:{folders / 'ouro'}", "--data",
                           folders / "text-rev", "--out", folders / "rev-out"]),
                     "the same vocabulary")


def test_a_tokenizer_whose_ids_exceed_its_size_is_refused(folders):
    t = json.loads((folders / "ouro" / "tokenizer.json").read_text())
    t["model"]["vocab"][next(iter(t["model"]["vocab"]))] = 70_000
    (folders / "sparse.json").write_text(json.dumps(t))
    one_line_exit_2(cli(["prepare-text", folders / "corpus.txt", "--out", folders / "sp",
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
        r = cli(["train", "--data", folders / "text", "--out", folders / "tw", "--model-from",
                  f"huginn:{folders / 'huginn'}", "--from-weights", "--set", s, "--steps", "2"])
        one_line_exit_2(r, f"--set {s.split('=')[0]}=")
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
    one_line_exit_2(cli(["serve-sim", "--model", f"hf:{d}"]), needle)


def test_a_builtin_name_that_is_also_a_folder_here_is_ambiguous(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kjv").mkdir()
    (tmp_path / "kjv" / "mine.txt").write_text("\n\n".join(f"my document {i} words" for i in
                                                           range(50)))
    one_line_exit_2(cli(["prepare-text", "kjv", "--out", "d", "--vocab-size", "300"]),
                     "give ./kjv for yours or builtin:kjv")
    one_line_exit_2(cli(["prepare-text", "builtin:nope", "--out", "d", "--vocab-size", "300"]),
                     "no built-in corpus is called 'nope'")
    from depthbench.data.corpus import input_files
    assert [Path(f).name for f in input_files(["./kjv"])] == ["mine.txt"]
    assert input_files(["builtin:python-docs"]) == ["python-docs"]
