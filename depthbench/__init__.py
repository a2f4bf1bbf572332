"""depthbench: benchmarks for looped (recurrent-depth) transformers."""

import importlib.util
import sys
from pathlib import Path

from depthbench.version import __version__  # noqa: F401


def _checkout_data_gen() -> None:
    """The dataset generator lives at the repository's top level (``data_gen/``, numpy only) and
    installs as ``depthbench.data_gen``, a name that cannot collide in a researcher's
    environment. Imported from a checkout (the package beside a pyproject.toml), it is the
    checkout's own data_gen, loaded under that name, whether the checkout is installed
    (editable) or only on the path (``PYTHONPATH=.``): so imports read the same either way, and
    another install of depthbench on the path never lends its generator to this one."""
    name = f"{__name__}.data_gen"
    root = Path(__file__).resolve().parent.parent
    init = root / "data_gen" / "__init__.py"
    if name in sys.modules or not (init.is_file() and (root / "pyproject.toml").is_file()):
        return   # installed from a wheel: depthbench/data_gen is a plain subpackage
    spec = importlib.util.spec_from_file_location(name, init,
                                                  submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_checkout_data_gen()


def __getattr__(name: str):
    """``depthbench.load_model`` is ``depthbench.loading.load_model`` (a looped model behind the
    protocol from ``ouro:DIR``, ``huginn:DIR``, ``hf:DIR``, ``depthbench:DIR`` or a run;
    ``model(idx, n_loops=k)`` gives (B, T, V) logits), imported on first use so that importing
    depthbench does not import torch."""
    if name == "load_model":
        from depthbench.loading import load_model
        return load_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
