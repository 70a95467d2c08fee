"""perfaudit: audit PyTorch training performance and get ranked, located, costed fixes."""

__version__ = "0.1.0"
