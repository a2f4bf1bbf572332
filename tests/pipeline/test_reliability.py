"""Reliability: SIGKILL at random moments then resume, write failures, safe loading, and
property-based tests of the parsers."""

import hashlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from depthbench import checkpoint as ckpt
from depthbench.checkpoint import CheckpointError, load_run
from depthbench.cli.main import main, parse_sets
from depthbench.errors import UserError
from depthbench.exits import ExitSpecError, parse_exit
from depthbench.runlog import metrics_rows
from depthbench.vocab import Vocab

TRAIN = ["train", "--schedule", "uniform:1-4", "--steps", "400", "--seed", "2", "--set",
         "d_model=32", "--set", "batch_size=16", "--set", "log_every=1", "--set", "ckpt_every=3",
         "--set", "warmup_steps=2"]


def _cli(*args):
    return [sys.executable, "-m", "depthbench", *args]


def _all_artifacts_readable(run: Path) -> None:
    for p in ckpt.list_checkpoints(run).values():
        ckpt.load(p)  # raises on a torn checkpoint
    latest = ckpt.latest(run)
    if latest is not None:
        ckpt.load(latest)
    metrics_rows(run)  # raises on a corrupt line (a torn last line is tolerated and dropped)


@pytest.mark.slow
def test_training_survives_ten_sigkills_and_ends_as_the_uninterrupted_run(small_data, tmp_path):
    ref = tmp_path / "ref"
    subprocess.run(_cli(*TRAIN, "--data", str(small_data), "--out", str(ref)), check=True,
                   capture_output=True)
    run = tmp_path / "run"
    rng = random.Random(0)
    kills = 0
    while kills < 10:
        done_before = len(metrics_rows(run)) if run.exists() else 0
        p = subprocess.Popen(_cli(*TRAIN, "--data", str(small_data), "--out", str(run), "--resume"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # once this attempt has made progress, kill it at a random moment: inside a step, a
        # metrics append or a checkpoint write
        deadline = time.time() + 60
        while p.poll() is None and time.time() < deadline:
            if run.exists() and len(metrics_rows(run)) > done_before:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.15))
        if p.poll() is not None:
            assert p.returncode == 0, p.stderr.read().decode()[-500:]
            break  # it finished before the kill: nothing left to interrupt
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        _all_artifacts_readable(run)
    assert kills >= 10, f"the run finished after only {kills} kills"
    r = subprocess.run(_cli(*TRAIN, "--data", str(small_data), "--out", str(run), "--resume"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [x["loss"] for x in metrics_rows(run)] == [x["loss"] for x in metrics_rows(ref)]
    a = ckpt.load(ckpt.latest(run))["model"]
    b = ckpt.load(ckpt.latest(ref))["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not list((run / "checkpoints").glob(".*.tmp-*"))


def test_a_full_disk_during_checkpointing_keeps_the_previous_checkpoint(small_data, tmp_path,
                                                                        monkeypatch):
    run = tmp_path / "run"
    args = [*TRAIN, "--data", str(small_data), "--out", str(run)]
    args[args.index("400")] = "9"
    real_save, calls = torch.save, []

    def disk_full_on_second_save(obj, f, *a, **k):
        calls.append(1)
        real_save(obj, f, *a, **k)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full_on_second_save)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "No space left" in r.stderr and "intact" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert ckpt.latest(run).name == ckpt.ckpt_name(3)
    assert ckpt.load(ckpt.latest(run))["step"] == 3
    assert not list((run / "checkpoints").glob(".*.tmp-*"))


def test_a_read_only_result_directory_gives_one_line(trained_run, tmp_path, monkeypatch):
    import depthbench.fsio as c

    def read_only(*a, **k):
        raise OSError(30, "Read-only file system", str(tmp_path / "res.csv"))

    monkeypatch.setattr(c, "atomic_write_text", read_only)
    monkeypatch.setattr("depthbench.rows.atomic_write_many", read_only)
    monkeypatch.setattr("depthbench.evaluate.sweep.atomic_write_many", read_only)   # eval's rows
    r = CliRunner().invoke(main, ["eval", str(trained_run), "--depths", "1", "--out",
                                  str(tmp_path / "res")])
    assert r.exit_code == 2 and "Read-only file system" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "res.csv").exists()


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def _sign(path):
    """A checksum beside a hand-made checkpoint, so that the checks behind it are the ones tried."""
    ckpt.checksum_path(path).write_text(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  "
                                        f"{path.name}\n")
    return path


def test_a_crafted_pickle_is_refused_and_never_runs(trained_run, tmp_path):
    _Payload.marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as f:
        pickle.dump({"format": 1, "model": _Payload()}, f)
    _sign(evil)
    with pytest.raises(CheckpointError, match="not a readable depthbench checkpoint"):
        load_run(evil)
    torch.save({"format": 1, "model": _Payload()}, tmp_path / "evil2.pt")
    _sign(tmp_path / "evil2.pt")
    with pytest.raises(CheckpointError):
        load_run(tmp_path / "evil2.pt")
    assert not _Payload.marker.exists()
    r = CliRunner().invoke(main, ["eval", str(evil), "--data", "x"])
    assert r.exit_code == 2 and not _Payload.marker.exists()


def test_truncated_checkpoint_is_refused(trained_run, tmp_path):
    src = ckpt.latest(trained_run)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    _sign(cut)
    with pytest.raises(CheckpointError, match="truncated"):
        load_run(cut)


# ---- property-based tests of the parsers ------------------------------------------------------------
@given(st.text(max_size=40), st.integers(1, 4), st.integers(4, 20))
def test_exit_specs_parse_or_are_refused_cleanly(text, lo, hi):
    try:
        c = parse_exit(text, lo, hi)
    except ExitSpecError:
        return
    assert c.min_depth == lo and c.max_depth == hi


@given(st.sampled_from(["latent", "kl", "entropy"]), st.floats(1e-6, 10, allow_nan=False))
def test_threshold_exit_specs_round_trip(kind, tau):
    c = parse_exit(f"{kind}:{tau!r}", 1, 16)
    assert c.kind == kind and c.value == tau


@given(st.lists(st.tuples(st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                          st.one_of(st.integers(-10**6, 10**6), st.booleans(),
                                    st.from_regex(r"[a-z]{1,8}", fullmatch=True))),
                max_size=5))
def test_set_overrides_parse_to_typed_values(pairs):
    d = dict(pairs)
    text = tuple(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in d.items())
    assert parse_sets(text) == d


@given(st.text(max_size=20))
def test_malformed_set_overrides_are_refused(text):
    if "=" in text and text.partition("=")[0].strip():
        return
    with pytest.raises(UserError):
        parse_sets((text,))


TOKENS = ["<pad>", "<bos>", "<eos>", "[a]", "[b]", "N0", "N1", "V0", "V1", "V2"]


@given(st.lists(st.integers(0, len(TOKENS) - 1), max_size=30))
def test_vocab_text_form_round_trips(ids):
    v = Vocab(TOKENS)
    assert v.encode(v.decode(ids)) == ids


@settings(max_examples=50)
@given(st.text(max_size=20))
def test_vocab_rejects_unknown_tokens_with_a_user_error(text):
    v = Vocab(TOKENS)
    try:
        ids = v.encode(text)
    except UserError:
        return
    assert v.decode(ids) == " ".join(text.split())


@pytest.mark.slow
def test_depthbench_run_killed_between_and_inside_stages_finishes_with_the_same_results(tmp_path):
    from test_pipeline import SMALL
    spec = tmp_path / "spec.toml"
    spec.write_text(SMALL.replace('matched_uniform = "fixed-first:0.5:2:1-4"\n', ""))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}

    def run(out, **kw):
        return subprocess.Popen(_cli("run", str(spec), "--out", str(out)), cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)

    ref = run(tmp_path / "ref")
    assert ref.wait() == 0, ref.stderr.read().decode()[-500:]
    out, rng, kills = tmp_path / "exp", random.Random(1), 0
    for _ in range(4):
        p = run(out)
        time.sleep(rng.uniform(2.0, 5.0))  # past start-up: inside training, eval or serving
        if p.poll() is not None:
            break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        for r in (out / "runs").glob("*") if (out / "runs").exists() else []:
            _all_artifacts_readable(r)
    assert kills >= 2
    p = run(out)
    assert p.wait() == 0, p.stderr.read().decode()[-800:]
    for f in sorted((tmp_path / "ref" / "results" / "eval").glob("*.jsonl")):
        a = [json.loads(x) for x in f.read_text().splitlines()]
        b = [json.loads(x) for x in (out / "results" / "eval" / f.name).read_text().splitlines()]
        for x, y in zip(a, b, strict=True):
            for k in ("nll", "value_nll", "exact_match", "bits_per_person", "step", "depth"):
                assert x[k] == y[k], (f.name, k)


def test_a_run_killed_while_writing_its_record_resumes(small_data, tmp_path):
    """A kill between the temporary write of run.json and its rename leaves the run directory
    with that temporary alone (a grid killed at that moment hit this on resume): --resume
    starts the run, and the result equals a run trained into a fresh directory."""
    killed, fresh = tmp_path / "killed", tmp_path / "fresh"
    killed.mkdir()
    (killed / ".db-tmp-4242-0a1b2c3d").write_text('{"version": "0.1')   # cut mid-write
    args = [*TRAIN[:TRAIN.index("--steps") + 1], "12", *TRAIN[TRAIN.index("--steps") + 2:]]
    r = CliRunner().invoke(main, [*args, "--data", str(small_data), "--out", str(killed),
                                  "--resume"])
    assert r.exit_code == 0, r.output
    assert not list(killed.glob(".db-tmp-*"))
    r = CliRunner().invoke(main, [*args, "--data", str(small_data), "--out", str(fresh)])
    assert r.exit_code == 0, r.output
    loss = [[json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(x)] for d in (killed, fresh)]
    assert loss[0] == loss[1] and len(loss[0]) == 12


def _wait_for_lock(d: Path, proc, timeout=60.0) -> int:
    """The pid written into DIR/.lock once ``proc`` holds it."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        f = d / ".lock"
        if f.is_file() and f.read_text().strip():
            return int(f.read_text())
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError("the first writer never took the lock")


@pytest.mark.slow
def test_a_second_train_into_one_run_directory_is_refused(small_data, tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen(_cli(*TRAIN, "--data", str(small_data), "--out", str(run)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        pid = _wait_for_lock(run, first)
        assert pid == first.pid
        second = subprocess.run(_cli(*TRAIN, "--data", str(small_data), "--out", str(run),
                                     "--resume"), capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "another" in lines[0]
    finally:
        first.kill()
        first.wait()
    # the kernel dropped the dead holder's lock: the run resumes and finishes as usual
    done = subprocess.run(_cli(*TRAIN, "--data", str(small_data), "--out", str(run), "--resume"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    steps = [r["step"] for r in metrics_rows(run) if "loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == 400  # no interleaved or repeated rows


def test_a_second_run_of_one_experiment_is_refused(tmp_path):
    from depthbench.fsio import DirLock
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "x"\n[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n')
    out = tmp_path / "exp"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from depthbench.fsio import DirLock\n"
        f"with DirLock({str(out)!r}):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = subprocess.run(_cli("run", str(spec), "--out", str(out)), capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 2 and f"pid {holder.pid}" in r.stderr, r.stderr
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing was written
    finally:
        holder.kill()
        holder.wait()
    with DirLock(out) as lock:  # and a dead holder leaves no stale lock
        assert (out / ".lock").read_text().strip() == str(os.getpid()) and lock.fd is not None


def test_a_full_disk_before_the_first_checkpoint_leaves_no_run_directory(small_data, tmp_path,
                                                                         monkeypatch):
    def torch_disk_full(obj, f, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter "
                           "failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", torch_disk_full)
    args = [*TRAIN, "--data", str(small_data), "--out", str(tmp_path / "run")]
    args[args.index("400")] = "4"
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "cannot write a checkpoint" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_sigterm_during_generate_leaves_no_temporary_directory(tmp_path):
    p = subprocess.Popen(_cli("generate", "--out", str(tmp_path / "big"), "--set",
                              "n_people=3000000", "--set", "name_pool=256", "--set", "exposure=1"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not list(tmp_path.glob(".db-tmp-*")) and time.time() - t0 < 60:
        time.sleep(0.05)
    assert list(tmp_path.glob(".db-tmp-*")), "generation never started"
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode != 0
    assert list(tmp_path.iterdir()) == []


def test_a_failing_report_leaves_the_previous_report_intact(tmp_path, monkeypatch):
    import pandas as pd

    from depthbench.report import build as report
    rows = tmp_path / "rows"
    rows.mkdir()
    pd.DataFrame([{"mode": "static", "tokens_per_s": 10.0, "speedup": 1.0, "ceiling": 2.0}]).to_csv(
        rows / "serve.csv", index=False)
    out = tmp_path / "rep"
    report.build_report([rows], out)
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "atomic_write_text", full_disk)
    with pytest.raises(OSError):
        report.build_report([rows], out)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
