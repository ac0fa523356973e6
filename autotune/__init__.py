"""autotune: auto-tuned gradient communication for data-parallel PyTorch."""

__version__ = "0.1.0"
