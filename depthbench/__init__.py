"""depthbench: benchmarks for looped (recurrent-depth) transformers."""

from depthbench.version import __version__  # noqa: F401


def load_model(spec: str, device="cpu", dtype=None):
    """A looped model behind depthbench's protocol: ``ouro:DIR``, ``huginn:DIR``, ``hf:DIR`` or a
    depthbench run; ``model(idx, n_loops=k)`` gives (B, T, V) logits. See ``depthbench.models``."""
    from depthbench.models.load import load_model as _load
    return _load(spec, device=device, dtype=dtype)
