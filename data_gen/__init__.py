"""Generator of the synthetic fictional-person knowledge dataset (numpy only)."""

from data_gen.config import PRESETS, Attribute, GenConfig, resolve_config
from data_gen.generate import FORMAT_VERSION, SPLITS, build_vocab, dataset_hash, generate

__all__ = ["PRESETS", "Attribute", "GenConfig", "resolve_config", "FORMAT_VERSION", "SPLITS",
           "build_vocab", "dataset_hash", "generate"]
