"""Generator of the synthetic fictional-person knowledge dataset (numpy only; nothing of
depthbench). ``format`` is the dataset format's home; ``depthbench.data.generate`` writes a
dataset into place."""

from data_gen.config import PRESETS, Attribute, GenConfig, resolve_config
from data_gen.format import FORMAT_VERSION, SPLITS, build_vocab, dataset_hash
from data_gen.generate import generate_into

__all__ = ["PRESETS", "Attribute", "GenConfig", "resolve_config", "FORMAT_VERSION", "SPLITS",
           "build_vocab", "dataset_hash", "generate_into"]
