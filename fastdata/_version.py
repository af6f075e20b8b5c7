"""The package's version, on the bottom floor so that every room may import it (``fastdata.__version__``)."""

__version__ = "0.2.0"
