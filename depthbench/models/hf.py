"""transformers' own looped classes behind depthbench's protocol (``depthbench[hf]``), starting
with ``DoryForCausalLM`` (transformers >= 5.24): a thin wrapper, not a port.

The wrapper gives the evaluators what they call, ``model(idx, n_loops=k, attention_mask=...)``
and ``readouts(idx, depths)``, by running the transformers forward with the loop count set for
that call (``config.n_recurrent_loops``, restored after). ``readouts`` runs one forward per depth
(transformers' forward reads out only its last loop), so a sweep costs sum(depths) loops, not
max(depths). The serving engine needs the stage methods over depthbench's KV store, which the
wrapper does not have: serve a port or a depthbench run instead.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from depthbench.config import LoopShape
from depthbench.models.config import ModelSpecError, read_config
from depthbench.models.protocol import matmul_params

SUPPORTED = ("dory",)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ModelSpecError("hf:DIR needs transformers >= 5.24: pip install 'depthbench[hf]'") from None
    if not hasattr(transformers, "DoryForCausalLM"):
        raise ModelSpecError(f"hf:DIR needs transformers >= 5.24 (DoryForCausalLM); this is "
                             f"{transformers.__version__}: pip install -U 'depthbench[hf]'")
    return transformers


class HFLooped(nn.Module):
    kind = "hf"
    serves = False   # no stage methods over depthbench's KV store

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model
        c = hf_model.config
        self.default_depth = c.n_recurrent_loops
        layers = list(hf_model.model.layers)
        a, b = c.n_input_layers, c.n_input_layers + c.n_recurrent_layers
        self.shape = LoopShape(
            vocab_size=c.vocab_size, d_model=c.hidden_size, n_heads=c.num_attention_heads,
            n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim, n_prelude=a,
            n_core=c.n_recurrent_layers, n_coda=len(layers) - b,
            max_seq_len=c.max_position_embeddings, exit_gate=False,
            prelude_params=matmul_params(layers[:a]), core_params=matmul_params(layers[a:b]),
            coda_params=matmul_params(layers[b:]), head_params=matmul_params([hf_model.lm_head]))

    def forward(self, idx: torch.Tensor, n_loops: int, attention_mask=None) -> torch.Tensor:
        if not (isinstance(n_loops, int) and n_loops >= 1):
            raise ValueError(f"n_loops must be an integer >= 1 (got {n_loops!r})")
        c = self.hf.config
        old, c.n_recurrent_loops = c.n_recurrent_loops, n_loops
        try:
            out = self.hf(input_ids=idx, attention_mask=attention_mask, use_cache=False)
        finally:
            c.n_recurrent_loops = old
        return out.logits

    def readouts(self, idx: torch.Tensor, depths, attention_mask=None):
        for k in sorted(set(depths)):
            yield k, self.forward(idx, k, attention_mask)


def dory_fields(raw: dict, path: Path, defaults) -> None:
    """The fields a Dory config.json holds (or leaves at ``defaults``, DoryConfig's), each of its
    type and range, and layer counts that add up, said in one line naming the field
    (transformers' own messages do not)."""
    from depthbench.models.config import Fields
    F = Fields(raw, path)
    for key in ("hidden_size", "vocab_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "head_dim", "num_hidden_layers",
                "max_position_embeddings", "n_recurrent_loops"):
        F.int(key, getattr(defaults, key))
    total, n_in, n_out = (F.int("num_hidden_layers", defaults.num_hidden_layers),
                          F.int("n_input_layers", defaults.n_input_layers, lo=0),
                          F.int("n_output_layers", defaults.n_output_layers, lo=0))
    rec = raw.get("n_recurrent_layers")
    if rec is None:
        if total - n_in - n_out < 1:
            raise F.bad("num_hidden_layers", f"leaves no recurrent layer ({total} layers, "
                        f"{n_in} input and {n_out} output)")
    elif F.int("n_recurrent_layers") + n_in + n_out != total:
        raise F.bad("n_recurrent_layers", f"with {n_in} input and {n_out} output layers must sum "
                    f"to num_hidden_layers={total} (got {rec})")


def build_hf(path: Path, config=None):
    """The wrapped class of ``path``'s config.json, untrained."""
    tf = _transformers()
    raw = read_config(path) if config is None else None
    mt = raw.get("model_type") if raw is not None else config.model_type
    if mt not in SUPPORTED:
        raise ModelSpecError(f"{path}/config.json has model_type {mt!r}; hf: wraps "
                             f"{', '.join(SUPPORTED)} (ouro and huginn_raven load as ouro:DIR and "
                             "huginn:DIR)")
    if config is None:
        dory_fields(raw, path, tf.DoryConfig)
        try:
            config = tf.AutoConfig.from_pretrained(str(path))
        except Exception as e:  # transformers' own validation errors
            raise ModelSpecError(f"{path}/config.json: {str(e).splitlines()[0][:160]}") from None
    config._attn_implementation = "sdpa"
    return HFLooped(tf.DoryForCausalLM(config))


def load_hf(path: Path) -> HFLooped:
    """The wrapped model of a checkpoint folder, loaded by transformers (its own key mapping
    from the checkpoint's names) and refused unless every tensor matched: transformers' loading
    report must name no missing, unexpected or mismatched key."""
    from depthbench.models.config import few_names, read_weights
    tf = _transformers()
    build_hf(path)   # model_type and config checked, one line where they are wrong
    read_weights(path)   # present and readable safetensors, or one line
    try:
        hf, info = tf.DoryForCausalLM.from_pretrained(str(path), output_loading_info=True,
                                                      attn_implementation="sdpa",
                                                      dtype=torch.float32)
    except Exception as e:  # transformers' own errors: one line
        raise ModelSpecError(f"{path}: transformers could not load it "
                             f"({(str(e).strip().splitlines() or [type(e).__name__])[0][:160]})") from None
    for what, keys in (("lacks", info.get("missing_keys")), ("holds unexpected", info.get("unexpected_keys")),
                       ("has mis-shaped", info.get("mismatched_keys"))):
        keys = [k if isinstance(k, str) else k[0] for k in (keys or [])]
        if keys:
            raise ModelSpecError(f"{path}: the checkpoint {what} tensor(s) {few_names(keys)} "
                                 f"({len(keys)} in all); config.json and the weights differ")
    from depthbench.models.config import check_finite
    check_finite(hf.named_parameters(), path)
    return HFLooped(hf)


def tiny_dory(seed: int = 0) -> HFLooped:
    """A tiny random Dory (1 input, 2 recurrent, 1 output layer; GQA; sliding-window layers) for
    tests, built offline."""
    tf = _transformers()
    cfg = tf.DoryConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                        n_input_layers=1, n_recurrent_layers=2, n_output_layers=1,
                        n_recurrent_loops=3, sliding_window=16, max_position_embeddings=64,
                        initializer_range=0.05)
    torch.manual_seed(seed)
    model = build_hf(Path("<tiny dory>"), cfg).eval()
    model.source = "hf:tiny-dory"
    return model
