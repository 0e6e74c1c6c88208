"""The version of the tessera Python package: the one place it is written
(pyproject.toml reads it from here; tessera.__version__ is this)."""

__version__ = "0.1.0"
