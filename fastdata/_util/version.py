"""The package's version, on the bottom floor so that every room may import it (``fastdata.__version__``).

The one place the number is written: pyproject.toml reads it from here.
"""

__version__ = "0.2.0"
