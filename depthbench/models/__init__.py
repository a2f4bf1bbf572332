"""Looped models behind one protocol (``LoopedModel``): depthbench's own ``LoopedTransformer``
(``looped``), ports of Ouro and Huginn that load their checkpoints, and transformers' looped
classes (``depthbench[hf]``). ``depthbench.load_model(SPEC)`` (``depthbench.loading``) names
any of them."""

from depthbench.models.config import MODEL_SPEC_HELP, ModelSpecError, parse_spec
from depthbench.models.protocol import LoopedMixin, LoopedModel, padding_mask

__all__ = ["MODEL_SPEC_HELP", "ModelSpecError", "parse_spec", "LoopedMixin", "LoopedModel",
           "padding_mask"]
