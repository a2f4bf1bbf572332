"""Every result row says where it came from: package version and commit, torch, accelerator, CPU
model and threads; rows copied into a report keep their own; questions (item rows) carry none."""

import json
import subprocess
from pathlib import Path

import pandas as pd
import torch

from depthbench.provenance import COLUMNS, provenance
from depthbench.rows import write_rows
from depthbench.version import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_rows_carry_their_provenance_and_copies_keep_it(tmp_path):
    row = {"run": "r", "schedule": "uniform:1-4", "seed": 0, "final_loss": 1.0,
           "modeled_train_flops": 1e9}
    csv, jsonl = write_rows([row], tmp_path / "run", "run")
    got = pd.read_csv(csv).iloc[0]
    want = provenance()
    assert got["depthbench_version"] == __version__ == want["depthbench_version"]
    assert got["torch_version"] == torch.__version__
    assert got["threads"] == torch.get_num_threads()
    assert json.loads(jsonl.read_text().splitlines()[0])["cpu_model"] == want["cpu_model"]
    old = {**row, **{c: "elsewhere" for c in COLUMNS}}
    csv, _ = write_rows([old], tmp_path / "copy", "run")
    assert (pd.read_csv(csv).iloc[0][list(COLUMNS)] == "elsewhere").all()
    item = {"dataset_hash": "h", "item": 0, "context": "c", "choices": "[]", "label": 0}
    csv, _ = write_rows([item], tmp_path / "items", "item")
    assert not set(COLUMNS) & set(pd.read_csv(csv).columns)


def test_the_commit_is_the_checkouts():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    commit = provenance()["git_commit"]
    if head.returncode or not (ROOT / ".git").exists():
        assert commit == ""
    else:
        assert commit.removesuffix("+dirty") == head.stdout.strip()
