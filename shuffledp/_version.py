"""The version of shuffledp: its one source (pyproject.toml reads it, ``shuffledp --version``
prints it)."""

__version__ = "0.1.0"
