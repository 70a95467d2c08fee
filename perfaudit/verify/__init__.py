"""`perfaudit verify`: measure fixes before they are trusted (A/B step times, the loss kept)."""
from .ab import FixVerdict, Rounds, Variant, Verification, run_ab
from .stats import LossCheck, SpeedChange, loss_check, speed_change

__all__ = ["FixVerdict", "Rounds", "LossCheck", "SpeedChange", "Variant", "Verification", "loss_check", "run_ab", "speed_change"]
