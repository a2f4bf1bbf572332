"""Every example that the README's "pipeline by hand" block and each command's ``--help`` give
runs as written, in order, in a scratch directory. The examples are read from those texts, so
the example that changes is the one tested. Two things differ from a reader's run. The work is
shortened: ``train`` gets ``--steps 40`` and a narrow model, ``run`` gets ``--seeds 0 --set
train.steps=40`` (the tiny preset's 1500 steps take minutes a run; the checkpoint steps an
example names are scaled alike), and ``serve-bench``/``serve-sim`` serve 16 requests (a model
an example sets wide is 128 wide), a calibration two widths. And the few examples that need
what a CPU machine lacks (a GPU, a Slurm cluster, files of one's own) are listed in ``NEEDS``
with the reason; that list may name only examples that exist. The help examples run in three
chains (each reads only what its own earlier examples wrote), so that test workers share them."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from depthbench.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
STEPS, PRESET_STEPS = 40, 1500   # training shortened by this factor; the steps an example names alike
NARROW = ["--set", "d_model=16"]
# the order a reader takes the commands in (an example may read what an earlier one wrote)
ORDER = ["generate", "train", "flops", "export", "eval", "probe-update", "run", "report", "track",
         "serve-bench", "serve-sim", "prepare-text", "scale-report", "docs"]

# example -> why it cannot run on this machine as written
NEEDS = {
    "depthbench serve-bench --random huginn-like --exit trace:8 --device cuda": "a GPU",
    "depthbench run my_grid.toml --out /scratch/grid --executor slurm": "a Slurm cluster",
    "depthbench prepare-text corpus/*.jsonl.gz --out data/web --tokenizer tokenizer.json":
        "a corpus and a tokenizer of one's own",
    "depthbench eval --model ouro:ckpt/ouro --data data/ouro-text --out results/ouro":
        "an Ouro checkpoint with its tokenizer, and a corpus prepared with it",
}


def help_examples() -> list[tuple[str, str]]:
    """(command, example) of every command's --help, in the order the commands are listed."""
    out = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), path + [name])
            return
        text = CliRunner().invoke(main, path + ["--help"], terminal_width=200).output
        if "Examples:" not in text:
            return
        block = text.split("Examples:", 1)[1]
        lines, held = [], ""
        for line in block.splitlines():
            line = held + line.strip()
            held = ""
            if line.endswith("\\"):
                held = line[:-1]
                continue
            if not line:
                if lines:
                    break
                continue
            if line.startswith(("depthbench ", "torchrun ")):
                lines.append(line.split("  (")[0].strip())
        out.extend((" ".join(path), x) for x in lines)
    walk(main, [])
    return sorted(out, key=lambda cx: ORDER.index(cx[0]) if cx[0] in ORDER else len(ORDER))


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## The pipeline by hand", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    cmds = []
    for line in block.splitlines():
        line = line.split("  #")[0].strip()
        cmds += [c.strip() for c in line.split("&&") if c.strip()]
    return cmds


def _step(n: str) -> str:
    return str(int(n) * STEPS // PRESET_STEPS)


def shortened(args: list[str]) -> list[str]:
    """The example's arguments with its training shortened, and the checkpoint steps it names
    scaled alike (1200 of the preset's 1500 steps: 32 of 40); a serving example's workload
    shortened (16 requests, 8 new tokens of random prompts, a narrower model where it names a
    wide one); nothing else changes."""
    args = [re.sub(r"keep_steps=\[(\d+)\]", lambda m: f"keep_steps=[{_step(m.group(1))}]", a)
            for a in args]
    for flag in ("--step", "--checkpoint"):
        if flag in args:
            i = args.index(flag) + 1
            args[i] = _step(args[i])
    if args[0] == "train":
        sets = [] if any(a.startswith("d_model=") for a in args) else NARROW
        steps = [] if "--match-flops" in args else ["--steps", str(STEPS)]
        return args + steps + sets
    if args[0] in ("serve-bench", "serve-sim"):
        wide = any(a.startswith("d_model=") for a in args)   # an example's own wide model
        args = args + ["--requests", "16"] + (["--set", "d_model=128"] if wide else [])
        # random prompts generate 32 tokens unless told; 8 run every launch kind as often
        args += [] if "--max-new-tokens" in args or "--random" not in args else ["--max-new-tokens", "8"]
        return args + (["--calibrate-widths", "1,2"] if "--calibrate" in args else [])
    if args[0] == "run" and "--plan" not in args:
        return args + ["--seeds", "0", "--set", f"train.steps={STEPS}", "--set",
                       "train.set.d_model=16"]
    return args


def run_example(example: str, cwd: Path) -> tuple[int, str]:
    words = shlex.split(example)
    if words[0] == "torchrun":   # torch's launcher, as `python -m torch.distributed.run`
        at = words.index("depthbench")
        cmd = [sys.executable, "-m", "torch.distributed.run", *words[1:at + 1],
               *shortened(words[at + 1:])]
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        return r.returncode, r.stdout + r.stderr
    args = []
    for w in shortened(words[1:]):   # a shell's glob, relative to where the example runs
        args += sorted(str(Path(g).relative_to(cwd)) for g in cwd.glob(w)) if "*" in w else [w]
    old = Path.cwd()
    try:
        os.chdir(cwd)
        r = CliRunner().invoke(main, args)
    finally:
        os.chdir(old)
    return r.exit_code, r.output + (r.stderr if r.stderr_bytes else "")


@pytest.fixture
def scratch(tmp_path):
    d = tmp_path
    for which in ("person", "grid", "alone"):
        (d / which).mkdir()
        (d / which / "ckpt").symlink_to(d / "ckpt")
        (d / which / "reports").symlink_to(d / "reports")
    (d / "ckpt").mkdir()
    for name in ("ouro", "huginn"):
        (d / "ckpt" / name).symlink_to(ROOT / "tests" / "golden" / name)
    (d / "reports").mkdir()   # the committed reports the scale-report example reads, nothing more
    for name in ("text-scale-d16", "text-table3-deep-lr3e-3", "text-scale-d128"):
        (d / "reports" / name).symlink_to(ROOT / "reports" / name)
    return d


def test_the_needs_list_names_only_examples_that_exist():
    assert set(NEEDS) <= {x for _, x in help_examples()}


@pytest.mark.slow
def test_the_readme_pipeline_by_hand_runs_as_written(tmp_path):
    for example in readme_block():
        code, out = run_example(example, tmp_path)
        assert code == 0, f"{example}\n{out[-2000:]}"


def chain(command: str, example: str) -> str:
    """Which chain an example belongs to: the person task's commands on runs they trained, the
    grids (and what reads their output), or the commands that stand alone."""
    if command == "run" or "runs/quickstart" in example:
        return "grid"
    return "alone" if command in ("serve-sim", "prepare-text", "scale-report") else "person"


@pytest.mark.slow
@pytest.mark.parametrize("which", ["person", "grid", "alone"])
def test_every_help_example_runs_as_written(which, scratch):
    failed, ran = [], 0
    for command, example in help_examples():
        if example in NEEDS or chain(command, example) != which:
            continue
        code, out = run_example(example, scratch / which)
        ran += 1
        if code != 0:
            failed.append(f"{example}\n    {out.strip().splitlines()[-1] if out.strip() else ''}")
    assert ran >= 5 and not failed, "\n".join(failed)
