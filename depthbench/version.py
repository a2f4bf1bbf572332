"""The package version (its own module, so that any floor can read it)."""

__version__ = "0.1.0"
