"""msmon: a launcher and monitor for MindSpore Transformers training runs."""

__version__ = "0.1.0"
