"""Generator of the synthetic fictional-person knowledge dataset (numpy only; nothing of
depthbench). ``format`` is the dataset format's home; ``depthbench.data.generate`` writes a
dataset into place."""

from .config import PRESETS, Attribute, GenConfig, resolve_config
from .format import FORMAT_VERSION, SPLITS, build_vocab, dataset_hash
from .generate import generate_into

__all__ = ["PRESETS", "Attribute", "GenConfig", "resolve_config", "FORMAT_VERSION", "SPLITS",
           "build_vocab", "dataset_hash", "generate_into"]
