"""Looped models behind one protocol (``LoopedModel``): depthbench's own ``LoopedTransformer``,
ports of Ouro and Huginn that load their checkpoints, and transformers' looped classes
(``depthbench[hf]``). ``load_model(SPEC)`` names any of them."""

from depthbench.models.load import MODEL_SPEC_HELP, ModelSpecError, load_model, parse_spec
from depthbench.models.protocol import LoopedMixin, LoopedModel, padding_mask

__all__ = ["MODEL_SPEC_HELP", "ModelSpecError", "load_model", "parse_spec", "LoopedMixin",
           "LoopedModel", "padding_mask"]
