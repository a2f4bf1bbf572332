"""The bad-input matrix (documented in docs/bad-inputs.md): every case exits with status 2 and
one line on stderr naming the problem, with no traceback and no output left behind."""

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from depthbench import checkpoint as ckpt
from depthbench.cli.main import main
from depthbench.data.generate import generate
from depthbench.data_gen import dataset_hash, resolve_config


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
    generate(resolve_config("tiny", overrides={"exposure": 1, "n_people": 30}), root / "other")
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

    # ---- files edited and then re-hashed, so that only a schema check can catch them ----------
    def rehashed(name, edit_manifest=None, files=None):
        """A copy whose files are replaced (name -> bytes) and whose manifest is edited, with
        every sha256, size and the dataset hash recomputed to match."""
        def edit(d):
            m = json.loads((d / "manifest.json").read_text())
            for fname, data in (files or {}).items():
                (d / fname).write_bytes(data)
                m["files"][fname] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            if edit_manifest:
                edit_manifest(m, d)
            m["dataset_hash"] = dataset_hash(m)
            (d / "manifest.json").write_text(json.dumps(m))
        return data_copy(name, edit)

    def npy(arr):
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()

    tok = np.load(small_data / "train_tokens.npy")
    outside = root / "outside.txt"
    outside.write_text("secret")
    paths.update({
        "rehash_seq_len": rehashed("r_seq", lambda m, d: m.update(seq_len=m["seq_len"] + 5)),
        "rehash_ceiling": rehashed("r_ceil", lambda m, d: m.update(ceiling_bits=1e9)),
        "rehash_vocab_size": rehashed("r_vs", lambda m, d: m.update(vocab_size=3)),
        "rehash_dtype": rehashed("r_dt", lambda m, d: m.update(token_dtype="float64")),
        "rehash_counts": rehashed("r_counts", lambda m, d: m.update(counts="many")),
        "rehash_version_str": rehashed("r_fv", lambda m, d: m.update(format_version="2")),
        "rehash_path_escape": rehashed("r_esc", lambda m, d: m["files"].update(
            {"../../outside.txt": {"sha256": hashlib.sha256(b"secret").hexdigest(), "bytes": 6}})),
        "rehash_config_type": rehashed("r_cfg", lambda m, d: m["config"].update(n_people="many")),
        "rehash_vocab_shape": rehashed("r_voc", files={"vocab.json": b'{"tokens": 5}'}),
        "rehash_vocab_binary": rehashed("r_vocb", files={"vocab.json": b"\xff\xfe\x00"}),
        "rehash_float_tokens": rehashed("r_float", files={"train_tokens.npy": npy(tok.astype(np.float32))}),
        "rehash_wrong_shape": rehashed("r_shape", files={"train_tokens.npy": npy(tok[:, :-2].copy())}),
        "rehash_token_range": rehashed("r_range", files={"train_tokens.npy": npy(
            np.full_like(tok, np.iinfo(tok.dtype).max))}),
        "manifest_is_list": data_copy("m_list", lambda d: (d / "manifest.json").write_text("[1, 2]")),
    })

    # ---- run directories with a broken record, pointer or checkpoint ------------------------------
    def run_copy(name, edit):
        d = root / name
        shutil.copytree(trained_run, d)
        edit(d)
        return d

    def edit_json(f, **kw):
        rec = json.loads(f.read_text())
        rec.update(kw)
        f.write_text(json.dumps(rec))

    paths.update({
        "run_seed_str": run_copy("run_seed", lambda d: edit_json(d / "run.json", seed="zero")),
        "run_model_list": run_copy("run_model", lambda d: edit_json(d / "run.json", model=[1])),
        "run_json_list": run_copy("run_list", lambda d: (d / "run.json").write_text("[]")),
        "run_json_binary": run_copy("run_bin", lambda d: (d / "run.json").write_bytes(b"\xff\x00")),
        "run_latest_escape": run_copy("run_latest", lambda d: (d / "checkpoints" / "latest").write_text(
            "../../../etc/passwd\n")),
    })
    ck = torch.load(src, weights_only=True)
    ck["model_config"] = "tiny"
    torch.save(ck, root / "cfg_str.pt")
    paths["ckpt_config_str"] = root / "cfg_str.pt"
    ck = torch.load(src, weights_only=True)
    del ck["optimizer"]
    torch.save(ck, root / "no_opt.pt")
    paths["ckpt_no_optimizer"] = root / "no_opt.pt"
    torch.save([1, 2, 3], root / "list.pt")
    paths["ckpt_list"] = root / "list.pt"

    # every broken checkpoint above carries its own checksum, so that the load checks behind
    # the checksum are the ones tried; one copied without it is refused before loading
    for name in ("cut", "empty", "garbage", "cfg_str", "no_opt", "list"):
        f = root / f"{name}.pt"
        ckpt.checksum_path(f).write_text(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
    shutil.copy(src, root / "bare.pt")
    paths["ckpt_without_checksum"] = root / "bare.pt"

    def foreign(d):  # another run's checkpoint, with its own valid checksum, put in as latest
        ck = torch.load(src, weights_only=True)
        ck["schedule"] = "fixed:3"
        f = d / "checkpoints" / "step_0000999.pt"
        torch.save(ck, f)
        ckpt.checksum_path(f).write_text(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
        (d / "checkpoints" / "latest").write_text(f.name + "\n")
    paths["run_foreign_ckpt"] = run_copy("foreign", foreign)

    # ---- specs and result rows -----------------------------------------------------------------
    for name, text in {"spec_eval_batch0": "[eval]\nbatch_size = 0\n",
                       "spec_nested_schedules": '[train]\nschedules = [["fixed:2"]]\n',
                       "spec_table_seed": "[train]\nseeds = [{a = 1}]\n",
                       "spec_huge_depth": '[train]\nschedules = ["uniform:1-99999999999999999999"]\n',
                       "spec_bool_set": '[train]\nset = { rope = "False" }\n',
                       "spec_budget_nan": "[train]\nbudgets = [nan]\n",
                       "spec_valid": '[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n'}.items():
        (root / f"{name}.toml").write_text(text)
        paths[name] = root / f"{name}.toml"
    (root / "rows").mkdir()
    (root / "rows.toml").mkdir()
    (root / "rows" / "eval.jsonl").write_text(json.dumps({"depth": 1, "split": "eval_reordered",
                                                          "bits_per_person": 3.0}) + "\n")
    paths["rows_missing_cols"] = root / "rows"
    (root / "rows_nan").mkdir()
    (root / "rows_nan" / "serve.csv").write_text("mode,tokens_per_s,speedup,ceiling\nstatic,x,1,1\n")
    paths["rows_not_numbers"] = root / "rows_nan"
    # ---- forged columns --------------------------------------------------------------
    for name, text in {"eval_forged": f'run = "{trained_run}"\n[tags]\nbits_per_person = 69.9\n',
                       "train_forged": f'data = "{small_data}"\nout = "{root}/forged"\n'
                                       '[tags]\nschedule = "uniform:1-16"\n',
                       "serve_forged": f'run = "{trained_run}"\n[tags]\nmode = "x"\n',
                       "eval_attr_forged": f'run = "{trained_run}"\n[tags]\n"bits/x" = 1\n',
                       "eval_tag_table": f'run = "{trained_run}"\n[tags]\nz = {{a = 1}}\n'}.items():
        (root / f"{name}.toml").write_text(text)
        paths[name] = root / f"{name}.toml"
    # ---- outputs over inputs, specs checked whole, shapes checked --------------------
    for name, files in {"fake_dataset": {"manifest.json": "{}", "notes.txt": "mine"},
                        "fake_report": {"report.json": '{"figures": []}', "notes.txt": "mine"}
                        }.items():
        (root / name).mkdir()
        for fname, text in files.items():
            (root / name / fname).write_text(text)
        paths[name] = root / name
    h100 = (Path(__file__).resolve().parents[2] / "depthbench" / "serving" / "profiles" /
            "h100.toml").read_text()
    for name, text in {"prof_eff0": h100.replace("flops_efficiency = 0.7", "flops_efficiency = 0"),
                       "prof_peak_bool": h100.replace("peak_flops = 989e12", "peak_flops = true")
                       }.items():
        (root / f"{name}.toml").write_text(text)
        paths[name] = root / f"{name}.toml"
    (root / "rows_sched").mkdir()
    (root / "rows_sched" / "eval.jsonl").write_text(json.dumps({
        "run": "r", "schedule": 3, "seed": 0, "step": 1, "depth": 1, "split": "eval_reordered",
        "nll": 1.0, "bits_per_person": 1.0, "exact_match": 0.1, "ceiling_bits": 48.0,
        "modeled_train_flops": 1.0}) + "\n")
    paths["rows_bad_schedule"] = root / "rows_sched"
    (root / "rows_list_line.jsonl").write_text('{"kind": "eval"}\n[1, 2]\n')
    paths["rows_list_line"] = root / "rows_list_line.jsonl"
    (root / "trace_other.json").write_text('{"9999": [1, 2]}')
    paths["trace_other"] = root / "trace_other.json"
    (root / "trace_bool.json").write_text('{"0": [true, 1]}')
    paths["trace_bool"] = root / "trace_bool.json"
    for name, text in {
            "spec_report_escape": '[report]\nname = "../x"\n',
            "spec_budget_ids": '[train]\nbudgets = [0.151, 0.154]\n',
            "spec_schedule_twice": '[train]\nschedules = ["fixed:2", "fixed:02"]\n'
                                   '[serve]\nenabled = false\n',
            "spec_set_seed": '[train]\nset = { seed = 3 }\n',
            "spec_set_steps": '[train]\nset = { steps = 3 }\n',
            "spec_cuda": '[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n'
                         '[run]\ndevice = "cuda"\n',
            "spec_gate": '[train]\nschedules = ["fixed:2"]\n[serve]\nschedule = "fixed:2"\n'
                         'exit = "gate:0.5"\n',
            "spec_report_full": f'[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n'
                                f'[report]\nout = "{root / "fake_report"}"\n',
            "spec_no_reordered": '[eval]\nsplits = ["eval_seen_order"]\n',
            "cfg_model_int": f'data = "{small_data}"\nout = "{root}/x"\nmodel = 3\n',
            "cfg_train_list": f'data = "{small_data}"\nout = "{root}/x"\ntrain = [1]\n'}.items():
        (root / f"{name}.toml").write_text(text)
        paths[name] = root / f"{name}.toml"

    def edit_log(d, step):
        f = d / "metrics.jsonl"
        lines = f.read_text().splitlines()
        row = json.loads(lines[-1])
        row["step"] = step
        f.write_text("\n".join(lines[:-1] + [json.dumps(row)]) + "\n")

    def edit_flops(d):
        rec = json.loads((d / "run.json").read_text())
        rec["flop_model"]["f0"] = 1.0
        (d / "run.json").write_text(json.dumps(rec))
    paths.update({
        "run_log_step_str": run_copy("log_str", lambda d: edit_log(d, "7")),
        "run_log_no_step": run_copy("log_none", lambda d: edit_log(d, None)),
        "run_flop_model": run_copy("flopm", edit_flops),
    })
    for name in ("run_log_step_str", "run_log_no_step"):  # resume it with its own settings
        rec = json.loads((paths[name] / "run.json").read_text())
        job = {"data": str(small_data), "out": str(paths[name]), "model": rec["model"],
               "train": rec["train"], "schedule": rec["schedule"], "resume": True}
        (root / f"{name}.json").write_text(json.dumps(job))
        paths[name + "_job"] = root / f"{name}.json"
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
        ("train-bad-schedule", ["train", "--data", D, "--out", "{out}", "--schedule", "uniform:0-4"], "between 1 and"),
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
        ("eval-zero-depth", ["eval", R, "--depths", "0"], "between 1 and"),
        ("eval-bad-split", ["eval", R, "--split", "test"], "--split: must be one of"),
        ("serve-bad-exit", ["serve-bench", R, "--exit", "latent:-3"], "threshold"),
        ("serve-bad-trace", ["serve-bench", R, "--exit", "replay:{bad_trace}"], "lists of depths"),
        ("serve-missing-trace", ["serve-bench", R, "--exit", "replay:{root}/none.json"], "does not exist"),
        ("serve-bad-policy", ["serve-bench", R, "--kv-policy", "paged"], "kv-policy"),
        ("serve-min-over-max", ["serve-bench", R, "--min-depth", "9", "--max-depth", "4"], "--min-depth: must be <= max_depth"),
        ("serve-too-long", ["serve-bench", R, "--max-new-tokens", "5000"], "max_seq_len"),
        ("serve-no-model", ["serve-bench"], "give one model"),
        ("sim-no-shape", ["serve-sim"], "--random"),
        ("sim-data-dependent-exit", ["serve-sim", "--random", "tiny", "--exit", "latent:0.1"], "known in advance"),
        ("sim-missing-profile", ["serve-sim", "--random", "tiny", "--profile", "{root}/none.toml"], "does not exist"),
        ("sim-unknown-profile", ["serve-sim", "--random", "tiny", "--profile", "tpu9"], "no hardware profile"),
        ("sim-profile-is-dir", ["serve-sim", "--random", "tiny", "--profile", "{root}/rows.toml"], "profile"),
        ("sim-bad-profile", ["serve-sim", "--random", "tiny", "--profile", "{bad_trace}"], "profile"),
        ("sim-means-out-of-range", ["serve-sim", "--random", "tiny", "--max-depth", "4", "--means", "2,9"], "--means"),
        ("sim-means-not-numbers", ["serve-sim", "--random", "tiny", "--means", "2,x"], "--means"),
        ("sim-bad-spread", ["serve-sim", "--random", "tiny", "--length-spread", "1.5"], "--length-spread"),
        ("flops-bad-preset", ["flops", "--preset", "huge", "--schedule", "fixed:4"], "unknown model preset"),
        ("flops-bad-schedule", ["flops", "--preset", "tiny", "--schedule", "fixed"], "not a spec"),
        ("run-unknown-key", ["run", "{spec_unknown}", "--out", "{out}"], "unknown key train.learning_rate"),
        ("run-bad-toml", ["run", "{spec_bad}", "--out", "{out}"], "not valid TOML"),
        ("run-missing-spec", ["run", "{root}/none.toml", "--out", "{out}"], "does not exist"),
        ("report-missing", ["report", "{root}/none", "--out", "{out}"], "does not exist"),
        ("probe-bad-batches", ["probe-update", R, "--batches", "0"], "--batches"),
        ("probe-depth-b-zero", ["probe-update", R, "--depths-b", "0"], "--depths-b"),
        ("unknown-option", ["eval", R, "--depth", "3"], "No such option"),
        # ---- files trusted after their hash: edited, then re-hashed ----------------------------
        ("data-rehashed-seq-len", ["train", "--data", "{rehash_seq_len}", "--out", "{out}"], "'seq_len' does not follow"),
        ("data-rehashed-ceiling", ["eval", R, "--data", "{rehash_ceiling}"], "'ceiling_bits' does not follow"),
        ("data-rehashed-vocab-size", ["train", "--data", "{rehash_vocab_size}", "--out", "{out}"], "'vocab_size' does not follow"),
        ("data-rehashed-dtype", ["train", "--data", "{rehash_dtype}", "--out", "{out}"], "'token_dtype' does not follow"),
        ("data-rehashed-counts", ["train", "--data", "{rehash_counts}", "--out", "{out}"], "'counts' does not follow"),
        ("data-format-version-string", ["train", "--data", "{rehash_version_str}", "--out", "{out}"], "must be an integer (got '2')"),
        ("data-path-escape", ["train", "--data", "{rehash_path_escape}", "--out", "{out}"], "exactly the dataset's files"),
        ("data-config-type", ["train", "--data", "{rehash_config_type}", "--out", "{out}"], "invalid generator config"),
        ("data-vocab-shape", ["train", "--data", "{rehash_vocab_shape}", "--out", "{out}"], "not the vocabulary"),
        ("data-vocab-binary", ["eval", R, "--data", "{rehash_vocab_binary}"], "not the vocabulary"),
        ("data-float-tokens", ["train", "--data", "{rehash_float_tokens}", "--out", "{out}"], "float32 array"),
        ("data-wrong-shape", ["train", "--data", "{rehash_wrong_shape}", "--out", "{out}"], "of shape"),
        ("data-token-range", ["train", "--data", "{rehash_token_range}", "--out", "{out}"], "out of range"),
        ("data-manifest-list", ["train", "--data", "{manifest_is_list}", "--out", "{out}"], "JSON object"),
        ("data-is-a-file", ["train", "--data", "{not_a_dir}", "--out", "{out}"], "is a file, not a dataset"),
        ("run-json-seed-string", ["eval", "{run_seed_str}"], "'seed'"),
        ("run-json-model-list", ["eval", "{run_model_list}"], "'model'"),
        ("run-json-list", ["eval", "{run_json_list}"], "JSON object"),
        ("run-json-binary", ["eval", "{run_json_binary}"], "corrupt"),
        ("run-latest-escape", ["eval", "{run_latest_escape}"], "latest is corrupt"),
        ("ckpt-config-string", ["eval", "{ckpt_config_str}", "--data", D], "'model_config'"),
        ("ckpt-no-optimizer", ["eval", "{ckpt_no_optimizer}", "--data", D], "'optimizer'"),
        ("ckpt-list", ["eval", "{ckpt_list}", "--data", D], "not a depthbench checkpoint"),
        # ---- numbers and flags bounded at parse time -------------------------------------------
        ("eval-batch-size-zero", ["eval", R, "--batch-size", "0"], "--batch-size"),
        ("eval-batch-size-negative", ["eval", R, "--batch-size", "-1"], "--batch-size"),
        ("eval-max-people-negative", ["eval", R, "--max-people", "-3"], "--max-people"),
        ("serve-rate-nan", ["serve-bench", R, "--rate", "nan"], "--rate"),
        ("serve-rate-inf", ["serve-bench", R, "--rate", "inf"], "--rate"),
        ("serve-max-depth-huge", ["serve-bench", R, "--max-depth", "1000000000"], "--max-depth"),
        ("serve-width-zero", ["serve-bench", R, "--width", "0"], "--width"),
        ("train-steps-negative", ["train", "--data", D, "--out", "{out}", "--steps", "-5"], "--steps"),
        ("train-schedule-overflow", ["train", "--data", D, "--out", "{out}", "--schedule", "uniform:1-99999999999999999999"], "between 1 and"),
        ("train-set-bool-string", ["train", "--data", D, "--out", "{out}", "--set", "rope=False"], "rope: must be true or false"),
        ("train-set-compile-no", ["train", "--data", D, "--out", "{out}", "--set", "compile=no"], "compile: must be true or false"),
        ("train-set-lr-nan", ["train", "--data", D, "--out", "{out}", "--set", "lr=NaN"], "lr: must be a finite number"),
        ("train-seed-negative", ["train", "--data", D, "--out", "{out}", "--seed", "-1"], "--seed"),
        ("generate-set-bool-count", ["generate", "--out", "{out}", "--set", "n_people=true"], "n_people"),
        ("flops-steps-negative", ["flops", "--preset", "tiny", "--schedule", "fixed:4", "--steps", "-5"], "--steps"),
        ("run-eval-batch-zero", ["run", "{spec_eval_batch0}", "--out", "{out}"], "eval.batch_size"),
        ("run-nested-schedules", ["run", "{spec_nested_schedules}", "--out", "{out}"], "list of strings"),
        ("run-table-seed", ["run", "{spec_table_seed}", "--out", "{out}"], "list of integers"),
        ("run-huge-depth", ["run", "{spec_huge_depth}", "--out", "{out}"], "between 1 and"),
        ("run-bool-string-set", ["run", "{spec_bool_set}", "--out", "{out}"], "rope: must be true or false"),
        ("run-budget-nan", ["run", "{spec_budget_nan}", "--out", "{out}"], "train.budgets"),
        # ---- partial output and misleading messages --------------------------------------------
        ("report-missing-columns", ["report", "{rows_missing_cols}", "--out", "{out}"], "lacks the column"),
        ("report-not-numbers", ["report", "{rows_not_numbers}", "--out", "{out}"], "finite numbers"),
        ("report-out-is-input", ["report", "{rows_missing_cols}", "--out", "{rows_missing_cols}"], "would replace the result rows"),
        ("train-resume-into-dataset", ["train", "--data", D, "--out", D, "--resume"], "is inside the dataset"),
        ("train-out-inside-dataset", ["train", "--data", D, "--out", D + "/run"], "is inside the dataset"),
        ("train-out-is-file", ["train", "--data", D, "--out", "{not_a_dir}"], "is a file"),
        ("run-out-is-file", ["run", "{spec_valid}", "--out", "{not_a_dir}"], "is a file"),
        ("generate-force-over-non-dataset", ["generate", "--out", "{rows_not_numbers}", "--force"], "not a depthbench dataset"),
        # ---- identity checked where the data is used ----------------------------------
        ("ckpt-without-checksum", ["eval", "{ckpt_without_checksum}", "--data", D], "has no checksum file"),
        ("ckpt-from-another-run", ["eval", "{run_foreign_ckpt}"], "does not belong to run"),
        ("ckpt-file-and-step", ["eval", "{ckpt_without_checksum}", "--data", D, "--checkpoint", "3"], "cannot pick another step"),
        # ---- outputs never over inputs; only tool-made directories replaced -----------
        ("eval-out-over-run-log", ["eval", R, "--depths", "1", "--out", R + "/metrics"], "would replace a file this command reads"),
        ("eval-out-in-dataset", ["eval", R, "--depths", "1", "--out", D + "/eval_reordered"], "is inside the dataset"),
        ("probe-out-over-run-log", ["probe-update", R, "--out", R + "/metrics"], "would replace a file this command reads"),
        ("serve-out-over-run-record", ["serve-bench", R, "--requests", "2", "--out", R + "/run"], "would replace a file this command reads"),
        ("generate-force-over-manifest-name", ["generate", "--out", "{fake_dataset}", "--force"], "not a depthbench dataset"),
        ("report-out-over-report-name", ["report", D, "--out", "{fake_report}"], "is not a report depthbench made"),
        # ---- a spec is checked whole before any stage runs ----------------------------
        ("run-report-name-escapes", ["run", "{spec_report_escape}", "--out", "{out}"], "report.name"),
        ("run-budgets-one-id", ["run", "{spec_budget_ids}", "--out", "{out}"], "train.budgets"),
        ("run-schedule-spelled-twice", ["run", "{spec_schedule_twice}", "--out", "{out}"], "must not repeat"),
        ("run-set-seed", ["run", "{spec_set_seed}", "--out", "{out}"], "set.seed"),
        ("run-set-steps", ["run", "{spec_set_steps}", "--out", "{out}"], "set.steps"),
        ("run-gate-without-gate", ["run", "{spec_gate}", "--out", "{out}"], "exit gate"),
        ("run-report-out-not-empty", ["run", "{spec_report_full}", "--out", "{out}"], "the report directory"),
        ("run-no-reordered-split", ["run", "{spec_no_reordered}", "--out", "{out}"], "eval.splits"),
        # ---- files' shapes checked before use -----------------------------------------
        ("train-config-model-not-table", ["train", "--config", "{cfg_model_int}"], "model must be a table"),
        ("train-config-train-not-table", ["train", "--config", "{cfg_train_list}"], "train must be a table"),
        ("resume-log-step-string", ["train", "--config", "{run_log_step_str_job}"], "'step' must be an integer"),
        ("resume-log-no-step", ["train", "--config", "{run_log_no_step_job}"], "'step' must be an integer"),
        ("run-json-flop-model-edited", ["eval", "{run_flop_model}"], "'flop_model'"),
        ("report-a-run-directory", ["report", R, "--out", "{out}"], "is a training run: evaluate it first"),
        ("report-a-training-log", ["report", R + "/metrics.jsonl", "--out", "{out}"], "is a training run's log"),
        ("eval-a-text-file-as-run", ["eval", "{not_a_dir}", "--depths", "1"], "is not a checkpoint"),
        ("report-line-not-a-row", ["report", "{rows_list_line}", "--out", "{out}"], "line 2 is not a row"),
        ("report-schedule-not-a-spec", ["report", "{rows_bad_schedule}", "--out", "{out}"], "is not a schedule spec"),
        ("sim-profile-efficiency-zero", ["serve-sim", "--random", "tiny", "--profile", "{prof_eff0}"], "flops_efficiency"),
        ("sim-profile-peak-bool", ["serve-sim", "--random", "tiny", "--profile", "{prof_peak_bool}"], "not numbers"),
        ("serve-trace-names-other-requests", ["serve-bench", R, "--requests", "2", "--exit", "replay:{trace_other}"], "no depths for 2 of the 2 requests"),
        ("sim-trace-names-other-requests", ["serve-sim", "--random", "tiny", "--exit", "replay:{trace_other}"], "no depths for"),
        ("serve-trace-bool-depth", ["serve-bench", R, "--exit", "replay:{trace_bool}"], "lists of depths, integers in 1.."),
        # ---- unbounded work -----------------------------------------------------------
        ("flops-steps-huge", ["flops", "--preset", "tiny", "--schedule", "uniform:1-16", "--steps", "100000000"], "--steps"),
        # ---- a tag may not replace a measured or key column ----------------------------
        ("eval-tag-forges-bits", ["eval", "--config", "{eval_forged}", "--out", "{out}"], "tag 'bits_per_person' would replace"),
        ("eval-tag-forges-attr", ["eval", "--config", "{eval_attr_forged}", "--out", "{out}"], "tag 'bits/x' would replace"),
        ("eval-tag-not-scalar", ["eval", "--config", "{eval_tag_table}", "--out", "{out}"], "tags"),
        ("train-tag-relabels-schedule", ["train", "--config", "{train_forged}", "--results", "{out}"], "tag 'schedule' would replace"),
        ("serve-tag-names-key", ["serve-bench", "--config", "{serve_forged}", "--out", "{out}"], "tag 'mode' would replace"),
        # ---- outputs that could not be written, and options that would do nothing -------
        ("train-out-under-a-file", ["train", "--data", D, "--out", "{not_a_dir}/run", "--steps", "2"],
         "is a file, so nothing can be written under it"),
        ("eval-out-under-a-file", ["eval", R, "--depths", "1", "--out", "{not_a_dir}/rows"], "is a file, not a folder"),
        ("serve-out-under-a-file", ["serve-bench", "--random", "tiny", "--requests", "2", "--out", "{not_a_dir}/s"],
         "is a file, not a folder"),
        ("serve-trace-under-a-file", ["serve-bench", "--random", "tiny", "--requests", "2", "--save-trace",
                                      "{not_a_dir}/t.json"], "is a file, not a folder"),
        ("serve-modes-empty", ["serve-bench", R, "--modes", " , "], "names no mode"),
        ("sim-plot-without-sweep", ["serve-sim", "--random", "tiny", "--plot", "{out}.png"], "draws a sweep"),
        ("sim-plot-not-png", ["serve-sim", "--random", "tiny", "--means", "4", "--plot", "{out}.pdf"], "name a .png file"),
        ("sim-mean-zero", ["serve-sim", "--random", "tiny", "--means", "0"], "--means: must be in [1, max_depth=16]"),
        ("run-rerun-names-no-stage", ["run", "smoke", "--out", "{out}", "--rerun", "trian-*"], "names no stage"),
    ]


@pytest.mark.slow
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


DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md"


def render_doc() -> str:
    """docs/bad-inputs.md, generated from the cases above: ``python tests/cli/test_bad_inputs.py``."""
    lines = [
        "# The bad-input matrix",
        "",
        "Generated by `depthbench docs` (or `python tests/cli/test_bad_inputs.py`) from the cases that",
        "`tests/cli/test_bad_inputs.py` runs. Every case must exit with status 2 and one line on stderr",
        "(`depthbench: error: ...`) that contains the quoted text, with no traceback, no output",
        "directory left behind and the existing run untouched. `{data}` is a valid dataset, `{run}`",
        "a trained run, `{out}` a fresh path; the other names are broken copies made by the test:",
        "a dataset with a missing, emptied, truncated or tampered file, an edited or corrupt",
        "manifest; datasets edited and then *re-hashed* (every sha256, size and the dataset hash",
        "recomputed, so that only the schema check can catch them); run records, `latest`",
        "pointers and checkpoints of the wrong shape or type; specs with unknown keys, broken",
        "TOML, wrong element types or out-of-range values; result rows missing columns.",
        "",
        f"{len(cases())} cases:",
        "",
        "| case | command | the error line contains |",
        "|---|---|---|",
    ]
    for cid, argv, needle in cases():
        cmd = " ".join(["depthbench", *argv]).replace("|", "\\|")
        text = needle.replace("|", "\\|")
        lines.append(f"| {cid} | `{cmd}` | {text} |")
    lines += [
        "",
        "Beyond the listed cases, `tests/cli/test_fuzz_inputs.py` drives every command with random",
        "option values and random corruptions of a real dataset, run directory, checkpoint and",
        "spec (hypothesis, a bounded number of examples in CI) and asserts exit 0 or 2, one line",
        "and no traceback, no hang, and the originals untouched. A second writer on one run or",
        "experiment directory is refused with the holder's pid (`tests/pipeline/test_reliability.py`, two",
        "real processes).",
        "",
        "Further one-line refusals are tested next to each feature: refused generator configs",
        "(`tests/data/test_cli_generate.py`), training errors and NaN losses (`tests/train/test_train.py`),",
        "eval errors (`tests/evaluate/test_evaluate.py`), serving specs (`tests/serving/test_serving.py`), experiment",
        "specs (`tests/pipeline/test_pipeline.py`), lm-eval model arguments (`tests/evaluate/test_lm_eval.py`), write",
        "failures and crafted pickles (`tests/pipeline/test_reliability.py`).",
        "",
        "Further properties are tested where their inputs arise: `tests/report/test_report_inputs.py` (report",
        "rows), `tests/cli/test_rows_and_tags.py`, `tests/pipeline/test_outputs.py` (outputs over inputs),",
        "`tests/pipeline/test_grid_inputs.py` (specs and grids), `tests/train/test_run_inputs.py`,",
        "`tests/evaluate/test_lm_eval_inputs.py`, `tests/serving/test_serving_inputs.py`, `tests/models/test_loading_inputs.py`",
        "(model folders), `tests/benchmarks/test_benchmark_inputs.py` and `tests/report/test_docs_inputs.py`; corpora in",
        "`tests/data/test_text.py`, experiment specs in `tests/pipeline/test_pipeline.py`.",
        "",
        "Corpora, text runs, report rows, lm-eval and serving inputs:",
        "corpus documents identified by content (a file reached twice read once, exact duplicates",
        "dropped and counted, validation drawn from a document's digest, never sharing a document",
        "with training: a property test), a BOM dropped, lone surrogates, tokenizers that would drop",
        "text and validation splits shorter than one window refused, long documents cut; text",
        "manifests type-checked after their hash; probe-update and serve-bench on text runs; report",
        "rows that cannot be (negative NLL, exact match outside [0, 1], bits above the ceiling, a",
        "stage ending before it starts) and runs read at different depths or over different token",
        "counts refused; a grid's time is the time a stage ran; lm-eval task files of another",
        "dataset, a missing --include_path and --rows over a run or dataset refused before lm-eval",
        "runs; a corpus edited in place reruns its grid; an empty corpus list and an unknown",
        "lm-eval task refused before any stage; --max-new-tokens 1, a replay trace shorter than",
        "the workload, an all-zero fitted profile and training keys in serving's --set refused;",
        "benchmark scripts' bad arguments one line. Then: near copies (MinHash of word",
        "5-grams) and other Unicode forms of a document are one document; report counts must be",
        "whole, readings over no fact, unknown splits and true/false numbers are refused, and",
        "schedules sharing no seed are not compared; lm-eval's --output_path over the inputs and",
        "a task of the other dataset kind refused; an eval stage's key covers its task files; a",
        "serving mode named twice refused; --readme and --json-out checked before a benchmark",
        "runs. Then: an empty `train.lrs`, `lengths` or `budgets` (it read as no axis) and",
        "`train.set.lr` beside `train.lrs` refused; report rows with a negative seed, wall clock or",
        "CPU time, or a model of no parameters, refused in every kind of row; a row file cut in",
        "the middle of its last row and a row without its run or schedule refused; lm-eval's",
        "--metadata data that is not a path refused.",
        "",
        "Model folders, weights, outputs, reports and benchmark options (one test per property): a model folder read",
        "as it is or refused (RoPE scaling in `rope_parameters`, Huginn's embedding scale kept",
        "under `--from-weights`, a `--set` that would change the architecture of the weights it",
        "starts from, Dory configs naming the wrong field, a spec naming a file or written with",
        "spaces); NaN or infinite weights and configs far larger than their weights refused before",
        "anything is allocated; a dataset tokenized with other merges, and tokenizers whose ids",
        "exceed their size, refused; outputs replace only files depthbench wrote (rows, records,",
        "traces), and one writer of a dataset at a time; a built-in corpus name that is also a",
        "folder here is ambiguous (`./kjv` or `builtin:kjv`); reports refuse infinite readings,",
        "half-empty brackets, exit depths below 1, cloze items that do not index their choices or",
        "do not match the eval's count, a sweep beside a grid, one seed given twice and a run read",
        "before its end, and never table one seed as a spread or give identical seeds an interval;",
        "`eval` of a run that stopped early refused, `eval --model` rows reportable; the docs",
        "generator refuses in one line and writes nothing; spec axes that round to another value",
        "refused; serve rows carry the knobs that ran, a pool below the width and a rate whose",
        "arrivals would take more than an hour refused; benchmark scripts check every option",
        "before they run.",
    ]
    return "\n".join(lines) + "\n"


def test_the_documented_matrix_is_generated_from_the_cases():
    assert DOC.read_text() == render_doc(), "regenerate it: python tests/cli/test_bad_inputs.py"


if __name__ == "__main__":
    DOC.write_text(render_doc())
    print(f"wrote {DOC} ({len(cases())} cases)")
