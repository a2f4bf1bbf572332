"""The bad-input matrix (documented in docs/bad-inputs.md): every case exits with status 2 and
one line on stderr naming the problem, with no traceback and no output left behind."""

import shutil

import pytest
from click.testing import CliRunner

from data_gen import generate, resolve_config
from depthbench import checkpoint as ckpt
from depthbench.cli import main


@pytest.fixture(scope="module")
def bad(small_data, trained_run, tmp_path_factory):
    """Broken copies of the shared dataset and run, one per case."""
    root = tmp_path_factory.mktemp("bad")

    def data_copy(name, edit):
        d = root / name
        shutil.copytree(small_data, d)
        edit(d)
        return d

    def flip(f):
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        f.write_bytes(bytes(raw))

    paths = {
        "missing_file": data_copy("missing", lambda d: (d / "train_tokens.npy").unlink()),
        "empty_file": data_copy("empty", lambda d: (d / "eval_reordered_tokens.npy").write_bytes(b"")),
        "truncated_file": data_copy("trunc", lambda d: (d / "train_order.npy").write_bytes(
            (d / "train_order.npy").read_bytes()[:50])),
        "tampered_file": data_copy("tamper", lambda d: flip(d / "train_tokens.npy")),
        "tampered_vocab": data_copy("vocab", lambda d: flip(d / "vocab.json")),
        "edited_manifest": data_copy("manifest", lambda d: (d / "manifest.json").write_text(
            (d / "manifest.json").read_text().replace('"seed": 11', '"seed": 12'))),
        "corrupt_manifest": data_copy("cmanifest", lambda d: (d / "manifest.json").write_text("{")),
        "no_manifest": data_copy("nomanifest", lambda d: (d / "manifest.json").unlink()),
        "not_a_dir": root / "file.txt",
    }
    paths["not_a_dir"].write_text("x")
    generate(resolve_config("tiny", overrides={"n_people": 30}), root / "other")
    paths["other_data"] = root / "other"
    src = ckpt.latest(trained_run)
    (root / "cut.pt").write_bytes(src.read_bytes()[:1000])
    paths["truncated_ckpt"] = root / "cut.pt"
    (root / "empty.pt").write_bytes(b"")
    paths["empty_ckpt"] = root / "empty.pt"
    (root / "garbage.pt").write_bytes(b"\x80\x04garbage" * 10)
    paths["garbage_ckpt"] = root / "garbage.pt"
    (root / "trace.json").write_text('{"0": [1, "deep"]}')
    paths["bad_trace"] = root / "trace.json"
    (root / "spec_unknown.toml").write_text("[train]\nlearning_rate = 1\n")
    paths["spec_unknown"] = root / "spec_unknown.toml"
    (root / "spec_bad.toml").write_text("[train\n")
    paths["spec_bad"] = root / "spec_bad.toml"
    (root / "gen_unknown.toml").write_text("n_peoples = 3\n")
    paths["gen_unknown"] = root / "gen_unknown.toml"
    return {**paths, "data": small_data, "run": trained_run, "root": root}


def cases():
    D, R = "{data}", "{run}"
    return [
        # (id, argv template, text the one line must contain)
        ("generate-bad-set", ["generate", "--out", "{out}", "--set", "n_people=-1"], "n_people"),
        ("generate-unknown-key", ["generate", "--out", "{out}", "--set", "people=3"], "unknown config key"),
        ("generate-unknown-toml-key", ["generate", "--out", "{out}", "--config", "{gen_unknown}"], "n_peoples"),
        ("generate-bad-preset", ["generate", "--out", "{out}", "--preset", "medium"], "unknown preset"),
        ("generate-out-is-file", ["generate", "--out", "{not_a_dir}"], "is a file"),
        ("train-missing-dir", ["train", "--data", "{root}/nowhere", "--out", "{out}"], "does not exist"),
        ("train-missing-file", ["train", "--data", "{missing_file}", "--out", "{out}"], "is missing"),
        ("train-empty-file", ["train", "--data", "{empty_file}", "--out", "{out}"], "truncated"),
        ("train-truncated-file", ["train", "--data", "{truncated_file}", "--out", "{out}"], "truncated"),
        ("train-tampered-file", ["train", "--data", "{tampered_file}", "--out", "{out}"], "sha256"),
        ("train-tampered-vocab", ["train", "--data", "{tampered_vocab}", "--out", "{out}"], "vocab.json"),
        ("train-edited-manifest", ["train", "--data", "{edited_manifest}", "--out", "{out}"], "was edited"),
        ("train-corrupt-manifest", ["train", "--data", "{corrupt_manifest}", "--out", "{out}"], "corrupt"),
        ("train-no-manifest", ["train", "--data", "{no_manifest}", "--out", "{out}"], "no manifest.json"),
        ("train-bad-schedule", ["train", "--data", D, "--out", "{out}", "--schedule", "uniform:0-4"], ">= 1"),
        ("train-bad-schedule-kind", ["train", "--data", D, "--out", "{out}", "--schedule", "cyclic:4"], "not understood"),
        ("train-steps-zero", ["train", "--data", D, "--out", "{out}", "--steps", "0"], "steps"),
        ("train-negative-lr", ["train", "--data", D, "--out", "{out}", "--set", "lr=-1"], "lr"),
        ("train-bad-injection", ["train", "--data", D, "--out", "{out}", "--set", "injection=mul"], "injection"),
        ("train-resume-other-config", ["train", "--data", D, "--out", R, "--resume", "--set", "d_model=32"], "differ"),
        ("train-resume-other-data", ["train", "--data", "{other_data}", "--out", R, "--resume"], "differ"),
        ("train-both-steps-and-match", ["train", "--data", D, "--out", "{out}", "--steps", "3", "--match-flops", R], "either"),
        ("eval-other-dataset", ["eval", R, "--data", "{other_data}"], "trained on dataset"),
        ("eval-truncated-ckpt", ["eval", "{truncated_ckpt}", "--data", D], "truncated"),
        ("eval-empty-ckpt", ["eval", "{empty_ckpt}", "--data", D], "not a readable"),
        ("eval-garbage-ckpt", ["eval", "{garbage_ckpt}", "--data", D], "not a readable"),
        ("eval-missing-step", ["eval", R, "--checkpoint", "999"], "no checkpoint at step 999"),
        ("eval-bad-depths", ["eval", R, "--depths", "1-x"], "depth"),
        ("eval-zero-depth", ["eval", R, "--depths", "0"], ">= 1"),
        ("eval-bad-split", ["eval", R, "--split", "test"], "unknown split"),
        ("serve-bad-exit", ["serve-bench", R, "--exit", "latent:-3"], "threshold"),
        ("serve-bad-trace", ["serve-bench", R, "--exit", "replay:{bad_trace}"], "lists of depths"),
        ("serve-missing-trace", ["serve-bench", R, "--exit", "replay:{root}/none.json"], "does not exist"),
        ("serve-bad-policy", ["serve-bench", R, "--kv-policy", "paged"], "kv-policy"),
        ("serve-min-over-max", ["serve-bench", R, "--min-depth", "9", "--max-depth", "4"], "min_depth"),
        ("serve-too-long", ["serve-bench", R, "--max-new-tokens", "5000"], "max_seq_len"),
        ("serve-no-model", ["serve-bench"], "either"),
        ("flops-bad-preset", ["flops", "--preset", "huge", "--schedule", "fixed:4"], "unknown model preset"),
        ("flops-bad-schedule", ["flops", "--preset", "tiny", "--schedule", "fixed"], "not a spec"),
        ("run-unknown-key", ["run", "{spec_unknown}", "--out", "{out}"], "unknown key train.learning_rate"),
        ("run-bad-toml", ["run", "{spec_bad}", "--out", "{out}"], "not valid TOML"),
        ("run-missing-spec", ["run", "{root}/none.toml", "--out", "{out}"], "does not exist"),
        ("report-missing", ["report", "{root}/none", "--out", "{out}"], "does not exist"),
        ("probe-bad-batches", ["probe-update", R, "--batches", "0"], "--batches"),
        ("unknown-option", ["eval", R, "--depth", "3"], "No such option"),
    ]


@pytest.mark.parametrize("case", cases(), ids=[c[0] for c in cases()])
def test_bad_input_exits_2_with_one_line(bad, tmp_path, case):
    _, argv, needle = case
    fmt = {k: str(v) for k, v in bad.items()} | {"out": str(tmp_path / "out")}
    args = [a.format(**fmt) for a in argv]
    run_before = sorted(p.name for p in bad["run"].rglob("*"))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, (args, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception  # no traceback
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depthbench: error:"), r.stderr
    assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists(), "no partial output"
    assert sorted(p.name for p in bad["run"].rglob("*")) == run_before, "the run was not touched"


def test_the_matrix_has_at_least_thirty_cases():
    assert len(cases()) >= 30


def test_the_documented_matrix_lists_every_case():
    from pathlib import Path
    doc = (Path(__file__).parents[1] / "docs" / "bad-inputs.md").read_text()
    missing = [c[0] for c in cases() if f"| {c[0]} |" not in doc]
    assert not missing, f"docs/bad-inputs.md lacks {missing}"
