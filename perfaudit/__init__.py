"""perfaudit: audit PyTorch training performance and get ranked, located, costed fixes."""

__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:
    """`%load_ext perfaudit` in IPython or Jupyter: the `%%perfaudit` cell magic (integrations/magics.py)."""
    from .integrations.magics import load_ipython_extension as load
    load(ipython)
