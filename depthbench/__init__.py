"""depthbench: benchmarks for looped (recurrent-depth) transformers."""

__version__ = "0.1.0"
