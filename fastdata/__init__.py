"""fastdata: make PyTorch image training never wait for data."""

__version__ = "0.1.0"
