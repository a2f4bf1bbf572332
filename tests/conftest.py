"""Shared fixtures: one small dataset and one briefly trained looped model for the session.

Every test process runs torch on one thread, and so does every command a test starts in a
subprocess (``OMP_NUM_THREADS``, unless the caller set it): ``pytest -n 2`` runs two workers on
two cores, and a subprocess on torch's default of all cores beside the other worker would
oversubscribe them."""

import os

import pytest
import torch

from depthbench.config import ModelConfig, TrainConfig
from depthbench.data.generate import generate
from depthbench.data_gen import Attribute, GenConfig
from depthbench.train.loop import train

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("shared") / "ds"
    generate(GenConfig(n_people=64, n_unseen_people=32, name_pool=8, value_pool=16, seed=11,
                       attributes=(Attribute(name="a", n_values=50), Attribute(name="b", n_values=30),
                                   Attribute(name="c", n_values=16, value_tokens=1))), d)
    return d


@pytest.fixture(scope="session")
def trained_run(small_data, tmp_path_factory):
    """uniform:1-4 for 400 steps (about 10 s): it recalls several bits per person of the
    trained people and about none of the unseen ones."""
    run = tmp_path_factory.mktemp("runs") / "uniform"
    train(small_data, run, ModelConfig(d_model=64, n_heads=4, injection="add"),
          TrainConfig(steps=400, batch_size=32, lr=3e-3, warmup_steps=20, ckpt_every=0,
                      keep_steps=(200,), seed=0),
          "uniform:1-4", progress=False, log=lambda *a: None)
    return run
