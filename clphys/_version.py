"""The version of clphys: pyproject.toml reads it from here (setuptools' dynamic
version), and checkpoints record it."""

__version__ = "0.1.0"
