"""`perfaudit verify`: measure fixes before they are trusted (A/B step times, the loss kept).

The names load on first use: a report reads `verify.stats` for its unprofiled steps, and importing the A/B
runner with it would pull libcst (the fixer's parser) into every `run` and `analyze` (0.3 s)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ab import FixVerdict, Rounds, Variant, Verification, run_ab
    from .stats import LossCheck, SpeedChange, loss_check, speed_change

_WHERE = {"FixVerdict": "ab", "Rounds": "ab", "Variant": "ab", "Verification": "ab", "run_ab": "ab",
          "LossCheck": "stats", "SpeedChange": "stats", "loss_check": "stats", "speed_change": "stats"}

__all__ = ["FixVerdict", "LossCheck", "Rounds", "SpeedChange", "Variant", "Verification", "loss_check", "run_ab",
           "speed_change"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
