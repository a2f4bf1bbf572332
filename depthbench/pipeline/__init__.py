"""``depthbench run``: an experiment spec (``spec``) planned into stages (``stages``, with the
step counts of ``steps``) and run as a resumable grid (``run``: ``run_grid`` takes a ``config.RunConfig``)."""

from depthbench.pipeline.run import Pipeline, run_grid
from depthbench.pipeline.spec import load_spec

__all__ = ["Pipeline", "load_spec", "run_grid"]
