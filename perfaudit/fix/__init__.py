"""Automatic fixes: the edits `perfaudit fix` makes to the user's source (and `perfaudit verify`
serves to an A/B run without touching the files)."""
from .catalog import FIX_KINDS, FixKind
from .plan import Change, FileFix, FixPlan, NotFixed, plan_fixes

__all__ = ["FIX_KINDS", "Change", "FileFix", "FixKind", "FixPlan", "NotFixed", "plan_fixes"]
