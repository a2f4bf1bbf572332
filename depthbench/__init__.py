"""depthbench: benchmarks for looped (recurrent-depth) transformers."""

import importlib.util
import sys
from pathlib import Path

from depthbench.version import __version__  # noqa: F401


def _checkout_data_gen() -> None:
    """The dataset generator lives at the repository's top level (``data_gen/``, numpy only) and
    installs as ``depthbench.data_gen``, a name that cannot collide in a researcher's
    environment. In a checkout used without installing it (``PYTHONPATH=.``), load it under that
    name from beside the package, so that imports read the same either way."""
    name = f"{__name__}.data_gen"
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    init = Path(__file__).resolve().parent.parent / "data_gen" / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[str(init.parent)])
    if spec is None or not init.is_file():
        return   # neither installed nor a checkout: the import that needs it says so
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_checkout_data_gen()


def load_model(spec: str, device="cpu", dtype=None):
    """A looped model behind depthbench's protocol: ``ouro:DIR``, ``huginn:DIR``, ``hf:DIR`` or a
    depthbench run; ``model(idx, n_loops=k)`` gives (B, T, V) logits. See ``depthbench.models``."""
    from depthbench.models.load import load_model as _load
    return _load(spec, device=device, dtype=dtype)
