"""Property-based boundary tests: every command with random option values, and random
corruptions of a real dataset, run directory, checkpoint and spec.

Whatever the input, a command exits 0 or 2; on 2 it prints one line and no traceback and
leaves no output; it never hangs; the original dataset and run are never touched; and an
exit 0 on corrupted inputs gives exactly the results of the intact inputs (the corruption did
not matter), never changed or empty results. ``DEPTHBENCH_FUZZ_EXAMPLES`` sets the number of
examples per test (CI: the default); examples are derandomized so CI is repeatable, unless
``DEPTHBENCH_FUZZ_RANDOM=1``.
"""

import hashlib
import json
import os
import shutil
import signal
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthbench.cli.main import main
from depthbench.data_gen import dataset_hash

EXAMPLES = int(os.environ.get("DEPTHBENCH_FUZZ_EXAMPLES", "30"))
# DEPTHBENCH_FUZZ_RANDOM=1 draws fresh examples (a wider search) instead of CI's repeatable ones
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize=not os.environ.get("DEPTHBENCH_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TIMEOUT_S = 120


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@contextmanager
def _deadline(seconds: int):
    def hang(signum, frame):
        raise TimeoutError(f"the command ran past {seconds}s (a hang)")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _invoke(argv: list[str]):
    with _deadline(TIMEOUT_S):
        return CliRunner().invoke(main, argv)


def _check_outcome(r, argv, out_dir: Path, before: set):
    assert r.exit_code in (0, 2), (argv, r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    if r.exit_code == 2:
        assert isinstance(r.exception, SystemExit), (argv, r.exception)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("depthbench: error:"), (argv, r.stderr)
        assert set(out_dir.iterdir()) == before, (argv, "partial output left behind")


@pytest.fixture(scope="module")
def originals(small_data, trained_run):
    return {"data": _tree_digest(small_data), "run": _tree_digest(trained_run)}


@pytest.fixture(scope="module")
def baseline(small_data, trained_run, tmp_path_factory):
    """The eval rows of the intact dataset and run: what an exit 0 must reproduce."""
    out = tmp_path_factory.mktemp("baseline") / "rows"
    r = CliRunner().invoke(main, ["eval", str(trained_run), "--data", str(small_data),
                                  "--depths", "1-2", "--max-people", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return _rows(out)


def _rows(base: Path) -> pd.DataFrame:
    df = pd.read_json(base.with_name(base.name + ".jsonl"), lines=True)
    keep = ["depth", "split", "nll", "value_nll", "exact_match", "bits_per_person"]
    return df[keep].sort_values(["split", "depth"]).reset_index(drop=True)


# ---- random option values ------------------------------------------------------------------------
INTS = st.one_of(st.integers(-3, 4).map(str), st.sampled_from(
    ["0", "-1", "1e3", "nan", "inf", "abc", "", "99999999999999999999", "1.5", "0x10"]))
FLOATS = st.sampled_from(["0", "1", "0.5", "nan", "inf", "-inf", "-1", "1e400", "x", ""])
DEPTHS = st.sampled_from(["1-2", "1,2", "2", "0", "2-1", "1-x", "", "1-1025", "1--2", ",", "-"])
SCHEDULES = st.sampled_from(
    ["fixed:2", "uniform:1-3", "fixed-first:0.5:2:1-3", "curriculum:1-3:0.5",
     "poisson-lognormal:mean=2,max=3", "fixed:0", "uniform:3-1", "cyclic:4", "fixed", "",
     "uniform:1-99999999999999999999", "poisson-lognormal:mean=nan,max=3",
     "fixed-first:nan:2:1-3", "fixed-first:1.5:2:1-3", "uniform:1-2:3"])
EXITS = st.sampled_from(["fixed:2", "latent:0.1", "kl:0.1", "entropy:0.5", "argmax:2",
                         "latent:-3", "latent:nan", "kl:inf", "gate:0.5", "trace:2", "trace:nan",
                         "replay:/nonexistent.json", "bogus", "fixed:0", "argmax:0", ""])
SET_KEYS = st.sampled_from(["d_model", "n_heads", "n_core", "rope", "compile", "lr", "steps",
                            "batch_size", "warmup_steps", "grad_clip", "injection", "norm",
                            "qk_norm", "init_std", "eval_depths", "device", "threads",
                            "model.lr", "train.d_model", "nonsense", ""])
SET_VALUES = st.sampled_from(["true", "False", "no", "0", "-1", "2", "16", "nan", "1e9",
                              '"x"', "[1]", "[]", "{}", "pre", "sandwich", "concat", "cpu",
                              "cuda", "0.5", ""])


@st.composite
def command(draw, paths):
    kind = draw(st.sampled_from(["eval", "train", "serve", "flops", "generate", "probe",
                                 "report", "run"]))
    D, R, O = paths["data"], paths["run"], paths["out"]
    sets = sum((["--set", f"{draw(SET_KEYS)}={draw(SET_VALUES)}"]
                for _ in range(draw(st.integers(0, 2)))), [])
    if kind == "eval":
        return ["eval", R, "--depths", draw(DEPTHS), "--batch-size", draw(INTS),
                "--max-people", draw(INTS), "--out", O]
    if kind == "train":
        return ["train", "--data", D, "--out", O, "--schedule", draw(SCHEDULES), "--steps",
                draw(st.sampled_from(["1", "2", "0", "-5", "x", "nan"])), "--seed", draw(INTS),
                "--set", "d_model=16", "--set", "batch_size=8", *sets]
    if kind == "serve":
        return ["serve-bench", R, "--exit", draw(EXITS), "--width", draw(INTS), "--requests",
                draw(INTS), "--max-depth", draw(INTS), "--min-depth", draw(INTS), "--rate",
                draw(FLOATS), "--max-new-tokens", draw(st.sampled_from(["1", "2", "0", "-1"])),
                "--kv-policy", draw(st.sampled_from(["depth_indexed", "single",
                                                     "first_then_shared", "paged", ""])),
                "--modes", draw(st.sampled_from(["static,cdb", "batch1", "cdb,x", ""])),
                "--out", O]
    if kind == "flops":
        return ["flops", "--preset", draw(st.sampled_from(["tiny", "small", "huge", ""])),
                "--schedule", draw(SCHEDULES), "--steps", draw(INTS)]
    if kind == "generate":
        key = draw(st.sampled_from(["n_people", "name_pool", "value_pool", "orders_per_person",
                                    "n_unseen_people", "attributes", "seed", "name_tokens"]))
        val = draw(st.sampled_from(["2", "0", "-1", "true", "nan", '"7"', "a:4,b:3", "a:1",
                                    "1e20", "[]", "x:y"]))
        return ["generate", "--out", O, "--set", "exposure=1", "--set", "n_people=8",
                "--set", "n_unseen_people=2", "--set", "name_pool=8", "--set", f"{key}={val}",
                "--seed", draw(INTS)]
    if kind == "probe":
        return ["probe-update", R, "--batches", draw(INTS), "--max-people", draw(INTS),
                "--depths-a", draw(INTS), "--depths-b", draw(INTS), "--depths", draw(DEPTHS),
                "--out", O]
    if kind == "report":
        return ["report", paths["rows"], "--out", O, "--reference",
                draw(st.sampled_from(["uniform:1-4", "fixed:9", "x"]))]
    spec = draw(spec_text())
    Path(paths["spec"]).write_text(spec)
    return ["run", paths["spec"], "--out", O, "--plan"]


@st.composite
def spec_text(draw):
    values = st.sampled_from(['"fixed:2"', '["fixed:2"]', '[["fixed:2"]]', "[{a = 1}]", "0",
                              "-1", "nan", "true", '"x"', "[0, 1]", "[]", "{}", "1e9",
                              '["uniform:1-99999999999999999999"]', "[0.5, 1.0]", "[1.5]"])
    sections = {"train": ["schedules", "seeds", "steps", "budgets", "budget_schedule", "preset",
                          "matched_uniform", "set"],
                "eval": ["depths", "splits", "batch_size", "switch_checkpoints"],
                "probe": ["enabled", "depth_a", "batches", "people"],
                "serve": ["enabled", "width", "requests", "max_depth", "exit", "modes"],
                "data": ["preset", "seed", "set"], "run": ["workers"], "bogus": ["x"]}
    name = draw(st.sampled_from(['"fz"', '"a b"', "3"]))
    lines = [f"name = {name}"]
    for sec in draw(st.lists(st.sampled_from(sorted(sections)), max_size=3, unique=True)):
        lines.append(f"[{sec}]")
        for key in draw(st.lists(st.sampled_from(sections[sec]), max_size=3, unique=True)):
            lines.append(f"{key} = {draw(values)}")
    return "\n".join(lines) + "\n"


@FUZZ
@given(data=st.data())
def test_random_options_exit_0_or_2_with_one_line(small_data, trained_run, originals, tmp_path,
                                                  data):
    work = Path(tempfile.mkdtemp(dir=os.path.realpath(tmp_path)))
    rows = work / "rows"
    rows.mkdir()
    pd.DataFrame([{"run": "r", "schedule": "uniform:1-4", "seed": 0, "step": 1, "depth": 1,
                   "split": "eval_reordered", "nll": 1.0, "bits_per_person": 1.0,
                   "exact_match": 0.1, "ceiling_bits": 9.0, "modeled_train_flops": 1.0}]).to_csv(
        rows / "eval.csv", index=False)
    paths = {"data": str(small_data), "run": str(trained_run), "out": str(work / "out"),
             "rows": str(rows), "spec": str(work / "spec.toml")}
    argv = data.draw(command(paths))
    before = set(work.iterdir())
    r = _invoke(argv)
    _check_outcome(r, argv, work, before)
    if r.exit_code == 0 and argv[0] in ("eval", "serve-bench", "report", "generate", "train"):
        made = [p for p in work.iterdir() if p.name.startswith("out")]
        assert made and all(p.stat().st_size > 0 for p in made if p.is_file()), argv
    assert _tree_digest(small_data) == originals["data"]
    assert _tree_digest(trained_run) == originals["run"]


# ---- random corruptions ------------------------------------------------------------------------------
JSON_VALUES = st.sampled_from([None, 0, -1, 1.5, float("nan"), "1", "", "x", [], {}, [1, "a"],
                               True, 10**30, "../../etc/passwd"])


def _corrupt(f: Path, op: str, draw) -> None:
    raw = f.read_bytes() if f.is_file() else b""
    if op == "truncate":
        f.write_bytes(raw[:draw(st.integers(0, max(0, len(raw) - 1)))])
    elif op == "flip":
        b = bytearray(raw or b"\0")
        b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
        f.write_bytes(bytes(b))
    elif op == "garbage":
        f.write_bytes(draw(st.binary(min_size=0, max_size=64)))
    elif op == "delete":
        f.unlink()
    elif op == "directory":
        f.unlink()
        f.mkdir()
    elif op in ("json", "json-rehash"):
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(obj, dict) and obj:
            key = draw(st.sampled_from(sorted(obj)))
            if isinstance(obj[key], dict) and obj[key] and draw(st.booleans()):
                obj[key][draw(st.sampled_from(sorted(obj[key])))] = draw(JSON_VALUES)
            else:
                obj[key] = draw(JSON_VALUES)
        if op == "json-rehash" and f.name == "manifest.json" and isinstance(obj, dict):
            # a manifest edited past re-hashing (no file table) keeps its stale hash
            with suppress(KeyError, TypeError, AttributeError, ValueError):
                obj["dataset_hash"] = dataset_hash(obj)
        f.write_text(json.dumps(obj))


@FUZZ
@given(data=st.data())
def test_random_corruptions_never_pass_silently(small_data, trained_run, originals, baseline,
                                                tmp_path, data):
    work = Path(tempfile.mkdtemp(dir=os.path.realpath(tmp_path)))
    ds, run = work / "ds", work / "run"
    shutil.copytree(small_data, ds)
    shutil.copytree(trained_run, run)
    rec = json.loads((run / "run.json").read_text())
    rec["data"] = str(ds)
    (run / "run.json").write_text(json.dumps(rec))
    targets = sorted(p for p in ds.iterdir()) + [run / "run.json", run / "metrics.jsonl",
                                                 run / "checkpoints" / "latest"] \
        + sorted((run / "checkpoints").glob("step_*"))
    target = data.draw(st.sampled_from(targets))
    op = data.draw(st.sampled_from(["truncate", "flip", "garbage", "delete", "directory",
                                    "json", "json-rehash"]))
    _corrupt(target, op, data.draw)
    out = work / "rows"
    argv = data.draw(st.sampled_from([
        ["eval", str(run), "--depths", "1-2", "--max-people", "4", "--out", str(out)],
        ["eval", str(run / "checkpoints" / "step_0000400.pt"), "--data", str(ds), "--depths",
         "1-2", "--max-people", "4", "--out", str(out)],
    ]))
    before = set(work.iterdir())
    r = _invoke(argv)
    _check_outcome(r, argv, work, before)
    if r.exit_code == 0:
        # the corruption did not matter: the results are exactly those of the intact inputs
        pd.testing.assert_frame_equal(_rows(out), baseline)
    assert _tree_digest(small_data) == originals["data"]
    assert _tree_digest(trained_run) == originals["run"]
